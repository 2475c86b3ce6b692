//! The differentiable operations of the trainable forward pass ([`crate::model`]) that are not
//! dojo-kernels' fused ones (RMSNorm, RoPE, the SiLU gate): softmax from primitives, linear
//! layers, a frozen matmul whose weights take no gradient, causal
//! attention as one op whose backward pass recomputes the probabilities instead of keeping
//! them, and the summed negative log-likelihood.

use candle_core::{D, DType, Device, Tensor};

/// Softmax over the last dimension; the max is a constant for autograd (it cancels out).
pub(crate) fn softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// `x @ w^T (+ b)` on `(n, in)` rows.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let y = x.matmul(&w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// `x W^T` for a frozen `W` (LoRA's base weights) with a backward pass for `x` only.
///
/// candle's matmul backward computes the gradient of both operands even when one of them needs
/// none, and keeps it in the gradient store until the pass ends: for a frozen base that is a
/// third of the backward matmul work and a weight-sized tensor per projection, for nothing.
/// On the CPU this op runs the same matmul and differentiates `x` alone; other devices use the
/// plain matmul (a custom op would need a kernel per backend).
pub(crate) struct FrozenLinear(Tensor);

impl candle_core::CustomOp1 for FrozenLinear {
    fn name(&self) -> &'static str {
        "frozen-linear"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let x = cpu_tensor(storage, layout, self.name())?;
        into_cpu_storage(&x.matmul(&self.0.t()?)?, self.name())
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.0)?))
    }
}

/// A contiguous f32 CPU storage as a tensor (a copy: custom ops get storages, not tensors).
pub(crate) fn cpu_tensor(
    storage: &candle_core::CpuStorage,
    layout: &candle_core::Layout,
    op: &str,
) -> candle_core::Result<Tensor> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Err(candle_core::Error::Msg(format!(
            "{op}: non-contiguous input"
        )));
    };
    Tensor::from_slice(
        &storage.as_slice::<f32>()?[start..end],
        layout.shape(),
        &Device::Cpu,
    )
}

/// A CPU tensor's storage and shape, as a custom op's forward returns them.
pub(crate) fn into_cpu_storage(
    t: &Tensor,
    op: &str,
) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
    let t = t.contiguous()?;
    let (st, layout) = t.storage_and_layout();
    match (&*st, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(c), Some((0, end))) if end == c.as_slice::<f32>()?.len() => {
            Ok((c.clone(), t.shape().clone()))
        }
        (candle_core::Storage::Cpu(_), _) => {
            let v = t.flatten_all()?.to_vec1::<f32>()?;
            Ok((candle_core::CpuStorage::F32(v), t.shape().clone()))
        }
        _ => Err(candle_core::Error::Msg(format!("{op}: not on the CPU"))),
    }
}

/// Bytes of one score-sized temporary of [`CausalAttention`] on the CPU: queries are processed
/// in blocks of rows so that no `(heads, t, t)` tensor exists at once, and a sequence as long
/// as the model's context trains in bounded memory (at 8,192 positions SmolLM2's full scores
/// are 2.4 GB per temporary, and the backward pass holds four of them).
pub const ATTENTION_BLOCK_BYTES: usize = 128 << 20;

/// Query rows per block for queries `(b, kv_heads, rows, hd)` against `t` keys (at least one,
/// at most `rows`).
pub fn attention_block_rows(b: usize, kv_heads: usize, rows: usize, t: usize) -> usize {
    let per_row = (b * kv_heads * t * 4).max(1);
    (ATTENTION_BLOCK_BYTES / per_row).clamp(1, rows.max(1))
}

/// Causal attention `softmax(q kᵀ · scale + mask) v` as one differentiable op that keeps no
/// score-sized tensor for the backward pass, which recomputes the probabilities instead.
///
/// Op by op, autograd keeps six `(heads, t, t)` tensors per layer until the backward pass (the
/// product, the scaled and the masked scores, the shifted scores, their exponentials and the
/// probabilities): for SmolLM2 6.8 GB at 1,024 tokens and 27 GB at 2,048. Here only q, k, v and
/// the output stay; the backward pass pays one more `q kᵀ` and softmax per layer (as
/// FlashAttention does). Both passes run over blocks of query rows
/// ([`attention_block_rows`]), each with its own slice of the causal mask, so their
/// temporaries are `(b, kv_heads, block, t)`. Shapes: q `(b, kv_heads, rep · t, hd)` (the
/// queries of a kv head's group stacked, row `r` at position `r % t`), k and v
/// `(b, kv_heads, t, hd)`. CPU only; other devices run the op-by-op graph ([`causal_mask`]).
pub(crate) struct CausalAttention {
    t: usize,
    scale: f64,
    block_rows: usize,
}

/// The causal mask of queries stacked per kv head: `(rows, t)`, row `r` (position `r % t`)
/// sees keys `0..=r % t`, the rest −∞.
pub(crate) fn causal_mask(
    first_row: usize,
    rows: usize,
    t: usize,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let mut m = vec![0f32; rows * t];
    for (i, row) in m.chunks_mut(t.max(1)).enumerate() {
        let pos = (first_row + i) % t.max(1);
        for x in &mut row[pos + 1..] {
            *x = f32::NEG_INFINITY;
        }
    }
    Tensor::from_vec(m, (rows, t), device)
}

impl CausalAttention {
    fn probs(&self, q: &Tensor, k: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let s = (q.matmul(&k.t()?)? * self.scale)?.broadcast_add(mask)?;
        softmax(&s)
    }

    /// `(first row, rows)` of each block of the stacked query rows.
    fn blocks(&self, rows: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let step = self.block_rows.max(1);
        (0..rows)
            .step_by(step)
            .map(move |r0| (r0, step.min(rows - r0)))
    }
}

impl candle_core::CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
        s3: &candle_core::CpuStorage,
        l3: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let q = cpu_tensor(s1, l1, self.name())?;
        let k = cpu_tensor(s2, l2, self.name())?;
        let v = cpu_tensor(s3, l3, self.name())?;
        let rows = q.dim(2)?;
        let mut out = Vec::new();
        for (r0, n) in self.blocks(rows) {
            let mask = causal_mask(r0, n, self.t, &Device::Cpu)?;
            out.push(self.probs(&q.narrow(2, r0, n)?, &k, &mask)?.matmul(&v)?);
        }
        into_cpu_storage(&Tensor::cat(&out, 2)?, self.name())
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (q, k, v, g) = (q.detach(), k.detach(), v.detach(), grad.contiguous()?);
        let rows = q.dim(2)?;
        let (mut dq, mut dk, mut dv) = (Vec::new(), k.zeros_like()?, v.zeros_like()?);
        for (r0, n) in self.blocks(rows) {
            let (qb, gb) = (q.narrow(2, r0, n)?, g.narrow(2, r0, n)?);
            let mask = causal_mask(r0, n, self.t, q.device())?;
            let p = self.probs(&qb, &k, &mask)?;
            dv = (dv + p.t()?.matmul(&gb)?)?;
            let dp = gb.matmul(&v.t()?)?;
            // softmax backward: dS = P ⊙ (dP − Σ_j dP ⊙ P), then the scale of the scores.
            let row = (&dp * &p)?.sum_keepdim(D::Minus1)?;
            let ds = ((dp.broadcast_sub(&row)? * &p)? * self.scale)?;
            dq.push(ds.matmul(&k)?);
            dk = (dk + ds.t()?.matmul(&qb)?)?;
        }
        Ok((Some(Tensor::cat(&dq, 2)?), Some(dk), Some(dv)))
    }
}

/// [`CausalAttention`] over `t` positions on the CPU, the same computation op by op elsewhere.
pub(crate) fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let (b, kv_heads, rows, _) = q.dims4()?;
    let t = k.dim(2)?;
    causal_attention_blocked(q, k, v, scale, attention_block_rows(b, kv_heads, rows, t))
}

/// [`causal_attention`] with `block_rows` query rows per block.
pub(crate) fn causal_attention_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    block_rows: usize,
) -> candle_core::Result<Tensor> {
    let t = k.dim(2)?;
    let op = CausalAttention {
        t,
        scale,
        block_rows,
    };
    if q.device().is_cpu() && q.dtype() == DType::F32 {
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        let mask = causal_mask(0, q.dim(2)?, t, q.device())?.to_dtype(q.dtype())?;
        op.probs(q, k, &mask)?.matmul(v)
    }
}

/// `x W^T` where `W` gets no gradient (see [`FrozenLinear`]).
pub(crate) fn frozen_matmul(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 && w.dtype() == DType::F32 {
        x.contiguous()?.apply_op1(FrozenLinear(w.detach()))
    } else {
        x.matmul(&w.t()?)
    }
}

/// Sum over rows of `-log softmax(logits)[target]`; `logits` `(n, vocab)`, `targets` `(n,)` u32.
pub fn nll_sum(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    let m = logits.max_keepdim(D::Minus1)?.detach();
    let z = logits.broadcast_sub(&m)?;
    let lse = z.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let picked = z.gather(&targets.unsqueeze(1)?.contiguous()?, 1)?;
    (lse - picked)?.sum_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    fn rand(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
        // A fixed pseudo-random fill (xorshift), so the test needs no RNG dependency.
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// Values and gradients of q, k, v under `f`, for the loss Σ out ⊙ w.
    fn run(f: impl Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>) -> Vec<Vec<f32>> {
        let (b, kv, rep, t, hd) = (2, 2, 3, 7, 4);
        let q = Var::from_tensor(&rand((b, kv, rep * t, hd), 1)).unwrap();
        let k = Var::from_tensor(&rand((b, kv, t, hd), 2)).unwrap();
        let v = Var::from_tensor(&rand((b, kv, t, hd), 3)).unwrap();
        let w = rand((b, kv, rep * t, hd), 4);
        let out = f(q.as_tensor(), k.as_tensor(), v.as_tensor()).unwrap();
        let grads = (&out * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        vec![
            flat(&out),
            flat(grads.get(q.as_tensor()).unwrap()),
            flat(grads.get(k.as_tensor()).unwrap()),
            flat(grads.get(v.as_tensor()).unwrap()),
        ]
    }

    #[test]
    fn blocks_of_query_rows_match_the_whole_graph() {
        let scale = 0.5;
        // The op-by-op graph with the whole mask: what other devices run.
        let whole = run(|q, k, v| {
            let mask = causal_mask(0, q.dim(2)?, k.dim(2)?, q.device())?;
            softmax(&(q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?)?.matmul(v)
        });
        // One block, one row per block, and blocks that straddle the stacked groups.
        for rows in [21, 1, 5] {
            let blocked = run(|q, k, v| causal_attention_blocked(q, k, v, scale, rows));
            for (a, b) in whole.iter().zip(&blocked) {
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() < 1e-5, "block of {rows} rows: {x} vs {y}");
                }
            }
        }
    }

    #[test]
    fn block_rows_bound_the_score_temporaries() {
        // SmolLM2 at its context: 3 kv heads × 3 stacked groups × 8,192 positions.
        let rows = attention_block_rows(1, 3, 3 * 8192, 8192);
        assert!(rows * 3 * 8192 * 4 <= ATTENTION_BLOCK_BYTES && rows > 1000);
        assert_eq!(attention_block_rows(1, 3, 96, 32), 96);
        assert_eq!(attention_block_rows(1 << 20, 64, 10, 1 << 20), 1);
    }
}
