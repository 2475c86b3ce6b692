//! # dojo-kernels: the CPU kernels of the trainer and the engine
//!
//! Pipeline position: under **train** and the **engine**, which run one transformer block
//! (`dojo_engine::block`) on these ops: the same kernels for inference and training, with
//! backward passes where training needs them. One crate, built optimised even in the dev profile (the
//! workspace's `Cargo.toml`), so that hand-written loops are never measured unoptimised.
//! candle 0.11's CPU element-wise ops and reductions run on one core, and its fused `rms_norm`
//! and `rope` have no backward pass, so a trainer built from its primitives pays several full
//! passes over memory per normalisation or rotation, one thread each, and keeps every
//! intermediate for autograd. The ops here are each one candle op (`CustomOp1`/`CustomOp2`)
//! with a hand-written backward pass, split over rows on rayon's pool (`RAYON_NUM_THREADS`,
//! the pool candle's matmuls use too):
//!
//! - [`rms_norm`]: `x / sqrt(mean(x²) + eps) · w` over the last dimension; gradients for `x`
//!   and `w` (the per-row scale is recomputed in the backward pass, nothing kept).
//! - [`silu_mul`]: `silu(gate) · up`, the gated MLP's middle; gradients for both inputs.
//! - [`rope`]: rotary embedding of `(b, heads, t, d)` (rotate-half or interleaved pairs) with
//!   `(t, d/2)` tables or one per sequence;
//!   the gradient is the inverse rotation.
//! - [`matmul`]: f32 products through `matrixmultiply` (2.2–2.4× candle's `gemm` here), strided
//!   operands read in place, with a backward pass.
//! - [`cross_entropy`]: `-log softmax(logits)[target]` per row, one read of each row forward
//!   and one backward, nothing kept (the loss over a chunk of rows of the vocabulary).
//! - [`q4_1`] and [`q8_0`]: the engine's SIMD matmuls for decode on GGUF-quantized weights
//!   (llama.cpp's algorithm, AVX2), on plain slices of GGUF blocks; a batch of rows reads each
//!   weight once.
//! - [`decode_attention`]: one decode step's attention, each sequence's single query against
//!   its own KV cache, for a batch of sequences in one parallel loop (the engine's decode).
//! - [`causal_attention`]: queries at new positions against the keys up to each, fused in
//!   FlashAttention-2's tiles (online softmax, no score-sized tensor), with a backward pass
//!   that recomputes the probabilities from each row's log-sum-exp; the trainer's attention
//!   and the engine's prefill (new positions after a KV cache's).
//! - [`causal_softmax_`] and [`softmax_backward_`]: causal softmax passes in place on a
//!   block of scores (the reference attention op's, kept for comparisons); no gradient of
//!   their own.
//!
//! Two process-wide settings for binaries that train ([`alloc`], [`threads`]): large freed
//! blocks kept for reuse instead of mapped afresh every step, and candle's element-wise thread
//! pool kept to the calling thread so that rayon's is the only one spinning.
//!
//! Execution model: f32, contiguous CPU tensors take the fused path (inputs are made
//! contiguous first); any other device or dtype runs the same maths op by op through candle's
//! primitives, so results agree everywhere and only speed differs. The parity tests compare
//! values and gradients of both paths on random inputs; dojo-train's tests pin the whole model
//! against PyTorch.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, D, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

pub mod alloc;
mod attention;
mod decode;
mod loss;
mod matmul;
pub mod q4_1;
pub mod q8_0;
mod quant;
mod simd;
mod softmax;
#[cfg(test)]
mod testing;
pub mod threads;
pub use attention::{
    ATTENTION_BLOCK_BYTES, KEY_TILE, QUERY_TILE, attention_block_positions,
    attention_scratch_bytes, causal_attention, causal_attention_blocked,
    causal_attention_reference_blocked,
};
pub use decode::{CacheView, KvSpan, decode_attention};
pub use loss::cross_entropy;
pub use matmul::{matmul, matmul_no_grad};
pub use softmax::{
    CausalRows, causal_softmax_, causal_softmax_rows, softmax_backward_, softmax_backward_rows,
};

/// Rows a rayon task takes at least: below this the split costs more than it saves.
pub(crate) const MIN_ROWS: usize = 16;

/// `x / sqrt(mean(x²) + eps) · w` over the last dimension of `x`; `w` has that dimension's size.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if fused(x) && fused(w) {
        x.contiguous()?.apply_op2(&w.contiguous()?, RmsNorm { eps })
    } else {
        let var = x.sqr()?.mean_keepdim(D::Minus1)?;
        x.broadcast_div(&(var + eps)?.sqrt()?)?.broadcast_mul(w)
    }
}

/// `silu(gate) · up`, element-wise; both of the same shape.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if fused(gate) && fused(up) && gate.shape() == up.shape() {
        gate.contiguous()?.apply_op2(&up.contiguous()?, SiluMul)
    } else {
        gate.silu()? * up
    }
}

/// How RoPE pairs a head's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Dimension `j` with `j + d/2` (Hugging Face weights, every Qwen file).
    RotateHalf,
    /// Dimension `2j` with `2j + 1` (llama.cpp's Llama files, whose q/k rows are permuted).
    Interleaved,
}

/// RoPE of `x` `(b, heads, t, d)`: every sequence with the same `(t, d/2)` cos / sin tables,
/// or each with its own `(b, t, d/2)` (a decode step's sequences sit at different positions).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
    if fused(x) && fused(cos) && fused(sin) {
        let op = Rope {
            cos: f32_vec(cos)?,
            sin: f32_vec(sin)?,
            layout,
        };
        return x.contiguous()?.apply_op1(op);
    }
    let (cos, sin) = if cos.rank() == 3 {
        (cos.unsqueeze(1)?, sin.unsqueeze(1)?) // (b, 1, t, d/2): one table per sequence
    } else {
        (cos.clone(), sin.clone())
    };
    let half = x.dim(D::Minus1)? / 2;
    let (x1, x2) = match layout {
        RopeLayout::RotateHalf => (
            x.narrow(D::Minus1, 0, half)?,
            x.narrow(D::Minus1, half, half)?,
        ),
        RopeLayout::Interleaved => {
            let mut pairs = x.dims().to_vec();
            pairs.pop();
            pairs.extend([half, 2]);
            let p = x.reshape(pairs)?;
            (
                p.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?,
                p.narrow(D::Minus1, 1, 1)?.squeeze(D::Minus1)?,
            )
        }
    };
    let a = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
    let b = (x2.broadcast_mul(&cos)? + x1.broadcast_mul(&sin)?)?;
    match layout {
        RopeLayout::RotateHalf => Tensor::cat(&[a, b], D::Minus1),
        RopeLayout::Interleaved => Tensor::stack(&[a, b], D::Minus1)?.reshape(x.dims()),
    }
}

/// Whether a tensor takes the kernels' CPU path: f32 on the CPU.
pub(crate) fn fused(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
}

/// A CPU f32 tensor's values in row-major order (a copy).
fn f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// The contiguous f32 slice of a custom op's input.
pub(crate) fn slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    slice_of(s, l, op)
}

/// The contiguous slice of a tensor's storage, of its element type `T`.
fn slice_of<'a, T: candle_core::WithDType>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &str,
) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s.as_slice::<T>()?[a..b]),
        None => Err(candle_core::Error::Msg(format!(
            "{op}: non-contiguous input"
        ))),
    }
}

/// Runs `f` on the f32 values of a backward pass's inputs, read where they lie: `contiguous`
/// is a no-op (a shared handle) for the contiguous tensors autograd passes, and the values are
/// borrowed from their storage, so the pass reads its inputs without copying them.
pub(crate) fn with_values<const N: usize, R>(
    ts: [&Tensor; N],
    op: &str,
    f: impl FnOnce([&[f32]; N]) -> Result<R>,
) -> Result<R> {
    let owned: Vec<Tensor> = ts.into_iter().cloned().collect();
    with_all_values(&owned, op, |values| f(std::array::from_fn(|i| values[i])))
}

/// [`with_values`] for any number of tensors, all of element type `T` (f32 for every kernel
/// but the KV cache's f16 keys and values).
pub(crate) fn with_all_values<T: candle_core::WithDType, R>(
    ts: &[Tensor],
    op: &str,
    f: impl FnOnce(&[&[T]]) -> Result<R>,
) -> Result<R> {
    let owned = ts
        .iter()
        .map(Tensor::contiguous)
        .collect::<Result<Vec<_>>>()?;
    let guards: Vec<_> = owned.iter().map(Tensor::storage_and_layout).collect();
    let mut values = Vec::with_capacity(ts.len());
    for (st, l) in &guards {
        match &**st {
            candle_core::Storage::Cpu(c) => values.push(slice_of(c, l, op)?),
            _ => return Err(candle_core::Error::Msg(format!("{op}: not on the CPU"))),
        }
    }
    f(&values)
}

struct RmsNorm {
    eps: f64,
}

impl RmsNorm {
    fn inv_rms(&self, row: &[f32]) -> f32 {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        1.0 / (ms + self.eps as f32).sqrt()
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "dojo-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?);
        let h = w.len();
        if h == 0 || x.len() % h != 0 || l1.dims().last() != Some(&h) {
            return Err(candle_core::Error::Msg(format!(
                "rms_norm: weight of {h} for input {:?}",
                l1.dims()
            )));
        }
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(h)
            .with_min_len(MIN_ROWS)
            .zip(x.par_chunks(h))
            .for_each(|(out, row)| {
                let inv = self.inv_rms(row);
                for ((o, v), g) in out.iter_mut().zip(row).zip(w) {
                    *o = v * inv * g;
                }
            });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw) = with_values([x, w, grad], "rms-norm", |[xv, wv, gv]| {
            let h = wv.len();
            let mut dx = vec![0f32; xv.len()];
            // dx = inv · (g·w − x̂ · mean(g·w·x̂)); dw = Σ_rows g · x̂ (partial sums per task).
            let dw = dx
                .par_chunks_mut(h)
                .with_min_len(MIN_ROWS)
                .zip(xv.par_chunks(h).zip(gv.par_chunks(h)))
                .fold(
                    || vec![0f32; h],
                    |mut dw, (dxr, (xr, gr))| {
                        let inv = self.inv_rms(xr);
                        let mut dot = 0f32;
                        for j in 0..h {
                            let xh = xr[j] * inv;
                            dot += gr[j] * wv[j] * xh;
                            dw[j] += gr[j] * xh;
                        }
                        let mean = dot / h as f32;
                        for j in 0..h {
                            dxr[j] = inv * (gr[j] * wv[j] - xr[j] * inv * mean);
                        }
                        dw
                    },
                )
                .reduce(
                    || vec![0f32; h],
                    |mut a, b| {
                        a.iter_mut().zip(b).for_each(|(p, q)| *p += q);
                        a
                    },
                );
            Ok((dx, dw))
        })?;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
        ))
    }
}

struct SiluMul;

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "dojo-silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (g, u) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?);
        let mut y = vec![0f32; g.len()];
        y.par_chunks_mut(4096)
            .zip(g.par_chunks(4096).zip(u.par_chunks(4096)))
            .for_each(|(o, (g, u))| {
                for ((o, g), u) in o.iter_mut().zip(g).zip(u) {
                    *o = g * sigmoid(*g) * u;
                }
            });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dg, du) = with_values([gate, up, grad], "silu-gate", |[g, u, d]| {
            let mut dg = vec![0f32; g.len()];
            let mut du = vec![0f32; g.len()];
            dg.par_chunks_mut(4096)
                .zip(du.par_chunks_mut(4096))
                .zip(
                    g.par_chunks(4096)
                        .zip(u.par_chunks(4096))
                        .zip(d.par_chunks(4096)),
                )
                .for_each(|((dg, du), ((g, u), d))| {
                    for j in 0..g.len() {
                        let s = sigmoid(g[j]);
                        // silu'(g) = s · (1 + g · (1 − s))
                        dg[j] = d[j] * u[j] * s * (1.0 + g[j] * (1.0 - s));
                        du[j] = d[j] * g[j] * s;
                    }
                });
            Ok((dg, du))
        })?;
        Ok((
            Some(Tensor::from_vec(dg, gate.shape(), gate.device())?),
            Some(Tensor::from_vec(du, up.shape(), up.device())?),
        ))
    }
}

/// RoPE with its tables copied in (constants: no gradient).
struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    layout: RopeLayout,
}

impl Rope {
    /// Rotate every row `(…, t, d)` of `x` by position; `sign` −1 rotates back (the gradient).
    fn apply(&self, x: &[f32], dims: &[usize], sign: f32) -> Result<Vec<f32>> {
        let (t, d) = match dims {
            [.., t, d] => (*t, *d),
            _ => {
                return Err(candle_core::Error::Msg(format!(
                    "rope: input {dims:?} is not (…, t, d)"
                )));
            }
        };
        let half = d / 2;
        let table = t * half;
        // Shared tables cover `t` positions; per-sequence ones `b` times that.
        let per_seq = match dims {
            [b, heads, _, _] if *b > 1 && self.cos.len() == b * table => Some(*heads),
            _ => None,
        };
        if d % 2 != 0
            || table == 0
            || (per_seq.is_none() && self.cos.len() != table)
            || self.sin.len() != self.cos.len()
        {
            return Err(candle_core::Error::Msg(format!(
                "rope: tables of {} for input {dims:?}",
                self.cos.len()
            )));
        }
        let interleaved = self.layout == RopeLayout::Interleaved;
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(t * d)
            .zip(x.par_chunks(t * d))
            .enumerate()
            .for_each(|(chunk, (out, seq))| {
                let base = per_seq.map_or(0, |heads| chunk / heads * table);
                for p in 0..t {
                    let at = base + p * half;
                    let (c, s) = (&self.cos[at..at + half], &self.sin[at..at + half]);
                    let row = &seq[p * d..(p + 1) * d];
                    let o = &mut out[p * d..(p + 1) * d];
                    for j in 0..half {
                        let (i1, i2) = if interleaved {
                            (2 * j, 2 * j + 1)
                        } else {
                            (j, j + half)
                        };
                        let (x1, x2) = (row[i1], row[i2]);
                        let sj = sign * s[j];
                        o[i1] = x1 * c[j] - x2 * sj;
                        o[i2] = x2 * c[j] + x1 * sj;
                    }
                }
            });
        Ok(y)
    }
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "dojo-rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        Ok((
            CpuStorage::F32(self.apply(x, l.dims(), 1.0)?),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        // The rotation is orthogonal: its gradient is the rotation by −θ.
        let dx = with_values([grad], "rope", |[g]| self.apply(g, grad.dims(), -1.0))?;
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand;
    use candle_core::Var;

    fn max_rel(a: &Tensor, b: &Tensor) -> f32 {
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let scale = b.iter().fold(1e-12f32, |m, v| m.max(v.abs()));
        a.iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
            / scale
    }

    /// Values and gradients (through a random linear functional) of `fused` and `reference`
    /// on the same variables agree.
    fn check(
        vars: &[Var],
        fused: impl Fn(&[&Tensor]) -> Tensor,
        reference: impl Fn(&[&Tensor]) -> Tensor,
    ) {
        let ts: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
        let (yf, yr) = (fused(&ts), reference(&ts));
        assert!(
            max_rel(&yf, &yr) < 1e-5,
            "values differ by {}",
            max_rel(&yf, &yr)
        );
        let probe = rand(yf.dims(), 99);
        let gf = (yf * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gr = (yr * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (i, v) in vars.iter().enumerate() {
            let (a, b) = (
                gf.get(v.as_tensor()).unwrap(),
                gr.get(v.as_tensor()).unwrap(),
            );
            let d = max_rel(a, b);
            assert!(d < 1e-4, "gradient of input {i} differs by {d}");
        }
    }

    #[test]
    fn rms_norm_matches_the_primitive_graph() {
        for shape in [vec![3usize, 7], vec![2, 40, 64], vec![1, 1]] {
            let h = *shape.last().unwrap();
            let x = Var::from_tensor(&rand(&shape, 1)).unwrap();
            let w = Var::from_tensor(&rand(&[h], 2)).unwrap();
            check(
                &[x, w],
                |t| rms_norm(t[0], t[1], 1e-5).unwrap(),
                |t| {
                    let var = t[0].sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
                    t[0].broadcast_div(&(var + 1e-5).unwrap().sqrt().unwrap())
                        .unwrap()
                        .broadcast_mul(t[1])
                        .unwrap()
                },
            );
        }
    }

    #[test]
    fn silu_mul_matches_the_primitive_graph() {
        for shape in [vec![5usize, 9], vec![3, 5000]] {
            let g = Var::from_tensor(&rand(&shape, 3)).unwrap();
            let u = Var::from_tensor(&rand(&shape, 4)).unwrap();
            check(
                &[g, u],
                |t| silu_mul(t[0], t[1]).unwrap(),
                |t| (t[0].silu().unwrap() * t[1]).unwrap(),
            );
        }
    }

    /// The fused op against the rotation written out: both layouts, shared and per-sequence
    /// tables.
    #[test]
    fn rope_matches_the_primitive_graph() {
        let (b, heads, t, d) = (2, 3, 5, 8);
        let half = d / 2;
        for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
            for tables in [vec![t, half], vec![b, t, half]] {
                let x = Var::from_tensor(&rand(&[b, heads, t, d], 5)).unwrap();
                let cos = rand(&tables, 6);
                let sin = rand(&tables, 7);
                let reference = |x: &Tensor| -> Tensor {
                    let mut v = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let (c, s) = (
                        cos.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                        sin.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    );
                    for (chunk, row) in v.chunks_mut(d).enumerate() {
                        let (seq, p) = (chunk / (heads * t), chunk % t);
                        let at = if tables.len() == 3 { seq * t + p } else { p } * half;
                        let r = row.to_vec();
                        for j in 0..half {
                            let (i1, i2) = match layout {
                                RopeLayout::RotateHalf => (j, j + half),
                                RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                            };
                            row[i1] = r[i1] * c[at + j] - r[i2] * s[at + j];
                            row[i2] = r[i2] * c[at + j] + r[i1] * s[at + j];
                        }
                    }
                    Tensor::from_vec(v, x.shape(), x.device()).unwrap()
                };
                let fused = rope(x.as_tensor(), &cos, &sin, layout).unwrap();
                assert!(max_rel(&fused, &reference(x.as_tensor())) < 1e-6);
                // The op-by-op path (what non-CPU devices run), values and gradients.
                check(
                    &[x],
                    |ts| rope(ts[0], &cos, &sin, layout).unwrap(),
                    |ts| by_ops_rope(ts[0], &cos, &sin, layout),
                );
            }
        }
    }

    /// [`rope`]'s op-by-op path on a CPU tensor (which would take the fused path).
    fn by_ops_rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Tensor {
        let f64 = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        rope(&f64(x), &f64(cos), &f64(sin), layout)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    }

    #[test]
    fn a_non_contiguous_input_takes_the_fused_path_after_a_copy() {
        let x = rand(&[4, 6], 8).t().unwrap(); // (6, 4), strided
        let w = rand(&[4], 9);
        let y = rms_norm(&x, &w, 1e-6).unwrap();
        let r = {
            let var = x.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
            x.broadcast_div(&(var + 1e-6).unwrap().sqrt().unwrap())
                .unwrap()
                .broadcast_mul(&w)
                .unwrap()
        };
        assert!(max_rel(&y, &r) < 1e-5);
    }
}
