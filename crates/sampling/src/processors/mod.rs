//! Logits processors.
//!
//! The history-based processors are public and work on a plain `&mut [f32]` row, so they can be
//! used (and tested) on their own:
//! [`apply_logit_bias`], [`suppress_tokens`] (min-tokens), [`apply_no_repeat_ngram`],
//! [`apply_penalties`] and [`apply_dry`]. The truncating stages (top-k, top-p, min-p, typical-p,
//! top-n-sigma, XTC), temperature and mirostat work on the sampler's internal candidate list and
//! are reached through [`crate::Sampler`].

mod bias;
mod dry;
pub(crate) mod mirostat;
mod ngram;
mod penalties;
pub(crate) mod truncation;

pub use bias::{apply_logit_bias, suppress_tokens};
pub use dry::{apply_dry, dry_penalties};
pub use ngram::{apply_no_repeat_ngram, banned_by_ngram};
pub use penalties::{apply_penalties, penalize, penalty_window, token_counts};

use crate::SamplingError;

/// Checks that `id` indexes a row of `vocab` logits.
pub(crate) fn check_id(what: &'static str, id: u32, vocab: usize) -> Result<(), SamplingError> {
    if (id as usize) < vocab {
        Ok(())
    } else {
        Err(SamplingError::TokenOutOfRange { what, id, vocab })
    }
}
