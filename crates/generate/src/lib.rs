//! The generation loop of kindle: forward pass, logits, sampling, append, repeat until a stop.
//!
//! It sees the model only through [`LanguageModel`] (tokens in, last-position logits out, cache
//! state behind an associated type) and the tokenizer only through [`TokenDecoder`] (ids in,
//! text out), so it never touches a tensor and is tested with fake models.
//!
//! - [`Session`]: a cache plus the tokens in it; a new prompt reuses the common prefix.
//! - [`Generator`] / [`generate`]: an iterator of [`Event`]s, one per token with its text delta
//!   and log-probabilities, then [`Event::Done`] with the [`Summary`] (finish reason, text,
//!   tokens, [`Timings`]). [`generate_to_end`] collects it all.
//! - [`GenerationConfig`] / [`StopConditions`]: max new tokens, end-of-generation and stop
//!   token ids, stop strings (matched across token boundaries, never partially streamed), time
//!   budget.
//! - [`StreamDecoder`]: UTF-8-safe incremental detokenising; [`StopStringMatcher`]: stop
//!   strings over a text stream.
//! - [`beam_search`]: beam search with Hugging Face semantics ([`BeamConfig`],
//!   [`EarlyStopping`]), the beams sharing the prompt's cache through [`Session::fork`].
//! - [`Sequence`]: a generation that owns its session and sampler, stepped from outside
//!   ([`Step`]) and batched with others in one forward pass as sequences come and go
//!   (continuous batching, `kindle serve`).
//! - [`generate_samples`]: several samples of one prompt (one sampler each), the prompt run once.
//! - [`chat`]: chat templates (Jinja, Hugging Face semantics) and their tokenization, message
//!   contents never parsed for control tokens.
//! - [`score()`]: teacher-forced log-probabilities and perplexity. The log-softmax, argmax and
//!   top-n helpers it and the loop use live in [`kindle_sampling::logprobs`].
//!
//! ```
//! use kindle_generate::{
//!     Event, FinishReason, GenerationConfig, LanguageModel, ModelCache, Session, StopMatch,
//!     TokenDecoder, generate, score,
//! };
//! use kindle_sampling::Sampler;
//! use std::convert::Infallible;
//!
//! /// A cache that only counts tokens.
//! struct Counter {
//!     len: usize,
//!     capacity: usize,
//! }
//! impl ModelCache for Counter {
//!     fn len(&self) -> usize { self.len }
//!     fn capacity(&self) -> usize { self.capacity }
//!     fn truncate(&mut self, len: usize) { self.len = self.len.min(len) }
//!     fn fork(&self) -> Self { Counter { ..*self } }
//! }
//!
//! /// Vocabulary "abcd." (ids 0..5): predicts the letter after the last token, "." after "d".
//! struct Alphabet;
//! impl Alphabet {
//!     fn row(&self, token: u32) -> Vec<f32> {
//!         let mut row = vec![0.0; 5];
//!         row[(token as usize + 1).min(4)] = 10.0;
//!         row
//!     }
//! }
//! impl LanguageModel for Alphabet {
//!     type Cache = Counter;
//!     type Error = Infallible;
//!     fn vocab_size(&self) -> usize { 5 }
//!     fn context_length(&self) -> usize { 64 }
//!     fn new_cache(&self, capacity: usize) -> Result<Counter, Infallible> {
//!         Ok(Counter { len: 0, capacity })
//!     }
//!     fn forward_last(&self, tokens: &[u32], cache: &mut Counter) -> Result<Vec<f32>, Infallible> {
//!         cache.len += tokens.len();
//!         Ok(self.row(*tokens.last().unwrap()))
//!     }
//!     fn forward_all(&self, tokens: &[u32], cache: &mut Counter) -> Result<Vec<f32>, Infallible> {
//!         cache.len += tokens.len();
//!         Ok(tokens.iter().flat_map(|&t| self.row(t)).collect())
//!     }
//! }
//! impl TokenDecoder for Alphabet {
//!     type Error = Infallible;
//!     fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
//!         Ok(ids.iter().map(|&i| b"abcd."[i as usize] as char).collect())
//!     }
//! }
//!
//! let model = Alphabet;
//! let mut session = Session::new(&model, 16)?;
//! let mut sampler = Sampler::greedy();
//! let config = GenerationConfig::default()
//!     .with_max_new_tokens(10)
//!     .with_eog_token_ids([4]);
//!
//! let mut streamed = String::new();
//! for event in generate(&model, &mut session, &[0], &mut sampler, &model, &config)? {
//!     match event? {
//!         Event::Token { text, logprob, .. } => {
//!             assert!(logprob > -0.01);
//!             streamed.push_str(&text); // print!("{text}") in a CLI
//!         }
//!         Event::Done(summary) => {
//!             assert_eq!(summary.finish_reason, FinishReason::Stop);
//!             assert_eq!(summary.finish_reason.as_str(), "stop");
//!             assert_eq!(summary.stop, Some(StopMatch::Eog(4)));
//!             assert_eq!(summary.tokens, [1, 2, 3, 4]);
//!             assert_eq!(summary.text, "bcd"); // the end-of-generation token has no text
//!         }
//!     }
//! }
//! assert_eq!(streamed, "bcd");
//! // The session holds what was fed: the prompt and all generated tokens but the last.
//! assert_eq!(session.tokens(), [0, 1, 2, 3]);
//!
//! // Teacher-forced scoring.
//! let scored = score(&model, &mut session, &[0, 1, 2, 3], 2)?;
//! assert_eq!(scored.positions.len(), 3);
//! assert_eq!(scored.positions[0].argmax, 1);
//! assert!(scored.perplexity < 1.01);
//! # Ok::<(), kindle_generate::GenerateError>(())
//! ```

mod batch;
mod beam;
pub mod chat;
mod config;
mod decode;
mod draft;
mod error;
mod generator;
pub mod model;
mod outcome;
mod samples;
mod score;
mod sequence;
mod session;
mod speculative;
mod stop;

pub use batch::generate_batch;
pub use beam::{BeamConfig, BeamOutput, BeamSequence, EarlyStopping, beam_search};
pub use config::{GenerationConfig, StopConditions};
pub use decode::{StreamDecoder, TokenDecoder};
pub use draft::{Draft, Drafter, ModelDrafter, PromptLookup};
pub use error::{BoxError, GenerateError};
pub use generator::{Generator, PROMPT_CONTEXT_TOKENS, Step, generate, generate_to_end};
pub use model::{BlockStats, LanguageModel, ModelCache, PagedModel, mask_outside};
pub use outcome::{Event, Summary, Timings};
pub use samples::generate_samples;
pub use score::{Score, TokenScore, score, score_row};
pub use sequence::{Completion, Sequence};
pub use session::Session;
pub use speculative::{
    AcceptRule, DEFAULT_DRAFT_MAX, DEFAULT_LOOKUP_DRAFT_MAX, MAX_DRAFT, SpecStats, Speculator,
};
pub use stop::{FinishReason, StopMatch, StopScan, StopStringMatcher};
