//! Logits processors and token selection for kindle. No tensor library: everything works on a
//! plain `&mut [f32]` row of logits plus the token history.
//!
//! ```
//! use kindle_sampling::Sampler;
//! let mut sampler = Sampler::greedy();
//! let mut logits = vec![0.1, 2.0, -1.0];
//! assert_eq!(sampler.sample(&mut logits, &[]).unwrap(), 1);
//! ```

use thiserror::Error;

/// Why a token could not be sampled, or a sampler could not be built.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SamplingError {
    /// The logits row was empty.
    #[error("empty logits row")]
    EmptyLogits,
    /// A logit was NaN or infinite.
    #[error("logit {index} is {value} (not finite)")]
    NonFiniteLogit { index: usize, value: f32 },
}

/// Picks the next token from a logits row (the processor chain plus a selection rule).
#[derive(Debug, Clone)]
pub struct Sampler {
    _private: (),
}

impl Sampler {
    /// Greedy decoding: the argmax of the raw logits (ties go to the lowest id).
    pub fn greedy() -> Self {
        Sampler { _private: () }
    }

    /// Process `logits` in place (with `history`, the tokens so far) and pick one token id.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32, SamplingError> {
        let _ = history;
        argmax(logits)
    }
}

/// Index of the largest logit; ties go to the lowest index. Errors on an empty row or a NaN.
pub fn argmax(logits: &[f32]) -> Result<u32, SamplingError> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            return Err(SamplingError::NonFiniteLogit { index: i, value: v });
        }
        match best {
            Some((_, b)) if v <= b => {}
            _ => best = Some((i, v)),
        }
    }
    best.map(|(i, _)| i as u32).ok_or(SamplingError::EmptyLogits)
}
