//! f32 matrix products on the CPU through `matrixmultiply`, as one candle op with its backward
//! pass.
//!
//! Why not candle's own: its CPU matmul is the `gemm` crate's, which on this project's 2-core
//! AMD EPYC (AVX2 + FMA; AVX-512 double-pumped) runs at about 40 GFLOP/s a core on the trainer's
//! shapes, where `matrixmultiply`'s AVX2 kernel (BLIS' loop structure) runs at 88–96 and
//! PyTorch's MKL at 82–98 (BENCHMARKS.md, *Fused kernels*). The matmuls are three quarters of
//! a training step, so this one choice is most of the distance to PyTorch.
//!
//! Execution model: `matrixmultiply` reads any strides, so transposed and narrowed views
//! (`w.t()`, a block of keys) are multiplied where they lie, with no copy; the output is a new
//! contiguous tensor. Threads: rayon's pool (`RAYON_NUM_THREADS`, as for the other kernels), each
//! task one single-threaded `sgemm` on a slice of the output's rows or columns (the longer side);
//! `matrixmultiply`'s own threading is capped at 4 threads and would be a second pool.
//! Other devices and dtypes use candle's matmul.

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

use crate::fused;
use rayon::prelude::*;

/// `a · b` over the last two dimensions, `(…, m, k) · (…, k, n) → (…, m, n)`, with equal
/// leading (batch) dimensions; differentiable in both.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if fused(a) && fused(b) {
        a.apply_op2(b, MatMul)
    } else {
        a.matmul(b)
    }
}

/// [`matmul`] without a gradient (inside an op with its own backward pass).
pub fn matmul_no_grad(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if fused(a) && fused(b) {
        a.apply_op2_no_bwd(b, &MatMul)
    } else {
        a.matmul(b)
    }
}

struct MatMul;

/// The shape of a product, or why there is none.
struct Dims {
    batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
}

fn dims(a: &Layout, b: &Layout) -> Result<Dims> {
    let (ad, bd) = (a.dims(), b.dims());
    let bad = || {
        candle_core::Error::Msg(format!(
            "matmul: shapes {ad:?} and {bd:?} do not multiply (…, m, k) · (…, k, n)"
        ))
    };
    if ad.len() < 2 || ad.len() != bd.len() || ad[..ad.len() - 2] != bd[..bd.len() - 2] {
        return Err(bad());
    }
    let r = ad.len();
    if ad[r - 1] != bd[r - 2] {
        return Err(bad());
    }
    Ok(Dims {
        batch: ad[..r - 2].to_vec(),
        m: ad[r - 2],
        k: ad[r - 1],
        n: bd[r - 1],
    })
}

/// The element offset of batch entry `i` (row-major over `batch`) in a layout.
fn batch_offset(l: &Layout, batch: &[usize], mut i: usize) -> usize {
    let mut off = l.start_offset();
    for (&size, &stride) in batch.iter().zip(l.stride()).rev() {
        off += (i % size) * stride;
        i /= size;
    }
    off
}

/// A strided matrix inside a storage (bounds checked by the caller).
struct Operand<'a> {
    data: &'a [f32],
    offset: usize,
    rs: usize,
    cs: usize,
}

/// Products smaller than this many multiply-adds run on one thread.
const SPLIT_WORK: usize = 1 << 18;

/// `out (m × n, row-major) = x (m × k) · y (k × n)`, split over rayon's threads along the
/// longer of `m` and `n` (each task packs only its part of that side). `out` may be
/// uninitialised: with β = 0 `sgemm` writes every element and reads none (zeros when `k` is 0).
///
/// # Safety
/// `out` must be valid for writes of `m × n` floats, and the operands' strides must stay within
/// their storages for `m × k` and `k × n`.
unsafe fn product(x: &Operand, y: &Operand, m: usize, k: usize, n: usize, out: *mut f32) {
    // One single-threaded sgemm on rows `r0..r0 + rows` and columns `c0..c0 + cols`, written
    // at `dst` (row stride `n`).
    let gemm = |r0: usize, rows: usize, c0: usize, cols: usize, dst: *mut f32| {
        // SAFETY: the caller guarantees both operands' strides stay within their storages
        // for `m × k` and `k × n`; `dst` points at the task's own rows or columns of `out`.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                k,
                cols,
                1.0,
                x.data.as_ptr().add(x.offset + r0 * x.rs),
                x.rs as isize,
                x.cs as isize,
                y.data.as_ptr().add(y.offset + c0 * y.cs),
                y.rs as isize,
                y.cs as isize,
                0.0,
                dst,
                n as isize,
                1,
            )
        }
    };
    let threads = rayon::current_num_threads();
    // Tasks write disjoint row or column ranges of `out`: passed as an address, as raw
    // pointers are not `Send`.
    let base = out as usize;
    if threads <= 1 || m * n * k < SPLIT_WORK {
        gemm(0, m, 0, n, out);
    } else if m >= n {
        let rows = m.div_ceil(threads).next_multiple_of(8);
        (0..m.div_ceil(rows)).into_par_iter().for_each(|i| {
            let r0 = i * rows;
            gemm(
                r0,
                rows.min(m - r0),
                0,
                n,
                (base as *mut f32).wrapping_add(r0 * n),
            )
        });
    } else {
        let cols = n.div_ceil(threads).next_multiple_of(8);
        (0..n.div_ceil(cols)).into_par_iter().for_each(|j| {
            let c0 = j * cols;
            gemm(
                0,
                m,
                c0,
                cols.min(n - c0),
                (base as *mut f32).wrapping_add(c0),
            );
        });
    }
}

impl CustomOp2 for MatMul {
    fn name(&self) -> &'static str {
        "dojo-matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let d = dims(l1, l2)?;
        let (a, b) = match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => (a.as_slice(), b.as_slice()),
            _ => return Err(candle_core::Error::Msg("matmul: f32 inputs only".into())),
        };
        let batches: usize = d.batch.iter().product();
        let len = batches * d.m * d.n;
        // Left uninitialised: every element is written by `product` below (β = 0), and zeroing
        // a product's output first was a pass over memory per matmul.
        let mut c: Vec<f32> = Vec::with_capacity(len);
        let r = l1.dims().len();
        let (sa, sb) = (l1.stride(), l2.stride());
        // The furthest element each operand's strides reach must lie in its storage (the
        // strides come from candle's layouts, so this is a consistency check, not input
        // validation).
        let reach = |l: &Layout, len: usize| {
            l.dims().contains(&0)
                || l.start_offset()
                    + l.dims()
                        .iter()
                        .zip(l.stride())
                        .map(|(&x, &s)| (x - 1) * s)
                        .sum::<usize>()
                    < len
        };
        if !reach(l1, a.len()) || !reach(l2, b.len()) {
            return Err(candle_core::Error::Msg(
                "matmul: a layout reaches past its storage".into(),
            ));
        }
        if d.m > 0 && d.n > 0 {
            for i in 0..batches {
                let x = Operand {
                    data: a,
                    offset: batch_offset(l1, &d.batch, i),
                    rs: sa[r - 2],
                    cs: sa[r - 1],
                };
                let y = Operand {
                    data: b,
                    offset: batch_offset(l2, &d.batch, i),
                    rs: sb[r - 2],
                    cs: sb[r - 1],
                };
                // SAFETY: `c` has room for `batches` outputs of `m × n`; the layouts' reach
                // was checked above.
                unsafe {
                    product(
                        &x,
                        &y,
                        d.m,
                        d.k,
                        d.n,
                        c.as_mut_ptr().wrapping_add(i * d.m * d.n),
                    )
                };
            }
        }
        // SAFETY: every one of the `len` elements was written above (none when m or n is 0).
        unsafe { c.set_len(len) };
        let mut shape = d.batch;
        shape.extend([d.m, d.n]);
        Ok((CpuStorage::F32(c), Shape::from(shape)))
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // d(a b) = da b + a db: ∂a = g bᵀ, ∂b = aᵀ g (transposed views, no copies). An operand
        // that takes no gradient (a detached frozen weight, as LoRA's base) gets none: candle's
        // matmul computes both and keeps both until the pass ends, a third of the backward
        // work and a weight-sized tensor per projection for nothing.
        let r = a.rank();
        let da = match a.track_op() {
            true => Some(matmul(grad, &b.transpose(r - 2, r - 1)?)?),
            false => None,
        };
        let db = match b.track_op() {
            true => Some(matmul(&a.transpose(r - 2, r - 1)?, grad)?),
            false => None,
        };
        Ok((da, db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{max_abs, rand};
    use candle_core::Var;

    /// Values and both gradients against candle's matmul, on contiguous, transposed (`w.t()`)
    /// and narrowed-then-transposed batched operands (attention's block of keys).
    #[test]
    fn values_and_gradients_match_candles_matmul() {
        let cases: Vec<(Tensor, Tensor)> = vec![
            (rand(&[7, 5], 1), rand(&[5, 9], 2)),
            (rand(&[7, 5], 3), rand(&[9, 5], 4).t().unwrap()),
            (
                rand(&[2, 3, 6, 4], 5),
                rand(&[2, 3, 10, 4], 6)
                    .narrow(2, 0, 7)
                    .unwrap()
                    .t()
                    .unwrap(),
            ),
            (rand(&[0, 4], 7), rand(&[4, 3], 8)),
            (rand(&[3, 0], 9), rand(&[0, 2], 10)),
        ];
        for (i, (a, b)) in cases.into_iter().enumerate() {
            let (va, vb) = (Var::from_tensor(&a).unwrap(), Var::from_tensor(&b).unwrap());
            let (ours, theirs) = (
                matmul(&a, &b).unwrap(),
                a.contiguous()
                    .unwrap()
                    .matmul(&b.contiguous().unwrap())
                    .unwrap(),
            );
            assert_eq!(ours.dims(), theirs.dims(), "case {i}");
            assert!(max_abs(&ours, &theirs) < 1e-5, "case {i}");
            // Gradients through our op against those through candle's.
            let w = rand(theirs.dims(), 11);
            let g1 = (matmul(va.as_tensor(), vb.as_tensor()).unwrap() * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let g2 = (va.as_tensor().matmul(vb.as_tensor()).unwrap() * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            for v in [&va, &vb] {
                let (x, y) = (g1.get(v.as_tensor()), g2.get(v.as_tensor()));
                if let (Some(x), Some(y)) = (x, y) {
                    assert!(max_abs(x, y) < 1e-5, "case {i} gradient");
                }
            }
        }
    }

    /// Products large enough to be split over threads, along rows (`m ≥ n`) and along columns,
    /// with sizes that do not divide evenly, against candle's matmul.
    #[test]
    fn products_split_over_threads_match_candles_matmul() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            for (a, b) in [
                (rand(&[70, 64], 1), rand(&[64, 91], 2)),
                (rand(&[93, 64], 3), rand(&[67, 64], 4).t().unwrap()),
                (rand(&[2, 83, 64], 5), rand(&[2, 64, 61], 6)),
            ] {
                let ours = matmul(&a, &b).unwrap();
                let theirs = a
                    .contiguous()
                    .unwrap()
                    .matmul(&b.contiguous().unwrap())
                    .unwrap();
                assert!(max_abs(&ours, &theirs) < 1e-4);
            }
        });
    }

    /// A detached operand (LoRA's frozen base) takes no gradient; the other's is unchanged.
    #[test]
    fn a_detached_operand_gets_no_gradient() {
        let x = Var::from_tensor(&rand(&[6, 5], 1)).unwrap();
        let w = rand(&[4, 5], 2);
        let probe = rand(&[6, 4], 3);
        let ours = (matmul(x.as_tensor(), &w.detach().t().unwrap()).unwrap() * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let theirs = (x.as_tensor().matmul(&w.t().unwrap()).unwrap() * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(ours.get(&w).is_none());
        let (a, b) = (
            ours.get(x.as_tensor()).unwrap(),
            theirs.get(x.as_tensor()).unwrap(),
        );
        assert!(max_abs(a, b) < 1e-5);
    }

    #[test]
    fn shapes_that_do_not_multiply_are_refused() {
        let e = matmul(&rand(&[3, 4], 1), &rand(&[5, 2], 2)).unwrap_err();
        assert!(e.to_string().contains("do not multiply"), "{e}");
        assert!(matmul(&rand(&[2, 3, 4], 1), &rand(&[3, 4, 2], 2)).is_err());
    }
}
