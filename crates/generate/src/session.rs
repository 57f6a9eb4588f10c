//! A sequence's cache together with the tokens in it.

use std::fmt;

use crate::error::GenerateError;
use crate::model::{LanguageModel, ModelCache};

/// A model cache plus the exact tokens it holds, so a new prompt can reuse the longest common
/// prefix (chat turns) and the rest of the cache is rolled back on a mismatch.
///
/// Invariant: `tokens().len() == cache().len()`, and `tokens()` are the tokens that were fed to
/// the model, in order, less those a sliding cache discarded (see
/// [`ModelCache::sliding_keep`]): when the cache discards `n` tokens after its first `keep`,
/// the session drops the same ones, so prefix reuse still compares what the cache holds.
/// Generation borrows the session mutably; after it, the session holds the
/// prompt and the generated tokens that were fed back (all but the last generated token, which
/// was sampled but never run through the model).
pub struct Session<M: LanguageModel> {
    cache: M::Cache,
    tokens: Vec<u32>,
}

impl<M: LanguageModel> Session<M> {
    /// A fresh session with a cache of `capacity` tokens (`model.new_cache(capacity)`).
    ///
    /// The usable context is the smaller of `capacity` and `model.context_length()`.
    pub fn new(model: &M, capacity: usize) -> Result<Self, GenerateError> {
        let cache = model.new_cache(capacity).map_err(GenerateError::model)?;
        Ok(Self::from_cache(cache))
    }

    /// Wrap an existing cache. It is emptied first: its tokens are not known.
    pub fn from_cache(mut cache: M::Cache) -> Self {
        cache.truncate(0);
        Session {
            cache,
            tokens: Vec::new(),
        }
    }

    /// Wrap a cache that already holds `tokens` (its first `tokens.len()` positions, as a
    /// [`PagedModel::pooled_cache`](crate::PagedModel::pooled_cache) with a reused prefix
    /// does); anything after them is rolled back.
    ///
    /// # Panics
    /// If the cache holds fewer than `tokens.len()` tokens.
    pub fn with_prefix(mut cache: M::Cache, tokens: &[u32]) -> Self {
        assert!(
            cache.len() >= tokens.len(),
            "a cache of {} tokens cannot hold a prefix of {}",
            cache.len(),
            tokens.len()
        );
        cache.truncate(tokens.len());
        Session {
            cache,
            tokens: tokens.to_vec(),
        }
    }

    /// The tokens held (fed to the model so far).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of tokens held.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The cache's capacity in tokens.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Whether the cache slides (discards old tokens when full) rather than filling up.
    pub fn slides(&self) -> bool {
        self.cache.sliding_keep().is_some()
    }

    /// The usable context for `model`: `min(capacity, model.context_length())`.
    pub fn context_length(&self, model: &M) -> usize {
        self.capacity().min(model.context_length())
    }

    /// The cache (read-only: changing it behind the session's back would break the invariant).
    pub fn cache(&self) -> &M::Cache {
        &self.cache
    }

    /// Give up the session, keeping the cache.
    pub fn into_cache(self) -> M::Cache {
        self.cache
    }

    /// Forget every token from position `len` on (cache and tokens). A cache that cannot roll
    /// back that far (see [`ModelCache::truncate`]) keeps fewer: [`len`](Self::len) says how
    /// many, and the caller feeds the rest again.
    pub fn truncate(&mut self, len: usize) {
        if len < self.tokens.len() {
            self.cache.truncate(len);
            let held = self.cache.len().min(len);
            self.tokens.truncate(held);
        }
    }

    /// Forget all tokens.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// An independent copy (forked cache, copied tokens).
    pub fn fork(&self) -> Self {
        Session {
            cache: self.cache.fork(),
            tokens: self.tokens.clone(),
        }
    }

    /// Length of the longest common prefix of the held tokens and `tokens`.
    pub fn common_prefix_len(&self, tokens: &[u32]) -> usize {
        self.tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Make the session hold exactly `tokens`: keep the common prefix, roll back the rest and
    /// feed the remaining tokens in one forward pass (their logits are dropped). Returns how many
    /// tokens were fed. Used to share a prompt prefix between forks (several samples, beams).
    ///
    /// Errors: [`GenerateError::PromptTooLong`] beyond the usable context,
    /// [`GenerateError::TokenOutOfVocab`], or a model error (the session is then rolled back to
    /// the common prefix).
    pub fn prefill(&mut self, model: &M, tokens: &[u32]) -> Result<usize, GenerateError> {
        let limit = self.context_length(model);
        if tokens.len() > limit {
            return Err(GenerateError::PromptTooLong {
                prompt_tokens: tokens.len(),
                context_length: limit,
            });
        }
        crate::error::check_vocab(tokens, model.vocab_size())?;
        let reuse = self.common_prefix_len(tokens);
        self.truncate(reuse);
        let rest = &tokens[self.len()..];
        if !rest.is_empty() {
            self.forward_last(model, rest)?;
        }
        Ok(rest.len())
    }

    /// Feed `tokens` to the model; on success they are held and the last position's logits
    /// come back. On failure the session is rolled back to where it was.
    pub(crate) fn forward_last(
        &mut self,
        model: &M,
        tokens: &[u32],
    ) -> Result<Vec<f32>, GenerateError> {
        let before = (self.tokens.len(), self.cache.discarded());
        let result = model.forward_last(tokens, &mut self.cache);
        self.after_forward(before, tokens, result, 1, model.vocab_size())
    }

    /// [`forward_last`](Self::forward_last) for the token ids in `rows` only
    /// ([`LanguageModel::forward_last_in`]: the others are `-inf`).
    pub(crate) fn forward_last_in(
        &mut self,
        model: &M,
        tokens: &[u32],
        rows: &[std::ops::Range<usize>],
    ) -> Result<Vec<f32>, GenerateError> {
        let before = (self.tokens.len(), self.cache.discarded());
        let result = model.forward_last_in(tokens, &mut self.cache, rows);
        self.after_forward(before, tokens, result, 1, model.vocab_size())
    }

    /// Feed each session its tokens in one batched forward pass; each gets back its last
    /// position's logits. On a model error every session is rolled back.
    pub(crate) fn forward_batch(
        model: &M,
        items: &mut [(&[u32], &mut Session<M>)],
    ) -> Result<Vec<Vec<f32>>, GenerateError> {
        let before: Vec<(usize, usize)> = items
            .iter()
            .map(|(_, s)| (s.tokens.len(), s.cache.discarded()))
            .collect();
        let result = {
            let mut batch: Vec<(&[u32], &mut M::Cache)> =
                items.iter_mut().map(|(t, s)| (*t, &mut s.cache)).collect();
            model.forward_batch(&mut batch)
        };
        let rows = match result {
            Ok(rows) if rows.len() == items.len() => rows,
            other => {
                for ((_, session), &before) in items.iter_mut().zip(&before) {
                    let len = session.follow_discards(before);
                    session.cache.truncate(len);
                    let held = session.cache.len().min(len);
                    session.tokens.truncate(held);
                }
                return Err(match other {
                    Err(e) => GenerateError::model(e),
                    Ok(rows) => GenerateError::LogitsLength {
                        expected: items.len(),
                        actual: rows.len(),
                    },
                });
            }
        };
        let vocab = model.vocab_size();
        items
            .iter_mut()
            .zip(before)
            .zip(rows)
            .map(|(((tokens, session), before), row)| {
                session.after_forward(before, tokens, Ok(row), 1, vocab)
            })
            .collect()
    }

    /// As [`forward_last`](Self::forward_last), with the logits of every position.
    pub(crate) fn forward_all(
        &mut self,
        model: &M,
        tokens: &[u32],
    ) -> Result<Vec<f32>, GenerateError> {
        let before = (self.tokens.len(), self.cache.discarded());
        let result = model.forward_all(tokens, &mut self.cache);
        self.after_forward(before, tokens, result, tokens.len(), model.vocab_size())
    }

    /// Drop from `tokens` what the cache discarded since `before` (`(tokens held, discarded
    /// count)` before a forward pass), as the cache did; returns the number of tokens held
    /// before the pass still held now.
    fn follow_discards(&mut self, before: (usize, usize)) -> usize {
        let (held, discarded_before) = before;
        let n = self.cache.discarded().saturating_sub(discarded_before);
        if n == 0 {
            return held;
        }
        let keep = self.cache.sliding_keep().unwrap_or(0);
        let start = keep.min(self.tokens.len());
        let end = (start + n).min(self.tokens.len());
        self.tokens.drain(start..end);
        held - (end - start)
    }

    fn after_forward(
        &mut self,
        before: (usize, usize),
        tokens: &[u32],
        result: Result<Vec<f32>, M::Error>,
        rows: usize,
        vocab: usize,
    ) -> Result<Vec<f32>, GenerateError> {
        let before = self.follow_discards(before);
        let check = match result {
            Err(e) => Err(GenerateError::model(e)),
            Ok(logits) if logits.len() != rows * vocab => Err(GenerateError::LogitsLength {
                expected: rows * vocab,
                actual: logits.len(),
            }),
            Ok(_) if self.cache.len() != before + tokens.len() => Err(GenerateError::CacheLength {
                expected: before + tokens.len(),
                actual: self.cache.len(),
            }),
            Ok(logits) => Ok(logits),
        };
        match check {
            Ok(logits) => {
                self.tokens.extend_from_slice(tokens);
                Ok(logits)
            }
            Err(e) => {
                self.cache.truncate(before);
                let held = self.cache.len().min(before);
                self.tokens.truncate(held);
                Err(e)
            }
        }
    }
}

impl<M: LanguageModel> fmt::Debug for Session<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("len", &self.tokens.len())
            .field("capacity", &self.cache.capacity())
            .field("tokens", &self.tokens)
            .finish()
    }
}
