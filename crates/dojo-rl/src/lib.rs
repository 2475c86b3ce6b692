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
//! - [`shaping`]: reward by stop reason, a pure function a verl reward function can call too.
//! - [`advantage`]: RLOO, GRPO and Dr. GRPO over a group's unmasked members.
//! - [`loss`]: PPO-clip with clip-higher, truncated importance correction, optional KL and
//!   entropy terms, three aggregation modes; pinned against PyTorch on fixtures.
//! - [`update`]: one policy update on dojo-train's trainable model (full or LoRA): forward,
//!   token logprobs of the sampled tokens, loss, backward, clipping, AdamW.
//! - [`episode`]: a recorded rollout as token streams (the ids the policy saw and sampled, with
//!   their logprobs); a rollout without them is an error.
//! - [`group`]: from graded groups of rollouts to training samples and the step's reward
//!   statistics.
//! - [`run`]: the loop (tasks → rollouts → shaping → advantages → updates → metrics →
//!   checkpoints), its run directory and resume; rollouts come from an [`run::Environment`].
//! - [`config`]: the `rl.toml` settings, their validation and the hash that ties a run
//!   directory to them.
//!
//! Feature `train` (default): [`loss`], [`update`], [`run`] and [`config`], which need candle
//! and dojo-train. Without it the crate is shaping, advantages and token streams only, which is
//! what `dojo env serve` (dojo-env) shares with the loop, without the ML stack.
//!
//! The environment that runs the agent in sandboxes with the embedded engine belongs in
//! dojo-cli (`dojo rl`), which owns the sandboxes, the engine and the rollout path.

pub mod advantage;
#[cfg(feature = "train")]
pub mod config;
pub mod episode;
pub mod group;
#[cfg(feature = "train")]
pub mod loss;
#[cfg(feature = "train")]
pub mod report;
#[cfg(feature = "train")]
pub mod run;
pub mod shaping;
#[cfg(feature = "train")]
pub mod update;

pub use advantage::{AdvantageConfig, Estimator};
#[cfg(feature = "train")]
pub use config::RlConfig;
#[cfg(feature = "train")]
pub use loss::{Aggregation, LossConfig};
pub use shaping::{MaskedPolicy, RewardConfig, Shaped, shape, shape_trajectory};

use dojo_trajectory::StopReason;

/// Version of the files this crate writes (`rl_config.json`, metrics lines, rollout groups).
/// Bump on any field change.
pub const RL_SCHEMA_VERSION: u32 = 1;

/// RL failures; configuration errors name the field.
#[derive(Debug, thiserror::Error)]
pub enum RlError {
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    #[error(
        "a rollout that stopped with `{0}` was not graded: its reward depends on the grader's verdict"
    )]
    Ungraded(StopReason),
    #[error("{0}")]
    Episode(String),
    #[error("{path}: {reason}")]
    Io {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("sample {index}: {reason}")]
    Sample { index: usize, reason: String },
    #[cfg(feature = "train")]
    #[error(transparent)]
    Train(#[from] dojo_train::TrainError),
    #[cfg(feature = "train")]
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
}
