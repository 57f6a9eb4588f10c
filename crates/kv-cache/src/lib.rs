//! Keys and values of past tokens for kindle's transformer models: preallocated per layer,
//! written in place, never recomputed.
//!
//! The cache owns positions: its [`len`](KvCache::len) is the number of tokens already
//! processed, which is also the rotary-position offset of the next token.
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

/// What a cache operation refused to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvCacheError {
    /// Writing `adding` tokens after `len` would pass the capacity.
    #[error(
        "KV cache full: {len} tokens held, {adding} more do not fit in a capacity of {capacity}"
    )]
    Full {
        len: usize,
        adding: usize,
        capacity: usize,
    },
    /// A layer index outside the cache.
    #[error("KV cache has {n_layers} layers; layer {layer} does not exist")]
    NoSuchLayer { layer: usize, n_layers: usize },
    /// Keys or values whose shape does not fit the cache.
    #[error(
        "KV cache layer {layer}: expected keys/values of shape [1, {n_kv_heads}, T, {head_dim}], got {got:?}"
    )]
    BadShape {
        layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        got: Vec<usize>,
    },
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
        2 * self.n_layers * self.n_kv_heads * self.head_dim * std::mem::size_of::<f32>()
    }

    /// Bytes the whole preallocated cache takes:
    /// `2 x layers x kv_heads x head_dim x capacity x 4` (f32), with no other overhead.
    pub fn bytes(&self) -> usize {
        self.bytes_per_token() * self.capacity
    }
}

/// Per-layer key and value buffers of shape `[1, n_kv_heads, capacity, head_dim]`.
#[derive(Debug, Clone)]
struct LayerKv {
    keys: Tensor<4>,
    values: Tensor<4>,
}

/// A contiguous, preallocated key/value cache for one sequence.
///
/// # Shapes
/// - buffers: `[1, n_kv_heads, capacity, head_dim]` per layer
/// - [`update`](Self::update) input: `[1, n_kv_heads, T, head_dim]`
/// - [`update`](Self::update) output: `[1, n_kv_heads, len + T, head_dim]`
#[derive(Debug, Clone)]
pub struct KvCache {
    config: KvCacheConfig,
    layers: Vec<LayerKv>,
    len: usize,
}

impl KvCache {
    /// Allocate a zeroed cache on `device`.
    pub fn new(config: KvCacheConfig, device: &Device) -> Self {
        let shape = [1, config.n_kv_heads, config.capacity, config.head_dim];
        let layers = (0..config.n_layers)
            .map(|_| LayerKv {
                keys: Tensor::zeros(shape, device),
                values: Tensor::zeros(shape, device),
            })
            .collect();
        KvCache {
            config,
            layers,
            len: 0,
        }
    }

    /// The cache's shape.
    pub fn config(&self) -> &KvCacheConfig {
        &self.config
    }

    /// Tokens held (the position of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most tokens the cache can hold.
    pub fn capacity(&self) -> usize {
        self.config.capacity
    }

    /// Positions still free.
    pub fn remaining(&self) -> usize {
        self.config.capacity - self.len
    }

    /// Bytes of the preallocated buffers.
    pub fn bytes(&self) -> usize {
        self.config.bytes()
    }

    /// Check that `adding` more tokens fit.
    pub fn check_fits(&self, adding: usize) -> Result<(), KvCacheError> {
        if adding > self.remaining() {
            return Err(KvCacheError::Full {
                len: self.len,
                adding,
                capacity: self.config.capacity,
            });
        }
        Ok(())
    }

    /// Write the keys and values of `T` new tokens for `layer` at positions `len..len + T`
    /// (in place) and return the keys and values of all `len + T` positions.
    ///
    /// The length does not change until [`advance`](Self::advance) is called, so every layer of
    /// one forward pass writes at the same positions.
    pub fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let n_layers = self.layers.len();
        let [b, h, t, d] = keys.dims();
        if b != 1
            || h != self.config.n_kv_heads
            || d != self.config.head_dim
            || values.dims() != keys.dims()
        {
            return Err(KvCacheError::BadShape {
                layer,
                n_kv_heads: self.config.n_kv_heads,
                head_dim: self.config.head_dim,
                got: keys.dims().to_vec(),
            });
        }
        self.check_fits(t)?;
        let start = self.len;
        let end = start + t;
        let slot = self
            .layers
            .get_mut(layer)
            .ok_or(KvCacheError::NoSuchLayer { layer, n_layers })?;
        let range = [0..1, 0..h, start..end, 0..d];
        // Take the buffers out so that they are uniquely owned and the write happens in place.
        let k_buf = std::mem::replace(&mut slot.keys, Tensor::empty([0, 0, 0, 0], &keys.device()));
        slot.keys = k_buf.slice_assign(range.clone(), keys);
        let v_buf = std::mem::replace(
            &mut slot.values,
            Tensor::empty([0, 0, 0, 0], &values.device()),
        );
        slot.values = v_buf.slice_assign(range, values);
        let all = [0..1, 0..h, 0..end, 0..d];
        Ok((
            slot.keys.clone().slice(all.clone()),
            slot.values.clone().slice(all),
        ))
    }

    /// Move the length on by `n` tokens once every layer has been [updated](Self::update).
    pub fn advance(&mut self, n: usize) -> Result<(), KvCacheError> {
        self.check_fits(n)?;
        self.len += n;
        Ok(())
    }

    /// Forget every token from position `len` on (rollback). A `len` past the end is a no-op.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Forget every token.
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// An independent cache holding the same tokens. The buffers are shared until either
    /// side writes (Burn copies a shared buffer on write), so a fork is cheap.
    pub fn fork(&self) -> Self {
        self.clone()
    }
}
