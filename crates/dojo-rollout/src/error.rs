//! The error of a rollout run ([`RolloutError`]): loading tasks, building the policy's backends,
//! the run directory, merging shards.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("tasks: {0}")]
    Tasks(String),
    #[error("policy: {0}")]
    Policy(String),
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("merging shards: {0}")]
    Merge(String),
}
