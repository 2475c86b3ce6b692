//! The attention of one decode step: each sequence's one new query against its own KV cache.
//!
//! Why a kernel: as candle ops this is four small ops per sequence and layer (a product with
//! the transposed cache, which candle's GEMM packs first; the scale; the softmax; the product
//! with the values), each a few microseconds of dispatch for a few thousand multiply-adds. Here
//! one parallel loop over (sequence, key/value head) pairs reads each cached key and value
//! once for the query heads that share it (grouped-query attention) and writes the output in
//! the layout the output projection takes. A task's result depends only on its own sequence,
//! so a sequence decodes the same whoever shares its step.

use candle_core::{D, Result, Tensor};
use rayon::prelude::*;

use crate::{fused, simd};

/// One sequence's cache for a layer: keys and values `(1, kv_heads, capacity, head_dim)`
/// (contiguous CPU f32), of which the first `len` positions are attended to.
pub struct CacheView<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub len: usize,
}

/// Below this many multiply-adds a step's attention runs on the calling thread (rayon's
/// hand-off costs more than it saves on short caches).
const PARALLEL_WORK: usize = 1 << 16;

/// `softmax(q·Kᵀ · scale) · V` for a batch of single queries: `q` is `(b, heads · head_dim)`,
/// `caches[i]` sequence `i`'s cache; query head `h` reads key/value head `h / (heads /
/// kv_heads)`. Returns `(b, heads · head_dim)`.
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
    if !(fused(q) && caches.iter().all(|c| fused(c.k) && fused(c.v))) {
        return by_ops(q, caches, kv_heads, rep, hd, scale);
    }
    let mut tensors = vec![q.clone()];
    for c in caches {
        let (one, h, cap, d) = c.k.dims4()?;
        if one != 1 || h != kv_heads || d != hd || c.v.dims4()? != (1, h, cap, d) || c.len > cap {
            candle_core::bail!(
                "decode_attention: cache {:?} / {:?} with {} positions does not fit \
                 {kv_heads} heads of {hd}",
                c.k.dims(),
                c.v.dims(),
                c.len
            );
        }
        tensors.push(c.k.clone());
        tensors.push(c.v.clone());
    }
    crate::with_all_values(&tensors, "decode_attention", |values| {
        let (qv, kvs) = values.split_first().expect("q is first");
        Ok(run(qv, kvs, caches, kv_heads, rep, hd, scale))
    })
    .and_then(|out| Tensor::from_vec(out, (b, width), q.device()))
}

/// [`decode_attention`] on the values: `qv` the queries, `kvs` each cache's keys then values.
fn run(
    qv: &[f32],
    kvs: &[&[f32]],
    caches: &[CacheView],
    kv_heads: usize,
    rep: usize,
    hd: usize,
    scale: f32,
) -> Vec<f32> {
    let work = caches.iter().map(|c| c.len).sum::<usize>() * rep * kv_heads * hd;
    let mut out = vec![0f32; qv.len()];
    // One task per (sequence, key/value head): its `rep` query heads are `rep · hd`
    // consecutive values of the query and of the output.
    let task = |t: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        let (i, g) = (t / kv_heads, t % kv_heads);
        let c = &caches[i];
        let cap = kvs[2 * i].len() / (kv_heads * hd);
        let span = g * cap * hd..(g * cap + c.len) * hd;
        let qs = &qv[t * rep * hd..(t + 1) * rep * hd];
        scores.resize(rep * c.len, 0.0);
        attend(
            qs,
            &kvs[2 * i][span.clone()],
            &kvs[2 * i + 1][span],
            hd,
            scale,
            scores,
            o,
        );
    };
    if work >= PARALLEL_WORK && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(rep * hd)
            .enumerate()
            .for_each_init(Vec::new, |scores, (t, o)| task(t, o, scores));
    } else {
        let mut scores = Vec::new();
        for (t, o) in out.chunks_mut(rep * hd).enumerate() {
            task(t, o, &mut scores);
        }
    }
    out
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
        let k = c.k.narrow(2, 0, c.len)?;
        let v = c.v.narrow(2, 0, c.len)?.contiguous()?;
        let att = (qi.matmul(&k.t()?)? * scale as f64)?;
        let att = att.broadcast_sub(&att.max_keepdim(D::Minus1)?)?.exp()?;
        let att = att.broadcast_div(&att.sum_keepdim(D::Minus1)?)?;
        outs.push(att.matmul(&v)?.reshape((1, kv_heads * rep * hd))?);
    }
    Tensor::cat(&outs, 0)
}

simd::avx2_twin!(
    /// [`attend_portable`], vectorised for AVX2 + FMA where the CPU has them.
    fn attend = attend_portable(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        hd: usize,
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32]
    )
);

/// `rep` query heads (`q`, `rep · hd`) against `len` keys and values (`k`, `v`, `len · hd`)
/// into `out` (`rep · hd`); `scores` holds `rep · len`. Each key is read once for all the
/// query heads that share it.
#[inline(always)]
fn attend_portable(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    hd: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let len = k.len() / hd;
    let rep = q.len() / hd;
    if len == 0 {
        out.fill(0.0);
        return;
    }
    for (j, kj) in k.chunks_exact(hd).enumerate() {
        for (r, qr) in q.chunks_exact(hd).enumerate() {
            scores[r * len + j] = simd::dot(qr, kj);
        }
    }
    for (row, o) in scores
        .chunks_exact_mut(len)
        .zip(out.chunks_exact_mut(hd))
        .take(rep)
    {
        // Not `softmax::softmax_row`: here the weights are normalised after the weighted sum
        // (one multiply per output value, not per key) and summed in key order. The results
        // differ in the last bits, enough that with `softmax_row` the default model's greedy
        // tokens left llama.cpp's at a near tie (third token of the engine benchmark's prompt).
        let m = simd::max_scaled(row, scale);
        let mut sum = 0f32;
        for s in row.iter_mut() {
            *s = simd::exp(*s * scale - m);
            sum += *s;
        }
        o.fill(0.0);
        for (p, vj) in row.iter().zip(v.chunks_exact(hd)) {
            for (od, vd) in o.iter_mut().zip(vj) {
                *od += p * vd;
            }
        }
        let inv = 1.0 / sum;
        for od in o.iter_mut() {
            *od *= inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{max_abs, rand};

    /// The kernel against candle's ops on each sequence alone (grouped heads, caches of
    /// different lengths and capacities, an empty one), in parallel and serially.
    #[test]
    fn matches_per_sequence_candle_attention() {
        let (heads, kv, hd) = (6, 2, 16);
        let rep = heads / kv;
        for lens in [vec![5usize, 1, 9], vec![700, 300]] {
            let b = lens.len();
            let q = rand(&[b, heads * hd], 1);
            let kc: Vec<Tensor> = (0..b)
                .map(|i| rand(&[1, kv, lens[i] + 3, hd], 10 + i as u64))
                .collect();
            let vc: Vec<Tensor> = (0..b)
                .map(|i| rand(&[1, kv, lens[i] + 3, hd], 20 + i as u64))
                .collect();
            let views: Vec<CacheView> = (0..b)
                .map(|i| CacheView {
                    k: &kc[i],
                    v: &vc[i],
                    len: lens[i],
                })
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
        let view = |k, v| [CacheView { k, v, len: 7 }];
        let fast = decode_attention(&q, &view(&k, &v), heads, kv, 0.3).unwrap();
        let (k64, v64) = (f64s(&k), f64s(&v));
        let slow = decode_attention(&f64s(&q), &view(&k64, &v64), heads, kv, 0.3).unwrap();
        let slow = slow.to_dtype(candle_core::DType::F32).unwrap();
        assert!(max_abs(&fast, &slow) < 1e-5);
        let k = rand(&[1, kv, 4, hd], 3);
        let bad = [CacheView {
            k: &k,
            v: &k,
            len: 5,
        }];
        assert!(decode_attention(&rand(&[1, heads * hd], 4), &bad, heads, kv, 1.0).is_err());
    }
}
