//! The narrow seam between the generation loop and a model.

use std::ops::Range;

/// Key/value state of one sequence, owned by the caller and handed to each forward pass.
///
/// Its length is the number of tokens already processed (the position of the next token).
pub trait ModelCache {
    /// Tokens already held.
    fn len(&self) -> usize;
    /// Whether no token is held yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Most tokens the cache can hold.
    fn capacity(&self) -> usize;
    /// Forget every token from position `len` on (rollback). `len` beyond the length is a no-op.
    /// A cache that cannot roll back that far (one whose local layers keep only a ring of
    /// their window) holds fewer tokens afterwards, possibly none: read [`len`](Self::len).
    fn truncate(&mut self, len: usize);
    /// The most tokens one forward pass may add, and the furthest back a rollback right
    /// after it is sure to reach (unlimited by default). Speculative decoding drafts fewer.
    fn max_pass(&self) -> usize {
        usize::MAX
    }
    /// An independent copy that can be extended separately (beam search, chat edits).
    fn fork(&self) -> Self
    where
        Self: Sized;
    /// For a cache that makes room instead of filling up (a sliding window, llama.cpp's context
    /// shift): how many tokens at its start it never discards. `None` (the default) for a cache
    /// of fixed capacity.
    ///
    /// A sliding cache, when a forward pass does not fit, discards the oldest tokens right
    /// after the kept ones (positions `keep..keep + n`) before running it, and counts them in
    /// [`discarded`](Self::discarded). Generation then goes on past the capacity.
    fn sliding_keep(&self) -> Option<usize> {
        None
    }
    /// Tokens discarded so far to make room (always 0 for a fixed cache). Only its change
    /// across one forward pass is used.
    fn discarded(&self) -> usize {
        0
    }
}

/// A causal language model: tokens in, next-token logits out.
pub trait LanguageModel {
    /// Per-sequence state (keys and values of past tokens).
    type Cache: ModelCache;
    /// What can go wrong in a forward pass.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Size of the logits rows.
    fn vocab_size(&self) -> usize;
    /// The longest sequence the model supports (its trained context length).
    fn context_length(&self) -> usize;
    /// A fresh, empty cache for up to `capacity` tokens.
    fn new_cache(&self, capacity: usize) -> Result<Self::Cache, Self::Error>;
    /// Run `tokens` after the ones in `cache`, append them to it, and return the logits of the
    /// last position (`vocab_size()` values).
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut Self::Cache,
    ) -> Result<Vec<f32>, Self::Error>;
    /// As [`forward_last`](Self::forward_last), for the token ids in `rows` only: every
    /// other entry of the returned row is `-inf` (a speculative draft proposing from part of
    /// the vocabulary). The default computes the whole row and masks it; a model that skips
    /// the rest of its head reads less, and must give each id in `rows` the bits
    /// [`forward_last`](Self::forward_last) would.
    fn forward_last_in(
        &self,
        tokens: &[u32],
        cache: &mut Self::Cache,
        rows: &[Range<usize>],
    ) -> Result<Vec<f32>, Self::Error> {
        let mut logits = self.forward_last(tokens, cache)?;
        mask_outside(&mut logits, rows);
        Ok(logits)
    }
    /// As [`forward_last`](Self::forward_last), but return the logits of every position,
    /// row-major (`tokens.len() * vocab_size()` values).
    fn forward_all(&self, tokens: &[u32], cache: &mut Self::Cache)
    -> Result<Vec<f32>, Self::Error>;
    /// Run several sequences' new tokens, each after the tokens in its own cache, and return
    /// each sequence's last-position logits. The default runs them one after another; a model
    /// that packs them into one pass reads its weights once for the whole batch.
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut Self::Cache)],
    ) -> Result<Vec<Vec<f32>>, Self::Error> {
        batch
            .iter_mut()
            .map(|(tokens, cache)| self.forward_last(tokens, cache))
            .collect()
    }
    /// Run `task(i)` once for every `i` in `0..n`, on the threads the model computes with
    /// (the caller among them) where it has several, else one after another; return when
    /// all are done. Between passes the threads wait for the next one: a server lends them
    /// the work it does per sequence after a batched pass ([`Completion::run_all`]:
    /// sampling, logprobs, detokenising). The default runs the tasks in order on the
    /// caller. `task` does not unwind (its callers catch a panic inside it).
    ///
    /// [`Completion::run_all`]: crate::Completion::run_all
    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(task);
    }
}

/// A shared model is the model: one loaded draft model serves every sequence of a server,
/// each drafter holding an `Arc` of it and a cache of its own.
impl<M: LanguageModel + ?Sized> LanguageModel for std::sync::Arc<M> {
    type Cache = M::Cache;
    type Error = M::Error;

    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }

    fn context_length(&self) -> usize {
        (**self).context_length()
    }

    fn new_cache(&self, capacity: usize) -> Result<Self::Cache, Self::Error> {
        (**self).new_cache(capacity)
    }

    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut Self::Cache,
    ) -> Result<Vec<f32>, Self::Error> {
        (**self).forward_last(tokens, cache)
    }

    fn forward_last_in(
        &self,
        tokens: &[u32],
        cache: &mut Self::Cache,
        rows: &[Range<usize>],
    ) -> Result<Vec<f32>, Self::Error> {
        (**self).forward_last_in(tokens, cache, rows)
    }

    fn forward_all(
        &self,
        tokens: &[u32],
        cache: &mut Self::Cache,
    ) -> Result<Vec<f32>, Self::Error> {
        (**self).forward_all(tokens, cache)
    }

    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut Self::Cache)],
    ) -> Result<Vec<Vec<f32>>, Self::Error> {
        (**self).forward_batch(batch)
    }

    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        (**self).for_each_task(n, task)
    }
}

/// Set every entry of `logits` outside `rows` (ranges of token ids, in any order, clipped
/// to the row) to `-inf`.
pub fn mask_outside(logits: &mut [f32], rows: &[Range<usize>]) {
    let n = logits.len();
    let mut kept: Vec<Range<usize>> = rows.iter().map(|r| r.start.min(n)..r.end.min(n)).collect();
    kept.sort_by_key(|r| r.start);
    let mut from = 0;
    for r in kept {
        if r.start > from {
            logits[from..r.start].fill(f32::NEG_INFINITY);
        }
        from = from.max(r.end);
    }
    logits[from.min(n)..].fill(f32::NEG_INFINITY);
}

/// Where a paged pool's blocks are (used, cached, free): `kindle-blocks`' counts.
pub use kindle_blocks::BlockStats;

/// A model whose caches can come from one shared pool of fixed-size blocks with a prefix
/// index (paged attention's storage with automatic prefix caching): what `kindle serve` runs
/// on. A cache from the pool reserves the blocks for its whole capacity when it is made, so a
/// running sequence never runs out; blocks of finished sequences that were
/// [published](Self::publish) stay cached for later prompts until the pool needs the room.
pub trait PagedModel: LanguageModel {
    /// Make the pool: `blocks` blocks of `block_size` tokens, for at most `sequences` caches
    /// at once (a model whose local layers keep only their window sizes their blocks by it;
    /// caches of an earlier pool keep theirs until dropped).
    fn open_pool(
        &mut self,
        blocks: usize,
        block_size: usize,
        sequences: usize,
    ) -> Result<(), Self::Error>;

    /// A cache from the pool for a sequence starting with `prompt`, for up to `capacity`
    /// tokens: it already holds the prompt's longest published prefix of whole blocks (never
    /// the last prompt token, whose logits start generation; pass an empty `prompt` for no
    /// reuse). Returns the cache and how many tokens it holds, or `Ok(None)` when the pool
    /// cannot hold `capacity` more tokens now (wait for sequences to finish). An error when no
    /// pool is open.
    fn pooled_cache(
        &self,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Option<(Self::Cache, usize)>, Self::Error>;

    /// Index the full blocks of `cache`, which holds `tokens` (a [`Session`](crate::Session)'s
    /// tokens), so that later prompts starting with them reuse the blocks. Returns how many
    /// blocks were newly indexed (0 for a cache not from the pool).
    fn publish(&self, cache: &Self::Cache, tokens: &[u32]) -> usize;

    /// Where the pool's blocks are; `None` before [`open_pool`](Self::open_pool).
    fn pool_stats(&self) -> Option<BlockStats>;

    /// Where the blocks of the pool's local layers (those attending to a sliding window,
    /// kept apart: each sequence holds only its window of them) are; `None` for a model
    /// without such layers (the default) or before [`open_pool`](Self::open_pool).
    fn local_pool_stats(&self) -> Option<BlockStats> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_keeps_exactly_the_ranges() {
        let mut logits: Vec<f32> = (0..12).map(|i| i as f32).collect();
        mask_outside(&mut logits, &[7..9, 0..2, 1..3, 8..8, 11..20]);
        let kept: Vec<usize> = (0..12).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(kept, [0, 1, 2, 7, 8, 11]);
        assert!(kept.iter().all(|&i| logits[i] == i as f32));
        assert!(
            logits
                .iter()
                .all(|&l| l.is_finite() || l == f32::NEG_INFINITY)
        );
        let mut none = vec![1.0f32; 4];
        mask_outside(&mut none, &[]);
        assert!(none.iter().all(|&l| l == f32::NEG_INFINITY));
    }
}
