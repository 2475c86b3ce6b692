//! Causal attention over a block of new positions, forward and backward, for prefill and
//! training alike.
//!
//! The trainer's pass (all positions new, gradients wanted) and the engine's prefill (new
//! positions after a KV cache's `past` ones, no gradient) are the same op: queries at
//! positions `past..past + t` against the keys `0..past + t`. Only the keys differ: the batch's
//! own, or the cache's with the batch's appended.

use candle_core::{D, DType, Device, Result, Tensor};

use crate::matmul_no_grad;

/// Bytes of one score-sized temporary of [`causal_attention`] on the CPU: queries are
/// processed in blocks of positions so that no `(heads, t, t)` tensor exists at once (at 8,192
/// positions SmolLM2's full scores are 2.4 GB per temporary, and the backward pass holds three
/// of them). Small enough that a block's temporaries are reused from the allocator's heap
/// rather than mapped afresh (and faulted in page by page) for every block, and that the
/// causal cut below saves most of the upper triangle; large enough that each block's matmuls
/// stay efficient.
pub const ATTENTION_BLOCK_BYTES: usize = 16 << 20;

/// Positions per block for `b` rows of `heads` query heads against `t` keys (at least one,
/// at most `t`): a block's scores are at most `b · heads · block · t` floats.
pub fn attention_block_positions(b: usize, heads: usize, t: usize) -> usize {
    let per_position = (b * heads * t * 4).max(1);
    (ATTENTION_BLOCK_BYTES / per_position).clamp(1, t.max(1))
}

/// Causal attention `softmax(q kᵀ · scale + mask) v` of the queries `q` `(b, kv_heads, rep ·
/// t, hd)` at the last `t` positions of the keys and values `k`, `v` `(b, kv_heads, past + t,
/// hd)` (the queries of a kv head's group stacked, row `r` at position `past + r % t`).
/// Returns `(b, kv_heads, rep · t, hd)`.
///
/// On the CPU (f32) one op that keeps no score-sized tensor for the backward pass, which
/// recomputes the probabilities instead. Op by op, autograd keeps six `(heads, t, t)` tensors
/// per layer until the backward pass (the product, the scaled and the masked scores, the
/// shifted scores, their exponentials and the probabilities): for SmolLM2 6.8 GB at 1,024
/// tokens and 27 GB at 2,048. Here only q, k, v and the output stay; the backward pass pays
/// one more `q kᵀ` and softmax per layer (as FlashAttention does). Both passes run over blocks
/// of positions ([`attention_block_positions`]): the queries at positions `p0..p1` see the
/// keys `0..p1` only, so the scores above the diagonal between blocks are never computed
/// (about half the attention matmuls at long sequences), and the softmax with its causal mask
/// is one fused pass in place ([`crate::causal_softmax_`]). Other devices and dtypes run the
/// op-by-op graph with a mask.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    t: usize,
    scale: f64,
) -> Result<Tensor> {
    let (b, kv_heads, rows, _) = q.dims4()?;
    let keys = k.dim(2)?;
    let heads = kv_heads * (rows / t.max(1));
    causal_attention_blocked(q, k, v, t, scale, attention_block_positions(b, heads, keys))
}

/// [`causal_attention`] with `block` positions per block.
pub fn causal_attention_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    t: usize,
    scale: f64,
    block: usize,
) -> Result<Tensor> {
    let keys = k.dim(2)?;
    let rows = q.dim(2)?;
    if t == 0 || keys < t || !rows.is_multiple_of(t) || v.dim(2)? != keys {
        return Err(candle_core::Error::Msg(format!(
            "causal attention: {rows} query rows at {t} positions against {keys} keys and {} values",
            v.dim(2)?
        )));
    }
    let past = keys - t;
    if q.device().is_cpu() && q.dtype() == DType::F32 {
        let op = CausalAttention {
            t,
            past,
            scale,
            block,
        };
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        let mask = causal_mask(past, rows, t, q.device())?.to_dtype(q.dtype())?;
        let s = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
        softmax(&s)?.matmul(v)
    }
}

/// Softmax over the last dimension; the max is a constant for autograd (it cancels out).
fn softmax(x: &Tensor) -> Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// The causal mask of `rows` queries stacked per kv head at `t` positions after `past`:
/// `(rows, past + t)`, row `r` (position `past + r % t`) sees keys `0..=past + r % t`, the
/// rest −∞.
fn causal_mask(past: usize, rows: usize, t: usize, device: &Device) -> Result<Tensor> {
    let cols = past + t;
    let mut m = vec![0f32; rows * cols];
    for (r, row) in m.chunks_mut(cols.max(1)).enumerate() {
        for x in &mut row[past + r % t.max(1) + 1..] {
            *x = f32::NEG_INFINITY;
        }
    }
    Tensor::from_vec(m, (rows, cols), device)
}

/// The CPU op of [`causal_attention`]: `t` query positions after `past` cached ones.
struct CausalAttention {
    t: usize,
    past: usize,
    scale: f64,
    block: usize,
}

impl CausalAttention {
    /// `(first position, positions)` of each block, counted from the first new position.
    fn blocks(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (t, step) = (self.t, self.block.max(1));
        (0..t).step_by(step).map(move |p0| (p0, step.min(t - p0)))
    }

    /// The stacked rows of `x` `(b, kv, rep · t, hd)` at positions `p0..p0 + n`, as
    /// `(b, kv, rep · n, hd)` (a copy of the block's rows).
    fn rows(&self, x: &Tensor, p0: usize, n: usize) -> Result<Tensor> {
        let (b, kv, rows, hd) = x.dims4()?;
        let rep = rows / self.t.max(1);
        x.reshape((b, kv, rep, self.t, hd))?
            .narrow(3, p0, n)?
            .reshape((b, kv, rep * n, hd))
    }

    /// The attention probabilities of the queries `qb` at new positions `p0..p0 + n` against
    /// the keys `kb` (all keys up to the block's last position): one matmul, then the fused
    /// causal softmax in place.
    fn probs(&self, qb: &Tensor, kb: &Tensor, p0: usize, n: usize) -> Result<Tensor> {
        let s = matmul_no_grad(qb, &kb.t()?)?;
        let rows = crate::CausalRows {
            cols: self.past + p0 + n,
            first: self.past + p0,
            period: n,
            scale: self.scale as f32,
        };
        crate::causal_softmax_(&s, rows)?;
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
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let q = cpu_tensor(s1, l1, self.name())?;
        let k = cpu_tensor(s2, l2, self.name())?;
        let v = cpu_tensor(s3, l3, self.name())?;
        let (b, kv, rows, hd) = q.dims4()?;
        let rep = rows / self.t.max(1);
        let mut out = Vec::new();
        for (p0, n) in self.blocks() {
            let seen = self.past + p0 + n;
            let (kb, vb) = (k.narrow(2, 0, seen)?, v.narrow(2, 0, seen)?);
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
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (q, k, v) = (q.detach(), k.detach(), v.detach());
        let (b, kv, rows, hd) = q.dims4()?;
        let rep = rows / self.t.max(1);
        let keys = self.past + self.t;
        let (mut dq, mut dk, mut dv) = (Vec::new(), k.zeros_like()?, v.zeros_like()?);
        for (p0, n) in self.blocks() {
            let seen = self.past + p0 + n;
            let (qb, gb) = (self.rows(&q, p0, n)?, self.rows(grad, p0, n)?);
            let (kb, vb) = (k.narrow(2, 0, seen)?, v.narrow(2, 0, seen)?);
            let p = self.probs(&qb, &kb, p0, n)?;
            let rest = keys - seen;
            dv = (dv + matmul_no_grad(&p.t()?, &gb)?.pad_with_zeros(2, 0, rest)?)?;
            // The gradient of the probabilities, turned in place into that of the scores.
            let ds = matmul_no_grad(&gb, &vb.t()?)?;
            crate::softmax_backward_(&ds, &p, self.scale as f32)?;
            dq.push(matmul_no_grad(&ds, &kb)?.reshape((b, kv, rep, n, hd))?);
            dk = (dk + matmul_no_grad(&ds.t()?, &qb)?.pad_with_zeros(2, 0, rest)?)?;
        }
        let dq = Tensor::cat(&dq, 3)?.reshape((b, kv, rows, hd))?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// A contiguous f32 CPU storage as a tensor (a copy: custom ops get storages, not tensors).
fn cpu_tensor(
    storage: &candle_core::CpuStorage,
    layout: &candle_core::Layout,
    op: &str,
) -> Result<Tensor> {
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
fn into_cpu_storage(t: &Tensor, op: &str) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand;
    use candle_core::Var;

    /// Values and gradients of q, k, v under `f` (queries at the last `t` of `keys`
    /// positions), for the loss Σ out ⊙ w.
    fn run(
        t: usize,
        keys: usize,
        f: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Vec<Vec<f32>> {
        let (b, kv, rep, hd) = (2, 2, 3, 4);
        let q = Var::from_tensor(&rand(&[b, kv, rep * t, hd], 1)).unwrap();
        let k = Var::from_tensor(&rand(&[b, kv, keys, hd], 2)).unwrap();
        let v = Var::from_tensor(&rand(&[b, kv, keys, hd], 3)).unwrap();
        let w = rand(&[b, kv, rep * t, hd], 4);
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

    /// The blocked op against the op-by-op graph with the whole mask (what other devices
    /// run), with and without cached positions before the queries.
    #[test]
    fn blocks_of_query_rows_match_the_whole_graph() {
        let scale = 0.5;
        for (t, keys) in [(7, 7), (7, 12), (1, 9)] {
            let past = keys - t;
            let whole = run(t, keys, |q, k, v| {
                let mask = causal_mask(past, q.dim(2)?, t, q.device())?;
                softmax(&(q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?)?.matmul(v)
            });
            // One block, one position per block, and a last block shorter than the rest.
            for block in [7, 1, 3] {
                let blocked = run(t, keys, |q, k, v| {
                    causal_attention_blocked(q, k, v, t, scale, block)
                });
                for (a, b) in whole.iter().zip(&blocked) {
                    for (x, y) in a.iter().zip(b) {
                        assert!(
                            (x - y).abs() < 1e-5,
                            "{t} of {keys} positions, block of {block}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }

    /// Prefill in two parts (a cache of 5 positions, then 4 more) gives the last 4 positions
    /// of the single pass over all 9: what lets the engine's cached prefill and the trainer's
    /// pass share the op.
    #[test]
    fn a_cached_prefix_gives_the_rows_of_the_whole_pass() {
        let (b, kv, rep, hd, t, past) = (1, 2, 3, 4, 4, 5);
        let keys = past + t;
        let q = rand(&[b, kv, rep * keys, hd], 1);
        let (k, v) = (rand(&[b, kv, keys, hd], 2), rand(&[b, kv, keys, hd], 3));
        let whole = causal_attention(&q, &k, &v, keys, 0.5).unwrap();
        let tail = |x: &Tensor, n: usize| {
            x.reshape((b, kv, rep, keys, hd))
                .unwrap()
                .narrow(3, keys - n, n)
                .unwrap()
                .reshape((b, kv, rep * n, hd))
                .unwrap()
        };
        let part = causal_attention(&tail(&q, t), &k, &v, t, 0.5).unwrap();
        let (a, b) = (tail(&whole, t), part);
        let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);
    }

    #[test]
    fn block_positions_bound_the_score_temporaries() {
        // SmolLM2 at its context: 9 query heads, 8,192 positions.
        let n = attention_block_positions(1, 9, 8192);
        assert!(n * 9 * 8192 * 4 <= ATTENTION_BLOCK_BYTES && n >= 32);
        assert_eq!(attention_block_positions(1, 9, 32), 32);
        assert_eq!(attention_block_positions(1 << 20, 64, 1 << 20), 1);
    }

    #[test]
    fn mismatched_shapes_are_an_error() {
        let q = rand(&[1, 1, 6, 4], 1);
        let k = rand(&[1, 1, 2, 4], 2);
        let err = causal_attention(&q, &k, &k, 3, 1.0).unwrap_err();
        assert!(
            err.to_string()
                .contains("6 query rows at 3 positions against 2 keys")
        );
    }
}
