//! Causal softmax over rows of attention scores, forward and backward, in place.
//!
//! An attention op that runs its own matmuls (dojo-train's `CausalAttention`) calls these on
//! the score block it just computed: one multi-threaded pass per row replaces candle's scale,
//! mask, max, subtract, exp, sum and divide (seven single-threaded passes, each allocating a
//! score-sized tensor), and the causal mask is applied by position, so no mask tensor exists.

use candle_core::{CpuStorage, InplaceOp1, InplaceOp2, Layout, Result, Tensor};
use rayon::prelude::*;

use crate::{MIN_ROWS, simd};

/// Which columns each row of a score block sees: row `r` of `cols` scores belongs to position
/// `first + r % period` and sees the keys `0..=first + r % period` (the rest are masked).
///
/// For queries of several heads stacked over a block of `period` positions starting at
/// `first`, against the keys `0..first + period`: `cols = first + period`.
#[derive(Clone, Copy, Debug)]
pub struct CausalRows {
    /// Scores per row (keys).
    pub cols: usize,
    /// Position of the block's first row.
    pub first: usize,
    /// Positions in the block: row `r` is at `first + r % period`.
    pub period: usize,
    /// Multiplies the scores before the softmax (`1/√d`).
    pub scale: f32,
}

impl CausalRows {
    /// Columns row `r` sees (at least one, at most `cols`).
    fn live(&self, r: usize) -> usize {
        (self.first + r % self.period.max(1) + 1).min(self.cols)
    }
}

/// Each row of `s` (rows of `rows.cols` scores) becomes `softmax(s · scale)` over its visible
/// columns and 0 after them.
pub fn causal_softmax_rows(s: &mut [f32], rows: CausalRows) {
    if rows.cols == 0 {
        return;
    }
    s.par_chunks_mut(rows.cols)
        .with_min_len(MIN_ROWS)
        .enumerate()
        .for_each(|(r, row)| {
            let (live, masked) = row.split_at_mut(rows.live(r));
            softmax_row_best(live, rows.scale);
            masked.fill(0.0);
        });
}

/// The softmax backward pass in place: `dp` (the gradient of the probabilities `p`, rows of
/// `cols`) becomes the gradient of the scores before `scale`: `scale · p ⊙ (dp − Σⱼ dp ⊙ p)`.
/// Masked columns (`p = 0`) get 0.
pub fn softmax_backward_rows(p: &[f32], dp: &mut [f32], cols: usize, scale: f32) {
    if cols == 0 {
        return;
    }
    dp.par_chunks_mut(cols)
        .with_min_len(MIN_ROWS)
        .zip(p.par_chunks(cols))
        .for_each(|(d, p)| softmax_backward_row_best(p, d, scale));
}

simd::avx2_twin!(
    /// [`softmax_row`], vectorised for AVX2 + FMA where the CPU has them.
    fn softmax_row_best = softmax_row(x: &mut [f32], scale: f32)
);

simd::avx2_twin!(
    /// [`softmax_backward_row`], vectorised for AVX2 + FMA where the CPU has them.
    fn softmax_backward_row_best = softmax_backward_row(p: &[f32], d: &mut [f32], scale: f32)
);

/// One row's softmax in place. Eight independent lanes for the max ([`simd::max_scaled`]) and
/// the sum, so the compiler vectorises them (a single running sum is a serial chain it must not
/// reorder), and [`simd::exp`] instead of libm's `expf`, which is a call per element.
#[inline(always)]
fn softmax_row(x: &mut [f32], scale: f32) {
    let m = simd::max_scaled(x, scale);
    let mut sum = [0f32; 8];
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        for i in 0..8 {
            c[i] = simd::exp(c[i] * scale - m);
            sum[i] += c[i];
        }
    }
    let mut total: f32 = sum.iter().sum();
    for v in chunks.into_remainder() {
        *v = simd::exp(*v * scale - m);
        total += *v;
    }
    let inv = 1.0 / total;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// One row of [`softmax_backward_rows`].
#[inline(always)]
fn softmax_backward_row(p: &[f32], d: &mut [f32], scale: f32) {
    let dot = simd::dot(p, d);
    for (d, p) in d.iter_mut().zip(p) {
        *d = scale * p * (*d - dot);
    }
}

/// [`causal_softmax_rows`] on a contiguous f32 CPU tensor of scores, in place. No gradient:
/// for attention ops with their own backward pass.
pub fn causal_softmax_(scores: &Tensor, rows: CausalRows) -> Result<()> {
    check(scores, rows.cols, "causal-softmax")?;
    scores.inplace_op1(&CausalSoftmax(rows))
}

/// [`softmax_backward_rows`] in place on `dp` (contiguous f32 CPU, the shape of `p`).
pub fn softmax_backward_(dp: &Tensor, p: &Tensor, scale: f32) -> Result<()> {
    let cols = p.dims().last().copied().unwrap_or(0);
    check(dp, cols, "softmax-backward")?;
    check(p, cols, "softmax-backward")?;
    if dp.shape() != p.shape() {
        return Err(candle_core::Error::Msg(format!(
            "softmax-backward: gradient {:?} for probabilities {:?}",
            dp.dims(),
            p.dims()
        )));
    }
    dp.inplace_op2(p, &SoftmaxBackward(scale))
}

fn check(t: &Tensor, cols: usize, op: &str) -> Result<()> {
    let ok = t.device().is_cpu()
        && t.dtype() == candle_core::DType::F32
        && t.is_contiguous()
        && t.dims().last() == Some(&cols);
    if ok {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "{op}: needs a contiguous f32 CPU tensor of rows of {cols}, got {:?} {:?} on {:?}",
            t.dims(),
            t.dtype(),
            t.device().location()
        )))
    }
}

fn slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&mut v[a..b]),
        _ => Err(candle_core::Error::Msg(format!(
            "{op}: not a contiguous f32 storage"
        ))),
    }
}

struct CausalSoftmax(CausalRows);

impl InplaceOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "dojo-causal-softmax"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        causal_softmax_rows(slice_mut(s, l, self.name())?, self.0);
        Ok(())
    }
}

struct SoftmaxBackward(f32);

impl InplaceOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "dojo-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let p = crate::slice(s2, l2, self.name())?;
        let cols = l2.dims().last().copied().unwrap_or(0);
        softmax_backward_rows(p, slice_mut(s1, l1, self.name())?, cols, self.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{max_abs, rand};
    use candle_core::{D, Device, Var};

    /// Forward and backward against the masked primitive graph, for a block of 3 positions
    /// starting at 2 (keys 0..5), two stacked heads, two batch rows.
    #[test]
    fn causal_softmax_and_its_backward_match_the_masked_graph() {
        let rows = CausalRows {
            cols: 5,
            first: 2,
            period: 3,
            scale: 0.5,
        };
        let n = 2 * 2 * 3; // batch × heads × positions
        let s = Var::from_tensor(&rand(&[2, 2 * 3, 5], 1)).unwrap();
        let mut m = vec![0f32; n * 5];
        for r in 0..n {
            for j in (rows.first + r % 3 + 1)..5 {
                m[r * 5 + j] = f32::NEG_INFINITY;
            }
        }
        let mask = Tensor::from_vec(m, (2, 6, 5), &Device::Cpu).unwrap();
        let z = ((s.as_tensor() * 0.5).unwrap() + &mask).unwrap();
        let mx = z.max_keepdim(D::Minus1).unwrap().detach();
        let e = z.broadcast_sub(&mx).unwrap().exp().unwrap();
        let p_ref = e.broadcast_div(&e.sum_keepdim(D::Minus1).unwrap()).unwrap();

        let p = s.as_tensor().copy().unwrap();
        causal_softmax_(&p, rows).unwrap();
        assert!(max_abs(&p, &p_ref) < 1e-6);

        let probe = rand(&[2, 6, 5], 2);
        let grads = (&p_ref * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let ds = probe.copy().unwrap();
        softmax_backward_(&ds, &p, 0.5).unwrap();
        assert!(max_abs(&ds, grads.get(s.as_tensor()).unwrap()) < 1e-5);
    }

    #[test]
    fn wrong_inputs_are_refused_not_read_out_of_bounds() {
        let rows = CausalRows {
            cols: 4,
            first: 0,
            period: 4,
            scale: 1.0,
        };
        let t = Tensor::zeros((3, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(causal_softmax_(&t, rows).is_err());
        let strided = Tensor::zeros((4, 3), candle_core::DType::F32, &Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        assert!(causal_softmax_(&strided, rows).is_err());
        let p = Tensor::zeros((2, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let dp = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(softmax_backward_(&dp, &p, 1.0).is_err());
    }
}
