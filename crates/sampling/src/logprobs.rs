//! Log-probabilities, argmax and top-n on a raw logits row: the one home of these helpers for
//! the generation loop, scoring, beam search and the sampler's logprob outputs.
//!
//! Nothing here allocates a softmax row (except [`log_softmax`], which returns one). The
//! log-sum-exp is accumulated in `f64` after subtracting the maximum, so large vocabularies and
//! large logits lose no precision. Ordering everywhere: larger value first, ties to the lower id,
//! NaN ranks below everything. Nothing sorts the whole row: [`top_n`] selects its `n` entries in
//! linear time and sorts only those.
//!
//! ```
//! use kindle_sampling::logprobs::{argmax, log_sum_exp, logprob, top_n, top_n_logprobs, try_argmax};
//! use kindle_sampling::SamplingError;
//!
//! let logits = [1.0f32, 3.0, 3.0, f32::NEG_INFINITY];
//! assert_eq!(argmax(&logits), Some(1)); // ties go to the lowest id
//! assert_eq!(top_n(&logits, 2), [(1, 3.0), (2, 3.0)]);
//!
//! let lse = log_sum_exp(&logits);
//! let top = top_n_logprobs(&logits, lse, 2);
//! assert_eq!(top[0], (1, logprob(&logits, lse, 1)));
//! assert!((top[0].1 - (3.0 - (1f32.exp() + 2.0 * 3f32.exp()).ln())).abs() < 1e-6);
//!
//! // `argmax` ranks NaN last; `try_argmax` rejects rows a sampler would reject.
//! assert_eq!(argmax(&[f32::NAN, 0.5]), Some(1));
//! assert!(matches!(try_argmax(&[f32::NAN, 0.5]), Err(SamplingError::NonFiniteLogit { index: 0, .. })));
//! ```

use std::cmp::Ordering;

use crate::SamplingError;

/// `ln(sum(exp(logits)))`: max-shifted (it never overflows), `exp` in `f32`, the sum
/// accumulated in `f64`.
///
/// `-inf` for an empty row or a row of only `-inf` (everything masked), `+inf` if a logit is
/// `+inf`, NaN if a logit is NaN. It runs once per generated token over the whole vocabulary,
/// so it is written in lanes the compiler vectorises, with a polynomial `exp` (relative error
/// below 1e-7) instead of the scalar libm call, and compiled for the widest vectors the CPU
/// has (AVX2 or AVX-512: the same operations in the same order at every width, so the same bits).
pub fn log_sum_exp(logits: &[f32]) -> f64 {
    let (max, nan) = max_and_nan(logits);
    if nan {
        return f64::NAN;
    }
    if !max.is_finite() {
        return f64::from(max);
    }
    f64::from(max) + Width::detect().exp_sum(logits, max).ln()
}

/// The sum of `exp(x - max)` over the row, in [`LANES`] `f64` lanes added at the end.
#[inline(always)]
fn exp_sum_lanes(logits: &[f32], max: f32) -> f64 {
    let mut acc = [0f64; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += f64::from(exp_nonpositive(x - max));
        }
    }
    acc.iter().sum::<f64>()
        + rest
            .iter()
            .map(|&x| f64::from(exp_nonpositive(x - max)))
            .sum::<f64>()
}

const LANES: usize = 8;

/// The vector width the row passes ([`log_sum_exp`]'s and [`max_and_nan`]) are compiled for:
/// the baseline (SSE2 on x86-64) unless the CPU has AVX2 or AVX-512. Each pass is the same
/// code at every width (eight independent lanes; Rust never fuses a multiply and an add), so
/// the width changes only the speed: over Gemma-3's 262,144 logits the baseline passes took
/// about 2% of a one-thread decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// Defines `Width::$name`, running `$body` (a function of the row) at the width detected.
macro_rules! widths {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty = $body:ident) => {
        impl Width {
            $(#[$doc])*
            #[inline]
            fn $name(self, $($arg: $ty),*) -> $out {
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx2")]
                    fn avx2($($arg: $ty),*) -> $out {
                        $body($($arg),*)
                    }
                    #[target_feature(enable = "avx512f")]
                    fn avx512($($arg: $ty),*) -> $out {
                        $body($($arg),*)
                    }
                    match self {
                        // SAFETY: `Width::detect` chose these only where the CPU has the
                        // features.
                        Width::Avx2 => return unsafe { avx2($($arg),*) },
                        Width::Avx512 => return unsafe { avx512($($arg),*) },
                        Width::Baseline => {}
                    }
                }
                $body($($arg),*)
            }
        }
    };
}

widths!(
    /// [`exp_sum_lanes`] at this width.
    fn exp_sum(logits: &[f32], max: f32) -> f64 = exp_sum_lanes
);
widths!(
    /// [`max_and_nan_lanes`] at this width.
    fn max_and_nan(logits: &[f32]) -> (f32, bool) = max_and_nan_lanes
);

impl Width {
    /// The widest the CPU runs (detected once; `is_x86_feature_detected!` caches).
    #[inline]
    fn detect() -> Width {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Width::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Width::Avx2;
            }
        }
        Width::Baseline
    }

    /// Every width this CPU runs, the baseline first (for the tests).
    #[cfg(test)]
    fn all_here() -> Vec<Width> {
        let mut all = vec![Width::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Width::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                all.push(Width::Avx512);
            }
        }
        all
    }
}

/// One branch-free pass: the largest value (NaN ignored; `-inf` for an empty row) and whether
/// there is a NaN, at the widest vectors the CPU has ([`Width`]).
#[inline]
pub(crate) fn max_and_nan(logits: &[f32]) -> (f32, bool) {
    Width::detect().max_and_nan(logits)
}

/// [`max_and_nan`]'s pass: eight independent lanes, so that it vectorises without
/// reassociating anything.
#[inline(always)]
fn max_and_nan_lanes(logits: &[f32]) -> (f32, bool) {
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for ((m, n), &x) in max.iter_mut().zip(nan.iter_mut()).zip(chunk) {
            *n |= x.is_nan();
            *m = if x > *m { x } else { *m };
        }
    }
    let m = max
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    (m, nan.iter().any(|&n| n) || rest.iter().any(|x| x.is_nan()))
}

/// `exp(x)` for `x <= 0` (not NaN), branch-free: `2^n * p(r)` with `x = n ln2 + r`,
/// `|r| <= ln2 / 2`, and the Cephes `expf` polynomial. Arguments below -87 give `exp(-87)`
/// (about 1.6e-38) instead of underflowing: negligible in a sum.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer, which lands in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5e-1;
    let e = p * r * r + r + 1.0;
    // 2^n from the integer in t's mantissa: (n + 127) << 23.
    e * f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23)
}

/// The log-probability of `logits[id]` under the softmax of `logits`, given `lse =
/// log_sum_exp(logits)`.
///
/// # Panics
///
/// If `id` is out of range.
pub fn logprob(logits: &[f32], lse: f64, id: u32) -> f32 {
    (f64::from(logits[id as usize]) - lse) as f32
}

/// The whole log-softmax row (allocates; prefer [`log_sum_exp`] + [`logprob`] for a few ids).
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let lse = log_sum_exp(logits);
    logits
        .iter()
        .map(|&x| (f64::from(x) - lse) as f32)
        .collect()
}

/// Index of the largest logit: ties go to the lowest index, NaN ranks below everything (so an
/// all-NaN row gives 0), `+inf` and `-inf` are ordinary values. `None` only for an empty row.
///
/// Equals `top_n(logits, 1)`'s id. For a row that must be fit to sample from, use
/// [`try_argmax`].
pub fn argmax(logits: &[f32]) -> Option<u32> {
    if logits.is_empty() {
        return None;
    }
    let (max, _) = max_and_nan(logits);
    Some(first_index_of(logits, max) as u32)
}

/// Index of the largest logit, ties to the lowest index, for a row a sampler accepts: what
/// [`crate::Sampler::greedy`] picks.
///
/// Errors on an empty row ([`SamplingError::EmptyLogits`]), a NaN or `+inf`
/// ([`SamplingError::NonFiniteLogit`], the first one), or a row where every logit is `-inf`
/// ([`SamplingError::AllMasked`]). Where it returns `Ok`, it agrees with [`argmax`].
pub fn try_argmax(logits: &[f32]) -> Result<u32, SamplingError> {
    let max = check_row(logits)?;
    Ok(first_index_of(logits, max) as u32)
}

/// Checks a logits row (not empty, no NaN or `+inf`, not every entry `-inf`) and returns its
/// largest entry.
pub(crate) fn check_row(logits: &[f32]) -> Result<f32, SamplingError> {
    if logits.is_empty() {
        return Err(SamplingError::EmptyLogits);
    }
    let (max, nan) = max_and_nan(logits);
    if nan || max == f32::INFINITY {
        let index = logits
            .iter()
            .position(|v| v.is_nan() || *v == f32::INFINITY)
            .unwrap_or(0);
        return Err(SamplingError::NonFiniteLogit {
            index,
            value: logits[index],
        });
    }
    if max == f32::NEG_INFINITY {
        Err(SamplingError::AllMasked)
    } else {
        Ok(max)
    }
}

/// `(index, value)` of the largest entry, lowest index on ties, NaN ignored; `None` if there is
/// no entry above `-inf`.
pub(crate) fn row_best(row: &[f32]) -> Option<(usize, f32)> {
    let (max, _) = max_and_nan(row);
    (max > f32::NEG_INFINITY).then(|| (first_index_of(row, max), max))
}

/// The first index holding `max` (the row's largest non-NaN value, from [`max_and_nan`]); 0 when
/// `max` is `-inf`, where every entry ranks the same (`-inf` or NaN). The one argmax: every
/// function above ends here.
fn first_index_of(row: &[f32], max: f32) -> usize {
    if max == f32::NEG_INFINITY {
        return 0;
    }
    row.iter().position(|&v| v == max).unwrap_or(0)
}

/// The `n` largest logits as `(id, logit)`, largest first (ties to the lower id, NaN last);
/// fewer if the row is shorter.
///
/// Linear-time selection (`select_nth_unstable_by`), then a sort of the `n` selected entries
/// only.
pub fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    top_n_ids(logits, n)
        .into_iter()
        .map(|id| (id, logits[id as usize]))
        .collect()
}

/// The `n` most likely tokens as `(id, logprob)`, most likely first (the order of [`top_n`]),
/// given `lse = log_sum_exp(logits)`.
pub fn top_n_logprobs(logits: &[f32], lse: f64, n: usize) -> Vec<(u32, f32)> {
    top_n_ids(logits, n)
        .into_iter()
        .map(|id| (id, logprob(logits, lse, id)))
        .collect()
}

fn top_n_ids(logits: &[f32], n: usize) -> Vec<u32> {
    if n == 0 || logits.is_empty() {
        return Vec::new();
    }
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    select_top(&mut ids, n, |a, b| rank(logits, *a, *b));
    ids
}

/// Keeps the `n` first items of `items` in `cmp` order, sorted (all of them if there are fewer):
/// a linear-time `select_nth_unstable_by`, then a sort of the `n` kept. The partial selection
/// behind [`top_n`] and the sampler's top-n lists.
pub(crate) fn select_top<T>(items: &mut Vec<T>, n: usize, mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if n == 0 {
        items.clear();
        return;
    }
    if n < items.len() {
        items.select_nth_unstable_by(n - 1, &mut cmp);
        items.truncate(n);
    }
    items.sort_unstable_by(cmp);
}

/// `Less` when `a` ranks before `b`: larger value first, NaN last, ties to the lower id.
fn rank(logits: &[f32], a: u32, b: u32) -> Ordering {
    let key = |i: u32| {
        let v = logits[i as usize];
        if v.is_nan() { f32::NEG_INFINITY } else { v }
    };
    key(b)
        .partial_cmp(&key(a))
        .unwrap_or(Ordering::Equal)
        .then(a.cmp(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every vector width gives the baseline's bits: the sums, the maxima and the NaN flag, on
    /// rows of every length up to three chunks past a multiple of the lanes and a vocabulary's
    /// length, with wide ranges, `-inf` and NaN in them.
    #[test]
    fn every_width_gives_the_baselines_bits() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let widths = Width::all_here();
        let lengths = (0..3 * LANES + 3).chain([1000, 49_152, 262_147]);
        for len in lengths {
            for kind in 0..4 {
                let row: Vec<f32> = (0..len)
                    .map(|_| {
                        let r = next();
                        match (kind, r % 97) {
                            (1, 0) => f32::NEG_INFINITY,
                            (2, 0) => f32::NAN,
                            _ => ((r >> 11) as f64 / (1u64 << 53) as f64 * 80.0 - 50.0) as f32,
                        }
                    })
                    .collect();
                let base = Width::Baseline.max_and_nan(&row);
                let max = if base.0.is_finite() { base.0 } else { 0.0 };
                let base_sum = Width::Baseline.exp_sum(&row, max);
                for &w in &widths {
                    let (m, nan) = w.max_and_nan(&row);
                    assert_eq!(
                        (m.to_bits(), nan),
                        (base.0.to_bits(), base.1),
                        "{w:?}, {len}"
                    );
                    if !base.1 {
                        let sum = w.exp_sum(&row, max);
                        assert_eq!(sum.to_bits(), base_sum.to_bits(), "{w:?}, {len}");
                    }
                }
            }
        }
        // The widest this CPU has is the one the passes use.
        assert_eq!(Width::detect(), *widths.last().unwrap());
    }

    fn naive_lse(logits: &[f32]) -> f64 {
        logits.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln()
    }

    #[test]
    fn fast_exp_is_accurate() {
        let mut worst = 0f64;
        let mut x = 0.0f32;
        while x > -87.0 {
            let want = f64::from(x).exp();
            worst = worst.max(((f64::from(exp_nonpositive(x)) - want) / want).abs());
            x -= 0.000_71;
        }
        assert!(worst < 2e-7, "max relative error {worst:e}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NEG_INFINITY) < 1e-37);
        assert!(exp_nonpositive(-1000.0) < 1e-37);
    }

    #[test]
    fn lse_matches_naive_and_survives_large_logits() {
        let row = [0.5f32, -1.0, 2.0, 0.0];
        assert!((log_sum_exp(&row) - naive_lse(&row)).abs() < 1e-7);
        // Long rows (lanes plus a remainder), NaN and infinities anywhere.
        let long: Vec<f32> = (0..1003)
            .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
            .collect();
        assert!((log_sum_exp(&long) - naive_lse(&long)).abs() < 1e-6);
        for at in [0, 7, 8, 1002] {
            let mut bad = long.clone();
            bad[at] = f32::NAN;
            assert!(log_sum_exp(&bad).is_nan(), "NaN at {at}");
            bad[at] = f32::INFINITY;
            assert_eq!(log_sum_exp(&bad), f64::INFINITY, "inf at {at}");
            bad[at] = f32::NEG_INFINITY;
            assert!((log_sum_exp(&bad) - naive_lse(&bad)).abs() < 1e-6);
        }
        let big = [1000.0f32, 1000.0];
        assert!((log_sum_exp(&big) - (1000.0 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY; 3]), f64::NEG_INFINITY);
        assert!(log_sum_exp(&[0.0, f32::NAN]).is_nan());
    }

    #[test]
    fn log_softmax_sums_to_one() {
        let row = [3.0f32, 1.0, -2.0, 0.25, f32::NEG_INFINITY];
        let ls = log_softmax(&row);
        let total: f64 = ls.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(ls[4], f32::NEG_INFINITY);
        let lse = log_sum_exp(&row);
        assert_eq!(logprob(&row, lse, 0), ls[0]);
    }

    #[test]
    fn top_n_orders_and_breaks_ties_low_id_first() {
        let row = [1.0f32, 5.0, 3.0, 5.0, f32::NAN, -1.0];
        assert_eq!(top_n(&row, 3), vec![(1, 5.0), (3, 5.0), (2, 3.0)]);
        assert_eq!(top_n(&row, 0), vec![]);
        assert_eq!(top_n(&row, 100).len(), 6);
        assert_eq!(top_n(&row, 100)[5].0, 4, "NaN ranks last");
        assert_eq!(argmax(&row), Some(1));
        assert_eq!(argmax(&[]), None);
        let lse = log_sum_exp(&[0.0, 0.0]);
        let top = top_n_logprobs(&[0.0, 0.0], lse, 1);
        assert_eq!(top[0].0, 0);
        assert!((top[0].1 - 0.5f32.ln()).abs() < 1e-7);
    }

    #[test]
    fn top_n_agrees_with_full_sort() {
        let row: Vec<f32> = (0..257u32)
            .map(|i| ((i * 7919) % 101) as f32 / 7.0)
            .collect();
        let mut sorted: Vec<u32> = (0..row.len() as u32).collect();
        sorted.sort_by(|&a, &b| rank(&row, a, b));
        for n in [1, 2, 10, 100, 256, 257] {
            let got: Vec<u32> = top_n(&row, n).into_iter().map(|(i, _)| i).collect();
            assert_eq!(got, sorted[..n]);
        }
    }

    #[test]
    fn one_argmax_behind_the_checked_and_unchecked_forms() {
        let row = [f32::NAN, 2.0, f32::NEG_INFINITY, 2.0];
        assert_eq!(argmax(&row), Some(1));
        assert_eq!(row_best(&row), Some((1, 2.0)));
        assert!(matches!(
            try_argmax(&row),
            Err(SamplingError::NonFiniteLogit { index: 0, .. })
        ));
        assert_eq!(try_argmax(&row[1..]), Ok(0));
        assert_eq!(check_row(&row[1..]), Ok(2.0));
        // Nothing above -inf: argmax still names an id (the lowest), the others refuse.
        let masked = [f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY];
        assert_eq!(argmax(&masked), Some(0));
        assert_eq!(row_best(&masked), None);
        assert_eq!(
            try_argmax(&[f32::NEG_INFINITY]),
            Err(SamplingError::AllMasked)
        );
        assert_eq!(try_argmax(&[]), Err(SamplingError::EmptyLogits));
        assert_eq!(argmax(&[f32::INFINITY, 1.0, f32::INFINITY]), Some(0));
    }

    #[test]
    fn select_top_keeps_the_first_n_sorted() {
        let mut v = vec![5, 1, 4, 2, 3];
        select_top(&mut v, 3, |a: &i32, b: &i32| a.cmp(b));
        assert_eq!(v, [1, 2, 3]);
        select_top(&mut v, 10, |a: &i32, b: &i32| b.cmp(a));
        assert_eq!(v, [3, 2, 1]);
        select_top(&mut v, 0, |a: &i32, b: &i32| a.cmp(b));
        assert!(v.is_empty());
    }
}
