//! # dojo-rollout: run agents on tasks, k times, and keep every trajectory
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade: **rollout** drives them
//! all, and its output (one JSONL store per run) feeds curate → train → select.
//!
//! - [`store`]: the crash-safe append-only JSONL store keyed by (task id, sample index); `kill -9`
//!   and the same command again resumes with nothing lost, duplicated or corrupted.
//! - [`engine`]: tasks × K samples through a [`engine::Runner`], with a sandbox limit, progress and
//!   resume.
//! - [`summary`]: the end-of-run table, `summary.json`, SWE-bench predictions export.

pub mod engine;
pub mod store;
pub mod summary;

pub use engine::{EngineConfig, Job, RolloutRecord, RunStats, Runner, plan, run_jobs};
pub use store::{Key, Keyed, Recovery, Store, StoreError};
pub use summary::{Outcome, Prediction, Summary, export_predictions, render_table};
