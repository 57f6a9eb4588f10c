//! The weights of a categorical draw, `exp(logit - max)` in `f64`, computed without libm's
//! `exp`: a polynomial `exp` written so that it runs in vector lanes (the row's pass is
//! compiled for the widest vectors the CPU has, the same operations in the same order at every
//! width, so the same bits) and gives the same bits on every platform, which a libm call does
//! not promise: its multiply-adds are fused (`mul_add`, rounded once as IEEE 754 defines it,
//! an instruction where the CPU has FMA and libm's `fma` elsewhere). Within two units in the
//! last place of the exact value (the test checks it against `f64::exp`); where libm's `exp`
//! took 78% of a draw from 49,152 logits. The fused polynomial took a draw from the whole row
//! from 84 to 61 us (49,152 logits) and 466 to 346 us (262,144; criterion `untruncated draw`,
//! Zen 4).

/// `exp(x)` for `x <= 0` (not NaN; `-inf` gives 0): `2^n * p(r)` with `x = n ln2 + r`, `|r|
/// <= ln2 / 2` (Cody and Waite's two-part `ln2`), `p` the Taylor polynomial of degree 13
/// (its truncation error below 1e-17 there) by Horner's rule in fused multiply-adds, and `2^n`
/// applied in two exact steps so that a result below the normal range rounds once, as a
/// subnormal. Arguments below -746 (where `exp` rounds to 0) are taken as -746. Every weight
/// goes through [`row_weights`]' pass, compiled with FMA where the CPU has it (elsewhere
/// `mul_add` is libm's `fma`: slower, the same bits).
#[inline(always)]
fn exp_nonpositive(x: f64) -> f64 {
    // ln 2 in two parts: `n * LN2_HI` is exact for |n| < 2^11 (LN2_HI's low bits are zero).
    const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    // 1.5 * 2^52: adding it rounds to an integer, which lands in the low mantissa bits.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    const TWO_M512: f64 = f64::from_bits((1023 - 512) << 52);
    let x = x.max(-746.0);
    let t = x * std::f64::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = INV_FACTORIAL[13];
    for k in (0..13).rev() {
        p = p.mul_add(r, INV_FACTORIAL[k]);
    }
    // 2^(n + 512) from the integer in t's mantissa (n >= -1076, so a normal number), then
    // 2^-512: the first product is exact, the second rounds only a subnormal result.
    let bits = t
        .to_bits()
        .wrapping_sub(ROUND.to_bits())
        .wrapping_add(1023 + 512);
    p * f64::from_bits(bits << 52) * TWO_M512
}

/// `1 / k!` for `k` in `0..=13`.
const INV_FACTORIAL: [f64; 14] = {
    let mut out = [1.0f64; 14];
    let mut k = 1;
    let mut fact = 1.0f64;
    while k < 14 {
        fact *= k as f64;
        out[k] = 1.0 / fact;
        k += 1;
    }
    out
};

/// `out[i] = exp(row[i] - max)` (0 for `-inf`), for a row of finite or `-inf` logits whose
/// largest is `max` (finite), at the widest vectors the CPU has.
pub(crate) fn row_weights(row: &[f32], max: f32, out: &mut Vec<f64>) {
    // Every entry is written below: a buffer of the row's length (the last token's) is kept
    // as it is rather than cleared (2 MB of zeros for Gemma-3's vocabulary).
    if out.len() != row.len() {
        out.clear();
        out.resize(row.len(), 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,fma")]
        fn avx512(row: &[f32], max: f32, out: &mut [f64]) {
            weights_lanes(row, max, out)
        }
        // FMA beside AVX2: the polynomial's `mul_add` is one instruction.
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &[f32], max: f32, out: &mut [f64]) {
            weights_lanes(row, max, out)
        }
        let fma = std::arch::is_x86_feature_detected!("fma");
        if fma && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F and FMA (checked just above).
            return unsafe { avx512(row, max, out) };
        }
        if fma && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { avx2(row, max, out) };
        }
    }
    weights_lanes(row, max, out)
}

/// [`row_weights`]' pass: one [`exp_nonpositive`] a value, with nothing carried between
/// them, so that it vectorises.
#[inline(always)]
fn weights_lanes(row: &[f32], max: f32, out: &mut [f64]) {
    let max = f64::from(max);
    for (w, &l) in out.iter_mut().zip(row) {
        *w = exp_nonpositive(f64::from(l) - max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place between `got` and `want` (both finite, non-negative).
    fn ulps(got: f64, want: f64) -> u64 {
        got.to_bits().abs_diff(want.to_bits())
    }

    /// Within two units in the last place of libm's `exp` over the whole range, 0 where `exp`
    /// is, 1 at 0, and every subnormal result within one unit of its size.
    #[test]
    fn exp_is_within_two_ulps_of_libm() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut worst = 0;
        for i in 0..2_000_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Uniform over [-746, 0], and densely near 0 and near the subnormal range.
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let x = match i % 3 {
                0 => -746.0 * u,
                1 => -u,
                _ => -708.0 - 38.0 * u,
            };
            let (got, want) = (exp_nonpositive(x), x.exp());
            if want < f64::MIN_POSITIVE {
                assert!(
                    (got - want).abs() <= 5e-324,
                    "exp({x}) = {got}, want {want}"
                );
            } else {
                let d = ulps(got, want);
                assert!(d <= 2, "exp({x}) = {got:e}, want {want:e}: {d} ulps");
                worst = worst.max(d);
            }
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        assert_eq!(exp_nonpositive(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-746.0), 0.0);
        assert_eq!(exp_nonpositive(-1e300), 0.0);
        assert!(worst <= 2, "{worst}");
    }

    /// Every vector width gives the portable pass's bits.
    #[test]
    fn row_weights_have_the_same_bits_at_every_width() {
        let row: Vec<f32> = (0..49_157)
            .map(|i| match i % 97 {
                0 => f32::NEG_INFINITY,
                k => ((i * 7919) % 4001) as f32 / 97.0 - 20.0 - k as f32,
            })
            .collect();
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut wide = Vec::new();
        row_weights(&row, max, &mut wide);
        let mut portable = vec![0.0; row.len()];
        weights_lanes(&row, max, &mut portable);
        assert_eq!(wide.len(), row.len());
        for (i, (a, b)) in wide.iter().zip(&portable).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "value {i}");
        }
        assert_eq!(wide[0], 0.0);
    }
}
