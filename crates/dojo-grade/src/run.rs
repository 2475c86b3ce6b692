//! The grading flow inside a sandbox, as the harness runs it in its container: apply the model
//! patch (the harness's fallback chain, via [`Sandbox::apply_patch`]), restore the test files
//! the test patch touches, apply the test patch, run the test command, parse, report.

use std::time::Duration;

use dojo_sandbox::{ExecRequest, OutputCap, Sandbox};
use dojo_task::{RepoEnv, Task, patch_targets};

use crate::GradeError;
use crate::grading::{
    APPLY_PATCH_FAIL, APPLY_PATCH_PASS, END_TEST_OUTPUT, EvalType, GoldLists, START_TEST_OUTPUT,
    Semantics, derive_lists, eval_tests_report, logs_eval, read_log_text,
};
use crate::parsers::{Parser, StatusMap};
use crate::report::{ErrorKind, InstanceReport, Outcome};

/// How to grade.
#[derive(Debug, Clone)]
pub struct GradeOptions {
    pub semantics: Semantics,
    /// Overrides the environment's `timeout_s`.
    pub timeout: Option<Duration>,
    /// Grade even an empty model patch (runs the test patch alone; `dojo validate` uses it).
    /// Off by default: the harness does not run empty patches.
    pub run_empty_patch: bool,
    /// Also compute FAIL_TO_FAIL / PASS_TO_FAIL (SWE-rebench lists).
    pub calculate_to_fail: bool,
    /// Head and tail bytes of test output kept (pytest's summary is at the end).
    pub output_cap: OutputCap,
}

impl Default for GradeOptions {
    fn default() -> Self {
        GradeOptions {
            semantics: Semantics::Classic,
            timeout: None,
            run_empty_patch: false,
            calculate_to_fail: false,
            output_cap: OutputCap {
                head: 8 << 20,
                tail: 24 << 20,
            },
        }
    }
}

/// Problems that make a patch ungradable before anything runs: binary hunks and paths that
/// leave the repository. Returns the reason.
pub fn check_patch(patch: &str) -> Option<String> {
    if patch.contains("GIT binary patch") || patch.lines().any(|l| l.starts_with("Binary files ")) {
        return Some("binary patch (binary hunks cannot be graded)".into());
    }
    for line in patch.lines() {
        let paths: Vec<&str> = if let Some(rest) = line.strip_prefix("diff --git ") {
            rest.split(' ').collect()
        } else if let Some(p) = line
            .strip_prefix("--- ")
            .or_else(|| line.strip_prefix("+++ "))
        {
            vec![p.split('\t').next().unwrap_or(p)]
        } else if let Some(p) = ["rename from ", "rename to ", "copy from ", "copy to "]
            .iter()
            .find_map(|k| line.strip_prefix(k))
        {
            vec![p]
        } else {
            continue;
        };
        for p in paths {
            let p = p.trim().trim_matches('"');
            if p == "/dev/null" {
                continue;
            }
            let rel = p
                .strip_prefix("a/")
                .or_else(|| p.strip_prefix("b/"))
                .unwrap_or(p);
            if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
                return Some(format!("patch path {p:?} leaves the repository"));
            }
        }
    }
    None
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Script restoring every file the test patch touches to its pristine state (modified files
/// checked out from the pristine commit, files it creates removed), so a model cannot pre-empt
/// the tests. The harness does the checkout part (`git checkout <base> <files>`); removing new
/// files is ours, so a model that created the same test file does not make the test patch fail.
fn restore_test_files_script(test_patch: &str) -> Option<String> {
    let files = patch_targets(test_patch);
    if files.is_empty() {
        return None;
    }
    let base = dojo_sandbox::pristine::BASE_TAG;
    let mut s = String::from("set -u\ncd /testbed\n");
    for f in files {
        let q = shell_quote(&f);
        s.push_str(&format!(
            "if git cat-file -e {base}:{q} 2>/dev/null; then git checkout -q {base} -- {q}; else rm -f -- {q}; fi\n"
        ));
    }
    Some(s)
}

fn sandbox_err(r: InstanceReport, step: &str, e: impl std::fmt::Display) -> InstanceReport {
    r.fail(ErrorKind::Runner, format!("{step}: {e}"))
}

/// Grade `model_patch` for `task` in a fresh sandbox over the task's pristine tree.
///
/// Infrastructure failures come back as `Ok` reports with [`Outcome::Error`] and an
/// infrastructure [`ErrorKind`] (never as "unresolved"); `Err` only for configuration problems
/// (an unknown log parser or eval type).
pub async fn grade_in_sandbox(
    sb: &Sandbox,
    task: &Task,
    env: &RepoEnv,
    model_patch: Option<&str>,
    opts: &GradeOptions,
) -> Result<InstanceReport, GradeError> {
    let parser = Parser::by_name(&env.log_parser).ok_or_else(|| GradeError::UnknownParser {
        instance_id: task.instance_id.clone(),
        name: env.log_parser.clone(),
    })?;
    let eval_type = EvalType::by_name(&env.eval_type).ok_or_else(|| GradeError::BadEvalType {
        instance_id: task.instance_id.clone(),
        name: env.eval_type.clone(),
    })?;
    let mut r = InstanceReport::new(&task.instance_id, opts.semantics, &env.log_parser);
    let mut log = String::new();

    let patch = model_patch.filter(|p| !p.trim().is_empty());
    match (patch, opts.run_empty_patch) {
        (None, false) => {
            r.patch_is_none = model_patch.is_none();
            r.outcome = Outcome::EmptyPatch;
            return Ok(r);
        }
        (None, true) => {
            r.patch_exists = model_patch.is_some();
            log.push_str("(no model patch: test patch only)\n");
        }
        (Some(p), _) => {
            r.patch_exists = true;
            if let Some(reason) = check_patch(p) {
                r.test_output = format!("{APPLY_PATCH_FAIL}:\n{reason}\n");
                return Ok(r.fail(ErrorKind::BadPatch, reason));
            }
            let out = match sb.apply_patch(p).await {
                Ok(o) => o,
                Err(dojo_sandbox::SandboxError::PathEscape(path)) => {
                    let reason = format!("patch path {path:?} leaves the repository");
                    return Ok(r.fail(ErrorKind::BadPatch, reason));
                }
                Err(e) => return Ok(sandbox_err(r, "applying the model patch", e)),
            };
            if !out.applied() {
                r.test_output = format!("{APPLY_PATCH_FAIL}:\n{}\n", out.log);
                return Ok(r.fail(
                    ErrorKind::PatchApply,
                    format!("model patch does not apply:\n{}", out.log),
                ));
            }
            r.patch_apply_method = out.method.map(|m| {
                serde_json::to_value(m)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            });
            log.push_str(&format!(
                "{APPLY_PATCH_PASS} (model patch, {}):\n{}\n",
                r.patch_apply_method.as_deref().unwrap_or("?"),
                out.log
            ));
        }
    }

    // Restore the test files, then apply the test patch.
    if let Some(script) = restore_test_files_script(&task.test_patch) {
        match sb
            .exec(&ExecRequest::shell(script).timeout(Duration::from_secs(120)))
            .await
        {
            Ok(o) if o.success() => {}
            Ok(o) => {
                return Ok(sandbox_err(
                    r,
                    "restoring test files",
                    format!("{} {}", o.stdout_lossy(), o.stderr_lossy()),
                ));
            }
            Err(e) => return Ok(sandbox_err(r, "restoring test files", e)),
        }
    }
    if !task.test_patch.trim().is_empty() {
        match sb.apply_patch(&task.test_patch).await {
            Ok(o) if o.applied() => log.push_str(&format!("{APPLY_PATCH_PASS} (test patch)\n")),
            Ok(o) => {
                r.test_output = log;
                return Ok(r.fail(
                    ErrorKind::TestPatchApply,
                    format!("the task's test patch does not apply:\n{}", o.log),
                ));
            }
            Err(e) => return Ok(sandbox_err(r, "applying the test patch", e)),
        }
    }

    // Run the tests, stdout and stderr merged as in the harness's container log.
    let cmd = env.test_command(task);
    let timeout = opts.timeout.unwrap_or(Duration::from_secs(env.timeout_s));
    let mut req = ExecRequest::shell(format!("exec 2>&1\n{cmd}"))
        .timeout(timeout)
        .cwd(dojo_sandbox::WORKSPACE);
    req.env = env.env.clone();
    req.output_cap = opts.output_cap;
    let out = match sb.exec(&req).await {
        Ok(o) => o,
        Err(e) => return Ok(sandbox_err(r, "running the tests", e)),
    };
    let mut text = out.stdout.clone();
    text.extend_from_slice(&out.stderr);
    let body = String::from_utf8_lossy(&text);
    log.push_str(&format!("+ {cmd}\n+ : '{START_TEST_OUTPUT}'\n{body}"));
    if !body.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(&format!("+ : '{END_TEST_OUTPUT}'\n"));
    r.test_exit_code = out.exit_code;
    r.test_duration_s = Some(out.duration.as_secs_f64());
    r.test_output_truncated = out.stdout_truncated || out.stderr_truncated;
    if out.timed_out {
        log.push_str(&format!(
            "\n\nTimeout error: {} seconds exceeded.\n",
            timeout.as_secs()
        ));
        r.test_output = log;
        return Ok(r.fail(
            ErrorKind::Timeout,
            format!("test command timed out after {} s", timeout.as_secs()),
        ));
    }
    match out.exit_code {
        Some(c) => log.push_str(&format!(">>>>> Test Exit Code: {c}\n")),
        None => log.push_str(&format!(
            ">>>>> Test Exit Code: {}\n",
            128 + out.signal.unwrap_or(0)
        )),
    }

    // Parse exactly as a harness log would be read back from disk.
    let (sm, found) = logs_eval(&read_log_text(log.as_bytes()), parser, opts.semantics);
    r.test_output = log;
    if !found {
        r.outcome = Outcome::Unresolved;
        r.error = Some("no valid test output (no results and no sign the suite ran)".into());
        return Ok(r);
    }
    r.patch_successfully_applied = true;
    let gold = GoldLists {
        fail_to_pass: task.f2p(),
        pass_to_pass: task.p2p(),
        fail_to_fail: &task.fail_to_fail,
        pass_to_fail: &task.pass_to_fail,
    };
    r.set_tests_status(eval_tests_report(
        &sm,
        &gold,
        opts.calculate_to_fail,
        eval_type,
        opts.semantics,
    ));
    Ok(r)
}

/// The parsed status map of a graded run (re-parsed from its log).
pub fn status_map_of(report: &InstanceReport, parser: Parser) -> StatusMap {
    logs_eval(
        &read_log_text(report.test_output.as_bytes()),
        parser,
        report.semantics,
    )
    .0
}

/// What `dojo validate` learns about one task.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Validation {
    pub instance_id: String,
    /// Runnable: every FAIL_TO_PASS fails with the test patch alone, and the gold patch resolves.
    pub ok: bool,
    pub problems: Vec<String>,
    /// Lists derived from the two runs (what `--write` stores).
    pub derived_fail_to_pass: Vec<String>,
    pub derived_pass_to_pass: Vec<String>,
    #[serde(skip)]
    pub before: Option<InstanceReport>,
    #[serde(skip)]
    pub gold: Option<InstanceReport>,
}

/// Run the test patch alone, reset, run with the gold patch; check the task's lists (if it has
/// any) and derive new ones.
pub async fn validate_in_sandbox(
    sb: &mut Sandbox,
    task: &Task,
    env: &RepoEnv,
    opts: &GradeOptions,
) -> Result<Validation, GradeError> {
    let parser = Parser::by_name(&env.log_parser).ok_or_else(|| GradeError::UnknownParser {
        instance_id: task.instance_id.clone(),
        name: env.log_parser.clone(),
    })?;
    let mut v = Validation {
        instance_id: task.instance_id.clone(),
        ok: false,
        problems: Vec::new(),
        derived_fail_to_pass: Vec::new(),
        derived_pass_to_pass: Vec::new(),
        before: None,
        gold: None,
    };
    let before_opts = GradeOptions {
        run_empty_patch: true,
        ..opts.clone()
    };
    let before = grade_in_sandbox(sb, task, env, None, &before_opts).await?;
    if let Err(e) = sb.reset().await {
        v.problems.push(format!("sandbox reset failed: {e}"));
        v.before = Some(before);
        return Ok(v);
    }
    let gold = grade_in_sandbox(sb, task, env, Some(&task.patch), opts).await?;
    for (name, r) in [("test patch only", &before), ("gold patch", &gold)] {
        if r.outcome == Outcome::Error {
            v.problems.push(format!(
                "{name}: {} ({})",
                r.error.as_deref().unwrap_or("error"),
                r.error_kind.map_or("?", |k| k.as_str())
            ));
        }
    }
    if v.problems.is_empty() {
        let sm_before = status_map_of(&before, parser);
        let sm_gold = status_map_of(&gold, parser);
        let (f2p, p2p) = derive_lists(&sm_before, &sm_gold);
        if f2p.is_empty() {
            v.problems
                .push("no test fails before the gold patch and passes after it".into());
        }
        if task.fail_to_pass.is_some() {
            let still_passing: Vec<&String> = before
                .tests_status
                .as_ref()
                .map(|t| t.fail_to_pass.success.iter().collect())
                .unwrap_or_default();
            if !still_passing.is_empty() {
                v.problems.push(format!(
                    "FAIL_TO_PASS already passing with the test patch alone: {still_passing:?}"
                ));
            }
            if let Some(ts) = &gold.tests_status {
                if !ts.fail_to_pass.failure.is_empty() {
                    v.problems.push(format!(
                        "FAIL_TO_PASS not passing with the gold patch: {:?}",
                        ts.fail_to_pass.failure
                    ));
                }
                if !ts.pass_to_pass.failure.is_empty() {
                    v.problems.push(format!(
                        "PASS_TO_PASS broken with the gold patch: {:?}",
                        ts.pass_to_pass.failure
                    ));
                }
            }
            if task.f2p().is_empty() {
                v.problems.push("FAIL_TO_PASS is empty".into());
            }
        }
        v.derived_fail_to_pass = f2p;
        v.derived_pass_to_pass = p2p;
    }
    v.ok = v.problems.is_empty();
    v.before = Some(before);
    v.gold = Some(gold);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_patches_are_named() {
        assert!(
            check_patch("diff --git a/x.png b/x.png\nGIT binary patch\nliteral 5\n")
                .unwrap()
                .contains("binary")
        );
        assert!(check_patch("diff --git a/../etc/passwd b/../etc/passwd\n--- a/../etc/passwd\n+++ b/../etc/passwd\n")
            .unwrap()
            .contains("leaves"));
        assert!(check_patch("--- /etc/passwd\n+++ /etc/passwd\n").is_some());
        assert!(
            check_patch("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n")
                .is_none()
        );
        assert!(check_patch("--- /dev/null\n+++ b/new.py\n").is_none());
    }

    #[test]
    fn restore_script_quotes_paths() {
        let s = restore_test_files_script("diff --git a/t/it's.py b/t/it's.py\n").unwrap();
        assert!(s.contains(r"'t/it'\''s.py'"), "{s}");
        assert!(restore_test_files_script("").is_none());
    }
}
