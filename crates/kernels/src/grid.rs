//! ggml's grid quants (`IQ2_XXS`, `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`, `IQ1_S`, `IQ1_M`):
//! kept as in the file and decoded a tile of rows at a time for the dense `f32` kernels
//! (`dot.rs`) and the prefill product (`gemm.rs`), with the bits of `kindle_gguf`'s decoders.
//!
//! Each group of eight values is a grid point (eight bytes: a table lookup by an 8- to 11-bit
//! index, which `kindle_gguf`'s walks do) times a scale, with a sign bit a value or a shift of
//! the group. With AVX2 a group is one vector: the point's bytes widened to `f32`, the scale
//! multiplied, the signs set by a mask (`x86_grid`): the products of the scalar decoder, so
//! the same bits.

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

#[cfg(target_arch = "x86_64")]
mod x86_grid {
    use core::arch::x86_64::*;
    use kindle_gguf::quant::{GgmlType, for_each_shifted_group, for_each_signed_group};

    /// [`super::dequantize`] with AVX2: one vector a group of eight values.
    ///
    /// # Safety
    /// The CPU has AVX2; `out` holds 256 values a super-block of `blocks`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dequantize(ty: GgmlType, blocks: &[u8], out: &mut [f32]) {
        let size = ty.type_size();
        let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        for (block, y) in blocks.chunks_exact(size).zip(out.chunks_exact_mut(256)) {
            let y: &mut [f32; 256] = y.try_into().expect("a super-block's values");
            if matches!(ty, GgmlType::IQ1_S | GgmlType::IQ1_M) {
                for_each_shifted_group(ty, block, |g, dl, point, delta| {
                    // `dl * (point[j] + delta)`: the `i8` values widened (exact), the shift
                    // added (exact), then the one rounded product.
                    let v = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(point as i64));
                    let v = _mm256_add_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(delta));
                    let v = _mm256_mul_ps(_mm256_set1_ps(dl), v);
                    // SAFETY: `8 g + 8 <= 256`.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(8 * g), v) };
                });
            } else {
                for_each_signed_group(ty, block, |g, db, point, signs| {
                    // `db * point[j]`, then the sign bit set where `signs` has bit `j`.
                    let v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(point as i64));
                    let v = _mm256_mul_ps(_mm256_set1_ps(db), _mm256_cvtepi32_ps(v));
                    let set = _mm256_and_si256(_mm256_set1_epi32(i32::from(signs)), bits);
                    let negative = _mm256_slli_epi32(_mm256_cmpeq_epi32(set, bits), 31);
                    let v = _mm256_xor_ps(v, _mm256_castsi256_ps(negative));
                    // SAFETY: `8 g + 8 <= 256`.
                    unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(8 * g), v) };
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Super-blocks of random bytes with a sane scale.
    fn random_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut bytes: Vec<u8> = (0..n * ty.type_size())
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) as u8
            })
            .collect();
        let d = half::f16::from_f32(0.01).to_bits();
        for block in bytes.chunks_exact_mut(ty.type_size()) {
            if ty == GgmlType::IQ1_M {
                for i in 0..4 {
                    let at = 49 + 2 * i;
                    block[at] = (block[at] & 0x0F) | ((((d >> (4 * i)) & 0xF) as u8) << 4);
                }
            } else {
                block[..2].copy_from_slice(&d.to_le_bytes());
            }
        }
        bytes
    }

    /// The SIMD decoders give the scalar decoder's bits (which are ggml's:
    /// `kindle-gguf`'s `tests/ggml_quantizers.rs`), at every SIMD level this CPU runs.
    #[test]
    fn simd_decoders_give_the_scalar_bits() {
        use GgmlType::*;
        for ty in [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M] {
            let blocks = random_blocks(ty, 16, ty.id().into());
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
