//! Few-row matmuls on GGUF-quantized weights: what [`crate::q4_1`] and [`crate::q8_0`] share.
//!
//! llama.cpp's scheme: each activation row is quantized to 8 bits in blocks of 32 (scale `d`,
//! and `d · Σ q` for formats with a min), then every weight block is dotted with it in integer
//! arithmetic (AVX2 `maddubs`, 32 multiply-adds at once). A format supplies its block size and
//! the dot of one weight row with one or four activation rows; the driver here quantizes the
//! activations once, walks the weight rows in chunks over rayon's pool, and dots each row with
//! every activation row while it is in cache, so a batch of `m` sequences reads the weights
//! once per decode step instead of `m` times.

use rayon::prelude::*;

/// Values per block, in every format here.
pub const BLOCK: usize = 32;

/// One activation block quantized to 8 bits.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Q8Block {
    pub(crate) qs: [i8; BLOCK],
    pub(crate) d: f32,
    /// `d * Σ qs`: what a weight block's min multiplies (Q4_1).
    pub(crate) s: f32,
}

/// A weight format: its block size in bytes, its dequantization and its row dots. The AVX2
/// dots may only be called where [`cpu_has_avx2`] holds; `dot4_avx2` must give each row exactly
/// what `dot_avx2` gives it (batched decode relies on it: a sequence's tokens must not depend
/// on who shares its step).
pub(crate) trait Format {
    const BLOCK_BYTES: usize;
    /// One block's 32 values as f32.
    fn dequantize_block(blk: &[u8], out: &mut [f32]);
    /// Portable reference of one row dot (tests, and CPUs without AVX2).
    fn dot_scalar(w: &[u8], a: &[Q8Block]) -> f32;
    /// # Safety
    /// The CPU has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn dot_avx2(w: &[u8], a: &[Q8Block]) -> f32;
    /// One weight row with four activation rows, the weight read once.
    /// # Safety
    /// As [`Format::dot_avx2`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn dot4_avx2(w: &[u8], a: [&[Q8Block]; 4]) -> [f32; 4];
}

/// A format module's public entry points: `available()` (the SIMD kernel runs: AVX2, FMA and
/// F16C on this CPU, checked once, unless the environment variable `$var` is `0`, which
/// benchmarks use to compare with the fallback), `matmul` and `dequantize`.
macro_rules! entry_points {
    ($format:ident, $var:literal) => {
        /// Whether the SIMD kernel runs: AVX2, FMA and F16C on this CPU (checked at run time,
        /// once), unless
        #[doc = concat!("`", $var, "=0`")]
        /// (benchmarks compare with the fallback).
        pub fn available() -> bool {
            static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *ON.get_or_init(|| $crate::quant::enabled($var) && $crate::quant::cpu_has_avx2())
        }

        /// `x (m, k) @ W^T` for a weight `w` of `n` rows of `k` values in this format (GGUF
        /// layout); returns `(m, n)` row-major. `k` must be a multiple of 32.
        pub fn matmul(x: &[f32], m: usize, k: usize, w: &[u8], n: usize) -> Vec<f32> {
            $crate::quant::matmul_with::<$format>(x, m, k, w, n, available())
        }

        /// Every value of a weight in this format as f32, row-major, split over rayon's pool
        /// (for a prefill chunk long enough for the dense GEMM; candle's is one thread).
        pub fn dequantize(w: &[u8]) -> Vec<f32> {
            $crate::quant::dequantize::<$format>(w)
        }
    };
}
pub(crate) use entry_points;

/// Whether the CPU runs the AVX2 kernels (AVX2, FMA and F16C; checked at run time, once).
pub(crate) fn cpu_has_avx2() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        return std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether the environment variable `var` leaves a kernel on (anything but `0`).
pub(crate) fn enabled(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v != "0")
}

pub(crate) fn quantize_row(x: &[f32]) -> Vec<Q8Block> {
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

pub(crate) fn f16_to_f32(bits: u16) -> f32 {
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

/// The horizontal sum of eight lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(acc: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    _mm_cvtss_f32(h)
}

/// One weight row dotted with every activation row, into `out` (one value per row); `simd`
/// only where [`cpu_has_avx2`] holds.
fn dot_rows<F: Format>(w: &[u8], a: &[Vec<Q8Block>], out: &mut [f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        for (o, r) in out.chunks_exact_mut(4).zip(a.chunks_exact(4)) {
            // SAFETY: `simd` is only true where the CPU has AVX2, FMA and F16C.
            o.copy_from_slice(&unsafe { F::dot4_avx2(w, [&r[0], &r[1], &r[2], &r[3]]) });
        }
        let done = a.len() / 4 * 4;
        for (v, ar) in out[done..].iter_mut().zip(&a[done..]) {
            // SAFETY: as above.
            *v = unsafe { F::dot_avx2(w, ar) };
        }
        return;
    }
    let _ = simd;
    for (v, ar) in out.iter_mut().zip(a) {
        *v = F::dot_scalar(w, ar);
    }
}

/// `x (m, k) @ W^T` for a weight `w` of `n` rows of `k` values in format `F` (GGUF layout);
/// returns `(m, n)` row-major. `k` must be a multiple of 32.
pub(crate) fn matmul_with<F: Format>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    n: usize,
    simd: bool,
) -> Vec<f32> {
    let row_bytes = k / BLOCK * F::BLOCK_BYTES;
    debug_assert_eq!(x.len(), m * k);
    debug_assert_eq!(w.len(), n * row_bytes);
    if m == 0 {
        return Vec::new();
    }
    // Each (row, weight row) dot is the same computation whatever `m` is, so a row's result
    // does not depend on the batch.
    let a: Vec<Vec<Q8Block>> = x.chunks_exact(k).map(quantize_row).collect();
    // Output transposed, `(n, m)`: a chunk of weight rows owns a contiguous slice of it.
    let mut out_t = vec![0f32; m * n];
    let rows = |o: &mut [f32], wc: &[u8]| {
        for (ov, wr) in o.chunks_exact_mut(m).zip(wc.chunks_exact(row_bytes)) {
            dot_rows::<F>(wr, &a, ov, simd);
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

/// Every value of a weight in format `F` as f32, row-major (`w` whole blocks), split over
/// rayon's pool. For a prefill chunk long enough that the dense GEMM beats the quantized
/// kernel: candle's dequantization is a scalar loop on one thread (about 200 ms for the
/// default model's layers here), this one is vectorised and parallel.
pub(crate) fn dequantize<F: Format>(w: &[u8]) -> Vec<f32> {
    let blocks = w.len() / F::BLOCK_BYTES;
    let mut out = vec![0f32; blocks * BLOCK];
    // Chunks of 256 blocks (32 KiB out) per task.
    out.par_chunks_mut(256 * BLOCK)
        .zip(w.par_chunks(256 * F::BLOCK_BYTES))
        .for_each(|(o, wc)| {
            for (ob, blk) in o
                .chunks_exact_mut(BLOCK)
                .zip(wc.chunks_exact(F::BLOCK_BYTES))
            {
                F::dequantize_block(blk, ob);
            }
        });
    out
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// `F`'s matmul against candle's product with the dequantized weight (scalar and SIMD),
    /// SIMD against scalar, and every row of a batch against the same row alone.
    pub(crate) fn check_format<F: Format>(dtype: GgmlDType) {
        let (n, k, m) = (70, 128, 6);
        let wv: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let xv: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104729 % 997) as f32 / 498.0) - 1.0)
            .collect();
        let w = Tensor::from_vec(wv, (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
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
        let simd = cpu_has_avx2();
        for s in [false, simd] {
            let got = matmul_with::<F>(&xv, m, k, &bytes, n, s);
            for (g, w) in got.iter().zip(&want) {
                // Only the activations' 8-bit rounding separates the two.
                assert!((g - w).abs() <= 0.02 * scale, "simd {s}: {g} vs {w}");
            }
        }
        if simd {
            let a = matmul_with::<F>(&xv, m, k, &bytes, n, true);
            let b = matmul_with::<F>(&xv, m, k, &bytes, n, false);
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-4 * scale.max(1.0), "{x} vs {y}");
            }
        }
        for s in [false, simd] {
            let batch = matmul_with::<F>(&xv, m, k, &bytes, n, s);
            for r in 0..m {
                let alone = matmul_with::<F>(&xv[r * k..(r + 1) * k], 1, k, &bytes, n, s);
                assert_eq!(&batch[r * n..(r + 1) * n], &alone[..], "simd {s} row {r}");
            }
        }
        assert!(matmul_with::<F>(&[], 0, k, &bytes, n, false).is_empty());
        // Dequantization agrees with candle's to the bit.
        let mine = dequantize::<F>(&bytes);
        let theirs: Vec<f32> = deq.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(mine, theirs);
    }
}
