//! AdamW, the learning-rate schedule and gradient clipping, with the semantics of
//! `torch.optim.AdamW`, transformers' `get_cosine_schedule_with_warmup` and
//! `torch.nn.utils.clip_grad_norm_`.
//!
//! Why not candle-nn's `AdamW`: its update is the same decoupled one, but its moments and step
//! count are private, so a run could not be resumed with its optimizer state; and it decays
//! every parameter, where fine-tuning recipes (transformers' Trainer) leave biases and norm
//! weights undecayed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{Device, Tensor, Var};

use crate::TrainError;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// Whether a parameter gets weight decay: matrices do; vectors (biases, norm weights) do not.
pub fn decays(var: &Var) -> bool {
    var.rank() >= 2
}

/// AdamW with its state (step count, first and second moments by parameter name).
pub struct AdamW {
    pub config: AdamWConfig,
    pub step: u64,
    m: BTreeMap<String, Tensor>,
    v: BTreeMap<String, Tensor>,
}

impl AdamW {
    pub fn new(config: AdamWConfig) -> AdamW {
        AdamW {
            config,
            step: 0,
            m: BTreeMap::new(),
            v: BTreeMap::new(),
        }
    }

    /// One update at learning rate `lr`. Parameters without a gradient are left alone (as
    /// torch does for `grad is None`).
    pub fn step(
        &mut self,
        params: &BTreeMap<String, Var>,
        grads: &HashMap<String, Tensor>,
        lr: f64,
    ) -> Result<(), TrainError> {
        let c = self.config;
        self.step += 1;
        let t = self.step as i32;
        let bc1 = 1.0 - c.beta1.powi(t);
        let bc2 = 1.0 - c.beta2.powi(t);
        for (name, var) in params {
            let Some(g) = grads.get(name) else { continue };
            let m = match self.m.get(name) {
                Some(m) => (m.affine(c.beta1, 0.)? + g.affine(1.0 - c.beta1, 0.)?)?,
                None => g.affine(1.0 - c.beta1, 0.)?,
            };
            let g2 = g.sqr()?;
            let v = match self.v.get(name) {
                Some(v) => (v.affine(c.beta2, 0.)? + g2.affine(1.0 - c.beta2, 0.)?)?,
                None => g2.affine(1.0 - c.beta2, 0.)?,
            };
            let wd = if decays(var) { c.weight_decay } else { 0.0 };
            let theta = var.as_tensor().affine(1.0 - lr * wd, 0.)?;
            let denom = v.sqrt()?.affine(1.0 / bc2.sqrt(), c.eps)?;
            let upd = m.div(&denom)?.affine(lr / bc1, 0.)?;
            var.set(&(theta - upd)?)?;
            self.m.insert(name.clone(), m);
            self.v.insert(name.clone(), v);
        }
        Ok(())
    }

    /// Moments as one safetensors file (`m.NAME`, `v.NAME`); the step count goes in the
    /// trainer state.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        let mut all: HashMap<String, Tensor> = HashMap::new();
        for (k, t) in &self.m {
            all.insert(format!("m.{k}"), t.clone());
        }
        for (k, t) in &self.v {
            all.insert(format!("v.{k}"), t.clone());
        }
        candle_core::safetensors::save(&all, path).map_err(|e| TrainError::file(path, e))
    }

    /// Restore what [`AdamW::save`] wrote, checking that it covers exactly `params`' shapes.
    pub fn load(
        config: AdamWConfig,
        step: u64,
        path: &Path,
        params: &BTreeMap<String, Var>,
        device: &Device,
    ) -> Result<AdamW, TrainError> {
        let mut all =
            candle_core::safetensors::load(path, device).map_err(|e| TrainError::file(path, e))?;
        let mut opt = AdamW::new(config);
        opt.step = step;
        for (name, var) in params {
            for (prefix, map) in [("m", &mut opt.m), ("v", &mut opt.v)] {
                if let Some(t) = all.remove(&format!("{prefix}.{name}")) {
                    if t.dims() != var.dims() {
                        return Err(TrainError::file(
                            path,
                            format!("optimizer state {prefix}.{name} has the wrong shape"),
                        ));
                    }
                    map.insert(name.clone(), t);
                }
            }
        }
        if let Some(extra) = all.keys().next() {
            return Err(TrainError::file(
                path,
                format!("optimizer state {extra} matches no parameter of this model"),
            ));
        }
        Ok(opt)
    }
}

/// Linear warmup from 0 to `base` over `warmup` steps, then cosine decay to 0 at `total`
/// (transformers' `get_cosine_schedule_with_warmup`); `step` counts from 0.
pub fn lr_at(step: u64, base: f64, warmup: u64, total: u64) -> f64 {
    if step < warmup {
        return base * step as f64 / warmup.max(1) as f64;
    }
    let progress = (step - warmup) as f64 / total.saturating_sub(warmup).max(1) as f64;
    base * (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
}

/// The global L2 norm of all gradients; if it exceeds `max_norm` (> 0), every gradient is
/// scaled by `max_norm / (norm + 1e-6)` as `clip_grad_norm_` does. Returns the norm before
/// clipping.
pub fn clip_grad_norm(
    grads: &mut HashMap<String, Tensor>,
    max_norm: f64,
) -> Result<f64, TrainError> {
    let mut sq = 0f64;
    for g in grads.values() {
        sq += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
    }
    let norm = sq.sqrt();
    if !norm.is_finite() {
        return Err(TrainError::NonFinite(format!("gradient norm is {norm}")));
    }
    let coef = max_norm / (norm + 1e-6);
    if max_norm > 0.0 && coef < 1.0 {
        for g in grads.values_mut() {
            *g = g.affine(coef, 0.)?;
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        assert_eq!(lr_at(0, 1.0, 10, 110), 0.0);
        assert!((lr_at(5, 1.0, 10, 110) - 0.5).abs() < 1e-12);
        assert!((lr_at(10, 1.0, 10, 110) - 1.0).abs() < 1e-12);
        assert!((lr_at(60, 1.0, 10, 110) - 0.5).abs() < 1e-12);
        assert!(lr_at(110, 1.0, 10, 110).abs() < 1e-12);
        // No warmup: the first step trains at the full rate.
        assert_eq!(lr_at(0, 2.0, 0, 5), 2.0);
    }

    #[test]
    fn clipping_scales_to_the_max_norm() {
        let d = Device::Cpu;
        let mut g = HashMap::new();
        g.insert("a".to_string(), Tensor::new(&[3f32, 0.], &d).unwrap());
        g.insert("b".to_string(), Tensor::new(&[[4f32]], &d).unwrap());
        let n = clip_grad_norm(&mut g, 1.0).unwrap();
        assert!((n - 5.0).abs() < 1e-6);
        let a = g["a"].to_vec1::<f32>().unwrap();
        assert!((a[0] - 0.6).abs() < 1e-6, "{a:?}");
        // Below the threshold nothing changes.
        let n2 = clip_grad_norm(&mut g, 10.0).unwrap();
        assert!((n2 - 1.0).abs() < 1e-5);
        assert!((g["a"].to_vec1::<f32>().unwrap()[0] - 0.6).abs() < 1e-6);
    }
}
