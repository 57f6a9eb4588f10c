//! The 8-bit kernel of `Q8_0` with AVX-512 VNNI: a packed group (eight rows) times `JN` rows
//! of 8-bit activation blocks, with the bits of the AVX-VNNI kernel (`x86::vnni::q8_0_q8`).
//!
//! That kernel multiplies signed by signed bytes with `vpdpbusd`, which takes one operand
//! unsigned: it moves each weight's sign onto the activation (`vpsign`, per weight row and
//! activation row) and reduces each row's eight lanes with horizontal adds, one row pair at a
//! time, in 256-bit vectors. Here two rows fill a 512-bit vector, the weights are made
//! unsigned once per block for every activation row (`q + 128`, an exclusive or) and the
//! `128 * sum(y)` this adds is taken off by starting each dot product from its negation (one
//! more `vpdpbusd` per activation row), and the four vectors of row sums are reduced by
//! 128-bit shuffles, unpacks and one permutation: about 23 operations per block and
//! activation row against about 40. The integer sums are exact either way and the float steps
//! are the same (`d * y.d`, then one FMA per block in order), so both give the same bits.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::packed::LANE_ROWS;
use super::prefetch::prefetch_ahead;
use super::q8::BlockQ8;

/// Whether this CPU has AVX-512 VNNI (the 512-bit `vpdpbusd`) besides the AVX-512 the
/// `Simd::Avx512` level checks for.
pub(crate) fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx512vnni"))
}

/// The dword of the reduced vector that holds the sum of output lane `s`'s row
/// (`LANE_ROWS[s]`): rows `r < 4` end in dword `4 r`, rows `r >= 4` in dword `4 (r - 4) + 1`.
const fn gather_index(s: usize) -> i32 {
    let r = LANE_ROWS[s];
    (if r < 4 { 4 * r } else { 4 * (r - 4) + 1 }) as i32
}

/// A `Q8_0` group (272-byte block columns: eight `f16` scales in the lane order
/// [`LANE_ROWS`], then eight rows of 32 `i8`) times `JN` rows of 8-bit activation blocks; the
/// eight results of activation row `j` to `out[j]` in the lane order [`LANE_ROWS`].
///
/// # Safety
/// AVX-512F, BW, VL and VNNI, AVX2, FMA and F16C; `w` holds `nb` block columns and every
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
    let gather = _mm512_setr_epi32(
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
    );
    let mut acc = [_mm256_setzero_ps(); JN];
    for b in 0..nb {
        // SAFETY: block column `b` (272 bytes) lies within `w`, activation block `b` within
        // each `ys[j]` (the caller's guarantees).
        unsafe {
            let col = w.add(b * 272);
            prefetch_ahead(col, 272);
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
                // Per 128-bit lane `i`: row `i`'s sum in dword 0, row `i + 4`'s in dword 1.
                let r = _mm512_add_epi32(
                    _mm512_unpacklo_epi32(low, high),
                    _mm512_unpackhi_epi32(low, high),
                );
                let t = _mm512_add_epi32(r, _mm512_shuffle_epi32::<0b01_00_11_10>(r));
                let sums = _mm512_castsi512_si256(_mm512_permutexvar_epi32(gather, t));
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
