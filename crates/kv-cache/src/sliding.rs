//! A cache that never fills up: llama.cpp's context shift (`--keep N`), StreamingLLM's
//! attention sinks.

use burn::prelude::*;

use crate::shift::{KeyRotation, k_shift_as};
use crate::{HostKvLayer, KvCache, KvCacheConfig, KvCacheError, KvStore, KvType};

/// A [`KvCache`] that makes room instead of failing when full.
///
/// The first `keep` tokens (the prompt's start, the attention sinks) are never discarded.
/// When `T` new tokens do not fit, [`prepare`](KvStore::prepare) discards half of the other
/// tokens, oldest first (more if `T` needs it), moves the rest down, and re-rotates their keys
/// by minus the number discarded ([`k_shift`](crate::shift::k_shift)), as llama.cpp's
/// context shift does. Positions therefore stay contiguous: [`len`](KvStore::len) is again the
/// RoPE position of the next token. The first layer then holds exactly what a fresh run over
/// the kept tokens would have cached (up to rounding); deeper layers keep keys and values
/// computed while the discarded tokens were still in view, so the model's output approximates
/// a fresh run, as llama.cpp's does (`kindle-model`'s `tests/sliding_window.rs` checks both).
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
    /// How each layer's keys were rotated (what a shift turns them by again); `None` for keys
    /// that carry no rotation (learned positions), which a shift leaves as they are.
    rotations: Vec<Option<KeyRotation>>,
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
        let rotations = vec![Some(KeyRotation::adjacent(rope_theta)); config.n_layers];
        Self::with_rotations(config, kv_type, keep, rotations, device)
    }

    /// As [`with_type`](Self::with_type), each layer's keys re-rotated as `rotations[layer]`
    /// turned them (its pairs and base: Gemma-3's local and global layers differ, Qwen2 and
    /// Gemma turn halves), or left as they are where it is `None` (a model with learned
    /// positions, whose keys carry no rotation: llama.cpp then only renumbers the positions,
    /// as this cache does). Every layer holds the whole capacity (no ring of a window: a
    /// shift moves positions that a ring would have dropped).
    ///
    /// Errors: [`KvCacheError::KeepTooLarge`] when `keep >= capacity`;
    /// [`KvCacheError::RotationCount`] when `rotations` is not one per layer.
    pub fn with_rotations(
        config: KvCacheConfig,
        kv_type: KvType,
        keep: usize,
        rotations: Vec<Option<KeyRotation>>,
        device: &Device,
    ) -> Result<Self, KvCacheError> {
        if rotations.len() != config.n_layers {
            return Err(KvCacheError::RotationCount {
                given: rotations.len(),
                n_layers: config.n_layers,
            });
        }
        if keep >= config.capacity {
            return Err(KvCacheError::KeepTooLarge {
                keep,
                capacity: config.capacity,
            });
        }
        Ok(SlidingWindowCache {
            inner: KvCache::with_type(config, kv_type, device),
            keep,
            rotations,
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
        let rotations = &self.rotations;
        self.inner
            .remove_range(start, n, |layer, keys| match &rotations[layer] {
                Some(rotation) => k_shift_as(keys, -(n as i64), rotation.clone()),
                None => keys,
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shift::RotaryPairs;

    /// Feed `tokens` positions of distinct keys through a window of 6 keeping 2, one layer
    /// turned as `rotation`: the keys it holds after the last shift, and how many it dropped.
    fn run(rotation: Option<KeyRotation>, tokens: usize) -> (Vec<f32>, usize) {
        let device = Device::flex();
        let config = KvCacheConfig {
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: 4,
            capacity: 6,
        };
        let mut cache =
            SlidingWindowCache::with_rotations(config, KvType::F32, 2, vec![rotation], &device)
                .unwrap();
        for t in 0..tokens {
            cache.prepare(1).unwrap();
            let key: Vec<f32> = (0..4).map(|i| (10 * t + i) as f32).collect();
            let x = Tensor::<4>::from_data(TensorData::new(key, [1, 1, 1, 4]), &device);
            cache.update(0, x.clone(), x).unwrap();
            cache.advance(1).unwrap();
        }
        let keys = cache.read(0).unwrap().0.into_data().try_into_vec().unwrap();
        (keys, cache.discarded())
    }

    /// Keys without a rotation (learned positions) are moved down unturned: the kept prefix,
    /// then the newest tokens, as they were written. With a rotation they are turned.
    #[test]
    fn a_shift_moves_unrotated_keys_as_they_are() {
        let (keys, discarded) = run(None, 7);
        assert_eq!(discarded, 2);
        let want: Vec<f32> = [0, 1, 4, 5, 6]
            .iter()
            .flat_map(|&t| (0..4).map(move |i| (10 * t + i) as f32))
            .collect();
        assert_eq!(keys, want);
        let rotation = KeyRotation::new(RotaryPairs::Halves, 100.0);
        let (turned, _) = run(Some(rotation), 7);
        assert_eq!(turned[..8], want[..8], "the kept prefix is never turned");
        assert_ne!(turned[8..], want[8..]);
    }

    #[test]
    fn a_rotation_per_layer_is_checked() {
        let config = KvCacheConfig {
            n_layers: 2,
            n_kv_heads: 1,
            head_dim: 4,
            capacity: 6,
        };
        let error =
            SlidingWindowCache::with_rotations(config, KvType::F32, 2, vec![None], &Device::flex())
                .unwrap_err();
        assert_eq!(
            error.to_string(),
            "sliding window: 1 key rotations for a cache of 2 layers"
        );
    }
}
