//! From graded groups of rollouts to training samples: shaping, the masked policy, group
//! advantages, and the step's reward statistics, in one place so that every loop (the
//! one-machine `dojo rl`, a test's bandit, a verl integration) assembles a batch the same way.

use std::collections::BTreeMap;

use dojo_trajectory::StopReason;
use serde::{Deserialize, Serialize};

use crate::RewardError;
use crate::advantage::{AdvantageConfig, AdvantageStats, batch_advantages};
use crate::episode::EpisodeSample;
use crate::shaping::{MaskedPolicy, RewardConfig, shape};

/// One graded rollout of a group, before shaping.
#[derive(Debug, Clone)]
pub struct Episode {
    /// Its token streams (see [`crate::episode`]; the advantage is filled in here).
    pub samples: Vec<EpisodeSample>,
    pub stop: StopReason,
    /// Flagged as an infrastructure failure whatever its stop reason.
    pub infrastructure: bool,
    /// The grader's verdict (`None`: not graded).
    pub resolved: Option<bool>,
}

/// Reward statistics of one step's batch.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BatchStats {
    pub episodes: usize,
    pub reward_mean: f64,
    /// Share of unmasked episodes the grader judged resolved.
    pub resolved_rate: f64,
    pub masked_share: f64,
    /// Episodes removed before grouping (`masked = drop`).
    pub dropped_masked: usize,
    pub stop_reasons: BTreeMap<String, usize>,
    pub advantage: AdvantageStats,
    /// Mean number of loss tokens per trained episode.
    pub response_len_mean: f64,
}

/// Shape every episode, apply the masked policy, compute advantages per group and return the
/// samples to train on (dropped groups and dropped episodes left out; masked episodes kept
/// with `masked = keep` get an all-zero mask and advantage 0).
pub fn assemble(
    groups: Vec<Vec<Episode>>,
    reward: &RewardConfig,
    adv: &AdvantageConfig,
) -> Result<(Vec<EpisodeSample>, BatchStats), RewardError> {
    let mut stats = BatchStats::default();
    let mut shaped_groups = Vec::new();
    let mut members = Vec::new();
    let (mut reward_sum, mut resolved, mut unmasked, mut masked) = (0.0, 0usize, 0usize, 0usize);
    for group in groups {
        let mut rewards = Vec::new();
        let mut masks = Vec::new();
        let mut eps = Vec::new();
        for mut e in group {
            stats.episodes += 1;
            *stats
                .stop_reasons
                .entry(e.stop.as_str().to_string())
                .or_default() += 1;
            let s = shape(e.stop, e.infrastructure, e.resolved, reward)?;
            if s.masked {
                masked += 1;
                if reward.masked == MaskedPolicy::Drop {
                    stats.dropped_masked += 1;
                    continue;
                }
                for s in &mut e.samples {
                    s.loss_mask.iter_mut().for_each(|m| *m = 0);
                }
            } else {
                unmasked += 1;
                reward_sum += s.reward;
                resolved += usize::from(e.resolved == Some(true));
            }
            rewards.push(s.reward);
            masks.push(s.masked);
            eps.push(e.samples);
        }
        shaped_groups.push((rewards, masks));
        members.push(eps);
    }
    let (advs, astats) = batch_advantages(&shaped_groups, adv);
    let mut out = Vec::new();
    for (g, eps) in advs.into_iter().zip(members) {
        if g.dropped {
            continue;
        }
        for (a, samples) in g.advantages.into_iter().zip(eps) {
            out.extend(
                samples
                    .into_iter()
                    .map(|s| EpisodeSample { advantage: a, ..s }),
            );
        }
    }
    let n = unmasked.max(1) as f64;
    stats.reward_mean = reward_sum / n;
    stats.resolved_rate = resolved as f64 / n;
    stats.masked_share = masked as f64 / stats.episodes.max(1) as f64;
    stats.advantage = astats;
    let trained: Vec<usize> = out
        .iter()
        .map(EpisodeSample::n_response)
        .filter(|&n| n > 0)
        .collect();
    stats.response_len_mean = trained.iter().sum::<usize>() as f64 / trained.len().max(1) as f64;
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(stop: StopReason, resolved: Option<bool>) -> Episode {
        Episode {
            samples: vec![EpisodeSample {
                input_ids: vec![1, 2, 3],
                loss_mask: vec![0, 1, 1],
                sampling_logprobs: vec![0.0, -1.0, -1.0],
                ..EpisodeSample::default()
            }],
            stop,
            infrastructure: false,
            resolved,
        }
    }

    #[test]
    fn keep_masks_and_drop_removes() {
        let groups = || {
            vec![vec![
                ep(StopReason::Submitted, Some(true)),
                ep(StopReason::MaxSteps, Some(true)),
                ep(StopReason::EnvError, None),
                ep(StopReason::FormatErrors, None),
            ]]
        };
        let (s, st) = assemble(
            groups(),
            &RewardConfig::default(),
            &AdvantageConfig::default(),
        )
        .unwrap();
        assert_eq!(s.len(), 4);
        // Rewards 1, 0.5, (masked), 0: LOO over the three live ones.
        assert!((s[0].advantage - (1.0 - 0.25)).abs() < 1e-12);
        assert!((s[1].advantage - (0.5 - 0.5)).abs() < 1e-12);
        assert_eq!(s[2].advantage, 0.0);
        assert_eq!(s[2].loss_mask, vec![0, 0, 0]);
        assert!((s[3].advantage - (0.0 - 0.75)).abs() < 1e-12);
        assert!((st.reward_mean - 0.5).abs() < 1e-12);
        assert!((st.masked_share - 0.25).abs() < 1e-12);
        assert!((st.resolved_rate - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(st.stop_reasons["env_error"], 1);

        let drop = RewardConfig {
            masked: MaskedPolicy::Drop,
            ..RewardConfig::default()
        };
        let (s, st) = assemble(groups(), &drop, &AdvantageConfig::default()).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(st.dropped_masked, 1);
    }

    #[test]
    fn ungraded_submission_fails_the_batch() {
        let e = assemble(
            vec![vec![
                ep(StopReason::Submitted, None),
                ep(StopReason::Submitted, Some(true)),
            ]],
            &RewardConfig::default(),
            &AdvantageConfig::default(),
        )
        .unwrap_err();
        assert!(matches!(e, RewardError::Ungraded(StopReason::Submitted)));
    }
}
