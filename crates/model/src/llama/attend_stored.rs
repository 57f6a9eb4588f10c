//! How the host attention reads a cache as it is stored (a leaf of `attend_x86.rs` and
//! `host_attend.rs`): [`Stored`] (`f32`; `f16`, widened as it is loaded; int8 with a scale
//! per vector, converted and multiplied by it: the one rounding of the cache's own decode),
//! its 8- and 16-value loads, and the AVX2 forms of four keys' dots (`f32` keys, or an `f16` or
//! int8 cache read in place: [`dot4_avx2`]) and of a long row's weighted sums for all the query
//! heads of a KV head at once, from any of the three ([`sum16_stored`]), for CPUs without
//! AVX-512 (the AVX-512 forms are `attend_x86`'s). Every value loaded is the value a decode
//! into `f32` scratch gives, so every output keeps its bits.

use std::arch::x86_64::*;

/// What a cache's keys and values are stored as: `f32`; `f16`, widened as it is loaded; or
/// `i8` with a scale per vector, each loaded quant converted and multiplied by its vector's
/// scale (one rounding, as the cache's decode into `f32` does).
pub(super) trait Stored: Copy + 'static {
    /// Whether the values are `half::f16`.
    const HALF: bool = false;
    /// Whether the values are `i8` quants with a scale per vector.
    const SCALED: bool = false;
    /// The value as `f32`, given its vector's scale (read only where [`Self::SCALED`]): what
    /// the vector loads give, one value at a time.
    fn widen(self, scale: f32) -> f32;
}

impl Stored for f32 {
    fn widen(self, _scale: f32) -> f32 {
        self
    }
}

impl Stored for half::f16 {
    const HALF: bool = true;
    fn widen(self, _scale: f32) -> f32 {
        self.to_f32()
    }
}

impl Stored for i8 {
    const SCALED: bool = true;
    fn widen(self, scale: f32) -> f32 {
        f32::from(self) * scale
    }
}

/// Eight stored values at `p` as `f32` (times `scale` for `i8`).
///
/// # Safety
/// AVX2 and F16C; eight readable values at `p`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn load8<E: Stored>(p: *const E, scale: __m256) -> __m256 {
    // SAFETY: eight readable values (caller).
    unsafe {
        if E::HALF {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        } else if E::SCALED {
            let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i));
            _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale)
        } else {
            _mm256_loadu_ps(p as *const f32)
        }
    }
}

/// Sixteen stored values at `p` as `f32` (times `scale` for `i8`).
///
/// # Safety
/// AVX-512F; sixteen readable values at `p`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn load16<E: Stored>(p: *const E, scale: __m512) -> __m512 {
    // SAFETY: sixteen readable values (caller).
    unsafe {
        if E::HALF {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        } else if E::SCALED {
            let q = _mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i));
            _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale)
        } else {
            _mm512_loadu_ps(p as *const f32)
        }
    }
}

/// Checks that `scales` gives each of `rows` stored `width`-wide vectors a scale where `E`
/// is scaled (one slice per run), and is empty otherwise.
pub(super) fn check_scales<E: Stored>(runs: &[&[E]], scales: &[&[f32]], width: usize) -> bool {
    if E::SCALED {
        scales.len() == runs.len()
            && runs
                .iter()
                .zip(scales)
                .all(|(r, s)| s.len() >= r.len() / width)
    } else {
        scales.is_empty()
    }
}

/// Whether this CPU runs the AVX2 forms ([`dot4_avx2`], [`sum16_stored`]): AVX2, FMA and
/// F16C (the host attention's AVX2 instances need them; the long row takes the forms where
/// the AVX-512 ones do not run).
pub(super) fn avx2_available() -> bool {
    use std::sync::OnceLock;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    })
}

/// `attend_keys::key_dot(q, k_j)` of four stored keys `k_j` (each at least `q.len()` values,
/// times `scales[j]` where int8), each with exactly its arithmetic: each key's eight lanes an
/// FMA chain over the 8-value chunks from `+0.0`, the lanes summed in order, plus the tail's
/// FMA chain. The four chains are independent, so they overlap in the pipes instead of each
/// waiting on its own additions. (`attend_keys::dot4`'s AVX2 instance for `f32` keys, and a
/// long row's scores over an `f16` or int8 cache read in place.)
///
/// # Safety
/// The CPU has AVX2, FMA and F16C ([`avx2_available`]); every key is at least as long as `q`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot4_avx2<E: Stored>(
    q: &[f32],
    keys: [&[E]; 4],
    scales: [f32; 4],
) -> [f32; 4] {
    let n = q.len() / 8 * 8;
    let keys = keys.map(|k| &k[..q.len()]);
    let mut acc = [_mm256_setzero_ps(); 4];
    let s = scales.map(|s| _mm256_set1_ps(s));
    let mut c = 0;
    while c < n {
        // SAFETY: `c + 8 <= n <= q.len()`, and every key is as long as `q`.
        unsafe {
            let x = _mm256_loadu_ps(q.as_ptr().add(c));
            for ((acc, k), s) in acc.iter_mut().zip(&keys).zip(&s) {
                *acc = _mm256_fmadd_ps(x, load8(k.as_ptr().add(c), *s), *acc);
            }
        }
        c += 8;
    }
    let lanes: [[f32; 8]; 4] = acc.map(|v| {
        let mut out = [0f32; 8];
        // SAFETY: `out` holds eight floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
        out
    });
    std::array::from_fn(|j| {
        let tail = q[n..]
            .iter()
            .zip(&keys[j][n..])
            .fold(0f32, |acc, (x, y)| x.mul_add(y.widen(scales[j]), acc));
        lanes[j].iter().sum::<f32>() + tail
    })
}

/// Query heads one call of [`sum16_stored`] takes at most (their 16 columns are two
/// accumulators each, beside the row's two vectors, in AVX2's sixteen registers).
pub(super) const SUM16_HEADS: usize = 4;

/// Columns `col..col + 16` of `sum_j weights[h][j] * rows[j]` for up to [`SUM16_HEADS`]
/// heads `h`, over stored rows `width` wide given as runs (and, where int8, each run's
/// scales, one per row), into `out[h]`: each row read once for all the heads, each column of
/// each head an FMA chain over `j` in order from `+0.0` (`attend_keys::weighted_sum_cols`'
/// arithmetic).
///
/// # Panics
/// If there are no heads or more than [`SUM16_HEADS`], `col + 16 > width`, a run's scales do
/// not cover its rows, a head has fewer weights than rows, or the CPU lacks
/// [`avx2_available`]'s features.
pub(super) fn sum16_stored<E: Stored>(
    weights: &[&[f32]],
    (runs, scales): (&[&[E]], &[&[f32]]),
    width: usize,
    col: usize,
    out: &mut [&mut [f32; 16]],
) {
    let rows: usize = runs.iter().map(|r| r.len() / width).sum();
    assert!(
        avx2_available()
            && (1..=SUM16_HEADS).contains(&weights.len())
            && out.len() == weights.len()
            && col + 16 <= width
            && weights.iter().all(|w| w.len() >= rows)
            && check_scales(runs, scales, width),
        "sum16_stored: {} heads (1..={SUM16_HEADS}), columns {col}..{} of {width}, {rows} rows",
        weights.len(),
        col + 16
    );
    // SAFETY: the features and bounds checked above.
    unsafe {
        match weights.len() {
            1 => sum16_avx2::<1, E>(weights, (runs, scales), width, col, out),
            2 => sum16_avx2::<2, E>(weights, (runs, scales), width, col, out),
            3 => sum16_avx2::<3, E>(weights, (runs, scales), width, col, out),
            _ => sum16_avx2::<4, E>(weights, (runs, scales), width, col, out),
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C; `H` heads within the bounds [`sum16_stored`] checks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum16_avx2<const H: usize, E: Stored>(
    weights: &[&[f32]],
    (runs, scales): (&[&[E]], &[&[f32]]),
    width: usize,
    col: usize,
    out: &mut [&mut [f32; 16]],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; H];
    let w: [*const f32; H] = std::array::from_fn(|h| weights[h].as_ptr());
    let mut j = 0;
    for (r, run) in runs.iter().enumerate() {
        let mut p = run.as_ptr().wrapping_add(col);
        for i in 0..run.len() / width {
            // SAFETY: row `j` has columns `col..col + 16`, every head weight `j`, and an int8
            // row its scale (caller).
            unsafe {
                let s = if E::SCALED {
                    _mm256_set1_ps(*scales.get_unchecked(r).get_unchecked(i))
                } else {
                    _mm256_setzero_ps()
                };
                let x = [load8(p, s), load8(p.add(8), s)];
                for h in 0..H {
                    let wj = _mm256_set1_ps(*w[h].add(j));
                    acc[h][0] = _mm256_fmadd_ps(wj, x[0], acc[h][0]);
                    acc[h][1] = _mm256_fmadd_ps(wj, x[1], acc[h][1]);
                }
            }
            p = p.wrapping_add(width);
            j += 1;
        }
    }
    for (out, acc) in out.iter_mut().zip(&acc) {
        // SAFETY: `out` holds sixteen floats.
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr(), acc[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), acc[1]);
        }
    }
}

/// Widest head [`sum_rows_stored`] takes (eight 8-lane accumulators).
pub(super) const SUM_ROWS_WIDTH: usize = 64;

/// `out = sum_j weights[j] * rows[j]` for one query head over whole `width`-wide rows (the
/// rows given as runs one after another): each column an FMA chain over `j` in order from
/// `+0.0`, [`sum16_stored`]'s and `weighted_sum_cols`' arithmetic, but every row read whole,
/// in order (one contiguous stream, where a sixteen-column task reads one line of each row).
///
/// # Panics
/// If `width` is not a multiple of 8 up to [`SUM_ROWS_WIDTH`], `out` is not `width` wide,
/// `weights` is shorter than the rows or a run's scales do not match its vectors, or the CPU
/// lacks AVX2, FMA and F16C.
pub(super) fn sum_rows_stored<E: Stored>(
    weights: &[f32],
    (runs, scales): (&[&[E]], &[&[f32]]),
    width: usize,
    out: &mut [f32],
) {
    let rows: usize = runs.iter().map(|r| r.len() / width).sum();
    assert!(
        avx2_available()
            && width.is_multiple_of(8)
            && (8..=SUM_ROWS_WIDTH).contains(&width)
            && out.len() == width
            && weights.len() >= rows
            && check_scales(runs, scales, width),
        "sum_rows_stored: {width} columns, {rows} rows, {} weights",
        weights.len()
    );
    // SAFETY: the features and bounds checked above.
    unsafe {
        match width / 8 {
            8 => sum_rows_avx2::<E, 8>(weights, (runs, scales), out),
            7 => sum_rows_avx2::<E, 7>(weights, (runs, scales), out),
            6 => sum_rows_avx2::<E, 6>(weights, (runs, scales), out),
            5 => sum_rows_avx2::<E, 5>(weights, (runs, scales), out),
            4 => sum_rows_avx2::<E, 4>(weights, (runs, scales), out),
            3 => sum_rows_avx2::<E, 3>(weights, (runs, scales), out),
            2 => sum_rows_avx2::<E, 2>(weights, (runs, scales), out),
            _ => sum_rows_avx2::<E, 1>(weights, (runs, scales), out),
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C; the bounds [`sum_rows_stored`] checks, the rows `8 * V` wide.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum_rows_avx2<E: Stored, const V: usize>(
    weights: &[f32],
    (runs, scales): (&[&[E]], &[&[f32]]),
    out: &mut [f32],
) {
    let width = 8 * V;
    let mut acc = [_mm256_setzero_ps(); V];
    let mut j = 0;
    for (r, run) in runs.iter().enumerate() {
        let mut p = run.as_ptr();
        for i in 0..run.len() / width {
            // SAFETY: row `j` has `width` values, `weights` a weight `j`, and an int8 row its
            // scale (caller).
            unsafe {
                let s = if E::SCALED {
                    _mm256_set1_ps(*scales.get_unchecked(r).get_unchecked(i))
                } else {
                    _mm256_setzero_ps()
                };
                let wj = _mm256_set1_ps(*weights.get_unchecked(j));
                for (v, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(wj, load8(p.add(8 * v), s), *acc);
                }
            }
            p = p.wrapping_add(width);
            j += 1;
        }
    }
    for (v, acc) in acc.iter().enumerate() {
        // SAFETY: `out` holds `width` floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * v), *acc) };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    use super::super::attend_keys::tests::values;

    /// `f16` values rounded from `values(n, seed)`, and the same widened to `f32`.
    pub(crate) fn halves(n: usize, seed: u32) -> (Vec<half::f16>, Vec<f32>) {
        let h: Vec<half::f16> = values(n, seed)
            .into_iter()
            .map(half::f16::from_f32)
            .collect();
        let wide = h.iter().map(|v| v.to_f32()).collect();
        (h, wide)
    }

    /// `rows` int8 vectors `width` wide from `values` (absmax / 127 scales, as the cache
    /// stores them), their scales, and the same decoded to `f32` as the cache decodes them.
    pub(crate) fn int8s(rows: usize, width: usize, seed: u32) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
        let x = values(rows * width, seed);
        let (mut q, mut scales, mut wide) = (Vec::new(), Vec::new(), Vec::new());
        for row in x.chunks_exact(width) {
            let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let row_q: Vec<i8> = row.iter().map(|v| (v / scale).round() as i8).collect();
            wide.extend(row_q.iter().map(|&v| f32::from(v) * scale));
            q.extend(row_q);
            scales.push(scale);
        }
        (q, scales, wide)
    }

    pub(crate) fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The AVX2 forms of the stored reads have the bits of the portable loops over the
    /// decoded values: four keys' dots against `key_dot`, sixteen columns' sums against
    /// `weighted_sum_cols`, over runs split anywhere.
    #[test]
    fn avx2_stored_reads_have_the_bits_of_the_portable_loops() {
        assert!(
            avx2_available(),
            "the AVX2 stored reads are not tested: no AVX2/FMA/F16C"
        );
        let hd = 64;
        let q = values(hd, 61);
        let (h, wide) = halves(4 * hd, 62);
        let (q8, scales, wide8) = int8s(4, hd, 63);
        let key = |v: &[f32], k: usize| super::super::attend_keys::key_dot(&q, &v[k * hd..][..hd]);
        let keys16 = [&h[..hd], &h[hd..2 * hd], &h[2 * hd..3 * hd], &h[3 * hd..]];
        // SAFETY: `avx2_available()` (asserted); every key is `hd` long.
        let got = unsafe { dot4_avx2(&q, keys16, [1.0; 4]) };
        let want: Vec<f32> = (0..4).map(|k| key(&wide, k)).collect();
        assert_eq!(bits(&got), bits(&want), "f16 dots");
        let keys8 = [
            &q8[..hd],
            &q8[hd..2 * hd],
            &q8[2 * hd..3 * hd],
            &q8[3 * hd..],
        ];
        // SAFETY: as above.
        let got = unsafe { dot4_avx2(&q, keys8, [scales[0], scales[1], scales[2], scales[3]]) };
        let want: Vec<f32> = (0..4).map(|k| key(&wide8, k)).collect();
        assert_eq!(bits(&got), bits(&want), "int8 dots");

        let rows = 29;
        let (h, wide) = halves(rows * hd, 64);
        let (q8, scales, wide8) = int8s(rows, hd, 65);
        let weights: Vec<Vec<f32>> = (0..3).map(|h| values(rows, 66 + h)).collect();
        let w: Vec<&[f32]> = weights.iter().map(|w| &w[..]).collect();
        /// Each head's sums from `runs` against the portable sum over `wide`.
        fn check<E: Stored>(w: &[&[f32]], runs: (&[&[E]], &[&[f32]]), wide: &[f32], col: usize) {
            let mut got = vec![[f32::NAN; 16]; w.len()];
            let mut outs: Vec<&mut [f32; 16]> = got.iter_mut().collect();
            sum16_stored(w, runs, 64, col, &mut outs);
            for (h, got) in got.iter().enumerate() {
                let mut want = [0f32; 16];
                let portable = super::super::attend_keys::weighted_sum_cols::<16>;
                portable(w[h], &[wide], 64, col, &mut want);
                assert_eq!(
                    bits(got),
                    bits(&want),
                    "{} heads, head {h} at {col}",
                    w.len()
                );
            }
        }
        for heads in 1..=3 {
            for col in [0, 16, hd - 16] {
                check(
                    &w[..heads],
                    (&[&h[..7 * hd], &h[7 * hd..]], &[]),
                    &wide,
                    col,
                );
                let runs = (
                    &[&q8[..7 * hd], &q8[7 * hd..]][..],
                    &[&scales[..7], &scales[7..]][..],
                );
                check(&w[..heads], runs, &wide8, col);
                check(
                    &w[..heads],
                    (&[&wide[..3 * hd], &wide[3 * hd..]], &[]),
                    &wide,
                    col,
                );
            }
        }
    }

    /// The whole-row weighted sums of one head have the bits of the portable sixteen-column
    /// loop, column by column, for `f32`, `f16` and `int8` rows split into runs anywhere and
    /// every head width they take.
    #[test]
    fn whole_row_sums_have_the_bits_of_the_portable_loop() {
        assert!(
            avx2_available(),
            "the AVX2 whole-row sums are not tested: no AVX2/FMA/F16C"
        );
        let rows = 37;
        for hd in [8, 24, 48, 64] {
            let (h, wide16) = halves(rows * hd, 70);
            let (q8, scales, wide8) = int8s(rows, hd, 71);
            let wide = values(rows * hd, 72);
            let weights = values(rows, 73);
            fn check<E: Stored>(w: &[f32], runs: (&[&[E]], &[&[f32]]), wide: &[f32], hd: usize) {
                let mut got = vec![f32::NAN; hd];
                sum_rows_stored(w, runs, hd, &mut got);
                let mut want = vec![0f32; hd];
                for (c, out) in want.chunks_mut(8).enumerate() {
                    let portable = super::super::attend_keys::weighted_sum_cols::<8>;
                    portable(w, &[wide], hd, 8 * c, out);
                }
                assert_eq!(bits(&got), bits(&want), "{hd} columns");
            }
            let split = 11 * hd;
            check(
                &weights,
                (&[&wide[..split], &wide[split..]], &[]),
                &wide,
                hd,
            );
            check(&weights, (&[&h[..hd], &h[hd..]], &[]), &wide16, hd);
            let runs = (
                &[&q8[..split], &q8[split..]][..],
                &[&scales[..11], &scales[11..]][..],
            );
            check(&weights, runs, &wide8, hd);
        }
    }
}
