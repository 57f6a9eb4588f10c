//! The generation loop: prefill, then sample / detokenise / check stops / feed back, one token
//! per iterator step.

use std::collections::VecDeque;
use std::iter::FusedIterator;
use std::time::{Duration, Instant};

use kindle_sampling::{History, LogitsConstraint, Mirostat, Sampler, TraceSummary};

use crate::config::{GenerationConfig, StopConditions};
use crate::decode::{StreamDecoder, TokenDecoder};
use crate::error::{GenerateError, check_vocab};
use crate::model::LanguageModel;
use crate::outcome::{Event, Summary, Timings};
use crate::session::Session;
use crate::speculative::{SpecRef, Speculator};
use crate::stop::{FinishReason, StopMatch, StopStringMatcher};
use kindle_sampling::logprobs::{log_sum_exp, logprob, top_n_logprobs};

/// How many prompt tokens the detokeniser sees as context before the first generated token
/// (never emitted), so the first word gets the spacing it has in context.
pub const PROMPT_CONTEXT_TOKENS: usize = 4;

/// The next step of a sequence ([`Sequence::plan`](crate::Sequence::plan)).
#[derive(Debug)]
pub enum Step {
    /// Feed these tokens to the model and hand their last position's logits to `complete`.
    Feed(Vec<u32>),
    /// Yield this event; no model work.
    Emit(Event),
    /// Nothing more.
    End,
}

enum State {
    Start,
    Decode(u32),
    Finished {
        reason: FinishReason,
        stop: Option<StopMatch>,
    },
    Done,
}

/// The generation loop as an iterator of [`Event`]s: each `next()` runs one forward pass (the
/// first one is the prefill of the prompt) and yields the sampled token, then a final
/// [`Event::Done`] with the [`Summary`]. After an error or `Done` it yields `None`.
///
/// Prefill: the prompt is compared with the session's tokens; the common prefix stays in the
/// cache, the rest of the cache is rolled back, and only the new prompt tokens are fed, in one
/// `forward_last` call (at least one token is always fed, to get logits). Then each step feeds
/// the previous token alone.
///
/// Context: `prompt + generated` never exceeds the usable context `min(cache capacity, model
/// context length)`; reaching it ends with [`FinishReason::Length`]. A prompt that fills the
/// whole context finishes at once with `Length` and no token. With a sliding cache
/// ([`Session::slides`]) there is no such limit: the prompt must fit the context, and then the
/// cache makes room as generation goes on; only `max_new_tokens`, stops and time end it.
///
/// Sampling: the sampler gets the raw logits row and, as history, the prompt plus the tokens
/// generated so far (exactly the session's tokens at that moment). Where the sampler needs to
/// know where the prompt ends (penalty scope, minimum new tokens), setting that up for this
/// prompt is the caller's job. The logprobs in the events are computed from the raw row before
/// the sampler modifies it.
///
/// Dropping the generator early is fine: the session then holds the prompt and the tokens fed
/// so far.
pub struct Generator<'a, M: LanguageModel, D: TokenDecoder + ?Sized> {
    model: &'a M,
    session: &'a mut Session<M>,
    sampler: &'a mut Sampler,
    core: Core<&'a D>,
    spec: Option<SpecRun<'a>>,
}

impl<'a, M: LanguageModel, D: TokenDecoder + ?Sized> Generator<'a, M, D> {
    /// Check the prompt and set up; no model work happens before the first `next()`.
    ///
    /// `prompt` is the whole token sequence to continue (for a chat, the whole conversation so
    /// far); the part already in `session` is reused.
    ///
    /// Errors: [`GenerateError::EmptyPrompt`], [`GenerateError::PromptTooLong`] (more tokens
    /// than the usable context), [`GenerateError::TokenOutOfVocab`], or a decoder error.
    pub fn new(
        model: &'a M,
        session: &'a mut Session<M>,
        prompt: &[u32],
        sampler: &'a mut Sampler,
        decoder: &'a D,
        config: &GenerationConfig,
    ) -> Result<Self, GenerateError> {
        let core = Core::new(model, session, prompt, decoder, config)?;
        Ok(Generator {
            model,
            session,
            sampler,
            core,
            spec: None,
        })
    }

    /// Decode speculatively with `speculator`'s drafter (see [`Speculator`]): the output
    /// distribution stays this sampler's, greedy output stays token for token the same, and
    /// the events, stops, limits and logprobs (the target's) are those of a plain run.
    ///
    /// Errors: [`GenerateError::InvalidDraft`] for a mirostat sampler (no fixed distribution
    /// to verify against), and for a sampled one where the speculator drops short drafts of
    /// a drafter whose length depends on its draws ([`Speculator::with_draft_min`]).
    pub fn with_speculator(
        mut self,
        speculator: &'a mut Speculator,
    ) -> Result<Self, GenerateError> {
        SpecRun::check_sampler(self.sampler, speculator)?;
        self.spec = Some(SpecRun::new(speculator));
        Ok(self)
    }

    /// Run to the end, calling `on_token` with each [`Event::Token`], and return the summary.
    pub fn run(self, mut on_token: impl FnMut(&Event)) -> Result<Summary, GenerateError> {
        for event in self {
            match event? {
                Event::Done(summary) => return Ok(summary),
                token => on_token(&token),
            }
        }
        unreachable!("a generator ends with Done or an error")
    }

    /// The text output so far (what the events have streamed).
    pub fn text(&self) -> &str {
        &self.core.text
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.core.generated
    }

    /// What the next step needs: tokens to feed to the model (their last position's logits then
    /// go to [`complete`](Self::complete)), or an event that needs no model work.
    pub(crate) fn plan(&mut self) -> Step {
        self.core.plan(self.session)
    }

    /// Finish the step [`plan`](Self::plan) asked for, with the logits of the fed tokens' last
    /// position (or the error of the forward pass).
    pub(crate) fn complete(
        &mut self,
        logits: Result<Vec<f32>, GenerateError>,
    ) -> Result<Event, GenerateError> {
        self.core.complete(logits, self.sampler, self.session)
    }

    /// What [`complete`](Self::complete) works with (the state, the sampler and the session's
    /// tokens), for a `Completion` that may run on another thread (a batch's steps,
    /// `Completion::run_all`).
    pub(crate) fn completion_parts(&mut self) -> (&mut Core<&'a D>, &mut Sampler, &[u32]) {
        (&mut self.core, self.sampler, self.session.tokens())
    }

    pub(crate) fn session_mut(&mut self) -> &mut Session<M> {
        self.session
    }

    /// Restrict the output to what `constraint` allows (masked before sampling, advanced after;
    /// the generation stops with [`FinishReason::Stop`] once it is complete).
    pub fn with_constraint(mut self, constraint: Box<dyn LogitsConstraint>) -> Self {
        self.core.constraint = Some(constraint);
        self
    }
}

/// The state of one generation apart from the model, session and sampler it runs with:
/// detokeniser, stop conditions, generated tokens, text, timings. [`Generator`] borrows those
/// three; [`Sequence`](crate::Sequence) owns them.
pub(crate) struct Core<D: TokenDecoder> {
    stream: StreamDecoder<D>,
    stops: StopStringMatcher,
    conditions: StopConditions,
    top_logprobs: usize,
    prompt: Vec<u32>,
    /// The usable context; `usize::MAX` with a sliding cache.
    limit: usize,
    state: State,
    generated: Vec<u32>,
    text: String,
    raw: Vec<f32>,
    started: Option<Instant>,
    timings: Timings,
    /// The step in flight: whether it is the prefill, and when it started.
    pending: Option<(bool, Instant)>,
    /// The output constraint, if any.
    pub(crate) constraint: Option<Box<dyn LogitsConstraint>>,
    /// Record a [`TraceSummary`] of each sampled token with this many candidates.
    pub(crate) trace_top: Option<usize>,
    /// The summary of the last sampled token (none for a forced one).
    pub(crate) last_trace: Option<TraceSummary>,
}

impl<D: TokenDecoder> Core<D> {
    /// See [`Generator::new`].
    pub(crate) fn new<M: LanguageModel>(
        model: &M,
        session: &Session<M>,
        prompt: &[u32],
        decoder: D,
        config: &GenerationConfig,
    ) -> Result<Self, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let limit = session.context_length(model);
        if prompt.len() > limit {
            return Err(GenerateError::PromptTooLong {
                prompt_tokens: prompt.len(),
                context_length: limit,
            });
        }
        check_vocab(prompt, model.vocab_size())?;
        let limit = if session.slides() { usize::MAX } else { limit };
        let context = &prompt[prompt.len().saturating_sub(PROMPT_CONTEXT_TOKENS)..];
        let stream =
            StreamDecoder::with_context(decoder, context).map_err(GenerateError::decode)?;
        let stop = &config.stop;
        Ok(Core {
            stream,
            stops: StopStringMatcher::new(
                stop.stop_strings.iter().cloned(),
                stop.include_stop_str_in_output,
            ),
            conditions: stop.clone(),
            top_logprobs: config.top_logprobs,
            prompt: prompt.to_vec(),
            limit,
            state: State::Start,
            generated: Vec::new(),
            text: String::new(),
            raw: Vec::new(),
            started: None,
            timings: Timings::default(),
            pending: None,
            constraint: None,
            trace_top: None,
            last_trace: None,
        })
    }

    /// The text output so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The tokens generated so far.
    pub(crate) fn tokens(&self) -> &[u32] {
        &self.generated
    }

    /// See [`Generator::plan`]; the prefill reuses what `session` holds of the prompt.
    pub(crate) fn plan<M: LanguageModel>(&mut self, session: &mut Session<M>) -> Step {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Step::End,
            State::Finished { reason, stop } => Step::Emit(Event::Done(self.summary(reason, stop))),
            State::Start => {
                let t0 = Instant::now();
                self.started = Some(t0);
                if self.conditions.max_new_tokens == Some(0) || self.prompt.len() >= self.limit {
                    return Step::Emit(Event::Done(self.summary(FinishReason::Length, None)));
                }
                let reuse = session
                    .common_prefix_len(&self.prompt)
                    .min(self.prompt.len() - 1);
                session.truncate(reuse);
                // A cache that cannot roll back that far starts again (`Session::truncate`).
                let reuse = session.len();
                self.timings.prefill_tokens = self.prompt.len() - reuse;
                self.pending = Some((true, t0));
                Step::Feed(self.prompt[reuse..].to_vec())
            }
            State::Decode(last) => {
                self.pending = Some((false, Instant::now()));
                Step::Feed(vec![last])
            }
        }
    }

    /// See [`Generator::complete`]; `session` holds the tokens fed so far (the sampler's
    /// history).
    pub(crate) fn complete<M: LanguageModel>(
        &mut self,
        logits: Result<Vec<f32>, GenerateError>,
        sampler: &mut Sampler,
        session: &Session<M>,
    ) -> Result<Event, GenerateError> {
        self.complete_after(logits, sampler, session.tokens())
    }

    /// [`complete`](Self::complete) with the session's tokens, `history`.
    pub(crate) fn complete_after(
        &mut self,
        logits: Result<Vec<f32>, GenerateError>,
        sampler: &mut Sampler,
        history: &[u32],
    ) -> Result<Event, GenerateError> {
        let (prefill, t0) = self.pending.take().unwrap_or((false, Instant::now()));
        let event = self.on_logits(logits?, sampler, history);
        if prefill {
            self.timings.prefill = t0.elapsed();
        } else {
            self.timings.decode += t0.elapsed();
        }
        event
    }

    /// The tokens that end the generation when emitted (end-of-generation and stop tokens).
    pub(crate) fn end_tokens(&self) -> Vec<u32> {
        let c = &self.conditions;
        c.eog_token_ids
            .iter()
            .chain(&c.stop_token_ids)
            .copied()
            .collect()
    }

    /// Sample from `logits`, detokenise, check the stop conditions, set the next state.
    fn on_logits(
        &mut self,
        mut logits: Vec<f32>,
        sampler: &mut Sampler,
        history: &[u32],
    ) -> Result<Event, GenerateError> {
        self.raw.clear();
        self.raw.extend_from_slice(&logits);
        let step = self.generated.len();
        let constraint_error = |source| GenerateError::Constraint { step, source };
        let forced = match &mut self.constraint {
            Some(c) => c.mask(&mut logits).map_err(constraint_error)?,
            None => None,
        };
        self.last_trace = None;
        let sampling_error = |source| GenerateError::Sampling { step, source };
        let id = match (forced, self.trace_top) {
            (Some(id), _) => id,
            (None, None) => sampler
                .sample(&mut logits, history)
                .map_err(sampling_error)?,
            (None, Some(top)) => {
                let history = History::new(history, sampler.prompt_len());
                let (sampled, trace) = sampler
                    .sample_traced(&mut logits, history, top)
                    .map_err(sampling_error)?;
                self.last_trace = trace.summary(sampled.token, top);
                sampled.token
            }
        };
        self.emit(id, None)
    }

    /// Emit `id`, chosen from the raw logits `row` (speculative verification, which already
    /// advanced the constraint and says whether it was `complete` after this token).
    pub(crate) fn emit_row(
        &mut self,
        row: &[f32],
        id: u32,
        complete: bool,
    ) -> Result<Event, GenerateError> {
        self.raw.clear();
        self.raw.extend_from_slice(row);
        self.emit(id, Some(complete))
    }

    /// The token to feed next, when the next step is a decode step.
    pub(crate) fn decode_last(&self) -> Option<u32> {
        match self.state {
            State::Decode(last) => Some(last),
            _ => None,
        }
    }

    /// Whether the step in flight is the prompt's.
    pub(crate) fn is_prompt_step(&self) -> bool {
        matches!(self.pending, Some((true, _)))
    }

    /// Whether the last emitted token ended the generation (or an error did).
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.state, State::Finished { .. } | State::Done)
    }

    /// End after an error.
    pub(crate) fn abort(&mut self) {
        self.state = State::Done;
    }

    /// How many more tokens may be generated (max tokens, context).
    pub(crate) fn room(&self) -> usize {
        let max_new = self.conditions.max_new_tokens.unwrap_or(usize::MAX);
        let by_max = max_new.saturating_sub(self.generated.len());
        let by_context = self
            .limit
            .saturating_sub(self.prompt.len().saturating_add(self.generated.len()));
        by_max.min(by_context)
    }

    /// Count `time` as decode time.
    pub(crate) fn add_decode_time(&mut self, time: Duration) {
        self.timings.decode += time;
    }

    /// Record `id` (chosen from the raw row in `self.raw`): logprobs, detokenise, stops.
    /// `verified`: `None` advances the constraint with `id` here; `Some(complete)` when the
    /// speculative verifier already has (and whether the constraint was complete after `id`).
    fn emit(&mut self, id: u32, verified: Option<bool>) -> Result<Event, GenerateError> {
        let step = self.generated.len();
        let constraint_error = |source| GenerateError::Constraint { step, source };
        check_vocab(&[id], self.raw.len())?;
        if verified.is_none()
            && let Some(c) = &mut self.constraint
        {
            c.advance(id).map_err(constraint_error)?;
        }
        let lse = log_sum_exp(&self.raw);
        let logprob = logprob(&self.raw, lse, id);
        let top_logprobs = top_n_logprobs(&self.raw, lse, self.top_logprobs);
        self.generated.push(id);

        let (mut text, mut stop) = if self.conditions.eog_token_ids.contains(&id) {
            (String::new(), Some(StopMatch::Eog(id)))
        } else if self.conditions.stop_token_ids.contains(&id) {
            (String::new(), Some(StopMatch::Token(id)))
        } else {
            let delta = self.stream.step(id).map_err(GenerateError::decode)?;
            let scan = self.stops.push(&delta);
            (scan.text, scan.matched.map(StopMatch::String))
        };
        let complete =
            verified.unwrap_or_else(|| self.constraint.as_ref().is_some_and(|c| c.is_complete()));
        if stop.is_none() && complete {
            stop = Some(StopMatch::Constraint);
        }

        let max_new = self.conditions.max_new_tokens.unwrap_or(usize::MAX);
        let reason = if stop.is_some() {
            Some(FinishReason::Stop)
        } else if self.generated.len() >= max_new
            || self.prompt.len().saturating_add(self.generated.len()) >= self.limit
        {
            Some(FinishReason::Length)
        } else if let (Some(max), Some(started)) = (self.conditions.max_time, self.started)
            && started.elapsed() >= max
        {
            Some(FinishReason::Time)
        } else {
            None
        };

        match reason {
            None => self.state = State::Decode(id),
            Some(mut reason) => {
                if !matches!(stop, Some(StopMatch::String(_))) {
                    // Release held-back text: an incomplete character, a stop-string prefix.
                    let rest = self.stream.flush().map_err(GenerateError::decode)?;
                    let scan = self.stops.push(&rest);
                    text.push_str(&scan.text);
                    if let Some(matched) = scan.matched {
                        reason = FinishReason::Stop;
                        stop = Some(StopMatch::String(matched));
                    } else {
                        text.push_str(&self.stops.finish());
                    }
                }
                self.state = State::Finished { reason, stop };
            }
        }
        self.text.push_str(&text);
        Ok(Event::Token {
            id,
            text,
            logprob,
            top_logprobs,
        })
    }

    fn summary(&mut self, finish_reason: FinishReason, stop: Option<StopMatch>) -> Summary {
        let mut timings = self.timings;
        timings.decode_tokens = self.generated.len().saturating_sub(1);
        timings.constraint = self.constraint.as_ref().map(|c| c.stats());
        Summary {
            finish_reason,
            stop,
            prompt_tokens: self.prompt.len(),
            generated_tokens: self.generated.len(),
            text: std::mem::take(&mut self.text),
            tokens: std::mem::take(&mut self.generated),
            timings,
        }
    }
}

impl<M: LanguageModel, D: TokenDecoder + ?Sized> Iterator for Generator<'_, M, D> {
    type Item = Result<Event, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(spec) = self.spec.as_mut()
            && let Some(event) = spec.step(self.model, self.session, self.sampler, &mut self.core)
        {
            return Some(event);
        }
        // Any error leaves the state at Done, so the iterator ends after it.
        match self.plan() {
            Step::End => None,
            Step::Emit(event) => Some(Ok(event)),
            Step::Feed(tokens) => {
                let mut logits = self.session.forward_last(self.model, &tokens);
                if let Some(spec) = self.spec.as_mut() {
                    let prompt = self.core.is_prompt_step();
                    logits = spec.after_step(prompt, self.session.tokens(), logits);
                }
                Some(self.complete(logits))
            }
        }
    }
}

impl<M: LanguageModel, D: TokenDecoder + ?Sized> FusedIterator for Generator<'_, M, D> {}

/// Start generating: [`Generator::new`] as a function.
pub fn generate<'a, M: LanguageModel, D: TokenDecoder + ?Sized>(
    model: &'a M,
    session: &'a mut Session<M>,
    prompt: &[u32],
    sampler: &'a mut Sampler,
    decoder: &'a D,
    config: &GenerationConfig,
) -> Result<Generator<'a, M, D>, GenerateError> {
    Generator::new(model, session, prompt, sampler, decoder, config)
}

/// Generate to the end without streaming and return the [`Summary`].
pub fn generate_to_end<M: LanguageModel, D: TokenDecoder + ?Sized>(
    model: &M,
    session: &mut Session<M>,
    prompt: &[u32],
    sampler: &mut Sampler,
    decoder: &D,
    config: &GenerationConfig,
) -> Result<Summary, GenerateError> {
    Generator::new(model, session, prompt, sampler, decoder, config)?.run(|_| {})
}

/// One generation's use of a [`Speculator`]: the tokens verified but not yet emitted.
pub(crate) struct SpecRun<'a> {
    pub(crate) spec: SpecRef<'a>,
    pub(crate) queue: VecDeque<Queued>,
    /// False until a plain step was taken, when the speculator asks for a timing step.
    timed: bool,
}

/// A verified token waiting for its event: its raw logits row (for the logprobs) and the
/// session length a plain run would have when emitting it.
pub(crate) struct Queued {
    id: u32,
    row: Vec<f32>,
    session_len: usize,
    /// The constraint was complete after this token (false without one).
    complete: bool,
}

impl<'a> SpecRun<'a> {
    pub(crate) fn new(spec: &'a mut Speculator) -> Self {
        Self::with(SpecRef::Borrowed(spec))
    }

    fn with(spec: SpecRef<'a>) -> Self {
        let timed = !spec.timing_step;
        SpecRun {
            spec,
            queue: VecDeque::new(),
            timed,
        }
    }

    /// A run that owns its speculator.
    pub(crate) fn owned(spec: Speculator) -> SpecRun<'static> {
        SpecRun::with(SpecRef::Owned(Box::new(spec)))
    }

    /// After the target's pass of a step: for the prompt's (`prompt`), the drafter takes in
    /// the prompt too (`tokens`, the session's), and its failure fails the step as a whole.
    pub(crate) fn after_step(
        &mut self,
        prompt: bool,
        tokens: &[u32],
        logits: Result<Vec<f32>, GenerateError>,
    ) -> Result<Vec<f32>, GenerateError> {
        match logits {
            Ok(logits) if prompt => self.spec.prefill(tokens).map(|()| logits),
            other => other,
        }
    }

    /// Refuse samplers whose distribution cannot be verified.
    pub(crate) fn check_sampler(
        sampler: &Sampler,
        speculator: &Speculator,
    ) -> Result<(), GenerateError> {
        speculator.check_target(sampler)?;
        let config = sampler.config();
        if config.temperature != 0.0 && config.mirostat != Mirostat::Off {
            return Err(GenerateError::InvalidDraft(
                "mirostat cannot be combined with drafting (its state follows each draw, so it has no fixed distribution to verify against)".into(),
            ));
        }
        Ok(())
    }

    /// The next event when the next step is a decode step: a verified token waiting, else a
    /// draft verified in one pass (its first token emitted, the rest queued), else a plain
    /// one-token step. `None` for the other steps (prefill, done), which the generator takes.
    pub(crate) fn step<M: LanguageModel, T: TokenDecoder>(
        &mut self,
        model: &M,
        session: &mut Session<M>,
        sampler: &mut Sampler,
        core: &mut Core<T>,
    ) -> Option<Result<Event, GenerateError>> {
        if let Some(next) = self.queue.pop_front() {
            let t0 = Instant::now();
            let event = core.emit_row(&next.row, next.id, next.complete);
            if event.is_err() || core.is_finished() {
                self.queue.clear();
                session.truncate(next.session_len);
            }
            if event.is_err() {
                core.abort();
            }
            core.add_decode_time(t0.elapsed());
            return Some(event);
        }
        let last = core.decode_last()?;
        let t0 = Instant::now();
        let cache_room = session.capacity().saturating_sub(session.len());
        // One pass scores the last token and the draft, and a rollback of the rejected part
        // must stay within what the cache can roll back: both bounded by `max_pass`.
        let k = self
            .spec
            .draft_len()
            .min(core.room().saturating_sub(1))
            .min(cache_room.saturating_sub(1))
            .min(crate::model::ModelCache::max_pass(session.cache()).saturating_sub(1));
        // A step that may draft fewer tokens than the minimum drafts nothing.
        let k = if k < self.spec.draft_min { 0 } else { k };
        let mut ends = Vec::new();
        if self.timed && k > 0 {
            let mut context = Vec::with_capacity(session.len() + 1);
            context.extend_from_slice(session.tokens());
            context.push(last);
            // A draft ends at a token that ends the generation, where its length may follow
            // its draws: greedy drafts are the context's alone, and sampled ones are dropped
            // for their length only below a minimum.
            if sampler.config().temperature == 0.0 || self.spec.draft_min <= 1 {
                ends = core.end_tokens();
            }
            if let Err(e) = self.spec.propose(&context, k, &ends) {
                core.abort();
                return Some(Err(e));
            }
        } else {
            self.spec.draft.clear();
        }
        let drafted = self.spec.draft.tokens.len();
        // A draft under the minimum is dropped for a plain step, unless it ends at an end
        // token (given only where its length does not follow its draws): at the end of an
        // answer no longer draft is to be had, and one pass verifies what plain steps would
        // take one at a time.
        let ends_answer = self
            .spec
            .draft
            .tokens
            .last()
            .is_some_and(|t| ends.contains(t));
        if drafted > 0 && drafted < self.spec.draft_min && !ends_answer {
            self.spec.stats.short_drafts += 1;
            self.spec.draft.clear();
        }
        let draft_time = t0.elapsed();
        self.spec.stats.draft_time += draft_time;
        if self.spec.draft.tokens.is_empty() {
            return self.plain_step(model, session, sampler, core);
        }
        let result = self.verify(model, session, sampler, core, last);
        let spent = t0.elapsed();
        self.spec.stats.verify_time += spent - draft_time;
        core.add_decode_time(spent);
        match result {
            Ok(()) => self.step(model, session, sampler, core),
            Err(e) => {
                core.abort();
                Some(Err(e))
            }
        }
    }

    /// One plain step (as the generator takes it), timed.
    fn plain_step<M: LanguageModel, T: TokenDecoder>(
        &mut self,
        model: &M,
        session: &mut Session<M>,
        sampler: &mut Sampler,
        core: &mut Core<T>,
    ) -> Option<Result<Event, GenerateError>> {
        let t0 = Instant::now();
        let event = match core.plan(session) {
            Step::Feed(tokens) => {
                let logits = session.forward_last(model, &tokens);
                core.complete(logits, sampler, session)
            }
            Step::Emit(event) => Ok(event),
            Step::End => return None,
        };
        self.timed = true;
        self.spec.stats.plain_steps += 1;
        self.spec.stats.plain_time += t0.elapsed();
        Some(event)
    }

    /// Run `last` and the draft through the target in one pass, apply the rule, roll the
    /// session back to the accepted tokens, queue the tokens to emit.
    fn verify<M: LanguageModel, T: TokenDecoder>(
        &mut self,
        model: &M,
        session: &mut Session<M>,
        sampler: &mut Sampler,
        core: &mut Core<T>,
        last: u32,
    ) -> Result<(), GenerateError> {
        let vocab = model.vocab_size();
        check_vocab(&self.spec.draft.tokens, vocab)?;
        let base = session.len() + 1;
        let mut feed = Vec::with_capacity(self.spec.draft.tokens.len() + 1);
        feed.push(last);
        feed.extend_from_slice(&self.spec.draft.tokens);
        let rows = session.forward_all(model, &feed)?;
        if session.len() != base + feed.len() - 1 {
            // A sliding cache made room (the draft was sized not to need it).
            return Err(GenerateError::InvalidDraft(
                "the cache discarded tokens during verification".into(),
            ));
        }
        let step = core.tokens().len();
        let out = self.spec.verify(
            sampler,
            &rows,
            vocab,
            session.tokens(),
            core.constraint.as_deref_mut(),
            step,
        )?;
        session.truncate(base + out.len() - 1);
        for (j, &id) in out.iter().enumerate() {
            self.queue.push_back(Queued {
                id,
                row: rows[j * vocab..(j + 1) * vocab].to_vec(),
                session_len: base + j,
                complete: self.spec.complete_after.get(j).copied().unwrap_or(false),
            });
        }
        Ok(())
    }
}
