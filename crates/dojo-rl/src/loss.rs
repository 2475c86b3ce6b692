//! The policy-gradient loss: PPO-clip with asymmetric clipping ("clip-higher"), truncated
//! importance correction, an optional KL penalty and entropy bonus, and three ways of
//! aggregating per-token losses.
//!
//! Per response token, with `old` the logprob under the policy that the ratio is taken
//! against and `A` the sample's advantage:
//! `ratio = exp(logp − old)`, `pg = max(−A·ratio, −A·clamp(ratio, 1 − ε_low, 1 + ε_high))`.
//! `old` is the sampling logprob recorded in the trajectory, unless the trainer recomputed
//! the old policy's logprobs itself (`trainer_old_logprobs`): then the ratio uses those and
//! each token's loss is multiplied by the truncated importance weight
//! `min(exp(trainer_old − sampling), C)` (verl's TIS), which corrects for the engine and the
//! trainer disagreeing on the same weights; the gap between the two is reported.
//! With a reference (`kl_coef > 0`), `kl_coef · k3` is added, `k3 = exp(ref − logp) − (ref −
//! logp) − 1` (Schulman's unbiased, non-negative estimator); `entropy_coef · H` is
//! subtracted.
//!
//! Aggregation (verl's names and definitions):
//! - `token-mean`: sum over every response token of the mini-batch / their number;
//! - `seq-mean-token-sum`: each sequence's token sum, averaged over sequences that have at
//!   least one response token;
//! - `seq-mean-token-sum-norm`: the sum over all tokens / a constant `norm_length` (L_max),
//!   Dr. GRPO's length-unbiased form.
//!
//! The denominator is a property of the whole mini-batch ([`Aggregation::denominator`]); the
//! loss of a micro-batch is its numerator over that denominator, so gradients accumulated
//! over micro-batches equal the gradient of the mini-batch in one piece.
//!
//! Masked positions (prompt, observations, padding, and every token of a masked sample) are
//! removed with `where_cond` before anything is computed from them, so they contribute
//! exactly zero loss and zero gradient even when their inputs are garbage.
//!
//! Values and gradients are pinned against a PyTorch implementation of the same formulas
//! (`tests/fixtures/make_fixtures.py`, `tests/loss_parity.rs`).

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::RlError;

/// How per-token losses become one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Aggregation {
    #[serde(rename = "token-mean")]
    TokenMean,
    /// SWE-Master's choice.
    #[default]
    #[serde(rename = "seq-mean-token-sum")]
    SeqMeanTokenSum,
    #[serde(rename = "seq-mean-token-sum-norm")]
    SeqMeanTokenSumNorm,
}

impl Aggregation {
    pub const ALL: [Aggregation; 3] = [
        Aggregation::TokenMean,
        Aggregation::SeqMeanTokenSum,
        Aggregation::SeqMeanTokenSumNorm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::TokenMean => "token-mean",
            Aggregation::SeqMeanTokenSum => "seq-mean-token-sum",
            Aggregation::SeqMeanTokenSumNorm => "seq-mean-token-sum-norm",
        }
    }

    /// The denominator for a mini-batch whose samples have `response_tokens[i]` loss tokens
    /// each (0 for masked samples). Never 0, so an all-masked batch gives a zero loss.
    pub fn denominator(self, response_tokens: &[usize], norm_length: usize) -> f64 {
        let d = match self {
            Aggregation::TokenMean => response_tokens.iter().sum::<usize>(),
            Aggregation::SeqMeanTokenSum => response_tokens.iter().filter(|&&n| n > 0).count(),
            Aggregation::SeqMeanTokenSumNorm => norm_length,
        };
        d.max(1) as f64
    }
}

/// Loss settings (`[loss]` in `rl.toml`); defaults are SWE-Master's (clip-higher, no KL, no
/// entropy bonus).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossConfig {
    pub clip_low: f64,
    pub clip_high: f64,
    pub aggregation: Aggregation,
    /// L_max of `seq-mean-token-sum-norm`.
    pub norm_length: usize,
    /// Cap C of the truncated importance weight.
    pub tis_cap: f64,
    /// Weight of the k3 KL to the reference policy (0: no reference is computed).
    pub kl_coef: f64,
    pub entropy_coef: f64,
}

impl Default for LossConfig {
    fn default() -> Self {
        LossConfig {
            clip_low: 0.2,
            clip_high: 0.28,
            aggregation: Aggregation::SeqMeanTokenSum,
            norm_length: 4096,
            tis_cap: 2.0,
            kl_coef: 0.0,
            entropy_coef: 0.0,
        }
    }
}

impl LossConfig {
    pub fn validate(&self) -> Result<(), RlError> {
        let unit = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err(RlError::config(name, format!("must be in (0, 1), got {v}")))
            }
        };
        unit("loss.clip_low", self.clip_low)?;
        if !(self.clip_high.is_finite() && self.clip_high > 0.0) {
            return Err(RlError::config(
                "loss.clip_high",
                format!("must be > 0, got {}", self.clip_high),
            ));
        }
        if self.norm_length == 0 {
            return Err(RlError::config("loss.norm_length", "must be > 0"));
        }
        if !(self.tis_cap.is_finite() && self.tis_cap >= 1.0) {
            return Err(RlError::config(
                "loss.tis_cap",
                format!("must be >= 1, got {}", self.tis_cap),
            ));
        }
        for (name, v) in [
            ("loss.kl_coef", self.kl_coef),
            ("loss.entropy_coef", self.entropy_coef),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(RlError::config(name, format!("must be >= 0, got {v}")));
            }
        }
        Ok(())
    }
}

/// One micro-batch's per-token inputs, all `(b, t)` f32 except `advantages` `(b,)`.
pub struct LossInputs<'a> {
    /// Current policy logprobs of the response tokens (differentiable).
    pub logprobs: &'a Tensor,
    /// Logprobs the sampling engine recorded.
    pub sampling_logprobs: &'a Tensor,
    pub advantages: &'a Tensor,
    /// 1 on tokens that carry loss.
    pub mask: &'a Tensor,
    /// Old-policy logprobs recomputed by the trainer (enables truncated importance correction).
    pub trainer_old_logprobs: Option<&'a Tensor>,
    /// Reference-policy logprobs (used when `kl_coef > 0`).
    pub ref_logprobs: Option<&'a Tensor>,
    /// Per-token entropy of the current policy (used when `entropy_coef > 0`, differentiable).
    pub entropy: Option<&'a Tensor>,
}

/// Sums over a micro-batch's loss tokens; [`LossMetrics::merge`] adds micro-batches and
/// [`LossMetrics::summary`] turns them into the reported means.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LossMetrics {
    pub tokens: f64,
    /// Tokens where the lower clip is active (`A < 0`, `ratio < 1 − ε_low`).
    pub clipped_low: f64,
    /// Tokens where the upper clip is active (`A > 0`, `ratio > 1 + ε_high`).
    pub clipped_high: f64,
    /// Sum of `old − logp` (approximate KL between the old and the current policy).
    pub approx_kl_sum: f64,
    pub entropy_sum: f64,
    pub ref_kl_sum: f64,
    /// Sum and maximum of `|trainer_old − sampling|` (the engine/trainer gap).
    pub tis_gap_sum: f64,
    pub tis_gap_max: f64,
    /// Tokens whose importance weight was truncated at the cap.
    pub tis_truncated: f64,
    /// The policy-gradient part of the loss (already divided by the denominator).
    pub pg_loss: f64,
}

/// Reported per-step loss metrics (means over loss tokens).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LossSummary {
    pub tokens: u64,
    pub pg_loss: f64,
    pub clip_frac_low: f64,
    pub clip_frac_high: f64,
    pub approx_kl: f64,
    pub entropy: f64,
    pub ref_kl: f64,
    pub tis_gap_mean: f64,
    pub tis_gap_max: f64,
    pub tis_truncated_frac: f64,
}

impl LossMetrics {
    pub fn merge(&mut self, o: &LossMetrics) {
        self.tokens += o.tokens;
        self.clipped_low += o.clipped_low;
        self.clipped_high += o.clipped_high;
        self.approx_kl_sum += o.approx_kl_sum;
        self.entropy_sum += o.entropy_sum;
        self.ref_kl_sum += o.ref_kl_sum;
        self.tis_gap_sum += o.tis_gap_sum;
        self.tis_gap_max = self.tis_gap_max.max(o.tis_gap_max);
        self.tis_truncated += o.tis_truncated;
        self.pg_loss += o.pg_loss;
    }

    pub fn summary(&self) -> LossSummary {
        let n = self.tokens.max(1.0);
        LossSummary {
            tokens: self.tokens as u64,
            pg_loss: self.pg_loss,
            clip_frac_low: self.clipped_low / n,
            clip_frac_high: self.clipped_high / n,
            approx_kl: self.approx_kl_sum / n,
            entropy: self.entropy_sum / n,
            ref_kl: self.ref_kl_sum / n,
            tis_gap_mean: self.tis_gap_sum / n,
            tis_gap_max: self.tis_gap_max,
            tis_truncated_frac: self.tis_truncated / n,
        }
    }
}

fn scalar(t: &Tensor) -> candle_core::Result<f64> {
    t.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()
}

/// The micro-batch's loss (a differentiable scalar: its numerator over `denominator`, see
/// [`Aggregation::denominator`]) and metrics.
pub fn ppo_loss(
    x: &LossInputs<'_>,
    cfg: &LossConfig,
    denominator: f64,
) -> Result<(Tensor, LossMetrics), RlError> {
    let (b, t) = x.logprobs.dims2()?;
    for (name, v) in [
        ("sampling_logprobs", Some(x.sampling_logprobs)),
        ("mask", Some(x.mask)),
        ("trainer_old_logprobs", x.trainer_old_logprobs),
        ("ref_logprobs", x.ref_logprobs),
        ("entropy", x.entropy),
    ] {
        if let Some(v) = v
            && v.dims() != [b, t]
        {
            return Err(RlError::Shape(format!(
                "{name} has shape {:?}, logprobs {:?}",
                v.dims(),
                [b, t]
            )));
        }
    }
    if x.advantages.dims() != [b] {
        return Err(RlError::Shape(format!(
            "advantages has shape {:?}, expected [{b}]",
            x.advantages.dims()
        )));
    }
    let keep = x.mask.gt(0.5)?;
    let zeros = x.logprobs.zeros_like()?;
    let clean = |v: &Tensor| keep.where_cond(v, &zeros);
    let mask = keep.to_dtype(DType::F32)?;
    let logp = clean(x.logprobs)?;
    let sampling = clean(&x.sampling_logprobs.detach())?;
    let old = match x.trainer_old_logprobs {
        Some(o) => clean(&o.detach())?,
        None => sampling.clone(),
    };
    let adv = x
        .advantages
        .to_dtype(DType::F32)?
        .unsqueeze(1)?
        .broadcast_as((b, t))?;
    let log_ratio = (&logp - &old)?;
    let ratio = log_ratio.exp()?;
    let neg_adv = adv.neg()?;
    let pg1 = (&neg_adv * &ratio)?;
    let pg2 = (&neg_adv * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)?)?;
    let mut pg = pg1.maximum(&pg2)?;

    let mut m = LossMetrics {
        tokens: scalar(&mask)?,
        ..LossMetrics::default()
    };
    let ratio_d = ratio.detach();
    let adv_neg = adv.lt(0.0)?.to_dtype(DType::F32)?;
    let adv_pos = adv.gt(0.0)?.to_dtype(DType::F32)?;
    let low = ratio_d.lt(1.0 - cfg.clip_low)?.to_dtype(DType::F32)?;
    let high = ratio_d.gt(1.0 + cfg.clip_high)?.to_dtype(DType::F32)?;
    m.clipped_low = scalar(&((low * adv_neg)? * &mask)?)?;
    m.clipped_high = scalar(&((high * adv_pos)? * &mask)?)?;
    m.approx_kl_sum = scalar(&(log_ratio.detach().neg()? * &mask)?)?;

    if x.trainer_old_logprobs.is_some() {
        let gap = (&old - &sampling)?;
        let w = gap.exp()?.clamp(0.0, cfg.tis_cap)?;
        let abs_gap = (gap.abs()? * &mask)?;
        m.tis_gap_sum = scalar(&abs_gap)?;
        m.tis_gap_max = abs_gap.flatten_all()?.max(0)?.to_scalar::<f32>()? as f64;
        m.tis_truncated = scalar(&(gap.exp()?.ge(cfg.tis_cap)?.to_dtype(DType::F32)? * &mask)?)?;
        pg = (pg * w)?;
    }
    let pg = (pg * &mask)?;
    // Every form is a sum over loss tokens; only the denominator differs (see `denominator`).
    let agg = |v: &Tensor| v.sum_all()?.affine(1.0 / denominator, 0.0);
    let mut loss = agg(&pg)?;
    m.pg_loss = loss.to_scalar::<f32>()? as f64;

    if cfg.kl_coef > 0.0 {
        let r = x
            .ref_logprobs
            .ok_or_else(|| RlError::Shape("loss.kl_coef > 0 needs reference logprobs".into()))?;
        let d = (clean(&r.detach())? - &logp)?;
        let k3 = ((d.exp()? - &d)? - 1.0)?;
        let k3 = (k3 * &mask)?;
        m.ref_kl_sum = scalar(&k3.detach())?;
        loss = (loss + agg(&k3)?.affine(cfg.kl_coef, 0.0)?)?;
    }
    if let Some(h) = x.entropy {
        let h = clean(h)?;
        m.entropy_sum = scalar(&h.detach())?;
        if cfg.entropy_coef > 0.0 {
            loss = (loss - agg(&h)?.affine(cfg.entropy_coef, 0.0)?)?;
        }
    }
    Ok((loss, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t2(v: &[f32], b: usize, t: usize) -> Tensor {
        Tensor::from_slice(v, (b, t), &Device::Cpu).unwrap()
    }

    #[test]
    fn on_policy_token_mean_is_minus_mean_advantage() {
        // ratio = 1 everywhere: loss = −Σ A·mask / Σ mask, d loss / d logp = −A / n.
        let lp = Var::from_tensor(&t2(&[-1.0, -2.0, -0.5, -0.1], 2, 2)).unwrap();
        let adv = Tensor::from_slice(&[1.0f32, -0.5], 2, &Device::Cpu).unwrap();
        let mask = t2(&[1.0, 1.0, 0.0, 1.0], 2, 2);
        let x = LossInputs {
            logprobs: lp.as_tensor(),
            sampling_logprobs: &lp.as_tensor().detach(),
            advantages: &adv,
            mask: &mask,
            trainer_old_logprobs: None,
            ref_logprobs: None,
            entropy: None,
        };
        let cfg = LossConfig {
            aggregation: Aggregation::TokenMean,
            ..LossConfig::default()
        };
        let (loss, m) = ppo_loss(&x, &cfg, cfg.aggregation.denominator(&[2, 1], 1)).unwrap();
        let l = loss.to_scalar::<f32>().unwrap();
        assert!((l - (-(1.0 + 1.0 - 0.5) / 3.0)).abs() < 1e-6, "{l}");
        let g = loss.backward().unwrap();
        let g: Vec<f32> = g
            .get(lp.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want = [-1.0 / 3.0, -1.0 / 3.0, 0.0, 0.5 / 3.0];
        for (a, b) in g.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{g:?}");
        }
        assert_eq!(m.tokens, 3.0);
        assert_eq!(m.clipped_low + m.clipped_high, 0.0);
    }

    #[test]
    fn clip_high_stops_the_gradient() {
        // ratio = e^0.5 ≈ 1.65 > 1.28 with A > 0: clipped, no gradient; ratio e^−0.5 ≈ 0.61
        // < 0.8 with A < 0: clipped, no gradient.
        let lp = Var::from_tensor(&t2(&[0.0, 0.0], 2, 1)).unwrap();
        let old = t2(&[-0.5, 0.5], 2, 1);
        let adv = Tensor::from_slice(&[1.0f32, -1.0], 2, &Device::Cpu).unwrap();
        let mask = t2(&[1.0, 1.0], 2, 1);
        let x = LossInputs {
            logprobs: lp.as_tensor(),
            sampling_logprobs: &old,
            advantages: &adv,
            mask: &mask,
            trainer_old_logprobs: None,
            ref_logprobs: None,
            entropy: None,
        };
        let (loss, m) = ppo_loss(&x, &LossConfig::default(), 2.0).unwrap();
        let g = loss.backward().unwrap();
        let g: Vec<f32> = g
            .get(lp.as_tensor())
            .map(|g| g.flatten_all().unwrap().to_vec1().unwrap())
            .unwrap_or(vec![0.0, 0.0]);
        assert_eq!(g, vec![0.0, 0.0]);
        assert_eq!((m.clipped_high, m.clipped_low), (1.0, 1.0));
    }

    #[test]
    fn denominators() {
        let n = [3, 0, 5];
        assert_eq!(Aggregation::TokenMean.denominator(&n, 100), 8.0);
        assert_eq!(Aggregation::SeqMeanTokenSum.denominator(&n, 100), 2.0);
        assert_eq!(Aggregation::SeqMeanTokenSumNorm.denominator(&n, 100), 100.0);
        assert_eq!(Aggregation::TokenMean.denominator(&[0, 0], 100), 1.0);
    }

    #[test]
    fn validation_names_fields() {
        let bad = LossConfig {
            clip_low: 1.5,
            ..LossConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("loss.clip_low")
        );
        let bad = LossConfig {
            tis_cap: 0.5,
            ..LossConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("loss.tis_cap")
        );
        assert!(LossConfig::default().validate().is_ok());
    }
}
