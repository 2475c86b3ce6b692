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
//! contiguous tensor. Its threads are its own pool (`MATMUL_NUM_THREADS`, default the number of
//! physical cores), not rayon's: a product runs alone, so the two pools never compete. Other
//! devices and dtypes use candle's matmul.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

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

fn fused(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
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
        let mut c = vec![0f32; batches * d.m * d.n];
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
            for (i, out) in c.chunks_mut(d.m * d.n).enumerate() {
                let (oa, ob) = (batch_offset(l1, &d.batch, i), batch_offset(l2, &d.batch, i));
                // SAFETY: the offsets and strides stay within `a` and `b` (checked above);
                // `out` is `m × n` written with row stride `n`.
                unsafe {
                    matrixmultiply::sgemm(
                        d.m,
                        d.k,
                        d.n,
                        1.0,
                        a.as_ptr().add(oa),
                        sa[r - 2] as isize,
                        sa[r - 1] as isize,
                        b.as_ptr().add(ob),
                        sb[r - 2] as isize,
                        sb[r - 1] as isize,
                        0.0,
                        out.as_mut_ptr(),
                        d.n as isize,
                        1,
                    );
                }
            }
        }
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
        // d(a b) = da b + a db: ∂a = g bᵀ, ∂b = aᵀ g (transposed views, no copies).
        let r = a.rank();
        let da = matmul(grad, &b.transpose(r - 2, r - 1)?)?;
        let db = matmul(&a.transpose(r - 2, r - 1)?, grad)?;
        Ok((Some(da), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn rand(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
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

    fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
        if a.elem_count() == 0 {
            return 0.0;
        }
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

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

    #[test]
    fn shapes_that_do_not_multiply_are_refused() {
        let e = matmul(&rand(&[3, 4], 1), &rand(&[5, 2], 2)).unwrap_err();
        assert!(e.to_string().contains("do not multiply"), "{e}");
        assert!(matmul(&rand(&[2, 3, 4], 1), &rand(&[3, 4, 2], 2)).is_err());
    }
}
