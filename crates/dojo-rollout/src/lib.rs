//! # dojo-rollout: run agents on tasks, k times, and keep every trajectory
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade: **rollout** drives them
//! all, and its output (one JSONL store per run) feeds curate → train → select.
//!
//! - [`store`]: the crash-safe append-only JSONL store keyed by (task id, sample index); `kill -9`
//!   and the same command again resumes with nothing lost, duplicated or corrupted.
//! - [`scheduler`]: tasks × K samples through a [`scheduler::Runner`], with a sandbox limit,
//!   progress and resume.
//! - [`summary`]: the end-of-run table, `summary.json`, SWE-bench predictions export.
//! - [`policy`]: policy configuration (file or shorthand), scripted backends, the LLM limiter.
//! - [`gold`]: the `gold-replay` script built from a task's gold patch.
//! - [`report`]: the self-contained HTML report of `dojo demo`.
//! - [`run_dir`]: one `dojo rollout` as a library call: its run directory (manifest, store,
//!   summary, predictions).
//! - [`error`]: the error of a rollout run.
//! - [`shard`]: `--shard I/N`, a deterministic split of the task set across machines.
//! - [`merge`]: the merge of the shards' directories, refusing anything missing or duplicated.
//! - [`backends`]: the per-rollout backend of each policy kind.
//! - [`agent_runner`]: the real runner: prepare → sandbox → agent ⇄ policy → diff → grade →
//!   record.
//! - [`prepared`]: a task made ready to run, as the runner hands it to the agent loop, the
//!   backends and the capture.
//! - [`world_capture`]: SWT/SWR training records for world models (`world.jsonl`) from the
//!   real commands and grades of each rollout.
//! - [`world_sim`]: rollouts in a simulated environment (`--execution sim|hybrid|shadow`):
//!   preparation per mode, the routing workspace, the reward model's verdict, drift.

pub mod agent_runner;
pub mod backends;
pub mod demo;
pub mod embedded;
pub mod error;
pub mod gold;
pub mod merge;
pub mod policy;
pub mod prepared;
pub mod report;
pub mod run_dir;
pub mod scheduler;
pub mod shard;
pub mod store;
pub mod summary;
pub mod world_capture;
pub mod world_sim;

pub use scheduler::{Job, RolloutRecord, RunStats, Runner, SchedulerConfig, plan, run_jobs};
pub use store::{Key, Keyed, Recovery, Store};
pub use summary::{Prediction, SampleOutcome, Summary, export_predictions, render_table};
