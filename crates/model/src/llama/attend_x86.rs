//! AVX-512 forms of the host attention's inner loops (a leaf of `host_attend.rs`), each with
//! exactly the arithmetic of the portable loop it replaces, so that a row's output has the
//! same bits whichever runs it.
//!
//! - [`weighted_sums`]: the weighted sum of a long row (decode at depth) for every query head
//!   of a KV head at once, over a stripe of columns: each value row is read once, in order
//!   (whole cache lines, one stream), and each column is the same FMA chain over positions as
//!   `attend_keys::weighted_sum_cols`.
//! - [`accumulate`]: the weighted sums of a prefill task's rows, a tile of rows reading each
//!   value row once, each row's chains continuing from where they stand (so a task can sum
//!   a row's own first positions alone, the positions all its rows see together, and each
//!   row's last positions alone, and every column still runs one chain in order).
//! - [`scores`]: eight keys' dot products with a query, the lanes' sums transposed; [`scores2`]
//!   the same for two queries at once.
//!
//! [`weighted_sums`] and [`scores`] read `f16` and int8 caches in place as well
//! (`attend_stored::Stored`): the values a decode into `f32` scratch would give, the same
//! bits, from a half or a quarter of the bytes.

use std::arch::x86_64::*;

use super::attend_stored::{Stored, check_scales, load8, load16};

/// Whether this CPU runs these kernels (AVX-512F besides AVX2 and FMA), within the cap the
/// weight kernels obey (`KINDLE_SIMD`).
pub(super) fn available() -> bool {
    use std::sync::OnceLock;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        kindle_kernels::simd_level() == "AVX-512"
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    })
}

/// Stored values in one 64-byte cache line.
pub(super) const fn per_line<E>() -> usize {
    64 / std::mem::size_of::<E>()
}

/// Value rows ahead of the one being summed that [`weighted_sums`] prefetches (into L1):
/// SmolLM2's decode at depth 4096 ran 10-15% faster with 8 than with the hardware's
/// prefetching alone (16 was no better).
const PREFETCH_ROWS: usize = 8;

/// Value rows ahead of the one being summed that [`weighted_sums`] also asks for into L2
/// (`prefetcht1`) where they are `f32`: the cache's values come from memory (a token's weights
/// push them out of the caches), and eight rows into L1 left an `f32` cache's long rows
/// waiting on it. SmolLM2 on a Zen 4 at depth 2048, with [`attend_heads`]' far prefetch of the
/// keys: attention 8.4-8.8 -> 7.1-7.4 ms a token at one thread, 5.5-6.0 -> 5.0-5.1 at two
/// (16 rows was slower, 64 no faster); over an `f16` or `int8` cache (a half or a quarter of the
/// bytes a row) it was no faster, and at two threads over `int8` slower, so those keep the L1
/// prefetch alone (docs/performance.md, 2026-11-30 (8)).
///
/// [`attend_heads`]: super::attend_heads
const FAR_ROWS: usize = 32;

/// Groups of eight keys ahead of the one being scored that [`scores`] prefetches.
const PREFETCH_GROUPS: usize = 1;

/// Query heads one call of [`weighted_sums`] takes at most.
pub(super) const MAX_HEADS: usize = 4;

/// Columns one call of [`weighted_sums`] takes at most (four 16-lane vectors).
pub(super) const MAX_COLS: usize = 64;

/// `out[h] = sum_j weights[h][j] * rows[j][col..col + out[h].len()]` for up to
/// [`MAX_HEADS`] heads, the rows `width` wide and given as runs one after another, each column
/// an FMA chain over `j` in order from `+0.0` (`attend_keys::weighted_sum_cols`' arithmetic).
/// Every head's output is as wide, a multiple of 16 and at most [`MAX_COLS`].
///
/// # Panics
/// If the heads or widths are out of those bounds, or a head has fewer weights than rows.
pub(super) fn weighted_sums<E: Stored>(
    weights: &[&[f32]],
    (runs, scales): (&[&[E]], &[&[f32]]),
    width: usize,
    col: usize,
    out: &mut [&mut [f32]],
) {
    let cols = out[0].len();
    assert!(
        available()
            && (1..=MAX_HEADS).contains(&weights.len())
            && weights.len() == out.len()
            && cols.is_multiple_of(16)
            && (16..=MAX_COLS).contains(&cols)
            && out.iter().all(|o| o.len() == cols)
            && col + cols <= width,
        "weighted_sums: heads {} (at most {MAX_HEADS}), columns {cols} (16..={MAX_COLS}, \
         multiple of 16) at {col} of {width}",
        weights.len()
    );
    let rows: usize = runs.iter().map(|r| r.len() / width).sum();
    assert!(
        weights.iter().all(|w| w.len() >= rows) && check_scales(runs, scales, width),
        "weighted_sums: fewer weights than rows, or scales not one per int8 row"
    );
    macro_rules! dispatch {
        ($($h:literal),*) => {
            match (weights.len(), cols / 16) {
                $(
                    ($h, 1) => sums_at::<$h, 1, E>(weights, (runs, scales), width, col, out),
                    ($h, 2) => sums_at::<$h, 2, E>(weights, (runs, scales), width, col, out),
                    ($h, 3) => sums_at::<$h, 3, E>(weights, (runs, scales), width, col, out),
                    ($h, 4) => sums_at::<$h, 4, E>(weights, (runs, scales), width, col, out),
                )*
                _ => unreachable!("checked above"),
            }
        };
    }
    dispatch!(1, 2, 3, 4);
}

/// [`weighted_sums`] for `H` heads and `V` vectors of columns.
fn sums_at<const H: usize, const V: usize, E: Stored>(
    weights: &[&[f32]],
    runs: (&[&[E]], &[&[f32]]),
    width: usize,
    col: usize,
    out: &mut [&mut [f32]],
) {
    // SAFETY: `available()` was checked by the caller, and the bounds of every read below.
    unsafe { sums_avx512::<H, V, E>(weights, runs, width, col, out) }
}

/// # Safety
/// AVX-512F, AVX2, FMA and F16C; the bounds [`weighted_sums`] checks.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn sums_avx512<const H: usize, const V: usize, E: Stored>(
    weights: &[&[f32]],
    (runs, scales): (&[&[E]], &[&[f32]]),
    width: usize,
    col: usize,
    out: &mut [&mut [f32]],
) {
    let mut acc = [[_mm512_setzero_ps(); V]; H];
    let w: [*const f32; H] = std::array::from_fn(|h| weights[h].as_ptr());
    let mut j = 0;
    for (r, run) in runs.iter().enumerate() {
        let n = run.len() / width;
        let mut p = run.as_ptr().wrapping_add(col);
        for i in 0..n {
            // SAFETY: row `j` of the runs has columns `col..col + 16 V` (`col + 16 V <=
            // width`), every head has weight `j`, and an int8 row its scale (checked by the
            // caller).
            unsafe {
                let scale = if E::SCALED {
                    _mm512_set1_ps(*scales.get_unchecked(r).get_unchecked(i))
                } else {
                    _mm512_setzero_ps()
                };
                let x: [__m512; V] = std::array::from_fn(|v| load16(p.add(16 * v), scale));
                // A prefetch never faults, past the last row included.
                let ahead = p.wrapping_add(PREFETCH_ROWS * width);
                for c in (0..16 * V).step_by(per_line::<E>()) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(c) as *const i8);
                }
                if size_of::<E>() == size_of::<f32>() {
                    let far = p.wrapping_add(FAR_ROWS * width);
                    for c in (0..16 * V).step_by(per_line::<E>()) {
                        _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(c) as *const i8);
                    }
                }
                for h in 0..H {
                    let wj = _mm512_set1_ps(*w[h].add(j));
                    for v in 0..V {
                        acc[h][v] = _mm512_fmadd_ps(wj, x[v], acc[h][v]);
                    }
                }
            }
            p = p.wrapping_add(width);
            j += 1;
        }
    }
    for (out, acc) in out.iter_mut().zip(&acc) {
        for (v, acc) in acc.iter().enumerate() {
            // SAFETY: `out` holds `16 V` floats.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * v), *acc) };
        }
    }
}

/// `scores[i] = key_dot(q, k_i) * scale` (`attend_keys::key_dot`'s arithmetic: eight lanes,
/// each an FMA chain over the 8-value chunks from `+0.0`, the lanes summed in order, plus the
/// empty tail's `+0.0`) for the first keys of `keys` in whole groups of eight; returns how
/// many it scored (the rest are the caller's). Each group's eight lane vectors are transposed
/// so that the lanes' sums run as eight vertical additions, eight keys at a time, instead of
/// eight scalar additions a key. The 256-bit form runs with AVX-512 (its 32 registers) or, on
/// a CPU with only AVX2, FMA and F16C, in AVX2 (the same instructions and bits: on the AVX2
/// path a long row's scores had been four keys at a time with scalar lane sums, 25% of a
/// SmolLM2 decode step at depth 4096).
///
/// # Panics
/// If neither form can run, `q` is not a whole number of 8-value chunks, or `keys` holds fewer
/// keys than `scores`.
pub(super) fn scores<E: Stored>(
    q: &[f32],
    (keys, key_scales): (&[E], &[f32]),
    scale: f32,
    scores: &mut [f32],
) -> usize {
    let hd = q.len();
    let avx512 = available();
    assert!(
        (avx512 || super::attend_stored::avx2_available())
            && hd.is_multiple_of(8)
            && hd > 0
            && keys.len() >= scores.len() * hd
            && (if E::SCALED {
                key_scales.len() >= scores.len()
            } else {
                key_scales.is_empty()
            }),
        "scores: head width {hd} (a multiple of 8), {} keys for {} scores, {} scales",
        keys.len() / hd.max(1),
        scores.len(),
        key_scales.len()
    );
    let groups = scores.len() / 8;
    let (keys, scores) = ((keys, key_scales), &mut scores[..8 * groups]);
    // SAFETY: the form's features (checked above) and the bounds checked above.
    unsafe {
        if avx512 {
            scores_avx512(q, keys, scale, scores);
        } else {
            scores_avx2(q, keys, scale, scores);
        }
    }
    8 * groups
}

/// [`scores_body`] with AVX-512 (the 256-bit instructions, with 32 registers).
///
/// # Safety
/// AVX-512F and VL, AVX2, FMA and F16C; as [`scores_body`].
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn scores_avx512<E: Stored>(
    q: &[f32],
    keys: (&[E], &[f32]),
    scale: f32,
    scores: &mut [f32],
) {
    // SAFETY: forwarded from the caller.
    unsafe { scores_body(q, keys, scale, scores) }
}

/// [`scores_body`] with AVX2 only.
///
/// # Safety
/// AVX2, FMA and F16C; as [`scores_body`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_avx2<E: Stored>(q: &[f32], keys: (&[E], &[f32]), scale: f32, scores: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { scores_body(q, keys, scale, scores) }
}

/// # Safety
/// Inlined only into a function with AVX2, FMA and F16C (no closure inside, so every
/// intrinsic is compiled with them); `q.len()` a multiple of 8, `scores.len()` a multiple of
/// 8 and `keys` at least `scores.len()` keys (each with its scale where int8).
#[inline(always)]
unsafe fn scores_body<E: Stored>(
    q: &[f32],
    (keys, key_scales): (&[E], &[f32]),
    scale: f32,
    scores: &mut [f32],
) {
    let hd = q.len();
    let chunks = hd / 8;
    // SAFETY: the features (the caller's) and the bounds (the caller's: chunk `c` of `q` and
    // of the group's eight keys exist, and an int8 key has its scale); a prefetch never
    // faults.
    unsafe {
        let scale = _mm256_set1_ps(scale);
        let zero = _mm256_setzero_ps();
        for (g, out) in scores.chunks_exact_mut(8).enumerate() {
            let base = keys.as_ptr().wrapping_add(8 * g * hd);
            for l in (0..8 * hd).step_by(per_line::<E>()) {
                _mm_prefetch::<_MM_HINT_T0>(
                    base.wrapping_add(PREFETCH_GROUPS * 8 * hd + l) as *const i8
                );
            }
            let mut acc = [zero; 8];
            let mut ks = [zero; 8];
            if E::SCALED {
                for (k, s) in ks.iter_mut().enumerate() {
                    *s = _mm256_set1_ps(*key_scales.get_unchecked(8 * g + k));
                }
            }
            for c in 0..chunks {
                let x = _mm256_loadu_ps(q.as_ptr().add(8 * c));
                for (k, acc) in acc.iter_mut().enumerate() {
                    let y = load8(base.add(k * hd + 8 * c), ks[k]);
                    *acc = _mm256_fmadd_ps(x, y, *acc);
                }
            }
            finish8(acc, scale, out);
        }
    }
}

/// The eight scores of a group from its eight keys' lane vectors `acc`: each key's lanes
/// summed in order (transposed, so eight vertical adds), the empty tail's `+0.0` added, times
/// `scale`, into `out`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn finish8(acc: [__m256; 8], scale: __m256, out: &mut [f32]) {
    let lanes = transpose8(acc);
    // `-0.0 + lanes[0]` is `lanes[0]`, bit for bit.
    let mut sum = lanes[0];
    for lane in &lanes[1..] {
        sum = _mm256_add_ps(sum, *lane);
    }
    let sum = _mm256_mul_ps(_mm256_add_ps(sum, _mm256_setzero_ps()), scale);
    assert!(out.len() >= 8, "eight scores");
    // SAFETY: `out` holds eight floats (checked).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
}

/// [`scores`] of two queries over the same keys (`out[r]` for query `q[r]`): each chunk of
/// eight keys is loaded once for both, so the keys stream from the cache half as often; the
/// arithmetic of every score is [`scores`]'s. Returns how many keys it scored.
///
/// # Panics
/// As [`scores`], or if the two outputs differ in length.
pub(super) fn scores2(q: [&[f32]; 2], keys: &[f32], scale: f32, out: [&mut [f32]; 2]) -> usize {
    let hd = q[0].len();
    let n = out[0].len();
    assert!(
        available()
            && hd.is_multiple_of(8)
            && hd > 0
            && q[1].len() == hd
            && out[1].len() == n
            && keys.len() >= n * hd,
        "scores2: head width {hd} (a multiple of 8, both queries), {} keys for {n} scores",
        keys.len() / hd.max(1)
    );
    let [a, b] = out;
    let groups = n / 8;
    // SAFETY: `available()`; the bounds checked above.
    unsafe { scores2_avx512(q, keys, scale, [&mut a[..8 * groups], &mut b[..8 * groups]]) };
    8 * groups
}

/// # Safety
/// As [`scores_avx512`], for both queries and outputs.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn scores2_avx512(q: [&[f32]; 2], keys: &[f32], scale: f32, out: [&mut [f32]; 2]) {
    let hd = q[0].len();
    let chunks = hd / 8;
    let scale = _mm256_set1_ps(scale);
    let zero = _mm256_setzero_ps();
    let [o0, o1] = out;
    for (g, (o0, o1)) in o0
        .chunks_exact_mut(8)
        .zip(o1.chunks_exact_mut(8))
        .enumerate()
    {
        let base = keys.as_ptr().wrapping_add(8 * g * hd);
        let mut acc = [[zero; 8]; 2];
        for c in 0..chunks {
            // SAFETY: chunk `c` of both queries and of the group's eight keys exist (caller).
            unsafe {
                let x = [
                    _mm256_loadu_ps(q[0].as_ptr().add(8 * c)),
                    _mm256_loadu_ps(q[1].as_ptr().add(8 * c)),
                ];
                let [a0, a1] = &mut acc;
                for (k, (a0, a1)) in a0.iter_mut().zip(a1.iter_mut()).enumerate() {
                    let y = _mm256_loadu_ps(base.add(k * hd + 8 * c));
                    *a0 = _mm256_fmadd_ps(x[0], y, *a0);
                    *a1 = _mm256_fmadd_ps(x[1], y, *a1);
                }
            }
        }
        for (acc, out) in acc.into_iter().zip([o0, o1]) {
            finish8(acc, scale, out);
        }
    }
}

/// The 8x8 transpose: lane `k` of output `l` is lane `l` of input `k`.
#[target_feature(enable = "avx2")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Rows one call of [`accumulate`]'s kernel takes at a time (six rows' 64 columns are 24
/// accumulators, with four value vectors in the 32 registers).
const TILE_ROWS: usize = 6;

/// `acc[r] += sum_j weights[r][j] * rows[j]` for rows of `width` values given as runs one
/// after another (`width` a multiple of 64), every column continuing its FMA chain over `j`
/// in order (`attend_keys::weighted_sum_cols`' arithmetic, started from `acc[r]`): a tile of
/// up to six rows reads each value row once, 64 columns at a time.
///
/// # Panics
/// If `width` is not a multiple of 64, an `acc[r]` is not `width` wide, or a row of
/// `weights` is shorter than the runs.
pub(super) fn accumulate(
    acc: &mut [&mut [f32]],
    weights: &[&[f32]],
    runs: &[&[f32]],
    width: usize,
) {
    let rows: usize = runs.iter().map(|r| r.len() / width).sum();
    assert!(
        available()
            && width.is_multiple_of(64)
            && width > 0
            && acc.len() == weights.len()
            && acc.iter().all(|a| a.len() == width)
            && weights.iter().all(|w| w.len() >= rows),
        "accumulate: width {width} (a multiple of 64), {} rows of accumulators for {} of \
         weights, {rows} value rows",
        acc.len(),
        weights.len()
    );
    for (acc, weights) in acc.chunks_mut(TILE_ROWS).zip(weights.chunks(TILE_ROWS)) {
        for col in (0..width).step_by(64) {
            // SAFETY: `available()`; the bounds checked above.
            unsafe {
                match acc.len() {
                    1 => accumulate_avx512::<1>(acc, weights, runs, width, col),
                    2 => accumulate_avx512::<2>(acc, weights, runs, width, col),
                    3 => accumulate_avx512::<3>(acc, weights, runs, width, col),
                    4 => accumulate_avx512::<4>(acc, weights, runs, width, col),
                    5 => accumulate_avx512::<5>(acc, weights, runs, width, col),
                    _ => accumulate_avx512::<6>(acc, weights, runs, width, col),
                }
            }
        }
    }
}

/// [`accumulate`] for `R` rows and columns `col..col + 64`.
///
/// # Safety
/// AVX-512F, AVX2 and FMA; `R` accumulator and weight rows within [`accumulate`]'s bounds.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn accumulate_avx512<const R: usize>(
    acc: &mut [&mut [f32]],
    weights: &[&[f32]],
    runs: &[&[f32]],
    width: usize,
    col: usize,
) {
    // SAFETY: each accumulator row has columns `col..col + 64` (caller).
    let mut sums: [[__m512; 4]; R] = std::array::from_fn(|r| {
        std::array::from_fn(|v| unsafe { _mm512_loadu_ps(acc[r].as_ptr().add(col + 16 * v)) })
    });
    let w: [*const f32; R] = std::array::from_fn(|r| weights[r].as_ptr());
    let mut j = 0;
    for run in runs {
        let mut p = run.as_ptr().wrapping_add(col);
        for _ in 0..run.len() / width {
            // SAFETY: value row `j` has columns `col..col + 64`, every weight row weight `j`.
            unsafe {
                let x: [__m512; 4] = std::array::from_fn(|v| _mm512_loadu_ps(p.add(16 * v)));
                for r in 0..R {
                    let wj = _mm512_set1_ps(*w[r].add(j));
                    for v in 0..4 {
                        sums[r][v] = _mm512_fmadd_ps(wj, x[v], sums[r][v]);
                    }
                }
            }
            p = p.wrapping_add(width);
            j += 1;
        }
    }
    for (acc, sums) in acc.iter_mut().zip(&sums) {
        for (v, sum) in sums.iter().enumerate() {
            // SAFETY: as the loads above.
            unsafe { _mm512_storeu_ps(acc.as_mut_ptr().add(col + 16 * v), *sum) };
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    use super::super::attend_keys::tests::values;
    use super::super::attend_stored::tests::{bits, halves, int8s};

    /// Whether the AVX-512 kernels run here to be checked: they must on a CPU that has what
    /// they use (unless `KINDLE_SIMD` caps the kernels below it), so a detection that leaves
    /// them out fails; on a CPU without it (AVX2 only) there is nothing to check, said so.
    pub(in crate::llama) fn need_avx512(what: &str) -> bool {
        if available() {
            return true;
        }
        assert!(
            !kindle_kernels::cpu_runs_avx512() || std::env::var_os("KINDLE_SIMD").is_some(),
            "this CPU has AVX-512 but the {what} run {}: the kernels' detection leaves it out",
            kindle_kernels::simd_level()
        );
        eprintln!(
            "note: the AVX-512 {what} are not checked: this CPU (or KINDLE_SIMD) runs {}",
            kindle_kernels::simd_level()
        );
        false
    }

    /// Every score has the bits of the portable `key_dot` times the scale, for head widths of
    /// one to many chunks; keys past the last whole eight are left to the caller.
    #[test]
    fn scores_have_the_bits_of_key_dot() {
        if !need_avx512("attention kernels") {
            return;
        }
        for hd in [8, 16, 64, 72, 256] {
            let n = 8 * 5 + 3;
            let q = values(hd, 3 + hd as u32);
            let keys = values(n * hd, 11 + hd as u32);
            let mut got = vec![f32::NAN; n];
            let done = scores(&q, (&keys, &[]), 0.125, &mut got);
            assert_eq!(done, 40);
            for (i, k) in keys.chunks_exact(hd).take(done).enumerate() {
                let want = super::super::attend_keys::key_dot(&q, k) * 0.125;
                assert_eq!(got[i].to_bits(), want.to_bits(), "hd {hd}, key {i}");
            }
            assert!(got[done..].iter().all(|s| s.is_nan()), "the rest untouched");
        }
        // All-zero products give +0.0 (the tail's +0.0 added), as `key_dot` does.
        let z = vec![-0.0f32; 64];
        let mut got = [1.0f32; 8];
        scores(&z, (&z.repeat(8), &[]), 1.0, &mut got);
        let want = super::super::attend_keys::key_dot(&z, &z);
        assert!(got.iter().all(|g| g.to_bits() == want.to_bits()));
    }

    /// The AVX2 form of the scores (what an AVX2-only CPU runs) has the bits of `key_dot`
    /// times the scale, from `f32`, `f16` and int8 keys alike.
    #[test]
    fn the_avx2_form_of_the_scores_has_the_bits_of_key_dot() {
        assert!(
            super::super::attend_stored::avx2_available(),
            "the AVX2 scores are not tested: no AVX2/FMA/F16C"
        );
        for hd in [8, 64, 72, 256] {
            let n = 8 * 4;
            let q = values(hd, 5 + hd as u32);
            let keys = values(n * hd, 13 + hd as u32);
            let (h, wide16) = halves(n * hd, 17 + hd as u32);
            let (q8, scales, wide8) = int8s(n, hd, 19 + hd as u32);
            let key_dots = |keys: &[f32]| -> Vec<u32> {
                let dots = keys
                    .chunks_exact(hd)
                    .map(|k| super::super::attend_keys::key_dot(&q, k) * 0.125);
                dots.map(f32::to_bits).collect()
            };
            let mut got = vec![f32::NAN; n];
            // SAFETY: AVX2, FMA and F16C (asserted); `n` keys of `hd`, a multiple of 8.
            unsafe { scores_avx2(&q, (&keys[..], &[]), 0.125, &mut got) };
            assert_eq!(bits(&got), key_dots(&keys), "f32, hd {hd}");
            // SAFETY: as above.
            unsafe { scores_avx2(&q, (&h[..], &[]), 0.125, &mut got) };
            assert_eq!(bits(&got), key_dots(&wide16), "f16, hd {hd}");
            // SAFETY: as above, a scale per int8 key.
            unsafe { scores_avx2(&q, (&q8[..], &scales[..]), 0.125, &mut got) };
            assert_eq!(bits(&got), key_dots(&wide8), "int8, hd {hd}");
        }
    }

    /// Scores and weighted sums read from `f16` or int8 have the bits of the same values
    /// converted to `f32` first (what a decode into scratch gives), over runs split anywhere.
    #[test]
    fn stored_reads_have_the_bits_of_decoded_values() {
        if !need_avx512("attention kernels") {
            return;
        }
        let hd = 64;
        let n = 8 * 6 + 3;
        let q = values(hd, 41);
        let (h, wide) = halves(n * hd, 42);
        let (q8, scales, wide8) = int8s(n, hd, 44);
        let (mut got, mut want) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        assert_eq!(scores(&q, (&h, &[]), 0.125, &mut got), 48);
        assert_eq!(scores(&q, (&wide, &[]), 0.125, &mut want), 48);
        assert_eq!(bits(&got), bits(&want), "f16 scores");
        assert_eq!(scores(&q, (&q8, &scales), 0.125, &mut got), 48);
        assert_eq!(scores(&q, (&wide8, &[]), 0.125, &mut want), 48);
        assert_eq!(bits(&got), bits(&want), "int8 scores");

        let rows = 37;
        let (h, wide) = halves(rows * hd, 43);
        let (q8, scales, wide8) = int8s(rows, hd, 45);
        let weights: Vec<Vec<f32>> = (0..3).map(|h| values(rows, 50 + h)).collect();
        let w: Vec<&[f32]> = weights.iter().map(|w| &w[..]).collect();
        fn sums<E: Stored>(w: &[&[f32]], runs: (&[&[E]], &[&[f32]]), cols: usize) -> Vec<u32> {
            let mut a = vec![vec![f32::NAN; cols]; w.len()];
            let mut outs: Vec<&mut [f32]> = a.iter_mut().map(|x| &mut x[..]).collect();
            weighted_sums(w, runs, 64, 64 - cols, &mut outs);
            bits(&a.concat())
        }
        for cols in [16, 32, 64] {
            let want = sums(&w, (&[&wide[..]], &[]), cols);
            let got = sums(&w, (&[&h[..9 * hd], &h[9 * hd..]], &[]), cols);
            assert_eq!(got, want, "f16 sums, {cols} columns");
            let want = sums(&w, (&[&wide8[..]], &[]), cols);
            let split = (
                &[&q8[..9 * hd], &q8[9 * hd..]][..],
                &[&scales[..9], &scales[9..]][..],
            );
            let got = sums(&w, split, cols);
            assert_eq!(got, want, "int8 sums, {cols} columns");
        }
    }

    /// Two queries scored together have the bits of each scored alone.
    #[test]
    fn scores_of_two_queries_have_the_bits_of_one() {
        if !need_avx512("attention kernels") {
            return;
        }
        for hd in [8, 64, 256] {
            let n = 8 * 3 + 5;
            let q = [values(hd, 5), values(hd, 6)];
            let keys = values(n * hd, 13 + hd as u32);
            let (mut a, mut b) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            let done = scores2([&q[0], &q[1]], &keys, 0.3, [&mut a, &mut b]);
            assert_eq!(done, 24);
            for (r, got) in [a, b].iter().enumerate() {
                let mut want = vec![f32::NAN; n];
                scores(&q[r], (&keys, &[]), 0.3, &mut want);
                for i in 0..n {
                    assert_eq!(
                        got[i].to_bits(),
                        want[i].to_bits(),
                        "hd {hd}, query {r}, key {i}"
                    );
                }
            }
        }
    }

    /// The weighted sums of up to four heads have the bits of the portable one-head sum, over
    /// rows split into runs anywhere and every stripe width.
    #[test]
    fn weighted_sums_have_the_bits_of_the_portable_sum() {
        if !need_avx512("attention kernels") {
            return;
        }
        let width = 128;
        let rows = values(37 * width, 7);
        let runs: Vec<&[f32]> = vec![
            &rows[..5 * width],
            &rows[5 * width..30 * width],
            &rows[30 * width..],
        ];
        for heads in 1..=MAX_HEADS {
            let weights: Vec<Vec<f32>> = (0..heads).map(|h| values(37, 20 + h as u32)).collect();
            let w: Vec<&[f32]> = weights.iter().map(|w| &w[..]).collect();
            for cols in [16, 32, 48, 64] {
                for col in [0, width - cols] {
                    let mut bufs = vec![vec![f32::NAN; cols]; heads];
                    let mut outs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                    weighted_sums(&w, (&runs, &[]), width, col, &mut outs);
                    for h in 0..heads {
                        for c in (0..cols).step_by(16) {
                            let mut want = [0f32; 16];
                            super::super::attend_keys::weighted_sum_cols::<16>(
                                &weights[h],
                                &[&rows[..]],
                                width,
                                col + c,
                                &mut want,
                            );
                            for l in 0..16 {
                                assert_eq!(
                                    bufs[h][c + l].to_bits(),
                                    want[l].to_bits(),
                                    "heads {heads}, cols {cols} at {col}, head {h}, col {}",
                                    c + l
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
