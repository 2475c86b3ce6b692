//! Test runs of a synthesis, through the grader (the harness's apply chain and log parsers):
//! the whole suite or some files, with a mutant's patch applied, and what a failed run means
//! for the mutant (a timeout, a full sandbox disk, an infrastructure error).

use std::time::Duration;

use dojo_grade::parsers::StatusMap;
use dojo_grade::{ErrorKind, GradeOptions, Parser, grade_once, status_map_of};
use dojo_sandbox::Sandbox;
use dojo_task::{RepoEnv, Task};

/// A test run's parsed result.
pub(crate) struct Run {
    pub(crate) sm: StatusMap,
    pub(crate) log: String,
    pub(crate) duration_s: f64,
}

pub(crate) enum RunError {
    Timeout,
    Infra(String),
    /// The sandbox's writable space ran out (`ENOSPC`). The sandbox caps it
    /// ([`dojo_sandbox::Limits::workspace_bytes`]), so a mutant that makes the suite write
    /// without bound fills its own tmpfs, never the host's disk; its failing tests say nothing
    /// about the bug, so it never becomes a task.
    DiskFull(String),
}

/// Whether a test log or an error says the sandbox's disk is full (`ENOSPC` as Python, the
/// shell, git and the sandbox report it).
pub(crate) fn says_disk_full(text: &str) -> bool {
    text.contains("No space left on device") || text.contains("[Errno 28]")
}

/// The file a test id names ([`dojo_patch::id_file`]); the id itself for other styles.
pub(crate) fn test_file(id: &str) -> &str {
    dojo_patch::id_file(id).unwrap_or(id)
}

/// Run the tests (`files`, or the whole suite) with `patch` applied, through the grader.
pub(crate) async fn run_tests(
    sb: &Sandbox,
    task: &Task,
    env: &RepoEnv,
    files: &[String],
    patch: Option<&str>,
    timeout: Duration,
) -> Result<Run, RunError> {
    let mut env = env.clone();
    if !files.is_empty() {
        let args: Vec<String> = files.iter().map(|f| dojo_patch::shell_word(f)).collect();
        env.test_cmd = format!("{} {}", env.test_cmd, args.join(" "));
    }
    let opts = GradeOptions {
        timeout: Some(timeout),
        run_empty_patch: true,
        ..Default::default()
    };
    let r = grade_once(sb, task, &env, patch, &opts).await;
    if r.outcome == dojo_grade::Verdict::Error {
        let error = r.error.as_deref().unwrap_or("");
        return Err(match r.error_kind {
            Some(ErrorKind::Timeout) => RunError::Timeout,
            _ if says_disk_full(error) || says_disk_full(&r.test_output) => {
                RunError::DiskFull(error.to_string())
            }
            k => RunError::Infra(format!("{}: {error}", k.map_or("error", |k| k.as_str()))),
        });
    }
    if says_disk_full(&r.test_output) {
        let line = r
            .test_output
            .lines()
            .find(|l| says_disk_full(l))
            .unwrap_or_default();
        return Err(RunError::DiskFull(line.trim().to_string()));
    }
    let parser = Parser::from(env.log_parser);
    Ok(Run {
        sm: status_map_of(&r, parser),
        duration_s: r.test_duration_s.unwrap_or(0.0),
        log: r.test_output,
    })
}

pub(crate) fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
