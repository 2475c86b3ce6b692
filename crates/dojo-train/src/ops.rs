//! The differentiable operations of the trainable forward pass ([`crate::model`]) that are not
//! dojo-kernels' fused ones (RMSNorm, RoPE, the SiLU gate): softmax from primitives, linear
//! layers, a frozen matmul whose weights take no gradient, causal
//! attention as one op whose backward pass recomputes the probabilities instead of keeping
//! them, and the summed negative log-likelihood.

use candle_core::{D, DType, Device, Tensor};
use dojo_kernels::{matmul, matmul_no_grad};

/// Softmax over the last dimension; the max is a constant for autograd (it cancels out).
pub(crate) fn softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// `x @ w^T (+ b)` on `(n, in)` rows.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let y = matmul(x, &w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
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
/// in blocks of positions so that no `(heads, t, t)` tensor exists at once (at 8,192 positions
/// SmolLM2's full scores are 2.4 GB per temporary, and the backward pass holds three of them).
/// Small enough that a block's temporaries are reused from the allocator's heap rather than
/// mapped afresh (and faulted in page by page) for every block, and that the causal cut
/// below saves most of the upper triangle; large enough that each block's matmuls stay
/// efficient.
pub const ATTENTION_BLOCK_BYTES: usize = 16 << 20;

/// Positions per block for `b` rows of `heads` query heads against `t` keys (at least one,
/// at most `t`): a block's scores are at most `b · heads · block · t` floats.
pub fn attention_block_positions(b: usize, heads: usize, t: usize) -> usize {
    let per_position = (b * heads * t * 4).max(1);
    (ATTENTION_BLOCK_BYTES / per_position).clamp(1, t.max(1))
}

/// Causal attention `softmax(q kᵀ · scale + mask) v` as one differentiable op that keeps no
/// score-sized tensor for the backward pass, which recomputes the probabilities instead.
///
/// Op by op, autograd keeps six `(heads, t, t)` tensors per layer until the backward pass (the
/// product, the scaled and the masked scores, the shifted scores, their exponentials and the
/// probabilities): for SmolLM2 6.8 GB at 1,024 tokens and 27 GB at 2,048. Here only q, k, v and
/// the output stay; the backward pass pays one more `q kᵀ` and softmax per layer (as
/// FlashAttention does). Both passes run over blocks of positions
/// ([`attention_block_positions`]): the queries at positions `p0..p1` see the keys `0..p1`
/// only, so the scores above the diagonal between blocks are never computed (about half the
/// attention matmuls at long sequences), and the softmax with its causal mask is one fused
/// pass in place ([`dojo_kernels::causal_softmax_`]). Shapes: q `(b, kv_heads, rep · t, hd)`
/// (the queries of a kv head's group stacked, row `r` at position `r % t`), k and v
/// `(b, kv_heads, t, hd)`. CPU only; other devices run the op-by-op graph ([`causal_mask`]).
pub(crate) struct CausalAttention {
    t: usize,
    scale: f64,
    block: usize,
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
    /// `(first position, positions)` of each block.
    fn blocks(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (t, step) = (self.t, self.block.max(1));
        (0..t).step_by(step).map(move |p0| (p0, step.min(t - p0)))
    }

    /// The stacked rows of `x` `(b, kv, rep · t, hd)` at positions `p0..p0 + n`, as
    /// `(b, kv, rep · n, hd)` (a copy of the block's rows).
    fn rows(&self, x: &Tensor, p0: usize, n: usize) -> candle_core::Result<Tensor> {
        let (b, kv, rows, hd) = x.dims4()?;
        let rep = rows / self.t.max(1);
        x.reshape((b, kv, rep, self.t, hd))?
            .narrow(3, p0, n)?
            .reshape((b, kv, rep * n, hd))
    }

    /// The attention probabilities of the queries `qb` at positions `p0..p0 + n` against the
    /// keys `kb` at `0..p0 + n`: one matmul, then the fused causal softmax in place.
    fn probs(&self, qb: &Tensor, kb: &Tensor, p0: usize, n: usize) -> candle_core::Result<Tensor> {
        let s = matmul_no_grad(qb, &kb.t()?)?;
        let rows = dojo_kernels::CausalRows {
            cols: p0 + n,
            first: p0,
            period: n,
            scale: self.scale as f32,
        };
        dojo_kernels::causal_softmax_(&s, rows)?;
        Ok(s)
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
        let (b, kv, rows, hd) = q.dims4()?;
        let rep = rows / self.t.max(1);
        let mut out = Vec::new();
        for (p0, n) in self.blocks() {
            let (kb, vb) = (k.narrow(2, 0, p0 + n)?, v.narrow(2, 0, p0 + n)?);
            let p = self.probs(&self.rows(&q, p0, n)?, &kb, p0, n)?;
            out.push(matmul_no_grad(&p, &vb)?.reshape((b, kv, rep, n, hd))?);
        }
        let out = Tensor::cat(&out, 3)?.reshape((b, kv, rows, hd))?;
        into_cpu_storage(&out, self.name())
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (q, k, v) = (q.detach(), k.detach(), v.detach());
        let (b, kv, rows, hd) = q.dims4()?;
        let rep = rows / self.t.max(1);
        let (mut dq, mut dk, mut dv) = (Vec::new(), k.zeros_like()?, v.zeros_like()?);
        for (p0, n) in self.blocks() {
            let p1 = p0 + n;
            let (qb, gb) = (self.rows(&q, p0, n)?, self.rows(grad, p0, n)?);
            let (kb, vb) = (k.narrow(2, 0, p1)?, v.narrow(2, 0, p1)?);
            let p = self.probs(&qb, &kb, p0, n)?;
            let rest = self.t - p1;
            dv = (dv + matmul_no_grad(&p.t()?, &gb)?.pad_with_zeros(2, 0, rest)?)?;
            // The gradient of the probabilities, turned in place into that of the scores.
            let ds = matmul_no_grad(&gb, &vb.t()?)?;
            dojo_kernels::softmax_backward_(&ds, &p, self.scale as f32)?;
            dq.push(matmul_no_grad(&ds, &kb)?.reshape((b, kv, rep, n, hd))?);
            dk = (dk + matmul_no_grad(&ds.t()?, &qb)?.pad_with_zeros(2, 0, rest)?)?;
        }
        let dq = Tensor::cat(&dq, 3)?.reshape((b, kv, rows, hd))?;
        Ok((Some(dq), Some(dk), Some(dv)))
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
    let heads = kv_heads * (rows / t.max(1));
    causal_attention_blocked(q, k, v, scale, attention_block_positions(b, heads, t))
}

/// [`causal_attention`] with `block` positions per block.
pub(crate) fn causal_attention_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    block: usize,
) -> candle_core::Result<Tensor> {
    let t = k.dim(2)?;
    if q.device().is_cpu() && q.dtype() == DType::F32 {
        let op = CausalAttention { t, scale, block };
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        let mask = causal_mask(0, q.dim(2)?, t, q.device())?.to_dtype(q.dtype())?;
        let s = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
        softmax(&s)?.matmul(v)
    }
}

/// `x W^T` where `W` gets no gradient (LoRA's base weights): `W` detached, so on the CPU
/// [`dojo_kernels::matmul`]'s backward pass differentiates `x` alone.
pub(crate) fn frozen_matmul(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    matmul(x, &w.detach().t()?)
}

/// Sum over rows of `-log softmax(logits)[target]`; `logits` `(n, vocab)`, `targets` `(n,)` u32
/// ([`dojo_kernels::cross_entropy`]: one pass over the logits each way, nothing kept).
pub fn nll_sum(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    dojo_kernels::cross_entropy(logits, targets)?.sum_all()
}

/// `log softmax(logits)[target]` per row, `(n,)`, differentiable in `logits` (the same fused op
/// as [`nll_sum`], negated): the token logprobs of a policy-gradient loss.
pub fn token_logprobs(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    dojo_kernels::cross_entropy(logits, targets)?.neg()
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
        // One block, one position per block, and a last block shorter than the rest.
        for block in [7, 1, 3] {
            let blocked = run(|q, k, v| causal_attention_blocked(q, k, v, scale, block));
            for (a, b) in whole.iter().zip(&blocked) {
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() < 1e-5,
                        "block of {block} positions: {x} vs {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn block_positions_bound_the_score_temporaries() {
        // SmolLM2 at its context: 9 query heads, 8,192 positions.
        let n = attention_block_positions(1, 9, 8192);
        assert!(n * 9 * 8192 * 4 <= ATTENTION_BLOCK_BYTES && n >= 32);
        assert_eq!(attention_block_positions(1, 9, 32), 32);
        assert_eq!(attention_block_positions(1 << 20, 64, 1 << 20), 1);
    }
}
