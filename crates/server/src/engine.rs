//! The engine: one thread that owns the model and every running sequence, and runs steps.
//!
//! **Continuous batching.** Handlers submit [`Job`]s (one per choice) through a channel. Each
//! loop of the engine thread:
//! 1. takes the new jobs into its waiting queue (blocking only when nothing runs or waits);
//! 2. drops the jobs and sequences whose client went away (their event channel is closed), so a
//!    disconnected client's sequence leaves within one step and its cache is freed;
//! 3. admits waiting jobs, in order, while fewer than `parallel` sequences run and the paged KV
//!    pool can hold the next one's prompt plus its `max_tokens` (its blocks are reserved then,
//!    so a running sequence never runs out; a job that does not fit yet waits for sequences to
//!    finish, and those behind it wait too). With prefix caching its cache starts with the
//!    longest run of cached blocks its prompt begins with, which is not computed again;
//! 4. asks every running sequence for its next step: decoding sequences feed their last token,
//!    new ones their prompt, in chunks: the prompts share a budget of `step_tokens` per step,
//!    and one longer than what is left is fed in pieces over several steps (chunked prefill),
//!    so the decoding streams keep their pace while a long prompt is read;
//! 5. runs **one** [`Sequence::forward_batch`] over all of them, then samples each sequence's
//!    token with its own sampler and sends the event to its client. The sequences' steps are
//!    finished ([`Sequence::completion`]: processors, sampling, logprobs, detokenising,
//!    stops) on the model's threads ([`Completion::run_all`]), idle between passes, each
//!    sequence on one, and their events sent in order.
//!
//! After each step, every sequence's newly filled blocks are published to the prefix index
//! (so that a request arriving while another with the same system prompt still runs reuses
//! it); a finished or cancelled sequence's blocks go back to the pool, published ones kept as
//! cache until the room is needed (least recently released first).
//!
//! A request that echoes its prompt with logprobs (`echo`, lm-eval-harness's log-likelihood
//! requests) has its prompt scored first: it takes no cached prefix, and before its prompt's
//! step the engine runs the prompt but its last token in chunks of the step's prefill budget,
//! each a pass of its own returning every position's logits ([`Sequence::forward_all`]), and
//! sends the client each token's log-probability ([`Update::Prompt`]); the prompt's step then
//! feeds the last token and generation goes on as for any request.
//!
//! A sequence's output is what the same request gives alone: each has its own session, sampler
//! (and seed), stops and logprobs, and the model gives each row the same logits in any batch
//! (`kindle serve` loads it with one arithmetic for every row of its CPU kernels). A request
//! drafting by prompt lookup takes its decode steps outside the batch, one verification pass
//! at a time ([`Sequence::speculative_step`]); its output is what it gives without drafting.
//! One drafting with the server's draft model ([`crate::draft`]) does so only while it runs
//! alone, and decodes in the batch beside others (its drafter catches up when it is alone
//! again).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use kindle_generate::{
    Completion, Event, FinishReason, GenerationConfig, ModelCache, PagedModel, Sequence, Session,
    Step, score_row,
};
use kindle_sampling::{LogitsConstraint, Sampler, TraceSummary};
use tokio::sync::mpsc::UnboundedSender;

use crate::codec::TextCodec;
pub use crate::draft::JobDraft;
use crate::draft::{DRAFT_SEED, DraftJob, Drafting, with_draft_model, with_lookup};
use crate::error::ServerError;
use crate::metrics::Metrics;
pub use crate::pool::open_pool;

/// What a handler asks the engine to run: one sequence (one choice of one prompt).
pub struct Job {
    /// The prompt's ids (checked against the context and vocabulary by the handler).
    pub prompt: Vec<u32>,
    /// Its sampler, seeded.
    pub sampler: Sampler,
    /// Its stops and logprobs.
    pub config: GenerationConfig,
    /// KV capacity of its session: prompt plus the most tokens it may generate.
    pub capacity: usize,
    /// The choice index in the response.
    pub index: usize,
    /// Where its events go; closed when the client goes away.
    pub events: UnboundedSender<Update>,
    /// When the request arrived (for time to first token).
    pub arrived: Instant,
    /// Its output constraint (`response_format`, `guided_*`), if any.
    pub constraint: Option<Box<dyn LogitsConstraint>>,
    /// Trace each sampled token (`kindle_trace`), with [`TRACE_CANDIDATES`] candidates.
    pub trace: bool,
    /// Decode speculatively: by prompt lookup, or with the server's draft model.
    pub draft: Option<JobDraft>,
    /// Score the prompt first and report its tokens with this many alternatives each
    /// (`echo` with `logprobs`, `prompt_logprobs`): see [`Update::Prompt`].
    pub prompt_logprobs: Option<usize>,
}

/// Floats of logits one prompt-scoring pass may return (64 MiB): its rows are the prompt's
/// positions, each a whole vocabulary.
const SCORE_FLOATS: usize = 1 << 24;

/// One token of an echoed prompt, scored.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptToken {
    /// The token id.
    pub id: u32,
    /// Its log-probability under the model's raw distribution given the tokens before it;
    /// `None` for the first (nothing precedes it).
    pub logprob: Option<f32>,
    /// The most likely tokens at its place `(id, logprob)`, as many as asked for (empty for
    /// the first).
    pub top_logprobs: Vec<(u32, f32)>,
    /// Its rank at its place: 1 + the number of tokens the model found strictly more likely
    /// (`None` for the first).
    pub rank: Option<u32>,
}

/// Candidates in a `kindle_trace` (the most likely raw, and after the chain).
pub const TRACE_CANDIDATES: usize = 5;

/// What the engine tells a handler about one choice.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// Tokens of the prompt, scored (`echo` with `logprobs`): all of them, in order, in one
    /// or more updates before the choice's first token.
    Prompt {
        /// The choice index.
        index: usize,
        /// The next tokens of the prompt.
        tokens: Vec<PromptToken>,
    },
    /// A generated token.
    Token {
        /// The choice index.
        index: usize,
        /// The token id.
        id: u32,
        /// The text it adds (may be empty while text is held back).
        text: String,
        /// Its log-probability under the model's raw distribution.
        logprob: f32,
        /// The most likely alternatives `(id, logprob)`, as many as asked for.
        top_logprobs: Vec<(u32, f32)>,
        /// What the sampler's chain did, when the request asked (`kindle_trace`).
        trace: Option<Box<TraceSummary>>,
    },
    /// The choice finished.
    Done {
        /// The choice index.
        index: usize,
        /// Why it ended.
        finish_reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (an end-of-generation token included).
        completion_tokens: usize,
    },
    /// The choice failed: a model error, or (`request`) the request's output constraint
    /// could not be met (a grammar no text satisfies, or one its engine refuses as it runs).
    Error {
        /// The choice index.
        index: usize,
        /// What went wrong.
        message: String,
        /// Whether the request is at fault (a 400, not a 500).
        request: bool,
    },
}

/// Messages to the engine thread.
pub enum Command {
    /// Run these jobs (the choices of one request, whose queue places the handler reserved).
    Submit(Vec<Job>),
    /// Drop every job and sequence, and end the thread.
    Shutdown,
}

/// How the engine schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Most sequences running at once.
    pub parallel: usize,
    /// Most prompt tokens fed in one step (longer prompts are prefilled in chunks).
    pub step_tokens: usize,
    /// Reuse cached blocks of earlier prompts (prefix caching).
    pub prefix_cache: bool,
    /// Blocks in the paged KV pool.
    pub pool_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
}

/// The handlers' side of the engine: a channel to its thread.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
}

impl EngineHandle {
    /// Send a command; `false` when the engine thread has ended.
    pub fn send(&self, command: Command) -> bool {
        self.commands.send(command).is_ok()
    }
}

/// Start the engine thread with `model` (and `drafting`, the draft model that jobs asking for
/// [`JobDraft::Model`] draft with); it ends on [`Command::Shutdown`] or when every handle is
/// dropped and nothing runs.
pub fn spawn<M, C>(
    mut model: M,
    drafting: Option<Drafting>,
    codec: Arc<C>,
    options: EngineOptions,
    metrics: Arc<Metrics>,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), ServerError>
where
    M: PagedModel + Send + 'static,
    C: TextCodec,
{
    open_pool(
        &mut model,
        options.pool_blocks,
        options.block_size,
        options.parallel,
    )?;
    metrics.set_blocks(model.pool_stats().unwrap_or_default());
    metrics.set_local_blocks(model.local_pool_stats());
    let (commands, receiver) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("kindle-engine".into())
        // A constraint's masks walk its grammar (llguidance's parser recurses over long rule
        // chains): room for that, reserved rather than committed.
        .stack_size(64 << 20)
        .spawn(move || {
            // Built on its thread: the sequences' caches never cross threads.
            let engine = Engine {
                model,
                drafting,
                codec,
                options,
                metrics,
                waiting: VecDeque::new(),
                running: Vec::new(),
            };
            engine.run(receiver)
        })
        .map_err(ServerError::EngineThread)?;
    Ok((EngineHandle { commands }, thread))
}

/// A running sequence and what the engine tracks about it.
struct Running<M: PagedModel, C: TextCodec> {
    seq: Sequence<M, Arc<C>>,
    index: usize,
    events: UnboundedSender<Update>,
    arrived: Instant,
    prompt_tokens: usize,
    /// Tokens planned for the next forward pass (kept while a prefill waits for budget).
    feed: Option<Vec<u32>>,
    /// Whether the sequence has produced its first token.
    started: bool,
    /// Tokens of it already offered to the prefix index.
    published: usize,
    last_token: Option<Instant>,
    /// Set when the sequence leaves at the end of this step.
    finished: bool,
    /// The prompt being scored before generation starts (`echo` with `logprobs`).
    scoring: Option<Scoring>,
    /// It drafts with the server's draft model: only while it runs alone.
    drafts_alone: bool,
}

/// An echoed prompt being scored: its tokens before the last are run in chunks that return
/// every position's logits (the last token's logits start the generation, in the prompt's
/// own step).
struct Scoring {
    prompt: Vec<u32>,
    /// Alternatives per token.
    top: usize,
    /// Prompt tokens run so far.
    next: usize,
}

struct Engine<M: PagedModel, C: TextCodec> {
    model: M,
    drafting: Option<Drafting>,
    codec: Arc<C>,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Job>,
    running: Vec<Running<M, C>>,
}

impl<M: PagedModel, C: TextCodec> Engine<M, C> {
    fn run(mut self, commands: Receiver<Command>) {
        loop {
            let idle = self.running.is_empty() && self.waiting.is_empty();
            let first = if idle {
                // Wake now and then to notice a closed channel even with no command.
                match commands.recv_timeout(Duration::from_millis(200)) {
                    Ok(command) => Some(command),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                None
            };
            let mut shutdown = false;
            let mut pending: Vec<Command> = first.into_iter().collect();
            loop {
                match commands.try_recv() {
                    Ok(command) => pending.push(command),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if pending.is_empty() && idle {
                            return;
                        }
                        break;
                    }
                }
            }
            for command in pending {
                match command {
                    Command::Submit(jobs) => self.waiting.extend(jobs),
                    Command::Shutdown => shutdown = true,
                }
            }
            if shutdown {
                self.metrics
                    .queued
                    .fetch_sub(self.waiting.len(), Ordering::SeqCst);
                self.waiting.clear();
                self.running.clear();
                self.metrics.running.store(0, Ordering::SeqCst);
                return;
            }
            self.drop_cancelled();
            self.admit();
            self.step();
            self.publish();
            for r in self.running.iter().filter(|r| r.finished) {
                if let Some(stats) = r.seq.spec_stats() {
                    self.metrics.count_drafts(stats);
                }
            }
            self.running.retain(|r| !r.finished);
            self.metrics
                .running
                .store(self.running.len(), Ordering::SeqCst);
            if let Some(stats) = self.model.pool_stats() {
                self.metrics.set_blocks(stats);
            }
            self.metrics.set_local_blocks(self.model.local_pool_stats());
        }
    }

    /// Drop waiting jobs and running sequences whose client is gone.
    fn drop_cancelled(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|job| !job.events.is_closed());
        let gone = before - self.waiting.len();
        if gone > 0 {
            self.metrics.queued.fetch_sub(gone, Ordering::SeqCst);
            self.metrics
                .cancelled
                .fetch_add(gone as u64, Ordering::SeqCst);
        }
        let before = self.running.len();
        self.running.retain(|r| !r.events.is_closed());
        let gone = before - self.running.len();
        if gone > 0 {
            self.metrics
                .cancelled
                .fetch_add(gone as u64, Ordering::SeqCst);
        }
    }

    /// Start waiting jobs, in order, while there are free slots and the pool can hold the
    /// next one (its prompt plus its most generated tokens).
    fn admit(&mut self) {
        while self.running.len() < self.options.parallel {
            let Some(job) = self.waiting.front() else {
                break;
            };
            // A scored prompt needs every position's logits: nothing of it is reused.
            let prefix = self.options.prefix_cache && job.prompt_logprobs.is_none();
            let reuse: &[u32] = if prefix { &job.prompt } else { &[] };
            let cache = match self.model.pooled_cache(reuse, job.capacity) {
                Ok(Some(cache)) => Some(Ok(cache)),
                // The pool is full: wait for running sequences to give blocks back. (The
                // pool holds at least one whole context, so with none running it fits.)
                Ok(None) if !self.running.is_empty() => break,
                Ok(None) => Some(Err(format!(
                    "the KV pool cannot hold {} tokens even when empty",
                    job.capacity
                ))),
                Err(error) => Some(Err(error.to_string())),
            };
            let job = self.waiting.pop_front().expect("looked at above");
            self.metrics.queued.fetch_sub(1, Ordering::SeqCst);
            let started = match cache {
                Some(Ok((cache, reused))) => {
                    if reused > 0 {
                        self.metrics.prefix_hits.fetch_add(1, Ordering::SeqCst);
                        self.metrics
                            .prefix_hit_tokens
                            .fetch_add(reused as u64, Ordering::SeqCst);
                    }
                    let session = Session::with_prefix(cache, &job.prompt[..reused]);
                    // The draft model's sampler: the request's, with a seed of its own.
                    let mut draft_sampler = job.sampler.config().clone();
                    draft_sampler.seed = Some(job.sampler.seed() ^ DRAFT_SEED);
                    Sequence::new(
                        &self.model,
                        session,
                        &job.prompt,
                        job.sampler,
                        Arc::clone(&self.codec),
                        &job.config,
                    )
                    .map_err(|e| e.to_string())
                    .and_then(|seq| match job.draft {
                        Some(JobDraft::Lookup(lookup)) => with_lookup(seq, lookup),
                        Some(JobDraft::Model {
                            draft_max,
                            p_min,
                            draft_min,
                        }) => {
                            let for_job = DraftJob {
                                sampler: draft_sampler,
                                capacity: job.capacity,
                                prompt: &job.prompt,
                                reuse: prefix,
                                p_min,
                                draft_min,
                            };
                            let drafting = self.drafting.as_ref();
                            with_draft_model(seq, drafting, draft_max, for_job, &self.metrics)
                        }
                        None => Ok(seq),
                    })
                }
                Some(Err(message)) => Err(message),
                None => unreachable!("a job that waits is not popped"),
            };
            match started {
                Ok(seq) => {
                    let seq = match job.constraint {
                        Some(constraint) => seq.with_constraint(constraint),
                        None => seq,
                    };
                    let seq = if job.trace {
                        seq.with_trace(TRACE_CANDIDATES)
                    } else {
                        seq
                    };
                    self.metrics
                        .prompt_tokens
                        .fetch_add(job.prompt.len() as u64, Ordering::SeqCst);
                    let published = seq.session().len();
                    self.running.push(Running {
                        seq,
                        index: job.index,
                        events: job.events,
                        arrived: job.arrived,
                        prompt_tokens: job.prompt.len(),
                        feed: None,
                        started: false,
                        published,
                        last_token: None,
                        finished: false,
                        scoring: job.prompt_logprobs.map(|top| Scoring {
                            prompt: job.prompt.clone(),
                            top,
                            next: 0,
                        }),
                        drafts_alone: matches!(job.draft, Some(JobDraft::Model { .. })),
                    });
                }
                Err(message) => {
                    let _ = job.events.send(Update::Error {
                        index: job.index,
                        message,
                        request: false,
                    });
                }
            }
        }
    }

    /// Offer every running sequence's newly filled blocks to the prefix index (those of
    /// sequences finishing now too, before their blocks go back to the pool).
    fn publish(&mut self) {
        if !self.options.prefix_cache {
            return;
        }
        let bs = self.options.block_size;
        for r in &mut self.running {
            let session = r.seq.session();
            let held = session.cache().len().min(session.tokens().len());
            if held / bs > r.published / bs {
                self.model.publish(session.cache(), session.tokens());
                r.published = held;
            }
        }
    }

    /// One step: plan every running sequence, run one batched forward pass, sample.
    ///
    /// Decoding sequences always join with their one token. Prompts share the step's prefill
    /// budget (`step_tokens`) in admission order, each taking what is left of it: a prompt
    /// longer than that is prefilled in chunks over several steps (chunked prefill), so the
    /// running streams keep their pace while it is read. Only the pass with a prompt's last
    /// chunk samples its first token; the earlier chunks' logits are not needed.
    fn step(&mut self) {
        let mut budget = self.options.step_tokens;
        // Tokens each running sequence feeds this step (0: it sits this one out).
        let mut take = vec![0usize; self.running.len()];
        let score_rows = (SCORE_FLOATS / self.model.vocab_size().max(1)).max(1);
        let alone = self.running.len() == 1;
        for (i, r) in self.running.iter_mut().enumerate() {
            if let Some(scoring) = &r.scoring {
                // An echoed prompt scored in chunks of the step's prefill budget, each its
                // own pass (it needs every position's logits).
                let left = scoring.prompt.len() - 1 - scoring.next;
                let n = left.min(budget).min(score_rows);
                if n > 0 || left == 0 {
                    budget -= n;
                    score_chunk(r, n, &self.model, &self.metrics);
                }
                continue;
            }
            // A sequence drafting with the draft model drafts while it runs alone, and
            // emits what a verification pass left before any other step.
            let drafts = !r.drafts_alone || alone || r.seq.has_verified();
            if r.feed.is_none()
                && drafts
                && let Some(result) = r.seq.speculative_step(&self.model)
            {
                // A drafting sequence's decode step runs alone: a verified token, or one
                // pass scoring its last token and a draft.
                deliver(r, result, &self.metrics);
                continue;
            }
            if r.feed.is_none() {
                match r.seq.plan() {
                    Step::Feed(tokens) => r.feed = Some(tokens),
                    Step::Emit(event) => {
                        send_event(r, event, None, &self.metrics);
                        continue;
                    }
                    Step::End => {
                        r.finished = true;
                        continue;
                    }
                }
            }
            let Some(feed) = &r.feed else { continue };
            if r.started {
                take[i] = feed.len();
            } else if budget > 0 {
                take[i] = feed.len().min(budget);
                budget -= take[i];
            }
        }
        if take.iter().all(|&n| n == 0) {
            return;
        }
        let result = {
            // Each sequence fed this step, with the tokens it is fed.
            type Fed<'a, M, C> = (&'a [u32], &'a mut Sequence<M, Arc<C>>);
            let mut items: Vec<Fed<'_, M, C>> = Vec::new();
            for (r, &n) in self.running.iter_mut().zip(&take) {
                if n > 0
                    && let Running {
                        feed: Some(feed),
                        seq,
                        ..
                    } = r
                {
                    items.push((&feed[..n], seq));
                }
            }
            let rows: usize = items.iter().map(|(t, _)| t.len()).sum();
            self.metrics.steps.fetch_add(1, Ordering::SeqCst);
            self.metrics
                .step_rows
                .fetch_add(rows as u64, Ordering::SeqCst);
            let started = Instant::now();
            let result = Sequence::forward_batch(&self.model, &mut items);
            self.metrics.add_forward_time(started.elapsed());
            result
        };
        let chosen_running = self
            .running
            .iter_mut()
            .zip(&take)
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| (r, *n));
        match result {
            Err(error) => {
                tracing::error!("forward pass failed: {error}");
                for (r, _) in chosen_running {
                    let _ = r.events.send(Update::Error {
                        index: r.index,
                        message: format!("the model failed: {error}"),
                        request: false,
                    });
                    r.finished = true;
                }
            }
            Ok(rows) => {
                let mut done = Vec::new();
                for ((r, n), row) in chosen_running.zip(rows) {
                    let feed = r.feed.take().unwrap_or_default();
                    if n < feed.len() {
                        // A chunk of a longer prompt: the rest goes in the next steps.
                        self.metrics.prefill_chunks.fetch_add(1, Ordering::SeqCst);
                        r.feed = Some(feed[n..].to_vec());
                        continue;
                    }
                    done.push((r, row));
                }
                let started = Instant::now();
                let results = {
                    let completions = done
                        .iter_mut()
                        .map(|(r, row)| r.seq.completion(std::mem::take(row)))
                        .collect();
                    Completion::run_all(&self.model, completions)
                };
                self.metrics.add_completion_time(started.elapsed());
                for ((r, _), result) in done.into_iter().zip(results) {
                    deliver(r, result, &self.metrics);
                }
            }
        }
    }
}

/// Run the next `n` tokens of `r`'s scored prompt in one pass returning every position's
/// logits and send the client each next token's log-probability (the prompt's first token,
/// with none, in the first update). When only the last prompt token is left, scoring ends:
/// the prompt's step (`Sequence::plan`) feeds it and samples from its logits.
fn score_chunk<M: PagedModel, C: TextCodec>(
    r: &mut Running<M, C>,
    n: usize,
    model: &M,
    metrics: &Metrics,
) {
    let Some(scoring) = r.scoring.as_mut() else {
        return;
    };
    let (start, prompt) = (scoring.next, &scoring.prompt);
    let mut tokens = Vec::with_capacity(n + 1);
    if start == 0 {
        tokens.push(PromptToken {
            id: prompt[0],
            logprob: None,
            top_logprobs: Vec::new(),
            rank: None,
        });
    }
    if n > 0 {
        metrics.steps.fetch_add(1, Ordering::SeqCst);
        metrics.step_rows.fetch_add(n as u64, Ordering::SeqCst);
        let rows = match r.seq.forward_all(model, &prompt[start..start + n]) {
            Ok(rows) => rows,
            Err(error) => {
                tracing::error!("scoring a prompt failed: {error}");
                let _ = r.events.send(Update::Error {
                    index: r.index,
                    message: format!("the model failed: {error}"),
                    request: false,
                });
                r.finished = true;
                return;
            }
        };
        let vocab = rows.len() / n;
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            let pos = start + i;
            let score = score_row(row, pos, prompt[pos + 1], scoring.top);
            let logit = row[score.next_token as usize];
            let above = row.iter().filter(|&&x| x > logit).count();
            tokens.push(PromptToken {
                id: score.next_token,
                logprob: Some(score.logprob),
                top_logprobs: score.top,
                rank: Some(above as u32 + 1),
            });
        }
    }
    scoring.next += n;
    if scoring.next + 1 >= prompt.len() {
        r.scoring = None;
    }
    if r.events
        .send(Update::Prompt {
            index: r.index,
            tokens,
        })
        .is_err()
    {
        metrics.cancelled.fetch_add(1, Ordering::SeqCst);
        r.finished = true;
    }
}

/// The outcome of a sequence's step to its client: the event (with the sampled token's
/// trace, when tracing), or the error, which ends the sequence.
fn deliver<M: PagedModel, C: TextCodec>(
    r: &mut Running<M, C>,
    result: Result<Event, kindle_generate::GenerateError>,
    metrics: &Metrics,
) {
    match result {
        Ok(event) => {
            let trace = r.seq.take_trace();
            send_event(r, event, trace, metrics);
        }
        Err(error) => {
            // The error and what it says of its cause (a grammar engine's words).
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            let request = matches!(error, kindle_generate::GenerateError::Constraint { .. });
            if request {
                // The grammar engine's first line says what failed; the rest is its state.
                message = short_reason(&message);
            }
            let _ = r.events.send(Update::Error {
                index: r.index,
                message,
                request,
            });
            r.finished = true;
        }
    }
}

/// The first line of `message`, at most 300 characters (a constraint engine's error can go on
/// for pages of its internal state).
fn short_reason(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim_end();
    match line.char_indices().nth(300) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

/// Send a sequence's event to its client, recording metrics; a closed channel (the client went
/// away) or the final event marks it finished.
fn send_event<M: PagedModel, C: TextCodec>(
    r: &mut Running<M, C>,
    event: Event,
    trace: Option<TraceSummary>,
    metrics: &Metrics,
) {
    let update = match event {
        Event::Token {
            id,
            text,
            logprob,
            top_logprobs,
        } => {
            let now = Instant::now();
            if r.started {
                if let Some(last) = r.last_token {
                    metrics.observe_token(now - last);
                }
            } else {
                r.started = true;
                metrics.observe_ttft(now - r.arrived);
            }
            r.last_token = Some(now);
            metrics.generated_tokens.fetch_add(1, Ordering::SeqCst);
            Update::Token {
                index: r.index,
                id,
                text,
                logprob,
                top_logprobs,
                trace: trace.map(Box::new),
            }
        }
        Event::Done(summary) => {
            r.finished = true;
            Update::Done {
                index: r.index,
                finish_reason: summary.finish_reason,
                prompt_tokens: r.prompt_tokens,
                completion_tokens: summary.generated_tokens,
            }
        }
    };
    if r.events.send(update).is_err() {
        metrics.cancelled.fetch_add(1, Ordering::SeqCst);
        r.finished = true;
    }
}
