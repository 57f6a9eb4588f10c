//! What to generate: stop conditions and per-token reporting.

use std::time::Duration;

/// When generation ends (besides the context being full).
///
/// The first condition met wins, checked after each new token in this order: end-of-generation
/// token, stop token, stop string, `max_new_tokens` (or full context), `max_time`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopConditions {
    /// Most tokens to generate (the stop token counts); `None`: until another condition or the
    /// end of the context. `Some(0)` finishes at once without running the model.
    pub max_new_tokens: Option<usize>,
    /// The model's end-of-generation token ids (from its metadata). Generation stops on them
    /// with [`StopMatch::Eog`](crate::StopMatch::Eog); their text is never emitted.
    pub eog_token_ids: Vec<u32>,
    /// Extra token ids that stop generation ([`StopMatch::Token`](crate::StopMatch::Token));
    /// their text is never emitted.
    pub stop_token_ids: Vec<u32>,
    /// Strings that stop generation when they appear in the decoded output, even across token
    /// boundaries ([`StopMatch::String`](crate::StopMatch::String)). No part of them is ever
    /// streamed (unless `include_stop_str_in_output`), and text after them is dropped.
    pub stop_strings: Vec<String>,
    /// Emit the matched stop string as the end of the output instead of dropping it.
    pub include_stop_str_in_output: bool,
    /// Wall-clock budget, measured from the first call of the generator (prefill included) and
    /// checked after each token, so at least one token is generated.
    pub max_time: Option<Duration>,
}

/// Everything [`Generator`](crate::Generator) needs besides the model, session, sampler and
/// decoder.
///
/// ```
/// use kindle_generate::GenerationConfig;
/// use std::time::Duration;
/// let config = GenerationConfig::default()
///     .with_max_new_tokens(128)
///     .with_eog_token_ids([2])
///     .with_stop_strings(["\n\n"])
///     .with_max_time(Duration::from_secs(30))
///     .with_top_logprobs(5);
/// assert_eq!(config.stop.max_new_tokens, Some(128));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GenerationConfig {
    /// When to stop.
    pub stop: StopConditions,
    /// How many of the most likely tokens (with their raw log-probabilities) to report with
    /// each generated token; 0 for none.
    pub top_logprobs: usize,
}

impl GenerationConfig {
    /// Set [`StopConditions::max_new_tokens`].
    pub fn with_max_new_tokens(mut self, n: usize) -> Self {
        self.stop.max_new_tokens = Some(n);
        self
    }

    /// Set [`StopConditions::eog_token_ids`].
    pub fn with_eog_token_ids(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
        self.stop.eog_token_ids = ids.into_iter().collect();
        self
    }

    /// Set [`StopConditions::stop_token_ids`].
    pub fn with_stop_token_ids(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
        self.stop.stop_token_ids = ids.into_iter().collect();
        self
    }

    /// Set [`StopConditions::stop_strings`].
    pub fn with_stop_strings<S: Into<String>>(
        mut self,
        stops: impl IntoIterator<Item = S>,
    ) -> Self {
        self.stop.stop_strings = stops.into_iter().map(Into::into).collect();
        self
    }

    /// Set [`StopConditions::include_stop_str_in_output`].
    pub fn with_include_stop_str_in_output(mut self, include: bool) -> Self {
        self.stop.include_stop_str_in_output = include;
        self
    }

    /// Set [`StopConditions::max_time`].
    pub fn with_max_time(mut self, max_time: Duration) -> Self {
        self.stop.max_time = Some(max_time);
        self
    }

    /// Set [`top_logprobs`](Self::top_logprobs).
    pub fn with_top_logprobs(mut self, n: usize) -> Self {
        self.top_logprobs = n;
        self
    }
}
