//! [`Sampler`]: runs the processor chain on a logits row and selects a token.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::SamplingError;
use crate::candidates::{Cand, WorkSet, by_logit_desc};
use crate::config::{Mirostat, SamplerConfig};
use crate::logprobs::{check_row, log_sum_exp, logprob, select_top, top_n_logprobs};
use crate::order::Stage;
use crate::processors::mirostat::{mirostat_v1, mirostat_v2};
use crate::processors::truncation::{min_p, temperature, top_k, top_n_sigma, top_p, typical, xtc};
use crate::processors::{
    apply_logit_bias, apply_no_repeat_ngram, check_id, dry_penalties, penalize, penalty_window,
    suppress_tokens, token_counts,
};
use crate::select::draw;
use crate::trace::Trace;

/// The token history with the prompt boundary, for [`Sampler::sample_history`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History<'a> {
    /// Prompt tokens followed by the tokens generated so far.
    pub tokens: &'a [u32],
    /// How many of `tokens` are the prompt (clamped to `tokens.len()`).
    pub prompt_len: usize,
}

impl<'a> History<'a> {
    /// A history whose first `prompt_len` tokens are the prompt.
    pub fn new(tokens: &'a [u32], prompt_len: usize) -> Self {
        History { tokens, prompt_len }
    }

    /// Number of generated tokens (`tokens.len() - prompt_len`, at least 0).
    pub fn generated(&self) -> usize {
        self.tokens.len().saturating_sub(self.prompt_len)
    }
}

/// The sampled token with log-probabilities (natural log), from [`Sampler::sample_with_logprobs`].
///
/// *Raw* values are the log-softmax of the logits as given (before bias, penalties or any
/// other processing); *processed* values come from the distribution the token was actually
/// drawn from (after truncation and temperature). A token outside the processed distribution
/// has processed logprob `-inf`; under greedy decoding the chosen token has processed logprob
/// 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The chosen token id.
    pub token: u32,
    /// Raw log-probability of `token`.
    pub raw_logprob: f32,
    /// Processed log-probability of `token`.
    pub processed_logprob: f32,
    /// The `n` most likely tokens of the raw distribution, most likely first (ties: lower id).
    pub top_raw: Vec<(u32, f32)>,
    /// The `n` most likely tokens of the processed distribution (fewer if fewer were kept).
    pub top_processed: Vec<(u32, f32)>,
}

impl Sampled {
    fn of(token: u32) -> Self {
        Sampled {
            token,
            raw_logprob: 0.0,
            processed_logprob: 0.0,
            top_raw: Vec::new(),
            top_processed: Vec::new(),
        }
    }
}

/// Picks the next token from a logits row: the configured processor chain, then a selection
/// rule (see [`SamplerConfig`] for the order). Holds the ChaCha8 stream and the mirostat state,
/// so use one sampler per request.
///
/// After a call, the `logits` row holds intermediate values: the row-level processors (bias,
/// min-tokens, n-gram ban, penalties, DRY) are applied to it in place, while truncation and
/// temperature work on an internal candidate list. Treat the row as scratch.
#[derive(Debug, Clone)]
pub struct Sampler {
    config: SamplerConfig,
    seed: u64,
    rng: ChaCha8Rng,
    mu: f64,
    prompt_len: usize,
    list: Vec<Cand>,
    weights: Vec<f64>,
    scratch: Vec<u32>,
    raw: Vec<f32>,
    /// Set by [`Sampler::sample_traced`] for one call: the stages' distributions go there.
    trace: Option<Trace>,
}

impl Sampler {
    /// Greedy decoding: the argmax of the raw logits (ties go to the lowest id).
    pub fn greedy() -> Self {
        Self::from_validated(SamplerConfig::greedy())
    }

    /// Same as [`SamplerConfig::build`].
    pub fn new(config: SamplerConfig) -> Result<Self, SamplingError> {
        config.build()
    }

    pub(crate) fn from_validated(config: SamplerConfig) -> Self {
        let seed = config.seed.unwrap_or_else(rand::random::<u64>);
        Sampler {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            mu: initial_mu(&config),
            config,
            prompt_len: 0,
            list: Vec::new(),
            weights: Vec::new(),
            scratch: Vec::new(),
            raw: Vec::new(),
            trace: None,
        }
    }

    /// The seed of the random stream: the configured one, or the one drawn from OS entropy.
    /// Put it in [`SamplerConfig::seed`] to replay the run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The configuration this sampler was built from.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Declares that the first `n` tokens of the histories passed to [`Sampler::sample`] and
    /// [`Sampler::sample_with_logprobs`] are the prompt (default 0: the whole history counts as
    /// output). Used by [`crate::PenaltyScope::OutputOnly`] and `min_tokens`.
    pub fn set_prompt_len(&mut self, n: usize) {
        self.prompt_len = n;
    }

    /// The prompt length set with [`Sampler::set_prompt_len`].
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Mirostat's current `mu` (target surprise state), if mirostat is on.
    pub fn mirostat_mu(&self) -> Option<f64> {
        (self.config.mirostat != Mirostat::Off).then_some(self.mu)
    }

    /// The random stream, for [`Sampler::draw_from`] and [`Sampler::uniform`].
    pub(crate) fn rng_mut(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// Restarts the random stream from the seed and resets the mirostat state: the sampler
    /// then behaves as freshly built.
    pub fn reset(&mut self) {
        self.rng = ChaCha8Rng::seed_from_u64(self.seed);
        self.mu = initial_mu(&self.config);
    }

    /// Process `logits` in place (with `history`, the tokens so far) and pick one token id.
    ///
    /// The prompt boundary is the one set with [`Sampler::set_prompt_len`].
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32, SamplingError> {
        let prompt_len = self.prompt_len;
        Ok(self.run(logits, history, prompt_len, None, None)?.token)
    }

    /// Like [`Sampler::sample`], with the prompt boundary given explicitly.
    pub fn sample_history(
        &mut self,
        logits: &mut [f32],
        history: History<'_>,
    ) -> Result<u32, SamplingError> {
        Ok(self
            .run(logits, history.tokens, history.prompt_len, None, None)?
            .token)
    }

    /// Like [`Sampler::sample`], also returning log-probabilities of the chosen token and of the
    /// `n` most likely tokens, raw and processed (see [`Sampled`]).
    pub fn sample_with_logprobs(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        n: usize,
    ) -> Result<Sampled, SamplingError> {
        let prompt_len = self.prompt_len;
        self.run(logits, history, prompt_len, Some(n), None)
    }

    /// [`Sampler::sample_with_logprobs`] with the prompt boundary given explicitly.
    pub fn sample_history_with_logprobs(
        &mut self,
        logits: &mut [f32],
        history: History<'_>,
        n: usize,
    ) -> Result<Sampled, SamplingError> {
        self.run(logits, history.tokens, history.prompt_len, Some(n), None)
    }

    /// [`Sampler::sample_history_with_logprobs`], also recording what each stage of the chain
    /// did ([`Trace`]: the distribution after every stage, the last one being what the
    /// selection drew from). The same token as the untraced call (the trace draws no random
    /// numbers). Mirostat, whose selection truncates by itself, is not traced: an
    /// [`SamplingError::InvalidParameter`] naming `mirostat`.
    pub fn sample_traced(
        &mut self,
        logits: &mut [f32],
        history: History<'_>,
        n: usize,
    ) -> Result<(Sampled, Trace), SamplingError> {
        if self.config.mirostat != Mirostat::Off && self.config.temperature != 0.0 {
            return Err(SamplingError::InvalidParameter {
                name: "mirostat",
                value: "on".into(),
                expected: "off to trace the chain (mirostat's truncation happens in its selection)",
            });
        }
        self.trace = Some(Trace::default());
        let sampled = self.run(logits, history.tokens, history.prompt_len, Some(n), None);
        let trace = self.trace.take().unwrap_or_default();
        Ok((sampled?, trace))
    }

    /// The chain and the selection; with `dist`, the chain only: the processed distribution
    /// goes there (see [`Sampler::processed_distribution`]) and the returned token is 0.
    pub(crate) fn run(
        &mut self,
        logits: &mut [f32],
        tokens: &[u32],
        prompt_len: usize,
        n_logprobs: Option<usize>,
        dist: Option<&mut Vec<f64>>,
    ) -> Result<Sampled, SamplingError> {
        check_row(logits)?;
        if let Some(trace) = &mut self.trace {
            trace.record("raw", in_play(logits));
        }
        if n_logprobs.is_some() {
            self.raw.clear();
            self.raw.extend_from_slice(logits);
        }
        let cfg = &self.config;
        let vocab = logits.len();
        let prompt_len = prompt_len.min(tokens.len());

        // 1. Always first: logit bias, min-tokens, no-repeat-n-gram.
        apply_logit_bias(logits, &cfg.logit_bias)?;
        let mut masked_some = cfg.logit_bias.iter().any(|b| b.1 == f32::NEG_INFINITY);
        if cfg.min_tokens > 0 && tokens.len() - prompt_len < cfg.min_tokens {
            suppress_tokens(logits, &cfg.eog_ids)?;
            masked_some = true;
        }
        if cfg.no_repeat_ngram_size > 0 {
            apply_no_repeat_ngram(logits, tokens, cfg.no_repeat_ngram_size)?;
            masked_some = true;
        }
        if masked_some && !logits.iter().any(|&l| l > f32::NEG_INFINITY) {
            return Err(SamplingError::AllMasked);
        }
        if let Some(trace) = &mut self.trace
            && (!cfg.logit_bias.is_empty() || cfg.min_tokens > 0 || cfg.no_repeat_ngram_size > 0)
        {
            trace.record("masks", in_play(logits));
        }

        // 2. The configurable chain.
        let mut ws = WorkSet::new(logits, &mut self.list);
        let greedy = cfg.temperature == 0.0;
        let mirostat = cfg.mirostat != Mirostat::Off && !greedy;
        for &stage in &cfg.order {
            if mirostat && stage.is_truncation() {
                continue;
            }
            match stage {
                Stage::Penalties if cfg.penalties_enabled() => {
                    let window =
                        penalty_window(tokens, prompt_len, cfg.penalty_scope, cfg.penalty_last_n);
                    let counts = token_counts(window, &mut self.scratch);
                    for &(id, _) in &counts {
                        check_id("history", id, vocab)?;
                    }
                    let (r, f, p) = (
                        cfg.repetition_penalty,
                        cfg.frequency_penalty,
                        cfg.presence_penalty,
                    );
                    ws.apply_sparse(&counts, |l, &c| penalize(l, c, r, f, p));
                }
                Stage::Dry if cfg.dry.is_enabled() => {
                    let penalties = dry_penalties(tokens, &cfg.dry);
                    for &(id, _) in &penalties {
                        check_id("history", id, vocab)?;
                    }
                    ws.apply_sparse(&penalties, |l, &p| l - p);
                }
                Stage::Penalties | Stage::Dry => {}
                Stage::TopNSigma => top_n_sigma(&mut ws, cfg.top_n_sigma),
                Stage::TopK => top_k(&mut ws, cfg.top_k),
                Stage::TypicalP => typical(&mut ws, cfg.typical_p),
                Stage::TopP => top_p(&mut ws, cfg.top_p),
                Stage::MinP => min_p(&mut ws, cfg.min_p),
                Stage::Xtc => xtc(
                    &mut ws,
                    &mut self.rng,
                    cfg.xtc_probability,
                    cfg.xtc_threshold,
                ),
                Stage::Temperature => temperature(&mut ws, cfg.temperature),
            }
            if let Some(trace) = &mut self.trace {
                let mut cands = Vec::new();
                ws.for_each(|id, logit| cands.push((id, logit)));
                trace.record(stage.name(), cands);
            }
        }

        if let Some(out) = dist {
            crate::select::fill(&mut ws, greedy, mirostat, out)?;
            return Ok(Sampled::of(0));
        }

        // 3. Selection.
        let token = if greedy {
            let best = ws.collapse_to_best()?.id;
            if let Some(trace) = &mut self.trace {
                trace.record("greedy", vec![(best, 0.0)]);
            }
            best
        } else {
            match cfg.mirostat {
                Mirostat::V1 { tau, eta } => mirostat_v1(
                    &mut ws,
                    &mut self.rng,
                    &mut self.weights,
                    &mut self.mu,
                    tau,
                    eta,
                    vocab,
                )?,
                Mirostat::V2 { tau, eta } => mirostat_v2(
                    &mut ws,
                    &mut self.rng,
                    &mut self.weights,
                    &mut self.mu,
                    tau,
                    eta,
                )?,
                Mirostat::Off => draw(&mut ws, &mut self.rng, &mut self.weights)?.0,
            }
        };

        let mut out = Sampled::of(token);
        if let Some(n) = n_logprobs {
            let (max, lnz) = ws.log_normalizer().ok_or(SamplingError::AllMasked)?;
            let mut chosen = f32::NEG_INFINITY;
            ws.for_each(|id, l| {
                if id == token {
                    chosen = l;
                }
            });
            out.processed_logprob = (chosen as f64 - max - lnz) as f32;
            let mut kept = Vec::new();
            ws.for_each(|id, logit| kept.push(Cand { id, logit }));
            out.top_processed = top_n(kept, n, max + lnz);

            // The raw distribution is a whole row: the shared row helpers, as the generation
            // loop uses them. Masked tokens (`-inf`, ranked after every finite one) are left out.
            let lse = log_sum_exp(&self.raw);
            out.raw_logprob = logprob(&self.raw, lse, token);
            out.top_raw = top_n_logprobs(&self.raw, lse, n);
            out.top_raw
                .retain(|&(id, _)| self.raw[id as usize] > f32::NEG_INFINITY);
        }
        Ok(out)
    }
}

/// Every token of a row still in play (not `-inf`), `(id, logit)`.
fn in_play(row: &[f32]) -> Vec<(u32, f32)> {
    row.iter()
        .enumerate()
        .filter(|(_, l)| **l > f32::NEG_INFINITY)
        .map(|(i, &l)| (i as u32, l))
        .collect()
}

/// The `n` best of `cands`, as `(id, logit - log_norm)`, best first.
///
/// The processed distribution is a candidate list (the chain may have truncated the row), not
/// a row, so it takes [`Cand`]s and the candidate order; the selection is the shared one.
fn top_n(mut cands: Vec<Cand>, n: usize, log_norm: f64) -> Vec<(u32, f32)> {
    select_top(&mut cands, n, by_logit_desc);
    cands
        .into_iter()
        .map(|c| (c.id, (c.logit as f64 - log_norm) as f32))
        .collect()
}

fn initial_mu(config: &SamplerConfig) -> f64 {
    match config.mirostat {
        Mirostat::V1 { tau, .. } | Mirostat::V2 { tau, .. } => 2.0 * tau as f64,
        Mirostat::Off => 0.0,
    }
}

impl SamplerConfig {
    /// Validates the configuration and builds the [`Sampler`].
    pub fn build(self) -> Result<Sampler, SamplingError> {
        self.validate()?;
        Ok(Sampler::from_validated(self))
    }
}
