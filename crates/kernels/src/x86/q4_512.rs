//! The AVX-512 `f32` kernel of the packed `Q4_0` / `Q4_1` / `Q4_K` groups: the AVX2 kernel's
//! arithmetic (`x86::avx2::q4_1_f32`: a group's eight rows in the lanes, each nibble converted
//! where it lies and multiplied by one activation, four chains of partial sums a row) on two
//! groups at once in 16-lane vectors, each activation broadcast from memory (an operand of
//! the FMA) instead of read from copies.
//!
//! Every lane runs exactly the operations of the 8-lane kernel, so a row has the same bits at
//! either level and in any batch. Measured on a Zen 4 (criterion, one thread,
//! `rows_q4_1_1536x576`, and Gemma-3's `Q4_K` products in `kindle bench --profile`), against
//! the look-up-table kernel this replaced (`x86_512.rs`: each row's 32 nibbles a block looked
//! up as `d * q` by `vpermps` and multiplied in the values' own order): see
//! docs/performance.md, 2026-11-30 (6).

use std::arch::x86_64::*;

use crate::columns::{SuperBlock, for_each_column};
use crate::x86_q5::{join, pair_column};

/// Groups `w` and `w + group_bytes` (`Q4` format `F`, `nb` block columns each) times `JN`
/// activation rows in the AVX2 `f32` kernel's order (`x86::Q4_LANE_ORDER`, scaled by
/// `x86::Q4_SCALE`, one copy of each value), with their block sums `sums`: the first group's
/// eight results of row `j` in lane order, then the second's, to `out[j]`. A group without a
/// partner passes `group_bytes = 0` (both halves the same group; the caller keeps one).
///
/// # Safety
/// AVX-512F and VL, AVX2, FMA, F16C; `w` holds the group(s) of `nb` block columns of `F`,
/// `group_bytes` apart; each `xs[j]` holds `32 * nb` values and each `sums[j]` `nb`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(crate) unsafe fn q4_f32_x16<const JN: usize, const F: u8>(
    w: *const u8,
    group_bytes: usize,
    nb: usize,
    xs: [&[f32]; JN],
    sums: [&[f32]; JN],
    out: &mut [[f32; 16]; JN],
) {
    let masks = [
        _mm512_set1_epi32(0xF),
        _mm512_set1_epi32(0xF0),
        _mm512_set1_epi32(0xF00),
    ];
    // SAFETY: the second group lies `group_bytes` on (caller).
    let w1 = unsafe { w.add(group_bytes) };
    let column_bytes = group_bytes / nb.max(1);
    let mut sb = [SuperBlock::new(); 2];
    let mut acc = [_mm512_setzero_ps(); JN];
    let mut acc_min = [_mm512_setzero_ps(); JN];
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within both groups (128 quant bytes at each `qs`);
        // activation block `b` within `32 * nb` values and `nb` sums.
        unsafe {
            let ([qs0, qs1], d, m) =
                pair_column::<F>((w, w1), (group_bytes, column_bytes), b, &mut sb);
            let pair = |i: usize| join(qs0.add(32 * i), qs1.add(32 * i));
            let (r01, r23, r45, r67) = (pair(0), pair(1), pair(2), pair(3));
            // Within each 128-bit lane as the AVX2 kernel: word g of rows (0, 2, 4, 6 | 1, 3,
            // 5, 7), the first group's in the low half, the second's in the high.
            let t0 = _mm512_unpacklo_epi32(r01, r23);
            let t1 = _mm512_unpackhi_epi32(r01, r23);
            let t2 = _mm512_unpacklo_epi32(r45, r67);
            let t3 = _mm512_unpackhi_epi32(r45, r67);
            let words = [
                _mm512_unpacklo_epi64(t0, t2),
                _mm512_unpackhi_epi64(t0, t2),
                _mm512_unpacklo_epi64(t1, t3),
                _mm512_unpackhi_epi64(t1, t3),
            ];
            let mut c = [[_mm512_setzero_ps(); 4]; JN];
            for (g, &word) in words.iter().enumerate() {
                let mut part = word;
                for p in 0..8 {
                    if p == 3 || p == 6 {
                        part = _mm512_srli_epi32::<12>(part);
                    }
                    let wq = _mm512_cvtepi32_ps(_mm512_and_si512(part, masks[p % 3]));
                    for j in 0..JN {
                        let x = _mm512_set1_ps(*xs[j].get_unchecked(32 * b + 8 * g + p));
                        c[j][p % 4] = if g == 0 && p < 4 {
                            _mm512_mul_ps(wq, x)
                        } else {
                            _mm512_fmadd_ps(wq, x, c[j][p % 4])
                        };
                    }
                }
            }
            for j in 0..JN {
                let block = _mm512_add_ps(
                    _mm512_add_ps(c[j][0], c[j][1]),
                    _mm512_add_ps(c[j][2], c[j][3]),
                );
                acc[j] = _mm512_fmadd_ps(d, block, acc[j]);
                let sum = _mm512_set1_ps(*sums[j].get_unchecked(b));
                acc_min[j] = _mm512_fmadd_ps(m, sum, acc_min[j]);
            }
        }
    });
    for j in 0..JN {
        // SAFETY: `out[j]` holds sixteen floats.
        unsafe { _mm512_storeu_ps(out[j].as_mut_ptr(), _mm512_add_ps(acc[j], acc_min[j])) };
    }
}
