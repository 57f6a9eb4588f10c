//! Truncating stages and temperature, on the sampler's working set.

use rand_chacha::ChaCha8Rng;

use crate::candidates::{Cand, WorkSet, by_logit_desc, shortest_prefix_reaching};
use crate::select::uniform;

/// Top-k: keep the `k` most likely tokens (`k <= 0` = off; `k` above the set size keeps all).
pub(crate) fn top_k(ws: &mut WorkSet<'_>, k: i64) {
    if k > 0 {
        ws.keep_top(usize::try_from(k).unwrap_or(usize::MAX));
    }
}

/// Top-p (nucleus): the smallest set of most likely tokens whose probability reaches `p`
/// (ties broken by id); always keeps the top token. `p >= 1` = off.
pub(crate) fn top_p(ws: &mut WorkSet<'_>, p: f32) {
    if p >= 1.0 {
        return;
    }
    let Some((max, lnz)) = ws.log_normalizer() else {
        return;
    };
    let was_sorted = !ws.full && ws.sorted;
    ws.materialize();
    let n = shortest_prefix_reaching(
        ws.list,
        was_sorted,
        by_logit_desc,
        |c| (c.logit as f64 - max - lnz).exp(),
        p as f64,
    );
    ws.list.truncate(n.max(1));
    ws.sorted = true;
}

/// Min-p: keep tokens with `p >= min_p * p_max`, i.e. `logit >= max + ln(min_p)`. `0` = off.
pub(crate) fn min_p(ws: &mut WorkSet<'_>, min_p: f32) {
    if min_p <= 0.0 {
        return;
    }
    let Ok(best) = ws.best() else { return };
    let (max, bound) = (best.logit as f64, (min_p as f64).ln());
    ws.retain(|l| l as f64 - max >= bound);
}

/// Locally typical sampling (Meister et al.; Hugging Face `TypicalLogitsWarper`): order tokens
/// by `|-log p - H|` (H: entropy) and keep the shortest prefix whose mass reaches `p`.
/// `p >= 1` = off.
pub(crate) fn typical(ws: &mut WorkSet<'_>, p: f32) {
    if p >= 1.0 {
        return;
    }
    let Some((max, lnz)) = ws.log_normalizer() else {
        return;
    };
    ws.materialize();
    let logp = |c: &Cand| c.logit as f64 - max - lnz;
    let entropy: f64 = ws.list.iter().map(|c| -logp(c).exp() * logp(c)).sum();
    let mut keyed: Vec<(f64, Cand)> = ws
        .list
        .iter()
        .map(|c| ((-logp(c) - entropy).abs(), *c))
        .collect();
    let n = shortest_prefix_reaching(
        &mut keyed,
        false,
        |a, b| a.0.total_cmp(&b.0).then_with(|| by_logit_desc(&a.1, &b.1)),
        |x| logp(&x.1).exp(),
        p as f64,
    );
    ws.list.clear();
    ws.list.extend(keyed[..n.max(1)].iter().map(|x| x.1));
    ws.sorted = false;
}

/// Top-n-sigma (Tang et al. 2024): keep tokens with `logit >= max - n * sigma`, sigma being the
/// (population) standard deviation of the logits in play. `n <= 0` = off.
pub(crate) fn top_n_sigma(ws: &mut WorkSet<'_>, n: f32) {
    if n <= 0.0 {
        return;
    }
    let (mut count, mut sum, mut max) = (0usize, 0.0f64, f64::NEG_INFINITY);
    ws.for_each(|_, l| {
        count += 1;
        sum += l as f64;
        max = max.max(l as f64);
    });
    if count < 2 {
        return;
    }
    let mean = sum / count as f64;
    let mut sq = 0.0f64;
    ws.for_each(|_, l| sq += (l as f64 - mean).powi(2));
    let sigma = (sq / count as f64).sqrt();
    let bound = max - n as f64 * sigma;
    ws.retain(|l| l as f64 >= bound);
}

/// XTC (Exclude Top Choices): with probability `probability` (one draw from the stream per
/// step while at least two tokens are in play), remove every token with probability
/// `>= threshold` except the least likely of them. Off when `probability <= 0` or
/// `threshold > 0.5`.
pub(crate) fn xtc(ws: &mut WorkSet<'_>, rng: &mut ChaCha8Rng, probability: f32, threshold: f32) {
    if probability <= 0.0 || threshold > 0.5 || ws.len() < 2 {
        return;
    }
    if uniform(rng) >= probability as f64 {
        return;
    }
    let Some((max, lnz)) = ws.log_normalizer() else {
        return;
    };
    let bound = (threshold as f64).ln();
    let mut above: Vec<Cand> = Vec::new();
    ws.for_each(|id, logit| {
        if logit as f64 - max - lnz >= bound {
            above.push(Cand { id, logit });
        }
    });
    if above.len() < 2 {
        return;
    }
    above.sort_unstable_by(by_logit_desc);
    above.pop(); // the least likely one above the threshold stays
    above.sort_unstable_by_key(|c| c.id);
    if ws.full {
        for c in &above {
            ws.row[c.id as usize] = f32::NEG_INFINITY;
        }
    } else {
        ws.list
            .retain(|c| above.binary_search_by_key(&c.id, |a| a.id).is_err());
    }
}

/// Temperature: divide the logits by `t`; `t == 0` keeps only the best token; `t == 1` is a
/// no-op. A `t` so small that a logit over `t` passes `f32`'s range (below about `1e-37`) is
/// greedy too: there, any two different logits' probabilities differ by more than
/// `e^(10^30)`, so the distribution is the best token's (the quotients, clamped to the
/// largest `f32`, would instead tie every positive logit).
pub(crate) fn temperature(ws: &mut WorkSet<'_>, t: f32) {
    if t == 1.0 {
        return;
    }
    if t == 0.0 {
        // Greedy: no scan of the row for a logit that would overflow (a scalar pass that was
        // most of a greedy step's sampling: 70 -> 11 us over 49,152 logits, criterion).
        let _ = ws.collapse_to_best();
        return;
    }
    // Only a logit past `f32::MAX * t` overflows: look for one where `t` is small (at
    // `t >= 1e-3` that is a logit past 1e35, which no model gives).
    let mut largest = 0f32;
    if t < 1e-3 {
        ws.for_each(|_, l| {
            if l.is_finite() {
                largest = largest.max(l.abs());
            }
        });
    }
    if !(largest / t).is_finite() {
        let _ = ws.collapse_to_best();
        return;
    }
    ws.map_logits(|l| l / t);
}
