//! Many instances at once: `dojo eval` (predictions → per-instance reports + run summary,
//! resumable, concurrent) and `dojo validate` (test patch alone vs gold patch), with progress.
//!
//! Tasks are prepared (pristine tree, Python environment) by the caller's
//! [`dojo_task::Preparer`], so a caller that grades several batches prepares each task once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dojo_sandbox::{Sandbox, SandboxOptions};
use dojo_task::{Preparer, RepoEnv, Task, TaskError};
use futures::StreamExt;

use crate::Semantics;
pub use crate::predictions::Prediction;
use crate::report::Validation;
use crate::report::{ErrorKind, InstanceReport, Verdict};
pub use crate::report::{existing_report, write_instance};
use crate::run::{GradeOptions, grade_in_sandbox, validate_in_sandbox};

/// Options shared by eval and validate.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    pub workers: usize,
    pub grade: GradeOptions,
    pub sandbox: SandboxOptions,
    /// Re-grade instances that already have a report.
    pub force: bool,
    /// Where progress goes: a count of finished instances (quiet by default).
    pub progress: dojo_progress::Progress,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            workers: 1,
            grade: GradeOptions::default(),
            sandbox: SandboxOptions::default(),
            force: false,
            progress: dojo_progress::Progress::quiet(),
        }
    }
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

/// Why a grading sandbox could not be had; [`SetupError::kind`] says whose fault it is.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error("{0}")]
    Prepare(#[source] TaskError),
    #[error("creating the sandbox: {0}")]
    Create(#[source] dojo_sandbox::SandboxError),
    /// The semaphore is never closed: this would be a bug, reported as the runner's.
    #[error("worker slots closed")]
    SlotsClosed,
}

impl SetupError {
    fn kind(&self) -> ErrorKind {
        match self {
            SetupError::Prepare(_) => ErrorKind::EnvBuild,
            SetupError::Create(_) | SetupError::SlotsClosed => ErrorKind::Runner,
        }
    }
}

async fn with_sandbox<T>(
    preparer: &Preparer,
    task: &Task,
    env: &RepoEnv,
    sandbox_opts: &SandboxOptions,
    pipeline: &Pipeline,
    f: impl AsyncFnOnce(&mut Sandbox) -> T,
) -> Result<T, SetupError> {
    let prepared = preparer
        .prepare(task, env)
        .await
        .map_err(SetupError::Prepare)?;
    // An eval script's reinstall writes to the venv: a private copy-on-write view of it for
    // this grading sandbox only (see `dojo_task::pre_test_commands`), with the network when the
    // env lets the reinstall reach the package index.
    let reinstalls = !env.pre_test.is_empty();
    let opts = SandboxOptions {
        writable_venv: sandbox_opts.writable_venv || reinstalls,
        ..sandbox_opts.clone()
    };
    let mut venv = prepared.env.clone();
    venv.runtime.network |= env.reinstall_network && reinstalls;
    let mut sb = Sandbox::create(&prepared.pristine, Some(&venv), &opts)
        .await
        .map_err(SetupError::Create)?;
    let Ok(slot) = pipeline.slots.acquire().await else {
        pipeline.tear_down(sb);
        return Err(SetupError::SlotsClosed);
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
    pub env: Result<RepoEnv, Arc<TaskError>>,
    pub prediction: Prediction,
}

/// The selected tasks of a `dojo validate` or `dojo eval` run, with what grading them needs.
pub struct TaskSet {
    pub tasks: Vec<Task>,
    /// Every instance id of the task file, selected or not.
    pub all_ids: std::collections::BTreeSet<String>,
    pub registry: dojo_task::EnvRegistry,
    pub opts: BatchOptions,
    pub preparer_opts: dojo_task::PrepareOptions,
}

impl TaskSet {
    /// Load `file` strictly, select `instances` (all when empty), check that the git-based
    /// tasks' repositories are under `repos`, and read the environment specs (`envs` over the
    /// embedded ones). `opts` are the default options; the caller sets its own.
    pub fn load(
        file: &Path,
        instances: &[String],
        repos: Option<&Path>,
        envs: Option<&Path>,
    ) -> Result<TaskSet, TaskError> {
        let tasks = dojo_task::load_tasks(file)?;
        let all_ids = tasks.iter().map(|t| t.instance_id.clone()).collect();
        let tasks = dojo_task::select_instances(tasks, instances, file)?;
        dojo_task::check_repos(&tasks, repos)?;
        Ok(TaskSet {
            tasks,
            all_ids,
            registry: dojo_task::EnvRegistry::with_dir(envs)?,
            opts: BatchOptions::default(),
            preparer_opts: dojo_task::PrepareOptions {
                repos_dir: repos.map(Path::to_path_buf),
            },
        })
    }
}

impl TaskSet {
    /// The `validate` jobs: each task with its index (the order of the table) and its
    /// environment, or why it has none.
    pub fn validation_jobs(&self) -> Vec<(usize, Task, Result<RepoEnv, TaskError>)> {
        let with_env = |(i, t): (usize, &Task)| (i, t.clone(), self.registry.resolve(t));
        self.tasks.iter().enumerate().map(with_env).collect()
    }

    /// Validate every task ([`validate_tasks`]) with these options, but those `kept` holds (an
    /// earlier run's validations, by instance id, taken as they are), `on_done` seeing each
    /// new validation as it finishes; returns them all in the task file's order.
    pub async fn validate(
        &self,
        kept: &std::collections::HashMap<String, Validation>,
        on_done: &(dyn Fn(&Validation) + Sync),
    ) -> Vec<Validation> {
        let preparer = Preparer::new(self.preparer_opts.clone());
        let (old, new): (Vec<_>, Vec<_>) = self
            .validation_jobs()
            .into_iter()
            .partition(|(_, t, _)| kept.contains_key(&t.instance_id));
        let mut out = validate_tasks(new, &preparer, &self.opts, on_done).await;
        out.extend(
            old.into_iter()
                .filter_map(|(i, t, _)| Some((i, kept.get(&t.instance_id)?.clone()))),
        );
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, v)| v).collect()
    }

    /// Grade `jobs` into `out` ([`eval_jobs`]) with these options.
    pub async fn eval(&self, jobs: Vec<EvalJob>, out: &Path) -> Vec<InstanceReport> {
        let preparer = Preparer::new(self.preparer_opts.clone());
        eval_jobs(jobs, out, &preparer, &self.opts).await
    }
}

/// One job per task of `tasks` that has a prediction in `preds`, with its environment from
/// `registry` (an unresolvable one is graded as an env_build error).
pub fn jobs_for(
    tasks: &[Task],
    registry: &dojo_task::EnvRegistry,
    preds: &[Prediction],
) -> Vec<EvalJob> {
    let by_id: std::collections::BTreeMap<&str, &Prediction> =
        preds.iter().map(|p| (p.instance_id.as_str(), p)).collect();
    tasks
        .iter()
        .filter_map(|t| {
            let p = by_id.get(t.instance_id.as_str())?;
            Some(EvalJob {
                task: t.clone(),
                env: registry.resolve(t).map_err(Arc::new),
                prediction: (*p).clone(),
            })
        })
        .collect()
}

/// The line `dojo eval` prints when some of `jobs` already have a report under `out` (kept;
/// `--force` regrades them); `None` when none has.
pub fn resume_line(jobs: &[EvalJob], out: &Path) -> Option<String> {
    let done = already_graded(jobs, out);
    (done > 0).then(|| {
        format!(
            "resuming: {done} of {} instance(s) already graded in {} (kept; --force regrades them)",
            jobs.len(),
            out.display()
        )
    })
}

/// How many of `jobs` already have a report under `out` (kept when resuming).
pub fn already_graded(jobs: &[EvalJob], out: &Path) -> usize {
    jobs.iter()
        .filter(|j| existing_report(&instance_dir(out, &j.prediction.instance_id)).is_some())
        .count()
}

/// Grade every job into `out/<instance_id>/`, `workers` at a time; returns every report
/// (previous ones included when resuming).
pub async fn eval_jobs(
    jobs: Vec<EvalJob>,
    out: &Path,
    preparer: &Preparer,
    opts: &BatchOptions,
) -> Vec<InstanceReport> {
    let pb = &opts.progress;
    pb.start("eval", jobs.len() as u64, 0);
    let pipeline = Pipeline::new(opts.workers);
    let pipeline = &pipeline;
    let results = futures::stream::iter(jobs)
        .map(|job| {
            async move {
                let dir = instance_dir(out, &job.prediction.instance_id);
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
                pb.advance(1, &format!("{} {:?}", r.instance_id, r.outcome));
                r
            }
        })
        .buffer_unordered(Pipeline::in_flight(opts.workers))
        .collect::<Vec<_>>()
        .await;
    pipeline.wait().await;
    pb.finish("");
    results
}

async fn eval_one(
    job: &EvalJob,
    preparer: &Preparer,
    opts: &BatchOptions,
    pipeline: &Pipeline,
) -> InstanceReport {
    let id = &job.prediction.instance_id;
    let parser_name = job.env.as_ref().map_or("", |e| e.log_parser.name());
    let base = InstanceReport::new(id, opts.grade.semantics, parser_name);
    let patch = job.prediction.model_patch.as_deref();
    if patch.is_none_or(|p| p.trim().is_empty()) && !opts.grade.run_empty_patch {
        let mut r = base;
        r.patch_is_none = patch.is_none();
        r.patch_exists = patch.is_some();
        r.outcome = Verdict::EmptyPatch;
        return r;
    }
    let env = match &job.env {
        Ok(e) => e,
        Err(e) => return base.fail(ErrorKind::EnvBuild, e.to_string()),
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
        Ok(r) => r,
        // The report is data written to report.json: the cause goes in as text there.
        Err(e) => base.fail(e.kind(), e.to_string()),
    }
}

/// Validate tasks, `workers` at a time; each result carries its task's index. `on_done` sees
/// each validation as soon as it is finished (so a caller can keep it before the others end).
/// A task whose environment could not be resolved comes with the error (usually a
/// [`TaskError`]) instead, and fails validation with it.
pub async fn validate_tasks<E: std::fmt::Display + Send>(
    tasks: Vec<(usize, Task, Result<RepoEnv, E>)>,
    preparer: &Preparer,
    opts: &BatchOptions,
    on_done: &(dyn Fn(&Validation) + Sync),
) -> Vec<(usize, Validation)> {
    let pb = &opts.progress;
    pb.start("validate", tasks.len() as u64, 0);
    let pipeline = Pipeline::new(opts.workers);
    let pipeline = &pipeline;
    let out = futures::stream::iter(tasks)
        .map(|(i, task, env)| async move {
            let v = validate_one(&task, env, preparer, opts, pipeline).await;
            on_done(&v);
            pb.advance(
                1,
                &format!("{} {}", v.instance_id, if v.ok { "ok" } else { "FAILED" }),
            );
            (i, v)
        })
        .buffer_unordered(Pipeline::in_flight(opts.workers))
        .collect::<Vec<_>>()
        .await;
    pipeline.wait().await;
    pb.finish("");
    out
}

async fn validate_one(
    task: &Task,
    env: Result<RepoEnv, impl std::fmt::Display>,
    preparer: &Preparer,
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
        total_s: None,
        runs_s: None,
        before: None,
        gold: None,
    };
    let started = std::time::Instant::now();
    let env = match env {
        Ok(e) => e,
        Err(m) => return failed(format!("environment: {m}")),
    };
    let v = match with_sandbox(
        preparer,
        task,
        &env,
        &opts.sandbox,
        pipeline,
        async |sb: &mut Sandbox| {
            let runs = std::time::Instant::now();
            let mut v = validate_in_sandbox(sb, task, &env, &opts.grade).await;
            v.runs_s = Some(runs.elapsed().as_secs_f64());
            v
        },
    )
    .await
    {
        Ok(v) => v,
        Err(e) => failed(format!("{}: {e}", e.kind().as_str())),
    };
    Validation {
        total_s: Some(started.elapsed().as_secs_f64()),
        ..v
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

    #[test]
    fn resumed_jobs_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let r = InstanceReport::new("x", Semantics::Classic, "pytest")
            .fail(ErrorKind::PatchApply, "bad");
        write_instance(&instance_dir(dir.path(), "x"), &r, Some("p")).unwrap();
        let job = |id: &str| EvalJob {
            task: Task::from_row(
                serde_json::json!({
                    "instance_id": id,
                    "repo": "o/n",
                    "base_commit": "abc",
                    "problem_statement": "p",
                    "patch": "diff --git a/x.py b/x.py\n",
                })
                .as_object()
                .cloned()
                .unwrap(),
                &dojo_task::Location {
                    file: "x".into(),
                    unit: "line",
                    index: 1,
                },
            )
            .unwrap(),
            env: Err(Arc::new(TaskError::Repos("none".into()))),
            prediction: Prediction {
                instance_id: id.into(),
                model_name_or_path: "m".into(),
                model_patch: Some("p".into()),
                line: 1,
            },
        };
        let jobs = [job("x"), job("y")];
        assert_eq!(already_graded(&jobs, dir.path()), 1);
        let line = resume_line(&jobs, dir.path()).unwrap();
        assert!(
            line.starts_with("resuming: 1 of 2 instance(s) already graded in "),
            "{line}"
        );
        assert_eq!(resume_line(&jobs[1..], dir.path()), None);
    }
}
