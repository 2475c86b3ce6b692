//! # dojo-reward: from graded rollouts to the RL training signal
//!
//! Pipeline position: after **grade**, before the RL update
//! (task → sandbox → agent ⇄ policy → trajectory → grade → **reward** → train).
//! Both RL paths use it: `dojo rl`'s loop on this machine (dojo-rl, with candle) and `dojo env
//! serve` for a trainer elsewhere (dojo-env, no ML stack), so a rollout gets one reward and one
//! token stream whichever trainer consumes it.
//!
//! - [`shaping`]: reward by stop reason (SWE-Master's forced submission × α, infrastructure
//!   failures masked), a pure function a verl reward function can call too.
//! - [`advantage`]: RLOO, GRPO and Dr. GRPO over a group's unmasked members.
//! - [`episode`]: a recorded rollout as token streams (the ids the policy saw and sampled, with
//!   their logprobs); a rollout without them is an error.
//! - [`group`]: from graded groups of rollouts to training samples and the step's reward
//!   statistics.
//! - [`judge`]: the verifier's protocol (SWE-Gym's outcome reward model): the judge prompt for
//!   a candidate and p(YES) from the reply, for selection and for its training data alike.

pub mod advantage;
pub mod episode;
pub mod group;
pub mod judge;
pub mod shaping;

pub use advantage::{AdvantageConfig, Estimator};
pub use shaping::{MaskedPolicy, RewardConfig, Shaped, shape, shape_trajectory};

use dojo_trajectory::StopReason;

/// Why a rollout gives no training signal, or a reward setting is invalid: the caller's
/// input (a setting, a rollout record), never retryable as is.
#[derive(Debug, thiserror::Error)]
pub enum RewardError {
    /// A setting out of range; `field` is its `rl.toml` / request name.
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    #[error(
        "a rollout that stopped with `{0}` was not graded: its reward depends on the grader's verdict"
    )]
    Ungraded(StopReason),
    /// A rollout without the token streams training needs.
    #[error("{0}")]
    Episode(String),
    #[error("sample {index}: {reason}")]
    Sample { index: usize, reason: String },
}

impl RewardError {
    pub fn config(field: &str, reason: impl std::fmt::Display) -> RewardError {
        RewardError::Config {
            field: field.to_string(),
            reason: reason.to_string(),
        }
    }
}
