//! What the kernels need to vectorise: a run-time check for AVX2 + FMA (the build targets
//! baseline x86-64, so kernels are compiled twice and the AVX2 twin is chosen per CPU), and an
//! `exp` the compiler can vectorise.

/// Whether this CPU has AVX2 and FMA (checked once; false off x86-64).
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Defines `$best`, which runs `$portable` compiled for AVX2 + FMA when this CPU has them
/// ([`avx2`]) and as built otherwise: the portable body is `#[inline(always)]`, so the twin is
/// the same code vectorised for the wider registers.
macro_rules! avx2_twin {
    ($(#[$meta:meta])* fn $best:ident = $portable:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        $(#[$meta])*
        fn $best($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn twin($($arg: $ty),*) $(-> $ret)? {
                    $portable($($arg),*)
                }
                if crate::simd::avx2() {
                    // SAFETY: `simd::avx2()` checked that this CPU has AVX2 and FMA.
                    return unsafe { twin($($arg),*) };
                }
            }
            $portable($($arg),*)
        }
    };
}
pub(crate) use avx2_twin;

/// `max(x · scale)` over a row, in eight independent lanes so that the compiler vectorises it
/// (`f32::max`'s NaN rules and a single running value are serial).
#[inline(always)]
pub(crate) fn max_scaled(x: &[f32], scale: f32) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder().iter().map(|v| v * scale);
    for c in chunks {
        for i in 0..8 {
            let v = c[i] * scale;
            m[i] = if v > m[i] { v } else { m[i] };
        }
    }
    m.into_iter().chain(tail).fold(f32::NEG_INFINITY, f32::max)
}

/// `Σ a·b` in eight independent lanes, so that the compiler vectorises it (a single running sum
/// is a serial chain it must not reorder); the tail past a multiple of eight is added last.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `e^x` for f32 in straight-line arithmetic (Cephes' `expf`: `x = k·ln 2 + r` with `k`
/// rounded to nearest, `e^r` by a degree-6 polynomial on `|r| ≤ ln 2 / 2`, `2^k` built in the
/// exponent bits), so a loop of it vectorises where libm's `expf` is a call per element.
/// Relative error about 2e-7 over the range; inputs below −87.3 give about 1e-38 (not 0),
/// above 88.7 the largest exponent.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so that `k · LN2_HI` is exact (Cody and Waite).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer without a call.
    const ROUND: f32 = 12_582_912.0;
    // Comparisons rather than `clamp`/`max`, whose NaN rules stop vectorisation.
    let x = if x < -87.3 { -87.3 } else { x };
    let x = if x > 88.7 { 88.7 } else { x };
    let kr = x * LOG2E + ROUND;
    let k = kr - ROUND;
    // The integer `k` sits in `kr`'s low mantissa bits: read it there, since a float-to-int
    // `as` cast checks for NaN and saturates, which does not vectorise.
    let ki = kr.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    er * f32::from_bits((ki.wrapping_add(127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_matches_libm_within_a_few_ulp() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (super::exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(super::exp(0.0), 1.0);
        assert!(super::exp(-1000.0) < 1e-37 && super::exp(-1000.0) >= 0.0);
    }
}
