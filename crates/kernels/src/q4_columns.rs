//! Where the `Q4` group kernels (`x86.rs`) find a block column's quants and scales in each
//! packed format that shares their form: `Q4_1`, `Q4_0` and `Q4_K` (see [`super::packed`]).

use std::arch::x86_64::*;

use super::packed::{Q4K_COLUMN, q4k_mins_at, q4k_quants_at, q4k_scales_at};
use super::prefetch::prefetch_ahead;

/// `Q4_1`: `f16` `d` and `m` per block.
pub(crate) const Q4_1: u8 = 0;
/// `Q4_0`: `f16` `d` per block, quants `0..16` less 8 (an offset `-8 d` like `Q4_1`'s `m`).
pub(crate) const Q4_0: u8 = 1;
/// `Q4_K`: per sub-block `d * sc` and `-(dmin * mn)`, from the super-block's `f16` `d` and
/// `dmin` and the sub-block's 6-bit `sc` and `mn`.
pub(crate) const Q4_K: u8 = 2;

/// Bytes of a packed `Q4_1` block column (eight blocks of 20), or of a `Q4_0` one (eight of
/// 18, no `m` row).
const fn legacy_column_bytes(zero: bool) -> usize {
    if zero { 144 } else { 160 }
}

/// What a `Q4_K` group kernel keeps from one super-block column to the next sub-block: the
/// eight rows' `d` and `-dmin`, converted once per super-block.
#[derive(Clone, Copy)]
pub(crate) struct SuperBlock {
    d: __m256,
    neg_dmin: __m256,
}

impl SuperBlock {
    /// Nothing read yet (the first column of a `Q4_K` group fills it).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) fn new() -> Self {
        SuperBlock {
            d: _mm256_setzero_ps(),
            neg_dmin: _mm256_setzero_ps(),
        }
    }
}

/// Block column `b` (32 values of eight rows) of a packed group at `w` in format `F`: where
/// its quants start (row `i`'s 16 bytes at `16 i`), and the eight rows' `d` and `m` in lane
/// order (each value is `d q + m`). Asks for the bytes a few columns ahead to be fetched.
/// Columns must be asked for in order from 0 (`Q4_K` reads its super-block's `d` and `dmin`
/// into `sb` at each eighth).
///
/// For `Q4_K`, `d * sc` and `dmin * mn` are exact in `f32` (an 11-bit significand times a
/// 6-bit integer), so the values are exactly llama.cpp's `d1 * q - m1`.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds the group's block column `b` (for `Q4_K`, its whole
/// super-block column `b / 8`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn q4_column<const F: u8>(
    w: *const u8,
    b: usize,
    sb: &mut SuperBlock,
) -> (*const u8, __m256, __m256) {
    // SAFETY: the column lies within the group (caller); a prefetch never faults.
    unsafe {
        if F == Q4_K {
            let (s, j) = (b / 8, b % 8);
            let col = w.add(s * Q4K_COLUMN);
            // An eighth of the next super-block column per sub-block: all of it over eight.
            prefetch_ahead(col.add(j * Q4K_COLUMN / 8), Q4K_COLUMN / 8);
            if j == 0 {
                sb.d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(col.add(16) as *const __m128i));
                sb.neg_dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0));
            }
            let bytes = |at: usize| {
                let v = _mm_loadl_epi64(col.add(at) as *const __m128i);
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
            };
            return (
                col.add(q4k_quants_at(j)),
                _mm256_mul_ps(sb.d, bytes(q4k_scales_at(j))),
                _mm256_mul_ps(sb.neg_dmin, bytes(q4k_mins_at(j))),
            );
        }
        let zero = F == Q4_0;
        let bytes = legacy_column_bytes(zero);
        let col = w.add(b * bytes);
        prefetch_ahead(col, bytes);
        let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
        if zero {
            (col.add(16), d, _mm256_mul_ps(d, _mm256_set1_ps(-8.0)))
        } else {
            let m = _mm256_cvtph_ps(_mm_loadu_si128(col.add(16) as *const __m128i));
            (col.add(32), d, m)
        }
    }
}
