//! DRY ("Don't Repeat Yourself") sequence-repetition penalty.

use super::check_id;
use crate::SamplingError;
use crate::candidates::keep_finite;
use crate::config::DryConfig;

/// `(token, penalty)` pairs, sorted by token id, that DRY subtracts from the logits.
///
/// For every earlier position `i` where the history's last token occurs, the repeated sequence
/// length `L` is how far the tokens ending at `i` match the tokens ending at the end of the
/// history, without crossing a sequence breaker. The token that followed position `i` (unless it
/// is a breaker) gets the penalty `multiplier * base^(L - allowed_length)` when
/// `L >= allowed_length`, using the longest `L` per token. Linear time (a Z-array over the
/// reversed window), so long repetitive histories are cheap.
///
/// ```
/// use kindle_sampling::{DryConfig, processors::dry_penalties};
/// let cfg = DryConfig { multiplier: 1.0, base: 2.0, allowed_length: 2, ..DryConfig::default() };
/// // "5 6 7 8 ... 5 6 7": the sequence 5 6 7 (L = 3) was followed by 8.
/// assert_eq!(dry_penalties(&[5, 6, 7, 8, 1, 5, 6, 7], &cfg), vec![(8, 2.0)]);
/// ```
pub fn dry_penalties(history: &[u32], cfg: &DryConfig) -> Vec<(u32, f32)> {
    if !cfg.is_enabled() {
        return Vec::new();
    }
    let window = match cfg.penalty_last_n {
        n if n < 0 => history,
        n => &history[history.len().saturating_sub(n as usize)..],
    };
    let n = window.len();
    if n < 2 {
        return Vec::new();
    }
    let is_breaker = |t: &u32| cfg.sequence_breakers.contains(t);
    // How far back a match can reach before it would include a breaker.
    let limit = window.iter().rev().take_while(|t| !is_breaker(t)).count();
    if limit == 0 {
        return Vec::new();
    }
    let reversed: Vec<u32> = window.iter().rev().copied().collect();
    let z = z_array(&reversed);
    let mut found: Vec<(u32, usize)> = Vec::new();
    for i in 0..n - 1 {
        let len = z[n - 1 - i].min(limit);
        let next = window[i + 1];
        if len >= cfg.allowed_length.max(1) && !is_breaker(&next) {
            found.push((next, len));
        }
    }
    // Longest match per token.
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    found.dedup_by_key(|f| f.0);
    found
        .into_iter()
        .map(|(t, len)| {
            let exponent = (len - cfg.allowed_length) as f64;
            let penalty = cfg.multiplier as f64 * (cfg.base as f64).powf(exponent);
            (t, penalty.min(f32::MAX as f64) as f32)
        })
        .collect()
}

/// Z-array: `z[k]` = length of the longest common prefix of `s` and `s[k..]` (`z[0] = len`).
fn z_array(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    if n == 0 {
        return z;
    }
    z[0] = n;
    let (mut l, mut r) = (0, 0);
    for k in 1..n {
        if k < r {
            z[k] = (r - k).min(z[k - l]);
        }
        while k + z[k] < n && s[z[k]] == s[k + z[k]] {
            z[k] += 1;
        }
        if k + z[k] > r {
            l = k;
            r = k + z[k];
        }
    }
    z
}

/// Subtracts [`dry_penalties`] from the row in place.
pub fn apply_dry(row: &mut [f32], history: &[u32], cfg: &DryConfig) -> Result<(), SamplingError> {
    for (id, p) in dry_penalties(history, cfg) {
        check_id("history", id, row.len())?;
        let l = &mut row[id as usize];
        *l = keep_finite(*l, *l - p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quadratic reference algorithm (text-generation-webui).
    fn naive(history: &[u32], cfg: &DryConfig) -> Vec<(u32, f32)> {
        let n = history.len();
        let brk = |t: u32| cfg.sequence_breakers.contains(&t);
        let mut best = std::collections::BTreeMap::new();
        if n < 2 || brk(history[n - 1]) {
            return Vec::new();
        }
        for i in 0..n - 1 {
            if history[i] != history[n - 1] || brk(history[i + 1]) {
                continue;
            }
            let mut len = 1;
            while len <= i && !brk(history[i - len]) && history[n - 1 - len] == history[i - len] {
                len += 1;
            }
            let e = best.entry(history[i + 1]).or_insert(0);
            *e = (*e).max(len);
        }
        best.into_iter()
            .filter(|&(_, l)| l >= cfg.allowed_length.max(1))
            .map(|(t, l)| {
                (
                    t,
                    (cfg.multiplier as f64
                        * (cfg.base as f64).powf((l - cfg.allowed_length) as f64))
                        as f32,
                )
            })
            .collect()
    }

    #[test]
    fn matches_naive_reference() {
        let cfg = DryConfig {
            multiplier: 0.8,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: -1,
            sequence_breakers: vec![0],
        };
        let mut state = 12345u64;
        for _ in 0..300 {
            let len = (state % 40) as usize + 2;
            let h: Vec<u32> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 33) % 4) as u32
                })
                .collect();
            assert_eq!(dry_penalties(&h, &cfg), naive(&h, &cfg), "history {h:?}");
        }
    }

    #[test]
    fn breakers_and_allowed_length() {
        let cfg = DryConfig {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            penalty_last_n: -1,
            sequence_breakers: vec![9],
        };
        // A breaker inside the match shortens it to 1 (< allowed_length): no penalty.
        assert!(dry_penalties(&[1, 9, 2, 3, 4, 9, 2], &cfg).is_empty());
        // Followed by a breaker: never penalised.
        assert!(dry_penalties(&[1, 2, 9, 1, 2], &cfg).is_empty());
        assert_eq!(dry_penalties(&[1, 2, 3, 1, 2], &cfg), vec![(3, 1.0)]);
        let off = DryConfig {
            multiplier: 0.0,
            ..cfg
        };
        assert!(dry_penalties(&[1, 2, 3, 1, 2], &off).is_empty());
    }
}
