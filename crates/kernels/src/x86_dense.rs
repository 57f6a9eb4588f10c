//! Multi-row dot products of dense `f32`, `f16` and `bf16` weight rows (read in place from the
//! file) with `f32` activation rows: AVX2 + FMA + F16C kernels over 256-bit vectors, and
//! AVX-512 ones over 512-bit vectors (twice the lanes per instruction and 32 registers: more
//! rows at once).
//!
//! Each kernel gives every output the same arithmetic whatever the number of rows it is
//! computed with, so a row has the same bits alone (decode) and in a batch (prefill,
//! verification of a speculative draft); `f16` and `bf16` values are widened exactly (a
//! `bf16` is an `f32`'s top half: a zero extension and a shift). The AVX2 kernels
//! sum every output in one accumulator of eight lanes over 8-value chunks in order, then the
//! lanes (`hsum`), then the scalar tail: a tile of several weight rows by several activation
//! rows keeps one accumulator per pair, so each weight vector loaded serves every activation
//! row and each activation vector every weight row (see [`dot_f32_tile`]). The AVX-512 `f16`
//! one tiles the same way in 16 lanes, the tail in the accumulator by a masked load (see
//! [`dot_f16_tile_avx512`]); the AVX-512 `f32` and `bf16` ones take a weight row and up to
//! twelve activation rows a call, two accumulators a row (see [`dot_f32_rows_avx512`]). The
//! two SIMD levels agree to rounding, not in every bit.

use std::arch::x86_64::*;

use super::x86_shared::hsum;

/// `out[w][j] = a_w . bs[j]` for `W` consecutive weight rows `a_w` of `n` values at `$p` and
/// `J` activation rows `bs[j]`, every output in one accumulator of eight lanes (8-value
/// chunks in order), its lanes summed by `hsum`, then its scalar tail: the bits of an output
/// do not depend on `W` or `J`. `$load(i)` loads weights `i..i + 8` (counted from `$p`) as
/// `f32`, `$at(t)` gives weight `t`; `$ahead(i)` is called at each 32-value chunk `i` of the
/// rows (a prefetch). The body of [`dot_f32_tile`] and [`dot_f16_tile`].
macro_rules! dot_tile_body {
    ($n:expr, $load:expr, $ahead:expr, $at:expr, $bs:ident, $out:ident, $W:ident, $J:ident) => {{
        let n = $n;
        let mut acc = [[_mm256_setzero_ps(); $J]; $W];
        let mut i = 0;
        // SAFETY: every load is below `n` within its row, the tile holds `W` rows of `n`
        // values and each `bs[j]` holds `n` values (caller).
        unsafe {
            while i + 32 <= n {
                $ahead(i);
                for k in 0..4 {
                    let at = i + 8 * k;
                    let xs: [__m256; $J] =
                        std::array::from_fn(|j| _mm256_loadu_ps($bs[j].as_ptr().add(at)));
                    for w in 0..$W {
                        let wv = $load(w * n + at);
                        for j in 0..$J {
                            acc[w][j] = _mm256_fmadd_ps(wv, xs[j], acc[w][j]);
                        }
                    }
                }
                i += 32;
            }
            while i + 8 <= n {
                let xs: [__m256; $J] =
                    std::array::from_fn(|j| _mm256_loadu_ps($bs[j].as_ptr().add(i)));
                for w in 0..$W {
                    let wv = $load(w * n + i);
                    for j in 0..$J {
                        acc[w][j] = _mm256_fmadd_ps(wv, xs[j], acc[w][j]);
                    }
                }
                i += 8;
            }
        }
        for w in 0..$W {
            for j in 0..$J {
                let mut sum = hsum(acc[w][j]);
                for t in i..n {
                    sum += $at(w * n + t) * $bs[j][t];
                }
                $out[w][j] = sum;
            }
        }
    }};
}

/// Defines a tile kernel for one weight element type.
macro_rules! dot_tile_kernel {
    ($(#[$doc:meta])* $name:ident, $elem:ty, $load:expr, $at:expr) => {
        $(#[$doc])*
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name<const W: usize, const J: usize>(
            a: &[$elem],
            n: usize,
            bs: [&[f32]; J],
            out: &mut [[f32; J]; W],
            ahead: bool,
        ) {
            debug_assert!(a.len() >= W * n);
            let p = a.as_ptr();
            // The next tile (the matrix's next `W` rows, one block of `W * n` values: a
            // prefetch past its end does nothing) into L2 in order, `W` 32-value chunks' worth
            // by each 32-value chunk of these rows, by the first call for a tile (`ahead`).
            // Fetching the next tile's rows chunk by chunk beside these rows' (`W` short
            // streams) was slower than one row at a time with four accumulators; swept in
            // order it is as fast or faster. Zen 3 VM, one process alternating the kernels
            // over 30 `F16` matrices of 3072x576 from memory, two threads, ms (min / median
            // of 24): one activation row 6.73 / 7.36 against 7.43 / 8.62 chunk by chunk and
            // 6.87 / 7.96 for the former kernel; nine rows 12.50 / 13.74, 13.26 / 15.02 and
            // 15.69 / 17.55.
            let ahead = |i: usize| {
                if ahead {
                    let next = p.wrapping_add(W * n + (i / 32) * W * 32).cast::<u8>();
                    super::prefetch::prefetch_range(next, W * 32 * size_of::<$elem>());
                }
            };
            #[allow(clippy::redundant_closure_call)]
            {
                dot_tile_body!(n, |i: usize| $load(p, i), ahead, |t: usize| $at(a, t), bs, out, W, J)
            }
        }
    };
}

/// `f32` weights: eight values per load.
#[inline(always)]
unsafe fn load_f32(p: *const f32, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the tile.
    unsafe { _mm256_loadu_ps(p.add(i)) }
}

/// `f16` weights (their bits): eight values per load, widened exactly.
#[inline(always)]
unsafe fn load_f16(p: *const u16, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the tile; F16C is enabled by the caller.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(i) as *const __m128i)) }
}

/// `bf16` weights (their bits): eight values per load, widened exactly (zero-extended to 32
/// bits and shifted into an `f32`'s top half).
#[inline(always)]
unsafe fn load_bf16(p: *const u16, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the tile; AVX2 is enabled by the caller.
    unsafe {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(i) as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }
}

dot_tile_kernel!(
    /// `out[w][j] = a_w . bs[j]` for the `W` `f32` weight rows of `n` values that `a` holds
    /// one after another and `J` activation rows, each output with the same arithmetic
    /// whatever `W` and `J` (see `dot_tile_body`): `W * J` independent accumulators, each
    /// weight vector loaded once for the `J` rows and each activation vector once for the
    /// `W`. With `ahead`, the matrix's next `W` rows are prefetched into L2 as these are read
    /// (the first call for a tile does it).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `a` holds at least `W * n` values, every `bs[j]` at least `n`.
    dot_f32_tile, f32, load_f32, |a: &[f32], t: usize| a[t]
);
dot_tile_kernel!(
    /// [`dot_f32_tile`] for `f16` weight rows (their bits), widened in registers: the bits of
    /// the same rows dequantised to `f32` first.
    ///
    /// # Safety
    /// As [`dot_f32_tile`].
    dot_f16_tile, u16, load_f16,
    |a: &[u16], t: usize| half::f16::from_bits(a[t]).to_f32()
);
dot_tile_kernel!(
    /// [`dot_f32_tile`] for `bf16` weight rows (their bits), widened in registers: the bits
    /// of the same rows widened to `f32` first.
    ///
    /// # Safety
    /// As [`dot_f32_tile`].
    dot_bf16_tile, u16, load_bf16,
    |a: &[u16], t: usize| f32::from_bits(u32::from(a[t]) << 16)
);

/// 16 values of 16 bits from `a[t..]` (the lanes of `mask`, zero bits elsewhere).
#[inline(always)]
fn load_u16_512(a: &[u16], t: usize, mask: __mmask16) -> __m256i {
    debug_assert!(t + mask.count_ones() as usize <= a.len());
    // SAFETY: the kernel keeps the lanes of `mask` within `a`; AVX-512BW and VL are enabled
    // by the kernel that inlines this.
    unsafe { _mm256_maskz_loadu_epi16(mask, a.as_ptr().add(t).cast()) }
}

/// `out[w][j] = a_w . bs[j]` for the `W` `f16` weight rows (their bits) of `n` values that
/// `a` holds one after another and `J` activation rows, with 512-bit vectors: one
/// accumulator of 16 lanes an output over its 16-value chunks in order (the last one masked
/// to the row's end; zero bits widen to 0.0), then its lanes summed by
/// `_mm512_reduce_add_ps`, so the bits of an output do not depend on `W` or `J`. Each weight
/// vector loaded and widened serves the `J` activation rows and each activation vector the
/// `W` weight rows: `W * J` accumulators, `W` weight vectors and one activation vector
/// within the 32 registers (see `dense::dense_tile`), so a verification pass of a drafted
/// run of eight (nine rows, three weight rows a tile) runs three FMAs a loaded vector, not
/// one as the one-row kernels ([`dot_f32_rows_avx512`]) do. With `ahead`, the matrix's tile
/// after next is prefetched into L2 as these rows are read.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512F, BW and VL; `a` holds at least `W * n` values, every
/// `bs[j]` at least `n`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn dot_f16_tile_avx512<const W: usize, const J: usize>(
    a: &[u16],
    n: usize,
    bs: [&[f32]; J],
    out: &mut [[f32; J]; W],
    ahead: bool,
) {
    debug_assert!(a.len() >= W * n && bs.iter().all(|b| b.len() >= n));
    // The tile after next (the matrix's rows `2W..3W` on from `a`: a prefetch past the
    // weights' end does nothing) into L2 in order, `W` 32-value chunks' worth by each 32-value
    // chunk of these rows, by the first call for a tile (`ahead`). The hardware prefetchers
    // alone leave tiles of rows read side by side waiting on memory (SmolLM2 `F16` decode at
    // one thread: 38 tok/s against 70); two tiles ahead and four rows a tile for one
    // activation row was as fast from memory as one row at a time (74.3-74.8 against
    // 69.9-74.4 tok/s at one thread), one tile ahead or eight rows a tile slower (67.1-69.3).
    // `docs/performance.md` 2026-11-30 (7).
    let after_next = a.as_ptr().wrapping_add(2 * W * n).cast::<u8>();
    let step = W * 32 * size_of::<u16>();
    // One chunk of every output into `acc`: the values from `i`, the lanes of `mask`.
    let chunk = |acc: &mut [[__m512; J]; W], i: usize, mask: __mmask16| {
        let av: [__m512; W] =
            std::array::from_fn(|w| _mm512_cvtph_ps(load_u16_512(a, w * n + i, mask)));
        for j in 0..J {
            // SAFETY: the lanes of `mask` are within `bs[j]`, which holds `n` values (caller).
            let bv = unsafe { _mm512_maskz_loadu_ps(mask, bs[j].as_ptr().add(i)) };
            for w in 0..W {
                acc[w][j] = _mm512_fmadd_ps(av[w], bv, acc[w][j]);
            }
        }
    };
    let mut acc = [[_mm512_setzero_ps(); J]; W];
    let full = n - n % 16;
    let mut i = 0;
    while i < full {
        if ahead && i % 32 == 0 {
            super::prefetch::prefetch_range(after_next.wrapping_add(i / 32 * step), step);
        }
        chunk(&mut acc, i, 0xFFFF);
        i += 16;
    }
    if i < n {
        chunk(&mut acc, i, (1u16 << (n - i)) - 1);
    }
    for w in 0..W {
        for j in 0..J {
            out[w][j] = _mm512_reduce_add_ps(acc[w][j]);
        }
    }
}

/// `out[j] = a . bs[j]` for `J` rows with 512-bit vectors: two accumulators of 16 lanes over
/// 32-value chunks, a 16-value chunk into the first, the last `n % 16` values by a masked
/// load into the second, then `a0 + a1` and the lanes summed by `_mm512_reduce_add_ps`. Two
/// accumulators a row leave registers for twelve rows at once; with four rows or more the
/// FMA pipes have enough independent chains, and a single row (decode) waits on memory, not
/// on FMA latency. `$load(i, mask)` loads `a[i..i + 16]` (the lanes of `mask`, zero
/// elsewhere) as `f32`; `$ahead(i)` prefetches ahead of `a[i]`. The body of
/// [`dot_f32_rows_avx512`] and [`dot_bf16_rows_avx512`]. `f32` weights keep one row a call
/// (and `bf16` ones with them, so that a `bf16` row gives the bits of its `f32` widening):
/// the tiles of [`dot_f16_tile_avx512`] (one accumulator a row, four rows side by side for
/// one activation row) on `f32` weights read an `F32` SmolLM2 from memory at 33-37 tok/s
/// against 41-43 at one thread, and 52-54 against 65-74 at two, whatever the prefetch tried
/// (`docs/performance.md` 2026-11-30 (7)); `f16` rows, half the bytes, stream as fast
/// either way.
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

/// [`dot_f32_rows_avx512`] for a `bf16` weight row (its bits), widened in registers: the
/// bits of the same row widened to `f32` first.
///
/// # Safety
/// As [`dot_f32_rows_avx512`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(crate) unsafe fn dot_bf16_rows_avx512<const J: usize>(
    a: &[u16],
    bs: [&[f32]; J],
    out: &mut [f32],
) {
    let p = a.as_ptr();
    let widen = |h: __m256i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)));
    let load = |i: usize, mask: __mmask16| {
        if mask == 0xFFFF {
            // SAFETY: the body keeps `i + 16` within `a` for a full mask (caller: AVX-512F).
            unsafe { widen(_mm256_loadu_si256(p.add(i) as *const __m256i)) }
        } else {
            // The tail through the stack (zero bits widen to 0.0): a masked 16-bit load would
            // need AVX-512BW, which this kernel does not ask for.
            let mut tail = [0u16; 16];
            let len = mask.count_ones() as usize;
            tail[..len].copy_from_slice(&a[i..i + len]);
            // SAFETY: `tail` holds 16 values (caller: AVX-512F).
            unsafe { widen(_mm256_loadu_si256(tail.as_ptr() as *const __m256i)) }
        }
    };
    let ahead = |i: usize| super::prefetch::prefetch_ahead(p.wrapping_add(i).cast(), 128);
    dot_rows_body_512!(a.len(), load, ahead, bs, out, J)
}
