//! Logit bias and token suppression (min-tokens).

use super::check_id;
use crate::SamplingError;
use crate::candidates::keep_finite;

/// Adds `bias` to each listed token's logit (repeated ids add up); a bias of `-inf` bans the
/// token. A finite result never overflows to `±inf`.
///
/// ```
/// let mut row = [1.0, 2.0, 3.0];
/// kindle_sampling::processors::apply_logit_bias(&mut row, &[(0, 5.0), (2, f32::NEG_INFINITY)]).unwrap();
/// assert_eq!(row, [6.0, 2.0, f32::NEG_INFINITY]);
/// ```
pub fn apply_logit_bias(row: &mut [f32], bias: &[(u32, f32)]) -> Result<(), SamplingError> {
    for &(id, b) in bias {
        check_id("logit_bias", id, row.len())?;
        let l = &mut row[id as usize];
        *l = if b == f32::NEG_INFINITY {
            b
        } else {
            keep_finite(*l, *l + b)
        };
    }
    Ok(())
}

/// Masks (`-inf`) every listed token: used to hold back end-of-generation ids until
/// `min_tokens` tokens have been generated.
pub fn suppress_tokens(row: &mut [f32], ids: &[u32]) -> Result<(), SamplingError> {
    for &id in ids {
        check_id("eog_ids", id, row.len())?;
        row[id as usize] = f32::NEG_INFINITY;
    }
    Ok(())
}
