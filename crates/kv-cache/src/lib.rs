//! Keys and values of past tokens for kindle's transformer models: preallocated, written in
//! place, never recomputed.
//!
//! - [`KvCache`]: one sequence, contiguous per-layer buffers, stored as f32, f16 or int8
//!   ([`KvType`]); a local layer (sliding-window attention) can keep a ring of its window
//!   plus [`WINDOW_SLACK`] positions instead ([`KvCache::with_windows`]).
//! - [`SlidingWindowCache`]: a [`KvCache`] that never fills up: it keeps the first `keep` tokens
//!   (attention sinks) and, when full, discards half of the rest and re-rotates the keys that
//!   follow (llama.cpp's context shift with `--keep N`).
//! - [`PagedPool`]: many sequences in one pool of fixed-size blocks in host memory, each a
//!   [`PagedCache`], with copy-on-write forks and prefix caching (a prompt starting like an
//!   earlier one reuses its published blocks; the bookkeeping is `kindle-blocks`).
//!
//! [`KvStore`] is what a model needs from a single-sequence cache; [`KvCache`],
//! [`SlidingWindowCache`] and [`PagedCache`] implement it.
//!
//! **Invariant: the cache owns positions.** For every variant, [`KvStore::len`] is the number
//! of tokens held *and* the RoPE position of the next token; held tokens sit at positions
//! `0..len`, their keys rotated for those positions. A sliding window keeps this true by
//! re-rotating keys when it discards tokens ([`shift`]).
//!
//! ```
//! use burn::prelude::*;
//! use kindle_kv_cache::{KvCache, KvCacheConfig};
//!
//! let device = Device::flex();
//! let config = KvCacheConfig { n_layers: 2, n_kv_heads: 1, head_dim: 4, capacity: 8 };
//! assert_eq!(config.bytes(), 2 * 2 * 1 * 4 * 8 * 4);
//! let mut cache = KvCache::new(config, &device);
//!
//! // One forward pass of 3 tokens: every layer writes its keys and values...
//! for layer in 0..2 {
//!     let k = Tensor::<4>::ones([1, 1, 3, 4], &device);
//!     let v = Tensor::<4>::ones([1, 1, 3, 4], &device);
//!     let (keys, values) = cache.update(layer, k, v).unwrap();
//!     assert_eq!(keys.dims(), [1, 1, 3, 4]);
//! }
//! // ...then the cache moves on by 3 positions.
//! cache.advance(3).unwrap();
//! assert_eq!(cache.len(), 3);
//! cache.truncate(1);
//! assert_eq!(cache.len(), 1);
//! ```

use burn::prelude::*;
use thiserror::Error;

mod contiguous;
mod host;
mod paged;
pub mod shift;
mod sliding;
mod storage;

pub use contiguous::{KvCache, WINDOW_SLACK, ring_slots};
pub use host::{HostKvLayer, Int8Runs};
pub use kindle_blocks::BlockStats;
pub use paged::{PagedCache, PagedPool};
pub use sliding::SlidingWindowCache;
pub use storage::KvType;

/// Whether `device`'s tensors live in host memory (Burn's CPU backends, flex and ndarray):
/// the one answer to "is this a CPU device" for every kindle crate (`kindle_model::device`
/// re-exports it). Reads the device's backend; opens and constructs nothing.
pub fn is_host_device(device: &burn::prelude::Device) -> bool {
    matches!(
        device.as_dispatch(),
        burn_dispatch::DispatchDevice::Flex(_) | burn_dispatch::DispatchDevice::NdArray(_)
    )
}

/// What a cache operation refused to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvCacheError {
    /// Writing `adding` tokens after `len` would pass the capacity.
    #[error(
        "KV cache full: {len} tokens held, {adding} more do not fit in a capacity of {capacity}"
    )]
    Full {
        /// Tokens held.
        len: usize,
        /// Tokens being written.
        adding: usize,
        /// Tokens the cache holds at most.
        capacity: usize,
    },
    /// A layer index outside the cache.
    #[error("KV cache has {n_layers} layers; layer {layer} does not exist")]
    NoSuchLayer {
        /// The index asked for.
        layer: usize,
        /// Layers in the cache.
        n_layers: usize,
    },
    /// Keys or values whose shape does not fit the cache.
    #[error(
        "KV cache layer {layer}: expected keys/values of shape [1, {n_kv_heads}, T, {head_dim}], got {got:?}"
    )]
    BadShape {
        /// The layer written.
        layer: usize,
        /// KV heads the cache holds.
        n_kv_heads: usize,
        /// Width of a head.
        head_dim: usize,
        /// The shape given.
        got: Vec<usize>,
    },
    /// A sliding window whose kept prefix leaves no room for anything else.
    #[error("sliding window: keeping {keep} tokens leaves no room in a capacity of {capacity}")]
    KeepTooLarge {
        /// Tokens never discarded.
        keep: usize,
        /// Tokens the window holds.
        capacity: usize,
    },
    /// A paged pool with blocks of zero tokens or no blocks.
    #[error("paged KV pool: {n_blocks} blocks of {block_size} tokens is not a usable pool")]
    BadPool {
        /// Blocks asked for.
        n_blocks: usize,
        /// Tokens per block.
        block_size: usize,
    },
    /// More tokens in one forward pass than a cache with ring layers takes at once.
    #[error(
        "{adding} tokens in one pass; this cache (local layers keep a ring of their window) \
         takes at most {most} at a time"
    )]
    PassTooLong {
        /// Tokens in the pass.
        adding: usize,
        /// The most one pass may add.
        most: usize,
    },
    /// The memory for a paged pool could not be allocated.
    #[error("the KV pool's memory could not be allocated ({})", allocation_size(*.bytes))]
    Allocation {
        /// Bytes asked for per layer's keys or values (`usize::MAX`: more than can be
        /// counted).
        bytes: usize,
    },
    /// A sliding window given a key rotation for a different number of layers than it holds.
    #[error("sliding window: {given} key rotations for a cache of {n_layers} layers")]
    RotationCount {
        /// Rotations given.
        given: usize,
        /// Layers in the cache.
        n_layers: usize,
    },
    /// The paged pool has too few free blocks.
    #[error("paged KV pool out of blocks: {needed} needed, {free} free or cached")]
    OutOfBlocks {
        /// Blocks the operation needs.
        needed: usize,
        /// Blocks free or cached (evictable).
        free: usize,
    },
}

/// [`KvCacheError::Allocation`]'s size, for people.
fn allocation_size(bytes: usize) -> String {
    if bytes == usize::MAX {
        "more bytes than a 64-bit address can count for one layer".into()
    } else {
        format!("{bytes} bytes for one layer's keys or values")
    }
}

/// Shape of a cache: how many layers, heads and positions it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Transformer layers (one key and one value buffer each).
    pub n_layers: usize,
    /// Key/value heads per layer (fewer than query heads with grouped-query attention).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Most tokens the cache holds (the run's context length).
    pub capacity: usize,
}

impl KvCacheConfig {
    /// Bytes of one token's keys and values over all layers (f32 elements).
    pub fn bytes_per_token(&self) -> usize {
        self.bytes_per_token_as(KvType::F32)
    }

    /// Bytes of one token's keys and values over all layers, stored as `kv_type` (int8
    /// includes its f32 scale per head).
    pub fn bytes_per_token_as(&self, kv_type: KvType) -> usize {
        2 * self.n_layers * self.n_kv_heads * kv_type.bytes_per_head(self.head_dim)
    }

    /// Bytes the whole preallocated f32 cache takes:
    /// `2 x layers x kv_heads x head_dim x capacity x 4`, with no other overhead
    /// (`usize::MAX` where that does not fit).
    pub fn bytes(&self) -> usize {
        self.bytes_per_token().saturating_mul(self.capacity)
    }

    /// Bytes the whole preallocated cache takes stored as `kv_type` (`usize::MAX` where
    /// that does not fit).
    pub fn bytes_as(&self, kv_type: KvType) -> usize {
        self.bytes_per_token_as(kv_type)
            .saturating_mul(self.capacity)
    }

    /// Bytes of a [`KvCache::with_windows`] cache stored as `kv_type`: each layer's positions
    /// ([`ring_slots`]) times its bytes per position (`usize::MAX` where that does not fit).
    pub fn bytes_with_windows(&self, kv_type: KvType, windows: &[Option<usize>]) -> usize {
        let per_slot = 2 * self.n_kv_heads * kv_type.bytes_per_head(self.head_dim);
        (0..self.n_layers)
            .map(|l| {
                ring_slots(windows.get(l).copied().flatten(), self.capacity)
                    .saturating_mul(per_slot)
            })
            .fold(0usize, usize::saturating_add)
    }

    /// Check that `keys` and `values` are `[1, n_kv_heads, T, head_dim]` and return `T`.
    pub(crate) fn check_shape(
        &self,
        layer: usize,
        keys: &Tensor<4>,
        values: &Tensor<4>,
    ) -> Result<usize, KvCacheError> {
        if layer >= self.n_layers {
            return Err(KvCacheError::NoSuchLayer {
                layer,
                n_layers: self.n_layers,
            });
        }
        let [b, h, t, d] = keys.dims();
        if b != 1 || h != self.n_kv_heads || d != self.head_dim || values.dims() != keys.dims() {
            return Err(KvCacheError::BadShape {
                layer,
                n_kv_heads: self.n_kv_heads,
                head_dim: self.head_dim,
                got: keys.dims().to_vec(),
            });
        }
        Ok(t)
    }
}

/// What a model needs from the cache of one sequence.
///
/// A forward pass of `T` tokens calls [`prepare`](Self::prepare)`(T)` first, then reads
/// [`next_position`](Self::next_position) as the RoPE offset of its first token, calls
/// [`update`](Self::update) once per layer (or, computing on the host, writes through
/// [`host_layer`](Self::host_layer)), and [`advance`](Self::advance)`(T)` at the end.
pub trait KvStore {
    /// The cache's shape.
    fn config(&self) -> &KvCacheConfig;

    /// Tokens held.
    fn len(&self) -> usize;

    /// Whether no token is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most tokens held at once.
    fn capacity(&self) -> usize;

    /// RoPE position of the next token: always [`len`](Self::len) (the cache owns positions).
    fn next_position(&self) -> usize {
        self.len()
    }

    /// Make room for `adding` tokens before a forward pass: a fixed cache checks that they
    /// fit; a sliding window discards old tokens (which changes [`len`](Self::len)).
    fn prepare(&mut self, adding: usize) -> Result<(), KvCacheError>;

    /// The most tokens one forward pass may add ([`prepare`](Self::prepare) refuses more):
    /// unlimited by default; a cache whose local layers keep rings of their window plus
    /// [`WINDOW_SLACK`] positions takes `WINDOW_SLACK + 1` at a time, and the model splits
    /// longer passes.
    fn max_pass(&self) -> usize {
        usize::MAX
    }

    /// Write the keys (already rotated at positions `len..len + T`) and values of `T` new
    /// tokens for `layer` (`[1, n_kv_heads, T, head_dim]`), and return the f32 keys and values
    /// of all `len + T` positions for attention.
    fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError>;

    /// Whether the storage is host memory (a CPU device), so that
    /// [`host_layer`](Self::host_layer) gives views instead of `None`.
    fn host_resident(&self) -> bool;

    /// `layer`'s keys and values viewed in place on the host, for a forward pass computing on
    /// the host: it writes its `T` new tokens through the view instead of calling
    /// [`update`](Self::update), then calls [`advance`](Self::advance) as usual. `Ok(None)`
    /// when the storage is not [host resident](Self::host_resident).
    fn host_layer(&mut self, layer: usize) -> Result<Option<HostKvLayer<'_>>, KvCacheError>;

    /// The f32 keys and values of the `len` tokens held in `layer`.
    fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError>;

    /// Move the length on by `n` once every layer has been updated.
    fn advance(&mut self, n: usize) -> Result<(), KvCacheError>;

    /// Forget every token from position `len` on (rollback); a `len` past the end is a no-op.
    fn truncate(&mut self, len: usize);

    /// Forget every token.
    fn reset(&mut self);

    /// An independent cache holding the same tokens.
    fn fork(&self) -> Self
    where
        Self: Sized;

    /// Bytes of the storage, scales included.
    fn bytes(&self) -> usize;
}
