//! Reward shaping: what a graded rollout is worth to the policy gradient, decided by how it
//! stopped.
//!
//! The rules are SWE-Master's (and SWE-World's with `budget_alpha = 0`):
//! - `submitted`: the grader's verdict, 1 or 0;
//! - a budget stop (`max_steps`, `max_tokens`, `timeout`): the rollout was submitted on the
//!   agent's behalf ("forced submission") and its workspace graded; the verdict is scaled by
//!   `budget_alpha` (0.5), so finishing in budget is worth more than running out of it;
//! - `format_errors`: 0, whatever the workspace holds (the agent lost the conversation);
//! - an infrastructure stop (`llm_error`, `env_error`, or a rollout flagged as an
//!   infrastructure failure): masked. It says nothing about the agent, so it carries no loss;
//!   with `masked = keep` it stays in its group with reward 0 and mask 0 (its group mates'
//!   baselines ignore it), with `masked = drop` it is removed before grouping (rllm's compact
//!   filtering).
//!
//! [`shape`] is a pure function of (stop reason, grader verdict, configuration) so that every
//! trainer that consumes dojo rollouts (the one-machine loop here, a verl reward function)
//! computes the same number for the same rollout.

use dojo_trajectory::{StopReason, Trajectory};
use serde::{Deserialize, Serialize};

use crate::RewardError;

/// What happens to masked (infrastructure) rollouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MaskedPolicy {
    /// Kept in the group with reward 0 and an all-zero loss mask.
    #[default]
    Keep,
    /// Removed before grouping.
    Drop,
}

/// Shaping settings (`[reward]` in `rl.toml`); the defaults are SWE-Master's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    /// Multiplier of the graded verdict after a budget stop (SWE-Master 0.5, SWE-World 0).
    pub budget_alpha: f64,
    /// Reward of a rollout that stopped on repeated format errors.
    pub format_error_reward: f64,
    pub masked: MaskedPolicy,
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            budget_alpha: 0.5,
            format_error_reward: 0.0,
            masked: MaskedPolicy::Keep,
        }
    }
}

impl RewardConfig {
    /// Range checks; errors name the field.
    pub fn validate(&self) -> Result<(), RewardError> {
        if !(0.0..=1.0).contains(&self.budget_alpha) {
            return Err(RewardError::config(
                "reward.budget_alpha",
                format!("must be in [0, 1], got {}", self.budget_alpha),
            ));
        }
        if !self.format_error_reward.is_finite() {
            return Err(RewardError::config(
                "reward.format_error_reward",
                "must be a finite number",
            ));
        }
        Ok(())
    }
}

/// A rollout's shaped reward.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shaped {
    /// What the advantage estimator sees (0 when masked).
    pub reward: f64,
    /// The grader's verdict before shaping (1/0), `None` when not graded or not used.
    pub raw_reward: Option<f64>,
    /// No loss on this rollout (infrastructure failure).
    pub masked: bool,
}

/// Shaped reward of a rollout that stopped with `stop`, whose workspace the grader judged
/// `resolved` (`None`: not graded). `infrastructure` marks a rollout flagged as an
/// infrastructure failure whatever its stop reason.
///
/// Errors when a rollout whose reward depends on its grade (submitted or budget-stopped, not
/// infrastructure) was not graded: scoring it 0 would punish the agent for a missing grader.
pub fn shape(
    stop: StopReason,
    infrastructure: bool,
    resolved: Option<bool>,
    cfg: &RewardConfig,
) -> Result<Shaped, RewardError> {
    if infrastructure || stop.is_infrastructure() {
        return Ok(Shaped {
            reward: 0.0,
            raw_reward: None,
            masked: true,
        });
    }
    let verdict = || {
        resolved
            .map(verdict_value)
            .ok_or(RewardError::Ungraded(stop))
    };
    let (reward, raw) = match stop {
        StopReason::Submitted => {
            let v = verdict()?;
            (v, Some(v))
        }
        s if s.is_budget() => {
            let v = verdict()?;
            (v * cfg.budget_alpha, Some(v))
        }
        StopReason::FormatErrors => (cfg.format_error_reward, resolved.map(verdict_value)),
        // Infrastructure stops returned above; every other reason is listed.
        _ => (0.0, None),
    };
    Ok(Shaped {
        reward,
        raw_reward: raw,
        masked: false,
    })
}

fn verdict_value(resolved: bool) -> f64 {
    if resolved { 1.0 } else { 0.0 }
}

/// [`shape`] applied to a recorded trajectory (its stop reason, infrastructure flag and
/// `resolved`).
pub fn shape_trajectory(t: &Trajectory, cfg: &RewardConfig) -> Result<Shaped, RewardError> {
    let resolved = t
        .resolved
        .or_else(|| t.reward.map(|r| r >= 1.0))
        .filter(|_| t.is_graded());
    shape(t.stop_reason, t.infra_failure, resolved, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(stop: StopReason, resolved: Option<bool>) -> Shaped {
        shape(stop, false, resolved, &RewardConfig::default()).unwrap()
    }

    #[test]
    fn submitted_is_the_verdict() {
        assert_eq!(s(StopReason::Submitted, Some(true)).reward, 1.0);
        assert_eq!(s(StopReason::Submitted, Some(false)).reward, 0.0);
        assert_eq!(s(StopReason::Submitted, Some(true)).raw_reward, Some(1.0));
    }

    #[test]
    fn budget_stops_are_scaled_by_alpha() {
        for stop in [
            StopReason::MaxSteps,
            StopReason::MaxTokens,
            StopReason::Timeout,
        ] {
            let x = s(stop, Some(true));
            assert_eq!((x.reward, x.raw_reward, x.masked), (0.5, Some(1.0), false));
            assert_eq!(s(stop, Some(false)).reward, 0.0);
        }
        let swe_world = RewardConfig {
            budget_alpha: 0.0,
            ..RewardConfig::default()
        };
        let x = shape(StopReason::MaxSteps, false, Some(true), &swe_world).unwrap();
        assert_eq!((x.reward, x.raw_reward), (0.0, Some(1.0)));
    }

    #[test]
    fn format_errors_score_zero_even_when_resolved() {
        let x = s(StopReason::FormatErrors, Some(true));
        assert_eq!((x.reward, x.masked), (0.0, false));
        assert_eq!(s(StopReason::FormatErrors, None).reward, 0.0);
    }

    #[test]
    fn infrastructure_is_masked() {
        for stop in [StopReason::LlmError, StopReason::EnvError] {
            let x = s(stop, Some(true));
            assert_eq!((x.reward, x.raw_reward, x.masked), (0.0, None, true));
        }
        // A rollout flagged as an infrastructure failure is masked whatever its stop.
        let x = shape(
            StopReason::Submitted,
            true,
            Some(true),
            &RewardConfig::default(),
        )
        .unwrap();
        assert!(x.masked);
    }

    #[test]
    fn ungraded_submission_is_an_error_not_a_zero() {
        let e = shape(StopReason::Submitted, false, None, &RewardConfig::default()).unwrap_err();
        assert!(e.to_string().contains("submitted"), "{e}");
        assert!(matches!(
            shape(StopReason::MaxSteps, false, None, &RewardConfig::default()),
            Err(RewardError::Ungraded(StopReason::MaxSteps))
        ));
    }

    #[test]
    fn validation_names_the_field() {
        let bad = RewardConfig {
            budget_alpha: 1.5,
            ..RewardConfig::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("reward.budget_alpha"), "{e}");
        assert!(RewardConfig::default().validate().is_ok());
    }

    #[test]
    fn toml_round_trip_and_unknown_fields() {
        let c: RewardConfig = toml::from_str("budget_alpha = 0.0\nmasked = \"drop\"").unwrap();
        assert_eq!(c.budget_alpha, 0.0);
        assert_eq!(c.masked, MaskedPolicy::Drop);
        let e = toml::from_str::<RewardConfig>("budget_alfa = 0.0").unwrap_err();
        assert!(e.to_string().contains("budget_alfa"), "{e}");
    }
}
