//! Repetition (CTRL), frequency and presence penalties over a window of the history.

use super::check_id;
use crate::SamplingError;
use crate::candidates::keep_finite;
use crate::config::PenaltyScope;

/// The part of `history` the penalties look at: the scoped tokens (all of them, or those after
/// `prompt_len`), then the last `last_n` of those (`-1` = all, `0` = none).
pub fn penalty_window(
    history: &[u32],
    prompt_len: usize,
    scope: PenaltyScope,
    last_n: i64,
) -> &[u32] {
    let scoped = match scope {
        PenaltyScope::PromptAndOutput => history,
        PenaltyScope::OutputOnly => &history[prompt_len.min(history.len())..],
    };
    match last_n {
        n if n < 0 => scoped,
        n => &scoped[scoped.len().saturating_sub(n as usize)..],
    }
}

/// `(token, count)` for each distinct token in `window`, sorted by token id. `scratch` is reused
/// to avoid allocating.
pub fn token_counts(window: &[u32], scratch: &mut Vec<u32>) -> Vec<(u32, u32)> {
    scratch.clear();
    scratch.extend_from_slice(window);
    scratch.sort_unstable();
    let mut counts: Vec<(u32, u32)> = Vec::new();
    for &t in scratch.iter() {
        match counts.last_mut() {
            Some((last, c)) if *last == t => *c += 1,
            _ => counts.push((t, 1)),
        }
    }
    counts
}

/// The penalised value of one logit of a token seen `count > 0` times.
///
/// CTRL repetition penalty (positive logits divided by `repetition`, negative ones multiplied),
/// then OpenAI's `logit -= count * frequency + presence`. With `repetition >= 1`,
/// `frequency >= 0` and `presence >= 0` the result is never larger than `logit`.
///
/// ```
/// use kindle_sampling::processors::penalize;
/// assert_eq!(penalize(2.0, 3, 2.0, 0.5, 1.0), 2.0 / 2.0 - 3.0 * 0.5 - 1.0);
/// assert_eq!(penalize(-2.0, 1, 2.0, 0.0, 0.0), -4.0);
/// ```
#[inline]
pub fn penalize(logit: f32, count: u32, repetition: f32, frequency: f32, presence: f32) -> f32 {
    if count == 0 {
        return logit;
    }
    let l = if logit > 0.0 {
        logit / repetition
    } else {
        logit * repetition
    };
    let after = l - count as f32 * frequency - presence;
    keep_finite(logit, after)
}

/// Applies [`penalize`] in place to every token in `window`.
pub fn apply_penalties(
    row: &mut [f32],
    window: &[u32],
    repetition: f32,
    frequency: f32,
    presence: f32,
) -> Result<(), SamplingError> {
    for (id, count) in token_counts(window, &mut Vec::new()) {
        check_id("history", id, row.len())?;
        let l = &mut row[id as usize];
        *l = penalize(*l, count, repetition, frequency, presence);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_scope() {
        let h = [1, 2, 3, 4, 5];
        assert_eq!(penalty_window(&h, 2, PenaltyScope::PromptAndOutput, -1), &h);
        assert_eq!(
            penalty_window(&h, 2, PenaltyScope::OutputOnly, -1),
            &[3, 4, 5]
        );
        assert_eq!(penalty_window(&h, 2, PenaltyScope::OutputOnly, 2), &[4, 5]);
        assert_eq!(
            penalty_window(&h, 2, PenaltyScope::PromptAndOutput, 0),
            &[] as &[u32]
        );
        assert_eq!(
            penalty_window(&h, 9, PenaltyScope::OutputOnly, 10),
            &[] as &[u32]
        );
    }

    #[test]
    fn counts_and_penalties() {
        assert_eq!(
            token_counts(&[3, 1, 3, 3], &mut Vec::new()),
            vec![(1, 1), (3, 3)]
        );
        let mut row = [1.0, 2.0, -1.0, 4.0];
        apply_penalties(&mut row, &[1, 2, 2], 2.0, 0.1, 0.5).unwrap();
        assert_eq!(row, [1.0, 1.0 - 0.1 - 0.5, -2.0 - 0.2 - 0.5, 4.0]);
        assert!(apply_penalties(&mut row, &[7], 2.0, 0.0, 0.0).is_err());
    }
}
