//! The group kernels of `IQ4_NL` and `IQ4_XS` (the form of `packed_iq4.rs`) with AVX2: a
//! row's 16 index bytes of a block column become its 32 signed 8-bit levels by one byte
//! shuffle of the level table per nibble half (`vpshufb`, llama.cpp's way), and from there the
//! block is a `Q8_0` block whose scale is an `f32`: the 8-bit kernel takes integer dot products
//! with the activation quants, the `f32` one widens the levels to floats. Every instruction
//! set at or above AVX2 runs these (AVX-512 and AVX-VNNI machines included).

use std::arch::x86_64::*;

use kindle_gguf::quant::KVALUES_IQ4NL;

use super::packed::LANE_ROWS;
use super::packed_iq4::IQ4_COLUMN_BYTES;
use super::prefetch::prefetch_ahead;
use super::q8::BlockQ8;

/// The 32 levels of the row whose 16 index bytes are at `p`: values `0..16` in the low
/// 128-bit half, `16..32` in the high one.
///
/// # Safety
/// `p` points to 16 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn levels(table: __m128i, p: *const u8) -> (__m128i, __m128i) {
    // SAFETY: 16 readable bytes (caller).
    let raw = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let mask = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(raw, mask);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(raw), mask);
    (_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi))
}

/// The level table in a vector.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn table() -> __m128i {
    // SAFETY: the table holds 16 bytes.
    unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) }
}

/// `w . y` per 32-bit lane, both signed 8-bit: `|w|` (unsigned) times `y` carrying `w`'s sign.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_i8(w: __m256i, y: __m256i) -> __m256i {
    let abs_w = _mm256_sign_epi8(w, w);
    let signed_y = _mm256_sign_epi8(y, w);
    // Each 16-bit pair sum is at most 2 * 127 * 128, within `i16`.
    _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, signed_y), _mm256_set1_epi16(1))
}

/// An `IQ4` group (`nb` block columns of [`IQ4_COLUMN_BYTES`] at `w`) times `JN` rows of 8-bit
/// activation blocks; `out[j]` the eight rows' results in the lane order `LANE_ROWS`.
///
/// # Safety
/// AVX2, FMA and F16C run on this CPU; `w` holds `nb` block columns and every `ys[j]` at
/// least `nb` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_q8<const JN: usize>(
    w: *const u8,
    nb: usize,
    ys: [&[BlockQ8]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let table = table();
    let mut acc = [_mm256_setzero_ps(); JN];
    let prefetch = super::prefetch::fast_kernels();
    for b in 0..nb {
        // SAFETY: block column `b` lies within the caller's `nb` columns, and each activation
        // row has block `b`.
        unsafe {
            let col = w.add(b * IQ4_COLUMN_BYTES);
            if prefetch {
                prefetch_ahead(col, IQ4_COLUMN_BYTES);
            }
            let d = _mm256_loadu_ps(col as *const f32);
            let yv: [__m256i; JN] = std::array::from_fn(|j| {
                let q = ys[j].get_unchecked(b).qs.as_ptr();
                _mm256_loadu_si256(q as *const __m256i)
            });
            // Rows two at a time, reduced pairwise at once: few registers live.
            let mut h = [[_mm256_setzero_si256(); 4]; JN];
            let row = |r: usize| {
                let (lo, hi) = levels(table, col.add(32 + 16 * r));
                _mm256_set_m128i(hi, lo)
            };
            // Pair `pair` holds the rows of lanes `2 pair` and `2 pair + 1`.
            for (pair, rows) in LANE_ROWS.chunks_exact(2).enumerate() {
                let (w0, w1) = (row(rows[0]), row(rows[1]));
                for (hj, yj) in h.iter_mut().zip(&yv) {
                    hj[pair] = _mm256_hadd_epi32(dot_i8(w0, *yj), dot_i8(w1, *yj));
                }
            }
            for j in 0..JN {
                let y = ys[j].get_unchecked(b);
                let a = _mm256_hadd_epi32(h[j][0], h[j][1]);
                let c = _mm256_hadd_epi32(h[j][2], h[j][3]);
                let sums = _mm256_cvtepi32_ps(_mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(a, c),
                    _mm256_permute2x128_si256::<0x31>(a, c),
                ));
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[j] = _mm256_fmadd_ps(scale, sums, acc[j]);
            }
        }
    }
    for j in 0..JN {
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
    }
}

/// An `IQ4` group times `JN` rows of `f32` activations (natural order). Each row keeps its
/// own eight lanes of partial sums across the block columns (a block's 32 products four to a
/// lane, scaled by the row's scale held in all lanes), summed across once at the end, as the
/// `Q8_0` `f32` kernel does; the same order for every `JN`.
///
/// # Safety
/// AVX2, FMA and F16C run on this CPU; `w` holds `nb` block columns and every `xs[j]` at
/// least `32 * nb` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_f32<const JN: usize>(
    w: *const u8,
    nb: usize,
    xs: [&[f32]; JN],
    out: &mut [[f32; 8]; JN],
) {
    let table = table();
    // `acc[j][s]`: the lanes of row `LANE_ROWS[s]`, whose scale is lane `s`.
    let mut acc = [[_mm256_setzero_ps(); 8]; JN];
    for b in 0..nb {
        // SAFETY: as in `iq4_q8`; activation block `b` within `32 * nb` values.
        unsafe {
            let col = w.add(b * IQ4_COLUMN_BYTES);
            prefetch_ahead(col, IQ4_COLUMN_BYTES);
            for s in 0..8 {
                let (lo, hi) = levels(table, col.add(32 + 16 * LANE_ROWS[s]));
                let widen = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                let wq = [
                    widen(lo),
                    widen(_mm_srli_si128::<8>(lo)),
                    widen(hi),
                    widen(_mm_srli_si128::<8>(hi)),
                ];
                // The row's scale in every lane, straight from memory (a load, no shuffle).
                let ds = _mm256_broadcast_ss(&*(col as *const f32).add(s));
                for j in 0..JN {
                    let x = xs[j].as_ptr().add(32 * b);
                    let mut t = _mm256_mul_ps(wq[0], _mm256_loadu_ps(x));
                    t = _mm256_fmadd_ps(wq[1], _mm256_loadu_ps(x.add(8)), t);
                    t = _mm256_fmadd_ps(wq[2], _mm256_loadu_ps(x.add(16)), t);
                    t = _mm256_fmadd_ps(wq[3], _mm256_loadu_ps(x.add(24)), t);
                    acc[j][s] = _mm256_fmadd_ps(ds, t, acc[j][s]);
                }
            }
        }
    }
    for j in 0..JN {
        let h: [__m256; 4] =
            std::array::from_fn(|pair| _mm256_hadd_ps(acc[j][2 * pair], acc[j][2 * pair + 1]));
        let a = _mm256_hadd_ps(h[0], h[1]);
        let c = _mm256_hadd_ps(h[2], h[3]);
        let sums = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, c),
            _mm256_permute2f128_ps::<0x31>(a, c),
        );
        // SAFETY: `out[j]` holds eight floats.
        unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), sums) };
    }
}
