//! The contiguous single-sequence cache.

use burn::prelude::*;

use crate::storage::{Buffer, KvType};
use crate::{HostKvLayer, KvCacheConfig, KvCacheError, KvStore, is_host_device};

/// Per-layer key and value buffers of shape `[1, n_kv_heads, slots, head_dim]`: `slots` is
/// the capacity, or for a layer that attends to a sliding window a ring of `window +`
/// [`WINDOW_SLACK`] positions (position `p` in slot `p % slots`).
#[derive(Debug, Clone)]
struct LayerKv {
    keys: Buffer,
    values: Buffer,
    slots: usize,
    /// The layer's attention window, when it is local.
    window: Option<usize>,
}

/// Positions a local layer's ring holds beyond its window: the most tokens one forward pass
/// may add (less one) and the furthest a rollback may go, since a pass writes its tokens
/// before its first query reads the window behind it. A longer pass is split by the model
/// ([`KvStore::max_pass`]); a longer rollback empties the cache (the caller computes the kept
/// tokens again).
pub const WINDOW_SLACK: usize = 256;

/// Positions a layer of a cache of `capacity` tokens stores: a local layer (one whose
/// queries see only the last `window` positions) a ring of `window +` [`WINDOW_SLACK`], at
/// most the capacity; a global layer (`None`) the capacity.
pub fn ring_slots(window: Option<usize>, capacity: usize) -> usize {
    match window {
        Some(w) if w > 0 => w.saturating_add(WINDOW_SLACK).min(capacity),
        _ => capacity,
    }
}

/// The slot runs `(first slot, n)` of positions `range` in a ring of `slots`, in position
/// order (two when the range wraps around).
fn ring_runs(slots: usize, range: std::ops::Range<usize>) -> impl Iterator<Item = (usize, usize)> {
    let mut at = range.start;
    std::iter::from_fn(move || {
        (at < range.end).then(|| {
            let slot = at % slots;
            let n = (slots - slot).min(range.end - at);
            at += n;
            (slot, n)
        })
    })
}

impl LayerKv {
    /// The slot runs of positions `range` (see [`ring_runs`]).
    fn runs(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = (usize, usize)> + use<> {
        ring_runs(self.slots, range)
    }

    /// Write `keys` and `values` (`[1, heads, T, head_dim]`) at positions `start..start + T`.
    fn write(&mut self, start: usize, keys: Tensor<4>, values: Tensor<4>) {
        let t = keys.dims()[2];
        let mut done = 0;
        for (slot, n) in self.runs(start..start + t) {
            self.keys.write(slot, keys.clone().narrow(2, done, n));
            self.values.write(slot, values.clone().narrow(2, done, n));
            done += n;
        }
    }

    /// The f32 keys and values of positions `range`, in order.
    fn read(&self, range: std::ops::Range<usize>) -> (Tensor<4>, Tensor<4>) {
        let parts: Vec<(Tensor<4>, Tensor<4>)> = self
            .runs(range)
            .map(|(slot, n)| {
                (
                    self.keys.read(slot..slot + n),
                    self.values.read(slot..slot + n),
                )
            })
            .collect();
        match parts.len() {
            0 => (self.keys.read(0..0), self.values.read(0..0)),
            1 => parts.into_iter().next().expect("one part"),
            _ => {
                let (k, v): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
                (Tensor::cat(k, 2), Tensor::cat(v, 2))
            }
        }
    }

    /// The first position still held when the furthest write ended at `high`.
    fn oldest(&self, high: usize) -> usize {
        high.saturating_sub(self.slots)
    }
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
    /// The end of the furthest write since the cache was last empty: a ring layer has
    /// overwritten every position below `high - slots`.
    high: usize,
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
        Self::with_windows(config, kv_type, &[], device)
    }

    /// Allocate a zeroed cache storing its elements as `kv_type` on `device`, in which layer
    /// `l` with `windows[l] = Some(w)` (a local layer, whose queries see only the last `w`
    /// positions) keeps a ring of `w +` [`WINDOW_SLACK`] positions instead of the whole
    /// capacity (layers past `windows` keep the capacity).
    ///
    /// Such a cache takes passes of at most [`max_pass`](KvStore::max_pass) tokens, and a
    /// [`truncate`](Self::truncate) further back than `WINDOW_SLACK` positions from the
    /// furthest token written empties it.
    pub fn with_windows(
        config: KvCacheConfig,
        kv_type: KvType,
        windows: &[Option<usize>],
        device: &Device,
    ) -> Self {
        let layers = (0..config.n_layers)
            .map(|l| {
                let window = windows.get(l).copied().flatten().filter(|&w| w > 0);
                let slots = ring_slots(window, config.capacity);
                let window = window.filter(|_| slots < config.capacity);
                let shape = [1, config.n_kv_heads, slots, config.head_dim];
                LayerKv {
                    keys: Buffer::zeros(kv_type, shape, device),
                    values: Buffer::zeros(kv_type, shape, device),
                    slots,
                    window,
                }
            })
            .collect();
        #[allow(deprecated)] // Burn deprecates ndarray; it is still a CPU backend.
        let host = is_host_device(device);
        KvCache {
            config,
            kv_type,
            layers,
            len: 0,
            high: 0,
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

    /// Bytes of the preallocated buffers, int8 scales included (a local layer's ring counts
    /// its slots).
    pub fn bytes(&self) -> usize {
        let per_slot =
            2 * self.config.n_kv_heads * self.kv_type.bytes_per_head(self.config.head_dim);
        self.layers.iter().map(|l| l.slots * per_slot).sum()
    }

    /// Positions each layer stores (the capacity, or a local layer's ring).
    pub fn layer_slots(&self) -> Vec<usize> {
        self.layers.iter().map(|l| l.slots).collect()
    }

    /// The most tokens one forward pass may add: unlimited (`usize::MAX`) without ring
    /// layers; otherwise what keeps every query's window in the ring while the pass writes.
    pub fn max_pass(&self) -> usize {
        self.layers
            .iter()
            .filter_map(|l| l.window.map(|w| l.slots - w + 1))
            .min()
            .unwrap_or(usize::MAX)
    }

    /// Check that `adding` more tokens fit, in the capacity and in one pass.
    pub fn check_fits(&self, adding: usize) -> Result<(), KvCacheError> {
        if adding > self.remaining() {
            return Err(KvCacheError::Full {
                len: self.len,
                adding,
                capacity: self.config.capacity,
            });
        }
        if adding > self.max_pass() {
            return Err(KvCacheError::PassTooLong {
                adding,
                most: self.max_pass(),
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
        slot.write(start, keys, values);
        // A ring layer returns the positions it holds: every query's window (the attention
        // counts positions from the first one returned).
        Ok(slot.read(slot.oldest(self.high.max(start + t))..start + t))
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
            slot.slots,
            self.len,
        )))
    }

    /// The keys and values (f32) of the `len` tokens held in `layer` (of a ring layer, the
    /// last ones it holds).
    pub fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let slot = self.layers.get(layer).ok_or(KvCacheError::NoSuchLayer {
            layer,
            n_layers: self.config.n_layers,
        })?;
        Ok(slot.read(slot.oldest(self.high.max(self.len))..self.len))
    }

    /// Move the length on by `n` tokens once every layer has been [updated](Self::update).
    pub fn advance(&mut self, n: usize) -> Result<(), KvCacheError> {
        self.check_fits(n)?;
        self.len += n;
        self.high = self.high.max(self.len);
        Ok(())
    }

    /// Forget every token from position `len` on (rollback). A `len` past the end is a no-op.
    /// With ring layers, a rollback to before `furthest written - WINDOW_SLACK` would need
    /// window positions the rings have overwritten: the cache is emptied instead (its
    /// [`len`](Self::len) says so; the caller computes the tokens again).
    pub fn truncate(&mut self, len: usize) {
        let keeps = self
            .layers
            .iter()
            .filter_map(|l| l.window.map(|w| (l.slots, w)))
            .all(|(slots, w)| len >= (self.high + w).saturating_sub(slots) || len == 0);
        self.len = if keeps { self.len.min(len) } else { 0 };
        if self.len == 0 {
            self.high = 0;
        }
    }

    /// Forget every token.
    pub fn reset(&mut self) {
        self.len = 0;
        self.high = 0;
    }

    /// An independent cache holding the same tokens. The buffers are shared until either
    /// side writes (Burn copies a shared buffer on write), so a fork is cheap.
    pub fn fork(&self) -> Self {
        self.clone()
    }

    /// Drop the tokens at positions `start..start + n` and move the ones after them down by
    /// `n`, passing each layer's moved keys (f32, `[1, heads, moved, head_dim]`) through
    /// `rekey(layer, keys)`.
    pub(crate) fn remove_range(
        &mut self,
        start: usize,
        n: usize,
        rekey: impl Fn(usize, Tensor<4>) -> Tensor<4>,
    ) {
        let end = (start + n).min(self.len);
        if start >= end {
            return;
        }
        assert!(
            self.layers.iter().all(|l| l.window.is_none()),
            "a context shift over ring layers"
        );
        let moved = self.len - end;
        for (layer, slot) in self.layers.iter_mut().enumerate() {
            if moved > 0 {
                let keys = rekey(layer, slot.keys.read(end..self.len));
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
        self.check_fits(adding)?;
        // The pass writes these positions whether or not it completes.
        self.high = self.high.max(self.len + adding);
        Ok(())
    }

    fn max_pass(&self) -> usize {
        KvCache::max_pass(self)
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
