//! AVX2 + FMA + F16C kernels over packed groups of eight `Q5_0` / `Q5_1` / `Q5_K` rows (the
//! layout of `packed.rs`: per block column the eight `d` (and `m`) in lane order, the eight
//! rows' `qh`, then their `qs`; for `Q5_K` the scales of a super-block column's eight
//! sub-block columns in its header, `super::columns`).
//!
//! A 5-bit value is its 4-bit nibble OR-ed with its fifth bit at bit 4. The fifth bits were
//! transposed at load (`packed::q5_bit`): the 32 bytes of a block column's fifth bits, shifted
//! by one count per vector and masked with `0x10`, give the fifth bits of 32 values at bit 4
//! of their bytes (ggml spreads each row's `qh` with a shuffle, an OR and a compare instead).
//! `Q5_0`'s `-16` offset is an offset like `Q4_1`'s min, `m = -16 d`, and `Q5_K`'s min
//! `-(dmin * mn)` another, applied to activation sums, so the three types share one kernel
//! with unsigned quants (`0..32`).
//!
//! - 8-bit activations: two rows' quants per 32-byte load (as the `Q4_1` kernel), `maddubs`
//!   of the unsigned 5-bit quants with the signed activations (two products of at most
//!   `31 * 127` and their pair sum stay in `i16`), eight rows' sums in one vector by `hadd`,
//!   one FMA by `d * y.d` and one by `m * y.s` per block column.
//! - `f32` activations: the same two-row vectors of bytes are masked in place per byte of each
//!   32-bit lane and converted (byte `k` of lane `l` is value `4l + k` of its row, left at bit
//!   `8k`), times activations permuted to [`Q5_ORDER`] and scaled by [`Q5_SCALE`] (exact
//!   products), four at a time broadcast to both 128-bit lanes; one reduction per block column
//!   as for 8-bit activations.
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time), a whole
//! group of `nb` block columns and activation rows of `nb` blocks.

use std::arch::x86_64::*;

use super::columns::{SuperBlock, column, for_each_column};
use super::x86_shared::{Q8Block, Q8Rows, hsum};

/// The order of a block's 32 activations that the `f32` kernel reads: position `p` holds
/// value `16 h + 4 l + k` with `h = p / 16`, `k = p % 16 / 4`, `l = p % 4` (the four values
/// that byte `k` of the four 32-bit lanes of a row's 128-bit lane meet).
pub(crate) const Q5_ORDER: [usize; 32] = {
    let mut order = [0; 32];
    let mut p = 0;
    while p < 32 {
        order[p] = 16 * (p / 16) + 4 * (p % 4) + p % 16 / 4;
        p += 1;
    }
    order
};

/// The factor each position of a [`Q5_ORDER`]ed block is scaled by: byte `k`'s value is
/// converted at bit `8k`, so it needs `x * 2^-8k` (both exact).
pub(crate) const Q5_SCALE: [f32; 32] = {
    let mut scale = [0f32; 32];
    let mut p = 0;
    while p < 32 {
        scale[p] = 1.0 / (1u32 << (8 * (p % 16 / 4))) as f32;
        p += 1;
    }
    scale
};

/// The quant bytes of rows `2k` and `2k + 1` of the block column whose fifth bits start at
/// `at`, and its fifth bits `qh` shifted so that those of values `0..16` (then `16..32`) lie
/// at bit 4 (other bits not cleared): what [`pair_quants`] and [`pair_quants_vl`] join.
///
/// # Safety
/// AVX2; `at` points to a whole block column's fifth bits and quants.
#[inline(always)]
unsafe fn pair_parts(at: *const u8, qh: __m256i, k: usize) -> (__m256i, __m256i, __m256i) {
    // SAFETY: the pair's quants lie within the column, and the caller runs with AVX2.
    unsafe {
        (
            _mm256_loadu_si256(at.add(32 + 32 * k) as *const __m256i),
            _mm256_srl_epi16(qh, _mm_cvtsi32_si128(k as i32)),
            _mm256_sll_epi16(qh, _mm_cvtsi32_si128(k as i32 + 1)),
        )
    }
}

/// The 5-bit quants (one per byte, `0..32`) of rows `2k` and `2k + 1` of the block column
/// whose fifth bits start at `at` (its quants 32 bytes later), one row per 128-bit lane:
/// values `0..16` (`lo`) and `16..32` (`hi`). `qh` is the column's 32 bytes of transposed
/// fifth bits: those of values `0..16` of the two rows lie at bit `4 + k`, of values
/// `16..32` at bit `3 - k`.
///
/// # Safety
/// `at` points to a whole block column's fifth bits and quants.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pair_quants(at: *const u8, qh: __m256i, k: usize) -> (__m256i, __m256i) {
    // SAFETY: the pair's quants lie within the column (caller).
    unsafe {
        let (low, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let (v, h_lo, h_hi) = pair_parts(at, qh, k);
        (
            _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(h_lo, bit4)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                _mm256_and_si256(h_hi, bit4),
            ),
        )
    }
}

/// [`pair_quants`] with AVX-512VL's bit selects: the masked nibbles, the shifted fifth bits
/// and `0x10` joined in one `vpternlogd` (`a | (b & c)`) per vector instead of an AND and an
/// OR.
///
/// # Safety
/// As [`pair_quants`]; AVX-512F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
unsafe fn pair_quants_vl(at: *const u8, qh: __m256i, k: usize) -> (__m256i, __m256i) {
    // SAFETY: the pair's quants lie within the column (caller).
    unsafe {
        let (low, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let (v, h_lo, h_hi) = pair_parts(at, qh, k);
        let nibbles_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        (
            _mm256_ternarylogic_epi32::<0xF8>(_mm256_and_si256(v, low), h_lo, bit4),
            _mm256_ternarylogic_epi32::<0xF8>(nibbles_hi, h_hi, bit4),
        )
    }
}

/// The 8-bit kernel, once per instruction set: `avx2` (`maddubs` + `madd`) and `vnni`
/// (AVX-VNNI `vpdpbusd`, one instruction for both; the integer sums are the same).
macro_rules! q5_q8_kernel {
    ($name:ident, $features:tt, $vnni:expr, $pair:ident) => {
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
            let mut sb = SuperBlock::new();
            let mut acc = [_mm256_setzero_ps(); JN];
            let mut acc_min = [_mm256_setzero_ps(); JN];
            for_each_column::<F>(0..nb, |b| {
                // SAFETY: block column `b` lies within the group; activation block `b`
                // exists; the VNNI branch runs only in the instance with AVX-VNNI.
                unsafe {
                    let (at, d, m) = column::<F>(w, b, &mut sb);
                    let qh = _mm256_loadu_si256(at as *const __m256i);
                    let y: [[__m256i; 2]; JN] = std::array::from_fn(|j| {
                        let q = ys.blocks[j].get_unchecked(b).qs().as_ptr();
                        [0, 16].map(|at| {
                            _mm256_broadcastsi128_si256(
                                _mm_loadu_si128(q.add(at) as *const __m128i),
                            )
                        })
                    });
                    // Each pair of rows decoded and used at once, the pairs' sums reduced as
                    // they come (`hadd`): few registers live (16 without AVX-512VL).
                    let mut even = [_mm256_setzero_si256(); JN];
                    let mut h = [[_mm256_setzero_si256(); 2]; JN];
                    for k in 0..4 {
                        let (lo, hi) = $pair(at, qh, k);
                        for j in 0..JN {
                            let [ylo, yhi] = y[j];
                            let p = if $vnni {
                                let zero = _mm256_setzero_si256();
                                _mm256_dpbusd_avx_epi32(
                                    _mm256_dpbusd_avx_epi32(zero, lo, ylo),
                                    hi,
                                    yhi,
                                )
                            } else {
                                let p16 = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(lo, ylo),
                                    _mm256_maddubs_epi16(hi, yhi),
                                );
                                _mm256_madd_epi16(p16, ones)
                            };
                            if k % 2 == 0 {
                                even[j] = p;
                            } else {
                                h[j][k / 2] = _mm256_hadd_epi32(even[j], p);
                            }
                        }
                    }
                    for j in 0..JN {
                        // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS.
                        let sums = _mm256_cvtepi32_ps(_mm256_hadd_epi32(h[j][0], h[j][1]));
                        let yd = _mm256_set1_ps(*ys.d[j].add(b));
                        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(d, yd), sums, acc[j]);
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

q5_q8_kernel!(q5_q8, "avx2,fma,f16c", false, pair_quants);
q5_q8_kernel!(q5_q8_vnni, "avx2,fma,f16c,avxvnni", true, pair_quants);
q5_q8_kernel!(
    q5_q8_avx512,
    "avx2,fma,f16c,avxvnni,avx512f,avx512vl",
    true,
    pair_quants_vl
);

/// A `Q5_1` group (or another format `F` of its form) times `JN` rows of `f32` activations, each block in
/// [`Q5_ORDER`] scaled by [`Q5_SCALE`] (`xs`), with their sums per block (`sums`).
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `nb` block columns; each `xs[j]` `32 * nb` values and each
/// `sums[j]` `nb`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_f32<const JN: usize, const F: u8>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let masks: [__m256i; 4] = std::array::from_fn(|k| _mm256_set1_epi32(0x1F << (8 * k)));
    let mut sb = SuperBlock::new();
    let mut acc = [_mm256_setzero_ps(); JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within the group; activation block `b` within
        // `32 * nb` values and `nb` sums.
        unsafe {
            let (at, d, m) = column::<F>(w, b, &mut sb);
            let qh = _mm256_loadu_si256(at as *const __m256i);
            let mut p = [[_mm256_setzero_ps(); 4]; JN];
            for k in 0..4 {
                let (lo, hi) = pair_quants(at, qh, k);
                let wl: [__m256; 4] =
                    std::array::from_fn(|i| _mm256_cvtepi32_ps(_mm256_and_si256(lo, masks[i])));
                let wh: [__m256; 4] =
                    std::array::from_fn(|i| _mm256_cvtepi32_ps(_mm256_and_si256(hi, masks[i])));
                for j in 0..JN {
                    let x = xs[j].as_ptr().add(32 * b);
                    let xv = |at: usize| _mm256_broadcast_ps(&*(x.add(at) as *const __m128));
                    let mut t = _mm256_mul_ps(wl[0], xv(0));
                    for i in 1..4 {
                        t = _mm256_fmadd_ps(wl[i], xv(4 * i), t);
                    }
                    for i in 0..4 {
                        t = _mm256_fmadd_ps(wh[i], xv(16 + 4 * i), t);
                    }
                    p[j][k] = t;
                }
            }
            for j in 0..JN {
                // Lanes [r0 r2 r4 r6 | r1 r3 r5 r7] = LANE_ROWS.
                let sums_w = _mm256_hadd_ps(
                    _mm256_hadd_ps(p[j][0], p[j][1]),
                    _mm256_hadd_ps(p[j][2], p[j][3]),
                );
                acc[j] = _mm256_fmadd_ps(d, sums_w, acc[j]);
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

/// The order of a block's 32 activations that the AVX-512 `f32` kernel reads: position
/// `p = 8k + 4h + l` holds value `16h + 4l + k`, so that the eight values byte `k` of a row's
/// two halves meet lie together (one 256-bit broadcast for both rows of a pair).
pub(crate) const Q5_ORDER_AVX512: [usize; 32] = {
    let mut order = [0; 32];
    let mut p = 0;
    while p < 32 {
        let (k, h, l) = (p / 8, p % 8 / 4, p % 4);
        order[p] = 16 * h + 4 * l + k;
        p += 1;
    }
    order
};

/// [`q5_f32`] with 16-lane AVX-512 vectors. A pair's two rows sit in one vector (values
/// `0..16` and `16..32` of row `2k` in the low half, of row `2k + 1` in the high half); per
/// block and activation row the four products of a lane are summed, scaled by the row's `d`
/// as they are added to the lane's partial sum, and the lanes are reduced once, at the end
/// (measured against multiplying `d` into the quants first: as fast in a prefill, 10% faster
/// in decode). Activations in [`Q5_ORDER_AVX512`] scaled by
/// [`K_SCALE`](super::x86_shared::K_SCALE) (position `8k + ...` was converted at bit `8k`, as in
/// the K-quant kernels).
///
/// # Safety
/// As [`q5_f32`]; the CPU must have AVX-512F.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(crate) unsafe fn q5_f32_avx512<const JN: usize, const F: u8>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let masks: [__m512i; 4] = std::array::from_fn(|k| _mm512_set1_epi32(0x1F << (8 * k)));
    // Qwords [lo.0 lo.1 hi.0 hi.1 lo.2 lo.3 hi.2 hi.3]: row 2k's 32 quants, then row 2k + 1's.
    let rows_of_pair = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    // Lanes 0..8 take the scale of lane k of the eight (row 2k), lanes 8..16 of lane 4 + k.
    let scale_of_pair: [__m512i; 4] = std::array::from_fn(|k| {
        let (a, b) = (k as i32, 4 + k as i32);
        _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
    });
    let mut sb = SuperBlock::new();
    let mut acc = [[_mm512_setzero_ps(); 4]; JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within the group; activation block `b` within
        // `32 * nb` values and `nb` sums.
        unsafe {
            let (at, d, m) = column::<F>(w, b, &mut sb);
            let d512 = _mm512_castps256_ps512(d);
            let qh = _mm256_loadu_si256(at as *const __m256i);
            for k in 0..4 {
                let (lo, hi) = pair_quants_vl(at, qh, k);
                let v = _mm512_permutex2var_epi64(
                    _mm512_castsi256_si512(lo),
                    rows_of_pair,
                    _mm512_castsi256_si512(hi),
                );
                let ds = _mm512_permutexvar_ps(scale_of_pair[k], d512);
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
                let sum = _mm256_set1_ps(*sums[j].get_unchecked(b));
                acc_min[j] = _mm256_fmadd_ps(m, sum, acc_min[j]);
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
