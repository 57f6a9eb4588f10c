//! ggml's grid quants (`IQ2_XXS`, `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`, `IQ1_S`, `IQ1_M`),
//! kept as in the file: no repacking, since every index must be looked up in its grid anyway.
//!
//! Each group of eight values is a grid point (eight bytes: a table lookup by an 8- to 11-bit
//! index, which `kindle_gguf`'s walks do) times a scale, with a sign bit a value or a shift of
//! the group. With AVX2 (`x86_grid`) four groups (32 values) are one vector of bytes, their
//! signs put on by one `vpsignb`:
//! - 8-bit activations ([`dot_q8`]): `vpmaddubsw` of the magnitudes with the sign-moved
//!   activation bytes, as ggml does;
//! - `f32` activations: the bytes widened and multiplied by their group's scale (the scalar
//!   decoder's products, so its bits), then for up to four activation rows multiplied into
//!   their sums in registers ([`rows_f32`]), else stored into a tile of rows for the dense
//!   kernels (`dot.rs`) and the prefill product (`gemm.rs`) ([`dequantize`]).

use super::q8::BlockQ8;
use super::simd::Simd;
use kindle_gguf::quant::{self, GgmlType};

/// Whether `ty` is a grid quant.
pub(crate) fn grid(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M
    )
}

/// `blocks` (whole super-blocks of the grid quant `ty`) dequantised into `out`, with SIMD
/// where `simd` has it.
pub(crate) fn dequantize(simd: Simd, ty: GgmlType, blocks: &[u8], out: &mut [f32]) {
    debug_assert!(grid(ty));
    debug_assert_eq!(blocks.len() / ty.type_size() * 256, out.len());
    #[cfg(target_arch = "x86_64")]
    if simd.any() {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected.
        unsafe { x86_grid::dequantize(ty, blocks, out) };
        return;
    }
    let _ = simd;
    quant::dequantize(ty, blocks, out).expect("whole super-blocks");
}

/// Whether the fused `f32` kernel ([`rows_f32`]) takes `m` activation rows at `simd`: with
/// SIMD, up to four (more share the decoded tile better).
pub(crate) fn fused_f32(simd: Simd, m: usize) -> bool {
    simd.any() && (1..=4).contains(&m)
}

/// `out[i * m + j] = row i of data . x_j` for the grid-quant rows of `data` (GGUF layout) and
/// the `m` (`1..=4`, [`fused_f32`]) activation rows of `x`: each group of eight values decoded
/// in registers (the decoder's bits) and multiplied there.
pub(crate) fn rows_f32(
    simd: Simd,
    ty: GgmlType,
    data: &[u8],
    x: &[f32],
    m: usize,
    out: &mut [f32],
) {
    assert!(fused_f32(simd, m), "{m} rows at {simd:?}");
    let cols = x.len() / m;
    let row_bytes = cols / 256 * ty.type_size();
    #[cfg(target_arch = "x86_64")]
    for (row, out) in data.chunks_exact(row_bytes).zip(out.chunks_exact_mut(m)) {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected; `x`
        // holds `m` rows of `cols` values, `row` `cols / 256` super-blocks.
        unsafe {
            match m {
                1 => x86_grid::row_f32::<1>(ty, row, x, out),
                2 => x86_grid::row_f32::<2>(ty, row, x, out),
                3 => x86_grid::row_f32::<3>(ty, row, x, out),
                _ => x86_grid::row_f32::<4>(ty, row, x, out),
            }
        }
    }
    let _ = (row_bytes, data, out);
}

/// One grid-quant row (GGUF layout, whole super-blocks) times one row of 8-bit activations,
/// with SIMD (the 8-bit kernels of the grid quants exist only with it: without, the `f32`
/// path runs them).
///
/// # Panics
/// Without SIMD.
pub(crate) fn dot_q8(simd: Simd, ty: GgmlType, row: &[u8], y: &[BlockQ8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd.any() {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected.
        return unsafe { x86_grid::dot_q8(ty, row, y) };
    }
    let _ = (row, y);
    panic!("no 8-bit {ty} kernel at {simd:?}")
}

#[cfg(target_arch = "x86_64")]
mod x86_grid {
    use super::BlockQ8;
    use crate::x86_shared::hsum;
    use core::arch::x86_64::*;
    use kindle_gguf::quant::{GgmlType, for_each_shifted_group, for_each_signed_group};

    /// For each byte of sign bits, eight bytes of `_mm256_sign_epi8` multipliers: byte `j` is
    /// `-1` where bit `j` is set, else `1`.
    static SIGN_BYTES: [u64; 256] = {
        let mut table = [0u64; 256];
        let mut b = 0;
        while b < 256 {
            let mut j = 0;
            while j < 8 {
                let byte: u64 = if (b >> j) & 1 == 1 { 0xFF } else { 0x01 };
                table[b] |= byte << (8 * j);
                j += 1;
            }
            b += 1;
        }
        table
    };

    /// Four groups of a super-block (values `32 q..32 q + 32` for the `q` given with it): the
    /// four grid points as one vector of bytes, for the sign-bit quants their signs as `±1`
    /// bytes, each group's scale, and each `IQ1` group's shift.
    struct Four {
        points: __m256i,
        signs: __m256i,
        scales: [f32; 4],
        deltas: [f32; 4],
    }

    /// Whether `ty` is an `IQ1` quant (points of -1, 0 and 1 and a shift, no sign bits).
    fn shifted(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::IQ1_S | GgmlType::IQ1_M)
    }

    /// `f(q, four)` for each four groups of `block` (a super-block of the grid quant `ty`), in
    /// order, on `kindle_gguf`'s walks.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn for_each_four(ty: GgmlType, block: &[u8], mut f: impl FnMut(usize, &Four)) {
        let (mut points, mut scales, mut extra) = ([0u64; 4], [0f32; 4], [0u64; 4]);
        let mut put = |g: usize, scale: f32, point: u64, extra_bits: u64| {
            let k = g % 4;
            (points[k], scales[k], extra[k]) = (point, scale, extra_bits);
            if k < 3 {
                return;
            }
            let vector = |v: [u64; 4]| {
                _mm256_setr_epi64x(v[0] as i64, v[1] as i64, v[2] as i64, v[3] as i64)
            };
            let shifted = shifted(ty);
            let four = Four {
                points: vector(points),
                signs: if shifted {
                    _mm256_setzero_si256()
                } else {
                    vector(extra)
                },
                scales,
                // The shifts, carried as the bits of an `f32`.
                deltas: if shifted {
                    extra.map(|bits| f32::from_bits(bits as u32))
                } else {
                    [0.0; 4]
                },
            };
            f(g / 4, &four);
        };
        if shifted(ty) {
            for_each_shifted_group(ty, block, |g, dl, point, delta| {
                put(g, dl, point, u64::from(delta.to_bits()));
            });
        } else {
            for_each_signed_group(ty, block, |g, db, point, signs| {
                put(g, db, point, SIGN_BYTES[usize::from(signs)]);
            });
        }
    }

    /// The 32 values of `four` as `f32`, eight a vector: each eight bytes widened (exact), the
    /// sign-bit quants' signs set first by one `vpsignb` (magnitudes are under 64), `IQ1`'s
    /// shift added, then multiplied by the group's scale: the scalar decoder's products
    /// (`±(db * g)`, `dl * (g + delta)`), so its bits.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn decoded(four: &Four, shifted: bool) -> [__m256; 4] {
        let values = if shifted {
            four.points
        } else {
            _mm256_sign_epi8(four.points, four.signs)
        };
        let (lo, hi) = (
            _mm256_castsi256_si128(values),
            _mm256_extracti128_si256::<1>(values),
        );
        let eights = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
        std::array::from_fn(|i| {
            let mut v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eights[i]));
            if shifted {
                v = _mm256_add_ps(v, _mm256_set1_ps(four.deltas[i]));
            }
            _mm256_mul_ps(_mm256_set1_ps(four.scales[i]), v)
        })
    }

    /// [`super::dequantize`] with AVX2, 32 values (four groups, [`decoded`]) at a time.
    ///
    /// # Safety
    /// The CPU has AVX2; `out` holds 256 values a super-block of `blocks`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dequantize(ty: GgmlType, blocks: &[u8], out: &mut [f32]) {
        let size = ty.type_size();
        for (block, y) in blocks.chunks_exact(size).zip(out.chunks_exact_mut(256)) {
            for_each_four(ty, block, |q, four| {
                let y = &mut y[32 * q..32 * q + 32];
                for (i, v) in decoded(four, shifted(ty)).into_iter().enumerate() {
                    // SAFETY: `8 i + 8 <= 32`.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(8 * i), v) };
                }
            });
        }
    }

    /// `[s0, s0, s1, s1, s2, s2, s3, s3] * dy`: each group's scale over the two `i32` lanes of
    /// its eight values after `vpmaddwd`, times the activation block's scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn lane_scales(scales: &[f32; 4], dy: f32) -> __m256 {
        // SAFETY: `scales` is four `f32`.
        let four = unsafe { _mm_loadu_ps(scales.as_ptr()) };
        let four = _mm_mul_ps(four, _mm_set1_ps(dy));
        let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(four), pairs)
    }

    /// [`super::dot_q8`]: per 32 values (four groups) the four grid points multiplied with the
    /// activations' bytes by `vpmaddubsw` (magnitudes unsigned, the signs moved onto the
    /// activations by `vpsignb`; `IQ1`'s points of -1, 0 and 1 act as signs themselves),
    /// summed per group into `i32` lanes, then scaled by each group's scale and the activation
    /// block's. An `IQ1` group adds its shift times the sum of its activations.
    ///
    /// # Safety
    /// The CPU has AVX2; `y` holds eight blocks a super-block of `row`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q8(ty: GgmlType, row: &[u8], y: &[BlockQ8]) -> f32 {
        let shifted = shifted(ty);
        let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
        let mut acc = _mm256_setzero_ps();
        for (block, ys) in row.chunks_exact(ty.type_size()).zip(y.chunks_exact(8)) {
            for_each_four(ty, block, |q, four| {
                let yb = &ys[q];
                // SAFETY: `qs` is 32 bytes.
                let qs = unsafe { _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i) };
                let lanes = lane_scales(&four.scales, yb.d);
                if shifted {
                    let dot = _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(qs, four.points));
                    let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, ones16));
                    let sum = _mm256_maddubs_epi16(ones8, qs);
                    let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum, ones16));
                    let deltas = lane_scales(&four.deltas, 1.0);
                    acc = _mm256_fmadd_ps(_mm256_fmadd_ps(deltas, sum, dot), lanes, acc);
                } else {
                    let moved = _mm256_sign_epi8(qs, four.signs);
                    let dot = _mm256_maddubs_epi16(four.points, moved);
                    let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, ones16));
                    acc = _mm256_fmadd_ps(dot, lanes, acc);
                }
            });
        }
        hsum(acc)
    }

    /// One row times `JN` activation rows (`x`: `JN` rows of the row's values): per 32 values
    /// the [`decoded`] values multiplied into each activation row's sum.
    ///
    /// # Safety
    /// The CPU has AVX2; `x` holds `JN` rows of `256 *` the row's super-blocks values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn row_f32<const JN: usize>(
        ty: GgmlType,
        row: &[u8],
        x: &[f32],
        out: &mut [f32],
    ) {
        let cols = x.len() / JN;
        let mut acc = [_mm256_setzero_ps(); JN];
        for (b, block) in row.chunks_exact(ty.type_size()).enumerate() {
            for_each_four(ty, block, |q, four| {
                for (i, w) in decoded(four, shifted(ty)).into_iter().enumerate() {
                    let at = 256 * b + 32 * q + 8 * i;
                    for (j, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: `j * cols + at + 8 <= x.len()`.
                        let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(j * cols + at)) };
                        *acc = _mm256_fmadd_ps(w, xv, *acc);
                    }
                }
            });
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum(acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{Rng, random_bytes};

    /// The SIMD decoders give the scalar decoder's bits (which are ggml's:
    /// `kindle-gguf`'s `tests/ggml_quantizers.rs`), at every SIMD level this CPU runs.
    #[test]
    fn simd_decoders_give_the_scalar_bits() {
        use GgmlType::*;
        for ty in [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M] {
            let blocks = random_bytes(ty, 16, 256, &mut Rng(ty.id().into()));
            let mut want = vec![0f32; 16 * 256];
            quant::dequantize(ty, &blocks, &mut want).unwrap();
            for simd in Simd::available() {
                let mut got = vec![f32::NAN; want.len()];
                dequantize(simd, ty, &blocks, &mut got);
                let differ = (0..got.len()).filter(|&i| got[i].to_bits() != want[i].to_bits());
                assert_eq!(differ.count(), 0, "{ty} at {simd:?}");
            }
        }
    }
}
