//! # dojo-rl: reinforcement learning from graded rollouts, on one machine
//!
//! Pipeline position: after **grade**, beside **train**
//! (task → sandbox → agent ⇄ policy → trajectory → grade → curate → train → select).
//! Where SFT (dojo-train) imitates curated trajectories, RL updates the policy on its own
//! graded rollouts: G rollouts per task form a group, each is rewarded by how it stopped and
//! what the grader said, advantages compare it with its group mates, and a PPO-clip loss on
//! the agent's own tokens moves the weights. The recipe and its defaults are SWE-Master's
//! (leave-one-out advantages, clip-higher 0.2 / 0.28, no KL, forced submission at α = 0.5,
//! infrastructure failures masked); SWE-World's (α = 0) and DeepSWE's (GRPO, `masked = drop`)
//! are options.
//!
//! Reward shaping, advantages and token streams are dojo-reward's (shared with `dojo env
//! serve`, which needs no ML stack); this crate is the part that trains:
//!
//! - [`loss`]: PPO-clip with clip-higher, truncated importance correction, optional KL and
//!   entropy terms, three aggregation modes; pinned against PyTorch on fixtures.
//! - [`update`]: one policy update on dojo-train's trainable model (full or LoRA): forward,
//!   token logprobs of the sampled tokens, loss, backward, clipping, AdamW.
//! - [`run`]: the loop (tasks → rollouts → shaping → advantages → updates → metrics →
//!   checkpoints), its run directory and resume; rollouts come from an [`run::EpisodeSource`].
//! - [`metrics`]: the run directory's file names and what they hold (manifest, metrics lines,
//!   checkpoint state), written by the loop and read by the report.
//! - [`agent_env`]: the environment of `dojo rl`: the agent in sandboxes (or a simulated world)
//!   through `dojo rollout`'s path, sampling from the trainer's current weights in the embedded
//!   engine.
//! - [`config`]: the `rl.toml` settings, the flags over them, their validation and the hash that
//!   ties a run directory to them.
//! - [`report`]: the run's HTML page.

pub mod agent_env;
pub mod config;
pub mod loss;
pub mod metrics;
pub mod report;
pub mod run;
pub mod update;

pub use config::RlConfig;
pub use loss::{Aggregation, LossConfig};

/// Version of the files this crate writes (`rl_config.json`, metrics lines, rollout groups).
/// Bump on any field change.
pub const RL_SCHEMA_VERSION: u32 = 1;

/// RL failures; configuration errors name the field.
#[derive(Debug, thiserror::Error)]
pub enum RlError {
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    /// The same, with the error that refused the setting.
    #[error("{field}: {source}")]
    ConfigFrom {
        field: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The same, with what in the setting was refused (`what`: the file, the task).
    #[error("{field}: {what}: {source}")]
    ConfigAt {
        field: String,
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Shaping, advantages or token streams refused a rollout or a setting.
    #[error(transparent)]
    Reward(#[from] dojo_reward::RewardError),
    /// An episode could not be had: rollouts failed as a whole (infrastructure), a group came
    /// back short.
    #[error("{0}")]
    Episode(String),
    /// The same, with the error that stopped the rollouts: `what` was being done.
    #[error("{what}: {source}")]
    Rollouts {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid: {source}")]
    InvalidState {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error(transparent)]
    Train(#[from] dojo_train::TrainError),
    #[error("model: {0}")]
    Candle(#[from] candle_core::Error),
}

impl RlError {
    pub fn config(field: &str, reason: impl std::fmt::Display) -> RlError {
        RlError::Config {
            field: field.to_string(),
            reason: reason.to_string(),
        }
    }

    /// [`RlError::ConfigFrom`]: `source` refused `field`.
    pub fn config_from(
        field: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> RlError {
        RlError::ConfigFrom {
            field: field.to_string(),
            source: source.into(),
        }
    }

    /// Maps an I/O error on `path` to [`RlError::Io`] (for `map_err`).
    pub(crate) fn io(path: &std::path::Path) -> impl Fn(std::io::Error) -> RlError + '_ {
        move |source| RlError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
