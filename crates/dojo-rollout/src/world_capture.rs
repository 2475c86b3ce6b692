//! World-model training data from real rollouts: the SWT and SWR records of `world.jsonl`.
//!
//! [`CapturingWorkspace`] sits between the agent's tools and the sandbox. When a tool runs a
//! shell command that runs Python or tests ([`runs_python_or_tests`]), it first takes what
//! SWE-World's transition model would see (the files the command executes, now and at the base
//! commit, and the agent's patch at that moment), runs the command for real, and buffers the
//! context with the real stdout, stderr and exit code in the run's [`WorldWriter`]. Every other
//! operation passes straight through, and a capture that fails only loses that record: the
//! agent's command always runs exactly as it would without capture.
//!
//! After grading, [`swr_record`] builds the reward model's record (test command, test files as
//! graded, both patches, FAIL_TO_PASS / PASS_TO_PASS, the test report section of the log and the
//! real reward), and the runner writes the rollout's batch ([`WorldWriter::write_rollout`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dojo_agent::Workspace;
use dojo_grade::InstanceReport;
use dojo_grade::grading::{END_TEST_OUTPUT, START_TEST_OUTPUT};
use dojo_llm::BoxFuture;
use dojo_sandbox::{ExecOutput, ExecRequest, Sandbox, SandboxError, WORKSPACE};
use dojo_task::Task;

use crate::agent_runner::Prepared;
use dojo_world::record::{
    WorldBody, WorldRecord, WorldWriter, clip_chars, command_paths, test_report_section,
};
use dojo_world::{FileView, SwrContext, SwrTarget, SwtContext, SwtTarget, runs_python_or_tests};

/// Set to `0`, `off` or `false` to turn capture off for a run (it is on by default).
pub const WORLD_RECORDS_VAR: &str = "DOJO_WORLD_RECORDS";

/// Whether `dojo rollout` captures world records (see [`WORLD_RECORDS_VAR`]).
pub fn capture_enabled() -> bool {
    !matches!(
        std::env::var(WORLD_RECORDS_VAR).as_deref().map(str::trim),
        Ok("0" | "off" | "false" | "no")
    )
}

/// Lists the files a command executes: named files, and the `.py` files under named
/// directories, that exist in the workspace; one line each, sorted within a directory.
const LIST_SCRIPT: &str = r#"for p in "$@"; do
  if [ -d "$p" ]; then find "$p" -type f -name '*.py' -not -path '*/.*' | LC_ALL=C sort
  elif [ -f "$p" ]; then printf '%s\n' "$p"
  fi
done"#;

/// The agent's workspace with SWT capture (see the module documentation).
pub struct CapturingWorkspace<'a> {
    inner: &'a Sandbox,
    writer: &'a WorldWriter,
    task: &'a Task,
    sample_index: u32,
    /// The base commit's tree on the host (base versions of files).
    pristine: PathBuf,
    seq: AtomicU32,
}

impl<'a> CapturingWorkspace<'a> {
    pub fn new(
        inner: &'a Sandbox,
        writer: &'a WorldWriter,
        task: &'a Task,
        sample_index: u32,
        pristine: &Path,
    ) -> Self {
        CapturingWorkspace {
            inner,
            writer,
            task,
            sample_index,
            pristine: pristine.to_path_buf(),
            seq: AtomicU32::new(0),
        }
    }

    /// The files `command` executes and the agent's patch, before it runs. `None` when the
    /// workspace could not be read (the record is skipped).
    async fn before(&self, command: &str) -> Option<(Vec<FileView>, String)> {
        let limits = self.writer.limits();
        let patch = self.inner.diff().await.ok()?;
        let candidates = command_paths(command);
        let mut files = Vec::new();
        if !candidates.is_empty() {
            let mut argv = vec![
                "bash".to_string(),
                "-c".to_string(),
                LIST_SCRIPT.to_string(),
                "list".to_string(),
            ];
            argv.extend(candidates);
            let req = ExecRequest::new(argv)
                .cwd(WORKSPACE)
                .timeout(Duration::from_secs(30));
            let out = self.inner.exec(&req).await.ok()?;
            for path in out.stdout_lossy().lines().take(limits.max_files) {
                let path = path.trim_start_matches("./");
                let current = self
                    .inner
                    .read_file(path)
                    .await
                    .ok()
                    .map(|b| clip_chars(&String::from_utf8_lossy(&b), limits.max_file_chars).0);
                files.push(FileView {
                    path: path.to_string(),
                    base: base_version(&self.pristine, path, limits.max_file_chars),
                    current,
                });
            }
        }
        Some((files, patch))
    }

    fn record(&self, command: &str, files: Vec<FileView>, patch: String, out: &ExecOutput) {
        let limits = self.writer.limits();
        let (stdout, cut_out) = clip_chars(&out.stdout_lossy(), limits.max_output_chars);
        let (stderr, cut_err) = clip_chars(&out.stderr_lossy(), limits.max_output_chars);
        let exit_code = match (out.exit_code, out.signal) {
            (Some(c), _) => c,
            // The shell's convention for a process killed by a signal.
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        };
        let incomplete = out.timed_out
            || out.stdout_truncated
            || out.stderr_truncated
            || cut_out
            || cut_err
            || (out.exit_code.is_none() && out.signal.is_none());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let context = SwtContext {
            task_id: self.task.instance_id.clone(),
            problem_statement: self.task.problem_statement.clone(),
            command: command.to_string(),
            executed_files: files,
            agent_patch: patch,
            gold_patch: gold(self.task),
            analysis: None,
        };
        let target = SwtTarget {
            stdout,
            stderr,
            exit_code,
        };
        self.writer.push_pending(WorldRecord::new(
            &self.task.instance_id,
            self.sample_index,
            WorldBody::Swt {
                seq,
                context,
                target,
                incomplete,
            },
        ));
    }
}

/// The shell script of a `bash -c SCRIPT` request (how `execute_bash` runs commands).
fn shell_command(req: &ExecRequest) -> Option<&str> {
    match req.argv.as_slice() {
        [bash, c, script] if bash == "bash" && c == "-c" => Some(script),
        _ => None,
    }
}

fn base_version(pristine: &Path, rel: &str, max_chars: usize) -> Option<String> {
    let bytes = std::fs::read(pristine.join(rel)).ok()?;
    Some(clip_chars(&String::from_utf8_lossy(&bytes), max_chars).0)
}

fn gold(task: &Task) -> Option<String> {
    (!task.patch.trim().is_empty()).then(|| task.patch.clone())
}

impl Workspace for CapturingWorkspace<'_> {
    fn exec<'b>(&'b self, req: &'b ExecRequest) -> BoxFuture<'b, Result<ExecOutput, SandboxError>> {
        Box::pin(async move {
            let Some(command) = shell_command(req).filter(|c| runs_python_or_tests(c)) else {
                return self.inner.exec(req).await;
            };
            let before = self.before(command).await;
            let out = self.inner.exec(req).await?;
            match before {
                Some((files, patch)) => self.record(command, files, patch, &out),
                None => tracing::warn!(
                    task = %self.task.instance_id,
                    "world capture: could not read the workspace before {command:?}; record skipped"
                ),
            }
            Ok(out)
        })
    }
    fn read_file<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Vec<u8>, SandboxError>> {
        Workspace::read_file(self.inner, path)
    }
    fn write_file<'b>(
        &'b self,
        path: &'b str,
        data: &'b [u8],
    ) -> BoxFuture<'b, Result<(), SandboxError>> {
        Workspace::write_file(self.inner, path, data)
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Workspace::diff(self.inner)
    }
    fn sandbox(&self) -> Option<&Sandbox> {
        Some(self.inner)
    }
}

/// The SWR record of a graded rollout, read from the sandbox right after grading (the test files
/// as graded: test patch and agent patch applied). `None` when the grade is not a real verdict
/// to learn from: an empty patch (SWR is not asked), an infrastructure failure, or a log without
/// a complete test output section (timed out).
pub async fn swr_record(
    sb: &Sandbox,
    prepared: &Prepared,
    sample_index: u32,
    patch: &str,
    report: &InstanceReport,
    writer: &WorldWriter,
) -> Option<WorldRecord> {
    let (task, pristine) = (&prepared.task, prepared.pristine.path.as_path());
    if patch.trim().is_empty() || report.infra_failure || !report.patch_successfully_applied {
        return None;
    }
    let test_report = test_report_section(&report.test_output, START_TEST_OUTPUT, END_TEST_OUTPUT)?;
    let max_chars = writer.limits().max_file_chars;
    let mut test_files = Vec::new();
    for path in dojo_grade::guard::task_test_files(task)
        .into_iter()
        .take(writer.limits().max_files)
    {
        let current = sb
            .read_file(&path)
            .await
            .ok()
            .map(|b| clip_chars(&String::from_utf8_lossy(&b), max_chars).0);
        test_files.push(FileView {
            base: base_version(pristine, &path, max_chars),
            path,
            current,
        });
    }
    let context = SwrContext {
        task_id: task.instance_id.clone(),
        problem_statement: task.problem_statement.clone(),
        test_command: prepared.repo_env.test_command(task),
        test_files,
        agent_patch: patch.to_string(),
        gold_patch: gold(task),
        fail_to_pass: task.f2p().to_vec(),
        pass_to_pass: task.p2p().to_vec(),
        analysis: None,
    };
    let target = SwrTarget {
        test_report,
        reward: u8::from(report.resolved),
    };
    Some(WorldRecord::new(
        &task.instance_id,
        sample_index,
        WorldBody::Swr { context, target },
    ))
}
