//! AVX2 + FMA + F16C kernels over packed groups of eight `Q6_K` rows (the layout of
//! `packed.rs`: per super-block column the eight rows' `d` and 16 scales, then per 32-value
//! sub-block 64 bytes of transposed top bits and four vectors of quant bytes with the eight
//! rows in their lanes), and of `Q3_K` and `Q2_K` rows packed in the same shape
//! (`packed_low_k.rs`; the kernels' `const F` says which form).
//!
//! A 6-bit quant (`0..64`) is its nibble OR-ed with its top two bits at bits 4 and 5: one
//! constant shift of a sub-block's top-bit vector per quant vector and a mask give them. Byte
//! `4 s + p` of quant vector `c` holds values `4c + p` (low nibble) and `16 + 4c + p` (high
//! nibble) of the row in lane `s`: the two 16-value halves that `Q6_K`'s scales cover, kept
//! apart and scaled each by its `d * sc` (exact in `f32`: an 11-bit significand times an
//! 8-bit integer). With the rows in the lanes, products with activations broadcast to every
//! lane leave each row's sums in its own lane: no horizontal adds. The `-32` offset is
//! applied to the activations' sums per 16 values.
//!
//! `Q3_K` (`d * sc * (q - 4)`, `q` in `0..8`) is the same arithmetic with 3-bit quants and a
//! `-4` offset: each of `Q6_K`'s quant vectors is made from a two-bit vector and the third
//! bits. `Q2_K` (`d * sc * q - dmin * m`, `q` in `0..4`) has no offset: each half's
//! `dmin * m` times the activations' sum is taken off apart.
//!
//! - 8-bit activations: `vpdpbusd` (AVX-VNNI) of the unsigned quants with four signed
//!   activations broadcast, or `maddubs` (two vectors' `i16` sums added, at most
//!   `4 * 63 * 127`) and one `madd`; the offset `32 * sum(a)` subtracted in `i32`, then one
//!   multiply by each half's `d * sc` and one FMA by the block's `y.d`.
//! - `f32` activations: each quant vector masked in place per byte of its 32-bit lanes and
//!   converted (byte `p` at bit `8p`), times one activation in every lane, scaled by `2^-8p`
//!   (`x86_shared::BYTE_SCALE`; every product exactly `q * x`), in four chains a half;
//!   the AVX2 instance reads each activation in eight copies, as `x86_q5`'s.
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time), a whole
//! group of `nb` block columns (whole super-blocks) and activation rows of `nb` blocks.

use std::arch::x86_64::*;

use super::packed::{Q6_COLUMN_BYTES, q6_scales_at, q6_sub_at};
use super::packed_low_k::{
    Q2_COLUMN_BYTES, Q3_COLUMN_BYTES, q2_scales_at, q2_sub_at, q3_scales_at, q3_sub_at,
};
use super::prefetch::{fast_kernels, prefetch_ahead, prefetch_next_pair};
use super::x86_shared::{Q8Block, activation};

/// `JN` rows of 8-bit activation blocks for the `Q6_K` kernels: the blocks, their scales,
/// and `32 *` the sum of each 16 quants (two a block: what the `-32` offset multiplies).
pub(crate) struct Q6Rows<'a, Y, const JN: usize> {
    /// The blocks of each row.
    pub blocks: [&'a [Y]; JN],
    /// Each row's block scales (as many as blocks).
    pub d: [*const f32; JN],
    /// Each row's `32 * sum` of each 16 quants (twice as many as blocks).
    pub s32: [*const i32; JN],
}

/// The packed forms the kernels read (their `const F` parameter): `Q6_K`, and `Q3_K` and
/// `Q2_K` in its shape (`packed_low_k.rs`).
pub(crate) const Q6: u8 = 6;
/// See [`Q6`].
pub(crate) const Q3: u8 = 3;
/// See [`Q6`].
pub(crate) const Q2: u8 = 2;

/// Bytes of a super-block column of the packed form `F`.
const fn column_bytes<const F: u8>() -> usize {
    match F {
        Q6 => Q6_COLUMN_BYTES,
        Q3 => Q3_COLUMN_BYTES,
        _ => Q2_COLUMN_BYTES,
    }
}

/// The offset a quant's value is taken from: `q - 32` (`Q6_K`), `q - 4` (`Q3_K`), none
/// (`Q2_K`, whose rows subtract `dmin * m` instead).
const fn offset<const F: u8>() -> i32 {
    match F {
        Q6 => 32,
        Q3 => 4,
        _ => 0,
    }
}

/// A block column's place and factors (see [`column()`]).
struct Column {
    /// Where its sub-block starts.
    at: *const u8,
    /// The eight rows' `d * sc` of values `0..16` and `16..32`, in lane order.
    scale: [__m256; 2],
    /// `Q2_K`: the eight rows' `dmin * m` of the two halves (else unused).
    min: [__m256; 2],
}

/// Block column `b` (32 values of eight rows) of a packed group of form `F` at `w` (see
/// [`Column`]). Reads the super-block's `d` (and `dmin`) into `d` at each eighth column, so
/// columns must be asked for in order from 0. Asks for the bytes a few columns ahead to be
/// fetched where `prefetch` says so (always for the `f32` kernels; for the 8-bit ones where
/// [`fast_kernels`] does).
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds the group's super-block column `b / 8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn column<const F: u8>(
    w: *const u8,
    b: usize,
    d: &mut [__m256; 2],
    prefetch: bool,
) -> Column {
    // SAFETY: the column lies within the group (caller); a prefetch never faults.
    unsafe {
        let (s, j) = (b / 8, b % 8);
        let bytes = column_bytes::<F>();
        let col = w.add(s * bytes);
        // An eighth of the next super-block column per sub-block: all of it over eight.
        if prefetch {
            prefetch_ahead(col.add(j * bytes / 8), bytes / 8);
        }
        let half = |at: usize| _mm256_cvtph_ps(_mm_loadu_si128(col.add(at) as *const __m128i));
        if j == 0 {
            d[0] = half(0);
            if F == Q2 {
                d[1] = half(16);
            }
        }
        if F == Q2 {
            // One byte a row and 16 values: the scale in its low four bits, the min above.
            let parts = [2 * j, 2 * j + 1].map(|t| {
                let v = _mm_loadl_epi64(col.add(q2_scales_at(t)) as *const __m128i);
                let v = _mm256_cvtepu8_epi32(v);
                let sc = _mm256_and_si256(v, _mm256_set1_epi32(0x0F));
                let m = _mm256_srli_epi32::<4>(v);
                (
                    _mm256_mul_ps(d[0], _mm256_cvtepi32_ps(sc)),
                    _mm256_mul_ps(d[1], _mm256_cvtepi32_ps(m)),
                )
            });
            return Column {
                at: col.add(q2_sub_at(j)),
                scale: [parts[0].0, parts[1].0],
                min: [parts[0].1, parts[1].1],
            };
        }
        let scale = |t: usize| {
            let at = if F == Q3 {
                q3_scales_at(t)
            } else {
                q6_scales_at(t)
            };
            let v = _mm_loadl_epi64(col.add(at) as *const __m128i);
            _mm256_mul_ps(d[0], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)))
        };
        let sub = if F == Q3 { q3_sub_at(j) } else { q6_sub_at(j) };
        Column {
            at: col.add(sub),
            scale: [scale(2 * j), scale(2 * j + 1)],
            min: [_mm256_setzero_ps(); 2],
        }
    }
}

/// Calls `f(b)` for each block column of `nb` (whole super-blocks), in an inner loop of
/// eight so that the sub-block index is a constant of the unrolled loop (as
/// `columns::for_each_column` does for the other K-quants).
#[inline(always)]
fn for_each_column(nb: usize, mut f: impl FnMut(usize)) {
    debug_assert!(nb.is_multiple_of(8), "whole super-blocks");
    for s in 0..nb / 8 {
        for j in 0..8 {
            f(8 * s + j);
        }
    }
}

/// The 64 bytes of top bits of the `Q6_K` sub-block at `at`: values `0..16` and `16..32`;
/// for `Q3_K` the 32 bytes of third bits (both halves' in one); none for `Q2_K`.
///
/// # Safety
/// AVX2; `at` points to a whole sub-block.
#[inline(always)]
unsafe fn top_bits<const F: u8>(at: *const u8) -> [__m256i; 2] {
    // SAFETY: the sub-block's top bits are readable (caller).
    unsafe {
        match F {
            Q6 => [0, 32].map(|o| _mm256_loadu_si256(at.add(o) as *const __m256i)),
            Q3 => {
                let t = _mm256_loadu_si256(at as *const __m256i);
                [t, t]
            }
            _ => [_mm256_setzero_si256(); 2],
        }
    }
}

/// The 3-bit (`Q3_K`, `F = Q3`) or 2-bit (`Q2_K`) quants, one per byte, of the sub-block at
/// `at` (`top`: its [`top_bits`]) that `Q6_K`'s quant vector `c` would hold: byte `4 s + p`
/// value `4c + p` (`lo`) and `16 + 4c + p` (`hi`) of the row in lane `s`. The two low bits
/// lie at bits `2 (c % 2)` (`lo`) and `4 + 2 (c % 2)` (`hi`) of two-bit vector `c / 2`, the
/// third bits at bits `c` and `4 + c` of the third bits (`packed_low_k.rs`); the 16-bit
/// shifts move bits across bytes only where the masks clear them.
///
/// # Safety
/// AVX2; `at` points to a whole sub-block.
#[inline(always)]
unsafe fn quants_low<const F: u8>(
    at: *const u8,
    top: [__m256i; 2],
    c: usize,
) -> (__m256i, __m256i) {
    // SAFETY: the vector lies within the sub-block, and the caller runs with AVX2.
    unsafe {
        let (pair, third) = (_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x04));
        let pairs_at = if F == Q3 { 32 } else { 0 };
        let v = _mm256_loadu_si256(at.add(pairs_at + 32 * (c / 2)) as *const __m256i);
        let (v_lo, v_hi) = if c.is_multiple_of(2) {
            (v, _mm256_srli_epi16::<4>(v))
        } else {
            (_mm256_srli_epi16::<2>(v), _mm256_srli_epi16::<6>(v))
        };
        let (lo2, hi2) = (_mm256_and_si256(v_lo, pair), _mm256_and_si256(v_hi, pair));
        if F == Q2 {
            return (lo2, hi2);
        }
        let t = top[0];
        // Bit `c` to bit 2, and bit `4 + c` to bit 2.
        let (t_lo, t_hi) = match c {
            0 => (_mm256_slli_epi16::<2>(t), _mm256_srli_epi16::<2>(t)),
            1 => (_mm256_slli_epi16::<1>(t), _mm256_srli_epi16::<3>(t)),
            2 => (t, _mm256_srli_epi16::<4>(t)),
            _ => (_mm256_srli_epi16::<1>(t), _mm256_srli_epi16::<5>(t)),
        };
        (
            _mm256_or_si256(lo2, _mm256_and_si256(t_lo, third)),
            _mm256_or_si256(hi2, _mm256_and_si256(t_hi, third)),
        )
    }
}

/// Quant vector `c` of the sub-block at `at`, and its top bits (`top`, [`top_bits`])
/// shifted so that those of its values lie at bits 4 and 5 (other bits not cleared): what
/// [`quants`] and [`quants_vl`] join.
///
/// # Safety
/// AVX2; `at` points to a whole sub-block.
#[inline(always)]
unsafe fn parts(at: *const u8, top: [__m256i; 2], c: usize) -> (__m256i, [__m256i; 2]) {
    // SAFETY: the vector lies within the sub-block, and the caller runs with AVX2.
    unsafe {
        let v = _mm256_loadu_si256(at.add(64 + 32 * c) as *const __m256i);
        // Bits `2c`, `2c + 1` of each byte to bits 4, 5 (the 16-bit shifts move bits across
        // bytes only outside them).
        let shifted = top.map(|t| match c {
            0 => _mm256_slli_epi16::<4>(t),
            1 => _mm256_slli_epi16::<2>(t),
            2 => t,
            _ => _mm256_srli_epi16::<2>(t),
        });
        (v, shifted)
    }
}

/// The 6-bit quants (one per byte, `0..64`) of quant vector `c` of the sub-block at `at`:
/// byte `4 s + p` value `4c + p` (`lo`) and `16 + 4c + p` (`hi`) of the row in lane `s`.
///
/// # Safety
/// `at` points to a whole sub-block, `top` is its [`top_bits`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quants<const F: u8>(at: *const u8, top: [__m256i; 2], c: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if F != Q6 {
            return quants_low::<F>(at, top, c);
        }
        let (low, bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let (v, [t_lo, t_hi]) = parts(at, top, c);
        (
            _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(t_lo, bits)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                _mm256_and_si256(t_hi, bits),
            ),
        )
    }
}

/// [`quants`] with AVX-512VL's bit selects (`a | (b & c)` in one `vpternlogd`).
///
/// # Safety
/// As [`quants`]; AVX-512F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
unsafe fn quants_vl<const F: u8>(at: *const u8, top: [__m256i; 2], c: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if F != Q6 {
            return quants_low::<F>(at, top, c);
        }
        let (low, bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let (v, [t_lo, t_hi]) = parts(at, top, c);
        let nibbles_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        (
            _mm256_ternarylogic_epi32::<0xF8>(_mm256_and_si256(v, low), t_lo, bits),
            _mm256_ternarylogic_epi32::<0xF8>(nibbles_hi, t_hi, bits),
        )
    }
}

/// The 8-bit kernel, once per instruction set: `avx2` (`maddubs` + `madd`), `vnni` (AVX-VNNI
/// `vpdpbusd`; the integer sums are the same) and `avx512` (`vpdpbusd` in its AVX-512 VNNI
/// encoding, with AVX-512VL's 32 registers and bit selects).
macro_rules! q6_q8_kernel {
    ($name:ident, $features:tt, $vnni:expr, $dpbusd:ident, $quants:ident) => {
        /// A packed `Q6_K` group times `JN` rows of 8-bit activation blocks; the eight
        /// results of activation row `j` to `out[j]` in the lane order
        /// [`super::packed::LANE_ROWS`].
        ///
        /// # Safety
        /// The instance's features; `w` holds `nb` block columns (whole super-blocks); each
        /// row of `ys` `nb` blocks, scales and `2 nb` sums.
        #[target_feature(enable = $features)]
        #[allow(unused_unsafe)]
        pub(crate) unsafe fn $name<const JN: usize, Y: Q8Block, const F: u8>(
            w: *const u8,
            nb: usize,
            ys: &Q6Rows<'_, Y, JN>,
            out: &mut [[f32; 8]; JN],
        ) {
            let ones = _mm256_set1_epi16(1);
            let mut d = [_mm256_setzero_ps(); 2];
            let prefetch = fast_kernels();
            let mut acc = [_mm256_setzero_ps(); JN];
            for_each_column(nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b` and
                // its sums exist; the VNNI branch runs only in the instances with a `vpdpbusd`.
                unsafe {
                    let Column {
                        at,
                        scale: [d_lo, d_hi],
                        min,
                    } = column::<F>(w, b, &mut d, prefetch);
                    let top = top_bits::<F>(at);
                    let q: [*const u8; JN] =
                        std::array::from_fn(|j| ys.blocks[j].get_unchecked(b).qs().as_ptr().cast());
                    let mut sums = [[_mm256_setzero_si256(); 2]; JN];
                    // Without VNNI, two vectors' `i16` pair sums added before each `madd`.
                    let mut first = [[_mm256_setzero_si256(); 2]; JN];
                    for c in 0..4 {
                        let (lo, hi) = $quants::<F>(at, top, c);
                        for j in 0..JN {
                            // The four activations each lane's four quants meet, per half.
                            let y = [0, 16].map(|h| {
                                _mm256_set1_epi32(
                                    (q[j].add(h + 4 * c) as *const i32).read_unaligned(),
                                )
                            });
                            for (h, v) in [lo, hi].into_iter().enumerate() {
                                if $vnni {
                                    sums[j][h] = $dpbusd(sums[j][h], v, y[h]);
                                } else if c % 2 == 0 {
                                    first[j][h] = _mm256_maddubs_epi16(v, y[h]);
                                } else {
                                    let p = _mm256_add_epi16(
                                        first[j][h],
                                        _mm256_maddubs_epi16(v, y[h]),
                                    );
                                    sums[j][h] =
                                        _mm256_add_epi32(sums[j][h], _mm256_madd_epi16(p, ones));
                                }
                            }
                        }
                    }
                    for j in 0..JN {
                        // The `-32` (`-4`, none) offset on the activations' sums per half, in
                        // `i32`; `Q2_K`'s mins times those sums below.
                        let s32 = ys.s32[j].add(2 * b);
                        let s = [0, 1].map(|h| {
                            let offset = _mm256_set1_epi32(*s32.add(h) / 32 * offset::<F>());
                            _mm256_cvtepi32_ps(_mm256_sub_epi32(sums[j][h], offset))
                        });
                        let mut t = _mm256_fmadd_ps(d_hi, s[1], _mm256_mul_ps(d_lo, s[0]));
                        if F == Q2 {
                            for (h, m) in min.into_iter().enumerate() {
                                let sum = _mm256_set1_ps((*s32.add(h) / 32) as f32);
                                t = _mm256_fnmadd_ps(m, sum, t);
                            }
                        }
                        let yd = _mm256_set1_ps(*ys.d[j].add(b));
                        acc[j] = _mm256_fmadd_ps(t, yd, acc[j]);
                    }
                }
            });
            for j in 0..JN {
                // SAFETY: `out[j]` holds eight floats.
                unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
            }
        }
    };
}

q6_q8_kernel!(
    q6_q8,
    "avx2,fma,f16c",
    false,
    _mm256_dpbusd_avx_epi32,
    quants
);
q6_q8_kernel!(
    q6_q8_vnni,
    "avx2,fma,f16c,avxvnni",
    true,
    _mm256_dpbusd_avx_epi32,
    quants
);
// `vpdpbusd` in its AVX-512 encoding (VNNI with VL): Zen 4 has it and not AVX-VNNI's.
q6_q8_kernel!(
    q6_q8_avx512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    true,
    _mm256_dpbusd_epi32,
    quants_vl
);

/// The `f32` kernel, once per instruction set: `avx2`, and `avx512` (AVX-512VL's 32
/// registers and bit selects, still 256-bit vectors: eight rows in the lanes).
macro_rules! q6_f32_kernel {
    ($name:ident, $features:tt, $quants:ident, $copies:literal) => {
        /// A packed `Q6_K` group times `JN` rows of `f32` activations, each scaled by
        /// `x86_shared::BYTE_SCALE` (`xs`), with their sums per 16 values (`sums`, two a
        /// block); the eight results of activation row `j` to `out[j]` in the lane order
        /// [`super::packed::LANE_ROWS`].
        ///
        /// # Safety
        /// The instance's features; `w` holds `nb` block columns (whole super-blocks); each
        /// `xs[j]` `32 * nb` values (each eight times over in the AVX2 instance) and each
        /// `sums[j]` `2 * nb`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<const JN: usize, const F: u8>(
            w: *const u8,
            nb: usize,
            xs: [&[f32]; JN],
            sums: [&[f32]; JN],
            out: &mut [[f32; 8]; JN],
        ) {
            let masks: [__m256i; 4] = std::array::from_fn(|p| _mm256_set1_epi32(0x3F << (8 * p)));
            let mut d = [_mm256_setzero_ps(); 2];
            let mut acc = [_mm256_setzero_ps(); JN];
            for_each_column(nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b`
                // within `32 * nb` values and `2 * nb` sums.
                unsafe {
                    let Column { at, scale, min } = column::<F>(w, b, &mut d, true);
                    let top = top_bits::<F>(at);
                    // Per row and half, one chain per byte position `p` (independent FMAs).
                    let mut part = [[[_mm256_setzero_ps(); 4]; 2]; JN];
                    for c in 0..4 {
                        let (lo, hi) = $quants::<F>(at, top, c);
                        for (h, v) in [lo, hi].into_iter().enumerate() {
                            for p in 0..4 {
                                let wv = _mm256_cvtepi32_ps(_mm256_and_si256(v, masks[p]));
                                for j in 0..JN {
                                    let i = 32 * b + 16 * h + 4 * c + p;
                                    let x = activation::<$copies>(xs[j].as_ptr(), i);
                                    part[j][h][p] = if c == 0 {
                                        _mm256_mul_ps(wv, x)
                                    } else {
                                        _mm256_fmadd_ps(wv, x, part[j][h][p])
                                    };
                                }
                            }
                        }
                    }
                    for j in 0..JN {
                        let s = sums[j].as_ptr().add(2 * b);
                        for (h, scale) in scale.into_iter().enumerate() {
                            let [a, e, f, g] = part[j][h];
                            let dot = _mm256_add_ps(_mm256_add_ps(a, e), _mm256_add_ps(f, g));
                            let sum = *s.add(h);
                            let offset = _mm256_set1_ps(-(offset::<F>() as f32) * sum);
                            acc[j] = _mm256_fmadd_ps(scale, _mm256_add_ps(dot, offset), acc[j]);
                            if F == Q2 {
                                let sum = _mm256_set1_ps(sum);
                                acc[j] = _mm256_fnmadd_ps(min[h], sum, acc[j]);
                            }
                        }
                    }
                }
            });
            for j in 0..JN {
                // SAFETY: `out[j]` holds eight floats.
                unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
            }
        }
    };
}

q6_f32_kernel!(q6_f32, "avx2,fma,f16c", quants, true);
q6_f32_kernel!(
    q6_f32_avx512,
    "avx2,fma,f16c,avx512f,avx512vl",
    quants_vl,
    false
);

/// [`q6_f32_avx512`] for two groups at once (`w` and `w + group_bytes`) in 16-lane vectors,
/// as `x86_q5::q5_f32_x16`: each lane runs exactly the operations of the 8-lane kernel (the
/// same bits), the FMAs of a further activation row cover sixteen weight rows. The sixteen
/// results of activation row `j` to `out[j]`: the first group's in lane order, then the
/// second's.
///
/// # Safety
/// AVX-512F and VL; `w` holds two consecutive groups of `nb` block columns (whole
/// super-blocks), `group_bytes` apart; each `xs[j]` `32 * nb` values and each `sums[j]`
/// `2 * nb`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(crate) unsafe fn q6_f32_x16<const JN: usize>(
    w: *const u8,
    group_bytes: usize,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 16]; JN],
) {
    use super::x86_q5::{join, join_ps};
    let masks: [__m512i; 4] = std::array::from_fn(|p| _mm512_set1_epi32(0x3F << (8 * p)));
    let (low, bits) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    // SAFETY: the second group lies `group_bytes` on (caller).
    let w1 = unsafe { w.add(group_bytes) };
    // Bytes per block column (the next pair's prefetch below), divided once.
    let column_bytes = group_bytes / nb;
    let mut d = [[_mm256_setzero_ps(); 2]; 2];
    let mut acc = [_mm512_setzero_ps(); JN];
    for_each_column(nb, |b| {
        // SAFETY: block column `b` lies within both groups; activation block `b` within
        // `32 * nb` values and `2 * nb` sums.
        unsafe {
            prefetch_next_pair(w1, group_bytes, column_bytes, b);
            let Column {
                at: at0,
                scale: [d0_lo, d0_hi],
                ..
            } = column::<Q6>(w, b, &mut d[0], true);
            let Column {
                at: at1,
                scale: [d1_lo, d1_hi],
                ..
            } = column::<Q6>(w1, b, &mut d[1], true);
            let scales = [join_ps(d0_lo, d1_lo), join_ps(d0_hi, d1_hi)];
            let top = [0, 32].map(|o| join(at0.add(o), at1.add(o)));
            let mut part = [[[_mm512_setzero_ps(); 4]; 2]; JN];
            for c in 0..4 {
                let v = join(at0.add(64 + 32 * c), at1.add(64 + 32 * c));
                // As `parts`, with 32-bit shifts (the same bits reach bits 4 and 5).
                let [t_lo, t_hi] = top.map(|t| match c {
                    0 => _mm512_slli_epi32::<4>(t),
                    1 => _mm512_slli_epi32::<2>(t),
                    2 => t,
                    _ => _mm512_srli_epi32::<2>(t),
                });
                let nibbles_hi = _mm512_and_si512(_mm512_srli_epi32::<4>(v), low);
                let lo = _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(v, low), t_lo, bits);
                let hi = _mm512_ternarylogic_epi32::<0xF8>(nibbles_hi, t_hi, bits);
                for (h, v) in [lo, hi].into_iter().enumerate() {
                    for p in 0..4 {
                        let wv = _mm512_cvtepi32_ps(_mm512_and_si512(v, masks[p]));
                        for j in 0..JN {
                            let x = *xs[j].get_unchecked(32 * b + 16 * h + 4 * c + p);
                            let x = _mm512_set1_ps(x);
                            part[j][h][p] = if c == 0 {
                                _mm512_mul_ps(wv, x)
                            } else {
                                _mm512_fmadd_ps(wv, x, part[j][h][p])
                            };
                        }
                    }
                }
            }
            for j in 0..JN {
                let s = sums[j].as_ptr().add(2 * b);
                for (h, scale) in scales.into_iter().enumerate() {
                    let [a, e, f, g] = part[j][h];
                    let dot = _mm512_add_ps(_mm512_add_ps(a, e), _mm512_add_ps(f, g));
                    let offset = _mm512_set1_ps(-32.0 * *s.add(h));
                    acc[j] = _mm512_fmadd_ps(scale, _mm512_add_ps(dot, offset), acc[j]);
                }
            }
        }
    });
    for j in 0..JN {
        // SAFETY: `out[j]` holds sixteen floats.
        unsafe { _mm512_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
    }
}
