//! Logits processors and token selection for kindle. No tensor library: everything works on a
//! plain `&mut [f32]` row of logits plus the token history.
//!
//! ```
//! use kindle_sampling::{Sampler, SamplerConfig, parse_order};
//!
//! // Greedy decoding (kindle's default).
//! let mut sampler = Sampler::greedy();
//! let mut logits = vec![0.1, 2.0, -1.0];
//! assert_eq!(sampler.sample(&mut logits, &[]).unwrap(), 1);
//!
//! // A seeded sampling chain with penalties and an explicit (llama.cpp-style) order.
//! let config = SamplerConfig {
//!     temperature: 0.8,
//!     top_k: 40,
//!     top_p: 0.95,
//!     min_p: 0.05,
//!     repetition_penalty: 1.1,
//!     seed: Some(1234),
//!     order: parse_order("penalties;top_k;top_p;min_p;temperature").unwrap(),
//!     ..SamplerConfig::neutral()
//! };
//! let mut sampler = config.build().unwrap();
//! let history = [3u32, 1, 4, 1, 5];
//! sampler.set_prompt_len(3);
//! let mut logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
//! let out = sampler.sample_with_logprobs(&mut logits, &history, 5).unwrap();
//! assert!(out.token < 100);
//! assert!(out.processed_logprob <= 0.0 && out.top_processed.len() <= 5);
//! ```
//!
//! [`logprobs`] holds the helpers on a raw row that the generation loop, scoring and the
//! sampler's logprob outputs share: [`logprobs::log_sum_exp`], [`logprobs::argmax`] (and the
//! checked [`logprobs::try_argmax`]), [`logprobs::top_n`], [`logprobs::top_n_logprobs`].
//!
//! # Processing order
//!
//! 1. Fixed, always first: **logit bias**, then **min-tokens** (end-of-generation ids masked until
//!    `min_tokens` tokens were generated), then the **no-repeat-n-gram** ban.
//! 2. The configurable chain ([`SamplerConfig::order`], parsed from a llama.cpp `--samplers`
//!    string by [`parse_order`]). The default is llama.cpp's order, [`LLAMA_CPP_ORDER`]:
//!    `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`. [`HF_ORDER`]
//!    reproduces Hugging Face's (`penalties;dry;temperature;top_k;top_p;min_p;typ_p`, then the
//!    stages HF lacks). Stages missing from the order are not applied.
//! 3. Selection: argmax if `temperature == 0` (ties go to the lowest id); mirostat if enabled
//!    (the truncation stages are then skipped); otherwise a categorical draw.
//!
//! # Determinism
//!
//! Each sampler owns a [`rand_chacha::ChaCha8Rng`] seeded with [`SamplerConfig::seed`] (or a seed
//! drawn from OS entropy and reported by [`Sampler::seed`]). Uniform numbers are built from the
//! top 53 bits of `next_u64`, the draw is a cumulative scan in f64 over the kept candidates sorted
//! by (logit desc, id asc), or over the whole row when nothing truncated (in blocks of 512 ids,
//! each lane by lane; a row under 512 in id order). The weights' `exp` is the crate's own
//! polynomial, fused multiply-adds included, so the same seed and the same logits give the same
//! tokens on every platform.
//!
//! # Performance
//!
//! The vocabulary is never sorted: truncating stages select candidates with
//! `select_nth_unstable_by` and sort only what they keep (top-p and typical-p grow a partial
//! selection until the mass is reached).
//!
//! # Errors
//!
//! [`SamplerConfig::build`] validates every parameter ([`SamplingError::InvalidParameter`] names
//! the parameter and value). At sample time a NaN or `+inf` logit is
//! [`SamplingError::NonFiniteLogit`] (with its index); `-inf` is a mask, and a row with every
//! token masked is [`SamplingError::AllMasked`]. Use [`SamplingError::at_step`] to attach the
//! generation step.

mod candidates;
mod config;
mod constraint;
mod distribution;
mod error;
pub mod logprobs;
mod order;
pub mod processors;
mod sampler;
mod select;
mod trace;
mod weights;

pub use config::{DEFAULT_DRY_BREAKERS, DryConfig, Mirostat, PenaltyScope, SamplerConfig};
pub use constraint::{ConstraintError, ConstraintStats, LogitsConstraint};
pub use error::SamplingError;
pub use order::{HF_ORDER, LLAMA_CPP_ORDER, OrderPreset, Stage, format_order, parse_order};
pub use sampler::{History, Sampled, Sampler};
pub use trace::{CandidateSummary, StageSummary, StageTrace, Trace, TraceSummary};
