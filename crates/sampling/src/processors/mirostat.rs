//! Mirostat 1 and 2 (Basu et al. 2021), following llama.cpp.

use std::f64::consts::LN_2;

use rand_chacha::ChaCha8Rng;

use crate::SamplingError;
use crate::candidates::{WorkSet, by_logit_desc};
use crate::select::draw;

/// Mirostat 1: estimate the Zipf exponent `s` from the top `m = 100` tokens, derive `k` from
/// `mu`, keep the top `k`, draw, then `mu -= eta * (surprise - tau)` (surprise in bits, of the
/// drawn token under the truncated distribution).
pub(crate) fn mirostat_v1(
    ws: &mut WorkSet<'_>,
    rng: &mut ChaCha8Rng,
    weights: &mut Vec<f64>,
    mu: &mut f64,
    tau: f32,
    eta: f32,
    n_vocab: usize,
) -> Result<u32, SamplingError> {
    const M: usize = 100;
    ws.materialize();
    let len = ws.list.len();
    if len == 0 {
        return Err(SamplingError::AllMasked);
    }
    let m = M.min(len);
    if !ws.sorted {
        if m < len {
            ws.list.select_nth_unstable_by(m - 1, by_logit_desc);
        }
        ws.list[..m].sort_unstable_by(by_logit_desc);
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for i in 0..m - 1 {
        let t = ((i + 2) as f64 / (i + 1) as f64).ln();
        let b = ws.list[i].logit as f64 - ws.list[i + 1].logit as f64;
        num += t * b;
        den += t * t;
    }
    let k = if den > 0.0 {
        let s_hat = num / den;
        let eps = s_hat - 1.0;
        let n = n_vocab as f64;
        let ratio = if eps.abs() < 1e-9 {
            2f64.powf(*mu) / n.ln()
        } else {
            eps * 2f64.powf(*mu) / (1.0 - n.powf(-eps))
        };
        ratio.powf(1.0 / s_hat)
    } else {
        1.0
    };
    let k = if k.is_nan() || k >= len as f64 {
        len
    } else {
        k.max(1.0) as usize
    };
    ws.keep_top(k);
    let (id, logprob) = draw(ws, rng, weights)?;
    *mu -= eta as f64 * (-logprob / LN_2 - tau as f64);
    Ok(id)
}

/// Mirostat 2: drop tokens whose surprise `-log2 p` exceeds `mu` (keeping at least the best),
/// draw from the renormalised rest, then `mu -= eta * (surprise - tau)`.
pub(crate) fn mirostat_v2(
    ws: &mut WorkSet<'_>,
    rng: &mut ChaCha8Rng,
    weights: &mut Vec<f64>,
    mu: &mut f64,
    tau: f32,
    eta: f32,
) -> Result<u32, SamplingError> {
    let (max, lnz) = ws.log_normalizer().ok_or(SamplingError::AllMasked)?;
    let bound = -*mu * LN_2;
    ws.retain(|l| l as f64 - max - lnz >= bound);
    let (id, logprob) = draw(ws, rng, weights)?;
    *mu -= eta as f64 * (-logprob / LN_2 - tau as f64);
    Ok(id)
}
