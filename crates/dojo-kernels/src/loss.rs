//! Cross-entropy over the vocabulary as one op with its own backward pass.
//!
//! Built from candle primitives the loss is a max, a subtraction, an exponential, a sum, a log
//! and a gather over the `(rows, vocab)` logits, and autograd keeps and walks back through each
//! of them: about ten passes over a tensor that at 2,048 rows of a 49,152-entry vocabulary is
//! 400 MB. Here the forward pass reads each row once (its log-sum-exp and the target's logit)
//! and keeps nothing; the backward pass reads it once more and writes `softmax − one-hot`.

use candle_core::{CpuStorage, CustomOp2, D, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::{simd, slice};

/// `-log softmax(logits)[target]` for each row: `logits` `(n, vocab)`, `targets` `(n,)` u32;
/// the result is `(n,)`, differentiable in `logits`. A target outside the vocabulary is an
/// error.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let (n, _) = logits.dims2()?;
    if targets.dims() != [n] || targets.dtype() != DType::U32 {
        return Err(candle_core::Error::Msg(format!(
            "cross-entropy: targets {:?} {:?} for logits {:?}",
            targets.dims(),
            targets.dtype(),
            logits.dims()
        )));
    }
    if crate::fused(logits) && targets.device().is_cpu() {
        logits
            .contiguous()?
            .apply_op2(&targets.contiguous()?, CrossEntropy)
    } else {
        let m = logits.max_keepdim(D::Minus1)?.detach();
        let z = logits.broadcast_sub(&m)?;
        let lse = z.exp()?.sum_keepdim(D::Minus1)?.log()?;
        let picked = z.gather(&targets.unsqueeze(1)?.contiguous()?, 1)?;
        (lse - picked)?.squeeze(1)
    }
}

fn targets<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [u32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::U32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => Err(candle_core::Error::Msg(
            "cross-entropy: targets are not contiguous u32".into(),
        )),
    }
}

struct CrossEntropy;

/// `(max, Σ exp(x − max))` of a row, eight lanes at a time (see `softmax_row`).
#[inline(always)]
fn max_and_sum(x: &[f32]) -> (f32, f32) {
    let m = simd::max_scaled(x, 1.0);
    let mut s = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            s[i] += simd::exp(c[i] - m);
        }
    }
    let sum = s.iter().sum::<f32>() + tail.iter().map(|v| simd::exp(v - m)).sum::<f32>();
    (m, sum)
}

/// One row's gradient: `g · (softmax(x) − one-hot(target))`.
#[inline(always)]
fn grad_row(x: &[f32], target: usize, g: f32, out: &mut [f32]) {
    let (m, sum) = max_and_sum(x);
    let scale = g / sum;
    for (o, v) in out.iter_mut().zip(x) {
        *o = simd::exp(v - m) * scale;
    }
    out[target] -= g;
}

simd::avx2_twin!(
    /// [`max_and_sum`], vectorised for AVX2 + FMA where the CPU has them.
    fn max_and_sum_best = max_and_sum(x: &[f32]) -> (f32, f32)
);

simd::avx2_twin!(
    /// [`grad_row`], vectorised for AVX2 + FMA where the CPU has them.
    fn grad_row_best = grad_row(x: &[f32], target: usize, g: f32, out: &mut [f32])
);

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "dojo-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, t) = (slice(s1, l1, self.name())?, targets(s2, l2)?);
        let vocab = l1.dims().last().copied().unwrap_or(0).max(1);
        if let Some(t) = t.iter().find(|&&t| t as usize >= vocab) {
            return Err(candle_core::Error::Msg(format!(
                "cross-entropy: target {t} outside the vocabulary of {vocab}"
            )));
        }
        let nll: Vec<f32> = x
            .par_chunks(vocab)
            .zip(t.par_iter())
            .map(|(row, &t)| {
                let (m, sum) = max_and_sum_best(row);
                m + sum.ln() - row[t as usize]
            })
            .collect();
        Ok((CpuStorage::F32(nll), Shape::from(t.len())))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets_t: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let vocab = logits.dim(D::Minus1)?.max(1);
        let t = targets_t.to_vec1::<u32>()?;
        let dx = crate::with_values([logits, grad], self.name(), |[x, g]| {
            let mut dx = vec![0f32; x.len()];
            dx.par_chunks_mut(vocab)
                .zip(x.par_chunks(vocab))
                .zip(t.par_iter().zip(g.par_iter()))
                .for_each(|((out, row), (&t, &g))| grad_row_best(row, t as usize, g, out));
            Ok(dx)
        })?;
        Ok((
            Some(Tensor::from_vec(dx, logits.shape(), logits.device())?),
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::max_abs;
    use candle_core::{Device, Var};

    fn primitive(logits: &Tensor, targets: &Tensor) -> Tensor {
        let m = logits.max_keepdim(D::Minus1).unwrap().detach();
        let z = logits.broadcast_sub(&m).unwrap();
        let lse = z
            .exp()
            .unwrap()
            .sum_keepdim(D::Minus1)
            .unwrap()
            .log()
            .unwrap();
        let picked = z.gather(&targets.unsqueeze(1).unwrap(), 1).unwrap();
        (lse - picked).unwrap().squeeze(1).unwrap()
    }

    #[test]
    fn values_and_gradients_match_the_primitive_graph() {
        // 37 columns: four lanes of eight and a tail; large logits to exercise the max shift.
        let (n, vocab) = (5, 37);
        let v: Vec<f32> = (0..n * vocab)
            .map(|i| ((i * 7919) % 113) as f32 / 3.0 - 15.0)
            .collect();
        let x = Var::from_vec(v, (n, vocab), &Device::Cpu).unwrap();
        let targets = Tensor::new(&[0u32, 36, 5, 8, 17], &Device::Cpu).unwrap();
        let w = Tensor::new(&[1f32, -2.0, 0.5, 3.0, 0.25], &Device::Cpu).unwrap();
        let ours = cross_entropy(x.as_tensor(), &targets).unwrap();
        let theirs = primitive(x.as_tensor(), &targets);
        assert!(max_abs(&ours, &theirs) < 1e-5);
        let g1 = (&ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g2 = (&theirs * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (g1, g2) = (
            g1.get(x.as_tensor()).unwrap(),
            g2.get(x.as_tensor()).unwrap(),
        );
        assert!(max_abs(g1, g2) < 1e-6);
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_refused() {
        let x = Tensor::zeros((2, 4), DType::F32, &Device::Cpu).unwrap();
        let t = Tensor::new(&[1u32, 4], &Device::Cpu).unwrap();
        let e = cross_entropy(&x, &t).unwrap_err().to_string();
        assert!(e.contains("target 4 outside the vocabulary of 4"), "{e}");
        let t = Tensor::new(&[1u32], &Device::Cpu).unwrap();
        assert!(cross_entropy(&x, &t).is_err());
    }
}
