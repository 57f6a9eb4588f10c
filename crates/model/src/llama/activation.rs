//! The feed-forward activations on host buffers, in loops the compiler vectorizes: `exp` is
//! written out (Cephes' `expf`: a range reduction by ln 2 in two parts and a degree-6
//! polynomial, no branches, no library call), and GELU's `0.5 (1 + tanh z)` is computed as the
//! equal `1 / (1 + exp(-2z))`, so both activations are one `exp` and one division per value.
//! The arithmetic is the same whatever the SIMD level (Rust does not fuse multiplies and adds),
//! so the logits do not depend on it.

use super::FfnActivation;

/// `exp(x)` within 2 ulp of the correctly rounded value for `x` in `[-87.3, 88.3]`; below it
/// the value at -87.3 (about 1.2e-38, where the true value is subnormal or 0), above it the
/// value at 88.3 (about 2.2e38); NaN stays NaN.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    // n = round(x / ln 2); r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2].
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = (((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5)
        * r
        * r
        + r
        + 1.0;
    // 2^n for n in [-126, 127]: the exponent bits.
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `sqrt(2 / pi)`, as Burn's `gelu_approximate` computes it.
const SQRT_2_OVER_PI: f32 =
    (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;

/// The activation of every value of `x`, in place: SiLU `x / (1 + exp(-x))`, or GELU's tanh
/// form `x (1 + tanh z) / 2 = x / (1 + exp(-2z))`, `z = sqrt(2 / pi) (x + 0.044715 x^3)`.
pub(super) fn activate(activation: FfnActivation, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { activate_avx512(activation, x) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { activate_avx2(activation, x) };
    }
    activate_body(activation, x)
}

/// [`activate`] compiled for AVX-512 (sixteen values per instruction; the same arithmetic:
/// Gemma-3's GeGLU over a 512-token prefill's `[512, 2048]` gate was 3.6% of a two-thread
/// pp512 in eight lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn activate_avx512(activation: FfnActivation, x: &mut [f32]) {
    activate_body(activation, x)
}

/// [`activate`] compiled for AVX2 (eight values per instruction; the same arithmetic).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn activate_avx2(activation: FfnActivation, x: &mut [f32]) {
    activate_body(activation, x)
}

#[inline(always)]
fn activate_body(activation: FfnActivation, x: &mut [f32]) {
    match activation {
        FfnActivation::Silu => {
            for g in x.iter_mut() {
                *g /= 1.0 + exp(-*g);
            }
        }
        FfnActivation::GeluTanh => {
            for g in x.iter_mut() {
                let v = *g;
                let inner = (v + v * v * v * 0.044715) * SQRT_2_OVER_PI;
                *g = v / (1.0 + exp(-2.0 * inner));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_f64_value() {
        let mut worst = 0;
        let mut x = -87.3f32;
        while x < 88.3 {
            let want = f64::from(x).exp() as f32;
            worst = worst.max(ulps(exp(x), want));
            x += 0.000_73;
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(-1000.0) < 1.3e-38 && exp(-1000.0) > 0.0);
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    fn activations_match_their_f64_definitions() {
        let xs: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.005).collect();
        for activation in [FfnActivation::Silu, FfnActivation::GeluTanh] {
            let mut got = xs.clone();
            activate(activation, &mut got);
            let mut plain = xs.clone();
            activate_body(activation, &mut plain);
            assert_eq!(
                got, plain,
                "{activation:?}: the SIMD and plain loops agree bit for bit"
            );
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                let mut avx2 = xs.clone();
                // SAFETY: the CPU has the features the function is compiled for.
                unsafe { activate_avx2(activation, &mut avx2) };
                assert_eq!(
                    avx2, plain,
                    "{activation:?}: AVX2 and plain agree bit for bit"
                );
            }
            for (&x, &g) in xs.iter().zip(&got) {
                let x64 = f64::from(x);
                // The exponent's argument `a`: its f32 rounding moves `exp(a)` by `|a|`
                // times it, on top of the two ulp of `exp` and the division's one.
                let (want, a) = match activation {
                    FfnActivation::Silu => (x64 / (1.0 + (-x64).exp()), x64),
                    FfnActivation::GeluTanh => {
                        let z = (2.0 / std::f64::consts::PI).sqrt()
                            * (x64 + 0.044715 * x64 * x64 * x64);
                        // `0.5 x (1 + tanh z)` in f64 loses everything to cancellation
                        // for very negative x; this equal form does not.
                        (x64 / (1.0 + (-2.0 * z).exp()), 2.0 * z)
                    }
                };
                let bound = f64::from(f32::EPSILON) * (4.0 + 2.0 * a.abs()) * want.abs();
                let err = (f64::from(g) - want).abs();
                assert!(
                    err <= bound + 1e-30,
                    "{activation:?}({x}) = {g}, want {want}"
                );
            }
        }
    }
}
