//! The host attention's portable arithmetic (a leaf shared by `host_attend.rs` and
//! `attend_tiles.rs`): `key_dot`, the arithmetic every score has, and the loops that run it
//! four keys at a time in AVX2 or, with AVX-512, eight at a time (`attend_x86::scores`); and
//! `weighted_sum_cols`, the arithmetic every weighted sum of values has (each column an FMA
//! chain over the positions in order), which the x86 forms reproduce.

#[cfg(target_arch = "x86_64")]
use super::{attend_heads, attend_stored, attend_x86};

/// `a . b`, with eight partial sums so that it vectorizes.
#[inline(always)]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A query times a key, as the attention scores it: eight lanes, each an FMA chain over the
/// 8-value chunks, the lanes summed in order (from `Sum`'s -0.0), plus the tail's FMA chain.
/// (FMA, not a product then a sum as in [`dot`]: half the operations, one rounding
/// fewer; where the CPU lacks FMA, `mul_add` is exact in software, slower.)
#[inline(always)]
pub(super) fn key_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(0f32, |s, (x, y)| x.mul_add(*y, s));
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// [`key_dot`] of `a` with four vectors `b[j]` (each as long as `a`): the AVX2 instance runs
/// the four chains side by side (`attend_stored::dot4_avx2`), with `key_dot`'s arithmetic.
#[inline(always)]
fn dot4<const AVX2: bool>(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: the `AVX2` instance runs only where the CPU has AVX2, FMA and F16C
        // (`attend_stored::avx2_available`, checked by `host_attend`), and every `b[j]` is as
        // long as `a`.
        return unsafe { attend_stored::dot4_avx2(a, b, [1.0; 4]) };
    }
    b.map(|b| key_dot(a, b))
}

/// `scores[i] = key_dot(q, k_i) * scale` for the `q.len()`-wide keys `k_i` of `keys` (as many
/// as `scores` holds), in order: four keys at a time ([`dot4`], each with `key_dot`'s
/// arithmetic), then the rest one by one. (A plain loop, not `extend(map(..))`: the
/// iterator's fold was compiled apart from the AVX2 instance of the attention, in SSE.)
#[inline(always)]
pub(super) fn score_keys<const AVX2: bool>(
    q: &[f32],
    keys: &[f32],
    scale: f32,
    scores: &mut [f32],
) {
    let hd = q.len();
    // The `AVX2` instance runs only where the CPU has AVX2, FMA and F16C (checked by
    // `host_attend`): `attend_x86::scores` runs there in AVX-512 or AVX2.
    #[cfg(target_arch = "x86_64")]
    let (keys, scores) = if AVX2 && hd.is_multiple_of(8) && hd > 0 {
        let done = attend_x86::scores(q, (keys, &[]), scale, scores);
        (&keys[done * hd..], &mut scores[done..])
    } else {
        (keys, scores)
    };
    let (fours, rest) = scores.split_at_mut(scores.len() / 4 * 4);
    for (out, four) in fours.chunks_exact_mut(4).zip(keys.chunks_exact(4 * hd)) {
        let (k0, more) = four.split_at(hd);
        let (k1, more) = more.split_at(hd);
        let (k2, k3) = more.split_at(hd);
        let dots = dot4::<AVX2>(q, [k0, k1, k2, k3]);
        for (o, d) in out.iter_mut().zip(dots) {
            *o = d * scale;
        }
    }
    let done = fours.len();
    for (o, k) in rest.iter_mut().zip(keys.chunks_exact(hd).skip(done)) {
        *o = key_dot(q, k) * scale;
    }
}

/// [`score_keys`] for several queries over the same keys (`scores[r]` for `qs[r]`, each as
/// long as the keys): with AVX2 the groups of eight keys for every query before the next
/// group (`attend_heads::scores_heads`: a group is read from memory once, then from L1), then
/// each query's last keys as `score_keys` takes them. Every score has `score_keys`' bits.
#[inline(always)]
pub(super) fn score_keys_heads<const AVX2: bool>(
    qs: &[&[f32]],
    keys: &[f32],
    scale: f32,
    scores: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(q) = qs.first() {
        let hd = q.len();
        if AVX2 && qs.len() > 1 && hd.is_multiple_of(8) && hd > 0 {
            let done = attend_heads::scores_heads(qs, keys, scale, scores);
            for (q, out) in qs.iter().zip(scores.iter_mut()) {
                score_keys::<AVX2>(q, &keys[done * hd..], scale, &mut out[done..]);
            }
            return;
        }
    }
    for (q, out) in qs.iter().zip(scores.iter_mut()) {
        score_keys::<AVX2>(q, keys, scale, out);
    }
}

/// The vectors `from..to` (counted from the first vector of `runs`) of runs of `width`-wide
/// vectors, as sub-slices of the runs, into `out`.
#[inline(always)]
pub(super) fn span<'a>(
    runs: &[&'a [f32]],
    width: usize,
    from: usize,
    to: usize,
    out: &mut Vec<&'a [f32]>,
) {
    out.clear();
    let mut at = 0;
    for run in runs {
        let n = run.len() / width;
        let (lo, hi) = (from.max(at), to.min(at + n));
        if lo < hi {
            out.push(&run[(lo - at) * width..(hi - at) * width]);
        }
        at += n;
        if at >= to {
            break;
        }
    }
}

/// `out = sum_j weights[j] * rows[j]` for the `out.len()`-wide rows of `runs` (in order, over
/// the runs one after another), [`WIDE_LANES`] columns at a time (then [`LANES`], 16) so that the
/// partial sums stay in registers, as several independent chains.
#[inline(always)]
pub(super) fn weighted_sum(weights: &[f32], rows: &[&[f32]], out: &mut [f32]) {
    let width = out.len();
    let wide = width / WIDE_LANES * WIDE_LANES;
    let (head, tail) = out.split_at_mut(wide);
    for (c, out) in head.chunks_exact_mut(WIDE_LANES).enumerate() {
        weighted_sum_cols::<WIDE_LANES>(weights, rows, width, c * WIDE_LANES, out);
    }
    for (c, out) in tail.chunks_mut(LANES).enumerate() {
        weighted_sum_cols::<LANES>(weights, rows, width, wide + c * LANES, out);
    }
}

/// Columns of one pass of [`weighted_sum`]: eight 8-lane chains of partial sums.
const WIDE_LANES: usize = 64;

/// Columns `col..col + out.len()` (at most `N`) of `sum_j weights[j] * rows[j]`, the rows
/// `width` wide and given as runs of rows, one after another: each column an FMA chain over `j` in
/// order, whatever else is computed, however the rows are split into runs and whatever `N`.
#[inline(always)]
pub(super) fn weighted_sum_cols<const N: usize>(
    weights: &[f32],
    runs: &[&[f32]],
    width: usize,
    col: usize,
    out: &mut [f32],
) {
    let n = out.len();
    let mut acc = [0f32; N];
    let mut weights = weights.iter();
    for run in runs {
        // The run first: `zip` stops on it without taking a weight that belongs to the next.
        for (row, &w) in run.chunks_exact(width).zip(weights.by_ref()) {
            let row = &row[col..col + n];
            if n == N {
                for l in 0..N {
                    acc[l] = w.mul_add(row[l], acc[l]);
                }
            } else {
                for (a, &x) in acc.iter_mut().zip(row) {
                    *a = w.mul_add(x, *a);
                }
            }
        }
    }
    out.copy_from_slice(&acc[..n]);
}

/// Columns of the narrow pass of [`weighted_sum`] (its tail), and of one weighted-sum task of
/// the host attention's long row.
pub(super) const LANES: usize = 16;

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Whether this CPU runs the AVX2 instance.
    fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return attend_stored::avx2_available();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Values with every kind of rounding, zeros of both signs among them (the attention
    /// tests' inputs).
    pub(in super::super) fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                match i % 11 {
                    0 => 0.0,
                    5 => -0.0,
                    _ => (state as f32 / u32::MAX as f32 - 0.5) * 7.3,
                }
            })
            .collect()
    }

    /// Four keys at once give each key the bits of `key_dot` alone, for lengths with and
    /// without a tail past the last eight.
    #[test]
    fn dot4_has_the_bits_of_key_dot() {
        for n in [1, 7, 8, 13, 64, 67, 256] {
            let a = values(n, 1 + n as u32);
            let b: Vec<Vec<f32>> = (0..4).map(|j| values(n, 100 + j + n as u32)).collect();
            let mut fours = vec![dot4::<false>(&a, [&b[0], &b[1], &b[2], &b[3]])];
            if avx2() {
                fours.push(dot4::<true>(&a, [&b[0], &b[1], &b[2], &b[3]]));
            }
            for four in fours {
                for j in 0..4 {
                    assert_eq!(
                        four[j].to_bits(),
                        key_dot(&a, &b[j]).to_bits(),
                        "n {n}, key {j}"
                    );
                }
            }
        }
        // All-zero products: the sign of the zero too.
        let z = vec![-0.0f32; 16];
        let four = dot4::<false>(&z, [&z, &z, &z, &z]);
        assert_eq!(four[0].to_bits(), key_dot(&z, &z).to_bits());
        assert!(
            avx2(),
            "the AVX2 dot products are not tested: this CPU lacks AVX2, FMA or F16C"
        );
        let four = dot4::<true>(&z, [&z, &z, &z, &z]);
        assert_eq!(four[0].to_bits(), key_dot(&z, &z).to_bits());
    }

    /// The wide and narrow weighted sums give every column the same bits, over rows split
    /// into runs anywhere.
    #[test]
    fn weighted_sums_have_the_same_bits_whatever_their_width() {
        let width = 256 + 16;
        let rows = values(9 * width, 7);
        let weights = values(9, 9);
        let runs: Vec<&[f32]> = vec![&rows[..4 * width], &rows[4 * width..]];
        let mut wide = vec![0f32; width];
        weighted_sum(&weights, &runs, &mut wide);
        for col in (0..width).step_by(LANES) {
            let mut narrow = [0f32; LANES];
            weighted_sum_cols::<LANES>(&weights, &[&rows[..]], width, col, &mut narrow);
            for (l, v) in narrow.iter().enumerate() {
                assert_eq!(v.to_bits(), wide[col + l].to_bits(), "column {}", col + l);
            }
        }
    }
}
