//! Where the packed group kernels (`x86.rs`, `x86_q5.rs`) find a block column's quants and
//! scales in each format that shares their form (see [`super::packed`]): `Q4_1`, `Q4_0` and
//! `Q4_K` (read by the `Q4_1` kernels), `Q5_1`, `Q5_0` and `Q5_K` (by the `Q5` ones).

use std::arch::x86_64::*;

use super::packed::{K_HEADER, k_column_bytes, k_mins_at, k_scales_at};
use super::prefetch::prefetch_ahead;

/// `Q4_1`: `f16` `d` and `m` per block.
pub(crate) const Q4_1: u8 = 0;
/// `Q4_0`: `f16` `d` per block, quants `0..16` less 8 (an offset `-8 d` like `Q4_1`'s `m`).
pub(crate) const Q4_0: u8 = 1;
/// `Q4_K`: per sub-block `d * sc` and `-(dmin * mn)`, from the super-block's `f16` `d` and
/// `dmin` and the sub-block's 6-bit `sc` and `mn`.
pub(crate) const Q4_K: u8 = 2;
/// `Q5_1`: as `Q4_1`, with the block column's 32 bytes of fifth bits before the quants.
pub(crate) const Q5_1: u8 = 3;
/// `Q5_0`: as `Q4_0` with fifth bits, quants `0..32` less 16.
pub(crate) const Q5_0: u8 = 4;
/// `Q5_K`: as `Q4_K` with fifth bits.
pub(crate) const Q5_K: u8 = 5;

/// Whether `f` is a K-quant format (sub-blocks of super-block columns).
const fn k_format(f: u8) -> bool {
    f == Q4_K || f == Q5_K
}

/// Calls `f(b)` for each block column `b` in `cols` of a group in format `F` (for a
/// K-quant, whole super-block columns), in order. A K-quant's columns run in an inner loop
/// of eight, so that in [`column()`] the sub-block index is a constant of the unrolled loop
/// and its divisions, branch and offsets fold: measured (criterion, one thread, 640 x 2048)
/// 8-bit `Q4_K` 26.8 -> 24.1 us and `Q5_K` 39.6 -> 33.2 us against a plain loop over `b`.
#[inline(always)]
pub(crate) fn for_each_column<const F: u8>(cols: std::ops::Range<usize>, mut f: impl FnMut(usize)) {
    let step = if k_format(F) { 8 } else { 1 };
    debug_assert!(
        cols.start.is_multiple_of(step) && cols.end.is_multiple_of(step),
        "whole super-blocks"
    );
    for s in cols.start / step..cols.end / step {
        for j in 0..step {
            f(s * step + j);
        }
    }
}

/// Bytes of a legacy format's block column: eight blocks of `Q4_1` (20 bytes), `Q4_0` (18),
/// `Q5_1` (24) or `Q5_0` (22).
const fn legacy_column_bytes(f: u8) -> usize {
    match f {
        Q4_1 => 160,
        Q4_0 => 144,
        Q5_1 => 192,
        _ => 176,
    }
}

/// What a K-quant group kernel keeps from one sub-block to the next: the eight rows' `d`
/// and `-dmin`, converted once per super-block column.
#[derive(Clone, Copy)]
pub(crate) struct SuperBlock {
    d: __m256,
    neg_dmin: __m256,
    /// Whether [`column()`] asks for the columns ahead ([`prefetch_ahead`]).
    prefetch: bool,
}

impl SuperBlock {
    /// Nothing read yet (the first column of a K-quant group fills it), for an `f32` kernel:
    /// its columns prefetch the ones ahead.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) fn new() -> Self {
        SuperBlock {
            d: _mm256_setzero_ps(),
            neg_dmin: _mm256_setzero_ps(),
            prefetch: true,
        }
    }

    /// [`new`](Self::new) for an 8-bit kernel: its columns prefetch where
    /// [`fast_kernels`](super::prefetch::fast_kernels) says so.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) fn for_8_bit() -> Self {
        SuperBlock {
            prefetch: super::prefetch::fast_kernels(),
            ..SuperBlock::new()
        }
    }
}

/// Block column `b` (32 values of eight rows) of a packed group at `w` in format `F`: where
/// its data starts (`Q4`: row `i`'s 16 quant bytes at `16 i`; `Q5`: 32 bytes of fifth bits,
/// then those quants), and the eight rows' `d` and `m` in lane order (each value is
/// `d q + m`). Asks for the bytes a few columns ahead to be fetched. Columns must be asked
/// for in order from 0 (a K-quant reads its super-block's `d` and `dmin` into `sb` at each
/// eighth).
///
/// For `Q4_K`/`Q5_K`, `d * sc` and `dmin * mn` are exact in `f32` (an 11-bit significand
/// times a 6-bit integer), so the values are exactly llama.cpp's `d1 * q - m1`.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds the group's block column `b` (for a K-quant, its whole
/// super-block column `b / 8`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn column<const F: u8>(
    w: *const u8,
    b: usize,
    sb: &mut SuperBlock,
) -> (*const u8, __m256, __m256) {
    // SAFETY: the column lies within the group (caller); a prefetch never faults.
    unsafe {
        if k_format(F) {
            let five = F == Q5_K;
            let bytes = k_column_bytes(five);
            let (s, j) = (b / 8, b % 8);
            let col = w.add(s * bytes);
            // An eighth of the next super-block column per sub-block: all of it over eight.
            if sb.prefetch {
                prefetch_ahead(col.add(j * bytes / 8), bytes / 8);
            }
            if j == 0 {
                sb.d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(col.add(16) as *const __m128i));
                sb.neg_dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0));
            }
            let u8s = |at: usize| {
                let v = _mm_loadl_epi64(col.add(at) as *const __m128i);
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
            };
            let sub = (bytes - K_HEADER) / 8;
            return (
                col.add(K_HEADER + sub * j),
                _mm256_mul_ps(sb.d, u8s(k_scales_at(j))),
                _mm256_mul_ps(sb.neg_dmin, u8s(k_mins_at(j))),
            );
        }
        let bytes = legacy_column_bytes(F);
        let col = w.add(b * bytes);
        if sb.prefetch {
            prefetch_ahead(col, bytes);
        }
        let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
        match F {
            Q4_0 => (col.add(16), d, _mm256_mul_ps(d, _mm256_set1_ps(-8.0))),
            Q5_0 => (col.add(16), d, _mm256_mul_ps(d, _mm256_set1_ps(-16.0))),
            _ => {
                let m = _mm256_cvtph_ps(_mm_loadu_si128(col.add(16) as *const __m128i));
                (col.add(32), d, m)
            }
        }
    }
}
