//! A generation that owns its session and sampler, stepped from outside: what a server's
//! scheduler keeps per request, so that sequences can join and leave a running batch between
//! steps (continuous batching).

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use kindle_sampling::{LogitsConstraint, Sampler, TraceSummary};

use crate::generator::{Core, SpecRun, Step};
use crate::{
    Event, GenerateError, GenerationConfig, LanguageModel, Session, SpecStats, Speculator,
    TokenDecoder,
};

/// One generation in progress, owning its [`Session`], [`Sampler`] and detokeniser (`D`, for
/// instance an `Arc` of the tokenizer), driven step by step: [`plan`](Self::plan) says what the
/// next step needs, [`forward_batch`](Self::forward_batch) runs the model for several
/// sequences in one pass, [`complete`](Self::complete) samples from the logits.
///
/// It behaves exactly as a [`Generator`](crate::Generator) over the same session, prompt,
/// sampler and configuration: the same events in the same order (the generator is this state
/// machine with borrowed parts). So a sequence's output does not depend on which other
/// sequences share its forward passes, as long as the model gives each row the same logits in
/// any batch.
///
/// ```
/// use kindle_generate::{GenerationConfig, Sequence, Session, Step};
/// # use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};
/// # use std::convert::Infallible;
/// # struct C(usize);
/// # impl ModelCache for C {
/// #     fn len(&self) -> usize { self.0 }
/// #     fn capacity(&self) -> usize { 64 }
/// #     fn truncate(&mut self, len: usize) { self.0 = self.0.min(len) }
/// #     fn fork(&self) -> Self { C(self.0) }
/// # }
/// # /// Always predicts the token after the last one.
/// # struct Next;
/// # impl LanguageModel for Next {
/// #     type Cache = C;
/// #     type Error = Infallible;
/// #     fn vocab_size(&self) -> usize { 8 }
/// #     fn context_length(&self) -> usize { 64 }
/// #     fn new_cache(&self, _: usize) -> Result<C, Infallible> { Ok(C(0)) }
/// #     fn forward_last(&self, t: &[u32], c: &mut C) -> Result<Vec<f32>, Infallible> {
/// #         c.0 += t.len();
/// #         let mut row = vec![0.0; 8];
/// #         row[(*t.last().unwrap() as usize + 1) % 8] = 9.0;
/// #         Ok(row)
/// #     }
/// #     fn forward_all(&self, t: &[u32], c: &mut C) -> Result<Vec<f32>, Infallible> {
/// #         unimplemented!()
/// #     }
/// # }
/// # impl TokenDecoder for Next {
/// #     type Error = Infallible;
/// #     fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
/// #         Ok(ids.iter().map(|i| char::from(b'a' + *i as u8)).collect())
/// #     }
/// # }
/// let model = Next;
/// let config = GenerationConfig::default().with_max_new_tokens(3);
/// let mut a = Sequence::new(&model, Session::new(&model, 64)?, &[0], kindle_sampling::Sampler::greedy(), Next, &config)?;
/// let mut b = Sequence::new(&model, Session::new(&model, 64)?, &[4], kindle_sampling::Sampler::greedy(), Next, &config)?;
/// let mut texts = [String::new(), String::new()];
/// loop {
///     let (Step::Feed(ta), Step::Feed(tb)) = (a.plan(), b.plan()) else { break };
///     let rows = Sequence::forward_batch(&model, &mut [(&ta[..], &mut a), (&tb[..], &mut b)])?;
///     for ((seq, row), text) in [&mut a, &mut b].into_iter().zip(rows).zip(&mut texts) {
///         if let kindle_generate::Event::Token { text: delta, .. } = seq.complete(row)? {
///             text.push_str(&delta);
///         }
///     }
/// }
/// assert_eq!(texts, ["bcd", "fgh"]);
/// # Ok::<(), kindle_generate::GenerateError>(())
/// ```
pub struct Sequence<M: LanguageModel, D: TokenDecoder> {
    session: Session<M>,
    sampler: Sampler,
    core: Core<D>,
    /// Drafting, when asked for ([`with_speculator`](Self::with_speculator)).
    spec: Option<SpecRun<'static>>,
}

impl<M: LanguageModel, D: TokenDecoder> Sequence<M, D> {
    /// Set up a generation of a continuation of `prompt` in `session` (whatever it holds of the
    /// prompt's start is reused). No model work happens here.
    ///
    /// Errors: as [`Generator::new`](crate::Generator::new).
    pub fn new(
        model: &M,
        session: Session<M>,
        prompt: &[u32],
        sampler: Sampler,
        decoder: D,
        config: &GenerationConfig,
    ) -> Result<Self, GenerateError> {
        let core = Core::new(model, &session, prompt, decoder, config)?;
        Ok(Sequence {
            session,
            sampler,
            core,
            spec: None,
        })
    }

    /// Decode speculatively with `speculator` (see
    /// [`Generator::with_speculator`](crate::Generator::with_speculator): the same output,
    /// distribution and events as without it). The prompt still goes through
    /// [`plan`](Self::plan) and batches; each decode step is then taken alone by
    /// [`speculative_step`](Self::speculative_step), a verification pass scoring the last
    /// token and a draft in one forward pass of this sequence's session.
    ///
    /// Errors: [`GenerateError::InvalidDraft`] for a mirostat sampler, and as
    /// [`Generator::with_speculator`](crate::Generator::with_speculator).
    pub fn with_speculator(mut self, speculator: Speculator) -> Result<Self, GenerateError> {
        SpecRun::check_sampler(&self.sampler, &speculator)?;
        self.spec = Some(SpecRun::owned(speculator));
        Ok(self)
    }

    /// For a speculative sequence whose next step is a decode step: take it alone (emit a
    /// token already verified, or run a verification pass, or a plain one-token step when
    /// nothing is drafted) and return its event. `None` otherwise (no speculator, or the next
    /// step is the prompt's or the end): take the step through [`plan`](Self::plan).
    pub fn speculative_step(&mut self, model: &M) -> Option<Result<Event, GenerateError>> {
        let spec = self.spec.as_mut()?;
        spec.step(model, &mut self.session, &mut self.sampler, &mut self.core)
    }

    /// Whether a verification pass left tokens to emit: the next
    /// [`speculative_step`](Self::speculative_step)s emit them without model work, and must
    /// come before any step through [`plan`](Self::plan). A caller that drafts only now and
    /// then (a server, while the sequence runs alone) takes the other steps through
    /// [`plan`](Self::plan) and the batch; the drafter catches up with what it missed at its
    /// next proposal.
    pub fn has_verified(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| !s.queue.is_empty())
    }

    /// The drafting counters, for a speculative sequence.
    pub fn spec_stats(&self) -> Option<&SpecStats> {
        self.spec.as_ref().map(|s| s.spec.stats())
    }

    /// Restrict the output to what `constraint` allows (see
    /// [`Generator::with_constraint`](crate::Generator::with_constraint)).
    pub fn with_constraint(mut self, constraint: Box<dyn LogitsConstraint>) -> Self {
        self.core.constraint = Some(constraint);
        self
    }

    /// Record what the sampler's chain did for each sampled token ([`TraceSummary`] with
    /// `top` candidates; read it with [`take_trace`](Self::take_trace) after each
    /// [`complete`](Self::complete)). It costs a pass over the vocabulary per stage, so only
    /// when asked. Mirostat cannot be traced: its steps then fail.
    pub fn with_trace(mut self, top: usize) -> Self {
        self.core.trace_top = Some(top);
        self
    }

    /// The trace of the token the last [`complete`](Self::complete) sampled, when tracing
    /// (none for a token a constraint forced).
    pub fn take_trace(&mut self) -> Option<TraceSummary> {
        self.core.last_trace.take()
    }

    /// What the next step needs: [`Step::Feed`] tokens to run (then call
    /// [`complete`](Self::complete) with their logits), [`Step::Emit`] an event that needs no
    /// model work (the final [`Event::Done`]), or [`Step::End`].
    pub fn plan(&mut self) -> Step {
        self.core.plan(&mut self.session)
    }

    /// Finish the step that [`plan`](Self::plan) asked for with the logits of the fed tokens'
    /// last position: sample, detokenise, check the stops. Returns the [`Event::Token`].
    pub fn complete(&mut self, logits: Vec<f32>) -> Result<Event, GenerateError> {
        self.completion(logits).run()
    }

    /// [`complete`](Self::complete) in two parts: what touches the session and the drafter
    /// runs here; the [`Completion`] it returns does the rest (processors, sampling,
    /// logprobs, detokenising, stops) with the sequence's own sampler and decoder. A
    /// completion is `Send` where `D` is, though the sequence (its cache) may not be: a
    /// server can complete the steps of a batch's sequences on several threads, and each
    /// gets exactly what [`complete`](Self::complete) gives it.
    pub fn completion(&mut self, logits: Vec<f32>) -> Completion<'_, D> {
        let mut logits = Ok(logits);
        if let Some(spec) = self.spec.as_mut() {
            let prompt = self.core.is_prompt_step();
            logits = spec.after_step(prompt, self.session.tokens(), logits);
        }
        Completion::of(
            &mut self.core,
            &mut self.sampler,
            self.session.tokens(),
            logits,
        )
    }

    /// Run each sequence's fed tokens (from its [`Step::Feed`]) in one batched forward pass
    /// ([`LanguageModel::forward_batch`]); each gets back its last position's logits, in
    /// order. On an error every session is rolled back to where it was.
    pub fn forward_batch(
        model: &M,
        feeds: &mut [(&[u32], &mut Sequence<M, D>)],
    ) -> Result<Vec<Vec<f32>>, GenerateError> {
        let mut items: Vec<(&[u32], &mut Session<M>)> = feeds
            .iter_mut()
            .map(|(tokens, seq)| (*tokens, &mut seq.session))
            .collect();
        Session::forward_batch(model, &mut items)
    }

    /// Run `tokens` after the tokens the session holds and return the logits of every
    /// position (row-major, `tokens.len() * vocab_size()` values), before the first
    /// [`plan`](Self::plan): what a server runs to score the prompt it echoes (OpenAI's `echo`
    /// with `logprobs`), in chunks of the prompt's start. The prompt's step then feeds only
    /// what the session does not hold of it (at least its last token, whose logits start the
    /// generation).
    ///
    /// Errors: a model error, after which the session holds what it held before.
    pub fn forward_all(&mut self, model: &M, tokens: &[u32]) -> Result<Vec<f32>, GenerateError> {
        self.session.forward_all(model, tokens)
    }

    /// The text output so far.
    pub fn text(&self) -> &str {
        self.core.text()
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        self.core.tokens()
    }

    /// The session (prompt and fed tokens).
    pub fn session(&self) -> &Session<M> {
        &self.session
    }

    /// Give up the generation, keeping the session (for reuse of its cache by a later prompt
    /// with the same start).
    pub fn into_session(self) -> Session<M> {
        self.session
    }
}

/// The rest of a [`Sequence`]'s step after its logits arrived: see
/// [`Sequence::completion`].
pub struct Completion<'a, D: TokenDecoder> {
    core: &'a mut Core<D>,
    sampler: &'a mut Sampler,
    history: &'a [u32],
    logits: Result<Vec<f32>, GenerateError>,
}

impl<'a, D: TokenDecoder> Completion<'a, D> {
    /// The end of a step of `core` with `sampler`, after the session's tokens `history`.
    pub(crate) fn of(
        core: &'a mut Core<D>,
        sampler: &'a mut Sampler,
        history: &'a [u32],
        logits: Result<Vec<f32>, GenerateError>,
    ) -> Self {
        Completion {
            core,
            sampler,
            history,
            logits,
        }
    }

    /// Sample, detokenise, check the stops: the [`Event::Token`] that
    /// [`Sequence::complete`] returns.
    pub fn run(self) -> Result<Event, GenerateError> {
        self.core
            .complete_after(self.logits, self.sampler, self.history)
    }

    /// [`run`](Self::run) each of `completions` (a batched pass's sequences) on `model`'s
    /// threads ([`LanguageModel::for_each_task`]); the results in order. Each sequence's
    /// result is what [`run`](Self::run) gives it: it uses only its own sampler, decoder
    /// and stops. A panic in one is raised here, on the caller, after the others finished.
    pub fn run_all<M: LanguageModel + ?Sized>(
        model: &M,
        completions: Vec<Self>,
    ) -> Vec<Result<Event, GenerateError>>
    where
        D: Send,
    {
        if completions.len() <= 1 {
            return completions.into_iter().map(Completion::run).collect();
        }
        type Outcome = std::thread::Result<Result<Event, GenerateError>>;
        let slots: Vec<Mutex<Option<Self>>> = completions
            .into_iter()
            .map(|c| Mutex::new(Some(c)))
            .collect();
        let outcomes: Vec<Mutex<Option<Outcome>>> =
            slots.iter().map(|_| Mutex::new(None)).collect();
        let run = |i: usize| {
            let taken = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(completion) = taken {
                // A panic must not unwind through the model's thread pool.
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| completion.run()));
                *outcomes[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
            }
        };
        model.for_each_task(slots.len(), &run);
        // Any the model's threads left undone run here.
        (0..slots.len()).for_each(run);
        outcomes
            .into_iter()
            .map(|o| {
                match o.into_inner().unwrap_or_else(|e| e.into_inner()) {
                    Some(Ok(result)) => result,
                    Some(Err(panic)) => std::panic::resume_unwind(panic),
                    // Every slot was run above.
                    None => unreachable!("a completion left unrun"),
                }
            })
            .collect()
    }
}
