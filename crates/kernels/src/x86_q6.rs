//! AVX2 + FMA + F16C kernels over packed groups of eight `Q6_K` rows (the layout of
//! `packed.rs`: per super-block column the eight rows' `d` and 16 scales, then per 32-value
//! sub-block 64 bytes of transposed top bits and the eight rows' 16 nibble bytes).
//!
//! A 6-bit quant (`0..64`) is its nibble OR-ed with its top two bits at bits 4 and 5: one
//! constant shift of a sub-block's top-bit vector per pair of rows and a mask give them (the
//! layout puts rows `2k`, `2k + 1`'s bits at bits `2k`, `2k + 1`). A sub-block's values `t`
//! (low nibbles) and `t + 16` (high nibbles) are the two 16-value halves that `Q6_K`'s scales
//! cover, so the kernels keep the halves' sums apart and scale each by its `d * sc` (exact in
//! `f32`: an 11-bit significand times an 8-bit integer); the `-32` offset is applied to the
//! activations' sums per 16 values. The form is the `Q5` kernels' (`x86_q5.rs`) with a second
//! bit and two scales per block column:
//!
//! - 8-bit activations: `maddubs` + `madd` (or AVX-VNNI's `vpdpbusd`) of the unsigned quants
//!   with the signed activations per half (at most `2 * 63 * 127` per `i16`), the eight rows'
//!   sums of each half in one vector by `hadd`, the offset `32 * sum(a)` subtracted in `i32`,
//!   then one multiply by each half's `d * sc` and one FMA by the block's `y.d`.
//! - `f32` activations: the two-row vectors of bytes masked in place per byte of each 32-bit
//!   lane and converted (byte `k` at bit `8k`), times activations permuted as for `Q5`
//!   (`Q5_ORDER`, `Q5_SCALE`; `Q5_ORDER_AVX512` and `K_SCALE` for AVX-512), so every product
//!   is exactly `q * x`.
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time), a whole
//! group of `nb` block columns (whole super-blocks) and activation rows of `nb` blocks.

use std::arch::x86_64::*;

use super::packed::{Q6_COLUMN_BYTES, q6_scales_at, q6_sub_at};
use super::prefetch::prefetch_ahead;
use super::x86_shared::{Q8Block, hsum};

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

/// Block column `b` (32 values of eight rows) of a packed `Q6_K` group at `w`: where its
/// sub-block starts (64 bytes of top bits, then the quants), and the eight rows' `d * sc` of
/// its values `0..16` and `16..32`, in lane order. Reads the super-block's `d` into `d` at
/// each eighth column, so columns must be asked for in order from 0. Asks for the bytes a
/// few columns ahead to be fetched.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds the group's super-block column `b / 8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn column(w: *const u8, b: usize, d: &mut __m256) -> (*const u8, __m256, __m256) {
    // SAFETY: the column lies within the group (caller); a prefetch never faults.
    unsafe {
        let (s, j) = (b / 8, b % 8);
        let col = w.add(s * Q6_COLUMN_BYTES);
        // An eighth of the next super-block column per sub-block: all of it over eight.
        prefetch_ahead(col.add(j * Q6_COLUMN_BYTES / 8), Q6_COLUMN_BYTES / 8);
        if j == 0 {
            *d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
        }
        let scale = |t: usize| {
            let v = _mm_loadl_epi64(col.add(q6_scales_at(t)) as *const __m128i);
            _mm256_mul_ps(*d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)))
        };
        (col.add(q6_sub_at(j)), scale(2 * j), scale(2 * j + 1))
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

/// The 64 bytes of top bits of the sub-block at `at`: values `0..16` and `16..32`.
///
/// # Safety
/// AVX2; `at` points to a whole sub-block.
#[inline(always)]
unsafe fn top_bits(at: *const u8) -> [__m256i; 2] {
    // SAFETY: the sub-block's 64 bytes of top bits are readable (caller).
    unsafe { [0, 32].map(|o| _mm256_loadu_si256(at.add(o) as *const __m256i)) }
}

/// The quant bytes of rows `2k` and `2k + 1` of the sub-block at `at`, and its top bits
/// (`top`, [`top_bits`]) shifted so that those of the pair lie at bits 4 and 5 (other bits
/// not cleared): what [`pair_quants`] and [`pair_quants_vl`] join.
///
/// # Safety
/// AVX2; `at` points to a whole sub-block.
#[inline(always)]
unsafe fn pair_parts(at: *const u8, top: [__m256i; 2], k: usize) -> (__m256i, [__m256i; 2]) {
    // SAFETY: the pair's quants lie within the sub-block, and the caller runs with AVX2.
    unsafe {
        let v = _mm256_loadu_si256(at.add(64 + 32 * k) as *const __m256i);
        // Bits `2k`, `2k + 1` of each byte to bits 4, 5 (the 16-bit shifts move bits across
        // bytes only outside them).
        let shifted = top.map(|t| match k {
            0 => _mm256_slli_epi16::<4>(t),
            1 => _mm256_slli_epi16::<2>(t),
            2 => t,
            _ => _mm256_srli_epi16::<2>(t),
        });
        (v, shifted)
    }
}

/// The 6-bit quants (one per byte, `0..64`) of rows `2k` and `2k + 1` of the sub-block at
/// `at`, one row per 128-bit lane: values `0..16` (`lo`) and `16..32` (`hi`).
///
/// # Safety
/// `at` points to a whole sub-block, `top` is its [`top_bits`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pair_quants(at: *const u8, top: [__m256i; 2], k: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let (low, bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let (v, [t_lo, t_hi]) = pair_parts(at, top, k);
        (
            _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(t_lo, bits)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                _mm256_and_si256(t_hi, bits),
            ),
        )
    }
}

/// [`pair_quants`] with AVX-512VL's bit selects (`a | (b & c)` in one `vpternlogd`).
///
/// # Safety
/// As [`pair_quants`]; AVX-512F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
unsafe fn pair_quants_vl(at: *const u8, top: [__m256i; 2], k: usize) -> (__m256i, __m256i) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let (low, bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let (v, [t_lo, t_hi]) = pair_parts(at, top, k);
        let nibbles_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        (
            _mm256_ternarylogic_epi32::<0xF8>(_mm256_and_si256(v, low), t_lo, bits),
            _mm256_ternarylogic_epi32::<0xF8>(nibbles_hi, t_hi, bits),
        )
    }
}

/// The 8-bit kernel, once per instruction set: `avx2` (`maddubs` + `madd`), `vnni` (AVX-VNNI
/// `vpdpbusd`, one instruction for both; the integer sums are the same) and `avx512`
/// (`vnni` with AVX-512VL's 32 registers and bit selects).
macro_rules! q6_q8_kernel {
    ($name:ident, $features:tt, $vnni:expr, $pair:ident) => {
        /// A packed `Q6_K` group times `JN` rows of 8-bit activation blocks; the eight
        /// results of activation row `j` to `out[j]` in the lane order
        /// [`super::packed::LANE_ROWS`].
        ///
        /// # Safety
        /// The instance's features; `w` holds `nb` block columns (whole super-blocks); each
        /// row of `ys` `nb` blocks, scales and `2 nb` sums.
        #[target_feature(enable = $features)]
        #[allow(unused_unsafe)]
        pub(crate) unsafe fn $name<const JN: usize, Y: Q8Block>(
            w: *const u8,
            nb: usize,
            ys: &Q6Rows<'_, Y, JN>,
            out: &mut [[f32; 8]; JN],
        ) {
            let ones = _mm256_set1_epi16(1);
            let mut d = _mm256_setzero_ps();
            let mut acc = [_mm256_setzero_ps(); JN];
            for_each_column(nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b` and
                // its sums exist; the VNNI branch runs only in the instances with AVX-VNNI.
                unsafe {
                    let (at, d_lo, d_hi) = column(w, b, &mut d);
                    let top = top_bits(at);
                    let y: [[__m256i; 2]; JN] = std::array::from_fn(|j| {
                        let q = ys.blocks[j].get_unchecked(b).qs().as_ptr();
                        [0, 16].map(|at| {
                            _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                q.add(at) as *const __m128i
                            ))
                        })
                    });
                    let product = |q: __m256i, y: __m256i| {
                        if $vnni {
                            _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, y)
                        } else {
                            _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones)
                        }
                    };
                    // Each pair of rows decoded and used at once, each half's pair sums
                    // reduced as they come (`hadd`).
                    let mut even = [[_mm256_setzero_si256(); 2]; JN];
                    let mut h = [[[_mm256_setzero_si256(); 2]; 2]; JN];
                    for k in 0..4 {
                        let (lo, hi) = $pair(at, top, k);
                        for j in 0..JN {
                            let p = [product(lo, y[j][0]), product(hi, y[j][1])];
                            for half in 0..2 {
                                if k % 2 == 0 {
                                    even[j][half] = p[half];
                                } else {
                                    h[j][half][k / 2] = _mm256_hadd_epi32(even[j][half], p[half]);
                                }
                            }
                        }
                    }
                    for j in 0..JN {
                        // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS; the `-32` offset on
                        // the activations' sums per half, in `i32`.
                        let s32 = ys.s32[j].add(2 * b);
                        let sums = [0, 1].map(|half| {
                            let [a, c] = h[j][half];
                            let s = _mm256_hadd_epi32(a, c);
                            _mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_set1_epi32(*s32.add(half))))
                        });
                        let t = _mm256_fmadd_ps(d_hi, sums[1], _mm256_mul_ps(d_lo, sums[0]));
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

q6_q8_kernel!(q6_q8, "avx2,fma,f16c", false, pair_quants);
q6_q8_kernel!(q6_q8_vnni, "avx2,fma,f16c,avxvnni", true, pair_quants);
q6_q8_kernel!(
    q6_q8_avx512,
    "avx2,fma,f16c,avxvnni,avx512f,avx512vl",
    true,
    pair_quants_vl
);

/// A packed `Q6_K` group times `JN` rows of `f32` activations, each block in `Q5_ORDER`
/// scaled by `Q5_SCALE` (`xs`), with their sums per 16 values (`sums`, two a block).
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `nb` block columns (whole super-blocks); each `xs[j]`
/// `32 * nb` values and each `sums[j]` `2 * nb`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_f32<const JN: usize>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let masks: [__m256i; 4] = std::array::from_fn(|k| _mm256_set1_epi32(0x3F << (8 * k)));
    let mut d = _mm256_setzero_ps();
    let mut acc = [_mm256_setzero_ps(); JN];
    for_each_column(nb, |b| {
        // SAFETY: block column `b` lies within the group; activation block `b` within
        // `32 * nb` values and `2 * nb` sums.
        unsafe {
            let (at, d_lo, d_hi) = column(w, b, &mut d);
            let top = top_bits(at);
            let mut even = [[_mm256_setzero_ps(); 2]; JN];
            let mut h = [[[_mm256_setzero_ps(); 2]; 2]; JN];
            for k in 0..4 {
                let (lo, hi) = pair_quants(at, top, k);
                for (half, q) in [lo, hi].into_iter().enumerate() {
                    let wq: [__m256; 4] =
                        std::array::from_fn(|i| _mm256_cvtepi32_ps(_mm256_and_si256(q, masks[i])));
                    for j in 0..JN {
                        let x = xs[j].as_ptr().add(32 * b + 16 * half);
                        let xv = |at: usize| _mm256_broadcast_ps(&*(x.add(at) as *const __m128));
                        let mut t = _mm256_mul_ps(wq[0], xv(0));
                        for i in 1..4 {
                            t = _mm256_fmadd_ps(wq[i], xv(4 * i), t);
                        }
                        if k % 2 == 0 {
                            even[j][half] = t;
                        } else {
                            h[j][half][k / 2] = _mm256_hadd_ps(even[j][half], t);
                        }
                    }
                }
            }
            for j in 0..JN {
                // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS.
                let s = sums[j].as_ptr().add(2 * b);
                for (half, scale) in [d_lo, d_hi].into_iter().enumerate() {
                    let [a, c] = h[j][half];
                    let offset = _mm256_set1_ps(-32.0 * *s.add(half));
                    let dot = _mm256_add_ps(_mm256_hadd_ps(a, c), offset);
                    acc[j] = _mm256_fmadd_ps(scale, dot, acc[j]);
                }
            }
        }
    });
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
    }
}

/// [`q6_f32`] with 16-lane AVX-512 vectors, as `x86_q5::q5_f32_avx512`: a pair's two rows
/// in one vector (row `2k`'s values `0..16`, `16..32`, then row `2k + 1`'s), each lane's
/// four products summed and scaled by its row's and half's `d * sc` as they are added, the
/// lanes reduced once at the end; the `-32` offsets against the sums per 16 values in eight
/// lanes. Activations in `Q5_ORDER_AVX512` scaled by `K_SCALE`.
///
/// # Safety
/// As [`q6_f32`]; the CPU must have AVX-512F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(crate) unsafe fn q6_f32_avx512<const JN: usize>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let masks: [__m512i; 4] = std::array::from_fn(|k| _mm512_set1_epi32(0x3F << (8 * k)));
    // Qwords [lo.0 lo.1 hi.0 hi.1 lo.2 lo.3 hi.2 hi.3]: row 2k's 32 quants, then row 2k + 1's.
    let rows_of_pair = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    // From `[d * sc of values 0..16 | of 16..32]` (eight lanes each): lanes 0..4 take row
    // 2k's first (lane k), 4..8 its second (8 + k), 8..12 row 2k + 1's first (4 + k), 12..16
    // its second (12 + k).
    let scale_of_pair: [__m512i; 4] = std::array::from_fn(|k| {
        let k = k as i32;
        let (a, b, c, e) = (k, 8 + k, 4 + k, 12 + k);
        _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, e, e, e, e)
    });
    let mut d = _mm256_setzero_ps();
    let mut acc = [[_mm512_setzero_ps(); 4]; JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    for_each_column(nb, |b| {
        // SAFETY: block column `b` lies within the group; activation block `b` within
        // `32 * nb` values and `2 * nb` sums.
        unsafe {
            let (at, d_lo, d_hi) = column(w, b, &mut d);
            let d16 = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castpd256_pd512(_mm256_castps_pd(d_lo)),
                _mm256_castps_pd(d_hi),
            ));
            let top = top_bits(at);
            for k in 0..4 {
                let (lo, hi) = pair_quants_vl(at, top, k);
                let v = _mm512_permutex2var_epi64(
                    _mm512_castsi256_si512(lo),
                    rows_of_pair,
                    _mm512_castsi256_si512(hi),
                );
                let ds = _mm512_permutexvar_ps(scale_of_pair[k], d16);
                let wq: [__m512; 4] =
                    std::array::from_fn(|i| _mm512_cvtepi32_ps(_mm512_and_si512(v, masks[i])));
                for j in 0..JN {
                    let x = xs[j].as_ptr().add(32 * b);
                    // (`f64x4`: the same 256 bits, and AVX-512F, where `f32x8` needs DQ.)
                    let xv = |i: usize| {
                        _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                            x.add(8 * i) as *const f64
                        )))
                    };
                    let mut t = _mm512_mul_ps(wq[0], xv(0));
                    for (i, &wv) in wq.iter().enumerate().skip(1) {
                        t = _mm512_fmadd_ps(wv, xv(i), t);
                    }
                    acc[j][k] = _mm512_fmadd_ps(t, ds, acc[j][k]);
                }
            }
            for j in 0..JN {
                let s = sums[j].as_ptr().add(2 * b);
                let m = acc_min[j];
                let m = _mm256_fmadd_ps(d_lo, _mm256_set1_ps(-32.0 * *s), m);
                acc_min[j] = _mm256_fmadd_ps(d_hi, _mm256_set1_ps(-32.0 * *s.add(1)), m);
            }
        }
    });
    for j in 0..JN {
        let mut mins = [0f32; 8];
        // SAFETY: `mins` holds eight floats.
        unsafe { _mm256_storeu_ps(mins.as_mut_ptr(), acc_min[j]) };
        for k in 0..4 {
            let v = acc[j][k];
            let halves = [
                _mm512_castps512_ps256(v),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
            ];
            // Lanes of row 2k (lane k of the eight) then of row 2k + 1 (lane 4 + k).
            out[j][k] = hsum(halves[0]) + mins[k];
            out[j][4 + k] = hsum(halves[1]) + mins[4 + k];
        }
    }
}
