//! Many instances at once: `dojo eval` (predictions → per-instance reports + run summary,
//! resumable, concurrent) and `dojo validate` (test patch alone vs gold patch), with progress.
//!
//! Preparing a task (pristine tree, Python environment) is behind [`Preparer`], so callers can
//! share built trees and environments between runs; [`TaskPreparer`] is the standard one.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dojo_sandbox::{Pristine, PythonEnv, Sandbox, SandboxOptions};
use dojo_task::{PrepareOptions, RepoEnv, Task};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::report::{ErrorKind, InstanceReport, MalformedLine, Outcome};
use crate::run::{GradeOptions, Validation, grade_in_sandbox, validate_in_sandbox};
use crate::{GradeError, Semantics};

/// What a sandbox for one task is built from.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub pristine: Pristine,
    pub env: Option<PythonEnv>,
}

/// Builds (or finds in the cache) what a task's sandbox needs. Failures are infrastructure
/// failures of the given kind.
pub trait Preparer: Send + Sync {
    fn prepare(
        &self,
        task: &Task,
        env: &RepoEnv,
    ) -> impl Future<Output = Result<Prepared, (ErrorKind, String)>> + Send;
}

/// The standard preparer: [`dojo_task::prepare`] (pristine tree and venv, both cached in
/// `$DOJO_HOME`, built once).
#[derive(Debug, Clone, Default)]
pub struct TaskPreparer {
    pub prepare_opts: PrepareOptions,
}

impl Preparer for TaskPreparer {
    async fn prepare(&self, task: &Task, env: &RepoEnv) -> Result<Prepared, (ErrorKind, String)> {
        let (t, e, o) = (task.clone(), env.clone(), self.prepare_opts.clone());
        let p = tokio::task::spawn_blocking(move || dojo_task::prepare(&t, &e, &o))
            .await
            .map_err(|e| (ErrorKind::Runner, e.to_string()))?
            .map_err(|e| (ErrorKind::EnvBuild, e.to_string()))?;
        Ok(Prepared {
            pristine: p.pristine,
            env: Some(p.env),
        })
    }
}

/// Options shared by eval and validate.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    pub workers: usize,
    pub grade: GradeOptions,
    pub sandbox: SandboxOptions,
    /// Re-grade instances that already have a report.
    pub force: bool,
    pub progress: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            workers: 1,
            grade: GradeOptions::default(),
            sandbox: SandboxOptions::default(),
            force: false,
            progress: true,
        }
    }
}

/// One SWE-bench prediction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    pub instance_id: String,
    pub model_name_or_path: String,
    /// `None` when the line had `null`.
    pub model_patch: Option<String>,
    pub line: usize,
}

/// Read a predictions file (JSONL; a JSON list or `{id: prediction}` object also works).
/// Bad lines are returned separately with their line numbers; the rest are usable.
pub fn load_predictions(
    path: &Path,
) -> Result<(Vec<Prediction>, Vec<MalformedLine>), std::io::Error> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut items: Vec<(usize, Result<Value, String>)> = Vec::new();
    let trimmed = text.trim_start();
    let whole =
        if trimmed.starts_with('[') || (trimmed.starts_with('{') && !text.trim().contains('\n')) {
            serde_json::from_str::<Value>(&text).ok()
        } else {
            None
        };
    match whole {
        Some(Value::Array(a)) => {
            items.extend(a.into_iter().enumerate().map(|(i, v)| (i + 1, Ok(v))))
        }
        Some(Value::Object(m)) if !m.contains_key("instance_id") => {
            items.extend(m.into_iter().enumerate().map(|(i, (_, v))| (i + 1, Ok(v))))
        }
        Some(v @ Value::Object(_)) => items.push((1, Ok(v))),
        _ => {
            for (i, line) in text.split('\n').enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                items.push((
                    i + 1,
                    serde_json::from_str::<Value>(line).map_err(|e| format!("not JSON: {e}")),
                ));
            }
        }
    }
    let mut preds = Vec::new();
    let mut bad = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (line, v) in items {
        let v = match v {
            Ok(v) => v,
            Err(reason) => {
                bad.push(MalformedLine { line, reason });
                continue;
            }
        };
        let Some(obj) = v.as_object() else {
            bad.push(MalformedLine {
                line,
                reason: "not a JSON object".into(),
            });
            continue;
        };
        let id = match obj.get("instance_id").and_then(Value::as_str) {
            Some(id) if valid_id(id) => id.to_string(),
            Some(id) => {
                bad.push(MalformedLine {
                    line,
                    reason: format!("instance_id {id:?} is not usable as a directory name"),
                });
                continue;
            }
            None => {
                bad.push(MalformedLine {
                    line,
                    reason: "missing string field instance_id".into(),
                });
                continue;
            }
        };
        let patch = match obj.get("model_patch") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) => None,
            None => {
                bad.push(MalformedLine {
                    line,
                    reason: format!("instance {id}: missing field model_patch"),
                });
                continue;
            }
            Some(_) => {
                bad.push(MalformedLine {
                    line,
                    reason: format!("instance {id}: model_patch is not a string or null"),
                });
                continue;
            }
        };
        if let Some(first) = seen.get(&id) {
            bad.push(MalformedLine {
                line,
                reason: format!(
                    "instance {id}: duplicate prediction (first on line {first}); ignored"
                ),
            });
            continue;
        }
        seen.insert(id.clone(), line);
        let model = obj
            .get("model_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        preds.push(Prediction {
            instance_id: id,
            model_name_or_path: model,
            model_patch: patch,
            line,
        });
    }
    Ok((preds, bad))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && !id.contains('/')
        && !id.contains('\0')
        && id != "."
        && id != ".."
        && !id.starts_with('.')
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
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
    write_atomic(&dir.join("report.json"), &json)
}

/// A previous report worth keeping (graded, or the agent's own patch failure). Infrastructure
/// failures are retried on resume.
pub fn existing_report(dir: &Path) -> Option<InstanceReport> {
    let text = std::fs::read_to_string(dir.join("report.json")).ok()?;
    let r = InstanceReport::from_json(&serde_json::from_str(&text).ok()?)?;
    (!r.infra_failure).then_some(r)
}

fn bar(len: usize, enabled: bool, what: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{what} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{msg}}"
    )) {
        pb.set_style(style);
    }
    pb
}

/// How a batch runs its sandboxes: `workers` of them do their work (the test runs) at a time,
/// while one more job may already prepare its tree and create its sandbox, so creation (tens of
/// milliseconds of mounts and namespaces) overlaps a running test instead of preceding it; and
/// teardowns (killing the sandbox's processes, unmounting) run in the background, so no verdict
/// waits for them. The batch waits for every teardown before it returns.
struct Pipeline {
    slots: tokio::sync::Semaphore,
    teardowns: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Pipeline {
    fn new(workers: usize) -> Pipeline {
        Pipeline {
            slots: tokio::sync::Semaphore::new(workers.max(1)),
            teardowns: Default::default(),
        }
    }

    /// Jobs in flight: the workers plus the one creating its sandbox ahead.
    fn in_flight(workers: usize) -> usize {
        workers.max(1) + 1
    }

    fn tear_down(&self, sb: Sandbox) {
        let h = tokio::spawn(async move {
            if let Err(e) = sb.teardown().await {
                tracing::warn!("sandbox teardown failed: {e}");
            }
        });
        if let Ok(mut v) = self.teardowns.lock() {
            // Finished ones need no waiting: a long batch keeps only the few in flight.
            v.retain(|h| !h.is_finished());
            v.push(h);
        }
    }

    async fn wait(&self) {
        let handles = self.teardowns.lock().map(|mut v| std::mem::take(&mut *v));
        for h in handles.unwrap_or_default() {
            let _ = h.await;
        }
    }
}

async fn with_sandbox<P: Preparer, T>(
    preparer: &P,
    task: &Task,
    env: &RepoEnv,
    sandbox_opts: &SandboxOptions,
    pipeline: &Pipeline,
    f: impl AsyncFnOnce(&mut Sandbox) -> Result<T, GradeError>,
) -> Result<Result<T, GradeError>, (ErrorKind, String)> {
    let prepared = preparer.prepare(task, env).await?;
    let mut sb = Sandbox::create(&prepared.pristine, prepared.env.as_ref(), sandbox_opts)
        .await
        .map_err(|e| (ErrorKind::Runner, format!("creating the sandbox: {e}")))?;
    // The semaphore is never closed; an error here would be a bug, reported as the runner's.
    let Ok(slot) = pipeline.slots.acquire().await else {
        pipeline.tear_down(sb);
        return Err((ErrorKind::Runner, "worker slots closed".into()));
    };
    let out = f(&mut sb).await;
    drop(slot);
    pipeline.tear_down(sb);
    Ok(out)
}

/// One eval job.
#[derive(Debug, Clone)]
pub struct EvalJob {
    pub task: Task,
    /// `Err` when the task's environment could not be resolved (graded as an env_build error).
    pub env: Result<RepoEnv, String>,
    pub prediction: Prediction,
}

/// Grade every job into `out/<instance_id>/`, `workers` at a time; returns every report
/// (previous ones included when resuming).
pub async fn eval_jobs<P: Preparer>(
    jobs: Vec<EvalJob>,
    out: &Path,
    preparer: &P,
    opts: &BatchOptions,
) -> Vec<InstanceReport> {
    let pb = Arc::new(bar(jobs.len(), opts.progress, "eval"));
    let pipeline = Pipeline::new(opts.workers);
    let pipeline = &pipeline;
    let results = futures::stream::iter(jobs)
        .map(|job| {
            let pb = pb.clone();
            async move {
                let dir = out.join(&job.prediction.instance_id);
                let previous = (!opts.force).then(|| existing_report(&dir)).flatten();
                let r = match previous {
                    // Already graded: kept as it is on disk (not even rewritten).
                    Some(r) => InstanceReport {
                        test_output: std::fs::read_to_string(dir.join("test_output.txt"))
                            .unwrap_or_default(),
                        ..r
                    },
                    None => {
                        let r = eval_one(&job, preparer, opts, pipeline).await;
                        let patch = job.prediction.model_patch.as_deref();
                        if let Err(e) = write_instance(&dir, &r, patch) {
                            tracing::error!("writing the report of {}: {e}", r.instance_id);
                        }
                        r
                    }
                };
                pb.inc(1);
                pb.set_message(format!("{} {:?}", r.instance_id, r.outcome));
                r
            }
        })
        .buffer_unordered(Pipeline::in_flight(opts.workers))
        .collect::<Vec<_>>()
        .await;
    pipeline.wait().await;
    pb.finish_and_clear();
    results
}

async fn eval_one<P: Preparer>(
    job: &EvalJob,
    preparer: &P,
    opts: &BatchOptions,
    pipeline: &Pipeline,
) -> InstanceReport {
    let id = &job.prediction.instance_id;
    let parser_name = job
        .env
        .as_ref()
        .map(|e| e.log_parser.clone())
        .unwrap_or_default();
    let base = InstanceReport::new(id, opts.grade.semantics, &parser_name);
    let patch = job.prediction.model_patch.as_deref();
    if patch.is_none_or(|p| p.trim().is_empty()) && !opts.grade.run_empty_patch {
        let mut r = base;
        r.patch_is_none = patch.is_none();
        r.patch_exists = patch.is_some();
        r.outcome = Outcome::EmptyPatch;
        return r;
    }
    let env = match &job.env {
        Ok(e) => e,
        Err(msg) => return base.fail(ErrorKind::EnvBuild, msg.clone()),
    };
    let graded = with_sandbox(
        preparer,
        &job.task,
        env,
        &opts.sandbox,
        pipeline,
        async |sb: &mut Sandbox| grade_in_sandbox(sb, &job.task, env, patch, &opts.grade).await,
    )
    .await;
    match graded {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => base.fail(ErrorKind::EnvBuild, e.to_string()),
        Err((kind, msg)) => base.fail(kind, msg),
    }
}

/// Validate tasks, `workers` at a time; each result carries its task's index.
pub async fn validate_tasks<P: Preparer>(
    tasks: Vec<(usize, Task, Result<RepoEnv, String>)>,
    preparer: &P,
    opts: &BatchOptions,
) -> Vec<(usize, Validation)> {
    let pb = Arc::new(bar(tasks.len(), opts.progress, "validate"));
    let pipeline = Pipeline::new(opts.workers);
    let pipeline = &pipeline;
    let out = futures::stream::iter(tasks)
        .map(|(i, task, env)| {
            let pb = pb.clone();
            async move {
                let v = validate_one(&task, env, preparer, opts, pipeline).await;
                pb.inc(1);
                pb.set_message(format!(
                    "{} {}",
                    v.instance_id,
                    if v.ok { "ok" } else { "FAILED" }
                ));
                (i, v)
            }
        })
        .buffer_unordered(Pipeline::in_flight(opts.workers))
        .collect::<Vec<_>>()
        .await;
    pipeline.wait().await;
    pb.finish_and_clear();
    out
}

async fn validate_one<P: Preparer>(
    task: &Task,
    env: Result<RepoEnv, String>,
    preparer: &P,
    opts: &BatchOptions,
    pipeline: &Pipeline,
) -> Validation {
    let failed = |msg: String| Validation {
        instance_id: task.instance_id.clone(),
        ok: false,
        problems: vec![msg],
        derived_fail_to_pass: Vec::new(),
        derived_pass_to_pass: Vec::new(),
        new_task: task.f2p().is_empty(),
        before: None,
        gold: None,
    };
    let env = match env {
        Ok(e) => e,
        Err(m) => return failed(format!("environment: {m}")),
    };
    match with_sandbox(
        preparer,
        task,
        &env,
        &opts.sandbox,
        pipeline,
        async |sb: &mut Sandbox| validate_in_sandbox(sb, task, &env, &opts.grade).await,
    )
    .await
    {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => failed(e.to_string()),
        Err((kind, msg)) => failed(format!("{}: {msg}", kind.as_str())),
    }
}

/// The semantics name as written in reports and accepted by `--semantics`.
pub fn semantics_name(s: Semantics) -> &'static str {
    match s {
        Semantics::Classic => "classic",
        Semantics::Swebench5 => "swebench5",
    }
}

/// Where a task's files go.
pub fn instance_dir(out: &Path, id: &str) -> PathBuf {
    out.join(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictions_bad_lines_are_reported_and_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("preds.jsonl");
        std::fs::write(
            &p,
            concat!(
                r#"{"instance_id":"a","model_name_or_path":"m","model_patch":"diff"}"#,
                "\n",
                "{broken\n",
                r#"{"instance_id":"b","model_patch":null}"#,
                "\n",
                r#"{"model_patch":"x"}"#,
                "\n",
                r#"{"instance_id":"../x","model_patch":"x"}"#,
                "\n",
                r#"{"instance_id":"a","model_patch":"again"}"#,
                "\n",
                r#"{"instance_id":"c","model_patch":5}"#,
                "\n",
            ),
        )
        .unwrap();
        let (preds, bad) = load_predictions(&p).unwrap();
        assert_eq!(
            preds
                .iter()
                .map(|p| p.instance_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(preds[1].model_patch, None);
        assert_eq!(
            bad.iter().map(|b| b.line).collect::<Vec<_>>(),
            [2, 4, 5, 6, 7]
        );
        assert!(bad[3].reason.contains("duplicate"));
    }

    #[test]
    fn infra_failures_are_retried_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let r =
            InstanceReport::new("x", Semantics::Classic, "pytest").fail(ErrorKind::Timeout, "slow");
        write_instance(dir.path(), &r, Some("p")).unwrap();
        assert!(existing_report(dir.path()).is_none());
        let r = InstanceReport::new("x", Semantics::Classic, "pytest")
            .fail(ErrorKind::PatchApply, "bad");
        write_instance(dir.path(), &r, Some("p")).unwrap();
        assert_eq!(
            existing_report(dir.path()).unwrap().error_kind,
            Some(ErrorKind::PatchApply)
        );
    }
}
