//! Constrained decoding for kindle: the output is forced to match a JSON schema, any JSON
//! object, a regex, a list of choices or a Lark or GBNF grammar (GBNF, llama.cpp's format, is
//! converted to Lark by [`gbnf_to_lark`]), by masking the logits of every token that cannot
//! continue a valid output before each sampling step.
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance): a
//! [`Constrainer`] builds its token trie once per vocabulary, then makes one [`Constraint`] (a
//! [`LogitsConstraint`] for the generation loop) per sequence.
//!
//! ```no_run
//! # fn demo(tokenizer: &kindle_tokenizer::Tokenizer) -> Result<(), kindle_constrain::ConstrainError> {
//! use kindle_constrain::{ConstraintSpec, Constrainer};
//! use kindle_sampling::LogitsConstraint;
//!
//! let constrainer = Constrainer::new(tokenizer)?;
//! let spec = ConstraintSpec::Regex("[0-9]{3}-[0-9]{4}".into());
//! let mut constraint = constrainer.constraint(&spec, "--regex")?;
//! let mut logits = vec![0.0; tokenizer.vocab_size()];
//! let forced = constraint.mask(&mut logits).unwrap(); // disallowed tokens are now -inf
//! # Ok(()) }
//! ```
//!
//! The JSON schema keywords llguidance does not implement (`uniqueItems`, `contains`,
//! `dependentSchemas`, `if`/`then`/`else`, `not`, remote `$ref`, among others) are refused when
//! the constraint is built, as [`ConstrainError::Invalid`].

mod error;
mod gbnf;
mod spec;
mod vocab;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kindle_sampling::{ConstraintError, ConstraintStats, LogitsConstraint};
use kindle_tokenizer::Tokenizer;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

pub use error::ConstrainError;
pub use gbnf::gbnf_to_lark;
pub use spec::ConstraintSpec;

/// The grammar compiler for one vocabulary: build it once per model (the token trie of a
/// 262k vocabulary takes a moment) and share it; [`Constrainer::constraint`] is cheap.
#[derive(Clone)]
pub struct Constrainer {
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for Constrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constrainer")
            .field(
                "vocab_size",
                &self.factory.tok_env().tok_trie().vocab_size(),
            )
            .finish_non_exhaustive()
    }
}

impl Constrainer {
    /// The compiler for `tokenizer`'s vocabulary; its end-of-generation tokens end a complete
    /// output.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, ConstrainError> {
        let eog = tokenizer.eog_ids();
        let Some(&eos) = tokenizer.eos_id().as_ref().or(eog.first()) else {
            return Err(ConstrainError::Vocabulary(
                "no end-of-generation token".into(),
            ));
        };
        let words = vocab::token_bytes(tokenizer);
        let info = TokRxInfo {
            vocab_size: words.len() as u32,
            tok_eos: eos,
            tok_bos: tokenizer.bos_id(),
            tok_pad: tokenizer.pad_id(),
            tok_unk: tokenizer.unk_id(),
            tok_end_of_turn: tokenizer.eot_id(),
        };
        let mut eos_tokens = vec![eos];
        eos_tokens.extend(eog.iter().copied().filter(|&id| id != eos));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_tokens);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| ConstrainError::Vocabulary(format!("{e:#}")))?;
        factory.quiet();
        Ok(Constrainer {
            factory: Arc::new(factory),
        })
    }

    /// A fresh constraint for one sequence. `source` names where `spec` came from (a flag or a
    /// request field) in the errors.
    pub fn constraint(
        &self,
        spec: &ConstraintSpec,
        source: &str,
    ) -> Result<Constraint, ConstrainError> {
        // Compiling a grammar recurses over its rules (llguidance's grammar passes): a chain of
        // a few hundred rules overflowed a 2 MiB stack (a server worker's) and aborted the
        // process. The compile runs on a thread of its own with a large stack (reserved, not
        // committed: only what is used is memory).
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("kindle-grammar".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(scope, || self.compile(spec, source))
                .map_err(|e| ConstrainError::Invalid {
                    source_name: source.to_owned(),
                    kind: spec.kind(),
                    message: format!("could not start the grammar compiler's thread: {e}"),
                })?
                .join()
                .unwrap_or_else(|_| {
                    Err(ConstrainError::Invalid {
                        source_name: source.to_owned(),
                        kind: spec.kind(),
                        message: "the grammar compiler failed".into(),
                    })
                })
        })
    }

    fn compile(&self, spec: &ConstraintSpec, source: &str) -> Result<Constraint, ConstrainError> {
        let grammar = spec.grammar(source)?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ConstrainError::Invalid {
                source_name: source.to_owned(),
                kind: spec.kind(),
                message: format!("{e:#}"),
            })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(message) = matcher.get_error() {
            return Err(ConstrainError::Invalid {
                source_name: source.to_owned(),
                kind: spec.kind(),
                message,
            });
        }
        Ok(Constraint {
            matcher,
            mask_nanos: Vec::new(),
            forced: 0,
        })
    }
}

/// The stack of the thread a grammar compiles on.
const COMPILE_STACK_BYTES: usize = 256 << 20;

/// One sequence's constraint state: masks the logits, advances with each appended token.
pub struct Constraint {
    matcher: Matcher,
    /// Time of each mask, in nanoseconds.
    mask_nanos: Vec<u64>,
    forced: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// Whether the output so far could end here (an end-of-generation token is allowed).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}

impl LogitsConstraint for Constraint {
    fn mask(&mut self, logits: &mut [f32]) -> Result<Option<u32>, ConstraintError> {
        let started = Instant::now();
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstrainError::Engine(format!("{e:#}")))?;
        let words = allowed.as_slice();
        let mut count = 0usize;
        let mut last = 0u32;
        for (i, chunk) in logits.chunks_mut(32).enumerate() {
            let word = words.get(i).copied().unwrap_or(0);
            if word == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (bit, logit) in chunk.iter_mut().enumerate() {
                if word >> bit & 1 == 1 {
                    count += 1;
                    last = (i * 32 + bit) as u32;
                } else {
                    *logit = f32::NEG_INFINITY;
                }
            }
        }
        self.mask_nanos.push(started.elapsed().as_nanos() as u64);
        if count == 0 {
            return Err(Box::new(ConstrainError::Engine(
                "no token of the model's vocabulary can continue the output".into(),
            )));
        }
        if count == 1 {
            self.forced += 1;
            return Ok(Some(last));
        }
        Ok(None)
    }

    fn advance(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.matcher.consume_token(token).map_err(|e| {
            Box::new(ConstrainError::Rejected {
                token,
                message: format!("{e:#}"),
            }) as ConstraintError
        })
    }

    fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn stats(&self) -> ConstraintStats {
        let mut sorted = self.mask_nanos.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            sorted
                .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
                .map_or(Duration::ZERO, |&n| Duration::from_nanos(n))
        };
        ConstraintStats {
            masks: sorted.len(),
            forced: self.forced,
            mask_total: Duration::from_nanos(sorted.iter().sum()),
            mask_p50: at(0.5),
            mask_p99: at(0.99),
        }
    }
}
