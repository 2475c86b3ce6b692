//! A SIMD Q4_1 matmul for decode.
//!
//! Why: the default model is Q4_1, and candle 0.11 has no SIMD dot product for it (only a scalar
//! loop), so decode either ran that loop or a Q8_0 copy of the weights that reads 1.7x the
//! bytes. A weight block (`d`, `m`, 32 four-bit values `q`) dots an 8-bit activation block
//! (`da`, `sa = da · Σ qa`) as `d * da * Σ q·qa + m * sa` (llama.cpp's algorithm; the driver
//! is `quant`). Used for few-row calls (decode: one row per sequence of a batched
//! decode step, the weights read once for all of them); the engine's prefill goes through the
//! dense GEMM (`dojo_engine::Model`).

use crate::quant::{self, BLOCK, Format, Q8Block, f16_to_f32};

/// Bytes of one GGUF Q4_1 block: f16 scale, f16 min, 16 bytes of packed nibbles.
pub const BLOCK_BYTES: usize = 20;

quant::entry_points!(Q4_1, "DOJO_ENGINE_Q4_1_KERNEL");

pub(crate) struct Q4_1;

impl Format for Q4_1 {
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    fn dequantize_block(blk: &[u8], out: &mut [f32]) {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        let m = f16_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
        let (lo, hi) = out.split_at_mut(BLOCK / 2);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&blk[4..BLOCK_BYTES]) {
            *l = (q & 0x0f) as f32 * d + m;
            *h = (q >> 4) as f32 * d + m;
        }
    }

    /// Portable reference of one row dot (tests, and CPUs without AVX2).
    fn dot_scalar(w: &[u8], a: &[Q8Block]) -> f32 {
        let mut acc = 0f32;
        for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
            let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            let m = f16_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
            let mut s = 0i32;
            for j in 0..BLOCK / 2 {
                let q = blk[4 + j];
                s += (q & 0x0f) as i32 * ab.qs[j] as i32
                    + (q >> 4) as i32 * ab.qs[j + BLOCK / 2] as i32;
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
        let ones = _mm256_set1_epi16(1);
        for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
            let (d, m, q) = unpack(blk);
            // SAFETY: `ab.qs` holds 32 bytes; unaligned load.
            let qa = unsafe { _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i) };
            // u8 x i8 pairs summed to i16 (at most 2 * 15 * 128, no overflow), then to i32.
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qa), ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc);
            acc_m += m * ab.s;
        }
        quant::hsum(acc) + acc_m
    }

    /// [`Self::dot_avx2`] of one weight row with four activation rows: each weight block is loaded and
    /// unpacked once for the four (batched decode is compute-bound on that). Every row's
    /// accumulator sees exactly the operations [`Self::dot_avx2`] performs, so the results are
    /// bit-identical to four separate calls.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot4_avx2(w: &[u8], a: [&[Q8Block]; 4]) -> [f32; 4] {
        use std::arch::x86_64::*;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut acc_m = [0f32; 4];
        let ones = _mm256_set1_epi16(1);
        for (bi, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
            let (d, m, q) = unpack(blk);
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
            out[r] = quant::hsum(acc[r]) + acc_m[r];
        }
        out
    }
}

/// A block's scale and min, and its 32 four-bit values as bytes (low nibbles, then high).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack(blk: &[u8]) -> (f32, f32, std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    assert!(blk.len() >= BLOCK_BYTES);
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
        blk[0], blk[1], blk[2], blk[3],
    ])));
    // SAFETY: `blk` holds BLOCK_BYTES bytes (checked above); unaligned load of bytes 4..20.
    let qs = unsafe { _mm_loadu_si128(blk.as_ptr().add(4) as *const __m128i) };
    let low = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(qs, low);
    let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
    (
        _mm_cvtss_f32(dm),
        _mm_cvtss_f32(_mm_shuffle_ps(dm, dm, 1)),
        _mm256_set_m128i(hi, lo),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn q4_1_matmul_matches_the_dequantized_weights() {
        crate::quant::tests::check_format::<super::Q4_1>(candle_core::quantized::GgmlDType::Q4_1);
    }
}
