//! Per-instance `report.json` (the official keys, plus ours) and the run summary.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::grading::{
    EvalType, GoldLists, ResolvedStatus, Semantics, TestsStatus, eval_tests_report, logs_eval,
    resolution_status,
};
use crate::guard::InfraTouch;
use crate::parsers::Parser;

/// Version of the files this crate writes (`report.json`, the run summary). 2: the test
/// infrastructure a model patch touched (`touched_test_infrastructure`, `test_infrastructure`,
/// the summary's `test_infrastructure_ids`) and the `no_test_output` error kind. 3: `observer`,
/// what the test observer saw, and `reinstall_failed`. 4: `observer.problems` (the observer did
/// not load, its records were forged or cut short, the test process reached into the test
/// machinery). 5: `observer.disagreements` are objects (`{"id", "seen", ...}`, see
/// [`crate::observer::Disagreement`]), each a line of text before. Older files still read (the
/// new keys default to empty, a disagreement's text is kept as it was).
pub const SCHEMA_VERSION: u32 = 5;

/// Why an instance could not be graded. Only [`ErrorKind::PatchApply`] and
/// [`ErrorKind::BadPatch`] are the submitted patch's fault; the rest are infrastructure and must
/// never be scored as the agent's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The model patch did not apply with any method of the harness's chain.
    PatchApply,
    /// The model patch is not gradable: binary hunks, or paths outside the repository.
    BadPatch,
    /// The task's own test patch did not apply (the task is broken).
    TestPatchApply,
    /// The environment (venv, pristine tree) could not be built.
    EnvBuild,
    /// The test command ran past its timeout.
    Timeout,
    /// The sandbox or runner failed (could not start, crashed, vanished).
    Runner,
    /// The test command produced no test result at all (a crash at import or collection, a
    /// missing plugin or interpreter): `swebench` 5.x's "no valid output", likely the
    /// environment's fault, so not scored as the agent's failure.
    NoTestOutput,
}

impl ErrorKind {
    pub fn is_infrastructure(self) -> bool {
        !matches!(self, ErrorKind::PatchApply | ErrorKind::BadPatch)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::PatchApply => "patch_apply",
            ErrorKind::BadPatch => "bad_patch",
            ErrorKind::TestPatchApply => "test_patch_apply",
            ErrorKind::EnvBuild => "env_build",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Runner => "runner",
            ErrorKind::NoTestOutput => "no_test_output",
        }
    }
}

/// The verdict of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Resolved,
    Unresolved,
    /// No patch submitted (empty or null): not run, as the harness does.
    EmptyPatch,
    Error,
}

/// One instance's grade. Serialised as the official report (`{instance_id: {...}}`) with our
/// extra keys inside the instance object, so official tooling (`report[id]["resolved"]`) reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceReport {
    #[serde(skip)]
    pub instance_id: String,
    #[serde(rename = "patch_is_None")]
    pub patch_is_none: bool,
    pub patch_exists: bool,
    pub patch_successfully_applied: bool,
    pub resolved: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tests_status: Option<TestsStatus>,
    pub schema_version: u32,
    pub outcome: Verdict,
    #[serde(default)]
    pub error_kind: Option<ErrorKind>,
    /// True for infrastructure failures (never the agent's fault).
    #[serde(default)]
    pub infra_failure: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub resolution_status: Option<ResolvedStatus>,
    pub semantics: Semantics,
    #[serde(default)]
    pub log_parser: String,
    #[serde(default)]
    pub test_exit_code: Option<i32>,
    #[serde(default)]
    pub test_duration_s: Option<f64>,
    #[serde(default)]
    pub test_output_truncated: bool,
    /// How the model patch applied (`git_apply`, `git_apply_reject`, `patch_fuzz`).
    #[serde(default)]
    pub patch_apply_method: Option<String>,
    /// Whether the model patch touched test infrastructure (see [`crate::guard`]): the task's
    /// test files (restored before grading), or conftest / pytest configuration / interpreter
    /// startup files (graded unresolved).
    #[serde(default)]
    pub touched_test_infrastructure: bool,
    /// The paths behind `touched_test_infrastructure`, with their kind.
    #[serde(default)]
    pub test_infrastructure: Vec<InfraTouch>,
    /// The eval script's reinstall (`pip install -e .`) ran and failed: the tests ran on the
    /// build from before the patch (a patch that changes compiled sources is then not graded:
    /// [`ErrorKind::EnvBuild`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reinstall_failed: bool,
    /// What the test observer saw ([`crate::observer`]); absent where it was not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer: Option<crate::observer::ObserverReport>,
    /// The harness-style test log (`test_output.txt`), written next to the report.
    #[serde(skip)]
    pub test_output: String,
}

impl InstanceReport {
    pub fn new(instance_id: &str, semantics: Semantics, log_parser: &str) -> InstanceReport {
        InstanceReport {
            instance_id: instance_id.to_string(),
            patch_is_none: false,
            patch_exists: false,
            patch_successfully_applied: false,
            resolved: false,
            tests_status: None,
            schema_version: SCHEMA_VERSION,
            outcome: Verdict::Unresolved,
            error_kind: None,
            infra_failure: false,
            error: None,
            resolution_status: None,
            semantics,
            log_parser: log_parser.to_string(),
            test_exit_code: None,
            test_duration_s: None,
            test_output_truncated: false,
            patch_apply_method: None,
            touched_test_infrastructure: false,
            test_infrastructure: Vec::new(),
            reinstall_failed: false,
            observer: None,
            test_output: String::new(),
        }
    }

    /// Mark as an error of `kind` with a message.
    pub fn fail(mut self, kind: ErrorKind, msg: impl Into<String>) -> InstanceReport {
        self.outcome = Verdict::Error;
        self.error_kind = Some(kind);
        self.infra_failure = kind.is_infrastructure();
        self.error = Some(msg.into());
        self.resolved = false;
        self
    }

    /// Record a graded run: tests status, resolution status, `resolved` and the outcome.
    pub fn set_tests_status(&mut self, ts: TestsStatus) {
        let status = resolution_status(&ts);
        self.resolved = status == ResolvedStatus::Full;
        self.outcome = if self.resolved {
            Verdict::Resolved
        } else {
            Verdict::Unresolved
        };
        self.resolution_status = Some(status);
        self.tests_status = Some(ts);
    }

    /// `{instance_id: {...}}`.
    pub fn to_json(&self) -> Value {
        let inner = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut m = Map::new();
        m.insert(self.instance_id.clone(), inner);
        Value::Object(m)
    }

    /// Read back a report written by [`InstanceReport::to_json`] (for resuming a run).
    pub fn from_json(v: &Value) -> Option<InstanceReport> {
        let (id, inner) = v.as_object()?.iter().next()?;
        let mut r: InstanceReport = serde_json::from_value(inner.clone()).ok()?;
        r.instance_id = id.clone();
        Some(r)
    }
}

/// Grade a harness log (`test_output.txt`) as `get_eval_report` does: the official keys,
/// `resolved`, and the tests status. `model_patch = None` gives `patch_is_None`.
pub fn eval_report_from_log(
    instance_id: &str,
    model_patch: Option<&str>,
    log: &str,
    parser: Parser,
    gold: &GoldLists,
    eval_type: EvalType,
    semantics: Semantics,
) -> InstanceReport {
    let mut r = InstanceReport::new(instance_id, semantics, &format!("{parser:?}"));
    if model_patch.is_none() {
        r.patch_is_none = true;
        r.outcome = Verdict::EmptyPatch;
        return r;
    }
    r.patch_exists = true;
    let (sm, found) = logs_eval(log, parser, semantics);
    r.test_output = log.to_string();
    if !found {
        r.error = Some("no valid test output in the log (apply failure, timeout marker, missing markers or no results)".into());
        return r;
    }
    r.patch_successfully_applied = true;
    r.set_tests_status(eval_tests_report(&sm, gold, false, eval_type, semantics));
    r
}

/// A predictions line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MalformedLine {
    pub line: usize,
    pub reason: String,
}

/// The run report (`DIR/report.json`): the official `make_run_report` keys plus our breakdown.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub schema_version: u32,
    pub total_instances: usize,
    pub submitted_instances: usize,
    pub completed_instances: usize,
    pub resolved_instances: usize,
    pub unresolved_instances: usize,
    pub empty_patch_instances: usize,
    pub error_instances: usize,
    pub infra_failure_instances: usize,
    pub completed_ids: Vec<String>,
    pub incomplete_ids: Vec<String>,
    pub empty_patch_ids: Vec<String>,
    pub submitted_ids: Vec<String>,
    pub resolved_ids: Vec<String>,
    pub unresolved_ids: Vec<String>,
    pub error_ids: Vec<String>,
    pub infra_failure_ids: Vec<String>,
    /// instance_id → error kind, for every id in `error_ids`.
    pub error_kinds: BTreeMap<String, ErrorKind>,
    pub semantics: Option<Semantics>,
    pub malformed_prediction_lines: Vec<MalformedLine>,
    /// Predictions whose instance_id is not in the task file.
    pub unknown_prediction_ids: Vec<String>,
    /// Instances whose model patch touched test infrastructure (whatever their verdict).
    #[serde(default)]
    pub test_infrastructure_ids: Vec<String>,
}

impl RunSummary {
    /// Summarise: `task_ids` are all tasks, `submitted` the ids with a prediction, `reports`
    /// the graded ones (empty-patch instances included).
    pub fn build<'a>(
        task_ids: impl IntoIterator<Item = &'a str>,
        submitted: impl IntoIterator<Item = &'a str>,
        reports: impl IntoIterator<Item = &'a InstanceReport>,
        semantics: Semantics,
    ) -> RunSummary {
        let mut s = RunSummary {
            schema_version: SCHEMA_VERSION,
            semantics: Some(semantics),
            ..Default::default()
        };
        let tasks: std::collections::BTreeSet<&str> = task_ids.into_iter().collect();
        let submitted: std::collections::BTreeSet<&str> = submitted.into_iter().collect();
        let by_id: BTreeMap<&str, &InstanceReport> = reports
            .into_iter()
            .map(|r| (r.instance_id.as_str(), r))
            .collect();
        s.total_instances = tasks.len();
        s.submitted_ids = submitted.iter().map(|x| x.to_string()).collect();
        s.submitted_instances = submitted.len();
        for id in &tasks {
            if !submitted.contains(id) {
                s.incomplete_ids.push(id.to_string());
                continue;
            }
            let Some(r) = by_id.get(id) else {
                s.incomplete_ids.push(id.to_string());
                continue;
            };
            if r.touched_test_infrastructure {
                s.test_infrastructure_ids.push(id.to_string());
            }
            match r.outcome {
                Verdict::EmptyPatch => s.empty_patch_ids.push(id.to_string()),
                Verdict::Resolved => {
                    s.completed_ids.push(id.to_string());
                    s.resolved_ids.push(id.to_string());
                }
                Verdict::Unresolved => {
                    s.completed_ids.push(id.to_string());
                    s.unresolved_ids.push(id.to_string());
                }
                Verdict::Error => {
                    s.error_ids.push(id.to_string());
                    let kind = r.error_kind.unwrap_or(ErrorKind::Runner);
                    if kind.is_infrastructure() {
                        s.infra_failure_ids.push(id.to_string());
                    }
                    s.error_kinds.insert(id.to_string(), kind);
                }
            }
        }
        s.unknown_prediction_ids = submitted
            .iter()
            .filter(|x| !tasks.contains(*x))
            .map(|x| x.to_string())
            .collect();
        s.completed_instances = s.completed_ids.len();
        s.resolved_instances = s.resolved_ids.len();
        s.unresolved_instances = s.unresolved_ids.len();
        s.empty_patch_instances = s.empty_patch_ids.len();
        s.error_instances = s.error_ids.len();
        s.infra_failure_instances = s.infra_failure_ids.len();
        s
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"error": e.to_string()}))
    }
}

/// What `dojo validate` learns about one task. Serialized (without the two runs' reports) into
/// `validation.json`, from which a resumed `dojo validate --out` reads it back
/// ([`crate::diagnose::read_validation`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Validation {
    pub instance_id: String,
    /// Runnable: every FAIL_TO_PASS fails with the test patch alone, and the gold patch resolves.
    /// For a new task (no FAIL_TO_PASS yet): both runs were clean and at least one test fails
    /// before the gold patch and passes after it.
    pub ok: bool,
    /// The task had no FAIL_TO_PASS (absent or empty): its lists are derived, not checked, and
    /// `dojo validate --write` may store them.
    pub new_task: bool,
    pub problems: Vec<String>,
    /// Lists derived from the two runs (what `--write` stores).
    pub derived_fail_to_pass: Vec<String>,
    pub derived_pass_to_pass: Vec<String>,
    /// Wall seconds of the whole validation: preparation (the pristine tree, the environment
    /// build or the wait for it, the sandbox) and both runs. `None` where it was not timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_s: Option<f64>,
    /// Wall seconds of the two runs and the reset between them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_s: Option<f64>,
    #[serde(skip)]
    pub before: Option<InstanceReport>,
    #[serde(skip)]
    pub gold: Option<InstanceReport>,
}

impl Validation {
    /// The validation ended at the infrastructure, not at the task: no sandbox or environment
    /// (the runs never happened), or a run whose output the harness could not trust. A resumed
    /// `dojo validate --out` validates such a task again, as `dojo eval` re-grades an
    /// infrastructure failure.
    pub fn infra_failure(&self) -> bool {
        self.runs_s.is_none()
            || [&self.before, &self.gold]
                .into_iter()
                .flatten()
                .any(|r| r.infra_failure)
    }
}

/// Persist one instance's files: `report.json`, `test_output.txt`, `patch.diff`.
pub fn write_instance(
    dir: &Path,
    report: &InstanceReport,
    patch: Option<&str>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some(p) = patch {
        std::fs::write(dir.join("patch.diff"), p)?;
    }
    std::fs::write(dir.join("test_output.txt"), &report.test_output)?;
    let json = serde_json::to_vec_pretty(&report.to_json()).map_err(std::io::Error::other)?;
    // The report goes last: its presence marks the instance as graded (resume).
    dojo_rundir::write_atomic(&dir.join("report.json"), &json)
}

/// A previous report worth keeping (graded, or the agent's own patch failure). Infrastructure
/// failures are retried on resume.
pub fn existing_report(dir: &Path) -> Option<InstanceReport> {
    let text = std::fs::read_to_string(dir.join("report.json")).ok()?;
    let r = InstanceReport::from_json(&serde_json::from_str(&text).ok()?)?;
    (!r.infra_failure).then_some(r)
}

impl RunSummary {
    /// What `dojo eval` prints after grading (report written to `path`): the counts, each
    /// error's kind, the patches that touched test infrastructure, and the report.
    pub fn report_lines(&self, path: &Path) -> String {
        let mut lines = vec![format!(
            "instances: {} submitted, {} resolved, {} unresolved, {} empty patch, {} error ({} infrastructure), {} malformed prediction line(s)",
            self.submitted_instances,
            self.resolved_instances,
            self.unresolved_instances,
            self.empty_patch_instances,
            self.error_instances,
            self.infra_failure_instances,
            self.malformed_prediction_lines.len()
        )];
        for (id, kind) in &self.error_kinds {
            lines.push(format!("error: {id}: {}", kind.as_str()));
        }
        for id in &self.test_infrastructure_ids {
            lines.push(format!(
                "test infrastructure touched by the model patch: {id} (see its report.json)"
            ));
        }
        lines.push(format!("report: {}", path.display()));
        lines.join("\n")
    }

    /// Write the run report (`report.json`, [`RunSummary::to_json`]) to `path`, atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(&self.to_json()).map_err(std::io::Error::other)?;
        dojo_rundir::write_atomic(path, &json)
    }

    /// The error of a `dojo eval` that graded nothing: none of the `usable` predictions of
    /// `predictions` names a selected instance of `tasks` (an input error, not a result).
    pub fn nothing_graded(&self, usable: usize, predictions: &Path, tasks: &Path) -> String {
        format!(
            "error: nothing to grade: none of the {usable} usable prediction(s) in {} names a selected instance of {} ({} malformed line(s))",
            predictions.display(),
            tasks.display(),
            self.malformed_prediction_lines.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_round_trips_with_official_shape() {
        let f2p = vec!["a".to_string()];
        let log = "+ : '>>>>> Start Test Output'\nPASSED a\n+ : '>>>>> End Test Output'\n";
        let gold = GoldLists {
            fail_to_pass: &f2p,
            ..Default::default()
        };
        let r = eval_report_from_log(
            "x__y-1",
            Some("diff"),
            log,
            Parser::Pytest,
            &gold,
            EvalType::PassAndFail,
            Semantics::Classic,
        );
        let j = r.to_json();
        assert_eq!(j["x__y-1"]["resolved"], true);
        assert_eq!(j["x__y-1"]["patch_is_None"], false);
        assert_eq!(
            j["x__y-1"]["tests_status"]["FAIL_TO_PASS"]["success"][0],
            "a"
        );
        assert_eq!(j["x__y-1"]["schema_version"], SCHEMA_VERSION);
        let back = InstanceReport::from_json(&j).unwrap();
        assert_eq!(back.instance_id, "x__y-1");
        assert_eq!(back.outcome, Verdict::Resolved);
    }

    #[test]
    fn summary_buckets() {
        let mk = |id: &str, o: Verdict, k: Option<ErrorKind>| {
            let mut r = InstanceReport::new(id, Semantics::Classic, "pytest");
            r.outcome = o;
            r.error_kind = k;
            r
        };
        let reps = [
            mk("a", Verdict::Resolved, None),
            mk("b", Verdict::Unresolved, None),
            mk("c", Verdict::EmptyPatch, None),
            mk("d", Verdict::Error, Some(ErrorKind::Timeout)),
            mk("e", Verdict::Error, Some(ErrorKind::PatchApply)),
        ];
        let s = RunSummary::build(
            ["a", "b", "c", "d", "e", "f"],
            ["a", "b", "c", "d", "e", "zz"],
            reps.iter(),
            Semantics::Classic,
        );
        assert_eq!(s.resolved_ids, ["a"]);
        assert_eq!(s.unresolved_ids, ["b"]);
        assert_eq!(s.empty_patch_ids, ["c"]);
        assert_eq!(s.error_ids, ["d", "e"]);
        assert_eq!(s.infra_failure_ids, ["d"]);
        assert_eq!(s.incomplete_ids, ["f"]);
        assert_eq!(s.unknown_prediction_ids, ["zz"]);
        assert_eq!(s.completed_instances, 2);
    }

    #[test]
    fn run_summary_lines() {
        let s = RunSummary {
            submitted_instances: 3,
            resolved_instances: 1,
            unresolved_instances: 1,
            error_instances: 1,
            infra_failure_instances: 1,
            error_kinds: [("b".to_string(), ErrorKind::Timeout)].into(),
            test_infrastructure_ids: vec!["c".into()],
            malformed_prediction_lines: vec![MalformedLine {
                line: 4,
                reason: "not JSON".into(),
            }],
            ..Default::default()
        };
        assert_eq!(
            s.nothing_graded(0, Path::new("p.jsonl"), Path::new("t.jsonl")),
            "error: nothing to grade: none of the 0 usable prediction(s) in p.jsonl names a selected instance of t.jsonl (1 malformed line(s))"
        );
        let dir = tempfile::tempdir().unwrap();
        s.write(&dir.path().join("report.json")).unwrap();
        let back: RunSummary =
            serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap())
                .unwrap();
        assert_eq!(back, s);
        insta::assert_snapshot!(s.report_lines(Path::new("/out/report.json")), @r"
        instances: 3 submitted, 1 resolved, 1 unresolved, 0 empty patch, 1 error (1 infrastructure), 1 malformed prediction line(s)
        error: b: timeout
        test infrastructure touched by the model patch: c (see its report.json)
        report: /out/report.json
        ");
    }
}
