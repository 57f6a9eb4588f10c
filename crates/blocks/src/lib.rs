//! Block bookkeeping for a paged KV cache, with no storage and no tensors: which of a pool's
//! fixed-size blocks are free, how many sequences hold each, and an index of full blocks by
//! the tokens they hold, so that a sequence starting with the same tokens as an earlier one
//! reuses its blocks instead of computing them again (vLLM's automatic prefix caching).
//!
//! The storage (`kindle-kv-cache`'s `PagedPool`) and a test's fake model both keep their
//! blocks with a [`BlockManager`]; each sequence keeps its own table of block ids.
//!
//! - A block is **used** while at least one sequence holds it ([`refcount`] > 0).
//! - A full block can be **published** ([`publish`]): indexed by its tokens *and every token
//!   before it*. When no sequence holds it any more it stays **cached** (its contents kept)
//!   until the pool needs the room: [`allocate`] takes free blocks first, then evicts cached
//!   ones, least recently released first.
//! - [`match_prefix`] finds the longest run of published blocks that hold a prompt's first
//!   tokens and holds them for the caller.
//!
//! Matching is exact, not just by hash: an index entry keeps its block's tokens and names the
//! block (and that block's generation, bumped whenever a block is unpublished or reused)
//! that precedes it, so a chain is followed only through blocks that still hold what they
//! held when the entry was made.
//!
//! ```
//! use kindle_blocks::BlockManager;
//!
//! let mut blocks = BlockManager::new(4, 2).unwrap(); // 4 blocks of 2 tokens
//! let prompt = [7, 8, 9, 10, 11];
//! let first = blocks.allocate(3).unwrap(); // room for 5 tokens
//! // ... the tokens are computed into the blocks' storage, then the full blocks published:
//! assert_eq!(blocks.publish(&first, &prompt), 2);
//! blocks.release_all(&first); // the sequence ends; its two full blocks stay cached
//! assert_eq!(blocks.stats().cached, 2);
//!
//! // A later prompt with the same first four tokens gets those two blocks back.
//! let reused = blocks.match_prefix(&[7, 8, 9, 10, 99, 100], 3);
//! assert_eq!(reused, first[..2]);
//! assert_eq!(blocks.stats().used, 2);
//! ```
//!
//! [`refcount`]: BlockManager::refcount
//! [`publish`]: BlockManager::publish
//! [`allocate`]: BlockManager::allocate
//! [`match_prefix`]: BlockManager::match_prefix

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use thiserror::Error;

/// What the block manager refused to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BlockError {
    /// A pool of no blocks, or of blocks of no tokens.
    #[error("paged KV pool: {n_blocks} blocks of {block_size} tokens is not a usable pool")]
    BadPool {
        /// Blocks asked for.
        n_blocks: usize,
        /// Tokens per block.
        block_size: usize,
    },
    /// Not enough free or cached blocks.
    #[error("paged KV pool: {needed} blocks needed, {available} free or cached")]
    OutOfBlocks {
        /// Blocks asked for.
        needed: usize,
        /// Blocks that could be handed out.
        available: usize,
    },
}

/// Where a pool's blocks are, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockStats {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub total: usize,
    /// Blocks held by at least one sequence.
    pub used: usize,
    /// Blocks held by none but kept for the prefix index (evicted when room is needed).
    pub cached: usize,
    /// Blocks holding nothing.
    pub free: usize,
}

/// One published block in the index.
#[derive(Debug, Clone)]
struct Entry {
    block: usize,
    /// The block before it in the chain, and that block's generation when this was indexed.
    parent: Option<(usize, u64)>,
    tokens: Box<[u32]>,
}

/// The bookkeeping of a pool of `n_blocks` blocks of `block_size` tokens (see the crate docs).
#[derive(Debug, Clone)]
pub struct BlockManager {
    block_size: usize,
    refcounts: Vec<u32>,
    /// Popped from the end, pushed when released: the most recently used memory first.
    free: Vec<usize>,
    used: usize,
    /// Published blocks by chain hash.
    index: HashMap<u64, Entry>,
    /// Each block's chain hash while it is published.
    published: Vec<Option<u64>>,
    /// Bumped whenever a block stops holding what an index entry says it holds.
    generation: Vec<u64>,
    /// Cached blocks (published, refcount 0) by the tick they were released at.
    lru: BTreeMap<u64, usize>,
    /// Each cached block's tick in `lru`.
    released_at: Vec<u64>,
    clock: u64,
}

/// The chain hash of a block holding `tokens` after the blocks hashed to `parent`.
fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parent.hash(&mut hasher);
    tokens.hash(&mut hasher);
    hasher.finish()
}

/// The index key of a companion of `owner` ([`BlockManager::publish_companion`]); its entry
/// names the owner, so a match is exact.
fn companion_key((block, generation): (usize, u64)) -> u64 {
    chain_hash(
        block as u64 ^ 0x9E37_79B9_7F4A_7C15,
        &[generation as u32, (generation >> 32) as u32],
    )
}

impl BlockManager {
    /// A pool of `n_blocks` free blocks of `block_size` tokens.
    pub fn new(n_blocks: usize, block_size: usize) -> Result<Self, BlockError> {
        if n_blocks == 0 || block_size == 0 {
            return Err(BlockError::BadPool {
                n_blocks,
                block_size,
            });
        }
        Ok(BlockManager {
            block_size,
            refcounts: vec![0; n_blocks],
            free: (0..n_blocks).rev().collect(),
            used: 0,
            index: HashMap::new(),
            published: vec![None; n_blocks],
            generation: vec![0; n_blocks],
            lru: BTreeMap::new(),
            released_at: vec![0; n_blocks],
            clock: 0,
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> usize {
        self.refcounts.len()
    }

    /// Blocks needed for `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Where the blocks are.
    pub fn stats(&self) -> BlockStats {
        BlockStats {
            block_size: self.block_size,
            total: self.n_blocks(),
            used: self.used,
            cached: self.lru.len(),
            free: self.free.len(),
        }
    }

    /// Blocks [`allocate`](Self::allocate) can hand out now (free, or cached and evictable).
    pub fn available(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Sequences holding `block`.
    ///
    /// # Panics
    /// If `block` is not a block of the pool.
    pub fn refcount(&self, block: usize) -> u32 {
        self.refcounts[block]
    }

    /// Whether `block` is in the prefix index.
    pub fn is_published(&self, block: usize) -> bool {
        self.published[block].is_some()
    }

    /// `n` blocks for one sequence (refcount 1 each): free ones first, then cached ones,
    /// least recently released first (they leave the index). All or nothing.
    pub fn allocate(&mut self, n: usize) -> Result<Vec<usize>, BlockError> {
        if n > self.available() {
            return Err(BlockError::OutOfBlocks {
                needed: n,
                available: self.available(),
            });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let block = match self.free.pop() {
                Some(block) => block,
                None => {
                    let (_, block) = self.lru.pop_first().expect("counted as available");
                    self.unpublish(block);
                    block
                }
            };
            self.refcounts[block] = 1;
            self.used += 1;
            out.push(block);
        }
        Ok(out)
    }

    /// One more sequence holds `block` (a fork, or a prefix match).
    ///
    /// # Panics
    /// If `block` is neither held nor cached (its contents are gone).
    pub fn retain(&mut self, block: usize) {
        if self.refcounts[block] == 0 {
            let tick = self.released_at[block];
            assert!(
                self.lru.remove(&tick) == Some(block),
                "retaining block {block}, which is free"
            );
            self.used += 1;
        }
        self.refcounts[block] += 1;
    }

    /// One sequence fewer holds `block`. With none left it is cached if published (its
    /// contents kept for the index), free otherwise.
    ///
    /// # Panics
    /// If no sequence holds `block`.
    pub fn release(&mut self, block: usize) {
        assert!(
            self.refcounts[block] > 0,
            "releasing block {block}, not held"
        );
        self.refcounts[block] -= 1;
        if self.refcounts[block] > 0 {
            return;
        }
        self.used -= 1;
        if self.published[block].is_some() {
            self.clock += 1;
            self.released_at[block] = self.clock;
            self.lru.insert(self.clock, block);
        } else {
            self.free.push(block);
        }
    }

    /// Release a sequence's blocks, last first: its tail is then evicted before its head,
    /// which other prompts are likelier to share.
    pub fn release_all(&mut self, blocks: &[usize]) {
        for &block in blocks.iter().rev() {
            self.release(block);
        }
    }

    /// Take `block` out of the index before its contents change (a sequence that holds it
    /// alone rewrites it after a rollback); entries chained after it stop matching.
    pub fn unpublish(&mut self, block: usize) {
        if let Some(hash) = self.published[block].take() {
            if self.index.get(&hash).is_some_and(|e| e.block == block) {
                self.index.remove(&hash);
            }
            self.generation[block] += 1;
            if self.refcounts[block] == 0 {
                // A cached block leaving the index holds nothing useful any more.
                let tick = self.released_at[block];
                if self.lru.remove(&tick) == Some(block) {
                    self.free.push(block);
                }
            }
        }
    }

    /// Index the full blocks of a sequence whose table is `blocks` and which holds `tokens`
    /// (`tokens[i * block_size..]` in `blocks[i]`), so that later prompts starting with the
    /// same tokens reuse them. Blocks already published are skipped, as is a block whose
    /// tokens (after the same prefix) another block already holds in the index. Returns how
    /// many blocks were newly published.
    pub fn publish(&mut self, blocks: &[usize], tokens: &[u32]) -> usize {
        let mut parent_hash = 0u64;
        let mut parent: Option<(usize, u64)> = None;
        let mut added = 0;
        for (&block, chunk) in blocks.iter().zip(tokens.chunks_exact(self.block_size)) {
            let hash = chain_hash(parent_hash, chunk);
            let canonical = match self.index.get(&hash) {
                Some(entry) if entry.parent == parent && *entry.tokens == *chunk => entry.block,
                Some(_) => return added, // a different chain with this hash: stop here
                None => {
                    if let Some(old) = self.published[block] {
                        // Published under another chain: its contents cannot have changed
                        // without an unpublish, so the tables disagree; do not index it twice.
                        debug_assert_ne!(old, hash);
                        return added;
                    }
                    self.index.insert(
                        hash,
                        Entry {
                            block,
                            parent,
                            tokens: chunk.into(),
                        },
                    );
                    self.published[block] = Some(hash);
                    added += 1;
                    block
                }
            };
            parent_hash = hash;
            parent = Some((canonical, self.generation[canonical]));
        }
        added
    }

    /// `block`'s generation: bumped each time it is unpublished (its contents about to change
    /// or be evicted), so that `(block, generation)` names what a published block holds.
    pub fn generation(&self, block: usize) -> u64 {
        self.generation[block]
    }

    /// Publish `block` as the **companion** of `owner` (a block and its [`generation`] in
    /// another manager: the same tokens, kept apart, as a sliding-window layer's blocks are
    /// kept apart from the global layers'), instead of by tokens: [`match_companion`] finds it
    /// while it is published (held, or cached until evicted). A block already published, or an
    /// owner that already has a companion, is left as it is; returns whether `block` was
    /// published. A manager's blocks are published either by tokens or as companions, not both.
    ///
    /// [`generation`]: Self::generation
    /// [`match_companion`]: Self::match_companion
    pub fn publish_companion(&mut self, block: usize, owner: (usize, u64)) -> bool {
        let key = companion_key(owner);
        if self.published[block].is_some() || self.index.contains_key(&key) {
            return false;
        }
        let entry = Entry {
            block,
            parent: Some(owner),
            tokens: Box::default(),
        };
        self.index.insert(key, entry);
        self.published[block] = Some(key);
        true
    }

    /// Whether `owner` has a published companion ([`publish_companion`](Self::publish_companion)).
    pub fn has_companion(&self, owner: (usize, u64)) -> bool {
        self.index
            .get(&companion_key(owner))
            .is_some_and(|e| e.parent == Some(owner))
    }

    /// `owner`'s published companion, now held once more by the caller; `None` if it has none.
    pub fn match_companion(&mut self, owner: (usize, u64)) -> Option<usize> {
        let block = self
            .index
            .get(&companion_key(owner))
            .filter(|e| e.parent == Some(owner))?
            .block;
        self.retain(block);
        Some(block)
    }

    /// The published blocks holding `tokens`' first full blocks, at most `max_blocks` of
    /// them, each now held once more by the caller (release them with the sequence).
    pub fn match_prefix(&mut self, tokens: &[u32], max_blocks: usize) -> Vec<usize> {
        let mut parent_hash = 0u64;
        let mut parent: Option<(usize, u64)> = None;
        let mut out = Vec::new();
        for chunk in tokens.chunks_exact(self.block_size).take(max_blocks) {
            let hash = chain_hash(parent_hash, chunk);
            let Some(entry) = self.index.get(&hash) else {
                break;
            };
            if entry.parent != parent || *entry.tokens != *chunk {
                break;
            }
            let block = entry.block;
            out.push(block);
            parent_hash = hash;
            parent = Some((block, self.generation[block]));
        }
        for &block in &out {
            self.retain(block);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_of_nothing_is_refused() {
        assert_eq!(
            BlockManager::new(0, 16).unwrap_err(),
            BlockError::BadPool {
                n_blocks: 0,
                block_size: 16
            }
        );
        assert!(BlockManager::new(4, 0).is_err());
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut m = BlockManager::new(3, 4).unwrap();
        let a = m.allocate(2).unwrap();
        assert_eq!(
            m.allocate(2).unwrap_err(),
            BlockError::OutOfBlocks {
                needed: 2,
                available: 1
            }
        );
        assert_eq!(m.stats().used, 2);
        m.release_all(&a);
        assert_eq!(m.stats().free, 3);
    }

    #[test]
    fn cached_blocks_are_evicted_least_recently_released_first() {
        let mut m = BlockManager::new(4, 1).unwrap();
        let a = m.allocate(2).unwrap();
        m.publish(&a, &[1, 2]);
        let b = m.allocate(2).unwrap();
        m.publish(&b, &[3, 4]);
        m.release_all(&a); // a's tail (token 2) first, then its head
        m.release_all(&b);
        assert_eq!(m.stats().cached, 4);
        // Two blocks needed: a's tail, then a's head go.
        let c = m.allocate(2).unwrap();
        assert_eq!(c, vec![a[1], a[0]]);
        assert!(m.match_prefix(&[1, 2], 2).is_empty());
        assert_eq!(m.match_prefix(&[3, 4], 2), b);
    }

    #[test]
    fn a_rewritten_block_breaks_the_chains_through_it() {
        let mut m = BlockManager::new(4, 2).unwrap();
        let a = m.allocate(2).unwrap();
        m.publish(&a, &[1, 2, 3, 4]);
        // The sequence rolls back into its first block: from there on its blocks change.
        m.unpublish(a[0]);
        // The second block's entry is still there, but it chains after a generation of the
        // first block that is gone.
        assert!(m.match_prefix(&[1, 2, 3, 4], 2).is_empty());
        m.unpublish(a[1]);
        // New contents in the same block ids are indexed afresh; the old chain stays gone.
        m.publish(&a, &[5, 6, 3, 4]);
        assert_eq!(m.match_prefix(&[5, 6, 3, 4], 2), a);
        assert!(m.match_prefix(&[1, 2, 3, 4], 2).is_empty());
    }

    #[test]
    fn a_companion_is_found_by_its_owner_until_evicted() {
        let mut m = BlockManager::new(2, 4).unwrap();
        let a = m.allocate(2).unwrap();
        assert!(m.publish_companion(a[0], (7, 0)));
        assert!(!m.publish_companion(a[1], (7, 0)), "one companion an owner");
        assert!(!m.publish_companion(a[0], (8, 0)), "published already");
        assert!(m.publish_companion(a[1], (7, 1)));
        assert!(m.has_companion((7, 0)) && !m.has_companion((8, 0)));
        m.release_all(&a);
        assert_eq!(m.stats().cached, 2);
        // Held again by a match; the other one is evicted by the next allocation.
        assert_eq!(m.match_companion((7, 1)), Some(a[1]));
        assert_eq!(m.allocate(1).unwrap(), vec![a[0]]);
        assert!(!m.has_companion((7, 0)));
        assert_eq!(m.match_companion((7, 0)), None);
        assert_eq!(m.generation(a[0]), 1);
    }

    #[test]
    fn a_duplicate_block_leaves_the_first_one_indexed() {
        let mut m = BlockManager::new(4, 2).unwrap();
        let a = m.allocate(2).unwrap();
        let b = m.allocate(2).unwrap();
        assert_eq!(m.publish(&a, &[1, 2, 3, 4]), 2);
        // b computed the same first block itself (it started before a published) and a
        // different second one: its second block chains after a's first.
        assert_eq!(m.publish(&b, &[1, 2, 9, 9]), 1);
        assert!(!m.is_published(b[0]));
        assert!(m.is_published(b[1]));
        assert_eq!(m.match_prefix(&[1, 2, 9, 9], 2), vec![a[0], b[1]]);
    }
}
