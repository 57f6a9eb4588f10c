//! `Q2_K` and `Q3_K` rows decoded to `f32` with AVX2: the same values, bit for bit, as
//! [`kindle_gguf::quant::dequantize`] (each is `d * scale` times a small integer, exact, less
//! `dmin * min` for `Q2_K`: one rounding either way), 32 at a time instead of one.
//!
//! The products read these rows as any dense row: [`dot`](super::dot) decodes a weight row
//! once into a buffer in L1 and runs the dense kernels on it for every activation row, and
//! the prefill product decodes its panels' rows the same way.

use kindle_gguf::quant::{self, GgmlType};

use super::q8::BlockQ8;
use super::simd::Simd;

/// Whether `ty` is decoded here.
pub(crate) fn low_k(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K)
}

/// `row` (whole blocks of `ty`) decoded into `out`: with AVX2 for `Q2_K` and `Q3_K` where
/// `simd` has it, else by [`quant::dequantize`].
///
/// # Panics
/// If `row` does not hold `out.len()` values of `ty` (the caller checked the shape).
pub(crate) fn dequantize(ty: GgmlType, simd: Simd, row: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd.any() && low_k(ty) {
        assert_whole_blocks(ty, row, out.len());
        // SAFETY: a SIMD level is only chosen where AVX2, FMA and F16C were detected; the
        // sizes were checked.
        unsafe {
            match ty {
                GgmlType::Q2_K => x86::q2_k(row, out),
                _ => x86::q3_k(row, out),
            }
        }
        return;
    }
    let _ = simd;
    quant::dequantize(ty, row, out).expect("shape checked at construction");
}

/// One `Q2_K` or `Q3_K` row times one row of `f32` activations, the weights decoded in
/// registers (AVX2 where `simd` has it, else decoded a block at a time): per 16 values the
/// quants' products with the activations are summed in eight lanes, then scaled by the
/// sub-block's `d * scale` into the row's sums (and `Q2_K`'s `dmin * min` times the 16
/// activations' sum taken off apart). Every activation row goes through the same operations,
/// so a row gives the same bits in any batch.
pub(crate) fn dot_f32(ty: GgmlType, simd: Simd, row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd.any() && low_k(ty) {
        assert_whole_blocks(ty, row, x.len());
        // SAFETY: as in [`dequantize`].
        return unsafe {
            match ty {
                GgmlType::Q2_K => x86::dot_q2_k(row, x),
                _ => x86::dot_q3_k(row, x),
            }
        };
    }
    let _ = simd;
    super::scalar::dot_blocks_f32(ty, row, x)
}

/// One `Q2_K` or `Q3_K` row times one row of 8-bit activations (32-value blocks: a block
/// meets the 32 quants of one bit pair of a half), with AVX2 (`maddubs`, then `madd` with the
/// 16-value scales); `None` without it ([`Kernel::select`](super::dot::Kernel::select) gives
/// these types 8-bit kernels only where AVX2 runs).
pub(crate) fn dot_q8(ty: GgmlType, simd: Simd, row: &[u8], y: &[BlockQ8]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    if simd.any() && low_k(ty) {
        assert_whole_blocks(ty, row, 32 * y.len());
        // SAFETY: as in [`dequantize`].
        return Some(unsafe {
            match ty {
                GgmlType::Q2_K => x86::dot_q2_k_q8(row, y),
                _ => x86::dot_q3_k_q8(row, y),
            }
        });
    }
    let _ = (ty, simd, row, y);
    None
}

/// Panics unless `row` is whole super-blocks of `ty` holding `values` values (what the SIMD
/// kernels' unchecked loads rely on).
#[cfg(target_arch = "x86_64")]
fn assert_whole_blocks(ty: GgmlType, row: &[u8], values: usize) {
    let blocks = values / quant::QK_K;
    assert!(
        values == blocks * quant::QK_K && row.len() == blocks * ty.type_size(),
        "{ty}: {} bytes for {values} values",
        row.len()
    );
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use kindle_gguf::quant::{BLOCK_Q2_K_BYTES, BLOCK_Q3_K_BYTES, QK_K, unpack_scales_q3_k};

    use super::BlockQ8;

    fn f16(lo: u8, hi: u8) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
    }

    /// Bit pair `j` (bits `2j..2j + 2`) of each of the 32 bytes `qs`: the 2-bit quants of one
    /// bit pair of a half.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn bit_pair(qs: __m256i, j: usize) -> __m256i {
        let shifted = _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * j as i32));
        _mm256_and_si256(shifted, _mm256_set1_epi8(3))
    }

    /// `Q3_K`'s 32 quants (`-4..4`) of bit pair `j` of half `half`: the low bits, less 4 where
    /// the high bit (bit `4 half + j` of `hmask`) is clear.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q3_quants(qs: __m256i, hmask: __m256i, half: usize, j: usize) -> __m256i {
        let bit = _mm256_set1_epi8(1 << (4 * half + j));
        let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
        _mm256_sub_epi8(
            bit_pair(qs, j),
            _mm256_and_si256(clear, _mm256_set1_epi8(4)),
        )
    }

    /// The 32 quants of bit pair `j` of a half as four vectors of eight `f32` times their
    /// sub-blocks' factors (`scale[0]` for the first 16, `scale[1]` for the others), less
    /// `min` (the same for both halves' 16 when zero), stored at `out`.
    ///
    /// # Safety
    /// AVX2 and FMA; `out` holds 32 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn store(q: __m256i, scale: [f32; 2], min: [f32; 2], out: *mut f32) {
        let bytes: [__m128i; 2] = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
        for (h, &b) in bytes.iter().enumerate() {
            let (dl, ml) = (_mm256_set1_ps(scale[h]), _mm256_set1_ps(min[h]));
            for (k, part) in [b, _mm_srli_si128::<8>(b)].into_iter().enumerate() {
                let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                let w = _mm256_sub_ps(_mm256_mul_ps(dl, v), ml);
                // SAFETY: 32 values at `out` (caller).
                unsafe { _mm256_storeu_ps(out.add(16 * h + 8 * k), w) };
            }
        }
    }

    /// A `Q2_K` row: `(d * scale) * q - dmin * min` per 16 values.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `out.len() / 256` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q2_k(row: &[u8], out: &mut [f32]) {
        for (b, o) in row
            .chunks_exact(BLOCK_Q2_K_BYTES)
            .zip(out.chunks_exact_mut(QK_K))
        {
            let (d, dmin) = (f16(b[80], b[81]), f16(b[82], b[83]));
            for half in 0..2 {
                // SAFETY: bytes 16..80 of the block are its quants.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(16 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = bit_pair(qs, j);
                    let s = 8 * half + 2 * j;
                    let scale = [d * f32::from(b[s] & 15), d * f32::from(b[s + 1] & 15)];
                    let min = [dmin * f32::from(b[s] >> 4), dmin * f32::from(b[s + 1] >> 4)];
                    // SAFETY: values `128 half + 32 j ..` lie within the block's 256.
                    unsafe { store(q, scale, min, o.as_mut_ptr().add(128 * half + 32 * j)) };
                }
            }
        }
    }

    /// The 32 quants `q` (bytes) of bit pair `j` of a half times the 32 activations at `x`:
    /// each 16's sum of products times its factor `scale[h]` added to `acc[h]`, and for
    /// `Q2_K` (`MIN`) each 16's activation sum times `min[h]` added to `acc_min[h]`.
    ///
    /// # Safety
    /// AVX2 and FMA; `x` holds 32 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dot32<const MIN: bool>(
        q: __m256i,
        x: *const f32,
        scale: [f32; 2],
        min: [f32; 2],
        acc: &mut [__m256; 2],
        acc_min: &mut [__m256; 2],
    ) {
        let bytes = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
        for (h, &b) in bytes.iter().enumerate() {
            let v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
            let v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(b)));
            // SAFETY: 32 values at `x` (caller).
            let (x0, x1) = unsafe {
                (
                    _mm256_loadu_ps(x.add(16 * h)),
                    _mm256_loadu_ps(x.add(16 * h + 8)),
                )
            };
            let p = _mm256_fmadd_ps(v1, x1, _mm256_mul_ps(v0, x0));
            acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(scale[h]), p, acc[h]);
            if MIN {
                let s = _mm256_add_ps(x0, x1);
                acc_min[h] = _mm256_fmadd_ps(_mm256_set1_ps(min[h]), s, acc_min[h]);
            }
        }
    }

    /// The eight lanes of `v` summed.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    /// Sixteen small integers (bytes, sign-extended where `SIGNED`) times `d`, as `f32`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn times<const SIGNED: bool>(bytes: __m128i, d: f32) -> [f32; 16] {
        let widen = |v: __m128i| {
            if SIGNED {
                _mm256_cvtepi8_epi32(v)
            } else {
                _mm256_cvtepu8_epi32(v)
            }
        };
        let d = _mm256_set1_ps(d);
        let mut out = [0f32; 16];
        for (k, half) in [bytes, _mm_srli_si128::<8>(bytes)].into_iter().enumerate() {
            let v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(widen(half)));
            // SAFETY: `out` holds 16 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), v) };
        }
        out
    }

    /// A `Q2_K` row times `x` (see [`super::dot_f32`]).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `x.len() / 256` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q2_k(row: &[u8], x: &[f32]) -> f32 {
        let nibble = _mm_set1_epi8(15);
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut acc_min = [_mm256_setzero_ps(); 2];
        for (b, xs) in row.chunks_exact(BLOCK_Q2_K_BYTES).zip(x.chunks_exact(QK_K)) {
            let (d, dmin) = (f16(b[80], b[81]), f16(b[82], b[83]));
            // SAFETY: bytes 0..16 of the block are its scales and mins.
            let packed = unsafe { _mm_loadu_si128(b.as_ptr() as *const _) };
            let scale = times::<false>(_mm_and_si128(packed, nibble), d);
            let min = times::<false>(_mm_and_si128(_mm_srli_epi16::<4>(packed), nibble), dmin);
            for half in 0..2 {
                // SAFETY: bytes 16..80 of the block are its quants.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(16 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = bit_pair(qs, j);
                    let s = 8 * half + 2 * j;
                    let at = xs.as_ptr().wrapping_add(128 * half + 32 * j);
                    let factors = ([scale[s], scale[s + 1]], [min[s], min[s + 1]]);
                    // SAFETY: values `128 half + 32 j ..` lie within the block's 256.
                    unsafe { dot32::<true>(q, at, factors.0, factors.1, &mut acc, &mut acc_min) };
                }
            }
        }
        hsum(_mm256_add_ps(acc[0], acc[1])) - hsum(_mm256_add_ps(acc_min[0], acc_min[1]))
    }

    /// The sixteen 6-bit scales of a `Q3_K` block's 12 `scales` bytes, minus 32, as bytes:
    /// [`unpack_scales_q3_k`] a word at a time, as
    /// ggml's `dequantize_row_q3_K` does.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q3_k_scales(s: &[u8]) -> __m128i {
        let word =
            |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        let (a0, a1, tmp) = (word(0), word(1), word(2));
        let (low, top) = (0x0f0f_0f0f, 0x0303_0303);
        let words = [
            (a0 & low) | ((tmp & top) << 4),
            (a1 & low) | (((tmp >> 2) & top) << 4),
            ((a0 >> 4) & low) | (((tmp >> 4) & top) << 4),
            ((a1 >> 4) & low) | (((tmp >> 6) & top) << 4),
        ];
        let v = _mm_setr_epi32(
            words[0] as i32,
            words[1] as i32,
            words[2] as i32,
            words[3] as i32,
        );
        _mm_sub_epi8(v, _mm_set1_epi8(32))
    }

    /// A `Q3_K` row times `x` (see [`super::dot_f32`]).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `x.len() / 256` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q3_k(row: &[u8], x: &[f32]) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut unused = [_mm256_setzero_ps(); 2];
        for (b, xs) in row.chunks_exact(BLOCK_Q3_K_BYTES).zip(x.chunks_exact(QK_K)) {
            let scale = times::<true>(q3_k_scales(&b[96..108]), f16(b[108], b[109]));
            // SAFETY: bytes 0..32 are the high bits, 32..96 the low ones.
            let hmask = unsafe { _mm256_loadu_si256(b.as_ptr() as *const _) };
            for half in 0..2 {
                // SAFETY: as above.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(32 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = q3_quants(qs, hmask, half, j);
                    let s = 8 * half + 2 * j;
                    let at = xs.as_ptr().wrapping_add(128 * half + 32 * j);
                    let factors = [scale[s], scale[s + 1]];
                    // SAFETY: values `128 half + 32 j ..` lie within the block's 256.
                    unsafe { dot32::<false>(q, at, factors, [0.0; 2], &mut acc, &mut unused) };
                }
            }
        }
        hsum(_mm256_add_ps(acc[0], acc[1]))
    }

    /// The shuffles that take, from a vector whose two 128-bit lanes both hold eight 16-bit
    /// scales, scale `2k` into every 16-bit lane of the low half and `2k + 1` into the high
    /// half (`k` in `0..4`): the factors of one group of 32 quants' two 16s.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn pair_shuffles() -> [__m256i; 4] {
        std::array::from_fn(|k| {
            let word = |i: usize| (0x0100 + 0x0202 * i as i32) as i16;
            _mm256_setr_m128i(_mm_set1_epi16(word(2 * k)), _mm_set1_epi16(word(2 * k + 1)))
        })
    }

    /// Sixteen 16-bit scales as the two vectors [`pair_shuffles`] reads: scales `0..8` in
    /// both lanes, then `8..16`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn halves16(scales: __m128i, signed: bool) -> [__m256i; 2] {
        let wide = if signed {
            _mm256_cvtepi8_epi16(scales)
        } else {
            _mm256_cvtepu8_epi16(scales)
        };
        [
            _mm256_permute4x64_epi64::<0b01_00_01_00>(wide),
            _mm256_permute4x64_epi64::<0b11_10_11_10>(wide),
        ]
    }

    /// A `Q2_K` row times 8-bit activations (see [`super::dot_q8`]): per block,
    /// `d * dy * sum(scale * q * qy) - dmin * dy * sum(min * qy)` over its two 16s.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `y.len() / 8` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q2_k_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
        let (ones, nibble) = (_mm256_set1_epi8(1), _mm_set1_epi8(15));
        let shuffles = pair_shuffles();
        // A chain of sums for each bit pair (one chain would wait on its latency).
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut acc_min = [_mm256_setzero_ps(); 4];
        for (b, ys) in row.chunks_exact(BLOCK_Q2_K_BYTES).zip(y.chunks_exact(8)) {
            let (d, dmin) = (f16(b[80], b[81]), f16(b[82], b[83]));
            // SAFETY: bytes 0..16 of the block are its scales and mins.
            let packed = unsafe { _mm_loadu_si128(b.as_ptr() as *const _) };
            let scales = halves16(_mm_and_si128(packed, nibble), false);
            let mins = halves16(_mm_and_si128(_mm_srli_epi16::<4>(packed), nibble), false);
            for half in 0..2 {
                // SAFETY: bytes 16..80 of the block are its quants.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(16 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = bit_pair(qs, j);
                    let yb = &ys[4 * half + j];
                    // SAFETY: a block's 32 quants.
                    let qy = unsafe { _mm256_loadu_si256(yb.qs.as_ptr() as *const _) };
                    let sc = _mm256_shuffle_epi8(scales[half], shuffles[j]);
                    let mn = _mm256_shuffle_epi8(mins[half], shuffles[j]);
                    let dots = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qy), sc);
                    let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, qy), mn);
                    acc[j] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d * yb.d), _mm256_cvtepi32_ps(dots), acc[j]);
                    acc_min[j] = _mm256_fmadd_ps(
                        _mm256_set1_ps(dmin * yb.d),
                        _mm256_cvtepi32_ps(sums),
                        acc_min[j],
                    );
                }
            }
        }
        let sum = |v: &[__m256; 4]| {
            hsum(_mm256_add_ps(
                _mm256_add_ps(v[0], v[1]),
                _mm256_add_ps(v[2], v[3]),
            ))
        };
        sum(&acc) - sum(&acc_min)
    }

    /// A `Q3_K` row times 8-bit activations (see [`super::dot_q8`]): per block,
    /// `d * dy * sum((scale - 32) * q * qy)` over its two 16s (`maddubs` of `|q|` and `qy`
    /// with `q`'s sign).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `y.len() / 8` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q3_k_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
        let shuffles = pair_shuffles();
        let mut acc = [_mm256_setzero_ps(); 4];
        for (b, ys) in row.chunks_exact(BLOCK_Q3_K_BYTES).zip(y.chunks_exact(8)) {
            let d = f16(b[108], b[109]);
            let scales = halves16(q3_k_scales(&b[96..108]), true);
            // SAFETY: bytes 0..32 are the high bits, 32..96 the low ones.
            let hmask = unsafe { _mm256_loadu_si256(b.as_ptr() as *const _) };
            for half in 0..2 {
                // SAFETY: as above.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(32 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = q3_quants(qs, hmask, half, j);
                    let yb = &ys[4 * half + j];
                    // SAFETY: a block's 32 quants.
                    let qy = unsafe { _mm256_loadu_si256(yb.qs.as_ptr() as *const _) };
                    let products =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(qy, q));
                    let sc = _mm256_shuffle_epi8(scales[half], shuffles[j]);
                    let dots = _mm256_madd_epi16(products, sc);
                    acc[j] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d * yb.d), _mm256_cvtepi32_ps(dots), acc[j]);
                }
            }
        }
        hsum(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ))
    }

    /// A `Q3_K` row: `(d * (scale - 32)) * q` per 16 values, `q` in `-4..4`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds `out.len() / 256` whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q3_k(row: &[u8], out: &mut [f32]) {
        for (b, o) in row
            .chunks_exact(BLOCK_Q3_K_BYTES)
            .zip(out.chunks_exact_mut(QK_K))
        {
            let d = f16(b[108], b[109]);
            let scales = unpack_scales_q3_k(b[96..108].try_into().expect("12 bytes"));
            // SAFETY: bytes 0..32 are the high bits, 32..96 the low ones.
            let hmask = unsafe { _mm256_loadu_si256(b.as_ptr() as *const _) };
            for half in 0..2 {
                // SAFETY: as above.
                let qs = unsafe { _mm256_loadu_si256(b.as_ptr().add(32 + 32 * half) as *const _) };
                for j in 0..4 {
                    let q = q3_quants(qs, hmask, half, j);
                    let s = 8 * half + 2 * j;
                    let scale = [d * f32::from(scales[s]), d * f32::from(scales[s + 1])];
                    // SAFETY: values `128 half + 32 j ..` lie within the block's 256.
                    unsafe { store(q, scale, [0.0; 2], o.as_mut_ptr().add(128 * half + 32 * j)) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_rows_decode_to_the_bits_of_the_portable_decoder() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut byte = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        };
        for ty in [GgmlType::Q2_K, GgmlType::Q3_K] {
            for blocks in [1, 3] {
                let mut row: Vec<u8> = (0..blocks * ty.type_size()).map(|_| byte()).collect();
                // Ordinary, zero and negative `f16` factors (the last two or four bytes).
                for (b, v) in row
                    .chunks_exact_mut(ty.type_size())
                    .zip([0.01f32, 0.0, -3.5])
                {
                    let at = ty.type_size() - if ty == GgmlType::Q2_K { 4 } else { 2 };
                    b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
                let mut want = vec![0f32; blocks * 256];
                quant::dequantize(ty, &row, &mut want).unwrap();
                for simd in Simd::available() {
                    let mut got = vec![f32::NAN; blocks * 256];
                    dequantize(ty, simd, &row, &mut got);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty} {simd:?} {blocks} blocks");
                }
            }
        }
    }
}
