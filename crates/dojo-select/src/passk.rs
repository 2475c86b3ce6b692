//! pass@k and its interval.
//!
//! pass@k is the chance that at least one of k samples resolves a task. Taking the first k of n
//! samples wastes the other n − k; the unbiased estimator of Chen et al. (2021, "Evaluating
//! Large Language Models Trained on Code", eq. 1) uses all n: 1 − C(n−c, k) / C(n, k) for c
//! resolved samples, computed as a product so large n cannot overflow.
//!
//! Intervals over tasks are percentile bootstraps (tasks resampled with replacement, seeded):
//! the per-task values are not Bernoulli for k > 1, so the Wilson interval does not apply.

use rand::{Rng, SeedableRng};

/// Unbiased pass@k for a task with `n` samples of which `c` resolved. `k` must be ≤ `n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    debug_assert!(k <= n && c <= n);
    if k == 0 {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    // C(n−c, k) / C(n, k) = Π_{i=n−c+1}^{n} (1 − k / i)
    let miss: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    1.0 - miss
}

/// A mean over tasks with its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
    /// Tasks the mean is over.
    pub tasks: usize,
}

/// Resamples used for every bootstrap interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// The mean of `values` with a 95% percentile-bootstrap interval (seeded).
pub fn bootstrap_mean(values: &[f64], seed: u64) -> Estimate {
    let n = values.len();
    if n == 0 {
        return Estimate {
            mean: 0.0,
            low: 0.0,
            high: 0.0,
            tasks: 0,
        };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (BOOTSTRAP_RESAMPLES - 1) as f64).round()) as usize];
    Estimate {
        mean,
        low: at(0.025).min(mean),
        high: at(0.975).max(mean),
        tasks: n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn binomial(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn edge_cases() {
        assert_eq!(pass_at_k(8, 0, 1), 0.0);
        assert_eq!(pass_at_k(8, 8, 1), 1.0);
        assert_eq!(pass_at_k(8, 1, 8), 1.0);
        assert!((pass_at_k(8, 2, 1) - 0.25).abs() < 1e-12);
        assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
    }

    proptest! {
        /// The product form equals the closed form 1 − C(n−c, k)/C(n, k).
        #[test]
        fn equals_the_closed_form(n in 1usize..40, c_frac in 0.0f64..=1.0, k_frac in 0.0f64..=1.0) {
            let c = ((n as f64) * c_frac).floor() as usize;
            let k = 1 + (((n - 1) as f64) * k_frac).floor() as usize;
            let closed = 1.0 - binomial((n - c) as u64, k as u64) / binomial(n as u64, k as u64);
            prop_assert!((pass_at_k(n, c, k) - closed).abs() < 1e-9);
        }

        /// pass@k never decreases with k.
        #[test]
        fn is_monotone_in_k(n in 2usize..30, c in 0usize..30) {
            let c = c.min(n);
            for k in 1..n {
                prop_assert!(pass_at_k(n, c, k) <= pass_at_k(n, c, k + 1) + 1e-12);
            }
        }
    }

    #[test]
    fn bootstrap_brackets_the_mean_and_is_seeded() {
        let v = [1.0, 0.0, 0.0, 1.0, 0.5, 0.25, 0.0, 1.0];
        let a = bootstrap_mean(&v, 7);
        assert_eq!(a, bootstrap_mean(&v, 7));
        assert!(a.low <= a.mean && a.mean <= a.high);
        assert!(a.low > 0.0 && a.high < 1.0, "{a:?}");
        let constant = bootstrap_mean(&[1.0; 5], 1);
        assert_eq!((constant.low, constant.high), (1.0, 1.0));
    }
}
