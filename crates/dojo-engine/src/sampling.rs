//! Turning logits into the next token: greedy, or temperature + top-k + top-p with a seeded RNG.

use rand::{Rng, SeedableRng};

use crate::model::{argmax, log_softmax};

/// Sampling parameters of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// `0` is greedy.
    pub temperature: f32,
    /// Nucleus mass in `(0, 1]`; `1` disables.
    pub top_p: f32,
    /// Keep the `k` most likely tokens; `0` disables.
    pub top_k: usize,
    /// Same seed, same prompt, same parameters → same tokens.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Default::default()
        }
    }
}

/// One request's sampler state.
pub struct Sampler {
    params: SamplingParams,
    rng: rand::rngs::StdRng,
}

/// The chosen token with its log-probability under the (temperature-scaled) distribution the
/// sampler drew from, before top-k/top-p truncation — what RL trainers recompute.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub token: u32,
    pub logprob: f32,
    /// The `n` most likely tokens, best first, when requested.
    pub top: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = match params.seed {
            Some(s) => rand::rngs::StdRng::seed_from_u64(s),
            None => rand::rngs::StdRng::from_os_rng(),
        };
        Sampler { params, rng }
    }

    /// Pick the next token from `logits`; `top_n` alternatives are reported.
    pub fn sample(&mut self, logits: &[f32], top_n: usize) -> Sampled {
        let t = self.params.temperature;
        let greedy = t <= 0.0;
        let scaled: Vec<f32> = if greedy || t == 1.0 {
            logits.to_vec()
        } else {
            logits.iter().map(|&l| l / t).collect()
        };
        let lp = log_softmax(&scaled);
        let token = if greedy {
            argmax(logits)
        } else {
            self.draw(&lp)
        };
        let top = if top_n > 0 {
            top_n_of(&lp, top_n)
        } else {
            Vec::new()
        };
        Sampled {
            token: token as u32,
            logprob: lp[token],
            top,
        }
    }

    fn draw(&mut self, lp: &[f32]) -> usize {
        // Candidates sorted by probability, cut by top-k then top-p.
        let mut idx: Vec<usize> = (0..lp.len()).collect();
        let k = if self.params.top_k > 0 {
            self.params.top_k.min(lp.len())
        } else {
            lp.len()
        };
        if k < lp.len() {
            idx.select_nth_unstable_by(k - 1, |&a, &b| lp[b].total_cmp(&lp[a]));
            idx.truncate(k);
        }
        idx.sort_unstable_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
        let mut probs: Vec<f32> = idx.iter().map(|&i| lp[i].exp()).collect();
        let top_p = self.params.top_p;
        if top_p > 0.0 && top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = probs.len();
            for (n, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= top_p {
                    keep = n + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
        }
        let total: f32 = probs.iter().sum();
        let mut r = self.rng.random::<f32>() * total;
        for (n, p) in probs.iter().enumerate() {
            r -= p;
            if r <= 0.0 {
                return idx[n];
            }
        }
        idx[idx.len() - 1]
    }
}

fn top_n_of(lp: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    let n = n.min(lp.len());
    idx.select_nth_unstable_by(n - 1, |&a, &b| lp[b].total_cmp(&lp[a]));
    idx.truncate(n);
    idx.sort_unstable_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
    idx.into_iter().map(|i| (i as u32, lp[i])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_argmax_with_its_logprob() {
        let mut s = Sampler::new(SamplingParams::greedy());
        let out = s.sample(&[0.0, 2.0, 1.0], 2);
        assert_eq!(out.token, 1);
        let lse = (1f32 + 2f32.exp() + 1f32.exp()).ln();
        assert!((out.logprob - (2.0 - lse)).abs() < 1e-5);
        assert_eq!(out.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..50).map(|i| i as f32 * 0.05).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 3,
            seed: Some(7),
        };
        let run = || {
            let mut s = Sampler::new(params.clone());
            (0..40)
                .map(|_| s.sample(&logits, 0).token)
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.iter().all(|t| [47, 48, 49].contains(t)), "{a:?}");
        assert!(a.iter().any(|&t| t != a[0]), "sampling, not greedy: {a:?}");
    }

    #[test]
    fn tiny_top_p_is_greedy() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 1e-6,
            top_k: 0,
            seed: Some(1),
        });
        for _ in 0..10 {
            assert_eq!(s.sample(&[0.1, 0.5, 3.0, 0.2], 0).token, 2);
        }
    }
}
