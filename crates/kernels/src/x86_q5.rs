//! AVX2 + FMA + F16C kernels over packed groups of eight `Q5_0` / `Q5_1` / `Q5_K` rows (the
//! layout of `packed.rs`: per block column the eight `d` (and `m`) in lane order, 32 bytes of
//! fifth bits, then four 32-byte quant vectors with the rows in their lanes; for `Q5_K` the
//! scales of a super-block column's eight sub-block columns in its header,
//! `super::columns`).
//!
//! A 5-bit value is its 4-bit nibble OR-ed with its fifth bit at bit 4. Byte `4 s + p` of
//! quant vector `c` holds values `4c + p` (low nibble) and `16 + 4c + p` (high nibble) of the
//! row in lane `s`; bits `c` and `4 + c` of byte `4 s + p` of the fifth bits are theirs, so
//! one constant shift of the fifth-bit vector and a mask give a quant vector's fifth bits at
//! bit 4 (ggml spreads each row's `qh` with a shuffle, an OR and a compare instead). With the
//! rows in the lanes, products with activations broadcast to every lane leave each row's sum
//! in its own lane: no horizontal adds. `Q5_0`'s `-16` offset is an offset like `Q4_1`'s min,
//! `m = -16 d`, and `Q5_K`'s min `-(dmin * mn)` another, applied to activation sums, so the
//! three types share one kernel with unsigned quants (`0..32`).
//!
//! - 8-bit activations: `vpdpbusd` (AVX-VNNI) of a quant vector with four activations
//!   broadcast, or `maddubs` (two vectors' products added in `i16`, at most `4 * 31 * 127`)
//!   and one `madd`; one FMA by `d * y.d` and one by `m * y.s` per block column.
//! - `f32` activations: each quant vector masked in place per byte of its 32-bit lanes and
//!   converted (byte `p` at bit `8p`), times one activation in every lane, scaled by `2^-8p`
//!   (`x86_shared::BYTE_SCALE`; every product exactly `q * x`), in four chains. The AVX2
//!   instance reads each activation in eight copies (`Kernel::copies`: a vector load folded
//!   into the FMA, where a broadcast costs a Zen 3 half a cycle of a vector pipe; criterion,
//!   one thread, best of two: `rows_q5_0_2048x640` one row 112 -> 110 us, two 194 -> 187,
//!   nine 1273 -> 844; `Q6_K` 640 x 2048 134 -> 128, 297 -> 234, 1509 -> 1022); the
//!   AVX-512VL one broadcasts.
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time), a whole
//! group of `nb` block columns and activation rows of `nb` blocks.

use std::arch::x86_64::*;

use super::columns::{SuperBlock, column, for_each_column};
use super::prefetch::prefetch_next_pair;
use super::x86_shared::{Q8Block, Q8Rows, activation};

/// Quant vector `c` of the block column whose fifth bits (`qh`) start at `at`, and `qh`
/// shifted so that the fifth bits of its values `4c + p` (then `16 + 4c + p`) lie at bit 4
/// (other bits not cleared): what [`quants`] and [`quants_vl`] join.
///
/// # Safety
/// AVX2; `at` points to a whole block column's fifth bits and quants.
#[inline(always)]
unsafe fn parts(at: *const u8, qh: __m256i, c: usize) -> (__m256i, __m256i, __m256i) {
    // SAFETY: the vector lies within the column, and the caller runs with AVX2.
    unsafe {
        let v = _mm256_loadu_si256(at.add(32 + 32 * c) as *const __m256i);
        // Bit `c` (then `4 + c`) of each byte to bit 4 (the 16-bit shifts move bits across
        // bytes only outside it).
        let (lo, hi) = match c {
            0 => (_mm256_slli_epi16::<4>(qh), qh),
            1 => (_mm256_slli_epi16::<3>(qh), _mm256_srli_epi16::<1>(qh)),
            2 => (_mm256_slli_epi16::<2>(qh), _mm256_srli_epi16::<2>(qh)),
            _ => (_mm256_slli_epi16::<1>(qh), _mm256_srli_epi16::<3>(qh)),
        };
        (v, lo, hi)
    }
}

/// The 5-bit quants (one per byte, `0..32`) of quant vector `c` of the block column whose
/// fifth bits (`qh`) start at `at`: byte `4 s + p` value `4c + p` (`lo`) and `16 + 4c + p`
/// (`hi`) of the row in lane `s`.
///
/// # Safety
/// `at` points to a whole block column's fifth bits and quants.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quants(at: *const u8, qh: __m256i, c: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let (low, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let (v, h_lo, h_hi) = parts(at, qh, c);
        (
            _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(h_lo, bit4)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                _mm256_and_si256(h_hi, bit4),
            ),
        )
    }
}

/// [`quants`] with AVX-512VL's bit selects: the masked nibbles, the shifted fifth bits and
/// `0x10` joined in one `vpternlogd` (`a | (b & c)`) per vector instead of an AND and an OR.
///
/// # Safety
/// As [`quants`]; AVX-512F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
unsafe fn quants_vl(at: *const u8, qh: __m256i, c: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let (low, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let (v, h_lo, h_hi) = parts(at, qh, c);
        let nibbles_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        (
            _mm256_ternarylogic_epi32::<0xF8>(_mm256_and_si256(v, low), h_lo, bit4),
            _mm256_ternarylogic_epi32::<0xF8>(nibbles_hi, h_hi, bit4),
        )
    }
}

/// The 8-bit kernel, once per instruction set: `avx2` (`maddubs` + `madd`), `vnni` (AVX-VNNI
/// `vpdpbusd`; the integer sums are the same) and `avx512` (`vpdpbusd` in its AVX-512 VNNI
/// encoding, with AVX-512VL's 32 registers and bit selects).
macro_rules! q5_q8_kernel {
    ($name:ident, $features:tt, $vnni:expr, $dpbusd:ident, $quants:ident) => {
        /// A `Q5_1` group (or another format `F` of its form: `Q5_0`, `Q5_K`, see
        /// `super::columns`) times `JN` rows of 8-bit activation blocks; the eight results of
        /// activation row `j` to `out[j]` in the lane order [`super::packed::LANE_ROWS`].
        ///
        /// # Safety
        /// The instance's features; `w` holds `nb` block columns; each row of `ys` `nb`
        /// blocks, scales and sums.
        #[target_feature(enable = $features)]
        #[allow(unused_unsafe)]
        pub(crate) unsafe fn $name<const JN: usize, const F: u8, Y: Q8Block>(
            w: *const u8,
            nb: usize,
            ys: &Q8Rows<'_, Y, JN>,
            out: &mut [[f32; 8]; JN],
        ) {
            let ones = _mm256_set1_epi16(1);
            let mut sb = SuperBlock::for_8_bit();
            let mut acc = [_mm256_setzero_ps(); JN];
            let mut acc_min = [_mm256_setzero_ps(); JN];
            for_each_column::<F>(0..nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b`
                // exists; the VNNI branch runs only in the instances with a `vpdpbusd`.
                unsafe {
                    let (at, d, m) = column::<F>(w, b, &mut sb);
                    let qh = _mm256_loadu_si256(at as *const __m256i);
                    let q: [*const u8; JN] =
                        std::array::from_fn(|j| ys.blocks[j].get_unchecked(b).qs().as_ptr().cast());
                    // Values 0..16 and 16..32 in two chains (VNNI), or two vectors' `i16`
                    // products added before each `madd`.
                    let mut sums = [[_mm256_setzero_si256(); 2]; JN];
                    let mut first = [_mm256_setzero_si256(); JN];
                    for c in 0..4 {
                        let (lo, hi) = $quants(at, qh, c);
                        for j in 0..JN {
                            // The four activations each lane's four quants meet, per half.
                            let y = [0, 16].map(|h| {
                                _mm256_set1_epi32(
                                    (q[j].add(h + 4 * c) as *const i32).read_unaligned(),
                                )
                            });
                            if $vnni {
                                sums[j][0] = $dpbusd(sums[j][0], lo, y[0]);
                                sums[j][1] = $dpbusd(sums[j][1], hi, y[1]);
                            } else {
                                let p = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(lo, y[0]),
                                    _mm256_maddubs_epi16(hi, y[1]),
                                );
                                if c % 2 == 0 {
                                    first[j] = p;
                                } else {
                                    let p = _mm256_madd_epi16(_mm256_add_epi16(first[j], p), ones);
                                    sums[j][c / 2] = p;
                                }
                            }
                        }
                    }
                    for j in 0..JN {
                        let s = _mm256_cvtepi32_ps(_mm256_add_epi32(sums[j][0], sums[j][1]));
                        let yd = _mm256_set1_ps(*ys.d[j].add(b));
                        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(d, yd), s, acc[j]);
                        let ysum = _mm256_set1_ps(*ys.s[j].add(b));
                        acc_min[j] = _mm256_fmadd_ps(m, ysum, acc_min[j]);
                    }
                }
            });
            for j in 0..JN {
                // SAFETY: `out[j]` holds eight floats.
                unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j])) };
            }
        }
    };
}

q5_q8_kernel!(
    q5_q8,
    "avx2,fma,f16c",
    false,
    _mm256_dpbusd_avx_epi32,
    quants
);
q5_q8_kernel!(
    q5_q8_vnni,
    "avx2,fma,f16c,avxvnni",
    true,
    _mm256_dpbusd_avx_epi32,
    quants
);
// `vpdpbusd` in its AVX-512 encoding (VNNI with VL): Zen 4 has it and not AVX-VNNI's.
q5_q8_kernel!(
    q5_q8_avx512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    true,
    _mm256_dpbusd_epi32,
    quants_vl
);

/// The `f32` kernel, once per instruction set: `avx2`, and `avx512` (AVX-512VL's 32
/// registers and bit selects, still 256-bit vectors: eight rows in the lanes).
macro_rules! q5_f32_kernel {
    ($name:ident, $features:tt, $quants:ident, $copies:literal) => {
        /// A `Q5_1` group (or another format `F` of its form) times `JN` rows of `f32`
        /// activations, each scaled by `x86_shared::BYTE_SCALE` (`xs`), with their sums per
        /// block (`sums`); the eight results of activation row `j` to `out[j]` in the lane
        /// order [`super::packed::LANE_ROWS`].
        ///
        /// # Safety
        /// The instance's features; `w` holds `nb` block columns; each `xs[j]` `32 * nb`
        /// values (each eight times over in the AVX2 instance) and each `sums[j]` `nb`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<const JN: usize, const F: u8>(
            w: *const u8,
            nb: usize,
            xs: [&[f32]; JN],
            sums: [&[f32]; JN],
            out: &mut [[f32; 8]; JN],
        ) {
            let masks: [__m256i; 4] = std::array::from_fn(|p| _mm256_set1_epi32(0x1F << (8 * p)));
            let mut sb = SuperBlock::new();
            let mut acc = [_mm256_setzero_ps(); JN];
            let mut acc_min = [_mm256_setzero_ps(); JN];
            for_each_column::<F>(0..nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b`
                // within `32 * nb` values and `nb` sums.
                unsafe {
                    let (at, d, m) = column::<F>(w, b, &mut sb);
                    let qh = _mm256_loadu_si256(at as *const __m256i);
                    // Per row, one chain per byte position `p` (independent FMAs).
                    let mut part = [[_mm256_setzero_ps(); 4]; JN];
                    for c in 0..4 {
                        let (lo, hi) = $quants(at, qh, c);
                        for (h, v) in [lo, hi].into_iter().enumerate() {
                            for p in 0..4 {
                                let wv = _mm256_cvtepi32_ps(_mm256_and_si256(v, masks[p]));
                                for j in 0..JN {
                                    let i = 32 * b + 16 * h + 4 * c + p;
                                    let x = activation::<$copies>(xs[j].as_ptr(), i);
                                    part[j][p] = if c == 0 && h == 0 {
                                        _mm256_mul_ps(wv, x)
                                    } else {
                                        _mm256_fmadd_ps(wv, x, part[j][p])
                                    };
                                }
                            }
                        }
                    }
                    for j in 0..JN {
                        let [a, e, f, g] = part[j];
                        let dot = _mm256_add_ps(_mm256_add_ps(a, e), _mm256_add_ps(f, g));
                        acc[j] = _mm256_fmadd_ps(d, dot, acc[j]);
                        let sum = _mm256_set1_ps(*sums[j].get_unchecked(b));
                        acc_min[j] = _mm256_fmadd_ps(m, sum, acc_min[j]);
                    }
                }
            });
            for j in 0..JN {
                // SAFETY: `out[j]` holds eight floats.
                unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j])) };
            }
        }
    };
}

q5_f32_kernel!(q5_f32, "avx2,fma,f16c", quants, true);
q5_f32_kernel!(
    q5_f32_avx512,
    "avx2,fma,f16c,avx512f,avx512vl",
    quants_vl,
    false
);

/// Two 32-byte halves, from `a` and `b`, as one 512-bit vector.
///
/// # Safety
/// AVX-512F; `a` and `b` point to 32 readable bytes each.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
pub(crate) unsafe fn join(a: *const u8, b: *const u8) -> __m512i {
    // SAFETY: forwarded from the caller.
    unsafe {
        let lo = _mm512_castsi256_si512(_mm256_loadu_si256(a as *const __m256i));
        _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(b as *const __m256i))
    }
}

/// Block column `b` of a pair of groups (`w`, and `w1` = `w + group_bytes`) in format `F`,
/// for a 16-lane kernel: where each group's column starts, and the sixteen rows' `d` and `m`
/// (the first group's in the low lanes), after asking for the next pair's column
/// ([`prefetch_next_pair`]). Columns in order from 0, as [`column()`].
///
/// # Safety
/// As [`column()`], for both groups.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
pub(crate) unsafe fn pair_column<const F: u8>(
    (w, w1): (*const u8, *const u8),
    (group_bytes, column_bytes): (usize, usize),
    b: usize,
    sb: &mut [SuperBlock; 2],
) -> ([*const u8; 2], __m512, __m512) {
    prefetch_next_pair(w1, group_bytes, column_bytes, b);
    // SAFETY: forwarded from the caller.
    let ((at0, d0, m0), (at1, d1, m1)) = unsafe {
        (
            column::<F>(w, b, &mut sb[0]),
            column::<F>(w1, b, &mut sb[1]),
        )
    };
    ([at0, at1], join_ps(d0, d1), join_ps(m0, m1))
}

/// Two 8-lane vectors as one 16-lane vector.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
pub(crate) fn join_ps(a: __m256, b: __m256) -> __m512 {
    let lo = _mm512_castpd256_pd512(_mm256_castps_pd(a));
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(lo, _mm256_castps_pd(b)))
}

/// [`q5_f32_avx512`] for two groups at once (`w` and `w + group_bytes`) in 16-lane vectors:
/// the FMAs of a further activation row cover sixteen weight rows instead of eight. Each
/// lane runs exactly the operations of the 8-lane kernel, so a row gets the same bits from
/// either (a group left over without a partner runs that one). The sixteen results of
/// activation row `j` to `out[j]`: the first group's in lane order, then the second's.
///
/// # Safety
/// AVX-512F and VL; `w` holds two consecutive groups of `nb` block columns, `group_bytes`
/// apart; each `xs[j]` `32 * nb` values and each `sums[j]` `nb`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(crate) unsafe fn q5_f32_x16<const JN: usize, const F: u8>(
    w: *const u8,
    group_bytes: usize,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 16]; JN],
) {
    let masks: [__m512i; 4] = std::array::from_fn(|p| _mm512_set1_epi32(0x1F << (8 * p)));
    let (low, bit4) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
    // SAFETY: the second group lies `group_bytes` on (caller).
    let w1 = unsafe { w.add(group_bytes) };
    // Bytes per block column (the next pair's prefetch below), divided once.
    let column_bytes = group_bytes / nb;
    let mut sb = [SuperBlock::new(); 2];
    let mut acc = [_mm512_setzero_ps(); JN];
    let mut acc_min = [_mm512_setzero_ps(); JN];
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within both groups; activation block `b` within
        // `32 * nb` values and `nb` sums.
        unsafe {
            let ([at0, at1], d, m) =
                pair_column::<F>((w, w1), (group_bytes, column_bytes), b, &mut sb);
            let qh = join(at0, at1);
            let mut part = [[_mm512_setzero_ps(); 4]; JN];
            for c in 0..4 {
                let v = join(at0.add(32 + 32 * c), at1.add(32 + 32 * c));
                // As `parts`, with 32-bit shifts (the same bits reach bit 4 of each byte).
                let (h_lo, h_hi) = match c {
                    0 => (_mm512_slli_epi32::<4>(qh), qh),
                    1 => (_mm512_slli_epi32::<3>(qh), _mm512_srli_epi32::<1>(qh)),
                    2 => (_mm512_slli_epi32::<2>(qh), _mm512_srli_epi32::<2>(qh)),
                    _ => (_mm512_slli_epi32::<1>(qh), _mm512_srli_epi32::<3>(qh)),
                };
                let nibbles_hi = _mm512_and_si512(_mm512_srli_epi32::<4>(v), low);
                let lo = _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(v, low), h_lo, bit4);
                let hi = _mm512_ternarylogic_epi32::<0xF8>(nibbles_hi, h_hi, bit4);
                for (h, v) in [lo, hi].into_iter().enumerate() {
                    for p in 0..4 {
                        let wv = _mm512_cvtepi32_ps(_mm512_and_si512(v, masks[p]));
                        for j in 0..JN {
                            let x = *xs[j].get_unchecked(32 * b + 16 * h + 4 * c + p);
                            let x = _mm512_set1_ps(x);
                            part[j][p] = if c == 0 && h == 0 {
                                _mm512_mul_ps(wv, x)
                            } else {
                                _mm512_fmadd_ps(wv, x, part[j][p])
                            };
                        }
                    }
                }
            }
            for j in 0..JN {
                let [a, e, f, g] = part[j];
                let dot = _mm512_add_ps(_mm512_add_ps(a, e), _mm512_add_ps(f, g));
                acc[j] = _mm512_fmadd_ps(d, dot, acc[j]);
                let sum = _mm512_set1_ps(*sums[j].get_unchecked(b));
                acc_min[j] = _mm512_fmadd_ps(m, sum, acc_min[j]);
            }
        }
    });
    for j in 0..JN {
        // SAFETY: `out[j]` holds sixteen floats.
        unsafe { _mm512_storeu_ps(out[j].as_mut_ptr(), _mm512_add_ps(acc[j], acc_min[j])) };
    }
}
