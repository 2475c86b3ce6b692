//! The rollout scheduler: tasks × K samples through a [`Runner`], resumable, bounded, visible.
//!
//! The scheduler knows nothing about sandboxes or models: a [`Runner`] turns one [`Job`] into one
//! finished, graded record (never an error: infrastructure failures are records too, flagged as
//! such). It schedules the jobs the store does not hold yet, caps how many run at once (one
//! job holds one sandbox, so this *is* the sandbox limit; LLM calls have their own limit, see
//! [`crate::policy::LimitedBackend`]), writes each record durably the moment it finishes, and shows progress.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::store::{Key, Keyed, Store};
use crate::summary::SampleOutcome;
use dojo_rundir::RunDirError;

/// One unit of work: sample `sample_index` of task `task_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Position of the task in the task list the runner was built from.
    pub task_index: usize,
    pub task_id: String,
    pub sample_index: u32,
}

impl Job {
    pub fn key(&self) -> Key {
        Key {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
        }
    }
}

/// A stored record the scheduler can summarise.
pub trait RolloutRecord: Keyed + Clone + Send + Sync + 'static {
    fn outcome(&self) -> SampleOutcome;
}

/// Runs one job to a finished record.
///
/// **Execution model.** [`run_jobs`] shares one runner (an `Arc`) among up to
/// [`SchedulerConfig::sandboxes`] jobs at once, each in its own tokio task on the caller's
/// runtime, so `run` must be `Send` and safe to call concurrently. Jobs whose key the store
/// already holds are not run (resume); the others start in plan order and finish in any order,
/// and the scheduler appends each record to the store as its job finishes. A `run` that panics
/// does not stop the others: the scheduler records [`Runner::infra_failure`] for its job.
pub trait Runner: Send + Sync + 'static {
    type Rec: RolloutRecord;
    /// Run, grade and return the record. Must not fail: an infrastructure problem becomes a record
    /// with its infrastructure flag set, so it is kept, counted and never scored as the model's.
    fn run(&self, job: Job) -> impl Future<Output = Self::Rec> + Send;
    /// The record for a job whose runner panicked or was lost.
    fn infra_failure(&self, job: &Job, message: String) -> Self::Rec;
}

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Samples per task (K).
    pub samples: u32,
    /// Jobs (hence sandboxes) running at once.
    pub sandboxes: usize,
    /// Where progress goes: the count of finished jobs with running / resolved / infrastructure
    /// error counts, and one event line per finished job. Quiet by default.
    pub progress: dojo_progress::Progress,
    /// Label shown on the progress line.
    pub label: String,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            samples: 1,
            sandboxes: 2,
            progress: dojo_progress::Progress::quiet(),
            label: "rollout".into(),
        }
    }
}

/// What one scheduler invocation did (the full picture is in the store).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Jobs in the plan (tasks × K).
    pub planned: usize,
    /// Already in the store when we started (resumed).
    pub skipped: usize,
    /// Run and stored by this invocation.
    pub ran: usize,
}

/// Every (task, sample) pair in a stable order: sample-major, so that with K > 1 each task gets a
/// first sample before any gets a second (an interrupted run is then useful at K = 1).
pub fn plan(task_ids: &[String], samples: u32) -> Vec<Job> {
    let mut jobs = Vec::with_capacity(task_ids.len() * samples as usize);
    for s in 0..samples {
        for (i, t) in task_ids.iter().enumerate() {
            jobs.push(Job {
                task_index: i,
                task_id: t.clone(),
                sample_index: s,
            });
        }
    }
    jobs
}

/// Run every planned job the store does not hold yet.
pub async fn run_jobs<R: Runner>(
    runner: Arc<R>,
    task_ids: &[String],
    store: Arc<Store<R::Rec>>,
    cfg: &SchedulerConfig,
) -> Result<RunStats, RunDirError> {
    let all = plan(task_ids, cfg.samples);
    let planned = all.len();
    let todo: Vec<Job> = all
        .into_iter()
        .filter(|j| !store.contains(&j.key()))
        .collect();
    let skipped = planned - todo.len();
    let progress = Counter::new(cfg, planned as u64, skipped as u64, &store);

    let sem = Arc::new(tokio::sync::Semaphore::new(cfg.sandboxes.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for job in todo {
        let sem = sem.clone();
        let runner = runner.clone();
        let progress = progress.clone();
        set.spawn(async move {
            // The semaphore is never closed, so acquire only fails if it were; treat as a lost job.
            let _permit = sem.acquire_owned().await.ok();
            progress.started();
            // A panicking runner must not take the other jobs down: run it in its own task.
            let inner = {
                let runner = runner.clone();
                let job = job.clone();
                tokio::spawn(async move { runner.run(job).await })
            };
            let rec = match inner.await {
                Ok(rec) => rec,
                Err(e) => runner.infra_failure(&job, format!("runner crashed: {e}")),
            };
            (job, rec)
        });
    }
    let mut ran = 0;
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        let Ok((job, rec)) = joined else { continue };
        let outcome = rec.outcome();
        // A record with another key would break resume accounting: store it under its own key but
        // say so loudly (it is a runner bug).
        if rec.key() != job.key() {
            tracing::error!(job = %job.key(), record = %rec.key(), "runner returned a record for another job");
        }
        match store.append(&rec) {
            Ok(_) => ran += 1,
            Err(e) => {
                tracing::error!("{e}");
                first_err.get_or_insert(e);
            }
        }
        progress.finished(&outcome);
    }
    progress.done();
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(RunStats {
        planned,
        skipped,
        ran,
    })
}

/// The counts behind the progress a run reports (running, resolved, infrastructure errors),
/// shown through the caller's [`dojo_progress::Progress`]: the status beside the count, and
/// one event line per finished job (printed where no bar is drawn).
#[derive(Clone)]
struct Counter {
    progress: dojo_progress::Progress,
    inner: Arc<Counts>,
    label: String,
    total: u64,
}

struct Counts {
    done: AtomicUsize,
    running: AtomicUsize,
    resolved: AtomicUsize,
    infra: AtomicUsize,
    start: Instant,
}

impl Counter {
    fn new<T: RolloutRecord>(
        cfg: &SchedulerConfig,
        total: u64,
        done: u64,
        store: &Store<T>,
    ) -> Self {
        let recs = store.records();
        let resolved = recs.iter().filter(|r| r.outcome().resolved).count();
        let infra = recs.iter().filter(|r| r.outcome().infra_error).count();
        let c = Counter {
            progress: cfg.progress.clone(),
            inner: Arc::new(Counts {
                done: AtomicUsize::new(done as usize),
                running: AtomicUsize::new(0),
                resolved: AtomicUsize::new(resolved),
                infra: AtomicUsize::new(infra),
                start: Instant::now(),
            }),
            label: cfg.label.clone(),
            total,
        };
        c.progress.start(&cfg.label, total, done);
        c.progress.status(&c.message());
        c
    }

    fn message(&self) -> String {
        let c = &self.inner;
        format!(
            "running {} · resolved {} · infra errors {}",
            c.running.load(Ordering::Relaxed),
            c.resolved.load(Ordering::Relaxed),
            c.infra.load(Ordering::Relaxed)
        )
    }

    fn started(&self) {
        self.inner.running.fetch_add(1, Ordering::Relaxed);
        self.progress.status(&self.message());
    }

    fn finished(&self, o: &SampleOutcome) {
        let c = &self.inner;
        c.running.fetch_sub(1, Ordering::Relaxed);
        let done = c.done.fetch_add(1, Ordering::Relaxed) + 1;
        if o.resolved {
            c.resolved.fetch_add(1, Ordering::Relaxed);
        }
        if o.infra_error {
            c.infra.fetch_add(1, Ordering::Relaxed);
        }
        let message = self.message();
        self.progress.advance(1, &message);
        if self.progress.is_quiet() {
            return;
        }
        let verdict = if o.infra_error {
            "INFRA ERROR"
        } else if o.resolved {
            "resolved"
        } else {
            "unresolved"
        };
        self.progress.event(&format!(
            "[{}] {done}/{} {}#{} {verdict} ({}, {} steps) · {message} · {:.0}s",
            self.label,
            self.total,
            o.task_id,
            o.sample_index,
            o.stop_reason,
            o.steps,
            c.start.elapsed().as_secs_f64()
        ));
    }

    fn done(&self) {
        self.progress.finish(&self.message());
    }
}
