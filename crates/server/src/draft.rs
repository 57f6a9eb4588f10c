//! Drafting with a draft model (`kindle serve --draft-model`): one loaded model shared by
//! every sequence, each drafting sequence with a drafter of its own (its own cache and
//! sampler). A request drafts with it unless it turns drafting off (`kindle_draft_max: 0`),
//! asks for prompt lookup instead (`kindle_lookup_ngram`), or cannot be drafted for (traced,
//! mirostat); `kindle_draft_max` sets its draft length.
//!
//! A sequence drafts only while it runs alone: a verification pass is a pass of its own,
//! while beside other sequences one batched pass decodes them all for about the price of
//! one; so under load the server keeps batching, and a lone request gets the speedup. The
//! output is what the request gives without drafting either way.
//!
//! ```
//! use kindle_server::draft::{DraftModel, Drafting};
//! # use kindle_generate::{LanguageModel, ModelCache};
//! # struct Draft;
//! # #[derive(Debug)] struct Never;
//! # impl std::fmt::Display for Never { fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { Ok(()) } }
//! # impl std::error::Error for Never {}
//! # struct Cache(usize);
//! # impl ModelCache for Cache {
//! #     fn len(&self) -> usize { self.0 }
//! #     fn capacity(&self) -> usize { 64 }
//! #     fn truncate(&mut self, len: usize) { self.0 = self.0.min(len) }
//! #     fn fork(&self) -> Self { Cache(self.0) }
//! # }
//! # impl LanguageModel for Draft {
//! #     type Cache = Cache;
//! #     type Error = Never;
//! #     fn vocab_size(&self) -> usize { 4 }
//! #     fn context_length(&self) -> usize { 64 }
//! #     fn new_cache(&self, _: usize) -> Result<Cache, Never> { Ok(Cache(0)) }
//! #     fn forward_last(&self, t: &[u32], c: &mut Cache) -> Result<Vec<f32>, Never> { c.0 += t.len(); Ok(vec![0.0; 4]) }
//! #     fn forward_all(&self, t: &[u32], c: &mut Cache) -> Result<Vec<f32>, Never> { c.0 += t.len(); Ok(vec![0.0; 4 * t.len()]) }
//! # }
//! // A small model sharing the target's vocabulary, eight tokens a step unless a request
//! // says otherwise; pass it to `kindle_server::run` or `kindle_server::serve`.
//! let drafting = Drafting::new(DraftModel::new(Draft), 8).expect("a draft length of 1-14");
//! assert_eq!(drafting.draft_max(), 8);
//! ```

use std::sync::Arc;

use kindle_generate::{
    Draft, Drafter, GenerateError, LanguageModel, MAX_DRAFT, ModelDrafter, PagedModel,
    PromptLookup, Sequence, Session, Speculator,
};
use kindle_sampling::Sampler;

use crate::error::ServerError;
use crate::request::Lookup;

/// Makes each drafting sequence's drafter.
pub trait DraftSource: Send {
    /// A drafter for one sequence: its own cache of `capacity` tokens, drawing with
    /// `sampler` (the request's sampler configuration with a seed of its own); `prompt` is
    /// what its cache may start with (the sequence's prompt, or nothing where a prefix must
    /// not be reused); `p_min`, where it ends a draft ([`ModelDrafter::with_p_min`]; `None`:
    /// the source's own). Returns the drafter and how many tokens of `prompt` its cache
    /// holds.
    fn drafter(
        &self,
        capacity: usize,
        sampler: Sampler,
        prompt: &[u32],
        p_min: Option<f32>,
    ) -> Result<(Box<dyn Drafter>, usize), GenerateError>;

    /// Where the blocks of the draft's own paged pool are, if it has one.
    fn pool_stats(&self) -> Option<kindle_generate::BlockStats> {
        None
    }

    /// Where its drafts end unless a request says otherwise (`kindle serve --draft-p-min`;
    /// 0: never early).
    fn p_min(&self) -> f32 {
        0.0
    }
}

/// A draft model shared by every sequence (checking that it shares the target's vocabulary
/// is the caller's job, as for [`ModelDrafter`]). Made with [`pooled`](Self::pooled), its
/// caches come from a paged pool of its own with prefix caching, as the target's do: a
/// drafter starts with the longest published prefix of its sequence's prompt and publishes
/// what it computes of the context, so a prompt seen before (a shared system prompt, a
/// chat's history, a request repeated) is not run through the draft again.
pub struct DraftModel<D: LanguageModel> {
    model: Arc<D>,
    vocab: Option<usize>,
    /// Stop a draft where the model's most likely token is less likely than this (0: never).
    p_min: f32,
    /// The model's own pool, when [`pooled`](Self::pooled).
    pool: Option<Arc<dyn DraftPool<D::Cache>>>,
}

impl<D: LanguageModel> DraftModel<D> {
    /// Draft with `model`, each drafter with a cache of its own.
    pub fn new(model: D) -> Self {
        DraftModel {
            model: Arc::new(model),
            vocab: None,
            p_min: 0.0,
            pool: None,
        }
    }

    /// Propose from the `first` lowest token ids and the context's tokens only
    /// ([`ModelDrafter::with_vocab`]).
    pub fn with_vocab(mut self, first: usize) -> Self {
        self.vocab = Some(first);
        self
    }

    /// Stop each draft where the model's most likely token has a probability below `p_min`
    /// ([`ModelDrafter::with_p_min`], `kindle serve --draft-p-min`). Errors: `p_min` outside
    /// 0 to 1.
    pub fn with_p_min(mut self, p_min: f32) -> Result<Self, ServerError> {
        if !(0.0..=1.0).contains(&p_min) {
            return Err(ServerError::InvalidSetting {
                name: "--draft-p-min",
                value: p_min.to_string(),
                expected: "a probability, between 0 and 1",
            });
        }
        self.p_min = p_min;
        Ok(self)
    }
}

impl<D: PagedModel + Send + Sync + 'static> DraftModel<D> {
    /// Draft with `model`, opening its pool of `blocks` blocks of `block_size` tokens for
    /// `sequences` caches at once (size it as the target's: every running sequence may hold a
    /// drafter, whose cache reserves its capacity). A drafter that finds the pool full gets
    /// a cache of its own instead.
    pub fn pooled(
        mut model: D,
        blocks: usize,
        block_size: usize,
        sequences: usize,
    ) -> Result<Self, ServerError> {
        crate::pool::open_pool(&mut model, blocks, block_size, sequences)?;
        let model = Arc::new(model);
        let pool: Arc<dyn DraftPool<D::Cache>> = Arc::clone(&model) as _;
        Ok(DraftModel {
            model,
            vocab: None,
            p_min: 0.0,
            pool: Some(pool),
        })
    }
}

impl<D> DraftSource for DraftModel<D>
where
    D: LanguageModel + Send + Sync + 'static,
{
    fn drafter(
        &self,
        capacity: usize,
        sampler: Sampler,
        prompt: &[u32],
        p_min: Option<f32>,
    ) -> Result<(Box<dyn Drafter>, usize), GenerateError> {
        let pooled = match &self.pool {
            Some(pool) => pool.cache(prompt, capacity)?,
            None => None,
        };
        let (session, reused) = match pooled {
            Some((cache, reused)) => (Session::with_prefix(cache, &prompt[..reused]), reused),
            None => (Session::new(&self.model, capacity)?, 0),
        };
        let drafter = ModelDrafter::with_session(Arc::clone(&self.model), session, sampler);
        let drafter = match self.vocab {
            Some(first) => drafter.with_vocab(first)?,
            None => drafter,
        }
        .with_p_min(p_min.unwrap_or(self.p_min))?;
        let drafter: Box<dyn Drafter> = match &self.pool {
            Some(pool) => Box::new(Publishing {
                drafter,
                pool: Arc::clone(pool),
            }),
            None => Box::new(drafter),
        };
        Ok((drafter, reused))
    }

    fn pool_stats(&self) -> Option<kindle_generate::BlockStats> {
        self.pool.as_ref().and_then(|pool| pool.stats())
    }

    fn p_min(&self) -> f32 {
        self.p_min
    }
}

/// A draft model's paged pool, through its cache type: what [`DraftModel::pooled`] keeps of
/// a [`PagedModel`].
trait DraftPool<C>: Send + Sync {
    /// A cache for `capacity` tokens holding `prompt`'s longest published prefix, and its
    /// length; `None` when the pool is full.
    fn cache(&self, prompt: &[u32], capacity: usize) -> Result<Option<(C, usize)>, GenerateError>;
    /// Index the full blocks of `cache`, which holds `tokens`.
    fn publish(&self, cache: &C, tokens: &[u32]);
    /// Where the pool's blocks are.
    fn stats(&self) -> Option<kindle_generate::BlockStats>;
}

impl<D: PagedModel + Send + Sync> DraftPool<D::Cache> for D {
    fn cache(
        &self,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Option<(D::Cache, usize)>, GenerateError> {
        self.pooled_cache(prompt, capacity)
            .map_err(|e| GenerateError::Model(Box::new(e)))
    }

    fn publish(&self, cache: &D::Cache, tokens: &[u32]) {
        PagedModel::publish(self, cache, tokens);
    }

    fn stats(&self) -> Option<kindle_generate::BlockStats> {
        self.pool_stats()
    }
}

/// A pooled draft's drafter: after each proposal the full blocks of its cache that hold the
/// context are published (not those of the draft's own tokens, which the next proposal may
/// overwrite).
struct Publishing<D: LanguageModel> {
    drafter: ModelDrafter<Arc<D>>,
    pool: Arc<dyn DraftPool<D::Cache>>,
}

impl<D: LanguageModel> Drafter for Publishing<D> {
    fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        self.drafter.prefill(context)?;
        self.publish(context.len());
        Ok(())
    }

    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.drafter.propose(context, max, out)?;
        self.publish(context.len());
        Ok(())
    }

    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.drafter.propose_until(context, max, ends, out)?;
        self.publish(context.len());
        Ok(())
    }

    fn length_follows_draws(&self) -> bool {
        self.drafter.length_follows_draws()
    }

    fn accepted(&mut self, proposed: usize, accepted: usize) {
        self.drafter.accepted(proposed, accepted);
    }
}

impl<D: LanguageModel> Publishing<D> {
    /// Publish the cache's full blocks among its first `len` tokens.
    fn publish(&self, len: usize) {
        let session = self.drafter.session();
        let tokens = session.tokens();
        self.pool
            .publish(session.cache(), &tokens[..len.min(tokens.len())]);
    }
}

/// The server's draft model and its default draft length.
pub struct Drafting {
    source: Box<dyn DraftSource>,
    draft_max: usize,
    draft_min: usize,
}

/// What a request drafting with the server's draft model gets unless it says otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftDefaults {
    /// Most tokens drafted per step (`--draft-max`).
    pub draft_max: usize,
    /// The shortest draft verified (`--draft-min`; 0 or 1: every draft).
    pub draft_min: usize,
    /// Where a draft ends (`--draft-p-min`; 0: never early).
    pub p_min: f32,
}

impl Drafting {
    /// Draft with `source`, `draft_max` tokens a step unless a request says otherwise
    /// (`kindle_draft_max`). Errors: a `draft_max` outside 1 to
    /// [`MAX_DRAFT`].
    pub fn new(source: impl DraftSource + 'static, draft_max: usize) -> Result<Self, ServerError> {
        if !(1..=MAX_DRAFT).contains(&draft_max) {
            return Err(ServerError::InvalidSetting {
                name: "--draft-max",
                value: draft_max.to_string(),
                expected: "between 1 and 14 (a verification pass of 16 rows or more can take a prefill path, whose rows can differ in their last bits from one-token passes)",
            });
        }
        Ok(Drafting {
            source: Box::new(source),
            draft_max,
            draft_min: 0,
        })
    }

    /// Verify only drafts of at least `min` tokens unless a request says otherwise
    /// (`kindle_draft_min`; [`Speculator::with_draft_min`]). A sampled request whose drafts
    /// end where the draft is unsure (`--draft-p-min`) verifies every draft instead: dropping
    /// the short ones would change its output distribution. Errors: `min` above the draft
    /// length.
    pub fn with_draft_min(mut self, min: usize) -> Result<Self, ServerError> {
        if min > self.draft_max {
            return Err(ServerError::InvalidSetting {
                name: "--draft-min",
                value: min.to_string(),
                expected: "at most the draft length (--draft-max)",
            });
        }
        self.draft_min = min;
        Ok(self)
    }

    /// What a request gets unless it says otherwise.
    pub fn defaults(&self) -> DraftDefaults {
        DraftDefaults {
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            p_min: self.source.p_min(),
        }
    }

    /// Tokens drafted per step unless a request says otherwise.
    pub fn draft_max(&self) -> usize {
        self.draft_max
    }

    /// A drafter for one sequence (see [`DraftSource::drafter`]) that takes in the prompt
    /// only when it first proposes: a sequence that never runs alone never drafts, and then
    /// costs the draft model nothing. Returns it and how many tokens of `prompt` its cache
    /// holds.
    pub fn drafter(
        &self,
        capacity: usize,
        sampler: Sampler,
        prompt: &[u32],
        p_min: Option<f32>,
    ) -> Result<(Box<dyn Drafter>, usize), GenerateError> {
        let (drafter, reused) = self.source.drafter(capacity, sampler, prompt, p_min)?;
        Ok((Box::new(Lazy(drafter)), reused))
    }

    /// Where the blocks of the draft's own paged pool are, if it has one.
    pub fn pool_stats(&self) -> Option<kindle_generate::BlockStats> {
        self.source.pool_stats()
    }
}

/// A drafter whose [`Drafter::prefill`] is left to its first proposal (a draft model's
/// proposal runs whatever its cache lacks of the context first).
struct Lazy(Box<dyn Drafter>);

impl Drafter for Lazy {
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.0.propose(context, max, out)
    }

    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.0.propose_until(context, max, ends, out)
    }

    fn length_follows_draws(&self) -> bool {
        self.0.length_follows_draws()
    }

    fn accepted(&mut self, proposed: usize, accepted: usize) {
        self.0.accepted(proposed, accepted);
    }
}

/// How a job drafts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobDraft {
    /// By prompt lookup (`kindle_lookup_ngram`), at every decode step.
    Lookup(Lookup),
    /// With the server's draft model, this many tokens a step, while the sequence runs alone.
    Model {
        /// Most tokens drafted per step.
        draft_max: usize,
        /// Where a draft ends (`kindle_draft_p_min`); `None`: the server's `--draft-p-min`.
        p_min: Option<f32>,
        /// The shortest draft verified (`kindle_draft_min` or the server's `--draft-min`).
        draft_min: usize,
    },
}

/// `seq` drafting by prompt lookup (n-grams from 2 tokens, or from 1 when `ngram` is 1, as
/// `kindle generate`).
pub(crate) fn with_lookup<M: PagedModel, D: kindle_generate::TokenDecoder>(
    seq: Sequence<M, D>,
    lookup: Lookup,
) -> Result<Sequence<M, D>, String> {
    let drafter = PromptLookup::new(lookup.ngram)
        .and_then(|d| d.with_min(lookup.ngram.min(2)))
        .map_err(|e| e.to_string())?;
    let speculator = Speculator::new(Box::new(drafter), lookup.draft_max)
        .and_then(|s| s.with_draft_min(lookup.draft_min))
        .map_err(|e| e.to_string())?;
    seq.with_speculator(speculator).map_err(|e| e.to_string())
}

/// Mixed into a request's seed for its draft model's sampler.
pub(crate) const DRAFT_SEED: u64 = 0x5eed_d4af;

/// A job's side of its drafter.
pub(crate) struct DraftJob<'a> {
    /// The draft's sampler configuration (the request's, with a seed of its own).
    pub sampler: kindle_sampling::SamplerConfig,
    /// The drafter's cache capacity: the job's.
    pub capacity: usize,
    /// The job's prompt.
    pub prompt: &'a [u32],
    /// Whether the drafter's cache may start with a cached prefix of it.
    pub reuse: bool,
    /// Where a draft ends; `None`: the server's `--draft-p-min`.
    pub p_min: Option<f32>,
    /// The shortest draft verified.
    pub draft_min: usize,
}

/// `seq` drafting with the server's draft model, `draft_max` tokens a step, for `job` (the
/// prompt tokens its drafter's cache starts with counted in `metrics`).
pub(crate) fn with_draft_model<M: PagedModel, D: kindle_generate::TokenDecoder>(
    seq: Sequence<M, D>,
    drafting: Option<&Drafting>,
    draft_max: usize,
    job: DraftJob<'_>,
    metrics: &crate::metrics::Metrics,
) -> Result<Sequence<M, D>, String> {
    let drafting = drafting.ok_or("this server has no draft model (kindle serve --draft-model)")?;
    let mut sampler = Sampler::new(job.sampler).map_err(|e| e.to_string())?;
    sampler.set_prompt_len(job.prompt.len());
    let reuse = if job.reuse { job.prompt } else { &[] };
    let (drafter, reused) = drafting
        .drafter(job.capacity, sampler, reuse, job.p_min)
        .map_err(|e| format!("the draft model: {e}"))?;
    metrics
        .draft_prefix_hit_tokens
        .fetch_add(reused as u64, std::sync::atomic::Ordering::SeqCst);
    let speculator = Speculator::new(drafter, draft_max)
        .and_then(|s| s.with_draft_min(job.draft_min))
        .map_err(|e| e.to_string())?;
    seq.with_speculator(speculator).map_err(|e| e.to_string())
}
