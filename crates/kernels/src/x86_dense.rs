//! Multi-row dot products of dense `f32` and `f16` weight rows (read in place from the
//! file) with `f32` activation rows, AVX2 + FMA + F16C, and the same compiled for AVX-512VL
//! (32 registers: more rows at once, the same 256-bit operations and bits).
//!
//! Every output has exactly the arithmetic of `x86::dot_f32` over the row's `f32` values
//! (four accumulators of eight lanes over 32-value chunks, an 8-value chunk into the first,
//! the reduction `(a0 + a1) + (a2 + a3)`, then the scalar tail), so a row gives the same bits
//! alone (decode) and in a batch (prefill, verification); `f16` values are widened exactly.

use std::arch::x86_64::*;

use super::x86_k::hsum;

/// `out[j] = a . bs[j]` for `J` rows `bs[j]` (each as long as `a`), every one with exactly
/// the arithmetic of `x86::dot_f32` (the same accumulators, order and reduction), so a row's
/// result has the same bits alone and in a batch; `a` is loaded once per chunk for all `J`.
/// `$load(i)` loads `a[i..i + 8]` as `f32`, `$at(t)` gives `a[t]`: `f16` weights are widened
/// in registers (exactly: every `f16` is an `f32`), giving the bits of their `f32` values.
/// The body of [`dot_f32_rows`] and its variants.
macro_rules! dot_rows_body {
    ($n:expr, $load:expr, $at:expr, $bs:ident, $out:ident, $J:ident) => {{
        let n = $n;
        let mut acc = [[_mm256_setzero_ps(); 4]; $J];
        let mut i = 0;
        // SAFETY: every load is below `n`, and each `bs[j]` holds `n` values (caller).
        unsafe {
            while i + 32 <= n {
                for k in 0..4 {
                    let av = $load(i + 8 * k);
                    for j in 0..$J {
                        let bv = _mm256_loadu_ps($bs[j].as_ptr().add(i + 8 * k));
                        acc[j][k] = _mm256_fmadd_ps(av, bv, acc[j][k]);
                    }
                }
                i += 32;
            }
            while i + 8 <= n {
                let av = $load(i);
                for j in 0..$J {
                    let bv = _mm256_loadu_ps($bs[j].as_ptr().add(i));
                    acc[j][0] = _mm256_fmadd_ps(av, bv, acc[j][0]);
                }
                i += 8;
            }
        }
        for j in 0..$J {
            let a4 = &acc[j];
            let total = _mm256_add_ps(_mm256_add_ps(a4[0], a4[1]), _mm256_add_ps(a4[2], a4[3]));
            let mut sum = hsum(total);
            for t in i..n {
                sum += $at(t) * $bs[j][t];
            }
            $out[j] = sum;
        }
    }};
}

/// Defines a multi-row dense kernel for one weight element type and one set of features.
macro_rules! dot_rows_kernel {
    ($(#[$doc:meta])* $name:ident, $elem:ty, $features:literal, $load:expr, $at:expr) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<const J: usize>(
            a: &[$elem],
            bs: [&[f32]; J],
            out: &mut [f32],
        ) {
            let p = a.as_ptr();
            #[allow(clippy::redundant_closure_call)]
            {
                dot_rows_body!(a.len(), |i: usize| $load(p, i), |t: usize| $at(a, t), bs, out, J)
            }
        }
    };
}

/// `f32` weights: eight values per load.
#[inline(always)]
unsafe fn load_f32(p: *const f32, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the row.
    unsafe { _mm256_loadu_ps(p.add(i)) }
}

/// `f16` weights (their bits): eight values per load, widened exactly.
#[inline(always)]
unsafe fn load_f16(p: *const u16, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the row; F16C is enabled by the caller.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(i) as *const __m128i)) }
}

dot_rows_kernel!(
    /// `out[j] = a . bs[j]` for `J` activation rows against one `f32` weight row, each with
    /// the bits of `x86::dot_f32` (see `dot_rows_body`).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; every `bs[j]` at least as long as `a`, `out` at least `J` long.
    dot_f32_rows, f32, "avx2,fma,f16c", load_f32, |a: &[f32], t: usize| a[t]
);
dot_rows_kernel!(
    /// [`dot_f32_rows`] compiled for AVX-512 (VL): the same 256-bit operations, so the same
    /// bits, with 32 vector registers to hold the accumulators of more rows at once.
    ///
    /// # Safety
    /// As [`dot_f32_rows`]; the CPU must have AVX-512F and AVX-512VL.
    dot_f32_rows_avx512, f32, "avx2,fma,f16c,avx512f,avx512vl", load_f32,
    |a: &[f32], t: usize| a[t]
);
dot_rows_kernel!(
    /// [`dot_f32_rows`] for an `f16` weight row (its bits), widened in registers: the bits of
    /// the same row dequantised to `f32` first.
    ///
    /// # Safety
    /// As [`dot_f32_rows`].
    dot_f16_rows, u16, "avx2,fma,f16c", load_f16,
    |a: &[u16], t: usize| half::f16::from_bits(a[t]).to_f32()
);
dot_rows_kernel!(
    /// [`dot_f16_rows`] compiled for AVX-512 (VL), as [`dot_f32_rows_avx512`].
    ///
    /// # Safety
    /// As [`dot_f32_rows_avx512`].
    dot_f16_rows_avx512, u16, "avx2,fma,f16c,avx512f,avx512vl", load_f16,
    |a: &[u16], t: usize| half::f16::from_bits(a[t]).to_f32()
);
