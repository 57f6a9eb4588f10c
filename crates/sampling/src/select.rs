//! Token selection: argmax and the seeded categorical draw.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::SamplingError;
use crate::candidates::WorkSet;
use crate::weights::{exp_nonpositive, row_weights};

/// A uniform draw in `[0, 1)` with 53 random bits: `(next_u64 >> 11) * 2^-53`. Defined by
/// integer operations, so identical on every platform.
#[inline]
pub(crate) fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Categorical draw from the working set, in f64, in a deterministic order: id order over the
/// whole row when nothing was truncated (no sort), otherwise the kept candidates sorted by
/// (logit desc, id asc); the weights summed in blocks ([`push_block_sums`]) and the token
/// found by [`walk`]. Returns the token and its log-probability under the drawn
/// distribution.
pub(crate) fn draw(
    ws: &mut WorkSet<'_>,
    rng: &mut ChaCha8Rng,
    weights: &mut Vec<f64>,
) -> Result<(u32, f64), SamplingError> {
    if !ws.full {
        ws.sort();
    }
    let max = ws.best()?.logit;
    if ws.full {
        row_weights(ws.row, max, weights);
    } else {
        weights.clear();
        let max = f64::from(max);
        weights.extend(
            ws.list
                .iter()
                .map(|c| exp_nonpositive(f64::from(c.logit) - max)),
        );
    }
    let n = weights.len();
    let sum = push_block_sums(weights);
    let target = uniform(rng) * sum;
    let (values, blocks) = weights.split_at(n);
    let last = values
        .iter()
        .rposition(|&w| w > 0.0)
        .ok_or(SamplingError::AllMasked)?;
    let chosen = walk(values, blocks, target).unwrap_or(last);
    weights.truncate(n);
    let id = if ws.full {
        chosen as u32
    } else {
        ws.list[chosen].id
    };
    Ok((id, (weights[chosen] / sum).ln()))
}

/// The first weight (a positive one) at which the running sum of `values` passes `target`,
/// the sum taken as [`push_block_sums`] takes it (`blocks` its block sums): whole blocks while
/// they stay at or below `target`, then one block's weights. `None` if it never passes (a
/// `target` at or past the total).
fn walk(values: &[f64], blocks: &[f64], target: f64) -> Option<usize> {
    let mut before = 0.0f64;
    for (b, &block) in blocks.iter().enumerate() {
        // The block's own additions give `block`, so its weights pass `target` too.
        if before + block > target {
            let mut within = 0.0f64;
            for (i, &w) in values[b * BLOCK..].iter().take(BLOCK).enumerate() {
                within += w;
                if before + within > target && w > 0.0 {
                    return Some(b * BLOCK + i);
                }
            }
            return None;
        }
        before += block;
    }
    None
}

/// Weights a block of the two-level sum holds ([`push_block_sums`]).
const BLOCK: usize = 64;

/// Appends the sums of `weights`' blocks of [`BLOCK`] (the last may be shorter) and returns
/// their sum: each block added from its first weight on, then the blocks' sums in order, so
/// that [`draw`]'s walk reaches a token through the sums of the blocks before it and one
/// block's weights, with the very additions of the total. Eight blocks are summed at once as
/// independent chains (each block's additions in its order: the same bits on every
/// platform). The sum and the walk were one chain of dependent additions each, in id order:
/// up to 262,144 for Gemma-3's vocabulary, 0.25 ms a draw on a Zen 4; a draw from the whole
/// row went from 131 to 84 us (49,152 logits) and 724-739 to 466-476 us (262,144; criterion
/// `untruncated draw`).
fn push_block_sums(weights: &mut Vec<f64>) -> f64 {
    let n = weights.len();
    let whole = n / (8 * BLOCK);
    for g in 0..whole {
        let eight = &weights[g * 8 * BLOCK..(g + 1) * 8 * BLOCK];
        let mut sums = [0f64; 8];
        for k in 0..BLOCK {
            for (l, sum) in sums.iter_mut().enumerate() {
                *sum += eight[l * BLOCK + k];
            }
        }
        weights.extend_from_slice(&sums);
    }
    let mut start = whole * 8 * BLOCK;
    while start < n {
        let end = (start + BLOCK).min(n);
        let mut sum = 0.0f64;
        for &w in &weights[start..end] {
            sum += w;
        }
        weights.push(sum);
        start = end;
    }
    let mut total = 0.0f64;
    for &block in &weights[n..] {
        total += block;
    }
    total
}

/// Fill `out` (one entry per token) with the probabilities of the working set after the chain:
/// `exp(l - max) / sum` in f64, as [`draw`] weighs them; one-hot on the
/// best token when greedy.
pub(crate) fn fill(
    ws: &mut WorkSet<'_>,
    greedy: bool,
    mirostat: bool,
    out: &mut Vec<f64>,
) -> Result<(), SamplingError> {
    if mirostat {
        return Err(SamplingError::InvalidParameter {
            name: "mirostat",
            value: "on".into(),
            expected: "off: mirostat's state follows each drawn token, it has no fixed distribution",
        });
    }
    out.clear();
    out.resize(ws.row.len(), 0.0);
    if greedy {
        out[ws.best()?.id as usize] = 1.0;
        return Ok(());
    }
    let max = ws.best()?.logit;
    let mut sum = 0.0f64;
    if ws.full {
        row_weights(ws.row, max, out);
        // [`draw`]'s sum, so its log-probability is the logarithm of this probability.
        let n = out.len();
        sum = push_block_sums(out);
        out.truncate(n);
    } else {
        let max = f64::from(max);
        ws.for_each(|id, l| {
            let w = exp_nonpositive(f64::from(l) - max);
            out[id as usize] = w;
            sum += w;
        });
    }
    // A NaN sum is refused too: `partial_cmp` answers `None` for it.
    if sum.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Err(SamplingError::AllMasked);
    }
    out.iter_mut().for_each(|p| *p /= sum);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk picks the token a running sum in id order picks (the draw before the blocks),
    /// on rows of every length around the blocks' edges with zeros, tiny and large weights,
    /// for targets across the whole range; and the total is the rows' sum to rounding.
    #[test]
    fn the_blocked_walk_picks_what_the_running_sum_picks() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in [1, 2, 63, 64, 65, 511, 512, 513, 1000, 4099, 49_152] {
            let values: Vec<f64> = (0..n)
                .map(|i| match i % 7 {
                    0 => 0.0,
                    1 => next() * 1e-12,
                    2 => next() * 50.0,
                    _ => next(),
                })
                .collect();
            let mut weights = values.clone();
            let total = push_block_sums(&mut weights);
            assert_eq!(&weights[..n], &values[..]);
            assert_eq!(weights.len(), n + n.div_ceil(BLOCK));
            let plain: f64 = values.iter().sum();
            assert!(
                (total - plain).abs() <= 1e-12 * plain,
                "n = {n}: {total} vs {plain}"
            );
            let (vals, blocks) = weights.split_at(n);
            for t in 0..2000 {
                let target = if t == 0 { 0.0 } else { next() * total };
                let mut acc = 0.0f64;
                let want = values.iter().enumerate().find_map(|(i, &w)| {
                    acc += w;
                    (acc > target && w > 0.0).then_some(i)
                });
                let got = walk(vals, blocks, target);
                // Where the two running sums round to opposite sides of `target` they may
                // pick neighbours: never met with these targets.
                assert_eq!(got, want, "n = {n}, target {target}");
            }
        }
    }

    /// With weights whose sums are exact (small integers) both orders give the same running
    /// sums, so a target exactly at a running sum (a block's edge included) has one answer:
    /// the first token past it.
    #[test]
    fn a_target_at_a_running_sum_draws_the_next_positive_weight() {
        let values: Vec<f64> = (0..1500).map(|i| ((i * 7) % 5) as f64).collect();
        let mut weights = values.clone();
        let total = push_block_sums(&mut weights);
        assert_eq!(total, values.iter().sum::<f64>());
        let (vals, blocks) = weights.split_at(values.len());
        let mut acc = 0.0;
        for &w in &values {
            acc += w;
            let want = values.iter().scan(0.0, |a, &w| {
                *a += w;
                Some(*a)
            });
            let want = want.zip(&values).position(|(a, &w)| a > acc && w > 0.0);
            assert_eq!(walk(vals, blocks, acc), want, "target {acc}");
        }
    }
}
