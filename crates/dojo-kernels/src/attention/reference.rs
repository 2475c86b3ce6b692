//! The attention op before the fused one, kept as a reference for comparisons and benchmarks
//! (`examples/attention_bench.rs`) and as a second implementation the tests check the fused
//! op against.

use candle_core::{Device, Result, Tensor};

use super::{Dims, by_ops};
use crate::matmul_no_grad;

/// Bytes of one score-sized temporary: queries are processed in blocks of positions so that
/// no `(heads, t, t)` tensor exists at once.
pub const ATTENTION_BLOCK_BYTES: usize = 16 << 20;

/// Positions per block for `b` rows of `heads` query heads against `t` keys (at least one, at
/// most `t`): a block's scores are at most `b · heads · block · t` floats.
pub fn attention_block_positions(b: usize, heads: usize, t: usize) -> usize {
    let per_position = (b * heads * t * 4).max(1);
    (ATTENTION_BLOCK_BYTES / per_position).clamp(1, t.max(1))
}

/// The attention op before the fused one, kept as a reference for comparisons and
/// benchmarks: blocks of `block` query positions against all keys up to the block's last,
/// each block's scores one matmul and one in-place causal softmax, the probabilities
/// recomputed in the backward pass. Same arguments as [`causal_attention`].
#[doc(hidden)]
pub fn causal_attention_reference_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    t: usize,
    scale: f64,
    block: usize,
) -> Result<Tensor> {
    let dims = Dims::new(q.dims(), k.dims(), v.dims(), t)?;
    if crate::fused(q) {
        let op = BlockedAttention {
            t,
            past: dims.past,
            scale,
            block,
        };
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        by_ops(q, k, v, dims, scale)
    }
}

/// The CPU op of [`causal_attention_reference_blocked`]: `t` query positions after `past`
/// cached ones, in blocks of `block` positions.
struct BlockedAttention {
    t: usize,
    past: usize,
    scale: f64,
    block: usize,
}

impl BlockedAttention {
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

impl candle_core::CustomOp3 for BlockedAttention {
    fn name(&self) -> &'static str {
        "causal-attention-reference"
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
