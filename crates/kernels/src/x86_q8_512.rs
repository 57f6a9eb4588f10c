//! The 8-bit kernels of `Q8_0` and of the `Q4` group form (`Q4_1`, `Q4_0`, `Q4_K`) with
//! AVX-512 VNNI: a packed group (eight rows) times `JN` rows of 8-bit activation blocks, with
//! the bits of the AVX-VNNI kernels (`x86::vnni::q8_0_q8`, `x86::vnni::q4_1_q8`).
//!
//! Those multiply in 256-bit vectors, two rows at a time, and reduce each row's lanes with
//! horizontal adds (`Q8_0` also moves each weight's sign onto the activation with `vpsign`,
//! since `vpdpbusd` takes one operand unsigned, per row pair and activation row). Here a
//! 512-bit vector holds two `Q8_0` rows or four `Q4` rows; `Q8_0`'s weights are made
//! unsigned once per block for every activation row (`q + 128`, an exclusive or) and the
//! `128 * sum(y)` this adds is taken off by starting each dot product from its negation (one
//! more `vpdpbusd` per activation row); the rows' sums are reduced by 128-bit shuffles,
//! unpacks and one permutation. About 23 operations per block and activation row against 40
//! for `Q8_0`, 16 against 23 for `Q4`. The integer sums are exact either way and the float
//! steps are the same (`d * y.d`, then one FMA per block in order; `Q4`'s offsets times
//! `y.s` in a second accumulator), so both give the same bits.

use std::arch::x86_64::*;

use super::columns::{SuperBlock, column, for_each_column};
use super::packed::LANE_ROWS;
use super::prefetch::{fast_kernels, prefetch_ahead};
use super::q8::BlockQ8;

/// The dword of the reduced vector that holds the sum of output lane `s`'s row
/// (`LANE_ROWS[s]`): rows `r < 4` end in dword `4 r`, rows `r >= 4` in dword `4 (r - 4) + 1`.
const fn gather_index(s: usize) -> i32 {
    let r = LANE_ROWS[s];
    (if r < 4 { 4 * r } else { 4 * (r - 4) + 1 }) as i32
}

/// The eight rows' sums in the lane order [`LANE_ROWS`], from row `i`'s four partial sums in
/// 128-bit lane `i` of `low` (rows 0-3) and of `high` (rows 4-7); `gather` holds
/// [`gather_index`] of each output lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_sums(low: __m512i, high: __m512i, gather: __m512i) -> __m256i {
    // Per 128-bit lane `i`: row `i`'s sum in dword 0, row `i + 4`'s in dword 1.
    let r = _mm512_add_epi32(
        _mm512_unpacklo_epi32(low, high),
        _mm512_unpackhi_epi32(low, high),
    );
    let t = _mm512_add_epi32(r, _mm512_shuffle_epi32::<0b01_00_11_10>(r));
    _mm512_castsi512_si256(_mm512_permutexvar_epi32(gather, t))
}

/// [`gather_index`] of output lanes 0-7 (the rest unused).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn gather_indices() -> __m512i {
    _mm512_setr_epi32(
        gather_index(0),
        gather_index(1),
        gather_index(2),
        gather_index(3),
        gather_index(4),
        gather_index(5),
        gather_index(6),
        gather_index(7),
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    )
}

/// A `Q8_0` group (272-byte block columns: eight `f16` scales in the lane order
/// [`LANE_ROWS`], then eight rows of 32 `i8`) times `JN` rows of 8-bit activation blocks; the
/// eight results of activation row `j` to `out[j]` in the lane order [`LANE_ROWS`].
///
/// # Safety
/// AVX-512F, BW, VL and VNNI (`Simd::Avx512`), AVX2, FMA and F16C; `w` holds `nb` block columns and every
/// `ys[j]` at least `nb` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q8_0_q8<const JN: usize>(
    w: *const u8,
    nb: usize,
    ys: [&[BlockQ8]; JN],
    out: &mut [[f32; 8]; JN],
) {
    // `0x80`: flips a signed byte into `q + 128` (unsigned), and is 128 as an unsigned factor.
    let flip = _mm512_set1_epi8(-128);
    let zero = _mm512_setzero_si512();
    let gather = gather_indices();
    let mut acc = [_mm256_setzero_ps(); JN];
    let prefetch = fast_kernels();
    for b in 0..nb {
        // SAFETY: block column `b` (272 bytes) lies within `w`, activation block `b` within
        // each `ys[j]` (the caller's guarantees).
        unsafe {
            let col = w.add(b * 272);
            if prefetch {
                prefetch_ahead(col, 272);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
            // Rows 2p and 2p + 1 in one vector, as unsigned bytes.
            let v: [__m512i; 4] = std::array::from_fn(|p| {
                _mm512_xor_si512(_mm512_loadu_si512(col.add(16 + 64 * p).cast()), flip)
            });
            for j in 0..JN {
                let y = ys[j].get_unchecked(b);
                let yv = _mm512_broadcast_i64x4(_mm256_loadu_si256(y.qs.as_ptr().cast()));
                // Each dword's `-128 * (y[4k] + ... + y[4k + 3])`, where its dot product starts.
                let start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, yv));
                let dots: [__m512i; 4] =
                    std::array::from_fn(|p| _mm512_dpbusd_epi32(start, v[p], yv));
                // Rows 0-3 (and 4-7) one per 128-bit lane, four partial sums each.
                let halves = |a: __m512i, c: __m512i| {
                    _mm512_add_epi32(
                        _mm512_shuffle_i32x4::<0b10_00_10_00>(a, c),
                        _mm512_shuffle_i32x4::<0b11_01_11_01>(a, c),
                    )
                };
                let (low, high) = (halves(dots[0], dots[1]), halves(dots[2], dots[3]));
                let sums = row_sums(low, high, gather);
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[j]);
            }
        }
    }
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
    }
}

/// A `Q4_1` group (`nb` block columns at `w`; `F` another format of that form, `Q4_0` or
/// `Q4_K`, see `super::columns`) times `JN` rows of 8-bit activation blocks; the eight results
/// of activation row `j` to `out[j]` in the lane order [`LANE_ROWS`].
///
/// # Safety
/// As [`q8_0_q8`]; `w` holds `nb` block columns of `F`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q4_1_q8<const JN: usize, const F: u8>(
    w: *const u8,
    nb: usize,
    ys: [&[BlockQ8]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let mask = _mm512_set1_epi8(0x0F);
    let zero = _mm512_setzero_si512();
    let gather = gather_indices();
    let mut acc = [_mm256_setzero_ps(); JN];
    let mut acc_min = [_mm256_setzero_ps(); JN];
    let mut sb = SuperBlock::for_8_bit();
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within the caller's `nb` columns (its 128 quant bytes
        // at `qs`, 16 a row), and each activation row has block `b`.
        unsafe {
            let (qs, d, m) = column::<F>(w, b, &mut sb);
            // Rows 4k..4k + 4 one per 128-bit lane: low and high nibbles.
            let v: [__m512i; 2] =
                std::array::from_fn(|k| _mm512_loadu_si512(qs.add(64 * k).cast()));
            let lo = v.map(|v| _mm512_and_si512(v, mask));
            let hi = v.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask));
            for j in 0..JN {
                let y = ys[j].get_unchecked(b);
                let q = y.qs.as_ptr();
                let ylo = _mm512_broadcast_i32x4(_mm_loadu_si128(q.cast()));
                let yhi = _mm512_broadcast_i32x4(_mm_loadu_si128(q.add(16).cast()));
                let dots = std::array::from_fn::<__m512i, 2, _>(|k| {
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo[k], ylo), hi[k], yhi)
                });
                let sums = row_sums(dots[0], dots[1], gather);
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[j]);
                acc_min[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(y.s), acc_min[j]);
            }
        }
    });
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(acc[j], acc_min[j])) };
    }
}

#[cfg(test)]
mod tests {
    use kindle_gguf::quant::GgmlType;

    use crate::ActivationFormat;
    use crate::dot::{Kernel, Simd};
    use crate::tests::{Rng, magnitudes, random_matrix, threads};

    #[test]
    fn every_simd_level_gives_the_8_bit_group_products_the_same_bits() {
        // The AVX-512 VNNI kernels (`x86_q8_512`), the AVX-VNNI ones and the AVX2 ones sum the
        // same integers exactly and scale them by the same float steps. Every level this CPU has,
        // every batch size of the group kernels and a partial last group (43 rows).
        let levels: Vec<Simd> = Simd::available()
            .into_iter()
            .filter(|&s| s != Simd::Scalar)
            .collect();
        assert!(!levels.is_empty(), "no SIMD level to run");
        let mut rng = Rng(0x0808);
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q4_0,
            GgmlType::Q4_K,
        ] {
            let (rows, cols) = (43, if ty == GgmlType::Q4_K { 768 } else { 640 });
            let w = random_matrix(ty, rows, cols, &mut rng);
            for m in 1..=9 {
                let x: Vec<f32> = (0..m * cols).map(|_| rng.float() * 3.0).collect();
                let outputs: Vec<Vec<f32>> = levels
                    .iter()
                    .map(|&simd| {
                        let mut out = vec![0f32; m * rows];
                        let kernel = Kernel::select_simd(ty, ActivationFormat::Int8, simd);
                        w.matmul_kernel(&x, m, &mut out, kernel, &threads());
                        out
                    })
                    .collect();
                for (level, out) in levels.iter().zip(&outputs) {
                    let same = out
                        .iter()
                        .zip(&outputs[0])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty:?} m={m}: {level:?} against {:?}", levels[0]);
                }
                // And the products are the 8-bit ones: within the activations' rounding of the
                // reference (a wrong row order or a lost offset would be far off).
                let mut reference = vec![0f32; m * rows];
                w.matmul_reference(&x, m, &mut reference);
                let scale = magnitudes(&w, &x, m);
                for (i, ((&a, &r), &s)) in outputs[0].iter().zip(&reference).zip(&scale).enumerate()
                {
                    assert!(
                        (a - r).abs() <= 0.02 * s + 1e-4,
                        "{ty:?} m={m} output {i}: {a} against {r}"
                    );
                }
            }
        }
    }
}
