//! Multi-row dot products of dense `f32` and `f16` weight rows (read in place from the
//! file) with `f32` activation rows: AVX2 + FMA + F16C kernels over 256-bit vectors, and
//! AVX-512 ones over 512-bit vectors (twice the lanes per instruction and 32 registers: more
//! rows at once).
//!
//! Each kernel gives every output the same arithmetic whatever the number of rows it is
//! computed with, so a row has the same bits alone (decode) and in a batch (prefill,
//! verification of a speculative draft); `f16` values are widened exactly. The AVX2 kernels
//! have the arithmetic of `x86::dot_f32` (four accumulators of eight lanes over 32-value
//! chunks, an 8-value chunk into the first, the reduction `(a0 + a1) + (a2 + a3)`, then the
//! scalar tail); the AVX-512 ones sum in another order (see [`dot_f32_rows_avx512`]), so the
//! two SIMD levels agree to rounding, not in every bit.

use std::arch::x86_64::*;

use super::x86_shared::hsum;

/// `out[j] = a . bs[j]` for `J` rows `bs[j]` (each as long as `a`), every one with exactly
/// the arithmetic of `x86::dot_f32` (the same accumulators, order and reduction), so a row's
/// result has the same bits alone and in a batch; `a` is loaded once per chunk for all `J`.
/// `$load(i)` loads `a[i..i + 8]` as `f32`, `$at(t)` gives `a[t]`: `f16` weights are widened
/// in registers (exactly: every `f16` is an `f32`), giving the bits of their `f32` values;
/// `$ahead(i)` is called at each 32-value chunk `i` (a prefetch). The body of
/// [`dot_f32_rows`] and its variants.
macro_rules! dot_rows_body {
    ($n:expr, $load:expr, $ahead:expr, $at:expr, $bs:ident, $out:ident, $J:ident) => {{
        let n = $n;
        let mut acc = [[_mm256_setzero_ps(); 4]; $J];
        let mut i = 0;
        // SAFETY: every load is below `n`, and each `bs[j]` holds `n` values (caller).
        unsafe {
            while i + 32 <= n {
                $ahead(i);
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
            ahead: bool,
        ) {
            let p = a.as_ptr();
            let n = a.len();
            // The next row (the matrix's next one: a prefetch past its end does nothing), a
            // 32-value chunk at a time into L2, by the first call of a row (`ahead`). Measured
            // on the Zen 3 VM in one process, alternating with and without it over SmolLM2's
            // 90 `F16` FFN matrices mapped from the file (mean of 20): one activation row
            // 13.8-14.6 against 15.4-17.0 ms at one thread, 7.8-8.7 against 8.7-9.5 at two;
            // nine rows the same either way.
            let ahead = |i: usize| {
                if ahead {
                    let next = p.wrapping_add(n + i).cast::<u8>();
                    super::prefetch::prefetch_range(next, 32 * size_of::<$elem>());
                }
            };
            #[allow(clippy::redundant_closure_call)]
            {
                dot_rows_body!(n, |i: usize| $load(p, i), ahead, |t: usize| $at(a, t), bs, out, J)
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
    /// the bits of `x86::dot_f32` (see `dot_rows_body`); with `ahead`, the matrix's next row
    /// is prefetched into L2 as this one is read (the first call for a row does it).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; every `bs[j]` at least as long as `a`, `out` at least `J` long.
    dot_f32_rows, f32, "avx2,fma,f16c", load_f32, |a: &[f32], t: usize| a[t]
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

/// `out[j] = a . bs[j]` for `J` rows with 512-bit vectors: two accumulators of 16 lanes over
/// 32-value chunks, a 16-value chunk into the first, the last `n % 16` values by a masked
/// load into the second, then `a0 + a1` and the lanes summed by `_mm512_reduce_add_ps`. Two
/// accumulators a row leave registers for twelve rows at once (a verification pass of a
/// drafted run of eight takes one call); with four rows or more the FMA pipes have enough
/// independent chains, and a single row (decode) waits on memory, not on FMA latency.
/// `$load(i, mask)` loads `a[i..i + 16]` (the lanes of `mask`, zero elsewhere) as `f32`;
/// `$ahead(i)` prefetches ahead of `a[i]`. The body of [`dot_f32_rows_avx512`] and
/// [`dot_f16_rows_avx512`].
macro_rules! dot_rows_body_512 {
    ($n:expr, $load:expr, $ahead:expr, $bs:ident, $out:ident, $J:ident) => {{
        let n = $n;
        let all: __mmask16 = 0xFFFF;
        let mut acc = [[_mm512_setzero_ps(); 2]; $J];
        let mut i = 0;
        // SAFETY: every load is below `n` (the last one masked to it), and each `bs[j]`
        // holds `n` values (caller).
        unsafe {
            while i + 32 <= n {
                if i % 64 == 0 {
                    $ahead(i);
                }
                for k in 0..2 {
                    let av = $load(i + 16 * k, all);
                    for j in 0..$J {
                        let bv = _mm512_loadu_ps($bs[j].as_ptr().add(i + 16 * k));
                        acc[j][k] = _mm512_fmadd_ps(av, bv, acc[j][k]);
                    }
                }
                i += 32;
            }
            if i + 16 <= n {
                let av = $load(i, all);
                for j in 0..$J {
                    let bv = _mm512_loadu_ps($bs[j].as_ptr().add(i));
                    acc[j][0] = _mm512_fmadd_ps(av, bv, acc[j][0]);
                }
                i += 16;
            }
            if i < n {
                let mask: __mmask16 = (1u16 << (n - i)) - 1;
                let av = $load(i, mask);
                for j in 0..$J {
                    let bv = _mm512_maskz_loadu_ps(mask, $bs[j].as_ptr().add(i));
                    acc[j][1] = _mm512_fmadd_ps(av, bv, acc[j][1]);
                }
            }
        }
        for j in 0..$J {
            $out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]));
        }
    }};
}

/// `out[j] = a . bs[j]` for `J` activation rows against one `f32` weight row, 512-bit vectors
/// (see `dot_rows_body_512`): the same bits for a row whatever `J`.
///
/// # Safety
/// AVX-512F; every `bs[j]` at least as long as `a`, `out` at least `J` long.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(crate) unsafe fn dot_f32_rows_avx512<const J: usize>(
    a: &[f32],
    bs: [&[f32]; J],
    out: &mut [f32],
) {
    let p = a.as_ptr();
    // SAFETY: the body keeps every lane it loads within `a` (caller: AVX-512F).
    let load = |i: usize, mask: __mmask16| unsafe { _mm512_maskz_loadu_ps(mask, p.add(i)) };
    let ahead = |i: usize| super::prefetch::prefetch_ahead(p.wrapping_add(i).cast(), 256);
    dot_rows_body_512!(a.len(), load, ahead, bs, out, J)
}

/// [`dot_f32_rows_avx512`] for an `f16` weight row (its bits), widened in registers: the bits
/// of the same row dequantised to `f32` first.
///
/// # Safety
/// As [`dot_f32_rows_avx512`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(crate) unsafe fn dot_f16_rows_avx512<const J: usize>(
    a: &[u16],
    bs: [&[f32]; J],
    out: &mut [f32],
) {
    let p = a.as_ptr();
    let load = |i: usize, mask: __mmask16| {
        if mask == 0xFFFF {
            // SAFETY: the body keeps `i + 16` within `a` for a full mask (caller: AVX-512F).
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.add(i) as *const __m256i)) }
        } else {
            // The tail (masked lanes: zero bits, which widen to 0.0), through the stack:
            // a masked 16-bit load would need AVX-512BW.
            let mut tail = [0u16; 16];
            let len = mask.count_ones() as usize;
            tail[..len].copy_from_slice(&a[i..i + len]);
            // SAFETY: `tail` holds 16 values (caller: AVX-512F).
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(tail.as_ptr() as *const __m256i)) }
        }
    };
    let ahead = |i: usize| super::prefetch::prefetch_ahead(p.wrapping_add(i).cast(), 128);
    dot_rows_body_512!(a.len(), load, ahead, bs, out, J)
}
