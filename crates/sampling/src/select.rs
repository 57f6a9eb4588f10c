//! Token selection: argmax and the seeded categorical draw.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::SamplingError;
use crate::candidates::WorkSet;
use crate::weights::row_weights;

/// A uniform draw in `[0, 1)` with 53 random bits: `(next_u64 >> 11) * 2^-53`. Defined by
/// integer operations, so identical on every platform.
#[inline]
pub(crate) fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Categorical draw from the working set, in f64, in a deterministic order: the whole row
/// when nothing was truncated (no sort), otherwise the kept candidates sorted by (logit desc,
/// id asc); the weights summed in blocks of 512, each in eight lanes ([`push_block_sums`]),
/// and the token found by [`walk`] in that order (lane by lane within a block; plain order
/// for fewer than 512). Returns the token and its log-probability under the drawn
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
        // Through the row's pass, whose multiply-adds are instructions (a scalar `mul_add`
        // outside it may be a libm call).
        let logits: Vec<f32> = ws.list.iter().map(|c| c.logit).collect();
        row_weights(&logits, max, weights);
    }
    let n = weights.len();
    let sum = push_block_sums(weights);
    let target = uniform(rng) * sum;
    let (values, sums) = weights.split_at(n);
    let last = values
        .iter()
        .rposition(|&w| w > 0.0)
        .ok_or(SamplingError::AllMasked)?;
    let chosen = walk(values, sums, target).unwrap_or(last);
    weights.truncate(n);
    let id = if ws.full {
        chosen as u32
    } else {
        ws.list[chosen].id
    };
    Ok((id, (weights[chosen] / sum).ln()))
}

/// The first weight (a positive one) at which the running sum of `values` passes `target`,
/// in the order and with the additions of [`push_block_sums`] (`sums` what it appended):
/// whole blocks while they stay at or below `target`, then the block's lanes, then one lane's
/// weights; a last partial block in id order. `None` if it never passes (a `target` at or
/// past the total).
fn walk(values: &[f64], sums: &[f64], target: f64) -> Option<usize> {
    let whole = values.len() / BLOCK;
    let mut before = 0.0f64;
    for b in 0..whole {
        let lanes = &sums[b * LANES..(b + 1) * LANES];
        let total = block_total(lanes);
        if before + total > target {
            // The lanes' sums added in order give `total`, and a lane's weights its sum, so
            // the running sum passes `target` in this block, in one of its lanes.
            let mut prefix = 0.0f64;
            for (l, &lane) in lanes.iter().enumerate() {
                if before + (prefix + lane) > target {
                    let mut within = 0.0f64;
                    for i in (b * BLOCK + l..(b + 1) * BLOCK).step_by(LANES) {
                        within += values[i];
                        if before + (prefix + within) > target && values[i] > 0.0 {
                            return Some(i);
                        }
                    }
                    return None;
                }
                prefix += lane;
            }
            return None;
        }
        before += total;
    }
    let mut within = 0.0f64;
    for (i, &w) in values.iter().enumerate().skip(whole * BLOCK) {
        within += w;
        if before + within > target && w > 0.0 {
            return Some(i);
        }
    }
    None
}

/// Lanes of a block of the two-level sum ([`push_block_sums`]): one 512-bit vector of `f64`.
const LANES: usize = 8;

/// Weights a block of the two-level sum holds.
const BLOCK: usize = 64 * LANES;

/// A block's lane sums added in lane order.
fn block_total(lanes: &[f64]) -> f64 {
    let mut total = 0.0f64;
    for &lane in lanes {
        total += lane;
    }
    total
}

/// Appends the sums [`walk`] reads and returns the total of `weights`. Each whole block of
/// [`BLOCK`] weights is summed in [`LANES`] lanes (lane `l` the block's weights `l`, `l + 8`,
/// ... in that order: contiguous vectors, each lane its own chain of additions, so the same
/// bits at any vector width); its lane sums are appended. A last partial block is summed in id
/// order (its one sum appended). The total adds each block's lane sums in order, then the
/// blocks' totals in order: the additions the walk repeats, so it reaches any token in at most
/// 512 block totals, 8 lane sums and 64 weights. The sum and the walk were one chain of
/// dependent additions each in id order over the whole row (up to 262,144 for Gemma-3's
/// vocabulary, 0.25 ms a draw on a Zen 4). Criterion `untruncated draw` (Zen 4), a draw from
/// the whole row of 49,152 / 262,144 logits: 131 / 724-739 us; with blocks of 64 weights in
/// id order, eight blocks summed at a time, 84 / 466-476; with the lanes (and the polynomial
/// of `weights.rs` fused), 55 / 291. Rows of fewer than 512 weights are summed and walked in
/// id order with the additions of before.
fn push_block_sums(weights: &mut Vec<f64>) -> f64 {
    let n = weights.len();
    let whole = n / BLOCK;
    for b in 0..whole {
        let mut lanes = [0f64; LANES];
        for v in weights[b * BLOCK..(b + 1) * BLOCK].chunks_exact(LANES) {
            for (lane, &w) in lanes.iter_mut().zip(v) {
                *lane += w;
            }
        }
        weights.extend_from_slice(&lanes);
    }
    let mut total = 0.0f64;
    for b in 0..whole {
        total += block_total(&weights[n + b * LANES..n + (b + 1) * LANES]);
    }
    if whole * BLOCK < n {
        let mut rest = 0.0f64;
        for &w in &weights[whole * BLOCK..n] {
            rest += w;
        }
        weights.push(rest);
        total += rest;
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
        let (mut ids, mut logits) = (Vec::new(), Vec::new());
        ws.for_each(|id, l| {
            ids.push(id);
            logits.push(l);
        });
        let mut weights = Vec::with_capacity(logits.len());
        row_weights(&logits, max, &mut weights);
        for (&id, &w) in ids.iter().zip(&weights) {
            out[id as usize] = w;
            sum += w;
        }
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

    /// The order [`walk`] visits `n` weights in: each whole block lane by lane, then the rest.
    fn visiting_order(n: usize) -> Vec<usize> {
        let whole = n / BLOCK;
        let mut order: Vec<usize> = (0..whole)
            .flat_map(|b| {
                (0..LANES).flat_map(move |l| (0..64).map(move |k| b * BLOCK + k * LANES + l))
            })
            .collect();
        order.extend(whole * BLOCK..n);
        order
    }

    /// The first weight in `order` at which a plain running sum passes `target`.
    fn running(values: &[f64], order: &[usize], target: f64) -> Option<usize> {
        let mut acc = 0.0f64;
        order.iter().copied().find(|&i| {
            acc += values[i];
            acc > target && values[i] > 0.0
        })
    }

    /// The walk picks the token a plain running sum in its order picks, on rows of every
    /// length around the blocks' edges with zeros, tiny and large weights, for targets across
    /// the whole range; every weight is visited once; the total is the row's sum to rounding.
    #[test]
    fn the_blocked_walk_picks_what_the_running_sum_picks() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in [1, 2, 63, 64, 511, 512, 513, 1000, 4099, 49_152] {
            let values: Vec<f64> = (0..n)
                .map(|i| match i % 7 {
                    0 => 0.0,
                    1 => next() * 1e-12,
                    2 => next() * 50.0,
                    _ => next(),
                })
                .collect();
            let order = visiting_order(n);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>());
            let mut weights = values.clone();
            let total = push_block_sums(&mut weights);
            assert_eq!(&weights[..n], &values[..]);
            let sums = n / BLOCK * LANES + usize::from(n % BLOCK != 0);
            assert_eq!(weights.len(), n + sums);
            let plain: f64 = values.iter().sum();
            assert!(
                (total - plain).abs() <= 1e-12 * plain,
                "n = {n}: {total} vs {plain}"
            );
            let (vals, sums) = weights.split_at(n);
            for t in 0..2000 {
                let target = if t == 0 { 0.0 } else { next() * total };
                // Where the two running sums round to opposite sides of `target` they may
                // pick neighbours: never met with these targets.
                let want = running(&values, &order, target);
                assert_eq!(walk(vals, sums, target), want, "n = {n}, target {target}");
            }
        }
    }

    /// With weights whose sums are exact (small integers) the blocked sums and a plain running
    /// sum agree exactly, so a target exactly at a running sum (a block's or lane's edge
    /// included) has one answer: the next positive weight in the walk's order.
    #[test]
    fn a_target_at_a_running_sum_draws_the_next_positive_weight() {
        let n = 1500;
        let values: Vec<f64> = (0..n).map(|i| ((i * 7) % 5) as f64).collect();
        let order = visiting_order(n);
        let mut weights = values.clone();
        let total = push_block_sums(&mut weights);
        assert_eq!(total, values.iter().sum::<f64>());
        let (vals, sums) = weights.split_at(n);
        let mut acc = 0.0;
        for &i in &order {
            acc += values[i];
            let want = running(&values, &order, acc);
            assert_eq!(walk(vals, sums, acc), want, "target {acc}");
        }
    }
}
