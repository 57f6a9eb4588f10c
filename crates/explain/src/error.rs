//! [`ExplainError`].

use kindle_generate::BoxError;
use kindle_sampling::SamplingError;
use thiserror::Error;

/// What can go wrong explaining a run.
#[derive(Debug, Error)]
pub enum ExplainError {
    /// The prompt is empty.
    #[error("the prompt has no tokens")]
    EmptyPrompt,
    /// The prompt plus the tokens to explain do not fit the context.
    #[error(
        "the prompt ({prompt} tokens) plus {max_tokens} new tokens do not fit the context of {context} tokens"
    )]
    TooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens asked for.
        max_tokens: usize,
        /// The model's context.
        context: usize,
    },
    /// The sampler refused (a setting that cannot be traced, a bad row).
    #[error("sampling step {step}: {source}")]
    Sampling {
        /// The step (0-based).
        step: usize,
        /// What the sampler said.
        source: SamplingError,
    },
    /// The model failed.
    #[error("the model failed: {0}")]
    Model(BoxError),
    /// The decoder failed.
    #[error("decoding a token: {0}")]
    Decode(BoxError),
    /// Writing a picture failed.
    #[error("drawing {path}: {message}")]
    Plot {
        /// The file.
        path: String,
        /// What the plotting library said.
        message: String,
    },
    /// The page template failed (a bug).
    #[error("rendering the page: {0}")]
    Page(#[from] minijinja::Error),
}
