//! The trainer's own differentiable operations around dojo-kernels' (which hold the norms,
//! RoPE, the SiLU gate, causal attention and the loss kernel): linear layers, a frozen matmul
//! whose weights take no gradient, and the summed negative log-likelihood.

use candle_core::Tensor;
use dojo_kernels::matmul;

/// `x @ w^T (+ b)` on `(n, in)` rows.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let y = matmul(x, &w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
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
