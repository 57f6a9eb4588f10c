//! Kernels for the 256-value `Q6_K` super-blocks, read in place from the file's rows (no
//! repacking: a super-block's scales are per 16 values, so there is no per-block `f16` to
//! gather across rows, and each row is reduced horizontally once, not once per block).
//! `Q4_K` and `Q5_K` are repacked at load into the `Q4_1` and `Q5_1` group forms
//! (`packed.rs`, `columns.rs`) and run those kernels.
//!
//! Each kernel decodes a super-block once for `JN` activation rows, and the arithmetic of one
//! output does not depend on `JN` (a row gives the same bits alone and in a batch).
//!
//! - `f32` activations (AVX2, and a 16-lane AVX-512 form): 32 quant bytes are loaded once
//!   and each 6-bit value is masked *in place* in its 32-bit lane (byte `k` of lane `l` is
//!   value `4l + k`, left at bit `8k`), converted, and multiplied with activations permuted
//!   into [`K_ORDER`] and scaled by [`K_SCALE`] (`2^-8k`), so every product is exactly
//!   `q * x`. Each 16 values' dot product is scaled by its `d * scale` as it is added (one
//!   FMA); the `-32` offset is applied to activation sums per 16 values, once per super-block.
//! - 8-bit activations (AVX2, and AVX-512BW with 64 values a vector), read in the wide form
//!   (`super::q8::WideQ8`: quants contiguous, each block's scale repeated over its lanes, sums
//!   per 16 values): `maddubs` of the unsigned quants with the signed activations, `madd` with
//!   the 16-value scales, converted and scaled per block as they are added; the `-32` offset
//!   once per super-block against the sums per 16 values, so no second `maddubs` by 32.
//!
//! Every function requires AVX2, FMA and F16C (the caller checks them at run time; the
//! AVX-512 ones AVX-512F and BW as well), rows of whole super-blocks, and activation rows at
//! least as long.

use std::arch::x86_64::*;

use super::prefetch::prefetch_ahead;

/// An activation block of 32 values quantized to 8 bits (the crate's `BlockQ8`): its quants,
/// which the 8-bit `Q5` kernels read (its scale and sum come as plain rows, [`Q8Rows`]). A
/// trait, so that these kernels stay near the leaves: the dispatcher names them, they name
/// nothing of the crate but the leaf `prefetch.rs`.
pub(crate) trait Q8Block {
    /// The 32 quants.
    fn qs(&self) -> &[i8; 32];
}

/// A little-endian `f16` at `p`, widened with F16C.
///
/// # Safety
/// `p` points to two readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller passes a pointer to two readable bytes.
    unsafe {
        let bits = u16::from_le_bytes([*p, *p.add(1)]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }
}

/// Sum of the eight lanes (in the order every 8-lane reduction of the crate uses).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Bytes of one `Q6_K` super-block.
const Q6_K_BYTES: usize = 210;

/// The order of a 32-value sub-block's activations that the `f32` kernels read: position `p`
/// holds value `4 * (p % 8) + p / 8` (8-lane vector `k` meets byte `k` of each 32-bit lane).
pub(crate) const K_ORDER: [usize; 32] = {
    let mut order = [0; 32];
    let mut p = 0;
    while p < 32 {
        order[p] = 4 * (p % 8) + p / 8;
        p += 1;
    }
    order
};

/// The factor each position of a [`K_ORDER`]ed sub-block is scaled by: vector `k` reads its
/// value at bit `8k`, so it multiplies `q * 2^8k` and needs `x * 2^-8k` (both exact).
pub(crate) const K_SCALE: [f32; 32] = {
    let mut scale = [0f32; 32];
    let mut p = 0;
    while p < 32 {
        scale[p] = 1.0 / (1u32 << (8 * (p / 8))) as f32;
        p += 1;
    }
    scale
};

/// `mask << 8k` in every 32-bit lane, for `k` in `0..4`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_masks(mask: i32) -> [__m256i; 4] {
    std::array::from_fn(|k| _mm256_set1_epi32(mask << (8 * k)))
}

/// The four in-place values of each byte position of `v`, as `f32` (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn decode(v: __m256i, masks: &[__m256i; 4]) -> [__m256; 4] {
    std::array::from_fn(|k| _mm256_cvtepi32_ps(_mm256_and_si256(v, masks[k])))
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

/// Reorder each 64 [`K_ORDER`]ed activations (two 32-value pieces) for [`q6_k_f32_avx512`]:
/// position `16k + 8h + l` takes position `32h + 8k + l`, so that the values byte `k` of both
/// sub-blocks meets lie in one 16-lane load.
pub(crate) fn interleave_k_pairs(x: &mut [f32]) {
    for chunk in x.chunks_exact_mut(64) {
        let old: [f32; 64] = std::array::from_fn(|p| chunk[p]);
        for k in 0..4 {
            for h in 0..2 {
                chunk[16 * k + 8 * h..][..8].copy_from_slice(&old[32 * h + 8 * k..][..8]);
            }
        }
    }
}

/// `JN` rows of 8-bit activation blocks, with their scales `d` and sums `s` also laid out
/// as plain `f32` rows (one per block), so that eight blocks' come in one load each.
pub(crate) struct Q8Rows<'a, Y, const JN: usize> {
    /// The blocks of each row.
    pub blocks: [&'a [Y]; JN],
    /// Each row's block scales (as many as blocks).
    pub d: [*const f32; JN],
    /// Each row's block sums (as many as blocks).
    pub s: [*const f32; JN],
}

/// The four 32-value sub-blocks `k` of half `h` of a `Q6_K` super-block at `b`, one 6-bit
/// value (0..64) per byte, in value order.
///
/// # Safety
/// `b` points to a whole super-block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_half(b: *const u8, h: usize) -> [__m256i; 4] {
    // SAFETY: within the super-block (caller).
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let top = _mm256_set1_epi8(0x30);
        let ql0 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
        let ql1 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
        let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
        [
            _mm256_or_si256(
                _mm256_and_si256(ql0, low),
                _mm256_and_si256(_mm256_slli_epi16::<4>(qh), top),
            ),
            _mm256_or_si256(
                _mm256_and_si256(ql1, low),
                _mm256_and_si256(_mm256_slli_epi16::<2>(qh), top),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                _mm256_and_si256(qh, top),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                _mm256_and_si256(_mm256_srli_epi16::<2>(qh), top),
            ),
        ]
    }
}

/// The sixteen `d * scale` of a `Q6_K` super-block at `p`, eight per half (one per 16 values).
///
/// # Safety
/// `p` points to a whole super-block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_scales(p: *const u8) -> [__m256; 2] {
    // SAFETY: the scales (bytes 192..208) and `d` (208..210) lie within the super-block.
    unsafe {
        let d = _mm256_set1_ps(f16_at(p.add(208)));
        let i8x8 = |q: *const u8| {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q as *const __m128i)))
        };
        [
            _mm256_mul_ps(d, i8x8(p.add(192))),
            _mm256_mul_ps(d, i8x8(p.add(200))),
        ]
    }
}

/// `acc += scales . sums` for a super-block's sixteen activation sums at `s` (what the `-32`
/// offset of its quants multiplies).
///
/// # Safety
/// `s` points to sixteen readable floats.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_offsets(scales: &[__m256; 2], s: *const f32, acc: &mut __m256) {
    // SAFETY: the caller passes sixteen readable floats.
    unsafe {
        *acc = _mm256_fmadd_ps(scales[0], _mm256_loadu_ps(s), *acc);
        *acc = _mm256_fmadd_ps(scales[1], _mm256_loadu_ps(s.add(8)), *acc);
    }
}

/// A `Q6_K` row times `JN` rows of `f32` activations in [`K_ORDER`] scaled by [`K_SCALE`]
/// (`xs`), with their sums per 16 values (`sums`).
///
/// # Safety
/// AVX2, FMA and F16C; `row` holds whole super-blocks; each `xs[j]` as many values and each
/// `sums[j]` one per 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_f32<const JN: usize>(
    row: &[u8],
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [f32],
) {
    let masks = lane_masks(0x3F);
    // In K_ORDER, lanes 0..4 of a vector hold values 0..16 of the sub-block, lanes 4..8
    // values 16..32: sub-block k of a half takes scales 2k and 2k + 1 of the half.
    let picks: [__m256i; 4] = std::array::from_fn(|k| {
        let (a, b) = (2 * k as i32, 2 * k as i32 + 1);
        _mm256_setr_epi32(a, a, a, a, b, b, b, b)
    });
    let mut acc = [_mm256_setzero_ps(); JN];
    let mut acc_offset = [_mm256_setzero_ps(); JN];
    for (i, b) in row.chunks_exact(Q6_K_BYTES).enumerate() {
        // SAFETY: `b` is one super-block; activation super-block `i` lies within `xs[j]`
        // and `sums[j]` (`16 * i + 16`).
        unsafe {
            let p = b.as_ptr();
            // The rows of a task follow each other: this streams its weights ahead.
            prefetch_ahead(p, Q6_K_BYTES);
            let halves = q6_scales(p);
            for j in 0..JN {
                q6_offsets(&halves, sums[j].as_ptr().add(16 * i), &mut acc_offset[j]);
            }
            for (h, &scales) in halves.iter().enumerate() {
                let q = q6_half(p, h);
                for k in 0..4 {
                    let w = decode(q[k], &masks);
                    let scale = _mm256_permutevar8x32_ps(scales, picks[k]);
                    for j in 0..JN {
                        let x = xs[j].as_ptr().add(256 * i + 128 * h + 32 * k);
                        acc[j] = _mm256_fmadd_ps(dot4(&w, x), scale, acc[j]);
                    }
                }
            }
        }
    }
    for j in 0..JN {
        out[j] = hsum(acc[j]) - 32.0 * hsum(acc_offset[j]);
    }
}

/// [`q6_k_f32`] with 16-lane AVX-512 vectors: two 32-value
/// sub-blocks per vector, activations interleaved per 64 by [`interleave_k_pairs`], each
/// lane's four products summed and scaled by its 16 values' `d * scale` as they are added.
///
/// # Safety
/// As [`q6_k_f32`]; the CPU must have AVX-512F.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(crate) unsafe fn q6_k_f32_avx512<const JN: usize>(
    row: &[u8],
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [f32],
) {
    let masks: [__m512i; 4] = std::array::from_fn(|k| _mm512_set1_epi32(0x3F << (8 * k)));
    // Sub-blocks 2p and 2p + 1 of a half take its 16-value scales 4p .. 4p + 4, four lanes each.
    let picks: [__m512i; 2] = std::array::from_fn(|p| {
        let a = 4 * p as i32;
        let (b, c, d) = (a + 1, a + 2, a + 3);
        _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d)
    });
    let mut acc = [[_mm512_setzero_ps(); 2]; JN];
    let mut acc_offset = [_mm256_setzero_ps(); JN];
    for (i, b) in row.chunks_exact(Q6_K_BYTES).enumerate() {
        // SAFETY: `b` is one super-block; activation super-block `i` lies within `xs[j]`
        // and `sums[j]` (`16 * i + 16`).
        unsafe {
            let p = b.as_ptr();
            // The rows of a task follow each other: this streams its weights ahead.
            prefetch_ahead(p, Q6_K_BYTES);
            let halves = q6_scales(p);
            for j in 0..JN {
                q6_offsets(&halves, sums[j].as_ptr().add(16 * i), &mut acc_offset[j]);
            }
            for (h, &scales) in halves.iter().enumerate() {
                let q = q6_half(p, h);
                let scales = _mm512_castps256_ps512(scales);
                for (pair, &pick) in picks.iter().enumerate() {
                    let v = _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(q[2 * pair]),
                        q[2 * pair + 1],
                    );
                    let scale = _mm512_permutexvar_ps(pick, scales);
                    let w: [__m512; 4] =
                        std::array::from_fn(|k| _mm512_cvtepi32_ps(_mm512_and_si512(v, masks[k])));
                    for j in 0..JN {
                        let x = xs[j].as_ptr().add(256 * i + 128 * h + 64 * pair);
                        let mut t = _mm512_mul_ps(w[0], _mm512_loadu_ps(x));
                        for (k, &wk) in w.iter().enumerate().skip(1) {
                            t = _mm512_fmadd_ps(wk, _mm512_loadu_ps(x.add(16 * k)), t);
                        }
                        acc[j][pair] = _mm512_fmadd_ps(t, scale, acc[j][pair]);
                    }
                }
            }
        }
    }
    for j in 0..JN {
        let total = _mm512_add_ps(acc[j][0], acc[j][1]);
        out[j] = _mm512_reduce_add_ps(total) - 32.0 * hsum(acc_offset[j]);
    }
}

/// The start of an 8-bit kernel's `Q6_K` super-block `i` at `p`: asks for the weights ahead
/// (the rows follow each other), reads its `d` and its sixteen 16-value scales (widened to
/// `i16`), and adds `d * y.d * (scales . sums)` per block to `acc[j]`: what the `-32` offset
/// of its quants multiplies, from the activations' sums per 16 values, eight blocks a vector.
///
/// # Safety
/// AVX2, FMA and F16C; `p` points to a whole super-block; each row of `ys` has super-block `i`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_start<const JN: usize>(
    p: *const u8,
    ys: &WideRows<JN>,
    i: usize,
    acc: &mut [__m256; JN],
) -> (f32, __m256i) {
    // SAFETY: the super-block and the activations' scales and sums of super-block `i` exist
    // (caller); a prefetch never faults.
    unsafe {
        prefetch_ahead(p, Q6_K_BYTES);
        let d = f16_at(p.add(208));
        let scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let dv = _mm256_set1_ps(d);
        for j in 0..JN {
            let yd = _mm256_mul_ps(dv, _mm256_loadu_ps(ys.d[j].add(8 * i)));
            let s = _mm256_loadu_si256(ys.s16[j].add(16 * i) as *const __m256i);
            let o = _mm256_cvtepi32_ps(_mm256_madd_epi16(scales, s));
            acc[j] = _mm256_fmadd_ps(o, yd, acc[j]);
        }
        (d, scales)
    }
}

/// `Q6_K` rows (`rows`, `row_bytes` each; row `r`'s results at `out[r * stride..]`) times
/// `JN` rows of 8-bit activations in the wide form ([`WideRows`]), with 32-byte vectors:
/// each 32 values' `maddubs` of the unsigned quants with the signed activations and `madd`
/// with their two 16-value scales (one `vpermd` and one `vpshufb` of the super-block's
/// sixteen, for all activation rows), converted and multiplied by the block's activation
/// scale as they are added; each super-block's sum multiplied by its `d`. The `-32` offset is
/// applied per super-block against the activations' sums per 16 values (`madd` with the
/// scales, one FMA by `d * y.d`), as in [`q6_k_q8_avx512`].
///
/// # Safety
/// AVX2, FMA and F16C; `rows` holds whole super-blocks and each row of `ys` as many values
/// (and scales, sums).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_q8<const JN: usize>(
    rows: &[u8],
    row_bytes: usize,
    ys: &WideRows<JN>,
    out: &mut [f32],
    stride: usize,
) {
    // Byte pairs 0..2 (the first `i16` of a 32-bit lane) in the low 128-bit lane, 2..4 in the
    // high one: the two 16-value scales of a 32-value sub-block, eight 16-bit lanes each.
    let spread = _mm256_setr_epi8(
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
        2, 3,
    );
    for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
        let mut acc = [_mm256_setzero_ps(); JN];
        let mut acc_offset = [_mm256_setzero_ps(); JN];
        for (i, b) in row.chunks_exact(Q6_K_BYTES).enumerate() {
            // SAFETY: `b` is one super-block; activation values `256 * i..256 * i + 256`
            // (and their scales and sums) exist (caller).
            unsafe {
                let p = b.as_ptr();
                let (d, scales) = q6_start(p, ys, i, &mut acc_offset);
                let d = _mm256_set1_ps(d);
                // Two partial sums per activation row (even and odd sub-blocks).
                let mut sb = [[_mm256_setzero_ps(); 2]; JN];
                for h in 0..2 {
                    let q = q6_half(p, h);
                    for (k, &q) in q.iter().enumerate() {
                        let blk = 4 * h + k;
                        let pair =
                            _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(blk as i32));
                        let scale = _mm256_shuffle_epi8(pair, spread);
                        for j in 0..JN {
                            let y = _mm256_load_si256(
                                ys.qs[j].add(32 * (8 * i + blk)) as *const __m256i
                            );
                            let p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scale);
                            let yd = _mm256_load_ps(ys.d8[j].add(8 * (8 * i + blk)));
                            sb[j][k % 2] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), yd, sb[j][k % 2]);
                        }
                    }
                }
                for j in 0..JN {
                    acc[j] = _mm256_fmadd_ps(_mm256_add_ps(sb[j][0], sb[j][1]), d, acc[j]);
                }
            }
        }
        for j in 0..JN {
            out[r * stride + j] = hsum(acc[j]) - 32.0 * hsum(acc_offset[j]);
        }
    }
}

/// `JN` rows of 8-bit activations in the wide form (`super::q8::WideQ8`), each pointer at
/// the row's start.
pub(crate) struct WideRows<const JN: usize> {
    /// The quants.
    pub qs: [*const i8; JN],
    /// Each block's scale eight times.
    pub d8: [*const f32; JN],
    /// Each block's scale once.
    pub d: [*const f32; JN],
    /// The sum of each 16 quants.
    pub s16: [*const i16; JN],
}

/// [`q6_k_q8`] for several weight rows (`rows`, `row_bytes` each; row `r`'s results at
/// `out[r * stride..]`) with 64-byte vectors, 64 values of a row a vector (two activation
/// blocks).
///
/// - The quants: `ql`'s 64 bytes of a 128-value half give the low nibbles of values `0..64`
///   (masked) and `64..128` (shifted), `qh`'s 32 bytes broadcast to both 256-bit halves and
///   masked and shifted per half (`vpsllvw`, `vpsrlvw`) their top two bits, and a bit select
///   (`vpternlogd`) joins them.
/// - Each 64 values: `maddubs` of the unsigned quants with the signed activations, `madd`
///   with the 16-value scales (exact `i32`, at most `2 * 2 * 63 * 127 * 128` a lane),
///   converted and multiplied by the lanes' activation scales (each block's eight lanes, one
///   load); each super-block's sum is then multiplied by its `d` as it is added.
/// - The `-32` offset is applied per super-block against the activations' sums per 16 values:
///   `madd` of those with the scales, one FMA by `d * y.d`.
///
/// # Safety
/// AVX-512F and AVX-512BW (`super::simd::Simd::Avx512`) besides AVX2, FMA and F16C;
/// `rows` holds whole super-blocks and each row of `ys` as many values (and scales, sums).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(crate) unsafe fn q6_k_q8_avx512<const JN: usize>(
    rows: &[u8],
    row_bytes: usize,
    ys: &WideRows<JN>,
    out: &mut [f32],
    stride: usize,
) {
    let low = _mm512_set1_epi8(0x0F);
    // Values 0..32 of a half take bits 0..2 of `qh` (to bits 4..6: shift 4), values 32..64
    // bits 2..4 (shift 2), values 64..96 bits 4..6 (in place), values 96..128 bits 6..8
    // (right by 2); masked before the 16-bit shifts so that nothing crosses into bits 6..8.
    let halves =
        |a: i32, b: i32| _mm512_inserti64x4::<1>(_mm512_set1_epi32(a), _mm256_set1_epi32(b));
    let mask_lo = halves(0x0303_0303, 0x0C0C_0C0C);
    let shift_lo = halves(0x0004_0004, 0x0002_0002);
    let mask_hi = halves(0x3030_3030, 0xC0C0_C0C0_u32 as i32);
    let shift_hi = halves(0, 0x0002_0002);
    // Vector `t` (values 64t..64t + 64) takes the scales of 16-value groups 4t..4t + 4, one
    // per 128-bit lane.
    let scale_picks: [__m512i; 4] = std::array::from_fn(|t| {
        let lanes: [i16; 32] = std::array::from_fn(|l| (4 * t + l / 8) as i16);
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(lanes.as_ptr() as *const __m512i) }
    });
    for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
        let mut acc = [_mm512_setzero_ps(); JN];
        let mut acc_offset = [_mm256_setzero_ps(); JN];
        for (i, b) in row.chunks_exact(Q6_K_BYTES).enumerate() {
            // SAFETY: `b` is one super-block; activation values `256 * i..256 * i + 256`
            // (and their scales and sums) exist (caller).
            unsafe {
                let p = b.as_ptr();
                let (d, scales) = q6_start(p, ys, i, &mut acc_offset);
                let scales512 = _mm512_castsi256_si512(scales);
                let mut sb = [_mm512_setzero_ps(); JN];
                for h in 0..2 {
                    let ql = _mm512_loadu_si512(p.add(64 * h) as *const __m512i);
                    let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        p.add(128 + 32 * h) as *const __m256i
                    ));
                    // Bit select (0xE4: bits of `low` from the first operand, the rest from
                    // the second) of the nibbles and the top two bits.
                    let top_lo = _mm512_sllv_epi16(_mm512_and_si512(qh, mask_lo), shift_lo);
                    let top_hi = _mm512_srlv_epi16(_mm512_and_si512(qh, mask_hi), shift_hi);
                    let v = [
                        _mm512_ternarylogic_epi32::<0xE4>(ql, top_lo, low),
                        _mm512_ternarylogic_epi32::<0xE4>(_mm512_srli_epi16::<4>(ql), top_hi, low),
                    ];
                    for (k, &v) in v.iter().enumerate() {
                        let t = 2 * h + k;
                        let scale = _mm512_permutexvar_epi16(scale_picks[t], scales512);
                        for j in 0..JN {
                            let at = 256 * i + 64 * t;
                            let y = _mm512_load_si512(ys.qs[j].add(at) as *const __m512i);
                            let p32 = _mm512_madd_epi16(_mm512_maddubs_epi16(v, y), scale);
                            let yd = _mm512_load_ps(ys.d8[j].add(at / 4));
                            sb[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p32), yd, sb[j]);
                        }
                    }
                }
                let d = _mm512_set1_ps(d);
                for j in 0..JN {
                    acc[j] = _mm512_fmadd_ps(sb[j], d, acc[j]);
                }
            }
        }
        for j in 0..JN {
            out[r * stride + j] = _mm512_reduce_add_ps(acc[j]) - 32.0 * hsum(acc_offset[j]);
        }
    }
}
