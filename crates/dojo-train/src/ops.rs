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

/// Causal attention `softmax(q kᵀ · scale + mask) v` as one differentiable op that keeps no
/// score-sized tensor for the backward pass, which recomputes the probabilities instead.
///
/// Op by op, autograd keeps six `(heads, t, t)` tensors per layer until the backward pass (the
/// product, the scaled and the masked scores, the shifted scores, their exponentials and the
/// probabilities): for SmolLM2 6.8 GB at 1,024 tokens and 27 GB at 2,048. Here only q, k, v and
/// the output stay; the backward pass pays one more `q kᵀ` and softmax per layer (as
/// FlashAttention does). Shapes: q `(b, kv_heads, rep · t, hd)` (the queries of a kv head's
/// group stacked, row `r` at position `r % t`), k and v `(b, kv_heads, t, hd)`, mask
/// `(rep · t, t)` with −∞ above the diagonal. CPU only; other devices run the op-by-op graph.
pub(crate) struct CausalAttention {
    mask: Tensor,
    scale: f64,
}

impl CausalAttention {
    fn probs(&self, q: &Tensor, k: &Tensor) -> candle_core::Result<Tensor> {
        let s = (q.matmul(&k.t()?)? * self.scale)?.broadcast_add(&self.mask)?;
        softmax(&s)
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
        into_cpu_storage(&self.probs(&q, &k)?.matmul(&v)?, self.name())
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
        let p = self.probs(&q, &k)?;
        let dv = p.t()?.matmul(&g)?;
        let dp = g.matmul(&v.t()?)?;
        // softmax backward: dS = P ⊙ (dP − Σ_j dP ⊙ P), then the scale of the scores.
        let row = (&dp * &p)?.sum_keepdim(D::Minus1)?;
        let ds = ((dp.broadcast_sub(&row)? * &p)? * self.scale)?;
        let dq = ds.matmul(&k)?;
        let dk = ds.t()?.matmul(&q)?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// [`CausalAttention`] on the CPU, the same computation op by op elsewhere.
pub(crate) fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let op = CausalAttention {
        mask: mask.clone(),
        scale,
    };
    if q.device().is_cpu() && q.dtype() == DType::F32 {
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        op.probs(q, k)?.matmul(v)
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
