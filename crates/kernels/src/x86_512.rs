//! The `f32` group kernels of `Q4_1`, `Q4_0`, `Q4_K` and `Q8_0` with 16-lane AVX-512 vectors
//! and 32 registers: each pair of a weight row and an activation row keeps 16 lanes of
//! partial sums until the end instead of reducing them per block. (On a CPU that runs 512-bit
//! operations as two halves, AMD's Zen 4, the `Q4` types run `x86::q4_512`'s kernel instead:
//! `dot::q4_in_lanes`.)
//!
//! **The arithmetic.** `Q4`: a weight row's 32 values of a block are looked up (`vpermps`, by
//! the nibble) in a table of `d * q` for `q` in `0..16`, exact (`d` has an 11-bit
//! significand, or 17 bits for a K-quant's `d * sc`, times at most 4 bits: below `f32`'s 24),
//! and each product is added to the pair's partial sums by one fused multiply-add, rounded
//! once; the offsets (`m`, `-8 d`, `-dmin * mn`) times the activations' block sums are
//! summed apart, per row, and added at the end. `Q8_0`: the block's two half products are
//! summed and scaled by `d` as they are added (`mul`, `fmadd`, `fmadd`): three operations per
//! activation row against two plus a multiply per weight row for `d * q`, the cheaper one for
//! a single row. A pair's sums go through the same operations in the same order however many
//! rows a call takes and whichever tile computes them, so batches give the bits of single
//! rows (speculative verification and batched decode agree with decode).
//!
//! **Register tiles.** A call takes `S` of a group's eight weight rows and `J` activation rows and
//! keeps their `S x J` sums in registers over all block columns; per block it loads each activation
//! row's 32 values into registers once and decodes each weight row once, then runs the `2 S J` FMAs
//! on registers. (An FMA with a memory operand ran at about 1.2 a cycle on an Intel Sapphire Rapids
//! VM, against 2 a cycle for two registers: the kernels that read the activations from memory for
//! every weight row were bound by it.) One or two activation rows (decode) take all eight weight
//! rows at once, three to five take four, six two ([`tile_rows`]); a group's weights
//! are then decoded two or four times per call, from L1 after the first (and where the rows'
//! activations outgrow 16 KiB, the tiles take them a chunk of block columns at a time:
//! [`chunk_columns`]). Criterion (`-- rows_`, one thread, 1536 x 576 `Q4_1` against the kernels
//! before, which loaded the activations for every weight row and multiplied `d` per activation
//! row): 9 rows 233-259 -> 198-200 us, 4 rows 106-114 -> 81-82 us, one row 38-40 us either way
//! (docs/performance.md, 2026-11-26 morning).

use std::arch::x86_64::*;
use std::ops::Range;

use kindle_gguf::quant::GgmlType;

use super::columns::{SuperBlock, column, for_each_column};
use super::packed::LANE_ROWS;
use super::prefetch::{fast_kernels, prefetch_ahead};

/// `Q8_0`'s block columns (272 bytes: eight `f16` `d`, then eight rows of 32 `i8`), beside
/// the formats of [`super::columns`].
const Q8_0: u8 = 6;

/// Activation rows one call takes at most (with two weight rows: 12 sums, 12 activation
/// vectors and the decoded weights fill the 32 registers).
const J_MAX: usize = 6;

/// Bytes of activations a tile of fewer than eight weight rows keeps in L1 while it runs over
/// a chunk of block columns, before the next tile takes the same chunk: without chunks, six
/// rows of an FFN down projection (1536 values each) and the weights outgrew L1 and
/// `kindle serve`'s 16-stream steps were 20% slower; with chunks where the rows fit anyway
/// (576 values) a 9-row product was 10% slower.
const CHUNK_BYTES: usize = 16 * 1024;

/// Block columns per chunk for `j` activation rows of `nb` blocks: all of them where they
/// fit [`CHUNK_BYTES`], else whole K-quant super-blocks (eight) that fit, at least one.
const fn chunk_columns(j: usize, nb: usize) -> usize {
    let fit = CHUNK_BYTES / (128 * j);
    if fit >= nb {
        nb
    } else if fit >= 8 {
        fit / 8 * 8
    } else {
        8
    }
}

/// Whether these kernels cover `ty` (the AVX-512 `f32` activations of a packed matrix).
pub(crate) fn covers(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q8_0
    )
}

/// `groups` consecutive packed groups of `ty` times every activation row, `out[i * m + j]`
/// for row `i` of the groups: activation rows in even shares of at most [`J_MAX`], each
/// share in tiles of [`tile_rows`] weight rows, every group of a share in one call (the
/// choice of kernel and the rows' slices made once, not per group: a decode's groups of
/// SmolLM2 hold 18 block columns, and that per-group setup was about 7% of a one-thread
/// `f32` step); a group's eight sums are reduced together ([`reduce8`]).
///
/// # Safety
/// AVX-512F, AVX2, FMA and F16C; `covers(ty)`; `data` is `groups` whole packed groups of
/// `cols / 32` block columns; `plain` (`Q8_0`) or `permuted` (`Q4`) holds `m` activation rows
/// of `cols` values, and for `Q4` `block_sums` their `cols / 32` block sums each; `out` holds
/// `8 * groups * m` values.
pub(crate) unsafe fn group(
    ty: GgmlType,
    data: &[u8],
    groups: usize,
    (m, cols): (usize, usize),
    (plain, permuted, block_sums): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
) {
    let nb = cols / 32;
    let q8 = ty == GgmlType::Q8_0;
    let rows = if q8 { plain } else { permuted };
    let per_call = m.div_ceil(m.div_ceil(J_MAX));
    let mut j0 = 0;
    while j0 < m {
        let jn = per_call.min(m - j0);
        let xs = |jj: usize| &rows[(j0 + jj) * cols..(j0 + jj + 1) * cols];
        // `Q8_0` has no offsets: its sums are not read.
        let sums = |jj: usize| {
            if q8 {
                &[][..]
            } else {
                &block_sums[(j0 + jj) * nb..(j0 + jj + 1) * nb]
            }
        };
        // SAFETY: forwarded from the caller; `jn` rows from `j0` lie within `m`.
        unsafe { dispatch(ty, jn, data, groups, nb, &xs, &sums, (j0, m), out) };
        j0 += jn;
    }
}

/// Weight rows per tile for `jn` activation rows: what fits the registers beside the tile's
/// `2 * jn` activation vectors. Five rows in tiles of four keep 20 sums and 10 activation
/// vectors and spill a few to the stack, yet ran 10-15% faster than tiles of two (criterion
/// `rows_*_m5` and `_m9`, one thread: a group's columns walked, and each block's activations
/// loaded, twice instead of four times); six rows in tiles of four spilled most of their
/// activations and were slower than tiles of two.
const fn tile_rows(jn: usize) -> usize {
    match jn {
        1 | 2 => 8,
        3..=5 => 4,
        _ => 2,
    }
}

/// The tiles of `jn` activation rows (`j0..j0 + jn` of `m`) and format `ty` over each of
/// `groups` groups: all eight weight rows' sums, with the `Q4` offsets, to their places in
/// `dst` (`dst[(8 g + i) * m + j]` for row `i` of group `g`).
///
/// # Safety
/// As [`group`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn dispatch<'a>(
    ty: GgmlType,
    jn: usize,
    data: &[u8],
    groups: usize,
    nb: usize,
    xs: &dyn Fn(usize) -> &'a [f32],
    sums: &dyn Fn(usize) -> &'a [f32],
    (j0, m): (usize, usize),
    dst: &mut [f32],
) {
    use super::columns::{Q4_0, Q4_1, Q4_K};
    let group_bytes = data.len() / groups.max(1);
    macro_rules! rows {
        ($jn:literal) => {{
            const S: usize = tile_rows($jn);
            let (x, sum) = (std::array::from_fn(xs), std::array::from_fn(sums));
            for g in 0..groups {
                let w = data[g * group_bytes..].as_ptr();
                let mut res = [[0f32; 8]; $jn];
                let out = &mut res;
                let mut acc = [[[_mm512_setzero_ps(); S]; $jn]; 8 / S];
                let mut acc_min = [_mm256_setzero_ps(); $jn];
                // Tiles of fewer than eight weight rows read the activations 8 / S times: they go
                // a chunk of block columns at a time, so the chunk's activations stay in L1.
                let chunk = if S == 8 { nb } else { chunk_columns($jn, nb) };
                let mut b0 = 0;
                while b0 < nb {
                    let cols = b0..(b0 + chunk).min(nb);
                    for (k, acc) in acc.iter_mut().enumerate() {
                        let (s0, mins) = (k * S, &mut acc_min);
                        let c = cols.clone();
                        // SAFETY: forwarded from the caller.
                        unsafe {
                            match ty {
                                GgmlType::Q4_1 => tile::<S, $jn, Q4_1>(w, c, s0, x, sum, acc, mins),
                                GgmlType::Q4_0 => tile::<S, $jn, Q4_0>(w, c, s0, x, sum, acc, mins),
                                GgmlType::Q4_K => tile::<S, $jn, Q4_K>(w, c, s0, x, sum, acc, mins),
                                _ => tile::<S, $jn, Q8_0>(w, c, s0, x, sum, acc, mins),
                            }
                        }
                    }
                    b0 = cols.end;
                }
                for (j, out) in out.iter_mut().enumerate() {
                    let sums = reduce8(std::array::from_fn(|s| acc[s / S][j][s % S]));
                    // SAFETY: `out` holds eight floats.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sums) };
                }
                if S == 8 && ty != GgmlType::Q8_0 {
                    add_mins(&acc_min, out);
                } else if ty != GgmlType::Q8_0 {
                    // SAFETY: forwarded from the caller.
                    unsafe {
                        match ty {
                            GgmlType::Q4_1 => offsets::<$jn, Q4_1>(w, nb, sum, out),
                            GgmlType::Q4_0 => offsets::<$jn, Q4_0>(w, nb, sum, out),
                            _ => offsets::<$jn, Q4_K>(w, nb, sum, out),
                        }
                    }
                }
                for (jj, lanes) in res.iter().enumerate() {
                    for (s, &v) in lanes.iter().enumerate() {
                        dst[(8 * g + LANE_ROWS[s]) * m + j0 + jj] = v;
                    }
                }
            }
        }};
    }
    match jn {
        1 => rows!(1),
        2 => rows!(2),
        3 => rows!(3),
        4 => rows!(4),
        5 => rows!(5),
        _ => rows!(6),
    }
}

/// The eight weight rows' sums, each vector's 16 lanes added into lane `s` of the result, in
/// `_mm512_reduce_add_ps`' order (halves, quarters, then lanes `(0 + 2) + (1 + 3)`), so the
/// bits are its bits, eight rows at a time: 24 operations instead of 64.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
fn reduce8(v: [__m512; 8]) -> __m256 {
    // [a.0 + a.2, a.1 + a.3, b.0 + b.2, b.1 + b.3] in 128-bit chunks.
    let halves = |a: __m512, b: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
        )
    };
    // [a, b, c, d]: each row's two chunks of `halves` added.
    let quarters = |ab: __m512, cd: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(ab, cd),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(ab, cd),
        )
    };
    let q0 = quarters(halves(v[0], v[1]), halves(v[2], v[3]));
    let q1 = quarters(halves(v[4], v[5]), halves(v[6], v[7]));
    // Chunk c: [r.0 + r.2, r'.0 + r'.2, r.1 + r.3, r'.1 + r'.3] for rows r = c, r' = 4 + c.
    let t = _mm512_add_ps(_mm512_unpacklo_ps(q0, q1), _mm512_unpackhi_ps(q0, q1));
    // Lanes 0 and 1 of chunk c: rows c and 4 + c.
    let t = _mm512_add_ps(t, _mm512_permute_ps::<0b01_00_11_10>(t));
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castps512_ps256(_mm512_permutexvar_ps(order, t))
}

/// Block column `b` of a group in format `F`: where its quants start, and the eight rows'
/// `d` and `m` in lane order (`m` zero for `Q8_0`). Columns in order from 0 (see [`column()`]).
/// A `Q8_0` column prefetches the one ahead where `prefetch` says so
/// ([`fast_kernels`]); the `Q4` formats' always do.
///
/// # Safety
/// As [`column()`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn column_of<const F: u8>(
    w: *const u8,
    b: usize,
    sb: &mut SuperBlock,
    prefetch: bool,
) -> (*const u8, __m256, __m256) {
    // SAFETY: forwarded from the caller; a prefetch never faults.
    unsafe {
        if F == Q8_0 {
            let col = w.add(b * 272);
            if prefetch {
                prefetch_ahead(col, 272);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(col as *const __m128i));
            (col.add(16), d, _mm256_setzero_ps())
        } else {
            column::<F>(w, b, sb)
        }
    }
}

/// `Q4`: row `row`'s 32 weights in the block column whose quants start at `data`, in the
/// permuted order, looked up in `table` (`d * q` for `q` in `0..16`). Lane `l` takes word
/// `l % 4` of the row's 16 bytes shifted right by `8 * (l / 4)` (the first half) or 4 bits
/// more (the second); `vpermps` reads the low four bits of each lane.
///
/// # Safety
/// AVX-512F; `data` holds the column's quants.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn q4_weights(data: *const u8, row: usize, table: __m512) -> [__m512; 2] {
    let shift = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
    // SAFETY: the row's quants lie within the column (caller).
    let v = unsafe { _mm_loadu_si128(data.add(16 * row) as *const __m128i) };
    let lo = _mm512_srlv_epi32(_mm512_broadcast_i32x4(v), shift);
    let hi = _mm512_srli_epi32::<4>(lo);
    [
        _mm512_permutexvar_ps(lo, table),
        _mm512_permutexvar_ps(hi, table),
    ]
}

/// `Q8_0`: row `row`'s 32 quants in the block column whose quants start at `data`, as `f32`.
///
/// # Safety
/// AVX-512F; `data` holds the column's quants.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn q8_weights(data: *const u8, row: usize) -> [__m512; 2] {
    std::array::from_fn(|h| {
        // SAFETY: the row's quants lie within the column (caller).
        let bytes = unsafe { _mm_loadu_si128(data.add(32 * row + 16 * h) as *const __m128i) };
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes))
    })
}

/// Block column `b`'s offsets `m` times each row's block sum, added to the row's eight
/// lanes of offset sums (`Q4` formats only).
///
/// # Safety
/// AVX2 and FMA; each `sums[j]` holds block `b`.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn add_offsets<const JN: usize>(
    acc_min: &mut [__m256; JN],
    m: __m256,
    sums: &[&[f32]; JN],
    b: usize,
) {
    for j in 0..JN {
        // SAFETY: block `b` lies within every row's sums (caller).
        let sum = _mm256_set1_ps(unsafe { *sums[j].get_unchecked(b) });
        acc_min[j] = _mm256_fmadd_ps(m, sum, acc_min[j]);
    }
}

/// Weight rows `LANE_ROWS[s0..s0 + S]` of a packed group times activation rows `xs`
/// (permuted for `Q4`, plain for `Q8_0`) over block columns `cols`, added to the pairs'
/// partial sums `sums_in`. With all eight weight rows (`S == 8`) a `Q4` tile sums the
/// offsets too, into `mins_in` (from `sums`, the rows' block sums); else [`offsets`] does.
///
/// # Safety
/// AVX-512F, AVX2, FMA, F16C; `w` holds the group's block columns `cols` of format `F`,
/// `cols` starts at a K-quant super-block; every `xs[j]` holds their activation blocks (and
/// `sums[j]` their sums, for a `Q4` tile of eight rows); `s0 + S <= 8`.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline(never)]
unsafe fn tile<const S: usize, const J: usize, const F: u8>(
    w: *const u8,
    cols: Range<usize>,
    s0: usize,
    xs: [&[f32]; J],
    sums: [&[f32]; J],
    sums_in: &mut [[__m512; S]; J],
    mins_in: &mut [__m256; J],
) {
    let (mut acc, mut acc_min) = (*sums_in, *mins_in);
    let iota = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    let mut sb = SuperBlock::new();
    let prefetch = F != Q8_0 || fast_kernels();
    for_each_column::<F>(cols, |b| {
        // SAFETY: block column `b` lies within the group; activation block `b` within every
        // row.
        unsafe {
            let (data, dv, m) = column_of::<F>(w, b, &mut sb, prefetch);
            let mut d = [0f32; 8];
            _mm256_storeu_ps(d.as_mut_ptr(), dv);
            let x: [[__m512; 2]; J] = std::array::from_fn(|j| {
                let p = xs[j].as_ptr().add(32 * b);
                [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))]
            });
            for (t, &row) in LANE_ROWS[s0..s0 + S].iter().enumerate() {
                let d = _mm512_set1_ps(d[s0 + t]);
                if F == Q8_0 {
                    let wv = q8_weights(data, row);
                    for j in 0..J {
                        let p = _mm512_mul_ps(wv[0], x[j][0]);
                        let p = _mm512_fmadd_ps(wv[1], x[j][1], p);
                        acc[j][t] = _mm512_fmadd_ps(p, d, acc[j][t]);
                    }
                } else {
                    let wv = q4_weights(data, row, _mm512_mul_ps(d, iota));
                    for j in 0..J {
                        let a = _mm512_fmadd_ps(wv[0], x[j][0], acc[j][t]);
                        acc[j][t] = _mm512_fmadd_ps(wv[1], x[j][1], a);
                    }
                }
            }
            if S == 8 && F != Q8_0 {
                add_offsets(&mut acc_min, m, &sums, b);
            }
        }
    });
    (*sums_in, *mins_in) = (acc, acc_min);
}

/// Adds the `Q4` offsets to [`tile`]'s sums: each block column's `m` times each row's block
/// sum, accumulated in the eight rows' lanes over the columns.
///
/// # Safety
/// AVX-512F, AVX2, FMA, F16C; `w` holds `nb` block columns of `Q4` format `F`; every
/// `sums[j]` holds `nb` block sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn offsets<const J: usize, const F: u8>(
    w: *const u8,
    nb: usize,
    sums: [&[f32]; J],
    out: &mut [[f32; 8]; J],
) {
    let mut acc_min = [_mm256_setzero_ps(); J];
    let mut sb = SuperBlock::new();
    for_each_column::<F>(0..nb, |b| {
        // SAFETY: block column `b` lies within the `nb` columns.
        unsafe {
            let (_, _, m) = column_of::<F>(w, b, &mut sb, true);
            add_offsets(&mut acc_min, m, &sums, b);
        }
    });
    add_mins(&acc_min, out);
}

/// Adds each row's eight offset sums (lane order) to its outputs.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
fn add_mins<const J: usize>(acc_min: &[__m256; J], out: &mut [[f32; 8]; J]) {
    for j in 0..J {
        let mut mins = [0f32; 8];
        // SAFETY: `mins` holds eight floats.
        unsafe { _mm256_storeu_ps(mins.as_mut_ptr(), acc_min[j]) };
        for s in 0..8 {
            out[j][s] += mins[s];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::Simd;

    /// [`reduce8`] gives each of its eight vectors the bits `_mm512_reduce_add_ps` gives it,
    /// on lanes of mixed signs and magnitudes (where the order of the additions shows).
    #[test]
    fn reduce8_has_the_bits_of_one_vector_reductions() {
        if Simd::detect() != Simd::Avx512 {
            return;
        }
        let mut state = 0x2545_f491_u32;
        let mut float = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let exponent = (state % 24) as i32 - 12;
            (state >> 8) as f32 / (1u32 << 24) as f32 * 2f32.powi(exponent) - 0.5
        };
        for _ in 0..1000 {
            let lanes: [[f32; 16]; 8] = std::array::from_fn(|_| std::array::from_fn(|_| float()));
            // SAFETY: AVX-512F was detected; each row holds 16 floats and `got` eight.
            unsafe {
                let v = lanes.map(|l| _mm512_loadu_ps(l.as_ptr()));
                let mut got = [0f32; 8];
                _mm256_storeu_ps(got.as_mut_ptr(), reduce8(v));
                let want = v.map(|v| _mm512_reduce_add_ps(v));
                assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{lanes:?}");
            }
        }
    }
}
