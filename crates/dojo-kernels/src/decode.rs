//! The attention of one decode step: each sequence's one new query against its own KV cache.
//!
//! Why a kernel: as candle ops this is four small ops per sequence and layer (a product with
//! the transposed cache, which candle's GEMM packs first; the scale; the softmax; the product
//! with the values), each a few microseconds of dispatch for a few thousand multiply-adds. Here
//! one parallel loop over (group of sequences, key/value head) pairs reads each cached key and
//! value once for all the query heads that share it (grouped-query attention), and writes the
//! output in the layout the output projection takes.
//!
//! Sequences forked from one prompt share its cached positions ([`CacheView::shared`]): the
//! kernel groups them and reads a shared key or value once for the whole group, not once per
//! sequence (the cascade attention of Hydragen / FlashInfer, without its split softmax). Each row's
//! arithmetic is the same whatever its group: the scores of a row, its softmax and its sum of
//! values run in key order over the shared positions and then the sequence's own, exactly as
//! over one contiguous cache, so a sequence decodes bit for bit the same whoever shares its step
//! or its prefix.
//!
//! Caches hold f32 or f16 keys and values (`KvElem`); an f16 row is widened to f32 as it is
//! read, and everything after the read is the f32 arithmetic.

use candle_core::{D, DType, Result, Tensor};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::{fused, simd};

/// A run of one layer's cached positions: keys and values `(1, kv_heads, capacity,
/// head_dim)`, of which the first `len` are attended to. The fused kernel takes CPU f32 or f16
/// spans, one dtype for every span of a call; anything else runs op by op, each span read in
/// the query's dtype.
#[derive(Clone, Copy)]
pub struct KvSpan<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub len: usize,
}

/// One sequence's cache for a layer: positions `0..shared.len` in buffers other sequences
/// share (a fork's prefix; the same tensors and length for each of them, which is how the
/// kernel finds the group), then its own `own.len` positions.
#[derive(Clone, Copy)]
pub struct CacheView<'a> {
    pub shared: Option<KvSpan<'a>>,
    pub own: KvSpan<'a>,
}

impl<'a> CacheView<'a> {
    /// A cache of the sequence's own positions only.
    pub fn own(k: &'a Tensor, v: &'a Tensor, len: usize) -> CacheView<'a> {
        CacheView {
            shared: None,
            own: KvSpan { k, v, len },
        }
    }

    /// Positions attended to.
    pub fn len(&self) -> usize {
        self.shared.map_or(0, |s| s.len) + self.own.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Below this many multiply-adds a step's attention runs on the calling thread (rayon's
/// hand-off costs more than it saves on short caches).
const PARALLEL_WORK: usize = 1 << 16;

/// `softmax(q·Kᵀ · scale) · V` for a batch of single queries: `q` is `(b, heads · head_dim)`,
/// `caches[i]` sequence `i`'s cache; query head `h` reads key/value head `h / (heads /
/// kv_heads)`. Returns `(b, heads · head_dim)`, of `q`'s dtype.
pub fn decode_attention(
    q: &Tensor,
    caches: &[CacheView],
    heads: usize,
    kv_heads: usize,
    scale: f32,
) -> Result<Tensor> {
    let (b, width) = q.dims2()?;
    if b != caches.len()
        || kv_heads == 0
        || heads == 0
        || !heads.is_multiple_of(kv_heads)
        || !width.is_multiple_of(heads)
    {
        candle_core::bail!(
            "decode_attention: {b} queries of width {width} for {} caches, {heads} heads over \
             {kv_heads} key/value heads",
            caches.len()
        );
    }
    let hd = width / heads;
    let rep = heads / kv_heads;
    let spans = || caches.iter().flat_map(|c| c.shared.iter().chain([&c.own]));
    for s in spans() {
        let (one, h, cap, d) = s.k.dims4()?;
        if one != 1 || h != kv_heads || d != hd || s.v.dims4()? != (1, h, cap, d) || s.len > cap {
            candle_core::bail!(
                "decode_attention: cache {:?} / {:?} with {} positions does not fit \
                 {kv_heads} heads of {hd}",
                s.k.dims(),
                s.v.dims(),
                s.len
            );
        }
    }
    let kv_dtype = caches.first().map_or(DType::F32, |c| c.own.k.dtype());
    let kv_fused = |t: &Tensor| t.device().is_cpu() && t.dtype() == kv_dtype;
    if !(fused(q)
        && matches!(kv_dtype, DType::F32 | DType::F16)
        && spans().all(|s| kv_fused(s.k) && kv_fused(s.v)))
    {
        return by_ops(q, caches, kv_heads, rep, hd, scale);
    }
    // The cache tensors to read, each once: each group's shared keys and values, each
    // sequence's own.
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut own_at = Vec::with_capacity(b);
    for (i, c) in caches.iter().enumerate() {
        let found = c.shared.and_then(|s| {
            groups.iter_mut().find(|g| {
                g.shared.is_some_and(|(at, len)| {
                    (tensors[at].id(), tensors[at + 1].id(), len) == (s.k.id(), s.v.id(), s.len)
                })
            })
        });
        match found {
            Some(g) => g.members.push(i),
            None => {
                let shared = c.shared.map(|s| {
                    tensors.push(s.k.clone());
                    tensors.push(s.v.clone());
                    (tensors.len() - 2, s.len)
                });
                groups.push(Group {
                    shared,
                    members: vec![i],
                });
            }
        }
        own_at.push(tensors.len());
        tensors.push(c.own.k.clone());
        tensors.push(c.own.v.clone());
    }
    let at = Layout {
        caches,
        own_at: &own_at,
        kv_heads,
        rep,
        hd,
        scale,
    };
    let op = "decode_attention";
    let out = crate::with_values([q], op, |[qv]| match kv_dtype {
        DType::F16 => {
            crate::with_all_values::<f16, _>(&tensors, op, |kv| Ok(run(qv, kv, groups, &at)))
        }
        _ => crate::with_all_values::<f32, _>(&tensors, op, |kv| Ok(run(qv, kv, groups, &at))),
    })?;
    Tensor::from_vec(out, (b, width), q.device())
}

/// Sequences attended to together: those sharing one prefix (`shared`: where its keys are
/// among the cache values read, and its length), or a single sequence.
struct Group {
    shared: Option<(usize, usize)>,
    members: Vec<usize>,
}

/// Where [`run`] finds things: sequence `i`'s own keys and values are cache values `own_at[i]`
/// and `own_at[i] + 1`.
struct Layout<'a, 'c> {
    caches: &'a [CacheView<'c>],
    own_at: &'a [usize],
    kv_heads: usize,
    rep: usize,
    hd: usize,
    scale: f32,
}

/// [`decode_attention`] on the values: the queries `qv`, and the caches' keys and values
/// `values` as `groups` and `at` place them.
fn run<'v, E: KvElem>(
    qv: &'v [f32],
    values: &[&'v [E]],
    mut groups: Vec<Group>,
    at: &Layout,
) -> Vec<f32> {
    let (kv_heads, rep, hd) = (at.kv_heads, at.rep, at.hd);
    let work = at.caches.iter().map(CacheView::len).sum::<usize>() * rep * kv_heads * hd;
    let parallel = work >= PARALLEL_WORK && rayon::current_num_threads() > 1;
    if parallel {
        // Enough tasks to keep every thread busy: halve the largest group while there are
        // fewer than two per thread (each half still reads the shared prefix once).
        while groups.len() * kv_heads < 2 * rayon::current_num_threads() {
            let Some(big) = groups
                .iter_mut()
                .filter(|g| g.members.len() > 1)
                .max_by_key(|g| g.members.len())
            else {
                break;
            };
            let half = big.members.split_off(big.members.len() / 2);
            let shared = big.shared;
            groups.push(Group {
                shared,
                members: half,
            });
        }
    }
    // One task per (group, key/value head): its members' `rep` query heads against that
    // head's keys and values; the output of member `m` is `rep · hd` values at `m · rep · hd`.
    let head = |t: &[E], g: usize, len: usize| -> std::ops::Range<usize> {
        let cap = t.len() / (kv_heads * hd);
        g * cap * hd..(g * cap + len) * hd
    };
    let task = |(gi, g): (usize, usize), scratch: &mut Scratch<'v, E>| -> Vec<f32> {
        let group = &groups[gi];
        let Scratch { rows, scores } = scratch;
        (rows.shared_k, rows.shared_v) = match group.shared {
            Some((at, len)) => {
                let (k, v) = (values[at], values[at + 1]);
                (&k[head(k, g, len)], &v[head(v, g, len)])
            }
            None => (&[][..], &[][..]),
        };
        rows.q.clear();
        rows.k.clear();
        rows.v.clear();
        for &i in &group.members {
            let t = i * kv_heads + g;
            rows.q.push(&qv[t * rep * hd..(t + 1) * rep * hd]);
            let (k, v) = (values[at.own_at[i]], values[at.own_at[i] + 1]);
            let len = at.caches[i].own.len;
            rows.k.push(&k[head(k, g, len)]);
            rows.v.push(&v[head(v, g, len)]);
        }
        let mut out = vec![0f32; group.members.len() * rep * hd];
        E::attend(rows, hd, at.scale, scores, &mut out);
        out
    };
    let tasks: Vec<(usize, usize)> = (0..groups.len())
        .flat_map(|gi| (0..kv_heads).map(move |g| (gi, g)))
        .collect();
    let outs: Vec<Vec<f32>> = if parallel {
        tasks
            .par_iter()
            .map_init(Scratch::default, |s, &t| task(t, s))
            .collect()
    } else {
        let mut s = Scratch::default();
        tasks.iter().map(|&t| task(t, &mut s)).collect()
    };
    let mut out = vec![0f32; qv.len()];
    for (&(gi, g), o) in tasks.iter().zip(&outs) {
        for (&i, rows) in groups[gi].members.iter().zip(o.chunks_exact(rep * hd)) {
            let t = i * kv_heads + g;
            out[t * rep * hd..(t + 1) * rep * hd].copy_from_slice(rows);
        }
    }
    out
}

/// A task's reusable buffers.
struct Scratch<'v, E> {
    rows: Rows<'v, E>,
    scores: Vec<f32>,
}

impl<E> Default for Scratch<'_, E> {
    fn default() -> Self {
        Scratch {
            rows: Rows::default(),
            scores: Vec::new(),
        }
    }
}

/// What one task attends over (slices of the step's values): the members of a group, `rep`
/// query heads each (`q[m]`, `rep · hd`), the keys and values they share (`shared_k`,
/// `shared_v`: `p · hd`) and each one's own after them (`k[m]`, `v[m]`).
struct Rows<'v, E> {
    q: Vec<&'v [f32]>,
    shared_k: &'v [E],
    shared_v: &'v [E],
    k: Vec<&'v [E]>,
    v: Vec<&'v [E]>,
}

impl<E> Default for Rows<'_, E> {
    fn default() -> Self {
        Rows {
            q: Vec::new(),
            shared_k: &[],
            shared_v: &[],
            k: Vec::new(),
            v: Vec::new(),
        }
    }
}

/// How a cache stores a key or value: f32, or f16 (half the memory and the bytes read per
/// step, as llama.cpp's default cache; each row is widened to f32 as it is read).
trait KvElem: candle_core::WithDType {
    /// [`attend_portable`] for this element type, vectorised where the CPU allows.
    fn attend(rows: &Rows<Self>, hd: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]);
}

/// How [`attend_portable`] reads a row of `E` as f32.
trait Widen<E> {
    /// `src` as f32 values: itself, or widened into `buf` (at least `src.len()` long).
    ///
    /// # Safety
    /// The CPU has the features the implementation names (none for [`Plain`]).
    unsafe fn widen<'a>(src: &'a [E], buf: &'a mut [f32]) -> &'a [f32];
}

/// Rows read without special instructions.
struct Plain;

impl Widen<f32> for Plain {
    #[inline(always)]
    unsafe fn widen<'a>(src: &'a [f32], _: &'a mut [f32]) -> &'a [f32] {
        src
    }
}

impl Widen<f16> for Plain {
    #[inline(always)]
    unsafe fn widen<'a>(src: &'a [f16], buf: &'a mut [f32]) -> &'a [f32] {
        let buf = &mut buf[..src.len()];
        src.convert_to_f32_slice(buf);
        buf
    }
}

/// f16 rows widened by F16C, inline (`half`'s slice conversion is a call per row, which cost
/// more than the bytes it saves at 64 values a row).
#[cfg(target_arch = "x86_64")]
struct F16c;

#[cfg(target_arch = "x86_64")]
impl Widen<f16> for F16c {
    /// # Safety
    /// The CPU has F16C and AVX.
    #[inline(always)]
    unsafe fn widen<'a>(src: &'a [f16], buf: &'a mut [f32]) -> &'a [f32] {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
        let buf = &mut buf[..src.len()];
        let (eights, tail) = src.as_chunks::<8>();
        for (h, f) in eights.iter().zip(buf.chunks_exact_mut(8)) {
            // SAFETY: eight f16 (16 bytes) read, eight f32 written, unaligned accesses; the
            // caller guarantees the features.
            unsafe {
                let wide = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast::<__m128i>()));
                _mm256_storeu_ps(f.as_mut_ptr(), wide);
            }
        }
        let done = eights.len() * 8;
        for (f, h) in buf[done..].iter_mut().zip(tail) {
            *f = h.to_f32();
        }
        buf
    }
}

impl KvElem for f32 {
    fn attend(rows: &Rows<f32>, hd: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]) {
        attend_f32(rows, hd, scale, scores, out)
    }
}

impl KvElem for f16 {
    fn attend(rows: &Rows<f16>, hd: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn twin(rows: &Rows<f16>, hd: usize, s: f32, sc: &mut Vec<f32>, o: &mut [f32]) {
                // SAFETY: this function only runs where the CPU has F16C (and AVX).
                unsafe { attend_portable::<f16, F16c>(rows, hd, s, sc, o) }
            }
            if crate::quant::cpu_has_avx2() {
                // SAFETY: checked that this CPU has AVX2, FMA and F16C.
                return unsafe { twin(rows, hd, scale, scores, out) };
            }
        }
        // SAFETY: `Plain` needs no CPU feature.
        unsafe { attend_portable::<f16, Plain>(rows, hd, scale, scores, out) }
    }
}

/// [`decode_attention`] op by op through candle's primitives, one sequence at a time (other
/// devices and dtypes; the same maths).
fn by_ops(
    q: &Tensor,
    caches: &[CacheView],
    kv_heads: usize,
    rep: usize,
    hd: usize,
    scale: f32,
) -> Result<Tensor> {
    let mut outs = Vec::with_capacity(caches.len());
    for (i, c) in caches.iter().enumerate() {
        let qi = q.narrow(0, i, 1)?.reshape((1, kv_heads, rep, hd))?;
        let mut parts = Vec::new();
        for s in c.shared.iter().chain([&c.own]) {
            let read = |t: &Tensor| t.narrow(2, 0, s.len)?.to_dtype(q.dtype());
            parts.push((read(s.k)?, read(s.v)?));
        }
        let (ks, vs): (Vec<Tensor>, Vec<Tensor>) = parts.into_iter().unzip();
        let (k, v) = (Tensor::cat(&ks, 2)?, Tensor::cat(&vs, 2)?.contiguous()?);
        let att = (qi.matmul(&k.t()?)? * scale as f64)?;
        let att = att.broadcast_sub(&att.max_keepdim(D::Minus1)?)?.exp()?;
        let att = att.broadcast_div(&att.sum_keepdim(D::Minus1)?)?;
        outs.push(att.matmul(&v)?.reshape((1, kv_heads * rep * hd))?);
    }
    Tensor::cat(&outs, 0)
}

simd::avx2_twin!(
    /// [`attend_portable`] on f32 caches, vectorised for AVX2 + FMA where the CPU has them.
    fn attend_f32 = attend_portable_f32(
        rows: &Rows<f32>,
        hd: usize,
        scale: f32,
        scores: &mut Vec<f32>,
        out: &mut [f32]
    )
);

#[inline(always)]
fn attend_portable_f32(rows: &Rows<f32>, hd: usize, s: f32, sc: &mut Vec<f32>, o: &mut [f32]) {
    // SAFETY: `Plain` needs no CPU feature.
    unsafe { attend_portable::<f32, Plain>(rows, hd, s, sc, o) }
}

/// `rows` into `out` (member `m`'s rows at `m · rep · hd`). A shared key or value is read
/// once for every row of the group; a row is computed as over one contiguous cache.
///
/// It stays one function on purpose: it is inlined into each `#[target_feature]` caller so
/// that its loops are compiled for that CPU's features, which helpers would keep only if they
/// were all `#[inline(always)]` too; and its three phases (scores, softmax, weighted sum) share
/// the per-member offsets and already read as three sections.
///
/// # Safety
/// The CPU has the features `W` needs to widen rows ([`Widen::widen`]).
#[inline(always)]
unsafe fn attend_portable<E: KvElem, W: Widen<E>>(
    rows: &Rows<E>,
    hd: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let Rows {
        q,
        shared_k,
        shared_v,
        k,
        v,
    } = rows;
    let p = shared_k.len() / hd;
    let rep = q.first().map_or(0, |x| x.len() / hd);
    // Member m's rows: `len(m)` scores each, from `start[m]`.
    let len = |m: usize| p + k[m].len() / hd;
    let mut start = Vec::with_capacity(q.len() + 1);
    start.push(0);
    for m in 0..q.len() {
        start.push(start[m] + rep * len(m));
    }
    scores.clear();
    scores.resize(start[q.len()], 0.0);
    // A widened f16 row (unused for f32 caches).
    let mut wide = vec![0f32; if size_of::<E>() == 4 { 0 } else { hd }];
    for (j, kj) in shared_k.chunks_exact(hd).enumerate() {
        // SAFETY (here and below): the caller guarantees `W`'s CPU features.
        let kj = unsafe { W::widen(kj, &mut wide) };
        for (m, qm) in q.iter().enumerate() {
            let l = len(m);
            for (r, qr) in qm.chunks_exact(hd).enumerate() {
                scores[start[m] + r * l + j] = simd::dot(qr, kj);
            }
        }
    }
    for (m, qm) in q.iter().enumerate() {
        let l = len(m);
        for (j, kj) in k[m].chunks_exact(hd).enumerate() {
            let kj = unsafe { W::widen(kj, &mut wide) };
            for (r, qr) in qm.chunks_exact(hd).enumerate() {
                scores[start[m] + r * l + p + j] = simd::dot(qr, kj);
            }
        }
    }
    // Not `softmax::softmax_row`: here the weights are normalised after the weighted sum (one
    // multiply per output value, not per key) and summed in key order. The results differ in
    // the last bits, enough that with `softmax_row` the default model's greedy tokens left
    // llama.cpp's at a near tie (third token of the engine benchmark's prompt).
    let mut sums = Vec::with_capacity(q.len() * rep);
    for m in 0..q.len() {
        let l = len(m);
        if l == 0 {
            sums.extend(std::iter::repeat_n(0.0, rep));
            continue;
        }
        for row in scores[start[m]..start[m + 1]].chunks_exact_mut(l) {
            let mx = simd::max_scaled(row, scale);
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = simd::exp(*s * scale - mx);
                sum += *s;
            }
            sums.push(sum);
        }
    }
    out.fill(0.0);
    let mut add = |m: usize, j: usize, vj: &[f32]| {
        let l = len(m);
        for r in 0..rep {
            let w = scores[start[m] + r * l + j];
            let o = &mut out[(m * rep + r) * hd..(m * rep + r + 1) * hd];
            for (od, vd) in o.iter_mut().zip(vj) {
                *od += w * vd;
            }
        }
    };
    for (j, vj) in shared_v.chunks_exact(hd).enumerate() {
        let vj = unsafe { W::widen(vj, &mut wide) };
        for m in 0..q.len() {
            add(m, j, vj);
        }
    }
    for (m, vm) in v.iter().enumerate() {
        for (j, vj) in vm.chunks_exact(hd).enumerate() {
            let vj = unsafe { W::widen(vj, &mut wide) };
            add(m, p + j, vj);
        }
    }
    for (m, rows) in out.chunks_exact_mut(rep * hd).enumerate() {
        if len(m) == 0 {
            continue;
        }
        for (r, o) in rows.chunks_exact_mut(hd).enumerate() {
            let inv = 1.0 / sums[m * rep + r];
            for od in o.iter_mut() {
                *od *= inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{max_abs, rand};

    /// Keys and values for caches of `lens` positions, `extra` positions of capacity past
    /// them.
    fn buffers(kv: usize, hd: usize, lens: &[usize], extra: usize) -> (Vec<Tensor>, Vec<Tensor>) {
        let fill = |seed: u64| -> Vec<Tensor> {
            (0..lens.len())
                .map(|i| rand(&[1, kv, lens[i] + extra, hd], seed + i as u64))
                .collect()
        };
        (fill(10), fill(20))
    }

    /// The kernel against candle's ops on each sequence alone (grouped heads, caches of
    /// different lengths and capacities, an empty one), in parallel and serially.
    #[test]
    fn matches_per_sequence_candle_attention() {
        let (heads, kv, hd) = (6, 2, 16);
        let rep = heads / kv;
        for lens in [vec![5usize, 1, 9], vec![700, 300]] {
            let b = lens.len();
            let q = rand(&[b, heads * hd], 1);
            let (kc, vc) = buffers(kv, hd, &lens, 3);
            let views: Vec<CacheView> = (0..b)
                .map(|i| CacheView::own(&kc[i], &vc[i], lens[i]))
                .collect();
            let got = decode_attention(&q, &views, heads, kv, 0.25).unwrap();
            for i in 0..b {
                let qi = q
                    .narrow(0, i, 1)
                    .unwrap()
                    .reshape((1, kv, rep, hd))
                    .unwrap();
                let k = kc[i].narrow(2, 0, lens[i]).unwrap();
                let v = vc[i].narrow(2, 0, lens[i]).unwrap();
                let att = (qi.matmul(&k.t().unwrap()).unwrap() * 0.25).unwrap();
                let att = candle_core::Tensor::exp(
                    &att.broadcast_sub(&att.max_keepdim(D::Minus1).unwrap())
                        .unwrap(),
                )
                .unwrap();
                let att = att
                    .broadcast_div(&att.sum_keepdim(D::Minus1).unwrap())
                    .unwrap();
                let want = att
                    .matmul(&v.contiguous().unwrap())
                    .unwrap()
                    .reshape((1, heads * hd))
                    .unwrap();
                let diff = max_abs(&got.narrow(0, i, 1).unwrap(), &want);
                assert!(diff < 1e-5, "lens {lens:?} sequence {i}: {diff}");
            }
            // A sequence's output does not depend on the batch it is in.
            let alone =
                decode_attention(&q.narrow(0, 1, 1).unwrap(), &views[1..2], heads, kv, 0.25)
                    .unwrap();
            assert_eq!(max_abs(&got.narrow(0, 1, 1).unwrap(), &alone), 0.0);
        }
        // Other dtypes (and devices) take the op-by-op path: the same values.
        let (q, k, v) = (
            rand(&[1, heads * hd], 5),
            rand(&[1, kv, 9, hd], 6),
            rand(&[1, kv, 9, hd], 7),
        );
        let f64s = |t: &Tensor| t.to_dtype(candle_core::DType::F64).unwrap();
        let view = |k, v| [CacheView::own(k, v, 7)];
        let fast = decode_attention(&q, &view(&k, &v), heads, kv, 0.3).unwrap();
        let (k64, v64) = (f64s(&k), f64s(&v));
        let slow = decode_attention(&f64s(&q), &view(&k64, &v64), heads, kv, 0.3).unwrap();
        let slow = slow.to_dtype(candle_core::DType::F32).unwrap();
        assert!(max_abs(&fast, &slow) < 1e-5);
        let k = rand(&[1, kv, 4, hd], 3);
        let bad = [CacheView::own(&k, &k, 5)];
        assert!(decode_attention(&rand(&[1, heads * hd], 4), &bad, heads, kv, 1.0).is_err());
    }

    /// Both widenings (F16C eight at a time with the tail one by one, and `half`'s) give each
    /// f16's value as the GGUF scales' software decode reads it.
    #[test]
    fn f16c_widens_as_half_does() {
        let src: Vec<f16> = (0..67)
            .map(|i| f16::from_f32((i as f32 - 30.0) * 0.37))
            .chain([f16::INFINITY, f16::NAN, f16::MIN_POSITIVE_SUBNORMAL])
            .collect();
        let mut a = vec![0f32; src.len()];
        // SAFETY: `Plain` needs no CPU feature.
        let plain = unsafe { Plain::widen(&src, &mut a) }.to_vec();
        for (h, p) in src.iter().zip(&plain) {
            let want = crate::quant::f16_to_f32(h.to_bits());
            assert!(
                *p == want || (p.is_nan() && want.is_nan()),
                "{h:?}: {p} vs {want}"
            );
        }
        #[cfg(target_arch = "x86_64")]
        if crate::quant::cpu_has_avx2() {
            let mut b = vec![0f32; src.len()];
            // SAFETY: checked that this CPU has F16C (and AVX2, FMA).
            let fast = unsafe { F16c::widen(&src, &mut b) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(fast), bits(&plain));
        }
        assert_eq!(plain[0], f16::from_f32(-11.1).to_f32());
    }

    /// The f16 attention without F16C (other CPUs: `half`'s widening, no AVX2 twin) gives the
    /// bits the F16C twin gives.
    #[test]
    fn f16_attention_without_f16c_gives_the_same_bits() {
        let (hd, rep) = (20, 3);
        let halves = |n: usize, seed: u64| -> Vec<f16> {
            let t = rand(&[n * hd], seed);
            t.to_vec1::<f32>()
                .unwrap()
                .into_iter()
                .map(f16::from_f32)
                .collect()
        };
        let qs: Vec<Vec<f32>> = (0..2)
            .map(|m| rand(&[rep * hd], 40 + m).to_vec1::<f32>().unwrap())
            .collect();
        let (sk, sv) = (halves(33, 1), halves(33, 2));
        let own: Vec<(Vec<f16>, Vec<f16>)> = [5, 1]
            .iter()
            .enumerate()
            .map(|(m, &n)| (halves(n, 10 + m as u64), halves(n, 20 + m as u64)))
            .collect();
        let rows = Rows {
            q: qs.iter().map(Vec::as_slice).collect(),
            shared_k: &sk,
            shared_v: &sv,
            k: own.iter().map(|(k, _)| k.as_slice()).collect(),
            v: own.iter().map(|(_, v)| v.as_slice()).collect(),
        };
        let mut fast = vec![0f32; 2 * rep * hd];
        f16::attend(&rows, hd, 0.3, &mut Vec::new(), &mut fast);
        let mut plain = vec![0f32; 2 * rep * hd];
        // SAFETY: `Plain` needs no CPU feature.
        unsafe { attend_portable::<f16, Plain>(&rows, hd, 0.3, &mut Vec::new(), &mut plain) };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&plain));
        assert!(fast.iter().all(|x| x.is_finite()) && fast.iter().any(|x| *x != 0.0));
    }

    /// f16 caches (a shared prefix, a sequence alone) give bit for bit what f32 caches holding
    /// the same values give, in parallel and serially; the op-by-op path agrees closely.
    #[test]
    fn f16_caches_read_as_their_f32_values() {
        // A head width of 20: F16C widens 16 of each row, the tail the rest.
        for hd in [16, 20] {
            f16_caches_read_as_f32(hd);
        }
    }

    fn f16_caches_read_as_f32(hd: usize) {
        let (heads, kv) = (6, 2);
        let half = |t: &Tensor| t.to_dtype(DType::F16).unwrap();
        let wide = |t: &Tensor| half(t).to_dtype(DType::F32).unwrap();
        let (pk, pv) = (rand(&[1, kv, 600, hd], 1), rand(&[1, kv, 600, hd], 2));
        let own = [7usize, 300, 1];
        let (ok, ov) = buffers(kv, hd, &own, 2);
        let q = rand(&[own.len(), heads * hd], 3);
        let views = |pk: &Tensor, pv: &Tensor, ok: &[Tensor], ov: &[Tensor]| -> Tensor {
            let v: Vec<CacheView> = (0..own.len())
                .map(|i| CacheView {
                    shared: (i < 2).then_some(KvSpan {
                        k: pk,
                        v: pv,
                        len: 550,
                    }),
                    own: KvSpan {
                        k: &ok[i],
                        v: &ov[i],
                        len: own[i],
                    },
                })
                .collect();
            decode_attention(&q, &v, heads, kv, 0.25).unwrap()
        };
        let (hk, hv): (Vec<Tensor>, Vec<Tensor>) =
            (ok.iter().map(half).collect(), ov.iter().map(half).collect());
        let (wk, wv): (Vec<Tensor>, Vec<Tensor>) =
            (ok.iter().map(wide).collect(), ov.iter().map(wide).collect());
        let want = views(&wide(&pk), &wide(&pv), &wk, &wv);
        let got = views(&half(&pk), &half(&pv), &hk, &hv);
        assert_eq!(got.dtype(), DType::F32);
        assert_eq!(max_abs(&got, &want), 0.0);
        let serial = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let got1 = serial.install(|| views(&half(&pk), &half(&pv), &hk, &hv));
        assert_eq!(max_abs(&got1, &want), 0.0);
        // Against the unrounded f32 caches: f16's rounding, nothing more.
        let exact = views(&pk, &pv, &ok, &ov);
        assert!(max_abs(&got, &exact) < 1e-2);
        // Spans of mixed dtypes go op by op, each read as the query's dtype.
        let mixed = views(&half(&pk), &half(&pv), &wk, &wv);
        assert!(max_abs(&mixed, &want) < 1e-5);
    }

    /// Sequences sharing a prefix (two groups, one of them split across threads, and a
    /// sequence alone) give exactly, bit for bit, what the same positions give as one
    /// contiguous cache each, in parallel and serially; so does the op-by-op path, closely.
    #[test]
    fn shared_prefixes_give_exactly_the_contiguous_results() {
        let (heads, kv, hd) = (6, 2, 16);
        // Shared prefixes of 700 and 40 positions (capacity past them); own parts after.
        let (pk1, pv1) = (rand(&[1, kv, 750, hd], 1), rand(&[1, kv, 750, hd], 2));
        let (pk2, pv2) = (rand(&[1, kv, 40, hd], 3), rand(&[1, kv, 40, hd], 4));
        let own = [9usize, 1, 30, 5, 2, 17];
        let prefix = [Some(1), Some(1), Some(1), Some(2), None, Some(2)];
        let b = own.len();
        let (ok, ov) = buffers(kv, hd, &own, 4);
        let q = rand(&[b, heads * hd], 5);
        let span = |p: Option<u8>| match p {
            Some(1) => Some(KvSpan {
                k: &pk1,
                v: &pv1,
                len: 700,
            }),
            Some(_) => Some(KvSpan {
                k: &pk2,
                v: &pv2,
                len: 40,
            }),
            None => None,
        };
        let views: Vec<CacheView> = (0..b)
            .map(|i| CacheView {
                shared: span(prefix[i]),
                own: KvSpan {
                    k: &ok[i],
                    v: &ov[i],
                    len: own[i],
                },
            })
            .collect();
        // The same positions copied into one cache per sequence.
        let flat: Vec<(Tensor, Tensor)> = views
            .iter()
            .map(|c| {
                let cat = |s: Option<&Tensor>, o: &Tensor, sl: usize, ol: usize| {
                    let mut parts = Vec::new();
                    if let Some(s) = s {
                        parts.push(s.narrow(2, 0, sl).unwrap());
                    }
                    parts.push(o.narrow(2, 0, ol).unwrap());
                    Tensor::cat(&parts, 2).unwrap()
                };
                let sl = c.shared.map_or(0, |s| s.len);
                (
                    cat(c.shared.map(|s| s.k), c.own.k, sl, c.own.len),
                    cat(c.shared.map(|s| s.v), c.own.v, sl, c.own.len),
                )
            })
            .collect();
        let flat_views: Vec<CacheView> = flat
            .iter()
            .zip(&views)
            .map(|((k, v), c)| CacheView::own(k, v, c.len()))
            .collect();
        let want = decode_attention(&q, &flat_views, heads, kv, 0.25).unwrap();
        let got = decode_attention(&q, &views, heads, kv, 0.25).unwrap();
        assert_eq!(max_abs(&got, &want), 0.0);
        let serial = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let got1 = serial.install(|| decode_attention(&q, &views, heads, kv, 0.25).unwrap());
        assert_eq!(max_abs(&got1, &want), 0.0);
        let f64s = |t: &Tensor| t.to_dtype(candle_core::DType::F64).unwrap();
        let (p64, o64) = (
            [f64s(&pk1), f64s(&pv1), f64s(&pk2), f64s(&pv2)],
            (0..b)
                .map(|i| (f64s(&ok[i]), f64s(&ov[i])))
                .collect::<Vec<_>>(),
        );
        let views64: Vec<CacheView> = (0..b)
            .map(|i| CacheView {
                shared: match prefix[i] {
                    Some(1) => Some(KvSpan {
                        k: &p64[0],
                        v: &p64[1],
                        len: 700,
                    }),
                    Some(_) => Some(KvSpan {
                        k: &p64[2],
                        v: &p64[3],
                        len: 40,
                    }),
                    None => None,
                },
                own: KvSpan {
                    k: &o64[i].0,
                    v: &o64[i].1,
                    len: own[i],
                },
            })
            .collect();
        let slow = decode_attention(&f64s(&q), &views64, heads, kv, 0.25).unwrap();
        assert!(max_abs(&slow.to_dtype(candle_core::DType::F32).unwrap(), &want) < 1e-5);
    }
}
