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
/// (logit desc, id asc). Returns the token and its log-probability under the drawn
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
    // Summed in order: the walk below adds them in the same order.
    let mut sum = 0.0f64;
    for &w in weights.iter() {
        sum += w;
    }
    let target = uniform(rng) * sum;
    let mut acc = 0.0f64;
    let mut chosen = weights
        .iter()
        .rposition(|&w| w > 0.0)
        .ok_or(SamplingError::AllMasked)?;
    for (i, &w) in weights.iter().enumerate() {
        acc += w;
        if acc > target && w > 0.0 {
            chosen = i;
            break;
        }
    }
    let id = if ws.full {
        chosen as u32
    } else {
        ws.list[chosen].id
    };
    Ok((id, (weights[chosen] / sum).ln()))
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
        for &w in out.iter() {
            sum += w;
        }
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
