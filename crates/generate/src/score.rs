//! Teacher-forced scoring: the log-probability the model gives each next token of a text.

use std::time::{Duration, Instant};

use crate::error::GenerateError;
use crate::error::check_vocab;
use crate::model::LanguageModel;
use crate::session::Session;
use kindle_sampling::logprobs::{argmax, log_sum_exp, top_n_logprobs};

/// How the model scored the token after position `pos`.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenScore {
    /// Position whose logits are scored (0-based); they predict position `pos + 1`.
    pub pos: usize,
    /// The actual next token, `ids[pos + 1]`.
    pub next_token: u32,
    /// Its log-probability (log-softmax of the raw logits at `pos`).
    pub logprob: f32,
    /// The most likely token at `pos` (ties to the lowest id).
    pub argmax: u32,
    /// The `top_n` most likely tokens at `pos`, `(id, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The result of [`score`].
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// One entry per predicted token: positions `0..ids.len() - 1`.
    pub positions: Vec<TokenScore>,
    /// Sum of the log-probabilities (accumulated in `f64`).
    pub total_logprob: f64,
    /// `exp(-mean logprob)`.
    pub perplexity: f64,
    /// Time of the forward pass and the scoring.
    pub elapsed: Duration,
}

impl Score {
    /// Mean log-probability per predicted token.
    pub fn mean_logprob(&self) -> f64 {
        self.total_logprob / self.positions.len() as f64
    }

    /// How many predictions have the actual next token as their argmax.
    pub fn argmax_hits(&self) -> usize {
        self.positions
            .iter()
            .filter(|p| p.argmax == p.next_token)
            .count()
    }
}

/// Score `ids` teacher-forced: one `forward_all` over all of them, then for each position
/// `i < ids.len() - 1` the log-probability of `ids[i + 1]`, the argmax and the `top_n` most
/// likely tokens; plus the perplexity.
///
/// The session is cleared first (every position's logits are needed, so no prefix can be
/// reused) and holds `ids` afterwards.
///
/// Errors: [`GenerateError::TooFewTokens`] under 2 ids, [`GenerateError::PromptTooLong`] beyond
/// the usable context, [`GenerateError::TokenOutOfVocab`], [`GenerateError::Sampling`] for a
/// NaN or `+inf` logit (at the position it scores), or a model error.
pub fn score<M: LanguageModel>(
    model: &M,
    session: &mut Session<M>,
    ids: &[u32],
    top_n: usize,
) -> Result<Score, GenerateError> {
    if ids.len() < 2 {
        return Err(GenerateError::TooFewTokens { tokens: ids.len() });
    }
    let limit = session.context_length(model);
    if ids.len() > limit {
        return Err(GenerateError::PromptTooLong {
            prompt_tokens: ids.len(),
            context_length: limit,
        });
    }
    let vocab = model.vocab_size();
    check_vocab(ids, vocab)?;
    let t0 = Instant::now();
    session.clear();
    let logits = session.forward_all(model, ids)?;
    let mut positions = Vec::with_capacity(ids.len() - 1);
    let mut total = 0f64;
    for (pos, row) in logits.chunks_exact(vocab).take(ids.len() - 1).enumerate() {
        // A NaN or `+inf` logit (a broken model file) has no log-softmax: say so, as
        // generation does, rather than report a NaN perplexity.
        if let Some((index, &value)) = row
            .iter()
            .enumerate()
            .find(|(_, v)| v.is_nan() || **v == f32::INFINITY)
        {
            return Err(GenerateError::Sampling {
                step: pos,
                source: kindle_sampling::SamplingError::NonFiniteLogit { index, value },
            });
        }
        let (scored, lp) = scored(row, pos, ids[pos + 1], top_n);
        total += lp;
        positions.push(scored);
    }
    let perplexity = (-total / positions.len() as f64).exp();
    Ok(Score {
        positions,
        total_logprob: total,
        perplexity,
        elapsed: t0.elapsed(),
    })
}

/// How the raw logits `row` of position `pos` score `next_token` (its log-softmax), with the
/// argmax and the `top_n` most likely tokens: one entry of [`score`], for a caller that runs
/// the forward passes itself (a server scoring the prompt it echoes, chunk by chunk).
///
/// `next_token` must be below `row.len()` (it is looked up in the row).
pub fn score_row(row: &[f32], pos: usize, next_token: u32, top_n: usize) -> TokenScore {
    scored(row, pos, next_token, top_n).0
}

/// [`score_row`] and the log-probability in `f64` (what [`score`] sums).
fn scored(row: &[f32], pos: usize, next_token: u32, top_n: usize) -> (TokenScore, f64) {
    let lse = log_sum_exp(row);
    let lp = f64::from(row[next_token as usize]) - lse;
    let score = TokenScore {
        pos,
        next_token,
        logprob: lp as f32,
        argmax: argmax(row).unwrap_or(0),
        top: top_n_logprobs(row, lse, top_n),
    };
    (score, lp)
}
