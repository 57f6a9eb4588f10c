//! The one error type of the crate.

use kindle_sampling::SamplingError;

/// A boxed error from a model or a detokeniser, kept as the [`source`](std::error::Error::source).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why generation (or scoring) could not start or could not go on.
///
/// The `Display` text of the variants that wrap another error does not repeat that error: it is
/// the [`source`](std::error::Error::source), so error reporters (`anyhow`'s `{:#}`) print the
/// chain once.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A batch was given different numbers of prompts, sessions and samplers.
    #[error(
        "a batch needs one session and one sampler per prompt: {prompts} prompts, {sessions} sessions, {samplers} samplers"
    )]
    BatchShape {
        /// Prompts given.
        prompts: usize,
        /// Sessions given.
        sessions: usize,
        /// Samplers given.
        samplers: usize,
    },
    /// A batched generation ended without a summary for every sequence.
    #[error("a batched generation ended before every sequence finished")]
    BatchIncomplete,
    /// The prompt had no token: the model needs at least one to predict the next.
    #[error("the prompt is empty: the model needs at least one token")]
    EmptyPrompt,
    /// The prompt does not fit the usable context (the smaller of the cache capacity and the
    /// model's context length).
    #[error(
        "the prompt has {prompt_tokens} tokens, more than the context length of {context_length}"
    )]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// The usable context length: `min(cache capacity, model context length)`.
        context_length: usize,
    },
    /// A token id is not below the model's vocabulary size.
    #[error("token id {token} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfVocab {
        /// The offending id.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// Scoring needs at least two tokens (one prediction).
    #[error("scoring needs at least 2 tokens, got {tokens}")]
    TooFewTokens {
        /// Tokens given.
        tokens: usize,
    },
    /// The model's forward pass (or cache creation) failed.
    #[error("the model failed")]
    Model(#[source] BoxError),
    /// The model returned a logits buffer of the wrong size.
    #[error("the model returned {actual} logits, expected {expected}")]
    LogitsLength {
        /// `rows * vocab_size`.
        expected: usize,
        /// What came back.
        actual: usize,
    },
    /// After a forward pass the cache did not hold the tokens it was fed.
    #[error("the cache holds {actual} tokens after a forward pass, expected {expected}")]
    CacheLength {
        /// Tokens the session has fed.
        expected: usize,
        /// [`ModelCache::len`](crate::ModelCache::len) after the pass.
        actual: usize,
    },
    /// The sampler failed on the logits of generation step `step` (0 = the first new token).
    #[error("sampling failed at step {step}")]
    Sampling {
        /// Index of the token being sampled among the generated ones.
        step: usize,
        /// The sampler's error.
        #[source]
        source: SamplingError,
    },
    /// A beam-search setting is out of range (the text says which).
    #[error("invalid beam search setting: {0}")]
    InvalidBeamConfig(String),
    /// A speculative decoding setting or drafter output that cannot work.
    #[error("speculative decoding: {0}")]
    InvalidDraft(String),
    /// The output constraint failed (a grammar engine error, or a token it does not allow).
    #[error("the output constraint failed at step {step}")]
    Constraint {
        /// Index of the generated token (0 = first).
        step: usize,
        /// What the constraint said.
        #[source]
        source: BoxError,
    },
    /// The detokeniser failed.
    #[error("detokenisation failed")]
    Decode(#[source] BoxError),
}

impl GenerateError {
    pub(crate) fn model<E: std::error::Error + Send + Sync + 'static>(e: E) -> Self {
        GenerateError::Model(Box::new(e))
    }

    pub(crate) fn decode<E: std::error::Error + Send + Sync + 'static>(e: E) -> Self {
        GenerateError::Decode(Box::new(e))
    }
}

/// `Err(TokenOutOfVocab)` for the first id in `ids` outside a vocabulary of `vocab_size`.
pub(crate) fn check_vocab(ids: &[u32], vocab_size: usize) -> Result<(), GenerateError> {
    match ids.iter().find(|&&id| id as usize >= vocab_size) {
        Some(&token) => Err(GenerateError::TokenOutOfVocab { token, vocab_size }),
        None => Ok(()),
    }
}
