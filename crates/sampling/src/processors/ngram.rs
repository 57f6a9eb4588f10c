//! No-repeat-n-gram ban (Hugging Face `no_repeat_ngram_size`).

use super::check_id;
use crate::SamplingError;

/// Tokens that would complete an n-gram (of size `n`) already present in `history`: every token
/// that followed an earlier occurrence of the last `n - 1` tokens. Sorted, without duplicates.
/// `n == 0` bans nothing; `n == 1` bans every token in the history.
///
/// ```
/// use kindle_sampling::processors::banned_by_ngram;
/// // "1 2 3 ... 1 2" — a 3-gram ban forbids 3.
/// assert_eq!(banned_by_ngram(&[1, 2, 3, 9, 1, 2], 3), vec![3]);
/// ```
pub fn banned_by_ngram(history: &[u32], n: usize) -> Vec<u32> {
    if n == 0 || history.len() < n {
        return if n == 1 {
            sorted_unique(history.to_vec())
        } else {
            Vec::new()
        };
    }
    let prefix = &history[history.len() - (n - 1)..];
    let mut banned = Vec::new();
    for start in 0..=history.len() - n {
        if &history[start..start + n - 1] == prefix {
            banned.push(history[start + n - 1]);
        }
    }
    sorted_unique(banned)
}

fn sorted_unique(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

/// Masks (`-inf`) the tokens of [`banned_by_ngram`].
pub fn apply_no_repeat_ngram(
    row: &mut [f32],
    history: &[u32],
    n: usize,
) -> Result<(), SamplingError> {
    for id in banned_by_ngram(history, n) {
        check_id("history", id, row.len())?;
        row[id as usize] = f32::NEG_INFINITY;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_bans() {
        assert!(banned_by_ngram(&[1, 2, 3], 0).is_empty());
        assert_eq!(banned_by_ngram(&[4, 1, 4], 1), vec![1, 4]);
        assert_eq!(banned_by_ngram(&[1, 2, 1, 3, 1], 2), vec![2, 3]);
        assert!(banned_by_ngram(&[1, 2], 3).is_empty());
        let mut row = [0.0; 5];
        apply_no_repeat_ngram(&mut row, &[1, 2, 1, 3, 1], 2).unwrap();
        assert_eq!(row, [0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0]);
    }
}
