//! Beam search with Hugging Face `transformers` semantics.
//!
//! Each step extends every live beam by its most likely tokens, ranks all candidates by their
//! summed log-probability and keeps the `num_beams` best that do not end the sequence. A
//! candidate ending in an end-of-generation or stop token, among the `num_beams` best, becomes a
//! finished hypothesis scored `sum_logprob / generated_len ^ length_penalty` (the stop token
//! counts in the length and in the sum); at most `num_beams` hypotheses are kept. When the
//! length limit is reached the live beams are finished too. [`EarlyStopping`] says when the
//! search may end before that.
//!
//! The prompt is run through the model once: every beam's cache is a [`Session::fork`] of it,
//! and a beam that several children continue is forked rather than re-run. Each step runs one
//! single-token forward pass per live beam.
//!
//! Log-probabilities are those of the raw logits (no sampling processor applies). Stop strings
//! and `top_logprobs` of the [`GenerationConfig`] are not used; its stop tokens,
//! end-of-generation tokens, `max_new_tokens` and `max_time` are.

use std::str::FromStr;
use std::time::Instant;

use crate::config::GenerationConfig;
use crate::decode::{StreamDecoder, TokenDecoder};
use crate::error::GenerateError;
use crate::generator::PROMPT_CONTEXT_TOKENS;
use crate::model::LanguageModel;
use crate::outcome::Timings;
use crate::session::Session;
use crate::stop::{FinishReason, StopMatch};
use kindle_sampling::logprobs::{log_sum_exp, top_n_logprobs};

/// When beam search may stop before the length limit (`transformers`' `early_stopping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EarlyStopping {
    /// `true`: as soon as `num_beams` hypotheses are finished.
    Immediate,
    /// `false` (the default): when no live beam can beat the worst kept hypothesis, judging
    /// by the best live score divided by the *current* length to the power `length_penalty`
    /// (a heuristic: with a positive penalty a longer sequence could still win).
    #[default]
    Heuristic,
    /// `"never"`: only when no live beam can beat the worst kept hypothesis even at the
    /// longest length allowed (exact for positive `length_penalty`).
    Never,
}

impl FromStr for EarlyStopping {
    type Err = String;

    /// `true`, `false` or `never` (as on the command line of `transformers`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "true" => Ok(EarlyStopping::Immediate),
            "false" => Ok(EarlyStopping::Heuristic),
            "never" => Ok(EarlyStopping::Never),
            _ => Err(format!("expected true, false or never, got {s:?}")),
        }
    }
}

/// Beam-search settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeamConfig {
    /// Beams kept per step (at least 1).
    pub num_beams: usize,
    /// Finished sequences returned, best first (1 to `num_beams`).
    pub num_return_sequences: usize,
    /// Exponent of the length in the score `sum_logprob / len ^ length_penalty`: above 0
    /// favours longer sequences (log-probabilities are negative), below 0 shorter ones.
    pub length_penalty: f32,
    /// When to stop before the length limit.
    pub early_stopping: EarlyStopping,
}

impl Default for BeamConfig {
    /// 4 beams, 1 sequence, length penalty 1, [`EarlyStopping::Heuristic`].
    fn default() -> Self {
        BeamConfig {
            num_beams: 4,
            num_return_sequences: 1,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::Heuristic,
        }
    }
}

/// One finished sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamSequence {
    /// The generated tokens, the final stop token included.
    pub tokens: Vec<u32>,
    /// Their text (the stop token's text left out).
    pub text: String,
    /// `sum_logprob / tokens.len() ^ length_penalty`: what the ranking uses.
    pub score: f64,
    /// Sum of the tokens' log-probabilities.
    pub sum_logprob: f64,
    /// [`FinishReason::Stop`] on a stop token, else `Length` (or `Time`).
    pub finish_reason: FinishReason,
    /// The stop token, with [`FinishReason::Stop`].
    pub stop: Option<StopMatch>,
}

/// The result of [`beam_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct BeamOutput {
    /// Up to `num_return_sequences` sequences, best score first.
    pub sequences: Vec<BeamSequence>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// `prefill`: the prompt up to the first step's candidates; `decode`: the rest.
    /// `decode_tokens` counts the single-token forward passes (one per live beam per step).
    pub timings: Timings,
}

struct Beam<M: LanguageModel> {
    session: Session<M>,
    tokens: Vec<u32>,
    sum: f64,
    logits: Vec<f32>,
}

struct Hypothesis {
    tokens: Vec<u32>,
    sum: f64,
    score: f64,
    finish_reason: FinishReason,
    stop: Option<StopMatch>,
}

/// Finished hypotheses, at most `capacity`, with `transformers`' `BeamHypotheses` rules.
struct Hypotheses {
    capacity: usize,
    length_penalty: f64,
    list: Vec<Hypothesis>,
}

impl Hypotheses {
    fn score(&self, sum: f64, len: usize) -> f64 {
        sum / (len as f64).powf(self.length_penalty)
    }

    fn worst(&self) -> f64 {
        self.list
            .iter()
            .map(|h| h.score)
            .fold(f64::INFINITY, f64::min)
    }

    fn add(&mut self, tokens: Vec<u32>, sum: f64, reason: FinishReason, stop: Option<StopMatch>) {
        let score = self.score(sum, tokens.len());
        if self.list.len() < self.capacity || score > self.worst() {
            self.list.push(Hypothesis {
                tokens,
                sum,
                score,
                finish_reason: reason,
                stop,
            });
            if self.list.len() > self.capacity {
                let (worst, _) = self
                    .list
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.score.total_cmp(&b.1.score))
                    .expect("not empty");
                self.list.remove(worst);
            }
        }
    }

    /// Whether the search is over, given the best candidate sum of this step at generated
    /// length `len` and the longest length allowed.
    fn is_done(&self, mode: EarlyStopping, best_sum: f64, len: usize, max_len: usize) -> bool {
        if self.list.len() < self.capacity {
            return false;
        }
        let reachable = match mode {
            EarlyStopping::Immediate => return true,
            EarlyStopping::Heuristic => self.score(best_sum, len),
            EarlyStopping::Never if self.length_penalty > 0.0 => self.score(best_sum, max_len),
            EarlyStopping::Never => self.score(best_sum, len),
        };
        self.worst() >= reachable
    }
}

/// Beam search from `prompt`.
///
/// `session` is prefilled with the prompt (all but its last token, reusing a common prefix as
/// usual) and keeps it afterwards; the beams work on forks of it. The length limit is
/// `max_new_tokens` and the end of the usable context, whichever comes first.
///
/// Errors: [`GenerateError::InvalidBeamConfig`], [`GenerateError::EmptyPrompt`],
/// [`GenerateError::PromptTooLong`], [`GenerateError::TokenOutOfVocab`], a model or decoder
/// error.
pub fn beam_search<M: LanguageModel, D: TokenDecoder + ?Sized>(
    model: &M,
    session: &mut Session<M>,
    prompt: &[u32],
    decoder: &D,
    config: &GenerationConfig,
    beam: &BeamConfig,
) -> Result<BeamOutput, GenerateError> {
    if beam.num_beams == 0 {
        return Err(GenerateError::InvalidBeamConfig(
            "num_beams must be at least 1".into(),
        ));
    }
    if beam.num_return_sequences == 0 || beam.num_return_sequences > beam.num_beams {
        return Err(GenerateError::InvalidBeamConfig(format!(
            "num_return_sequences must be between 1 and num_beams ({}), got {}",
            beam.num_beams, beam.num_return_sequences
        )));
    }
    if !beam.length_penalty.is_finite() {
        return Err(GenerateError::InvalidBeamConfig(format!(
            "length_penalty must be finite, got {}",
            beam.length_penalty
        )));
    }
    let Some((&last, head)) = prompt.split_last() else {
        return Err(GenerateError::EmptyPrompt);
    };
    let t0 = Instant::now();
    let limit = session.context_length(model);
    if prompt.len() > limit {
        return Err(GenerateError::PromptTooLong {
            prompt_tokens: prompt.len(),
            context_length: limit,
        });
    }
    crate::error::check_vocab(prompt, model.vocab_size())?;
    let stop = &config.stop;
    let max_new = stop
        .max_new_tokens
        .unwrap_or(usize::MAX)
        .min(limit - prompt.len());
    let mut timings = Timings::default();
    let mut hyps = Hypotheses {
        capacity: beam.num_beams,
        length_penalty: f64::from(beam.length_penalty),
        list: Vec::new(),
    };
    if max_new > 0 {
        timings.prefill_tokens = session.prefill(model, head)? + 1;
        let mut root = session.fork();
        let logits = root.forward_last(model, &[last])?;
        let mut beams = vec![Beam {
            session: root,
            tokens: Vec::new(),
            sum: 0.0,
            logits,
        }];
        let mut decode_start = None;
        loop {
            let len = beams[0].tokens.len() + 1;
            let candidates = candidates(&beams, 2 * beam.num_beams);
            let Some(best_sum) = candidates.first().map(|c| c.0) else {
                break; // every token masked
            };
            let mut next = Vec::with_capacity(beam.num_beams);
            for (rank, &(sum, parent, id)) in candidates.iter().enumerate() {
                let matched = if stop.eog_token_ids.contains(&id) {
                    Some(StopMatch::Eog(id))
                } else if stop.stop_token_ids.contains(&id) {
                    Some(StopMatch::Token(id))
                } else {
                    None
                };
                if let Some(matched) = matched {
                    if rank < beam.num_beams {
                        let mut tokens = beams[parent].tokens.clone();
                        tokens.push(id);
                        hyps.add(tokens, sum, FinishReason::Stop, Some(matched));
                    }
                } else {
                    next.push((sum, parent, id));
                    if next.len() == beam.num_beams {
                        break;
                    }
                }
            }
            if decode_start.is_none() {
                timings.prefill = t0.elapsed();
                decode_start = Some(Instant::now());
            }
            let done = hyps.is_done(beam.early_stopping, best_sum, len, max_new);
            let time_out = stop.max_time.is_some_and(|max| t0.elapsed() >= max);
            if done || next.is_empty() {
                break;
            }
            if len >= max_new || time_out {
                let reason = if len >= max_new {
                    FinishReason::Length
                } else {
                    FinishReason::Time
                };
                for &(sum, parent, id) in &next {
                    let mut tokens = beams[parent].tokens.clone();
                    tokens.push(id);
                    hyps.add(tokens, sum, reason, None);
                }
                break;
            }
            beams = advance(model, beams, &next)?;
            timings.decode_tokens += beams.len();
        }
        if let Some(start) = decode_start {
            timings.decode = start.elapsed();
        }
    }

    let mut list = hyps.list;
    list.sort_by(|a, b| b.score.total_cmp(&a.score));
    list.truncate(beam.num_return_sequences);
    let context = &prompt[prompt.len().saturating_sub(PROMPT_CONTEXT_TOKENS)..];
    let sequences = list
        .into_iter()
        .map(|h| {
            let text_ids = match h.stop {
                Some(_) => &h.tokens[..h.tokens.len() - 1],
                None => &h.tokens[..],
            };
            let text = decode_text(decoder, context, text_ids)?;
            Ok(BeamSequence {
                text,
                score: h.score,
                sum_logprob: h.sum,
                finish_reason: h.finish_reason,
                stop: h.stop,
                tokens: h.tokens,
            })
        })
        .collect::<Result<Vec<_>, GenerateError>>()?;
    Ok(BeamOutput {
        sequences,
        prompt_tokens: prompt.len(),
        timings,
    })
}

/// The `per_beam` best continuations of every beam, as `(sum, beam, token)`, best first (ties
/// to the lower beam, then the lower token); masked (`-inf`) and NaN ones left out.
fn candidates<M: LanguageModel>(beams: &[Beam<M>], per_beam: usize) -> Vec<(f64, usize, u32)> {
    let mut all = Vec::with_capacity(beams.len() * per_beam);
    for (b, beam) in beams.iter().enumerate() {
        let lse = log_sum_exp(&beam.logits);
        for (id, lp) in top_n_logprobs(&beam.logits, lse, per_beam) {
            let sum = beam.sum + f64::from(lp);
            if sum > f64::NEG_INFINITY {
                all.push((sum, b, id));
            }
        }
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    all
}

/// The next beams: each `(sum, parent, token)` continues its parent's cache (forked when the
/// parent has several children, moved for the last one) and runs its token.
fn advance<M: LanguageModel>(
    model: &M,
    beams: Vec<Beam<M>>,
    next: &[(f64, usize, u32)],
) -> Result<Vec<Beam<M>>, GenerateError> {
    let mut children = vec![0usize; beams.len()];
    for &(_, parent, _) in next {
        children[parent] += 1;
    }
    let mut parents: Vec<Option<Beam<M>>> = beams.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(next.len());
    for &(sum, parent, id) in next {
        children[parent] -= 1;
        let (mut session, mut tokens) = if children[parent] == 0 {
            let beam = parents[parent]
                .take()
                .expect("a parent is moved once, last");
            (beam.session, beam.tokens)
        } else {
            let beam = parents[parent].as_ref().expect("parent still held");
            (beam.session.fork(), beam.tokens.clone())
        };
        let logits = session.forward_last(model, &[id])?;
        tokens.push(id);
        out.push(Beam {
            session,
            tokens,
            sum,
            logits,
        });
    }
    Ok(out)
}

/// The text of `ids` after `context` (the last prompt tokens, not emitted).
pub(crate) fn decode_text<D: TokenDecoder + ?Sized>(
    decoder: &D,
    context: &[u32],
    ids: &[u32],
) -> Result<String, GenerateError> {
    let mut stream =
        StreamDecoder::with_context(decoder, context).map_err(GenerateError::decode)?;
    let mut text = String::new();
    for &id in ids {
        text.push_str(&stream.step(id).map_err(GenerateError::decode)?);
    }
    text.push_str(&stream.flush().map_err(GenerateError::decode)?);
    Ok(text)
}
