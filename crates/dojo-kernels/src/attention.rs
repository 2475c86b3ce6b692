//! Causal attention over a block of new positions, forward and backward, for prefill and
//! training alike.
//!
//! The trainer's pass (all positions new, gradients wanted) and the engine's prefill (new
//! positions after a KV cache's `past` ones, no gradient) are the same op: queries at
//! positions `past..past + t` against the keys `0..past + t`. Only the keys differ: the batch's
//! own, or the cache's with the batch's appended.
//!
//! On the CPU (f32) the op is fused in FlashAttention-2's scheme: the scores are computed tile
//! by tile (`Bq` queries × `Bk` keys, small enough for the L2 cache), the softmax is taken
//! online (a running max and sum per query row, the output rescaled when the max grows), and
//! nothing of size `t × t` ever exists. The forward pass keeps the output and one float per
//! query row, the log-sum-exp `L = m + ln l`; the backward pass recomputes each tile's
//! probabilities `exp(s − L)` from it. Tiles wholly above the causal diagonal are never
//! computed and the diagonal's are masked by position.

use std::sync::{Mutex, PoisonError};

use candle_core::{D, Device, Result, Tensor};
use rayon::prelude::*;

use crate::simd;

mod reference;
#[doc(hidden)]
pub use reference::{
    ATTENTION_BLOCK_BYTES, attention_block_positions, causal_attention_reference_blocked,
};

/// Query rows of a tile ([`causal_attention`]'s `Bq`): a forward task's rows, and the rows a
/// backward task takes at a time.
pub const QUERY_TILE: usize = 128;

/// Keys of a tile ([`causal_attention`]'s `Bk`): a forward task's step along the keys, and a
/// backward task's keys. With a head dimension of 64, the tiles a task works on (queries,
/// keys, values, scores, output rows; in the backward pass also the scores' gradient and the
/// gradients' rows) are about 200 KB forward and 350 KB backward: in L2, and large enough that
/// each product amortises its packing. At SmolLM2's shape on 2 threads
/// 64 × 128, 128 × 256 and 64 × 256 tiles ran within 5% of these; 128 keys also give the
/// backward pass 16 tasks per kv head at 2,048 positions.
pub const KEY_TILE: usize = 128;

/// Bytes of the fused op's temporaries at their peak, the backward pass of `b` rows of `heads`
/// query heads at `t` positions of head dimension `hd` on rayon's pool (the one the op's tasks
/// run on, `RAYON_NUM_THREADS`): a copy of the
/// queries' gradient per thread (summed at the end), the row sums `D` and log-sum-exps, and
/// the tiles each running task works on (scores and their gradient, a few `hd`-wide rows).
/// What a memory plan counts for attention besides q, k, v and the output.
pub fn attention_scratch_bytes(b: usize, heads: usize, t: usize, hd: usize) -> u64 {
    let threads = rayon::current_num_threads();
    let f32s = |n: usize| n as u64 * 4;
    let rows = b * heads * t;
    let tiles = 2 * QUERY_TILE * KEY_TILE + 4 * (QUERY_TILE + KEY_TILE) * hd;
    f32s(threads.max(1) * rows * hd) + f32s(2 * rows) + f32s(threads.max(1) * tiles)
}

/// Causal attention `softmax(q kᵀ · scale + mask) v` of the queries `q` `(b, kv_heads, rep ·
/// t, hd)` at the last `t` positions of the keys and values `k`, `v` `(b, kv_heads, past + t,
/// hd)` (the queries of a kv head's group stacked, row `r` at position `past + r % t`).
/// Returns `(b, kv_heads, rep · t, hd)`.
///
/// On the CPU (f32) one fused op in tiles of [`QUERY_TILE`] × [`KEY_TILE`] (the module's
/// doc): no score-sized tensor, forward or backward. Op by op, autograd would keep six
/// `(heads, t, t)` tensors per layer until the backward pass (for SmolLM2 6.8 GB at 1,024
/// tokens and 27 GB at 2,048); here only q, k, v, the output and one float per query row stay,
/// and the backward pass pays one more `q kᵀ` and softmax per tile (as FlashAttention does).
/// Other devices and dtypes run the op-by-op graph with a mask.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    t: usize,
    scale: f64,
) -> Result<Tensor> {
    causal_attention_blocked(q, k, v, t, scale, QUERY_TILE, KEY_TILE)
}

/// [`causal_attention`] in tiles of `bq` query rows × `bk` keys (each at least 1).
pub fn causal_attention_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    t: usize,
    scale: f64,
    bq: usize,
    bk: usize,
) -> Result<Tensor> {
    let dims = Dims::new(q.dims(), k.dims(), v.dims(), t)?;
    if crate::fused(q) {
        let op = FlashAttention {
            dims,
            scale: scale as f32,
            tiles: Tiles {
                q: bq.max(1),
                k: bk.max(1),
            },
            lse: Mutex::new(None),
        };
        q.contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    } else {
        by_ops(q, k, v, dims, scale)
    }
}

/// The op-by-op graph with the whole mask (other devices and dtypes).
fn by_ops(q: &Tensor, k: &Tensor, v: &Tensor, dims: Dims, scale: f64) -> Result<Tensor> {
    let mask =
        causal_mask(dims.past, dims.rep * dims.t, dims.t, q.device())?.to_dtype(q.dtype())?;
    let s = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
    softmax(&s)?.matmul(v)
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

/// The shape of one attention call, checked once: every index the kernels compute stays
/// within `q` `(b, kv, rep · t, hd)` and `k`, `v` `(b, kv, past + t, hd)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dims {
    /// Batch rows × kv heads: the groups of query heads sharing keys and values.
    groups: usize,
    /// Query heads per group.
    rep: usize,
    t: usize,
    past: usize,
    hd: usize,
}

impl Dims {
    fn new(q: &[usize], k: &[usize], v: &[usize], t: usize) -> Result<Self> {
        let err = |what: String| Err(candle_core::Error::Msg(format!("causal attention: {what}")));
        let (&[b, kv, rows, hd], &[kb, kkv, keys, khd]) = (q, k) else {
            return err(format!(
                "q {q:?} and k {k:?} are not (b, heads, positions, hd)"
            ));
        };
        let values = v.get(2).copied().unwrap_or(0);
        if t == 0 || keys < t || !rows.is_multiple_of(t) || values != keys {
            return err(format!(
                "{rows} query rows at {t} positions against {keys} keys and {values} values"
            ));
        }
        if (kb, kkv, khd) != (b, kv, hd) || v != k {
            return err(format!("q {q:?}, k {k:?} and v {v:?} do not match"));
        }
        Ok(Dims {
            groups: b * kv,
            rep: rows / t,
            t,
            past: keys - t,
            hd,
        })
    }

    fn keys(&self) -> usize {
        self.past + self.t
    }

    /// Query rows in all: one log-sum-exp each.
    fn rows(&self) -> usize {
        self.groups * self.rep * self.t
    }

    /// Floats of q (and of the output and its gradient).
    fn q_len(&self) -> usize {
        self.rows() * self.hd
    }

    /// Floats of k (and of v).
    fn k_len(&self) -> usize {
        self.groups * self.keys() * self.hd
    }
}

/// Tile sizes: query rows, keys (each at least 1).
#[derive(Clone, Copy, Debug)]
struct Tiles {
    q: usize,
    k: usize,
}

/// The fused CPU op of [`causal_attention`].
struct FlashAttention {
    dims: Dims,
    scale: f32,
    tiles: Tiles,
    /// The forward pass's log-sum-exp per query row, for the backward pass: candle's
    /// `CustomOp3::bwd` gets only the inputs and the output, so the op keeps it (taken by the
    /// first backward pass; recomputed if missing).
    lse: Mutex<Option<Vec<f32>>>,
}

impl FlashAttention {
    /// The op's shape, checked against the layouts it is given.
    fn dims_of(&self, q: &[usize], k: &[usize], v: &[usize]) -> Result<Dims> {
        let dims = Dims::new(q, k, v, self.dims.t)?;
        if dims != self.dims {
            return Err(candle_core::Error::Msg(format!(
                "causal attention: inputs {q:?}, {k:?}, {v:?} for an op built for {:?}",
                self.dims
            )));
        }
        Ok(dims)
    }
}

impl candle_core::CustomOp3 for FlashAttention {
    fn name(&self) -> &'static str {
        "dojo-flash-attention"
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
        let d = self.dims_of(l1.dims(), l2.dims(), l3.dims())?;
        let q = crate::slice(s1, l1, self.name())?;
        let k = crate::slice(s2, l2, self.name())?;
        let v = crate::slice(s3, l3, self.name())?;
        let (out, lse) = forward(q, k, v, &d, self.tiles, self.scale)?;
        *self.lse.lock().unwrap_or_else(PoisonError::into_inner) = Some(lse);
        Ok((candle_core::CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = self.dims_of(q.dims(), k.dims(), v.dims())?;
        if res.dims() != q.dims() || grad.dims() != q.dims() {
            return Err(candle_core::Error::Msg(format!(
                "causal attention: output {:?} and gradient {:?} for queries {:?}",
                res.dims(),
                grad.dims(),
                q.dims()
            )));
        }
        let kept = self
            .lse
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (dq, dk, dv) =
            crate::with_values([q, k, v, res, grad], self.name(), |[qv, kv, vv, o, g]| {
                let lse = match kept {
                    Some(lse) if lse.len() == d.rows() => lse,
                    _ => forward(qv, kv, vv, &d, self.tiles, self.scale)?.1,
                };
                backward(qv, kv, vv, o, g, &lse, &d, self.tiles, self.scale)
            })?;
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), q.device())?),
            Some(Tensor::from_vec(dk, k.shape(), k.device())?),
            Some(Tensor::from_vec(dv, v.shape(), v.device())?),
        ))
    }
}

/// A matrix read in place: element `(i, j)` at `data[at + i · rs + j · cs]`.
#[derive(Clone, Copy)]
struct Mat<'a> {
    data: &'a [f32],
    at: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// Row-major rows of `width` starting at row `row`.
    fn rows(data: &'a [f32], row: usize, width: usize) -> Self {
        Mat {
            data,
            at: row * width,
            rs: width,
            cs: 1,
        }
    }

    /// The transpose of [`Mat::rows`]: column `j` is row `row + j`.
    fn rows_t(data: &'a [f32], row: usize, width: usize) -> Self {
        Mat {
            data,
            at: row * width,
            rs: 1,
            cs: width,
        }
    }

    /// Whether an `r × c` matrix fits in `data`.
    fn fits(&self, r: usize, c: usize) -> bool {
        r == 0 || c == 0 || self.at + (r - 1) * self.rs + (c - 1) * self.cs < self.data.len()
    }
}

/// `c (m × n, row stride ldc) = alpha · a (m × k) · b (k × n) + beta · c`: one
/// single-threaded `matrixmultiply::sgemm` on tiles read where they lie (the tasks are the
/// parallelism).
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat,
    b: Mat,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    // Internal invariants (the shapes were checked by `Dims::new`): a failure is a bug here,
    // and must not become an out-of-bounds read.
    assert!(
        a.fits(m, k) && b.fits(k, n) && ldc >= n && (m - 1) * ldc + n <= c.len(),
        "causal attention: a tile out of bounds"
    );
    // SAFETY: the assert above keeps every element sgemm reads of `a` and `b` inside their
    // slices and every element it writes inside `c` (rows of `n` at stride `ldc ≥ n`, which
    // do not alias); `c` is borrowed mutably, so it aliases neither input.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr().add(a.at),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr().add(b.at),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        )
    }
}

/// The forward pass: the output `(groups, rep · t, hd)` and the log-sum-exp of each query row.
/// One task per query head and tile of query rows, each writing only its own output rows.
fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: &Dims,
    tiles: Tiles,
    scale: f32,
) -> Result<(Vec<f32>, Vec<f32>)> {
    check_lengths(d, &[q], &[k, v])?;
    let mut out = vec![0f32; d.q_len()];
    let mut lse = vec![0f32; d.rows()];
    if out.is_empty() {
        return Ok((out, lse));
    }
    let (t, hd, bq) = (d.t, d.hd, tiles.q);
    out.par_chunks_mut(t * hd)
        .zip(lse.par_chunks_mut(t))
        .enumerate()
        .for_each(|(head, (o, l))| {
            o.par_chunks_mut(bq * hd)
                .zip(l.par_chunks_mut(bq))
                .enumerate()
                .for_each(|(i, (o, l))| {
                    forward_tile(q, k, v, d, head, i * bq, o, l, tiles.k, scale);
                });
        });
    Ok((out, lse))
}

/// The rows `i0..i0 + n` of query head `head` (`n` = `lse.len()`): `o` their output, `lse`
/// their log-sum-exp. Key tiles up to the last row's position only.
#[allow(clippy::too_many_arguments)]
fn forward_tile(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: &Dims,
    head: usize,
    i0: usize,
    o: &mut [f32],
    lse: &mut [f32],
    bk: usize,
    scale: f32,
) {
    let (n, hd) = (lse.len(), d.hd);
    let group = head / d.rep;
    let seen = d.past + i0 + n;
    let qm = Mat::rows(q, head * d.t + i0, hd);
    let mut s = vec![0f32; n * bk.min(seen)];
    let mut m = vec![f32::NEG_INFINITY; n];
    // The running sums, in place of the log-sum-exp until the end.
    let l = lse;
    l.fill(0.0);
    for j0 in (0..seen).step_by(bk) {
        let nk = bk.min(seen - j0);
        let s = &mut s[..n * nk];
        let key = group * d.keys() + j0;
        gemm(n, hd, nk, scale, qm, Mat::rows_t(k, key, hd), 0.0, s, nk);
        let diag = (d.past + i0 + 1) as isize - j0 as isize;
        online_softmax_best(s, nk, diag, &mut m, l, o, hd);
        gemm(
            n,
            nk,
            hd,
            1.0,
            Mat::rows(s, 0, nk),
            Mat::rows(v, key, hd),
            1.0,
            o,
            hd,
        );
    }
    for ((o, l), m) in o.chunks_exact_mut(hd).zip(l).zip(&m) {
        let inv = 1.0 / *l;
        o.iter_mut().for_each(|x| *x *= inv);
        *l = m + l.ln();
    }
}

simd::avx2_twin!(
    /// [`online_softmax`], vectorised for AVX2 + FMA where the CPU has them.
    fn online_softmax_best = online_softmax(
        s: &mut [f32],
        nk: usize,
        diag: isize,
        m: &mut [f32],
        l: &mut [f32],
        o: &mut [f32],
        hd: usize
    )
);

/// One tile of the online softmax: `s` holds the scaled scores of rows of `nk` keys, row `r`
/// seeing its first `diag + r` (clamped to `0..=nk`). Each row's running max `m` and sum `l`
/// are updated, its output row in `o` (rows of `hd`) rescaled to the new max, and `s` becomes
/// the tile's unnormalised probabilities (0 where masked), ready for `o += s · v`.
#[inline(always)]
fn online_softmax(
    s: &mut [f32],
    nk: usize,
    diag: isize,
    m: &mut [f32],
    l: &mut [f32],
    o: &mut [f32],
    hd: usize,
) {
    for (r, row) in s.chunks_exact_mut(nk).enumerate() {
        let live = (diag + r as isize).clamp(0, nk as isize) as usize;
        let (seen, masked) = row.split_at_mut(live);
        masked.fill(0.0);
        let tile_max = simd::max_scaled(seen, 1.0);
        let m_new = if tile_max > m[r] { tile_max } else { m[r] };
        if m_new == f32::NEG_INFINITY {
            continue; // nothing seen yet (no key tile before this one): the row stays 0
        }
        let alpha = if m[r] == f32::NEG_INFINITY {
            0.0
        } else {
            simd::exp(m[r] - m_new)
        };
        m[r] = m_new;
        l[r] = l[r] * alpha + exp_sum(seen, m_new);
        if alpha != 1.0 {
            o[r * hd..(r + 1) * hd].iter_mut().for_each(|x| *x *= alpha);
        }
    }
}

/// `x ← e^(x − shift)` in place, returning the sum (eight independent lanes, so that the loop
/// vectorises).
#[inline(always)]
fn exp_sum(x: &mut [f32], shift: f32) -> f32 {
    let mut sum = [0f32; 8];
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        for i in 0..8 {
            c[i] = simd::exp(c[i] - shift);
            sum[i] += c[i];
        }
    }
    let mut total: f32 = sum.iter().sum();
    for x in chunks.into_remainder() {
        *x = simd::exp(*x - shift);
        total += *x;
    }
    total
}

/// The backward pass: `(dq, dk, dv)` from the inputs, the output `o`, its gradient `g` and
/// the forward pass's log-sum-exp.
///
/// One task per kv head and tile of keys: it owns its keys' rows of `dk` and `dv` and runs
/// over every query row of the group that sees those keys, so `dk` and `dv` need no
/// reduction, and with SmolLM2's 3 kv heads at 2,048 positions there are 48 tasks of
/// decreasing size for the threads to share (one task per kv head would leave one of two
/// threads idle a third of the time). The queries' gradient gets contributions from every
/// key tile: each thread adds into its own copy (locked per task, so correct on any pool),
/// summed at the end; a q-sized buffer per thread (4.7 MB for SmolLM2 at 2,048 positions). A second pass over query tiles for `dq` would need no copies but
/// recompute the scores and their gradient once more (7 tile products instead of 5).
#[allow(clippy::too_many_arguments)]
fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &[f32],
    g: &[f32],
    lse: &[f32],
    d: &Dims,
    tiles: Tiles,
    scale: f32,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    check_lengths(d, &[q, o, g], &[k, v])?;
    if lse.len() != d.rows() {
        return Err(candle_core::Error::Msg(format!(
            "causal attention: {} log-sum-exps for {} query rows",
            lse.len(),
            d.rows()
        )));
    }
    let (mut dk, mut dv) = (vec![0f32; d.k_len()], vec![0f32; d.k_len()]);
    if q.is_empty() {
        return Ok((vec![0f32; d.q_len()], dk, dv));
    }
    let hd = d.hd;
    // D = rowsum(dO ∘ O): Σⱼ pⱼ dpⱼ of each row, the softmax backward's shift.
    let dsum: Vec<f32> = g
        .par_chunks(hd)
        .zip(o.par_chunks(hd))
        .with_min_len(crate::MIN_ROWS)
        .map(|(g, o)| dot_best(g, o))
        .collect();
    let threads = rayon::current_num_threads().max(1);
    let copies: Vec<Mutex<Vec<f32>>> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let span = d.keys() * hd;
    dk.par_chunks_mut(span)
        .zip(dv.par_chunks_mut(span))
        .enumerate()
        .for_each(|(group, (dk, dv))| {
            dk.par_chunks_mut(tiles.k * hd)
                .zip(dv.par_chunks_mut(tiles.k * hd))
                .enumerate()
                .with_max_len(1)
                .for_each(|(j, (dk, dv))| {
                    let slot = rayon::current_thread_index().unwrap_or(0) % threads;
                    let mut dq = copies[slot].lock().unwrap_or_else(PoisonError::into_inner);
                    if dq.is_empty() {
                        dq.resize(d.q_len(), 0.0);
                    }
                    let (inputs, grads) = ([q, k, v, g], [dk, dv]);
                    let at = (group, j * tiles.k);
                    backward_tile(inputs, &dsum, lse, d, at, grads, &mut dq, tiles.q, scale);
                });
        });
    let mut copies = copies
        .into_iter()
        .map(|c| c.into_inner().unwrap_or_else(PoisonError::into_inner))
        .filter(|c| !c.is_empty());
    let mut dq = copies.next().unwrap_or_else(|| vec![0f32; d.q_len()]);
    for c in copies {
        dq.par_chunks_mut(1 << 14)
            .zip(c.par_chunks(1 << 14))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
    }
    Ok((dq, dk, dv))
}

/// The keys `j0..j0 + n` of group `group` (`(group, j0)` = `at`, `n` from the length of
/// `dk`): their gradients `dk`, `dv` (rows of `hd`, the task's own) from every query row of
/// the group at or after position `j0`, in tiles of `bq` rows; their part of the queries'
/// gradient added to `dq` (the whole of it).
#[allow(clippy::too_many_arguments)]
fn backward_tile(
    [q, k, v, g]: [&[f32]; 4],
    dsum: &[f32],
    lse: &[f32],
    d: &Dims,
    (group, j0): (usize, usize),
    [dk, dv]: [&mut [f32]; 2],
    dq: &mut [f32],
    bq: usize,
    scale: f32,
) {
    let hd = d.hd;
    let nk = dk.len() / hd;
    let key = group * d.keys() + j0;
    let (km, kt, vt) = (
        Mat::rows(k, key, hd),
        Mat::rows_t(k, key, hd),
        Mat::rows_t(v, key, hd),
    );
    let mut p = vec![0f32; bq.min(d.t) * nk];
    let mut ds = vec![0f32; bq.min(d.t) * nk];
    // The first query row at or after position j0 (rows before it see none of these keys).
    let first = j0.saturating_sub(d.past);
    for head in group * d.rep..(group + 1) * d.rep {
        for i0 in (first..d.t).step_by(bq) {
            let n = bq.min(d.t - i0);
            let row = head * d.t + i0;
            let (qm, gm) = (Mat::rows(q, row, hd), Mat::rows(g, row, hd));
            let (p, ds) = (&mut p[..n * nk], &mut ds[..n * nk]);
            gemm(n, hd, nk, scale, qm, kt, 0.0, p, nk);
            gemm(n, hd, nk, 1.0, gm, vt, 0.0, ds, nk);
            let diag = (d.past + i0 + 1) as isize - j0 as isize;
            let rows = row..row + n;
            let (l, dsum) = (&lse[rows.clone()], &dsum[rows]);
            score_grads_best(p, ds, nk, diag, l, dsum, scale);
            // dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K.
            gemm(nk, n, hd, 1.0, Mat::rows_t(p, 0, nk), gm, 1.0, dv, hd);
            gemm(nk, n, hd, 1.0, Mat::rows_t(ds, 0, nk), qm, 1.0, dk, hd);
            let dq = &mut dq[row * hd..(row + n) * hd];
            gemm(n, nk, hd, 1.0, Mat::rows(ds, 0, nk), km, 1.0, dq, hd);
        }
    }
}

simd::avx2_twin!(
    /// [`score_grads`], vectorised for AVX2 + FMA where the CPU has them.
    fn score_grads_best = score_grads(
        p: &mut [f32],
        ds: &mut [f32],
        nk: usize,
        diag: isize,
        lse: &[f32],
        dsum: &[f32],
        scale: f32
    )
);

/// One backward tile: `p` holds the scaled scores and `ds` the probabilities' gradient
/// `dO · Vᵀ`, rows of `nk` keys, row `r` seeing its first `diag + r` (clamped to `0..=nk`).
/// `p` becomes the probabilities `e^(s − L)` and `ds` the gradient of the unscaled scores,
/// `scale · p ⊙ (dp − D)`; both 0 where masked.
#[inline(always)]
fn score_grads(
    p: &mut [f32],
    ds: &mut [f32],
    nk: usize,
    diag: isize,
    lse: &[f32],
    dsum: &[f32],
    scale: f32,
) {
    let rows = p.chunks_exact_mut(nk).zip(ds.chunks_exact_mut(nk));
    for (r, (p, ds)) in rows.enumerate() {
        let live = (diag + r as isize).clamp(0, nk as isize) as usize;
        let (l, dd) = (lse[r], dsum[r]);
        for (p, ds) in p[..live].iter_mut().zip(&mut ds[..live]) {
            *p = simd::exp(*p - l);
            *ds = scale * *p * (*ds - dd);
        }
        p[live..].fill(0.0);
        ds[live..].fill(0.0);
    }
}

simd::avx2_twin!(
    /// [`simd::dot`], vectorised for AVX2 + FMA where the CPU has them.
    fn dot_best = dot(a: &[f32], b: &[f32]) -> f32
);

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    simd::dot(a, b)
}

/// Every slice of q's size and of k's has the length the shape says (before any tile is
/// read).
fn check_lengths(d: &Dims, q_like: &[&[f32]], k_like: &[&[f32]]) -> Result<()> {
    let ok =
        q_like.iter().all(|x| x.len() == d.q_len()) && k_like.iter().all(|x| x.len() == d.k_len());
    if ok {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "causal attention: input lengths do not match the shape {d:?}"
        )))
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
        run_shaped((2, 2, 3, 4), t, keys, f)
    }

    /// [`run`] with `(b, kv, rep, hd)`.
    fn run_shaped(
        (b, kv, rep, hd): (usize, usize, usize, usize),
        t: usize,
        keys: usize,
        f: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Vec<Vec<f32>> {
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

    /// The op-by-op graph with the whole mask (what other devices run).
    fn whole(q: &Tensor, k: &Tensor, v: &Tensor, t: usize, scale: f64) -> Result<Tensor> {
        let mask = causal_mask(k.dim(2)? - t, q.dim(2)?, t, q.device())?;
        softmax(&(q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?)?.matmul(v)
    }

    /// The largest difference of each of values and gradients, relative to the largest
    /// magnitude of the reference's, or to 0.01 where that is smaller: with one key per query
    /// (`t` = 1, nothing cached) the gradients of q and k are 0 but for rounding.
    fn max_rel(a: &[Vec<f32>], b: &[Vec<f32>]) -> [f32; 4] {
        std::array::from_fn(|i| {
            let top = b[i].iter().fold(1e-2f32, |m, x| m.max(x.abs()));
            let diff = a[i]
                .iter()
                .zip(&b[i])
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert_eq!(a[i].len(), b[i].len());
            diff / top
        })
    }

    /// The fused op and the reference op against the op-by-op graph with the whole mask,
    /// with and without cached positions before the queries.
    #[test]
    fn blocks_of_query_rows_match_the_whole_graph() {
        let scale = 0.5;
        for (t, keys) in [(7, 7), (7, 12), (1, 9)] {
            let whole = run(t, keys, |q, k, v| whole(q, k, v, t, scale));
            // One block, one position per block, and a last block shorter than the rest.
            for block in [7, 1, 3] {
                let fused = run(t, keys, |q, k, v| {
                    causal_attention_blocked(q, k, v, t, scale, block, block)
                });
                let reference = run(t, keys, |q, k, v| {
                    causal_attention_reference_blocked(q, k, v, t, scale, block)
                });
                for blocked in [fused, reference] {
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
    }

    /// Values and q, k, v gradients of the tiled op against the whole graph at several
    /// lengths, with and without cached positions, for square, tall, wide, odd and
    /// larger-than-`t` tiles (and the default ones).
    #[test]
    fn tiles_of_every_shape_match_the_whole_graph() {
        let scale = 0.5;
        for t in [1, 7, 64, 129, 300] {
            for past in [0, 5, 70] {
                let keys = past + t;
                let whole = run(t, keys, |q, k, v| whole(q, k, v, t, scale));
                let mut tiles = vec![(3, 16), (16, 3), (64, 64), (t + 5, t + 5), (64, 128)];
                if t <= 64 {
                    tiles.push((1, 1));
                }
                for (bq, bk) in tiles {
                    let fused = run(t, keys, |q, k, v| {
                        causal_attention_blocked(q, k, v, t, scale, bq, bk)
                    });
                    let err = max_rel(&fused, &whole);
                    assert!(
                        err.iter().all(|e| *e < 1e-4),
                        "t {t}, past {past}, tiles {bq}×{bk}: relative errors {err:?}"
                    );
                }
            }
        }
    }

    /// SmolLM2's head dimension (64: whole SIMD lanes) and grouping (3 query heads a kv head),
    /// with the default tiles and a diagonal that does not fall on tile edges.
    #[test]
    fn smollm2s_head_shape_matches_the_whole_graph() {
        let (t, past, scale) = (200, 17, 0.125);
        let shape = (1, 3, 3, 64);
        let whole = run_shaped(shape, t, past + t, |q, k, v| whole(q, k, v, t, scale));
        let fused = run_shaped(shape, t, past + t, |q, k, v| {
            causal_attention(q, k, v, t, scale)
        });
        let err = max_rel(&fused, &whole);
        assert!(err.iter().all(|e| *e < 1e-4), "relative errors {err:?}");
    }

    /// The backward pass with the forward pass's log-sum-exp and with it recomputed (what
    /// `bwd` does when the op kept none) agree exactly, on a pool of three threads (each
    /// with its copy of the queries' gradient).
    #[test]
    fn the_backward_pass_recomputes_a_missing_log_sum_exp() {
        let d = Dims::new(&[1, 2, 3 * 37, 8], &[1, 2, 40, 8], &[1, 2, 40, 8], 37).unwrap();
        let tiles = Tiles { q: 5, k: 7 };
        let flat = |x: Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let q = flat(rand(&[d.q_len()], 1));
        let (k, v) = (flat(rand(&[d.k_len()], 2)), flat(rand(&[d.k_len()], 3)));
        let g = flat(rand(&[d.q_len()], 4));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            let (o, lse) = forward(&q, &k, &v, &d, tiles, 0.3).unwrap();
            assert_eq!(lse.len(), d.rows());
            let kept = backward(&q, &k, &v, &o, &g, &lse, &d, tiles, 0.3).unwrap();
            let lse2 = forward(&q, &k, &v, &d, tiles, 0.3).unwrap().1;
            let again = backward(&q, &k, &v, &o, &g, &lse2, &d, tiles, 0.3).unwrap();
            assert_eq!(lse, lse2);
            // dq sums per-thread copies in an order that depends on scheduling.
            let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
            assert!(close(&kept.0, &again.0) && kept.1 == again.1 && kept.2 == again.2);
            assert!(backward(&q, &k, &v, &o, &g, &lse[1..], &d, tiles, 0.3).is_err());
        });
        // Through candle: an op whose log-sum-exp was taken recomputes it.
        let (qt, kt, vt) = (
            Tensor::from_slice(&q, (1, 2, 3 * 37, 8), &Device::Cpu).unwrap(),
            Tensor::from_slice(&k, (1, 2, 40, 8), &Device::Cpu).unwrap(),
            Tensor::from_slice(&v, (1, 2, 40, 8), &Device::Cpu).unwrap(),
        );
        let op = FlashAttention {
            dims: d,
            scale: 0.3,
            tiles,
            lse: Mutex::new(None),
        };
        let gt = Tensor::from_slice(&g, (1, 2, 3 * 37, 8), &Device::Cpu).unwrap();
        let out = qt.apply_op3_no_bwd(&kt, &vt, &op).unwrap();
        let first = candle_core::CustomOp3::bwd(&op, &qt, &kt, &vt, &out, &gt).unwrap();
        assert!(op.lse.lock().unwrap().is_none());
        let second = candle_core::CustomOp3::bwd(&op, &qt, &kt, &vt, &out, &gt).unwrap();
        let dk = |x: &(Option<Tensor>, Option<Tensor>, Option<Tensor>)| flat(x.1.clone().unwrap());
        assert_eq!(dk(&first), dk(&second));
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

    /// The plan's figure for the fused op: at least the per-thread copies of the queries'
    /// gradient, far below one head's `t × t` scores.
    #[test]
    fn scratch_bytes_count_the_per_thread_gradient_and_no_scores() {
        let (heads, t, hd) = (9, 8192, 64);
        let n = attention_scratch_bytes(1, heads, t, hd);
        let threads = rayon::current_num_threads() as u64;
        assert!(n >= threads * (heads * t * hd * 4) as u64);
        assert!(n < (t * t * 4) as u64);
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
        // Head dimensions, kv heads or values that do not match the keys.
        let k = rand(&[1, 1, 3, 4], 2);
        for (q, v) in [
            (rand(&[1, 1, 6, 5], 1), k.clone()),
            (rand(&[1, 2, 6, 4], 1), k.clone()),
            (rand(&[1, 1, 6, 4], 1), rand(&[1, 1, 3, 5], 3)),
            (rand(&[1, 6, 4], 1), k.clone()),
        ] {
            assert!(causal_attention(&q, &k, &v, 3, 1.0).is_err());
        }
    }

    /// Empty batches and groups of no query heads give empty outputs and zero gradients.
    #[test]
    fn empty_inputs_give_empty_outputs() {
        let q = rand(&[0, 2, 6, 4], 1);
        let k = rand(&[0, 2, 3, 4], 2);
        assert_eq!(
            causal_attention(&q, &k, &k, 3, 1.0).unwrap().dims(),
            q.dims()
        );
        let q = Var::from_tensor(&rand(&[1, 2, 0, 4], 1)).unwrap();
        let k = Var::from_tensor(&rand(&[1, 2, 3, 4], 2)).unwrap();
        let out = causal_attention(q.as_tensor(), k.as_tensor(), k.as_tensor(), 3, 1.0).unwrap();
        assert_eq!(out.dims(), &[1, 2, 0, 4]);
        let grads = out.sum_all().unwrap().backward().unwrap();
        let dk = grads.get(k.as_tensor()).unwrap();
        assert_eq!(
            dk.abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap(),
            0.0
        );
    }
}
