//! What a generation yields and reports: [`Event`]s, the closing [`Summary`] and its
//! [`Timings`] (a leaf module, for the generation loop and the beam search alike).

use std::time::Duration;

use kindle_sampling::ConstraintStats;

use crate::stop::{FinishReason, StopMatch};

/// What a [`Generator`](crate::Generator) yields: one `Token` per generated token, then one `Done`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token.
    Token {
        /// Its id. The final token may be an end-of-generation or stop token.
        id: u32,
        /// The new output text it brings (a delta): empty while text is held back (an
        /// incomplete UTF-8 character, a possible stop-string prefix, or a stop token). The
        /// deltas of all events concatenate to [`Summary::text`].
        text: String,
        /// Its log-probability under the raw logits (before any sampling processor).
        logprob: f32,
        /// The [`top_logprobs`](crate::GenerationConfig::top_logprobs) most likely tokens under the
        /// raw logits, `(id, logprob)`, most likely first.
        top_logprobs: Vec<(u32, f32)>,
    },
    /// Generation ended; always the last event.
    Done(Summary),
}

/// The outcome of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Which stop condition matched, with [`FinishReason::Stop`].
    pub stop: Option<StopMatch>,
    /// Tokens in the prompt (including any reused from the session's cache).
    pub prompt_tokens: usize,
    /// Tokens generated, the final stop token included (`tokens.len()`).
    pub generated_tokens: usize,
    /// The output text: stop token texts left out, cut before the matched stop string (or just
    /// after it with `include_stop_str_in_output`).
    pub text: String,
    /// The generated token ids, the final stop token included.
    pub tokens: Vec<u32>,
    /// Where the time went.
    pub timings: Timings,
}

/// Time spent inside the generator (time the caller spends between events is not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timings {
    /// Prompt processing up to and including the first generated token (time to first token).
    pub prefill: Duration,
    /// Everything after the first token: each step's forward pass, sampling and detokenising.
    pub decode: Duration,
    /// Prompt tokens run through the model (prompt tokens already in the session's cache are
    /// not run again).
    pub prefill_tokens: usize,
    /// Tokens generated after the first one (one decode step each).
    pub decode_tokens: usize,
    /// With an output constraint: masks computed, tokens forced (not sampled), mask times.
    pub constraint: Option<ConstraintStats>,
}

impl Timings {
    /// `prefill_tokens / prefill` (0 when either is zero).
    pub fn prefill_tokens_per_second(&self) -> f64 {
        rate(self.prefill_tokens, self.prefill)
    }

    /// `decode_tokens / decode` (0 when either is zero).
    pub fn decode_tokens_per_second(&self) -> f64 {
        rate(self.decode_tokens, self.decode)
    }

    /// `prefill + decode`.
    pub fn total(&self) -> Duration {
        self.prefill + self.decode
    }
}

fn rate(tokens: usize, time: Duration) -> f64 {
    let secs = time.as_secs_f64();
    if tokens == 0 || secs == 0.0 {
        0.0
    } else {
        tokens as f64 / secs
    }
}
