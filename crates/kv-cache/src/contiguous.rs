//! The contiguous single-sequence cache.

use burn::prelude::*;

use crate::storage::{Buffer, KvType};
use crate::{HostKvLayer, KvCacheConfig, KvCacheError, KvStore, is_host_device};

/// Per-layer key and value buffers of shape `[1, n_kv_heads, capacity, head_dim]`.
#[derive(Debug, Clone)]
struct LayerKv {
    keys: Buffer,
    values: Buffer,
}

/// A contiguous, preallocated key/value cache for one sequence.
///
/// Stored as f32 ([`new`](Self::new)) or as f16/int8 ([`with_type`](Self::with_type));
/// [`update`](Self::update) always returns f32.
///
/// # Shapes
/// - buffers: `[1, n_kv_heads, capacity, head_dim]` per layer (plus `[.., .., capacity, 1]`
///   scales for int8)
/// - [`update`](Self::update) input: `[1, n_kv_heads, T, head_dim]`
/// - [`update`](Self::update) output: `[1, n_kv_heads, len + T, head_dim]`
#[derive(Debug, Clone)]
pub struct KvCache {
    config: KvCacheConfig,
    kv_type: KvType,
    layers: Vec<LayerKv>,
    len: usize,
    /// The device (for [`host_layer`](Self::host_layer)'s views).
    device: Device,
    /// Whether `device` is a CPU backend, whose tensors are host memory.
    host: bool,
}

impl KvCache {
    /// Allocate a zeroed f32 cache on `device`.
    pub fn new(config: KvCacheConfig, device: &Device) -> Self {
        Self::with_type(config, KvType::F32, device)
    }

    /// Allocate a zeroed cache storing its elements as `kv_type` on `device`.
    pub fn with_type(config: KvCacheConfig, kv_type: KvType, device: &Device) -> Self {
        let shape = [1, config.n_kv_heads, config.capacity, config.head_dim];
        let layers = (0..config.n_layers)
            .map(|_| LayerKv {
                keys: Buffer::zeros(kv_type, shape, device),
                values: Buffer::zeros(kv_type, shape, device),
            })
            .collect();
        #[allow(deprecated)] // Burn deprecates ndarray; it is still a CPU backend.
        let host = is_host_device(device);
        KvCache {
            config,
            kv_type,
            layers,
            len: 0,
            device: device.clone(),
            host,
        }
    }

    /// The cache's shape.
    pub fn config(&self) -> &KvCacheConfig {
        &self.config
    }

    /// How elements are stored.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
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

    /// Bytes of the preallocated buffers, int8 scales included.
    pub fn bytes(&self) -> usize {
        self.config.bytes_as(self.kv_type)
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
    /// (in place) and return the keys and values of all `len + T` positions (f32).
    ///
    /// The length does not change until [`advance`](Self::advance) is called, so every layer of
    /// one forward pass writes at the same positions.
    pub fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let t = self.config.check_shape(layer, &keys, &values)?;
        self.check_fits(t)?;
        let start = self.len;
        let slot = &mut self.layers[layer];
        slot.keys.write(start, keys);
        slot.values.write(start, values);
        Ok((slot.keys.read(0..start + t), slot.values.read(0..start + t)))
    }

    /// Whether the buffers are host memory (a CPU device: flex or ndarray).
    pub fn host_resident(&self) -> bool {
        self.host
    }

    /// `layer`'s buffers viewed in place on the host, for a forward pass computing on the host
    /// (see [`HostKvLayer`]); `Ok(None)` on a device whose memory is not the host's.
    ///
    /// On a CPU device the view moves the buffers out of their tensors and back on drop
    /// without copying them (unless a [`fork`](Self::fork) still shares them: then the first
    /// view copies, as a write through [`update`](Self::update) would).
    pub fn host_layer(&mut self, layer: usize) -> Result<Option<HostKvLayer<'_>>, KvCacheError> {
        let n_layers = self.config.n_layers;
        let slot = self
            .layers
            .get_mut(layer)
            .ok_or(KvCacheError::NoSuchLayer { layer, n_layers })?;
        if !self.host {
            return Ok(None);
        }
        Ok(Some(HostKvLayer::new(
            [&mut slot.keys, &mut slot.values],
            self.device.clone(),
            layer,
            &self.config,
            self.len,
        )))
    }

    /// The keys and values (f32) of the `len` tokens held in `layer`.
    pub fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let slot = self.layers.get(layer).ok_or(KvCacheError::NoSuchLayer {
            layer,
            n_layers: self.config.n_layers,
        })?;
        Ok((slot.keys.read(0..self.len), slot.values.read(0..self.len)))
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

    /// Drop the tokens at positions `start..start + n` and move the ones after them down by
    /// `n`, passing the moved keys (f32, `[1, heads, moved, head_dim]`) through `rekey`.
    pub(crate) fn remove_range(
        &mut self,
        start: usize,
        n: usize,
        rekey: impl Fn(Tensor<4>) -> Tensor<4>,
    ) {
        let end = (start + n).min(self.len);
        if start >= end {
            return;
        }
        let moved = self.len - end;
        for slot in &mut self.layers {
            if moved > 0 {
                let keys = rekey(slot.keys.read(end..self.len));
                slot.keys.write(start, keys);
                slot.values.move_within(end, start, moved);
            }
        }
        self.len -= end - start;
    }
}

impl KvStore for KvCache {
    fn config(&self) -> &KvCacheConfig {
        &self.config
    }

    fn len(&self) -> usize {
        self.len
    }

    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn prepare(&mut self, adding: usize) -> Result<(), KvCacheError> {
        self.check_fits(adding)
    }

    fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        KvCache::update(self, layer, keys, values)
    }

    fn host_resident(&self) -> bool {
        KvCache::host_resident(self)
    }

    fn host_layer(&mut self, layer: usize) -> Result<Option<HostKvLayer<'_>>, KvCacheError> {
        KvCache::host_layer(self, layer)
    }

    fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        KvCache::read(self, layer)
    }

    fn advance(&mut self, n: usize) -> Result<(), KvCacheError> {
        KvCache::advance(self, n)
    }

    fn truncate(&mut self, len: usize) {
        KvCache::truncate(self, len)
    }

    fn reset(&mut self) {
        KvCache::reset(self)
    }

    fn fork(&self) -> Self {
        KvCache::fork(self)
    }

    fn bytes(&self) -> usize {
        KvCache::bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> KvCacheConfig {
        KvCacheConfig {
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: 2,
            capacity: 4,
        }
    }

    #[test]
    fn full_and_bad_shape_are_errors() {
        let device = Device::flex();
        let mut cache = KvCache::new(config(), &device);
        let x = Tensor::<4>::ones([1, 1, 5, 2], &device);
        assert!(matches!(
            cache.update(0, x.clone(), x),
            Err(KvCacheError::Full { .. })
        ));
        let y = Tensor::<4>::ones([1, 2, 1, 2], &device);
        assert!(matches!(
            cache.update(0, y.clone(), y),
            Err(KvCacheError::BadShape { .. })
        ));
        let z = Tensor::<4>::ones([1, 1, 1, 2], &device);
        assert!(matches!(
            cache.update(3, z.clone(), z),
            Err(KvCacheError::NoSuchLayer { .. })
        ));
    }

    #[test]
    fn bytes_by_type() {
        let c = KvCacheConfig {
            n_layers: 30,
            n_kv_heads: 3,
            head_dim: 64,
            capacity: 2048,
        };
        assert_eq!(c.bytes(), 2 * 30 * 3 * 64 * 2048 * 4);
        assert_eq!(c.bytes_as(KvType::F16), c.bytes() / 2);
        assert_eq!(c.bytes_as(KvType::Int8), 2 * 30 * 3 * (64 + 4) * 2048);
    }
}
