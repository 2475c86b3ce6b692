//! Group-relative advantages: each rollout's shaped reward against the other rollouts of the
//! same task (its group), so no value network is needed.
//!
//! - `loo` (RLOO, SWE-Master's choice): `r_i − mean_{j≠i} r_j`, an unbiased baseline;
//! - `grpo`: `(r_i − mean) / (std + eps)` with the sample standard deviation (Bessel's
//!   correction, as `torch.std` and verl compute it);
//! - `drgrpo` (Dr. GRPO): `r_i − mean`, without the division that over-weights easy and hard
//!   groups.
//!
//! Only unmasked members count: a masked (infrastructure) rollout gets advantage 0 and does
//! not enter its mates' baselines. A group with fewer than two unmasked members has no
//! baseline, so its advantages are 0. With `drop_zero_variance` (DAPO's dynamic sampling),
//! groups whose unmasked rewards are all equal are dropped from the update; they would give
//! zero advantages anyway, but dropping them keeps them out of the loss normalisation, and
//! the count is reported.

use serde::{Deserialize, Serialize};

use crate::RewardError;

/// The advantage estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Estimator {
    /// Leave-one-out (RLOO).
    #[default]
    Loo,
    Grpo,
    #[serde(rename = "drgrpo")]
    DrGrpo,
}

impl Estimator {
    pub fn parse(s: &str) -> Option<Estimator> {
        match s {
            "loo" | "rloo" => Some(Estimator::Loo),
            "grpo" => Some(Estimator::Grpo),
            "drgrpo" | "dr-grpo" => Some(Estimator::DrGrpo),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Estimator::Loo => "loo",
            Estimator::Grpo => "grpo",
            Estimator::DrGrpo => "drgrpo",
        }
    }
}

/// Advantage settings (`[advantage]` in `rl.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdvantageConfig {
    pub estimator: Estimator,
    /// Added to the standard deviation (GRPO only).
    pub eps: f64,
    /// Drop groups whose unmasked rewards are all equal (DAPO dynamic sampling).
    pub drop_zero_variance: bool,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        AdvantageConfig {
            estimator: Estimator::Loo,
            eps: 1e-6,
            drop_zero_variance: false,
        }
    }
}

impl AdvantageConfig {
    pub fn validate(&self) -> Result<(), RewardError> {
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(RewardError::config(
                "advantage.eps",
                format!("must be a finite number >= 0, got {}", self.eps),
            ));
        }
        Ok(())
    }
}

/// One group's advantages, in member order.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAdvantages {
    /// 0 for masked members.
    pub advantages: Vec<f64>,
    /// The group was dropped (zero variance with `drop_zero_variance`): no member is trained.
    pub dropped: bool,
}

/// Advantages of one group from its members' shaped rewards and masks.
pub fn group_advantages(
    rewards: &[f64],
    masked: &[bool],
    cfg: &AdvantageConfig,
) -> GroupAdvantages {
    debug_assert_eq!(rewards.len(), masked.len());
    let live: Vec<f64> = rewards
        .iter()
        .zip(masked)
        .filter(|(_, m)| !**m)
        .map(|(r, _)| *r)
        .collect();
    let n = live.len();
    let zeros = GroupAdvantages {
        advantages: vec![0.0; rewards.len()],
        dropped: false,
    };
    if n == 0 {
        return zeros;
    }
    let zero_variance = live.iter().all(|r| *r == live[0]);
    if zero_variance && cfg.drop_zero_variance {
        return GroupAdvantages {
            dropped: true,
            ..zeros
        };
    }
    if n < 2 {
        return zeros;
    }
    let nf = n as f64;
    let mean = live.iter().sum::<f64>() / nf;
    let std = (live.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (nf - 1.0)).sqrt();
    let one = |r: f64| match cfg.estimator {
        // mean of the others = (n·mean − r) / (n − 1), so r − that = n/(n−1) · (r − mean).
        Estimator::Loo => (r - mean) * nf / (nf - 1.0),
        Estimator::Grpo => (r - mean) / (std + cfg.eps),
        Estimator::DrGrpo => r - mean,
    };
    GroupAdvantages {
        advantages: rewards
            .iter()
            .zip(masked)
            .map(|(r, m)| if *m { 0.0 } else { one(*r) })
            .collect(),
        dropped: false,
    }
}

/// Summary of a batch's advantages, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AdvantageStats {
    pub groups: usize,
    pub dropped_zero_variance: usize,
    /// Mean and standard deviation over trained (unmasked, not dropped) members.
    pub mean: f64,
    pub std: f64,
}

/// Advantages of every group, with the batch summary.
pub fn batch_advantages(
    groups: &[(Vec<f64>, Vec<bool>)],
    cfg: &AdvantageConfig,
) -> (Vec<GroupAdvantages>, AdvantageStats) {
    let out: Vec<GroupAdvantages> = groups
        .iter()
        .map(|(r, m)| group_advantages(r, m, cfg))
        .collect();
    let trained: Vec<f64> = out
        .iter()
        .zip(groups)
        .filter(|(g, _)| !g.dropped)
        .flat_map(|(g, (_, m))| {
            g.advantages
                .iter()
                .zip(m)
                .filter(|(_, m)| !**m)
                .map(|(a, _)| *a)
        })
        .collect();
    let n = trained.len().max(1) as f64;
    let mean = trained.iter().sum::<f64>() / n;
    let std = (trained.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / n).sqrt();
    let stats = AdvantageStats {
        groups: groups.len(),
        dropped_zero_variance: out.iter().filter(|g| g.dropped).count(),
        mean,
        std,
    };
    (out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(estimator: Estimator) -> AdvantageConfig {
        AdvantageConfig {
            estimator,
            ..AdvantageConfig::default()
        }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "{a:?} != {b:?}");
        }
    }

    #[test]
    fn loo_by_hand() {
        // rewards 1, 0, 0, 0.5: baselines (0+0+0.5)/3, (1+0+0.5)/3, same, (1+0+0)/3.
        let g = group_advantages(&[1.0, 0.0, 0.0, 0.5], &[false; 4], &cfg(Estimator::Loo));
        close(
            &g.advantages,
            &[1.0 - 0.5 / 3.0, -0.5, -0.5, 0.5 - 1.0 / 3.0],
        );
        assert!(!g.dropped);
    }

    #[test]
    fn grpo_by_hand() {
        // rewards 1, 0, 0, 1: mean 0.5, sample std sqrt(4·0.25/3) = sqrt(1/3).
        let g = group_advantages(&[1.0, 0.0, 0.0, 1.0], &[false; 4], &cfg(Estimator::Grpo));
        let s = (1.0f64 / 3.0).sqrt() + 1e-6;
        close(&g.advantages, &[0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s]);
    }

    #[test]
    fn drgrpo_by_hand() {
        let g = group_advantages(&[1.0, 0.0, 0.5], &[false; 3], &cfg(Estimator::DrGrpo));
        close(&g.advantages, &[0.5, -0.5, 0.0]);
    }

    #[test]
    fn masked_members_are_ignored() {
        // The masked member (reward 0) must not pull the baseline down.
        let g = group_advantages(
            &[1.0, 0.0, 0.0],
            &[false, false, true],
            &cfg(Estimator::Loo),
        );
        close(&g.advantages, &[1.0, -1.0, 0.0]);
        let g = group_advantages(
            &[1.0, 0.0, 0.0],
            &[false, false, true],
            &cfg(Estimator::Grpo),
        );
        let s = 0.5f64.sqrt() + 1e-6;
        close(&g.advantages, &[0.5 / s, -0.5 / s, 0.0]);
    }

    #[test]
    fn degenerate_groups() {
        // One live member: no baseline.
        let g = group_advantages(&[1.0, 0.0], &[false, true], &cfg(Estimator::Loo));
        close(&g.advantages, &[0.0, 0.0]);
        // Everything masked.
        let g = group_advantages(&[0.0, 0.0], &[true, true], &cfg(Estimator::Grpo));
        close(&g.advantages, &[0.0, 0.0]);
        // Zero variance: zeros, dropped only when asked.
        for e in [Estimator::Loo, Estimator::Grpo, Estimator::DrGrpo] {
            let g = group_advantages(&[1.0, 1.0, 1.0], &[false; 3], &cfg(e));
            close(&g.advantages, &[0.0; 3]);
            assert!(!g.dropped);
        }
        let drop = AdvantageConfig {
            drop_zero_variance: true,
            ..AdvantageConfig::default()
        };
        assert!(group_advantages(&[0.0, 0.0], &[false, false], &drop).dropped);
        assert!(!group_advantages(&[0.0, 1.0], &[false, false], &drop).dropped);
    }

    #[test]
    fn batch_reports_drops_and_moments() {
        let drop = AdvantageConfig {
            drop_zero_variance: true,
            ..AdvantageConfig::default()
        };
        let groups = vec![
            (vec![1.0, 0.0], vec![false, false]),
            (vec![0.0, 0.0], vec![false, false]),
        ];
        let (out, stats) = batch_advantages(&groups, &drop);
        assert_eq!(stats.groups, 2);
        assert_eq!(stats.dropped_zero_variance, 1);
        close(&out[0].advantages, &[1.0, -1.0]);
        assert!((stats.mean - 0.0).abs() < 1e-12);
        assert!((stats.std - 1.0).abs() < 1e-12);
    }

    #[test]
    fn loo_sums_to_zero_over_live_members() {
        let r = [0.3, 0.9, 0.1, 0.0, 0.5];
        for e in [Estimator::Loo, Estimator::Grpo, Estimator::DrGrpo] {
            let g = group_advantages(&r, &[false; 5], &cfg(e));
            assert!(g.advantages.iter().sum::<f64>().abs() < 1e-9);
        }
    }

    #[test]
    fn parse_names() {
        for e in [Estimator::Loo, Estimator::Grpo, Estimator::DrGrpo] {
            assert_eq!(Estimator::parse(e.as_str()), Some(e));
        }
        assert_eq!(Estimator::parse("ppo"), None);
    }

    proptest::proptest! {
        /// Masked members get 0 whatever their reward, never move their mates' advantages,
        /// and the live advantages of every estimator sum to zero.
        #[test]
        fn masked_members_never_matter(
            members in proptest::collection::vec((0.0f64..1.0, proptest::bool::ANY, 0.0f64..1.0), 2..10),
            which in 0usize..3,
        ) {
            let e = [Estimator::Loo, Estimator::Grpo, Estimator::DrGrpo][which];
            let rewards: Vec<f64> = members.iter().map(|m| m.0).collect();
            let masked: Vec<bool> = members.iter().map(|m| m.1).collect();
            let other: Vec<f64> = members
                .iter()
                .map(|m| if m.1 { m.2 } else { m.0 })
                .collect();
            let a = group_advantages(&rewards, &masked, &cfg(e));
            let b = group_advantages(&other, &masked, &cfg(e));
            proptest::prop_assert_eq!(&a, &b);
            for (x, m) in a.advantages.iter().zip(&masked) {
                proptest::prop_assert!(!*m || *x == 0.0);
            }
            proptest::prop_assert!(a.advantages.iter().sum::<f64>().abs() < 1e-6);
        }
    }
}
