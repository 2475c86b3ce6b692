//! The grading flow inside a sandbox, as the harness runs it in its container: apply the model
//! patch (the harness's fallback chain), restore the test files the test patch touches, apply
//! the test patch, run the test command, parse, report.
//!
//! Stricter than the harness where a patch could fake its result (see [`crate::guard`]): a
//! patch touching conftest / pytest configuration / interpreter startup files is unresolved
//! without running, the task's test files are restored whenever the patch touched one, and a
//! non-zero test exit that no failing test explains is not trusted. A run that printed no
//! result at all is an infrastructure error ([`ErrorKind::NoTestOutput`]).
//!
//! Grading time should be the test command's time: the patches and the test command run as one
//! process in the sandbox (patches passed in its environment, see `run_script`), so the fixed
//! cost over the bare test command is git's own work (milliseconds), not five more sandbox
//! entries.

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::Duration;

use dojo_patch::Patch;
use dojo_sandbox::{ExecOutput, ExecRequest, OutputCap, Sandbox};
use dojo_task::{RepoEnv, Task};

use crate::diagnose::ids_summary;
use crate::grading::{
    APPLY_PATCH_FAIL, APPLY_PATCH_PASS, END_TEST_OUTPUT, GoldLists, START_TEST_OUTPUT, Semantics,
    derive_lists, eval_tests_report, logs_eval, parse_test_exit_code, read_log_text,
};
use crate::guard::{self, InfraKind, InfraTouch};
use crate::parsers::{ERROR, FAILED, Parser, StatusMap};
use crate::report::Validation;
use crate::report::{ErrorKind, InstanceReport, Verdict};
use crate::script::{
    PatchTransport, restorable_test_files, restore_test_files_lines, run_script, step_log,
};

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
    /// Grade a model patch that changes conftest / pytest configuration / interpreter startup
    /// files instead of rejecting it (see [`crate::guard`]); the touch is still recorded. Off
    /// by default: such a patch can fake its results.
    pub allow_test_infrastructure: bool,
    /// Load the test observer ([`crate::observer`]) into pytest runs and require it to have
    /// seen every test the log reports passed. On by default.
    pub observer: bool,
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
            allow_test_infrastructure: false,
            observer: true,
        }
    }
}

fn sandbox_err(r: InstanceReport, step: &str, e: impl std::fmt::Display) -> InstanceReport {
    r.fail(ErrorKind::Runner, format!("{step}: {e}"))
}

/// A harness step's result: go on with `T`, or stop here with the instance's final report.
type Step<T> = ControlFlow<InstanceReport, T>;

/// Grade `model_patch` for `task` in a fresh sandbox over the task's pristine tree, in the
/// harness's steps: [`admit_patches`] (refuse what cannot be graded), [`guard_test_infrastructure`]
/// (reject a patch that could fake its results), [`harness_request`] (the
/// one sandbox process: patches, test-file restore, test command), [`check_setup`] (did the
/// patches apply), [`test_log`] (the harness-style log of the test run) and [`judge`] (parse it
/// and grade it against the task's lists).
///
/// Infrastructure failures come back as reports with [`Verdict::Error`] and an infrastructure
/// [`ErrorKind`], never as "unresolved".
///
/// A model patch whose run printed no test result at all ([`ErrorKind::NoTestOutput`]) is
/// checked against the same environment without it ([`confirm_no_output`]): the sandbox is
/// reset and the test patch run alone; if that run prints results, the silence is the patch's
/// doing (unresolved, not an infrastructure failure a policy could hide behind).
pub async fn grade_in_sandbox(
    sb: &mut Sandbox,
    task: &Task,
    env: &RepoEnv,
    model_patch: Option<&str>,
    opts: &GradeOptions,
) -> InstanceReport {
    let r = grade_once(sb, task, env, model_patch, opts).await;
    let patch = model_patch.filter(|p| !p.trim().is_empty());
    if patch.is_some() && r.error_kind == Some(ErrorKind::NoTestOutput) {
        return confirm_no_output(sb, r, task, env, opts).await;
    }
    r
}

/// [`grade_in_sandbox`] without the no-output check: one run, the sandbox left as the run left
/// it. For callers that run a patch of their own making (bug synthesis, validation's gold
/// patch), where a silent test command is the task's problem, not a policy's.
pub async fn grade_once(
    sb: &Sandbox,
    task: &Task,
    env: &RepoEnv,
    model_patch: Option<&str>,
    opts: &GradeOptions,
) -> InstanceReport {
    match grade_steps(sb, task, env, model_patch, opts).await {
        Continue(r) | Break(r) => r,
    }
}

async fn grade_steps(
    sb: &Sandbox,
    task: &Task,
    env: &RepoEnv,
    model_patch: Option<&str>,
    opts: &GradeOptions,
) -> Step<InstanceReport> {
    let r = InstanceReport::new(&task.instance_id, opts.semantics, env.log_parser.name());
    let (r, patch, log) = admit_patches(r, task, model_patch, opts)?;
    let r = guard_test_infrastructure(sb, r, task, patch, opts).await?;
    let (r, observer) = prepare_observer(r, sb, env, opts)?;
    let cmd = env.test_command(task);
    let timeout = opts.timeout.unwrap_or(Duration::from_secs(env.timeout_s));
    let req = harness_request(
        task,
        env,
        patch,
        &r.test_infrastructure,
        &cmd,
        timeout,
        opts,
        observer.as_ref(),
    );
    let out = match sb.exec(&req).await {
        Ok(o) => o,
        Err(e) => return Break(sandbox_err(r, "running the tests", e)),
    };
    // Setup log, then (after the marker) the observer's records: converted once.
    let stderr = out.stderr_lossy();
    let (r, log) = check_setup(r, log, &out, &stderr, task, patch, timeout)?;
    let observed = match &observer {
        Some((runner, key)) => {
            if out.stderr_truncated {
                return Break(sandbox_err(
                    r,
                    "reading the test observer's records",
                    "they exceeded the output cap",
                ));
            }
            Some(match crate::observer::split_records(&stderr) {
                Some(records) => crate::observer::parse(records, *runner, key),
                None => crate::observer::Observed::default(),
            })
        }
        None => None,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (r, log) = test_log(r, log, &stdout, &out, &cmd, timeout)?;
    Continue(judge(r, log, observed.as_ref(), task, env, opts))
}

/// The observer for this run, where it applies (on, and a runner it observes): installed in
/// the sandbox's environment, with a fresh key. A sandbox without an environment, or one the
/// observer cannot be installed in, cannot be graded with it: an infrastructure error.
fn prepare_observer(
    r: InstanceReport,
    sb: &Sandbox,
    env: &RepoEnv,
    opts: &GradeOptions,
) -> Step<(
    InstanceReport,
    Option<(crate::observer::Runner, crate::observer::RunKey)>,
)> {
    let runner = match crate::observer::Runner::of(Parser::from(env.log_parser)) {
        Some(runner) if opts.observer => runner,
        _ => return Continue((r, None)),
    };
    let Some(venv) = sb.venv_path() else {
        return Break(sandbox_err(
            r,
            "installing the test observer",
            "the sandbox has no Python environment",
        ));
    };
    if let Err(e) = crate::observer::install(venv) {
        return Break(sandbox_err(r, "installing the test observer", e));
    }
    match crate::observer::RunKey::new() {
        Ok(key) => Continue((r, Some((runner, key)))),
        Err(e) => Break(sandbox_err(r, "making the observer's key", e)),
    }
}

/// A model patch's run printed no test result: run the test patch alone in the reset sandbox.
/// Results there mean the environment works and the patch silenced the test command (its
/// failure: unresolved, reward 0, not masked); silence there too confirms the infrastructure
/// error.
async fn confirm_no_output(
    sb: &mut Sandbox,
    mut r: InstanceReport,
    task: &Task,
    env: &RepoEnv,
    opts: &GradeOptions,
) -> InstanceReport {
    if let Err(e) = sb.reset().await {
        tracing::warn!(instance = %task.instance_id, "reset before the no-output check: {e}");
        return r;
    }
    let alone_opts = GradeOptions {
        run_empty_patch: true,
        ..opts.clone()
    };
    let alone = grade_once(sb, task, env, None, &alone_opts).await;
    let note = |r: &InstanceReport| r.error.clone().unwrap_or_default();
    if alone.error_kind == Some(ErrorKind::NoTestOutput) {
        r.error = Some(format!(
            "{} (confirmed: without the model patch the test command prints no result either)",
            note(&r)
        ));
    } else if alone.patch_successfully_applied {
        r.outcome = Verdict::Unresolved;
        r.error_kind = None;
        r.infra_failure = false;
        r.resolved = false;
        r.resolution_status = Some(crate::ResolvedStatus::No);
        r.error = Some(
            "the test command printed no test result with the model patch, and printed results \
             without it (test patch alone, same environment): the patch silenced the tests"
                .into(),
        );
    }
    r
}

/// Before anything runs: an empty patch is not run (unless asked, as `dojo validate` does);
/// a patch with binary hunks or paths outside the repository, or a test patch the sandbox's
/// patch checks refuse, is not gradable. Returns the patch to apply (`None`: test patch only)
/// and the start of the log.
fn admit_patches<'p>(
    mut r: InstanceReport,
    task: &Task,
    model_patch: Option<&'p str>,
    opts: &GradeOptions,
) -> Step<(InstanceReport, Option<&'p str>, String)> {
    let mut log = String::new();
    let patch = model_patch.filter(|p| !p.trim().is_empty());
    match (patch, opts.run_empty_patch) {
        (None, false) => {
            r.patch_is_none = model_patch.is_none();
            r.outcome = Verdict::EmptyPatch;
            return Break(r);
        }
        (None, true) => {
            r.patch_exists = model_patch.is_some();
            log.push_str("(no model patch: test patch only)\n");
        }
        (Some(p), _) => {
            r.patch_exists = true;
            if let Err(refused) = Patch::parse(p).check_gradable() {
                let reason = format!("patch refused: {refused}");
                r.test_output = format!("{APPLY_PATCH_FAIL}:\n{reason}\n");
                return Break(r.fail(ErrorKind::BadPatch, reason));
            }
        }
    }
    if let Err(refused) = Patch::parse(&task.test_patch).check_paths() {
        return Break(r.fail(
            ErrorKind::TestPatchApply,
            format!("the task's test patch is refused: {refused}"),
        ));
    }
    Continue((r, patch, log))
}

/// Which test infrastructure the model patch touches (recorded in the report); a patch that
/// touches conftest / pytest configuration / interpreter startup files is graded unresolved
/// here, without running, unless [`GradeOptions::allow_test_infrastructure`]. Configuration
/// files shared with other tools are judged by the sections their hunks change, read from the
/// sandbox's still pristine tree.
async fn guard_test_infrastructure(
    sb: &Sandbox,
    mut r: InstanceReport,
    task: &Task,
    model: Option<&str>,
    opts: &GradeOptions,
) -> Step<InstanceReport> {
    let Some(patch) = model else {
        return Continue(r);
    };
    let patch = Patch::parse(patch);
    let mut pristine = std::collections::BTreeMap::new();
    for path in guard::config_paths(&patch) {
        if let Ok(bytes) = sb.read_file(&path).await {
            pristine.insert(path, String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    let touches = guard::classify(&patch, &guard::task_test_files(task), |p| {
        pristine.get(p).cloned()
    });
    r.touched_test_infrastructure = !touches.is_empty();
    r.test_infrastructure = touches;
    match guard::rejection_reason(&r.test_infrastructure) {
        Some(reason) if !opts.allow_test_infrastructure => {
            r.test_output = format!("(not run: {reason})\n");
            r.outcome = Verdict::Unresolved;
            r.resolution_status = Some(crate::ResolvedStatus::No);
            r.error = Some(reason);
            Break(r)
        }
        _ => Continue(r),
    }
}

/// The one sandbox process of a grading run (see [`run_script`]), with the patches passed the
/// cheapest way their size allows (see [`PatchTransport`]). The task's test files are
/// restored when the model patch touched one of them.
/// With `key`, the observer's: the task's test files named for it and the key first on stdin.
#[allow(clippy::too_many_arguments)] // the run's parts, each used once
fn harness_request(
    task: &Task,
    env: &RepoEnv,
    model: Option<&str>,
    touches: &[InfraTouch],
    cmd: &str,
    timeout: Duration,
    opts: &GradeOptions,
    observer: Option<&(crate::observer::Runner, crate::observer::RunKey)>,
) -> ExecRequest {
    let key = observer.map(|(_, k)| k);
    let transport = PatchTransport::choose(model, &task.test_patch);
    let test_files = restorable_test_files(task, opts.semantics);
    let restore = if touches.iter().any(|t| t.kind == InfraKind::TaskTestFile) {
        restore_test_files_lines(&test_files)
    } else {
        String::new()
    };
    let observed: Vec<String> = test_files
        .iter()
        .map(|(f, _)| format!("{}/{f}", dojo_sandbox::WORKSPACE))
        .collect();
    let mut req = ExecRequest::shell(run_script(
        model,
        &task.test_patch,
        &restore,
        &env.pre_test,
        cmd,
        transport,
        key.map(|_| observed.as_slice()),
    ))
    .cwd(dojo_sandbox::WORKSPACE)
    .timeout(timeout);
    req.env = env.env.clone();
    if let Some((name, value)) = observer.and_then(|(runner, _)| runner.env()) {
        req.env.entry(name.to_string()).or_insert(value);
    }
    req.output_cap = opts.output_cap;
    let mut stdin = Vec::new();
    if let Some(k) = key {
        stdin.extend_from_slice(k.hex().as_bytes());
        stdin.push(b'\n');
    }
    match transport {
        PatchTransport::Env => {
            if let Some(m) = model {
                req.env.insert("DOJO_MODEL_PATCH".into(), m.to_string());
            }
            req.env
                .insert("DOJO_TEST_PATCH".into(), task.test_patch.clone());
        }
        PatchTransport::Stdin => {
            stdin.extend_from_slice(model.unwrap_or("").as_bytes());
            stdin.extend_from_slice(task.test_patch.as_bytes());
        }
    }
    if !stdin.is_empty() {
        req.stdin = Some(stdin);
    }
    req
}

/// Did the setup part of the run (model patch, test-file restore, test patch) succeed? Its
/// step log says which step failed: the model patch not applying is the patch's fault, the
/// rest are the task's or the infrastructure's.
/// `setup` is the run's stderr (`out.stderr`, decoded).
fn check_setup(
    mut r: InstanceReport,
    mut log: String,
    out: &ExecOutput,
    setup: &str,
    task: &Task,
    model: Option<&str>,
    timeout: Duration,
) -> Step<(InstanceReport, String)> {
    let setup_ok = setup.lines().any(|l| l == "@@DOJO_SETUP_OK");
    if model.is_some() {
        let (model_log, method) = step_log(setup, "model");
        if !setup_ok && out.exit_code == Some(10) {
            r.test_output = format!("{APPLY_PATCH_FAIL}:\n{model_log}\n");
            return Break(r.fail(
                ErrorKind::PatchApply,
                format!("model patch does not apply:\n{model_log}"),
            ));
        }
        r.patch_apply_method = method;
        log.push_str(&format!(
            "{APPLY_PATCH_PASS} (model patch, {}):\n{model_log}\n",
            r.patch_apply_method.as_deref().unwrap_or("?"),
        ));
    }
    let (eval_log, _) = step_log(setup, "eval_script");
    if !eval_log.is_empty() {
        log.push_str(&format!(
            "+ (eval script, before the test patch)\n{eval_log}\n"
        ));
    }
    if eval_log.lines().any(|l| l == dojo_task::REINSTALL_FAILED) {
        r.reinstall_failed = true;
        let compiled = model.map(compiled_sources).unwrap_or_default();
        if !compiled.is_empty() {
            r.test_output = log;
            return Break(r.fail(
                ErrorKind::EnvBuild,
                format!(
                    "the eval script's reinstall failed and the model patch changes compiled \
                     sources ({}): the tests would run on the build from before the patch",
                    compiled.join(", ")
                ),
            ));
        }
    }
    if !setup_ok {
        return Break(match (out.timed_out, out.exit_code) {
            (true, _) => r.fail(
                ErrorKind::Timeout,
                format!(
                    "applying the patches timed out after {} s",
                    timeout.as_secs()
                ),
            ),
            (_, Some(12)) => {
                r.test_output = log;
                r.fail(
                    ErrorKind::TestPatchApply,
                    format!(
                        "the task's test patch does not apply:\n{}",
                        step_log(setup, "test").0
                    ),
                )
            }
            (_, Some(11)) => sandbox_err(r, "restoring test files", step_log(setup, "restore").0),
            (_, code) => sandbox_err(
                r,
                "applying the patches",
                format!("exited with {code:?} (signal {:?}): {setup}", out.signal),
            ),
        });
    }
    if !task.test_patch.trim().is_empty() {
        log.push_str(&format!("{APPLY_PATCH_PASS} (test patch)\n"));
    }
    Continue((r, log))
}

/// The files of `patch` that a build compiles (C, C++, Cython, Fortran, Rust sources and
/// headers): after a failed reinstall, their change is not in what the tests import.
fn compiled_sources(patch: &str) -> Vec<String> {
    const EXTS: &[&str] = &[
        ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".pyx", ".pxd", ".pxi", ".f", ".f90", ".rs",
    ];
    Patch::parse(patch)
        .paths()
        .into_iter()
        .filter(|p| EXTS.iter().any(|e| p.ends_with(e)))
        .map(str::to_string)
        .collect()
}

/// The test run as the harness's container log shows it: the command, the output between the
/// start and end markers, the exit code (or the timeout line: a timeout is infrastructure).
fn test_log(
    mut r: InstanceReport,
    mut log: String,
    body: &str,
    out: &ExecOutput,
    cmd: &str,
    timeout: Duration,
) -> Step<(InstanceReport, String)> {
    log.push_str(&format!("+ {cmd}\n+ : '{START_TEST_OUTPUT}'\n{body}"));
    if !body.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(&format!("+ : '{END_TEST_OUTPUT}'\n"));
    r.test_exit_code = out.exit_code;
    // Includes applying the patches (milliseconds), as the harness's eval script run does.
    r.test_duration_s = Some(out.duration.as_secs_f64());
    r.test_output_truncated = out.stdout_truncated;
    if out.timed_out {
        log.push_str(&format!(
            "\n\nTimeout error: {} seconds exceeded.\n",
            timeout.as_secs()
        ));
        r.test_output = log;
        return Break(r.fail(
            ErrorKind::Timeout,
            format!("test command timed out after {} s", timeout.as_secs()),
        ));
    }
    let code = out
        .exit_code
        .unwrap_or_else(|| 128 + out.signal.unwrap_or(0));
    log.push_str(&format!(">>>>> Test Exit Code: {code}\n"));
    Continue((r, log))
}

/// Parse the log exactly as a harness log is read back from disk, and grade the status map
/// against the task's lists, under two checks of ours that hold for both semantics:
///
/// - **no test result at all** (a crash at import or collection, a missing plugin): "no valid
///   test output", an infrastructure error ([`ErrorKind::NoTestOutput`]), as `swebench` 5.x
///   flags it, not "applied, every test failed";
/// - **the exit status disagrees with the results**: the test command failed (non-zero exit)
///   yet no test in the parsed output failed or errored. Results printed by something other
///   than the test runner (library code writing `PASSED <id>` at exit) look like this, so they
///   are not trusted: unresolved, with the reason (`swebench` 5.x also rejects such a log).
fn judge(
    mut r: InstanceReport,
    log: String,
    observed: Option<&crate::observer::Observed>,
    task: &Task,
    env: &RepoEnv,
    opts: &GradeOptions,
) -> InstanceReport {
    let parser = Parser::from(env.log_parser);
    let text = read_log_text(log.as_bytes());
    let (sm, found) = logs_eval(&text, parser, opts.semantics);
    // The results as printed, before any validity rule of the semantics.
    let printed = if found {
        sm.clone()
    } else {
        logs_eval(&text, parser, Semantics::Classic).0
    };
    r.test_output = log;
    let code = parse_test_exit_code(&text).unwrap_or(0);
    if printed.is_empty() {
        return r.fail(
            ErrorKind::NoTestOutput,
            format!(
                "no valid test output: the test command (exit {code}) printed no test result; \
                 likely an infrastructure failure (crash at import or collection, missing plugin)"
            ),
        );
    }
    r.patch_successfully_applied = true;
    if code != 0 && !printed.iter().any(|(_, s)| s == FAILED || s == ERROR) {
        r.outcome = Verdict::Unresolved;
        r.resolution_status = Some(crate::ResolvedStatus::No);
        r.error = Some(format!(
            "the test command exited {code} but no test failed in its output: results not trusted"
        ));
        return r;
    }
    if !found {
        r.outcome = Verdict::Unresolved;
        r.error = Some("no valid test output (no results and no sign the suite ran)".into());
        return r;
    }
    let gold = GoldLists {
        fail_to_pass: task.f2p(),
        pass_to_pass: task.p2p(),
        fail_to_fail: &task.fail_to_fail,
        pass_to_fail: &task.pass_to_fail,
    };
    let status = eval_tests_report(
        &sm,
        &gold,
        opts.calculate_to_fail,
        env.eval_type,
        opts.semantics,
    );
    let seen = match (observed, crate::observer::Runner::of(parser)) {
        (Some(o), Some(runner)) => {
            let mut seen = crate::observer::check(o, runner, &status, &sm, opts.semantics);
            let skips = crate::observer::check_skips(o, runner, &gold, &sm, opts.semantics);
            seen.disagreements.extend(skips);
            Some(seen)
        }
        _ => None,
    };
    r.set_tests_status(status);
    if let Some(seen) = seen {
        if !seen.agrees() {
            r.outcome = Verdict::Unresolved;
            r.resolved = false;
            r.resolution_status = Some(crate::ResolvedStatus::No);
            let mut why = seen.problems.clone();
            if !seen.disagreements.is_empty() {
                why.push(format!(
                    "the test observer did not see these tests pass, which the log reports \
                     passed: {}",
                    seen.disagreements
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            r.error = Some(format!("results not trusted: {}", why.join("; ")));
        }
        r.observer = Some(seen);
    }
    r
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

/// Run the test patch alone, reset, run with the gold patch; check the task's lists (if it has
/// any) and derive new ones.
pub async fn validate_in_sandbox(
    sb: &mut Sandbox,
    task: &Task,
    env: &RepoEnv,
    opts: &GradeOptions,
) -> Validation {
    let parser = Parser::from(env.log_parser);
    let mut v = Validation {
        instance_id: task.instance_id.clone(),
        ok: false,
        problems: Vec::new(),
        derived_fail_to_pass: Vec::new(),
        derived_pass_to_pass: Vec::new(),
        new_task: task.f2p().is_empty(),
        total_s: None,
        runs_s: None,
        before: None,
        gold: None,
    };
    let before_opts = GradeOptions {
        run_empty_patch: true,
        ..opts.clone()
    };
    let before = grade_once(sb, task, env, None, &before_opts).await;
    if let Err(e) = sb.reset().await {
        v.problems.push(format!("sandbox reset failed: {e}"));
        v.before = Some(before);
        return v;
    }
    let gold = grade_once(sb, task, env, Some(&task.patch), opts).await;
    // The test patch alone may crash the test runner itself (pytest-7168: the bug makes
    // pytest's own reporting raise, INTERNALERROR, no result printed). When the gold run has
    // results, the environment works and the crash is the bug's: every test counts as not
    // passing, as the harness counts tests absent from its log.
    let crashed_by_the_bug = before.outcome == Verdict::Error
        && before.error_kind == Some(ErrorKind::NoTestOutput)
        && gold.outcome != Verdict::Error;
    for (name, r) in [("test patch only", &before), ("gold patch", &gold)] {
        if r.outcome == Verdict::Error && !(crashed_by_the_bug && name == "test patch only") {
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
        v.problems.extend(list_problems(
            (task.f2p().len(), task.p2p().len()),
            v.new_task,
            &f2p,
            &before,
            &gold,
            &sm_gold,
        ));
        v.derived_fail_to_pass = f2p;
        v.derived_pass_to_pass = p2p;
    }
    v.ok = v.problems.is_empty();
    v.before = Some(before);
    v.gold = Some(gold);
    v
}

/// What is wrong with a task's lists after its two validation runs. A new task needs a derived
/// FAIL_TO_PASS; a task with its own lists is checked against them, as the harness checks it:
/// every FAIL_TO_PASS fails with the test patch alone and passes with the gold patch, and every
/// PASS_TO_PASS passes with it. (A dataset id that the parser truncates, such as astroid's
/// parametrised ids cut at their first space, can stand for several tests: `derive_lists`
/// leaves such ids out, so a derived list may be empty where the task's own lists hold.)
fn list_problems(
    (n_f2p, n_p2p): (usize, usize),
    new_task: bool,
    derived_f2p: &[String],
    before: &InstanceReport,
    gold: &InstanceReport,
    gold_sm: &StatusMap,
) -> Vec<String> {
    let mut problems = Vec::new();
    if new_task {
        if derived_f2p.is_empty() {
            problems.push("no test fails before the gold patch and passes after it".into());
        }
        return problems;
    }
    let still_passing: Vec<String> = before
        .tests_status
        .as_ref()
        .map(|t| t.fail_to_pass.success.clone())
        .unwrap_or_default();
    if !still_passing.is_empty() {
        problems.push(format!(
            "FAIL_TO_PASS already passing with the test patch alone: {} of {}",
            ids_summary(&still_passing),
            n_f2p
        ));
    }
    let named = problems.len();
    if let Some(ts) = &gold.tests_status {
        if !ts.fail_to_pass.failure.is_empty() {
            problems.push(format!(
                "FAIL_TO_PASS not passing with the gold patch: {} of {n_f2p}: {}",
                ts.fail_to_pass.failure.len(),
                crate::diagnose::ids_by_status(&ts.fail_to_pass.failure, gold_sm, gold.semantics)
            ));
        }
        if !ts.pass_to_pass.failure.is_empty() {
            problems.push(format!(
                "PASS_TO_PASS broken with the gold patch: {} of {n_p2p}: {}",
                ts.pass_to_pass.failure.len(),
                crate::diagnose::ids_by_status(&ts.pass_to_pass.failure, gold_sm, gold.semantics)
            ));
        }
    }
    // Whatever the lists say, the gold patch must resolve and the test patch alone must not: a
    // run whose results are not trusted (an exit code no failed test explains, no test output)
    // has no lists to check, and is no evidence that the task is runnable.
    if problems.len() == named && !gold.resolved {
        problems.push(format!(
            "the gold patch does not resolve{}",
            gold.error
                .as_deref()
                .map_or(String::new(), |e| format!(": {e}"))
        ));
    }
    if before.resolved {
        problems.push("the test patch alone already resolves".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pylint-dev__astroid-1614: the dataset's FAIL_TO_PASS is a parametrised id the official
    /// parser cut at its first space (`test_string_format_uninferable[\\n`). The grader matches
    /// it (fails alone, passes with gold), `derive_lists` leaves it out as truncated: the task's
    /// own lists decide, as in the harness. A new task with nothing derived still fails.
    #[test]
    fn a_tasks_own_lists_decide_even_when_nothing_is_derived() {
        let id =
            "tests/unittest_brain_builtin.py::TestStringNodes::test_string_format_uninferable[\\n";
        let report = |f2p_ok: bool| {
            let mut r = InstanceReport::new("t", Semantics::Classic, "pytest");
            r.resolved = f2p_ok;
            let one = vec![id.to_string()];
            r.tests_status = Some(crate::grading::TestsStatus {
                fail_to_pass: crate::grading::SuccessFailure {
                    success: if f2p_ok { one.clone() } else { vec![] },
                    failure: if f2p_ok { vec![] } else { one },
                },
                ..Default::default()
            });
            r
        };
        let (before, gold) = (report(false), report(true));
        assert!(list_problems((1, 0), false, &[], &before, &gold, &StatusMap::new()).is_empty());
        assert_eq!(
            list_problems((0, 0), true, &[], &before, &gold, &StatusMap::new()),
            ["no test fails before the gold patch and passes after it"]
        );
        // The lists still decide against it: passing alone, or failing with gold.
        let p = list_problems((1, 0), false, &[], &gold, &before, &StatusMap::new());
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("FAIL_TO_PASS already passing"), "{p:?}");
        assert!(
            p[1].starts_with("FAIL_TO_PASS not passing with the gold patch"),
            "{p:?}"
        );
        assert_eq!(p[2], "the test patch alone already resolves");
    }

    /// pytest-dev__pytest-5262 from a tagless clone: the suite refuses to start (tox.ini's
    /// minversion against setuptools-scm's `0.1.dev1`), so neither run has lists to check. That
    /// is not a runnable task, whatever the lists would say.
    #[test]
    fn a_gold_run_without_trusted_results_does_not_validate() {
        let mut gold = InstanceReport::new("t", Semantics::Classic, "pytest");
        gold.error = Some("the test command exited 4 but no test failed in its output".into());
        let before = InstanceReport::new("t", Semantics::Classic, "pytest");
        assert_eq!(
            list_problems((1, 0), false, &[], &before, &gold, &StatusMap::new()),
            [
                "the gold patch does not resolve: the test command exited 4 but no test failed in its output"
            ]
        );
    }
}
