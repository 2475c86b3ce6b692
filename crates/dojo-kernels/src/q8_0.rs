//! A SIMD Q8_0 matmul for decode: the quantization GGUF files use for the output head (the
//! default model's 49,152 × 576 `lm_head`, a fifth of its weights).
//!
//! Why not candle's: its Q8_0 product dots every activation row with every weight row on its
//! own, so a batched decode step of `m` sequences reads the head `m` times, and it runs on
//! candle's own thread pool beside the engine's (four threads on two cores). Here the
//! `quant` driver reads each weight row once for four activation rows. A block is an
//! f16 scale and 32 signed bytes; its dot with an 8-bit activation block is
//! `d · da · Σ q·qa` (AVX2: `maddubs` on |q| and qa carrying q's sign, as llama.cpp).

use crate::quant::{self, BLOCK, Format, Q8Block, f16_to_f32};

/// Bytes of one GGUF Q8_0 block: f16 scale, 32 signed bytes.
pub const BLOCK_BYTES: usize = 34;

quant::entry_points!(Q8_0, "DOJO_ENGINE_Q8_0_KERNEL");

pub(crate) struct Q8_0;

impl Format for Q8_0 {
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    fn dequantize_block(blk: &[u8], out: &mut [f32]) {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        for (o, &q) in out.iter_mut().zip(&blk[2..BLOCK_BYTES]) {
            *o = q as i8 as f32 * d;
        }
    }

    /// Portable reference of one row dot (tests, and CPUs without AVX2).
    fn dot_scalar(w: &[u8], a: &[Q8Block]) -> f32 {
        let mut acc = 0f32;
        for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
            let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            let s: i32 = blk[2..2 + BLOCK]
                .iter()
                .zip(&ab.qs)
                .map(|(&q, &qa)| q as i8 as i32 * qa as i32)
                .sum();
            acc += d * ab.d * s as f32;
        }
        acc
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(w: &[u8], a: &[Q8Block]) -> f32 {
        use std::arch::x86_64::*;
        let mut acc = _mm256_setzero_ps();
        for (blk, ab) in w.chunks_exact(BLOCK_BYTES).zip(a) {
            let (d, q) = load(blk);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), block_dot(q, ab), acc);
        }
        quant::hsum(acc)
    }

    /// [`Self::dot_avx2`] of one weight row with four activation rows, each block loaded once; each
    /// row's accumulator sees exactly [`Self::dot_avx2`]'s operations (bit-identical results).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot4_avx2(w: &[u8], a: [&[Q8Block]; 4]) -> [f32; 4] {
        use std::arch::x86_64::*;
        let mut acc = [_mm256_setzero_ps(); 4];
        for (bi, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
            let (d, q) = load(blk);
            for r in 0..4 {
                let ab = &a[r][bi];
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), block_dot(q, ab), acc[r]);
            }
        }
        acc.map(|v| quant::hsum(v))
    }
}

/// A block's scale and its 32 signed values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn load(blk: &[u8]) -> (f32, std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    assert!(blk.len() >= BLOCK_BYTES);
    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
        u16::from_le_bytes([blk[0], blk[1]]) as i32,
    )));
    // SAFETY: `blk` holds BLOCK_BYTES bytes (checked above); unaligned load of bytes 2..34.
    let q = unsafe { _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i) };
    (d, q)
}

/// `Σ q·qa` over a block as eight i32 lanes, as floats: `maddubs` takes an unsigned and a
/// signed operand, so it multiplies |q| by qa carrying q's sign (pairs sum to at most
/// 2 · 127 · 127 in i16: activations are quantized to ±127).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_dot(q: std::arch::x86_64::__m256i, ab: &Q8Block) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: `ab.qs` holds 32 bytes; unaligned load.
    let qa = unsafe { _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i) };
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(qa, q));
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn q8_0_matmul_matches_the_dequantized_weights() {
        crate::quant::tests::check_format::<super::Q8_0>(candle_core::quantized::GgmlDType::Q8_0);
    }
}
