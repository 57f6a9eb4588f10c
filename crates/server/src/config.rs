//! [`ServerConfig`]: what `kindle serve`'s flags set.

use std::time::Duration;

use crate::error::ServerError;

/// How the server runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The model's name in `/v1/models` and responses; requests may name it or `kindle`.
    pub model_name: String,
    /// Context length per sequence (prompt plus output).
    pub context: usize,
    /// Most sequences running at once (each request's `n` choices count one each).
    pub parallel: usize,
    /// Most sequences waiting for a running slot; a request beyond that gets 429.
    pub queue: usize,
    /// Most prompt tokens one engine step feeds (shared by the prompts being read, in
    /// arrival order); a longer prompt is prefilled in chunks over several steps, while the
    /// decoding sequences go on generating one token a step.
    pub step_tokens: usize,
    /// Reuse the KV blocks of earlier prompts (prefix caching): every full block of a
    /// sequence is indexed by the tokens up to its end, and a new prompt starting with the
    /// same tokens (a system prompt, a chat history) takes those blocks instead of computing
    /// them again. Blocks of finished sequences stay cached until the pool needs the room.
    pub prefix_cache: bool,
    /// Tokens of KV storage in the paged pool that every sequence draws its blocks from
    /// (`None`: `parallel x context`, so that every slot can hold a whole context). A
    /// request waits in the queue until the pool can hold its prompt plus its `max_tokens`.
    pub kv_pool_tokens: Option<usize>,
    /// Tokens per KV block (the prefix cache's granularity).
    pub block_size: usize,
    /// When set, every endpoint but `/health` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Origins allowed by CORS (`*` for any); none: CORS off.
    pub cors_origins: Vec<String>,
    /// Largest request body in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// How long a connection may wait for a request's headers to be in: from the connection
    /// (or the end of its previous response, for a kept-alive one) to the end of the headers.
    /// Past it the connection is closed, so a client that never finishes its request (or
    /// idles) does not hold a connection.
    pub header_timeout: Duration,
    /// How long a client may take to send its request body.
    pub body_timeout: Duration,
    /// On shutdown, how long running requests may take to finish.
    pub drain_timeout: Duration,
    /// Whether chat replies that open with `<think>` have their reasoning split into
    /// `reasoning_content` (a request's `reasoning_format` overrides it).
    pub reasoning_format: crate::reasoning::ReasoningFormat,
}

impl ServerConfig {
    /// Defaults for a model called `model_name` with a context of `context` tokens: 4
    /// parallel sequences, a queue of 64, 512 prefill tokens per step, prefix caching in blocks
    /// of 16 tokens in a pool of `parallel x context` tokens, no key, no CORS, 4 MiB
    /// headers within 30 s of connecting (or of the previous
    /// response), bodies read within 30 s, 30 s to drain.
    pub fn new(model_name: impl Into<String>, context: usize) -> Self {
        ServerConfig {
            model_name: model_name.into(),
            context,
            parallel: 4,
            queue: 64,
            step_tokens: 512,
            prefix_cache: true,
            kv_pool_tokens: None,
            block_size: 16,
            api_key: None,
            cors_origins: Vec::new(),
            max_body_bytes: 4 << 20,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            reasoning_format: crate::reasoning::ReasoningFormat::Deepseek,
        }
    }

    /// Check the settings that must be positive.
    pub fn validate(&self) -> Result<(), ServerError> {
        let positive = [
            ("--ctx-size", self.context),
            ("--parallel", self.parallel),
            ("--batch-tokens", self.step_tokens),
            ("--block-size", self.block_size),
        ];
        if self.header_timeout.is_zero() {
            return Err(ServerError::InvalidSetting {
                name: "--header-timeout",
                value: "0".into(),
                expected: "a positive number of seconds",
            });
        }
        for (name, value) in positive {
            if value == 0 {
                return Err(ServerError::InvalidSetting {
                    name,
                    value: value.to_string(),
                    expected: "at least 1",
                });
            }
        }
        if self.pool_tokens() < self.context {
            return Err(ServerError::InvalidSetting {
                name: "--kv-pool",
                value: self.pool_tokens().to_string(),
                expected: "at least the context length (--ctx-size), so that any request fits",
            });
        }
        Ok(())
    }

    /// Tokens of the KV pool: [`kv_pool_tokens`](Self::kv_pool_tokens) or `parallel x
    /// context`.
    pub fn pool_tokens(&self) -> usize {
        self.kv_pool_tokens
            .unwrap_or_else(|| self.parallel.saturating_mul(self.context))
    }

    /// Blocks of the KV pool: enough for [`pool_tokens`](Self::pool_tokens).
    pub fn pool_blocks(&self) -> usize {
        self.pool_tokens().div_ceil(self.block_size.max(1))
    }
}
