//! A cache that never fills up: llama.cpp's context shift (`--keep N`), StreamingLLM's
//! attention sinks.

use burn::prelude::*;

use crate::shift::k_shift;
use crate::{HostKvLayer, KvCache, KvCacheConfig, KvCacheError, KvStore, KvType};

/// A [`KvCache`] that makes room instead of failing when full.
///
/// The first `keep` tokens (the prompt's start, the attention sinks) are never discarded.
/// When `T` new tokens do not fit, [`prepare`](KvStore::prepare) discards half of the other
/// tokens, oldest first (more if `T` needs it), moves the rest down, and re-rotates their keys
/// by minus the number discarded ([`k_shift`]), as llama.cpp's context shift does. Positions
/// therefore stay contiguous: [`len`](KvStore::len) is again the RoPE position of the next
/// token. The first layer then holds exactly what a fresh run over the kept tokens would have
/// cached (up to rounding); deeper layers keep keys and values computed while the discarded
/// tokens were still in view, so the model's output approximates a fresh run, as llama.cpp's
/// does (`kindle-model`'s `tests/sliding_window.rs` checks both).
///
/// [`truncate`](KvStore::truncate) is in terms of current positions; discarded tokens cannot
/// be rolled back to.
///
/// ```
/// use burn::prelude::*;
/// use kindle_kv_cache::{KvCacheConfig, KvStore, SlidingWindowCache};
///
/// let device = Device::flex();
/// let config = KvCacheConfig { n_layers: 1, n_kv_heads: 1, head_dim: 2, capacity: 6 };
/// let mut cache = SlidingWindowCache::new(config, 2, 10000.0, &device).unwrap();
/// for _ in 0..7 {
///     cache.prepare(1).unwrap();
///     let x = Tensor::<4>::ones([1, 1, 1, 2], &device);
///     cache.update(0, x.clone(), x).unwrap();
///     cache.advance(1).unwrap();
/// }
/// // The 7th token found the cache full: 2 of the 4 unkept tokens were discarded.
/// assert_eq!((cache.len(), cache.discarded()), (5, 2));
/// ```
#[derive(Debug, Clone)]
pub struct SlidingWindowCache {
    inner: KvCache,
    keep: usize,
    rope_theta: f64,
    discarded: usize,
}

impl SlidingWindowCache {
    /// An f32 window of `config.capacity` tokens that never discards the first `keep`;
    /// `rope_theta` is the model's rotary base, needed to re-rotate keys.
    pub fn new(
        config: KvCacheConfig,
        keep: usize,
        rope_theta: f64,
        device: &Device,
    ) -> Result<Self, KvCacheError> {
        Self::with_type(config, KvType::F32, keep, rope_theta, device)
    }

    /// As [`new`](Self::new), storing elements as `kv_type` (int8 keys are re-quantised after
    /// each shift).
    pub fn with_type(
        config: KvCacheConfig,
        kv_type: KvType,
        keep: usize,
        rope_theta: f64,
        device: &Device,
    ) -> Result<Self, KvCacheError> {
        if keep >= config.capacity {
            return Err(KvCacheError::KeepTooLarge {
                keep,
                capacity: config.capacity,
            });
        }
        Ok(SlidingWindowCache {
            inner: KvCache::with_type(config, kv_type, device),
            keep,
            rope_theta,
            discarded: 0,
        })
    }

    /// Tokens never discarded.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Tokens discarded so far (the offset between a token's position in the whole text and
    /// its position in the cache, for tokens after the kept ones).
    pub fn discarded(&self) -> usize {
        self.discarded
    }

    /// The cache underneath.
    pub fn inner(&self) -> &KvCache {
        &self.inner
    }

    /// Discard `n` tokens right after the kept ones (fewer if fewer are held), move the rest
    /// down and re-rotate their keys by `-n`. Returns how many were discarded.
    pub fn evict(&mut self, n: usize) -> usize {
        let start = self.keep.min(self.inner.len());
        let n = n.min(self.inner.len() - start);
        if n == 0 {
            return 0;
        }
        let theta = self.rope_theta;
        self.inner
            .remove_range(start, n, |keys| k_shift(keys, -(n as i64), theta));
        self.discarded += n;
        n
    }
}

impl KvStore for SlidingWindowCache {
    fn config(&self) -> &KvCacheConfig {
        self.inner.config()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Discard old tokens if `adding` do not fit: half of those after the kept prefix, or more
    /// if needed. Fails only if `adding` exceeds `capacity - keep`.
    fn prepare(&mut self, adding: usize) -> Result<(), KvCacheError> {
        if adding <= self.inner.remaining() {
            return Ok(());
        }
        let len = self.inner.len();
        let capacity = self.inner.capacity();
        if adding > capacity - self.keep.min(len) {
            return Err(KvCacheError::Full {
                len,
                adding,
                capacity,
            });
        }
        let unkept = len - self.keep.min(len);
        let needed = adding - self.inner.remaining();
        self.evict(needed.max(unkept / 2));
        Ok(())
    }

    fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        self.inner.update(layer, keys, values)
    }

    fn host_resident(&self) -> bool {
        self.inner.host_resident()
    }

    fn host_layer(&mut self, layer: usize) -> Result<Option<HostKvLayer<'_>>, KvCacheError> {
        self.inner.host_layer(layer)
    }

    fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        self.inner.read(layer)
    }

    fn advance(&mut self, n: usize) -> Result<(), KvCacheError> {
        self.inner.advance(n)
    }

    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.discarded = 0;
    }

    fn fork(&self) -> Self {
        self.clone()
    }

    fn bytes(&self) -> usize {
        self.inner.bytes()
    }
}
