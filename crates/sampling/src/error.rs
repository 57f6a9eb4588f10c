//! The error type shared by configuration (build time) and sampling (sample time).

use thiserror::Error;

/// Why a token could not be sampled, or a sampler could not be built.
///
/// Build-time errors ([`SamplingError::InvalidParameter`], [`SamplingError::UnknownStage`],
/// [`SamplingError::DuplicateStage`]) name the offending parameter and value. Sample-time errors
/// name the offending index or token id; the generation loop can attach the step with
/// [`SamplingError::at_step`].
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SamplingError {
    /// The logits row was empty.
    #[error("empty logits row")]
    EmptyLogits,
    /// A logit was NaN or `+inf` (`-inf` is allowed: it masks the token).
    #[error("logit {index} is {value} (not finite)")]
    NonFiniteLogit {
        /// Index (token id) of the offending logit.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// Every token is masked (`-inf`), either in the input row or after processing.
    #[error("every token is masked (-inf): nothing left to sample")]
    AllMasked,
    /// A token id (from the configuration or the history) is outside the logits row.
    #[error("{what} token id {id} is out of range for a vocabulary of {vocab}")]
    TokenOutOfRange {
        /// Where the id came from (`"logit_bias"`, `"eog_ids"`, `"history"`).
        what: &'static str,
        /// The id.
        id: u32,
        /// Length of the logits row.
        vocab: usize,
    },
    /// A configuration parameter is invalid.
    #[error("invalid {name} = {value}: {expected}")]
    InvalidParameter {
        /// Parameter name, as in [`crate::SamplerConfig`] (e.g. `"top_p"`).
        name: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// A name in a sampler-order string is not a known stage.
    #[error("unknown sampler stage {name:?} (known: {known})")]
    UnknownStage {
        /// The unknown name.
        name: String,
        /// The accepted names, for the message.
        known: &'static str,
    },
    /// A stage appears twice in a sampler order.
    #[error("sampler stage {name} appears more than once in the order")]
    DuplicateStage {
        /// Canonical name of the stage.
        name: &'static str,
    },
    /// Another error, at a given generation step (see [`SamplingError::at_step`]).
    #[error("at generation step {step}: {source}")]
    AtStep {
        /// Generation step (0 = first generated token).
        step: usize,
        /// What went wrong.
        source: Box<SamplingError>,
    },
}

impl SamplingError {
    /// Wraps this error with the generation step it happened at.
    ///
    /// The sampler does not do this itself (so callers can match on the plain variants); the
    /// generation loop, which knows its step, adds it:
    ///
    /// ```
    /// use kindle_sampling::{Sampler, SamplingError};
    /// let mut sampler = Sampler::greedy();
    /// let err = sampler.sample(&mut [f32::NAN], &[]).map_err(|e| e.at_step(7)).unwrap_err();
    /// assert_eq!(err.to_string(), "at generation step 7: logit 0 is NaN (not finite)");
    /// assert!(matches!(err.inner(), SamplingError::NonFiniteLogit { index: 0, .. }));
    /// ```
    pub fn at_step(self, step: usize) -> Self {
        match self {
            SamplingError::AtStep { source, .. } => SamplingError::AtStep { step, source },
            other => SamplingError::AtStep {
                step,
                source: Box::new(other),
            },
        }
    }

    /// The underlying error, looking through [`SamplingError::AtStep`].
    pub fn inner(&self) -> &SamplingError {
        match self {
            SamplingError::AtStep { source, .. } => source.inner(),
            other => other,
        }
    }

    /// The generation step, if one was attached with [`SamplingError::at_step`].
    pub fn step(&self) -> Option<usize> {
        match self {
            SamplingError::AtStep { step, .. } => Some(*step),
            _ => None,
        }
    }

    pub(crate) fn invalid(
        name: &'static str,
        value: impl ToString,
        expected: &'static str,
    ) -> Self {
        SamplingError::InvalidParameter {
            name,
            value: value.to_string(),
            expected,
        }
    }
}
