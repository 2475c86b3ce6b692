//! One policy update on dojo-train's trainable model: token logprobs of the sampled tokens
//! under the current weights, the PPO-clip loss, backward, global-norm clipping and AdamW
//! (full weights, or the LoRA adapters when the model has them).
//!
//! A sample is the canonical token stream of one rollout (the same rendering SFT trains on:
//! prompt, the agent's sampled tokens, observations interleaved), a loss mask that is 1 on
//! sampled tokens only, the engine's logprob for each of those tokens and the rollout's
//! advantage. Masked rollouts arrive with an all-zero mask and contribute nothing.
//!
//! Gradients of every micro-batch are accumulated and checked before the optimizer touches
//! a weight: a step that fails (non-finite loss or gradient, a shape error) leaves the model
//! and the optimizer state as they were.

use std::collections::HashMap;

use candle_core::{D, DType, Device, Tensor};
use dojo_train::LossRows;
use dojo_train::{AdamW, TrainModel};
use serde::{Deserialize, Serialize};

use crate::RlError;
use crate::config::OptimConfig;
use crate::loss::{LossConfig, LossInputs, LossMetrics, LossSummary, ppo_loss};

pub use dojo_reward::episode::EpisodeSample;

/// What one optimizer step did.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UpdateReport {
    pub samples: usize,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    /// Samples not run because their advantage was exactly 0 and the loss had no KL or
    /// entropy term ([`policy_grads`]); the metrics are over the samples that ran.
    #[serde(default)]
    pub skipped_zero_advantage: usize,
    #[serde(flatten)]
    pub metrics: LossSummary,
}

/// Right-padded `(b, t − 1)` tensors aligned with the predicted tokens (positions 1..t).
struct Batch {
    ids: Tensor,
    mask: Tensor,
    sampling: Tensor,
    trainer_old: Option<Tensor>,
    reference: Option<Tensor>,
    advantages: Tensor,
    /// The loss positions: their rows of the flattened hidden states (`bi * t + p - 1`), the
    /// same positions in the flattened `(b, t - 1)` outputs (`bi * (t - 1) + p - 1`), and their
    /// targets; `None` when no position carries loss.
    loss_rows: Option<(Tensor, Tensor, Tensor)>,
}

fn batch(samples: &[&EpisodeSample], device: &Device) -> Result<Batch, RlError> {
    let t = samples
        .iter()
        .map(|s| s.input_ids.len())
        .max()
        .unwrap_or(2)
        .max(2);
    let b = samples.len();
    let mut ids = vec![0u32; b * t];
    let mut mask = vec![0f32; b * (t - 1)];
    let mut sampling = vec![0f32; b * (t - 1)];
    let mut old = vec![0f32; b * (t - 1)];
    let mut reference = vec![0f32; b * (t - 1)];
    let (mut hidden_rows, mut out_rows, mut row_targets) = (Vec::new(), Vec::new(), Vec::new());
    for (i, s) in samples.iter().enumerate() {
        let n = s.input_ids.len();
        ids[i * t..i * t + n].copy_from_slice(&s.input_ids);
        for p in 1..n {
            let k = i * (t - 1) + p - 1;
            mask[k] = f32::from(s.loss_mask[p]);
            if s.loss_mask[p] == 1 {
                hidden_rows.push((i * t + p - 1) as u32);
                out_rows.push(k as u32);
                row_targets.push(s.input_ids[p]);
            }
            sampling[k] = s.sampling_logprobs[p];
            if let Some(o) = &s.trainer_old_logprobs {
                old[k] = o[p];
            }
            if let Some(r) = &s.ref_logprobs {
                reference[k] = r[p];
            }
        }
    }
    let shape = (b, t - 1);
    let all = |f: fn(&EpisodeSample) -> bool| samples.iter().all(|s| f(s));
    Ok(Batch {
        ids: Tensor::from_vec(ids, (b, t), device)?,
        mask: Tensor::from_vec(mask, shape, device)?,
        sampling: Tensor::from_vec(sampling, shape, device)?,
        trainer_old: if all(|s| s.trainer_old_logprobs.is_some()) {
            Some(Tensor::from_vec(old, shape, device)?)
        } else {
            None
        },
        reference: if all(|s| s.ref_logprobs.is_some()) {
            Some(Tensor::from_vec(reference, shape, device)?)
        } else {
            None
        },
        advantages: Tensor::from_vec(
            samples.iter().map(|s| s.advantage as f32).collect(),
            b,
            device,
        )?,
        loss_rows: if hidden_rows.is_empty() {
            None
        } else {
            let n = hidden_rows.len();
            Some((
                Tensor::from_vec(hidden_rows, n, device)?,
                Tensor::from_vec(out_rows, n, device)?,
                Tensor::from_vec(row_targets, n, device)?,
            ))
        },
    })
}

/// Log-softmax of `(n, vocab)` logits over the vocabulary, the logprobs of `targets` `(n,)`,
/// and (when asked) the entropy of each row's distribution.
fn token_logprobs_and_entropy(
    logits: &Tensor,
    targets: &Tensor,
    entropy: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    if !entropy {
        // One fused pass over the logits each way, nothing of vocabulary size kept.
        return Ok((dojo_train::ops::token_logprobs(logits, targets)?, None));
    }
    let m = logits.max_keepdim(D::Minus1)?.detach();
    let z = logits.broadcast_sub(&m)?;
    let lse = z.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let logp = z.broadcast_sub(&lse)?;
    let picked = logp
        .gather(&targets.unsqueeze(1)?.contiguous()?, 1)?
        .squeeze(1)?;
    let h = if entropy {
        Some((logp.exp()? * &logp)?.sum(D::Minus1)?.neg()?)
    } else {
        None
    };
    Ok((picked, h))
}

/// Token logprobs (and entropies) `(b, t - 1)` at the loss positions, 0 elsewhere: the LM head
/// runs on those positions only ([`TrainModel::logits_at`]), since every other position is
/// masked out of the loss, and a `(b, t, vocab)` f32 tensor with its log-softmax intermediates
/// for a 3.5K-token episode and SmolLM2's 49K vocabulary ran a 24 GB machine out of memory.
fn forward(
    model: &TrainModel,
    b: &Batch,
    entropy: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    let Some((hidden_rows, _, _)) = &b.loss_rows else {
        let (bs, t) = b.ids.dims2()?;
        let z = Tensor::zeros((bs, t - 1), DType::F32, b.ids.device())?;
        return Ok((z.clone(), entropy.then_some(z)));
    };
    logprobs_at(b, &model.logits_at(&b.ids, hidden_rows)?, entropy)
}

/// [`forward`]'s second half: token logprobs (and entropies) `(b, t - 1)` from the logits at
/// the batch's loss rows (which it must have).
fn logprobs_at(
    b: &Batch,
    logits: &Tensor,
    entropy: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    let (bs, t) = b.ids.dims2()?;
    let zeros = || Tensor::zeros(bs * (t - 1), DType::F32, b.ids.device());
    let Some((_, out_rows, targets)) = &b.loss_rows else {
        return Err(candle_core::Error::Msg("a batch without loss rows".into()));
    };
    let (picked, h) = token_logprobs_and_entropy(logits, targets, entropy)?;
    let spread = |x: &Tensor| zeros()?.index_add(out_rows, x, 0)?.reshape((bs, t - 1));
    let h = match h {
        Some(h) => Some(spread(&h)?),
        None => None,
    };
    Ok((spread(&picked)?, h))
}

/// The current model's logprob of every token of each sample (position 0 gets 0), without
/// gradients: old-policy logprobs for truncated importance correction, or a reference's.
pub fn token_logprobs(
    model: &TrainModel,
    samples: &[EpisodeSample],
    micro_batch_size: usize,
) -> Result<Vec<Vec<f32>>, RlError> {
    for (i, s) in samples.iter().enumerate() {
        s.check(i)?;
    }
    let mut out: Vec<Vec<f32>> = samples
        .iter()
        .map(|s| vec![0f32; s.input_ids.len()])
        .collect();
    let idx: Vec<usize> = (0..samples.len())
        .filter(|&i| samples[i].input_ids.len() >= 2)
        .collect();
    for chunk in idx.chunks(micro_batch_size.max(1)) {
        let refs: Vec<&EpisodeSample> = chunk.iter().map(|&i| &samples[i]).collect();
        let b = batch(&refs, model.device())?;
        let (lp, _) = forward(model, &b, false)?;
        let lp = lp.detach().to_vec2::<f32>()?;
        for (&i, row) in chunk.iter().zip(lp) {
            let n = samples[i].input_ids.len();
            out[i][1..].copy_from_slice(&row[..n - 1]);
        }
    }
    Ok(out)
}

/// Whether a sample's loss is identically zero, so that running it would add exact zeros to
/// the loss and every gradient: no loss token, or an advantage of exactly 0 when the loss has
/// no KL or entropy term (the clipped surrogate is `max(−A·r, −A·clip(r))`, 0 for any ratio
/// when `A = 0`). With SWE-Master's binary reward, every group whose rollouts all fail (or all
/// resolve) is such a group, and on small models that is most of them.
fn contributes_nothing(s: &EpisodeSample, loss_cfg: &LossConfig) -> bool {
    s.n_response() == 0
        || (s.advantage == 0.0 && loss_cfg.kl_coef == 0.0 && loss_cfg.entropy_coef == 0.0)
}

/// Loss, metrics and accumulated gradients of one mini-batch, nothing applied.
///
/// Samples whose loss is identically zero ([`contributes_nothing`]) are not run: the result
/// is the one running them would give (their tokens still count in the aggregation's
/// denominator), except that the metrics cover only the samples that ran. A mini-batch whose
/// samples all have zero advantage gets zero gradients for every trainable weight, so the
/// optimizer still takes its step (AdamW's moments move the weights on a zero gradient);
/// one of masked samples only gets none, as before.
pub fn policy_grads(
    model: &TrainModel,
    samples: &[EpisodeSample],
    loss_cfg: &LossConfig,
    micro_batch_size: usize,
) -> Result<(f64, LossMetrics, HashMap<String, Tensor>), RlError> {
    for (i, s) in samples.iter().enumerate() {
        s.check(i)?;
    }
    let lens: Vec<usize> = samples.iter().map(EpisodeSample::n_response).collect();
    let denom = loss_cfg
        .aggregation
        .denominator(&lens, loss_cfg.norm_length);
    let mut grads: HashMap<String, Tensor> = HashMap::new();
    let mut metrics = LossMetrics::default();
    let mut loss = 0f64;
    let live: Vec<&EpisodeSample> = samples
        .iter()
        .filter(|s| !contributes_nothing(s, loss_cfg))
        .collect();
    if live.is_empty() && samples.iter().any(|s| s.n_response() > 0) {
        for (name, var) in model.trainable() {
            grads.insert(name.clone(), var.as_tensor().zeros_like()?);
        }
    }
    for chunk in live.chunks(micro_batch_size.max(1)) {
        let b = batch(chunk, model.device())?;
        let Some((hidden_rows, _, _)) = &b.loss_rows else {
            continue;
        };
        let mut chunk_metrics = None;
        let mut loss_err = None;
        // Through `loss_grads`, so that the model's activation checkpointing (the memory
        // plan's choice for long episodes) applies.
        let l = model.loss_grads(
            &b.ids,
            hidden_rows,
            true,
            // The loss is normalised over the whole batch.
            LossRows::Whole,
            |logits, _| {
                let (lp, h) = logprobs_at(&b, logits, true)?;
                let h = match &h {
                    // The entropy enters the loss only with a coefficient; otherwise it is a
                    // metric.
                    Some(h) if loss_cfg.entropy_coef > 0.0 => Some(h.clone()),
                    Some(h) => Some(h.detach()),
                    None => None,
                };
                let r = ppo_loss(
                    &LossInputs {
                        logprobs: &lp,
                        sampling_logprobs: &b.sampling,
                        advantages: &b.advantages,
                        mask: &b.mask,
                        trainer_old_logprobs: b.trainer_old.as_ref(),
                        ref_logprobs: b.reference.as_ref(),
                        entropy: h.as_ref(),
                    },
                    loss_cfg,
                    denom,
                );
                match r {
                    Ok((l, m)) => {
                        chunk_metrics = Some(m);
                        Ok(l)
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        loss_err = Some(e);
                        Err(candle_core::Error::Msg(msg))
                    }
                }
            },
            &mut grads,
        );
        // The loss's own error, not its candle-shaped copy.
        let l = match (l, loss_err) {
            (Ok(l), _) => l,
            (Err(_), Some(e)) => return Err(e),
            (Err(e), None) => return Err(e.into()),
        };
        loss += l.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        if let Some(m) = &chunk_metrics {
            metrics.merge(m);
        }
    }
    if !loss.is_finite() {
        return Err(dojo_train::TrainError::NonFinite(format!("RL loss is {loss}")).into());
    }
    Ok((loss, metrics, grads))
}

/// One optimizer step on `samples` at learning rate `lr`.
pub fn policy_update(
    model: &TrainModel,
    opt: &mut AdamW,
    samples: &[EpisodeSample],
    loss_cfg: &LossConfig,
    optim: &OptimConfig,
    lr: f64,
) -> Result<UpdateReport, RlError> {
    let (loss, metrics, mut grads) =
        policy_grads(model, samples, loss_cfg, optim.micro_batch_size)?;
    // Checks finiteness of every gradient before anything is written.
    let grad_norm = dojo_train::optim::clip_grad_norm(&mut grads, optim.max_grad_norm)?;
    if !grads.is_empty() {
        opt.step(model.trainable(), &grads, lr)?;
    }
    Ok(UpdateReport {
        samples: samples.len(),
        loss,
        grad_norm,
        lr,
        skipped_zero_advantage: samples
            .iter()
            .filter(|s| s.n_response() > 0 && contributes_nothing(s, loss_cfg))
            .count(),
        metrics: metrics.summary(),
    })
}
