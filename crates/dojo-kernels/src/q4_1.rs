//! A SIMD Q4_1 matmul for decode.
//!
//! Why: the default model is Q4_1, and candle 0.11 has no SIMD dot product for it (only a scalar
//! loop), so decode either ran that loop or a Q8_0 copy of the weights that reads 1.7x the
//! bytes. This is llama.cpp's algorithm: each activation row is quantized to 8 bits in blocks
//! of 32 (scale `da`, sum `sa`), and a weight block (`d`, `m`, 32 four-bit values `q`) dots it
//! as `d * da * Σ q·qa + m * sa`, with AVX2 `maddubs` doing 32 multiply-adds at once. Used for
//! few-row calls (decode: one row per sequence of a batched decode step, the weights read once
//! for all of them); the engine's prefill goes through the dense GEMM (`dojo_engine::Model`).

use rayon::prelude::*;

/// Bytes of one GGUF Q4_1 block: f16 scale, f16 min, 16 bytes of packed nibbles.
pub const BLOCK_BYTES: usize = 20;
/// Values per block.
pub const BLOCK: usize = 32;

/// Whether the SIMD kernel runs: AVX2, FMA and F16C on this CPU (checked at run time, once),
/// unless `DOJO_ENGINE_Q4_1_KERNEL=0` (benchmarks compare with the Q8_0 fallback).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let enabled = std::env::var("DOJO_ENGINE_Q4_1_KERNEL").map_or(true, |v| v != "0");
        #[cfg(target_arch = "x86_64")]
        let cpu = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        let cpu = false;
        enabled && cpu
    })
}

/// One activation block quantized to 8 bits.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Q8Block {
    qs: [i8; BLOCK],
    d: f32,
    /// `d * Σ qs`: what the weight block's min multiplies.
    s: f32,
}

fn quantize_row(x: &[f32]) -> Vec<Q8Block> {
    x.chunks_exact(BLOCK)
        .map(|c| {
            let amax = c.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut qs = [0i8; BLOCK];
            let mut sum = 0i32;
            for (q, v) in qs.iter_mut().zip(c) {
                *q = (v * id).round() as i8;
                sum += *q as i32;
            }
            Q8Block {
                qs,
                d,
                s: d * sum as f32,
            }
        })
        .collect()
}

fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let man = (bits & 0x3ff) as u32;
    let v = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: renormalise.
            let mut e = 127 - 15 + 1;
            let mut m = man;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(v)
}

/// Portable reference of one row dot (tests, and CPUs without AVX2).
fn dot_scalar(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut acc = 0f32;
    for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        let m = f16_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
        let mut s = 0i32;
        for j in 0..16 {
            let q = blk[4 + j];
            s += (q & 0x0f) as i32 * ab.qs[j] as i32 + (q >> 4) as i32 * ab.qs[j + 16] as i32;
        }
        acc += d * ab.d * s as f32 + m * ab.s;
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(w: &[u8], a: &[Q8Block]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = 0f32;
    let low = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
        // SAFETY: `blk` holds BLOCK_BYTES bytes and `ab.qs` 32; unaligned loads.
        let (dm, qs, qa) = unsafe {
            (
                _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                    blk[0], blk[1], blk[2], blk[3],
                ]))),
                _mm_loadu_si128(blk.as_ptr().add(4) as *const __m128i),
                _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i),
            )
        };
        let d = _mm_cvtss_f32(dm);
        let m = _mm_cvtss_f32(_mm_shuffle_ps(dm, dm, 1));
        let lo = _mm_and_si128(qs, low);
        let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
        let q = _mm256_set_m128i(hi, lo);
        // u8 x i8 pairs summed to i16 (at most 2 * 15 * 128, no overflow), then to i32.
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qa), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc);
        acc_m += m * ab.s;
    }
    let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    _mm_cvtss_f32(h) + acc_m
}

/// [`dot_avx2`] of one weight row with four activation rows: each weight block is loaded and
/// unpacked once for the four (batched decode is compute-bound on that). Every row's
/// accumulator sees exactly the operations [`dot_avx2`] performs, so the results are
/// bit-identical to four separate calls.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4_avx2(w: &[u8], a: [&[Q8Block]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut acc_m = [0f32; 4];
    let low = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for (bi, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        // SAFETY: `blk` holds BLOCK_BYTES bytes; unaligned loads.
        let (dm, qs) = unsafe {
            (
                _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                    blk[0], blk[1], blk[2], blk[3],
                ]))),
                _mm_loadu_si128(blk.as_ptr().add(4) as *const __m128i),
            )
        };
        let d = _mm_cvtss_f32(dm);
        let m = _mm_cvtss_f32(_mm_shuffle_ps(dm, dm, 1));
        let lo = _mm_and_si128(qs, low);
        let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
        let q = _mm256_set_m128i(hi, lo);
        for r in 0..4 {
            let ab = &a[r][bi];
            // SAFETY: `ab.qs` holds 32 bytes; unaligned load.
            let qa = unsafe { _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i) };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qa), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[r]);
            acc_m[r] += m * ab.s;
        }
    }
    let mut out = [0f32; 4];
    for r in 0..4 {
        let h = _mm_add_ps(
            _mm256_castps256_ps128(acc[r]),
            _mm256_extractf128_ps(acc[r], 1),
        );
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        out[r] = _mm_cvtss_f32(h) + acc_m[r];
    }
    out
}

/// One weight row dotted with every activation row, into `out` (one value per row).
fn dot_rows(w: &[u8], a: &[Vec<Q8Block>], out: &mut [f32], simd: bool) {
    let mut r = 0;
    #[cfg(target_arch = "x86_64")]
    if simd {
        while r + 4 <= a.len() {
            // SAFETY: `simd` is only true when `available()` confirmed AVX2, FMA and F16C.
            let v = unsafe { dot4_avx2(w, [&a[r], &a[r + 1], &a[r + 2], &a[r + 3]]) };
            out[r..r + 4].copy_from_slice(&v);
            r += 4;
        }
    }
    for (v, ar) in out[r..].iter_mut().zip(&a[r..]) {
        *v = dot(w, ar, simd);
    }
}

fn dot(w: &[u8], a: &[Q8Block], simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when `available()` confirmed AVX2, FMA and F16C.
        return unsafe { dot_avx2(w, a) };
    }
    let _ = simd;
    dot_scalar(w, a)
}

/// `x (m, k) @ W^T` for a Q4_1 weight `w` of `n` rows of `k` values (GGUF layout); returns
/// `(m, n)` row-major. `k` must be a multiple of 32.
pub fn matmul(x: &[f32], m: usize, k: usize, w: &[u8], n: usize) -> Vec<f32> {
    matmul_with(x, m, k, w, n, available())
}

fn matmul_with(x: &[f32], m: usize, k: usize, w: &[u8], n: usize, simd: bool) -> Vec<f32> {
    let row_bytes = k / BLOCK * BLOCK_BYTES;
    debug_assert_eq!(x.len(), m * k);
    debug_assert_eq!(w.len(), n * row_bytes);
    if m == 0 {
        return Vec::new();
    }
    // Every activation row is quantized once; then each chunk of weight rows is dotted with
    // all of them while it is in cache, so a batch of `m` sequences reads the weights once
    // (batched decode) instead of `m` times. Each (row, weight row) dot is the same
    // computation whatever `m` is, so a row's result does not depend on the batch.
    let a: Vec<Vec<Q8Block>> = x.chunks_exact(k).map(quantize_row).collect();
    // Output transposed, `(n, m)`: a chunk of weight rows owns a contiguous slice of it.
    let mut out_t = vec![0f32; m * n];
    let rows = |o: &mut [f32], wc: &[u8]| {
        for (ov, wr) in o.chunks_exact_mut(m).zip(wc.chunks_exact(row_bytes)) {
            dot_rows(wr, &a, ov, simd);
        }
    };
    // With one thread, handing the work to rayon's worker costs two context switches per call
    // (measured: ~10 % of decode time); run it on the calling thread instead.
    if rayon::current_num_threads() > 1 {
        // Chunks of rows per task: enough work to amortise the scheduling.
        out_t
            .par_chunks_mut(64 * m)
            .zip(w.par_chunks(64 * row_bytes))
            .for_each(|(o, wc)| rows(o, wc));
    } else {
        rows(&mut out_t, w);
    }
    if m == 1 {
        return out_t;
    }
    let mut out = vec![0f32; m * n];
    for (j, col) in out_t.chunks_exact(m).enumerate() {
        for (r, v) in col.iter().enumerate() {
            out[r * n + j] = *v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    #[test]
    fn f16_conversion_matches_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0000), 0.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
    }

    #[test]
    fn q4_1_matmul_matches_the_dequantized_weights() {
        let (n, k, m) = (70, 128, 6);
        let wv: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let xv: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104729 % 997) as f32 / 498.0) - 1.0)
            .collect();
        let w = Tensor::from_vec(wv, (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
        let deq = q.dequantize(&Device::Cpu).unwrap();
        let x = Tensor::from_vec(xv.clone(), (m, k), &Device::Cpu).unwrap();
        let want: Vec<f32> = x
            .matmul(&deq.t().unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let bytes = q.data().unwrap();
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        for simd in [false, available()] {
            let got = matmul_with(&xv, m, k, &bytes, n, simd);
            for (g, w) in got.iter().zip(&want) {
                // Only the activations' 8-bit rounding separates the two.
                assert!((g - w).abs() <= 0.02 * scale, "simd {simd}: {g} vs {w}");
            }
        }
        if available() {
            let a = matmul_with(&xv, m, k, &bytes, n, true);
            let b = matmul_with(&xv, m, k, &bytes, n, false);
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-4 * scale.max(1.0), "{x} vs {y}");
            }
        }
        // A batch of rows gives each row exactly what it gets alone (batched decode relies on
        // it: a sequence's tokens must not depend on who shares its step).
        for simd in [false, available()] {
            let batch = matmul_with(&xv, m, k, &bytes, n, simd);
            for r in 0..m {
                let alone = matmul_with(&xv[r * k..(r + 1) * k], 1, k, &bytes, n, simd);
                assert_eq!(
                    &batch[r * n..(r + 1) * n],
                    &alone[..],
                    "simd {simd} row {r}"
                );
            }
        }
        assert!(matmul_with(&[], 0, k, &bytes, n, false).is_empty());
    }
}
