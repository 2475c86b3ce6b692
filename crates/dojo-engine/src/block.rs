//! The transformer block: one definition for every forward pass.
//!
//! The engine's prefill, its batched decode step and the trainer's differentiable pass all run
//! a layer through [`block`], so the order of operations, the residuals, where the Qwen3 head
//! norms sit and how grouped heads are laid out cannot drift between inference and training.
//! The passes differ only in what the two traits say:
//!
//! - [`LayerWeights`]: how a projection reads its weight (the engine's quantized or dense
//!   weights; the trainer's f32 variables, frozen or not, plus LoRA updates).
//! - the `attend` closure: where attention finds earlier positions (a KV cache, appended to;
//!   the batch itself, causally, with a backward pass that recomputes the probabilities).
//!
//! The norms, RoPE and the gated MLP are dojo-kernels' fused ops for both; they have backward
//! passes, which candle's fused ones do not, so the engine computes each op with the kernel the
//! trainer differentiates.

use candle_core::{Result, Tensor};
use dojo_kernels::{RopeLayout, rms_norm, rope, silu_mul};

use crate::config::Config;

/// A layer's linear projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

/// A layer's RMSNorm weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// Before attention (every architecture).
    Attn,
    /// Before the MLP (every architecture).
    Ffn,
    /// Qwen3: over each query head's dimensions, before RoPE.
    QHead,
    /// Qwen3: over each key head's dimensions, before RoPE.
    KHead,
}

/// One layer's weights as a pass reads them.
pub trait LayerWeights {
    /// `x W^T (+ b)` on rows `x` `(n, in)` → `(n, out)`, plus whatever the pass adds (LoRA).
    fn project(&self, p: Proj, x: &Tensor) -> Result<Tensor>;
    /// A norm's weight; `None` where the architecture has none (the head norms before Qwen3).
    fn norm(&self, n: Norm) -> Option<&Tensor>;
}

/// The shape and positions of one pass: `b` sequences of `t` new tokens each, and the RoPE
/// tables of those tokens, `(t, head_dim / 2)` shared by every sequence or `(b, t, head_dim /
/// 2)` one per sequence (a decode step's sequences sit at different positions).
pub struct Positions<'a> {
    pub b: usize,
    pub t: usize,
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
}

/// Transformer block on the hidden states `x` `(b * t, hidden)`, row `bi * t + p` for
/// position `p` of sequence `bi`. `attend(q, k, v)` gets the rotated queries `(b, heads, t,
/// head_dim)` and this pass's keys and values `(b, kv_heads, t, head_dim)` and returns the
/// attention output as rows `(b * t, heads * head_dim)` ([`causal_attention`] or
/// [`decode_attention`]).
pub fn block(
    cfg: &Config,
    w: &impl LayerWeights,
    x: &Tensor,
    at: &Positions,
    attend: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (b, t, hd, eps) = (at.b, at.t, cfg.head_dim, cfg.rms_eps);
    let layout = if cfg.rope_interleaved {
        RopeLayout::Interleaved
    } else {
        RopeLayout::RotateHalf
    };
    let norm = |n: Norm| {
        w.norm(n)
            .ok_or_else(|| candle_core::Error::Msg(format!("layer has no {n:?} norm weight")))
    };
    let h = rms_norm(x, norm(Norm::Attn)?, eps)?;
    let heads = |p: Proj, n: usize, head_norm: Option<Norm>| -> Result<Tensor> {
        let y = w.project(p, &h)?.reshape((b, t, n, hd))?;
        let y = match head_norm.and_then(|n| w.norm(n)) {
            Some(nw) => rms_norm(&y, nw, eps)?,
            None => y,
        };
        y.transpose(1, 2)?.contiguous() // (b, n, t, hd)
    };
    let rotated = |p: Proj, n: usize, head_norm: Norm| {
        rope(&heads(p, n, Some(head_norm))?, at.cos, at.sin, layout)
    };
    let q = rotated(Proj::Q, cfg.num_heads, Norm::QHead)?;
    let k = rotated(Proj::K, cfg.num_kv_heads, Norm::KHead)?;
    let v = heads(Proj::V, cfg.num_kv_heads, None)?;
    let out = attend(&q, &k, &v)?;
    let x = (x + w.project(Proj::O, &out)?)?;
    let h = rms_norm(&x, norm(Norm::Ffn)?, eps)?;
    let g = w.project(Proj::Gate, &h)?;
    let u = w.project(Proj::Up, &h)?;
    x + w.project(Proj::Down, &silu_mul(&g, &u)?)?
}

/// Attention output per head `(b, heads, t, head_dim)` as rows `(b * t, heads * head_dim)`.
fn heads_to_rows(out: &Tensor) -> Result<Tensor> {
    let (b, nh, t, hd) = out.dims4()?;
    out.transpose(1, 2)?.contiguous()?.reshape((b * t, nh * hd))
}

/// Causal attention of the rotated queries `q` `(b, heads, t, head_dim)` at the last `t` of
/// the positions of `k` and `v` `(b, kv_heads, past + t, head_dim)`, as rows `(b * t, heads *
/// head_dim)`: the engine's prefill (keys from its cache) and the trainer's pass (the batch's
/// own keys, `past` = 0) through one kernel ([`dojo_kernels::causal_attention`]).
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let (b, nh, t, hd) = q.dims4()?;
    let nkv = k.dim(1)?;
    if nkv == 0 || !nh.is_multiple_of(nkv) {
        return Err(candle_core::Error::Msg(format!(
            "{nh} query heads cannot be grouped over {nkv} key/value heads"
        )));
    }
    // The queries of a kv head's group stacked: row r · t + p is head r, position p.
    let grouped = q.reshape((b, nkv, (nh / nkv) * t, hd))?;
    let out = dojo_kernels::causal_attention(&grouped, k, v, t, scale(hd))?;
    heads_to_rows(&out.reshape((b, nh, t, hd))?)
}

/// A decode step's attention: each sequence's rotated query `q` `(b, heads, 1, head_dim)`
/// against its own KV cache (`caches[i]`, this step's key and value already appended), as rows
/// `(b, heads * head_dim)` ([`dojo_kernels::decode_attention`]).
pub fn decode_attention(q: &Tensor, caches: &[dojo_kernels::CacheView]) -> Result<Tensor> {
    let (b, nh, _, hd) = q.dims4()?;
    let nkv = match caches.first() {
        Some(c) => c.own.k.dim(1)?,
        None => 0,
    };
    dojo_kernels::decode_attention(&q.reshape((b, nh * hd))?, caches, nh, nkv, scale(hd) as f32)
}

/// Attention's score scale, `1 / √head_dim`.
fn scale(head_dim: usize) -> f64 {
    1.0 / (head_dim as f64).sqrt()
}
