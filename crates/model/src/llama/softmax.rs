//! The host attention's softmax and its exponential (a leaf of `host_attend.rs`).
//!
//! The exponential is kindle's own, [`exp`]: the algorithm of glibc's `expf` as its FMA build
//! (`__expf_fma`, from Arm's optimized routines) computes it, operation for operation (a
//! 32-entry table of `2^(i/32)`, a cubic in `f64`, the same fused multiply-adds), so it has
//! the bits of `f32::exp` on glibc x86-64 machines with FMA (tested) and the same bits on
//! every machine and in every path: the portable loop and the AVX-512 form (sixteen values
//! a call, eight `f64` lanes a vector) agree bit for bit. Its error is below 0.502 ulp.

/// `2^(i/32)` as `f64` bits, less `i << 47` (glibc's `__exp2f_data.tab`).
const TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `32 / ln 2`.
const INV_LN2_N: u64 = 0x40471547652b82fe;
/// `1.5 * 2^52`: adding it rounds to an integer, which then sits in the low bits.
const SHIFT: u64 = 0x4338000000000000;
/// The cubic's coefficients, scaled for `r = 32 x / ln 2 - k`.
const C0: u64 = 0x3ebc6af84b912394;
const C1: u64 = 0x3f2ebfce50fac4f3;
const C2: u64 = 0x3f962e42ff0c52d6;

/// Whether `x` takes the main path: `|x| < 88` (the bits' top twelve, sign dropped, at most
/// `0x42a`), NaN excluded.
#[inline(always)]
fn main_path(x: f32) -> bool {
    (x.to_bits() >> 20) & 0x7ff <= 0x42a
}

/// `e^x`, rounded as glibc's `expf` rounds it (see the module docs).
#[inline]
pub(super) fn exp(x: f32) -> f32 {
    if main_path(x) {
        exp_main(x)
    } else {
        exp_edge(x)
    }
}

/// [`exp`]'s main arithmetic: `x * 32 / ln 2 = k + r` with an integer `k` and `|r| <= 1/2`,
/// `e^x = 2^(k/32) * 2^(r/32)`, the first factor from the table and the exponent bits, the
/// second a cubic in `r`.
#[inline(always)]
fn exp_main(x: f32) -> f32 {
    let xd = f64::from(x);
    let inv = f64::from_bits(INV_LN2_N);
    let shift = f64::from_bits(SHIFT);
    let z = inv.mul_add(xd, shift);
    let ki = z.to_bits();
    let kd = z - shift;
    let r = inv.mul_add(xd, -kd);
    let t = TABLE[(ki % 32) as usize].wrapping_add(ki << 47);
    let s = f64::from_bits(t);
    let z = r.mul_add(f64::from_bits(C0), f64::from_bits(C1));
    let r2 = r * r;
    let y = r.mul_add(f64::from_bits(C2), 1.0);
    let y = z.mul_add(r2, y);
    (y * s) as f32
}

/// [`exp`] off its main path (`|x| >= 88`, infinities, NaN), as glibc's `expf`.
#[cold]
fn exp_edge(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        0.0
    } else if x.is_nan() || x == f32::INFINITY {
        x + x
    } else if x > f32::from_bits(0x42b17217) {
        // Past log(2^128).
        f32::INFINITY
    } else if x < f32::from_bits(0xc2cff1b4) {
        // Below log(2^-150).
        0.0
    } else if x < f32::from_bits(0xc2ce8ecf) {
        // Below log(2^-149): glibc's `__math_may_uflowf`, 0x1.4p-75 squared.
        let y = f32::from_bits(0x1a200000);
        y * y
    } else {
        exp_main(x)
    }
}

/// Scores into probabilities, in place: `exp(s - max)` ([`exp`]), summed in order, times
/// `1 / sum`.
#[inline(always)]
pub(super) fn softmax(scores: &mut [f32]) {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    #[cfg(target_arch = "x86_64")]
    let done = if super::attend_x86::available() {
        // SAFETY: `available()` says the CPU has AVX-512F.
        unsafe { exp_shifted_avx512(scores, max) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for s in &mut scores[done..] {
        *s = exp(*s - max);
    }
    let mut sum = 0.0;
    for s in scores.iter() {
        sum += *s;
    }
    let inv_sum = 1.0 / sum;
    for p in scores.iter_mut() {
        *p *= inv_sum;
    }
}

/// `s = exp(s - max)` for the first values of `scores` in whole sixteens, eight `f64` lanes
/// a vector, with [`exp`]'s arithmetic (a sixteen with a value off the main path goes to
/// [`exp`] value by value); returns how many it did.
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn exp_shifted_avx512(scores: &mut [f32], max: f32) -> usize {
    use std::arch::x86_64::*;
    let d = |bits: u64| _mm512_set1_pd(f64::from_bits(bits));
    let (inv, shift, c0, c1, c2) = (d(INV_LN2_N), d(SHIFT), d(C0), d(C1), d(C2));
    let one = _mm512_set1_pd(1.0);
    // SAFETY: `TABLE` holds 32 values, four vectors of eight.
    let table: [__m512i; 4] =
        std::array::from_fn(|i| unsafe { _mm512_loadu_si512(TABLE.as_ptr().add(8 * i).cast()) });
    let maxv = _mm512_set1_ps(max);
    let limit = _mm512_set1_epi32(0x42a);
    // e^x of eight values.
    let exp8 = |x: __m256| {
        let xd = _mm512_cvtps_pd(x);
        let z = _mm512_fmadd_pd(inv, xd, shift);
        let ki = _mm512_castpd_si512(z);
        let kd = _mm512_sub_pd(z, shift);
        let r = _mm512_fmsub_pd(inv, xd, kd);
        let index = _mm512_and_si512(ki, _mm512_set1_epi64(31));
        let low = _mm512_permutex2var_epi64(table[0], index, table[1]);
        let high = _mm512_permutex2var_epi64(table[2], index, table[3]);
        let upper = _mm512_test_epi64_mask(index, _mm512_set1_epi64(16));
        let t = _mm512_mask_blend_epi64(upper, low, high);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
        let z = _mm512_fmadd_pd(r, c0, c1);
        let r2 = _mm512_mul_pd(r, r);
        let y = _mm512_fmadd_pd(r, c2, one);
        let y = _mm512_fmadd_pd(z, r2, y);
        _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
    };
    let n = scores.len() / 16 * 16;
    for chunk in scores[..n].chunks_exact_mut(16) {
        // SAFETY: `chunk` holds sixteen floats.
        let x = _mm512_sub_ps(unsafe { _mm512_loadu_ps(chunk.as_ptr()) }, maxv);
        let bits = _mm512_srli_epi32::<20>(_mm512_castps_si512(x));
        let top = _mm512_and_si512(bits, _mm512_set1_epi32(0x7ff));
        if _mm512_cmpgt_epi32_mask(top, limit) != 0 {
            let mut xs = [0f32; 16];
            // SAFETY: `xs` holds sixteen floats.
            unsafe { _mm512_storeu_ps(xs.as_mut_ptr(), x) };
            for (s, x) in chunk.iter_mut().zip(xs) {
                *s = exp(x);
            }
            continue;
        }
        let lo = exp8(_mm512_castps512_ps256(x));
        let hi = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
            _mm512_castps_pd(x),
        )));
        // SAFETY: as the load.
        unsafe {
            _mm256_storeu_ps(chunk.as_mut_ptr(), lo);
            _mm256_storeu_ps(chunk.as_mut_ptr().add(8), hi);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `step`-th float bit pattern of both signs up to `|x| < 110`, and the edges.
    fn inputs(step: u32) -> Vec<f32> {
        let mut xs: Vec<f32> = (0..0x42dc_0000u32)
            .step_by(step as usize)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .collect();
        xs.extend([
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -0.0,
            0.0,
            88.0,
            -88.0,
            88.72,
            88.73,
            -103.27,
            -103.28,
            -103.29,
            -103.97,
            -103.98,
            f32::MAX,
            f32::MIN,
        ]);
        xs
    }

    /// [`exp`] has the bits of glibc's `expf` (what `f32::exp` calls here) on a spread of
    /// inputs from 2^-149 to 110 in size, both signs, and at every edge of its paths.
    #[test]
    #[cfg(all(target_env = "gnu", target_arch = "x86_64"))]
    fn exp_has_the_bits_of_glibc() {
        assert!(
            std::is_x86_feature_detected!("fma"),
            "glibc's FMA build of expf is the reference, and this CPU lacks FMA"
        );
        for x in inputs(997) {
            let (got, want) = (exp(x), x.exp());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "exp({x:e}) = {got:e}, glibc {want:e}"
            );
        }
    }

    /// The AVX-512 softmax has the bits of the portable loop, sixteens with values off the
    /// main path among them.
    #[test]
    fn the_vector_softmax_has_the_bits_of_the_loop() {
        if !super::super::attend_x86::tests::need_avx512("softmax") {
            return;
        }
        let xs: Vec<f32> = inputs(7919)
            .into_iter()
            .filter(|x| x.is_finite() && *x <= 0.0)
            .collect();
        for chunk in xs.chunks(1000 + 13) {
            let mut got = chunk.to_vec();
            softmax(&mut got);
            let max = chunk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut want: Vec<f32> = chunk.iter().map(|&s| exp(s - max)).collect();
            let mut sum = 0.0;
            for s in &want {
                sum += *s;
            }
            let inv = 1.0 / sum;
            for p in &mut want {
                *p *= inv;
            }
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.to_bits(), w.to_bits());
            }
        }
    }
}
