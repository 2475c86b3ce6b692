//! The error of a rollout run ([`RolloutError`]): loading tasks, building the policy's backends,
//! the run directory, merging shards.

use std::path::PathBuf;

/// A cause kept as it was: the policy's backends fail with the errors of several crates.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("tasks: {0}")]
    Tasks(#[source] dojo_task::TaskError),
    /// The policy cannot be used as given (the message says why; there is no underlying error).
    #[error("policy: {0}")]
    Policy(String),
    /// Building what the policy needs failed: `what` was being done.
    #[error("policy: {what}{}{source}", if what.is_empty() { "" } else { ": " })]
    PolicySetup {
        what: String,
        #[source]
        source: BoxError,
    },
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: BoxError,
    },
    #[error("merging shards: {0}")]
    Merge(String),
    #[error("merging shards: {0}")]
    MergeRead(#[source] dojo_trajectory::TrajectoryError),
}

impl RolloutError {
    /// [`RolloutError::PolicySetup`] with no more context than the cause's own message.
    pub fn policy(source: impl Into<BoxError>) -> Self {
        RolloutError::PolicySetup {
            what: String::new(),
            source: source.into(),
        }
    }

    /// [`RolloutError::PolicySetup`] while doing `what`.
    pub fn policy_in(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        RolloutError::PolicySetup {
            what: what.into(),
            source: source.into(),
        }
    }
}
