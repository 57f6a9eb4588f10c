//! AVX2 + FMA + F16C kernels over packed groups of eight `Q5_0` / `Q5_1` rows (the layout of
//! `packed.rs`: per block column the eight `d` (and `m`) in lane order, the eight rows' `qh`,
//! then their `qs`).
//!
//! A 5-bit value is its 4-bit nibble OR-ed with its fifth bit at bit 4. The fifth bits were
//! transposed at load (`packed::q5_bit`): the 32 bytes of a block column's fifth bits, shifted
//! by one count per vector and masked with `0x10`, give the fifth bits of 32 values at bit 4
//! of their bytes (ggml spreads each row's `qh` with a shuffle, an OR and a compare instead). `Q5_0`'s `-16` offset is an
//! offset like `Q4_1`'s min, `m = -16 d`, applied to activation sums, so both types share one
//! kernel with unsigned quants (`0..32`).
//!
//! - 8-bit activations: two rows' quants per 32-byte load (as the `Q4_1` kernel), `maddubs`
//!   of the unsigned 5-bit quants with the signed activations (two products of at most
//!   `31 * 127` and their pair sum stay in `i16`), eight rows' sums in one vector by `hadd`,
//!   one FMA by `d * y.d` and one by `m * y.s` per block column.
//! - `f32` activations: each row's 32 quant bytes (one value per byte) are masked in place per
//!   byte of each 32-bit lane and converted, times activations permuted to `K_ORDER` and
//!   scaled by `K_SCALE` (as the K-quant kernels: exact products).
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time), a whole
//! group of `nb` block columns and activation rows of `nb` blocks.

use std::arch::x86_64::*;

use super::packed::LANE_ROWS;
use super::x86_k::{Q8Block, Q8Rows};

/// Bytes of one packed block column: eight blocks of 22 (`Q5_0`) or 24 (`Q5_1`) bytes.
const fn column_bytes(one: bool) -> usize {
    if one { 192 } else { 176 }
}

/// Bytes of scales at the start of a block column.
const fn scale_bytes(one: bool) -> usize {
    if one { 32 } else { 16 }
}

/// `(d, m)` of the eight rows of block column `col` (`m = -16 d` for `Q5_0`).
///
/// # Safety
/// `col` points to a whole block column.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scales<const ONE: bool>(col: *const u8) -> (__m256, __m256) {
    // SAFETY: the scales lie at the start of the column (caller).
    unsafe {
        let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
        let m = if ONE {
            _mm256_cvtph_ps(_mm_loadu_si128(col.add(16) as *const __m128i))
        } else {
            _mm256_mul_ps(d, _mm256_set1_ps(-16.0))
        };
        (d, m)
    }
}

/// One vector whose lane `s` is the sum of the lanes of `v[s]`, from `h[i] = hadd(v[2i],
/// v[2i + 1])`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sum_quads(h: [__m256; 4]) -> __m256 {
    let a = _mm256_hadd_ps(h[0], h[1]);
    let b = _mm256_hadd_ps(h[2], h[3]);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(a, b),
        _mm256_permute2f128_ps::<0x31>(a, b),
    )
}

/// A `Q5_0` (`ONE` false) or `Q5_1` group times `JN` rows of 8-bit activation blocks; the
/// eight results of activation row `j` to `out[j]` in the lane order [`LANE_ROWS`].
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `nb` block columns; each row of `ys` `nb` blocks, scales
/// and sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_q8<const JN: usize, const ONE: bool, Y: Q8Block>(
    w: *const u8,
    nb: usize,
    ys: &Q8Rows<'_, Y, JN>,
    out: &mut [[f32; 8]; JN],
) {
    let low = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let ones = _mm256_set1_epi16(1);
    let (bytes, sb) = (column_bytes(ONE), scale_bytes(ONE));
    let mut acc = [_mm256_setzero_ps(); JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    for b in 0..nb {
        // SAFETY: block column `b` lies within the group; activation block `b` exists.
        unsafe {
            let col = w.add(b * bytes);
            let (d, m) = scales::<ONE>(col);
            // Rows (2k, 2k+1) in the two 128-bit lanes.
            // Fifth bits of values 0..16 of rows 2k, 2k + 1 at bit 4 + k, of values 16..32 at
            // bit 3 - k.
            let qh = _mm256_loadu_si256(col.add(sb) as *const __m256i);
            let mut lo = [_mm256_setzero_si256(); 4];
            let mut hi = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let v = _mm256_loadu_si256(col.add(sb + 32 + 32 * k) as *const __m256i);
                let h_lo = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(k as i32));
                let h_hi = _mm256_sll_epi16(qh, _mm_cvtsi32_si128(k as i32 + 1));
                lo[k] = _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(h_lo, bit4));
                hi[k] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                    _mm256_and_si256(h_hi, bit4),
                );
            }
            for j in 0..JN {
                let q = ys.blocks[j].get_unchecked(b).qs().as_ptr();
                let ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128(q as *const __m128i));
                let yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(q.add(16) as *const __m128i));
                let p: [__m256i; 4] = std::array::from_fn(|k| {
                    let p16 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo[k], ylo),
                        _mm256_maddubs_epi16(hi[k], yhi),
                    );
                    _mm256_madd_epi16(p16, ones)
                });
                // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS.
                let sums = _mm256_cvtepi32_ps(_mm256_hadd_epi32(
                    _mm256_hadd_epi32(p[0], p[1]),
                    _mm256_hadd_epi32(p[2], p[3]),
                ));
                let yd = _mm256_set1_ps(*ys.d[j].add(b));
                acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(d, yd), sums, acc[j]);
                acc_min[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(*ys.s[j].add(b)), acc_min[j]);
            }
        }
    }
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j])) };
    }
}

/// `w[0] x[0..8] + ... + w[3] x[24..32]`, lane by lane.
///
/// # Safety
/// `x` points to 32 readable floats.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot4(w: &[__m256; 4], x: *const f32) -> __m256 {
    // SAFETY: the caller passes 32 readable floats.
    unsafe {
        let mut t = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
        t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x.add(8)), t);
        t = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x.add(16)), t);
        _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x.add(24)), t)
    }
}

/// A `Q5_0` (`ONE` false) or `Q5_1` group times `JN` rows of `f32` activations, each block in
/// `K_ORDER` scaled by `K_SCALE` (`xs`), with their sums per block (`sums`).
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `nb` block columns; each `xs[j]` `32 * nb` values and each
/// `sums[j]` `nb`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_f32<const JN: usize, const ONE: bool>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let low = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    // The high lane holds the high nibbles (values 16..32).
    let nibble_shift = _mm256_setr_epi64x(0, 0, 4, 4);
    // Row 2k + L's fifth bits lie in 128-bit lane L of the column's 32 bytes of them, at bit
    // 4 + k (values 0..16) and 3 - k (values 16..32): shifted right by k in the low lane, left
    // by k + 1 in the high one.
    let right: [__m256i; 4] = std::array::from_fn(|k| {
        let k = k as i32;
        _mm256_setr_epi32(k, k, k, k, 0, 0, 0, 0)
    });
    let left: [__m256i; 4] = std::array::from_fn(|k| {
        let k = k as i32 + 1;
        _mm256_setr_epi32(0, 0, 0, 0, k, k, k, k)
    });
    let masks: [__m256i; 4] = std::array::from_fn(|k| _mm256_set1_epi32(0x1F << (8 * k)));
    let (bytes, sb) = (column_bytes(ONE), scale_bytes(ONE));
    let mut acc = [_mm256_setzero_ps(); JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    for b in 0..nb {
        // SAFETY: block column `b` lies within the group; activation block `b` within
        // `32 * nb` values and `nb` sums.
        unsafe {
            let col = w.add(b * bytes);
            let (d, m) = scales::<ONE>(col);
            // Byte i of the result is value i (0..32); byte k of 32-bit lane l is value 4l + k.
            let decode = |row: usize| -> [__m256; 4] {
                let q = _mm_loadu_si128(col.add(sb + 32 + 16 * row) as *const __m128i);
                let q = _mm256_srlv_epi64(_mm256_broadcastsi128_si256(q), nibble_shift);
                let (k, lane) = (row / 2, row % 2);
                let qh = _mm_loadu_si128(col.add(sb + 16 * lane) as *const __m128i);
                let qh = _mm256_broadcastsi128_si256(qh);
                let qh = _mm256_sllv_epi32(_mm256_srlv_epi32(qh, right[k]), left[k]);
                let v = _mm256_or_si256(_mm256_and_si256(q, low), _mm256_and_si256(qh, bit4));
                std::array::from_fn(|k| _mm256_cvtepi32_ps(_mm256_and_si256(v, masks[k])))
            };
            let mut h = [[_mm256_setzero_ps(); 4]; JN];
            for pair in 0..4 {
                let w0 = decode(LANE_ROWS[2 * pair]);
                let w1 = decode(LANE_ROWS[2 * pair + 1]);
                for j in 0..JN {
                    let x = xs[j].as_ptr().add(32 * b);
                    h[j][pair] = _mm256_hadd_ps(dot4(&w0, x), dot4(&w1, x));
                }
            }
            for j in 0..JN {
                acc[j] = _mm256_fmadd_ps(d, sum_quads(h[j]), acc[j]);
                let sum = _mm256_set1_ps(*sums[j].get_unchecked(b));
                acc_min[j] = _mm256_fmadd_ps(m, sum, acc_min[j]);
            }
        }
    }
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j])) };
    }
}
