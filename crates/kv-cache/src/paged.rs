//! Many sequences in one pool of fixed-size blocks (paged attention's storage), with prefix
//! caching.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::prelude::*;
use burn::tensor::TensorData;
use kindle_blocks::{BlockError, BlockManager, BlockStats};

use crate::host::PoolBuffer;
use crate::{HostKvLayer, KvCacheConfig, KvCacheError, KvStore, KvType};

/// Key/value storage for many sequences: every layer has one pool of `n_blocks` blocks of
/// `block_size` tokens in host memory, stored as f32, f16 or int8, and each sequence (a
/// [`PagedCache`], which implements [`KvStore`]) a table of the blocks it holds, so sequences
/// of any lengths share one allocation.
///
/// The blocks are kept with a [`BlockManager`]: a cache reserves the blocks for its whole
/// capacity when it is made (so a running sequence never runs out), forks share blocks
/// (refcounted), and a block is copied only when a cache writes into one it shares
/// (copy-on-write). **Prefix caching:** [`publish`](Self::publish) indexes a cache's full
/// blocks by the tokens they hold; [`cache_for`](Self::cache_for) starts a new cache with the
/// longest published run of blocks its prompt begins with, so a shared system prompt or chat
/// history is computed once. Published blocks outlive their sequences (cached) until the pool
/// needs the room, least recently released first.
///
/// The memory is allocated zeroed and untouched: pages become resident as blocks are first
/// written, and blocks are handed out most recently freed first.
///
/// ```
/// use burn::prelude::*;
/// use kindle_kv_cache::{KvCacheConfig, KvStore, KvType, PagedPool};
///
/// let device = Device::flex();
/// let config = KvCacheConfig { n_layers: 1, n_kv_heads: 1, head_dim: 2, capacity: 0 };
/// let pool = PagedPool::new(config, KvType::F32, 8, 4, &device).unwrap();
/// let prompt = [5, 6, 7, 8, 9, 10];
/// let (mut a, reused) = pool.cache_for(&prompt, 8).unwrap();
/// assert_eq!((reused, pool.stats().used), (0, 2)); // blocks for 8 tokens reserved
/// a.prepare(6).unwrap();
/// let x = Tensor::<4>::ones([1, 1, 6, 2], &device);
/// a.update(0, x.clone(), x).unwrap();
/// a.advance(6).unwrap();
/// pool.publish(&a, &prompt); // the first block (4 tokens) is full: indexed
///
/// // A prompt starting with the same 4 tokens shares that block.
/// let (b, reused) = pool.cache_for(&[5, 6, 7, 8, 1, 2], 8).unwrap();
/// assert_eq!((b.len(), reused), (4, 4));
/// assert_eq!(pool.stats().used, 3);
/// drop((a, b));
/// assert_eq!(pool.stats().cached, 1);
/// ```
pub struct PagedPool {
    config: KvCacheConfig,
    kv_type: KvType,
    block_size: usize,
    manager: Mutex<BlockManager>,
    /// Per layer: keys, values.
    layers: Vec<[PoolBuffer; 2]>,
    device: Device,
}

impl std::fmt::Debug for PagedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedPool")
            .field("config", &self.config)
            .field("kv_type", &self.kv_type)
            .field("block_size", &self.block_size)
            .field("stats", &self.stats())
            .finish()
    }
}

fn block_error(e: BlockError) -> KvCacheError {
    match e {
        BlockError::BadPool {
            n_blocks,
            block_size,
        } => KvCacheError::BadPool {
            n_blocks,
            block_size,
        },
        BlockError::OutOfBlocks { needed, available } => KvCacheError::OutOfBlocks {
            needed,
            free: available,
        },
    }
}

impl PagedPool {
    /// A pool of `n_blocks` blocks of `block_size` tokens per layer, stored as `kv_type`
    /// (`config.capacity` is not used), for caches whose tensors go to `device`.
    pub fn new(
        config: KvCacheConfig,
        kv_type: KvType,
        n_blocks: usize,
        block_size: usize,
        device: &Device,
    ) -> Result<Arc<Self>, KvCacheError> {
        if n_blocks == 0 || block_size == 0 {
            return Err(KvCacheError::BadPool {
                n_blocks,
                block_size,
            });
        }
        let vectors = n_blocks
            .checked_mul(block_size)
            .and_then(|v| v.checked_mul(config.n_kv_heads))
            .ok_or(KvCacheError::BadPool {
                n_blocks,
                block_size,
            })?;
        let layers = (0..config.n_layers)
            .map(|_| {
                Ok([
                    PoolBuffer::zeros(kv_type, vectors, config.head_dim)?,
                    PoolBuffer::zeros(kv_type, vectors, config.head_dim)?,
                ])
            })
            .collect::<Result<_, KvCacheError>>()?;
        // After the storage: a pool too large for the machine fails there, as an error,
        // before the bookkeeping's vectors (written when made) are asked for.
        let manager = BlockManager::new(n_blocks, block_size).map_err(block_error)?;
        Ok(Arc::new(PagedPool {
            config,
            kv_type,
            block_size,
            manager: Mutex::new(manager),
            layers,
            device: device.clone(),
        }))
    }

    fn manager(&self) -> MutexGuard<'_, BlockManager> {
        // The manager's state is consistent between calls: a panic elsewhere does not
        // poison it.
        self.manager.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// How elements are stored.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Where the blocks are (used, cached, free).
    pub fn stats(&self) -> BlockStats {
        self.manager().stats()
    }

    /// Bytes of one block over all layers, keys and values.
    pub fn bytes_per_block(&self) -> usize {
        self.config.bytes_per_token_as(self.kv_type) * self.block_size
    }

    /// Bytes of the whole pool (allocated; resident only as blocks are written).
    pub fn bytes(&self) -> usize {
        self.bytes_per_block() * self.manager().n_blocks()
    }

    /// An empty cache for up to `capacity` tokens, its blocks reserved now.
    ///
    /// Errors: [`KvCacheError::OutOfBlocks`] when fewer blocks are free or cached.
    pub fn cache(self: &Arc<Self>, capacity: usize) -> Result<PagedCache, KvCacheError> {
        Ok(self.cache_for(&[], capacity)?.0)
    }

    /// A cache for a sequence starting with `prompt`, for up to `capacity` tokens: it holds
    /// the prompt's longest published prefix of whole blocks (never the last prompt token,
    /// whose logits the caller needs), and the blocks for the rest of `capacity` are reserved
    /// now. Returns the cache and how many tokens it holds (reused).
    ///
    /// Errors: [`KvCacheError::OutOfBlocks`] when the pool cannot hold `capacity` tokens
    /// (nothing is held then), [`KvCacheError::Full`] when `prompt` is longer than `capacity`.
    pub fn cache_for(
        self: &Arc<Self>,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<(PagedCache, usize), KvCacheError> {
        if prompt.len() > capacity {
            return Err(KvCacheError::Full {
                len: 0,
                adding: prompt.len(),
                capacity,
            });
        }
        let mut manager = self.manager();
        let reusable = prompt.len().saturating_sub(1) / self.block_size;
        let mut blocks = manager.match_prefix(prompt, reusable);
        let fresh = manager.blocks_for(capacity).saturating_sub(blocks.len());
        match manager.allocate(fresh) {
            Ok(more) => {
                let len = blocks.len() * self.block_size;
                blocks.extend(more);
                drop(manager);
                let cache = PagedCache {
                    pool: Arc::clone(self),
                    config: KvCacheConfig {
                        capacity,
                        ..self.config
                    },
                    blocks,
                    len,
                };
                Ok((cache, len))
            }
            Err(e) => {
                manager.release_all(&blocks);
                Err(block_error(e))
            }
        }
    }

    /// Index `cache`'s full blocks, which hold `tokens` (at least the cache's length of
    /// them; those past it are ignored), so that later prompts starting with the same tokens
    /// reuse them. Returns how many blocks were newly indexed.
    pub fn publish(&self, cache: &PagedCache, tokens: &[u32]) -> usize {
        let held = &tokens[..cache.len.min(tokens.len())];
        self.manager().publish(&cache.blocks, held)
    }

    /// Vector index of `head` at `position` of a sequence whose table is `blocks`.
    pub(crate) fn vector(&self, blocks: &[usize], head: usize, position: usize) -> usize {
        let bs = self.block_size;
        (blocks[position / bs] * self.config.n_kv_heads + head) * bs + position % bs
    }

    pub(crate) fn buffers(&self, layer: usize) -> Result<&[PoolBuffer; 2], KvCacheError> {
        self.layers.get(layer).ok_or(KvCacheError::NoSuchLayer {
            layer,
            n_layers: self.config.n_layers,
        })
    }
}

/// One sequence's cache in a [`PagedPool`]: its table of blocks and its length. Implements
/// [`KvStore`]; its blocks go back to the pool when it is dropped.
pub struct PagedCache {
    pool: Arc<PagedPool>,
    /// The pool's shape with this cache's capacity.
    config: KvCacheConfig,
    blocks: Vec<usize>,
    len: usize,
}

impl std::fmt::Debug for PagedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedCache")
            .field("blocks", &self.blocks)
            .field("len", &self.len)
            .field("capacity", &self.config.capacity)
            .finish()
    }
}

impl Drop for PagedCache {
    fn drop(&mut self) {
        self.pool.manager().release_all(&self.blocks);
    }
}

impl PagedCache {
    /// The pool it draws from.
    pub fn pool(&self) -> &Arc<PagedPool> {
        &self.pool
    }

    /// Its blocks, in position order.
    pub fn blocks(&self) -> &[usize] {
        &self.blocks
    }

    /// Make every block that positions `len..end` fall in this cache's own: a block shared
    /// with another cache is copied to a new one, a published block held alone leaves the
    /// index (its contents are about to change). All or nothing.
    fn make_writable(&mut self, end: usize) -> Result<(), KvCacheError> {
        let bs = self.pool.block_size;
        let (first, last) = (self.len / bs, end.div_ceil(bs).min(self.blocks.len()));
        let mut manager = self.pool.manager();
        let shared: Vec<usize> = (first..last)
            .filter(|&i| manager.refcount(self.blocks[i]) > 1)
            .collect();
        let mut copies = manager.allocate(shared.len()).map_err(block_error)?;
        for i in first..last {
            let old = self.blocks[i];
            if shared.contains(&i) {
                let new = copies.pop().expect("one copy per shared block");
                self.copy_block(old, new);
                manager.release(old);
                self.blocks[i] = new;
            } else if manager.is_published(old) {
                manager.unpublish(old);
            }
        }
        Ok(())
    }

    /// Copy every layer's keys and values of block `from` into block `to` (held alone).
    fn copy_block(&self, from: usize, to: usize) {
        let (h, bs, d) = (
            self.config.n_kv_heads,
            self.pool.block_size,
            self.config.head_dim,
        );
        let mut scratch = Vec::new();
        for buffers in &self.pool.layers {
            for buffer in buffers {
                for v in 0..h * bs {
                    // SAFETY: `to` is held by this cache alone and nothing reads it; `from`
                    // is only read.
                    let x = unsafe { buffer.get() }
                        .read(from * h * bs + v, 1, d, &mut scratch)
                        .to_vec();
                    // SAFETY: as above.
                    unsafe { buffer.get_mut() }.write(to * h * bs + v, &x);
                }
            }
        }
    }

    /// The f32 keys and values of positions `0..n` of `layer`, `[1, n_kv_heads, n, head_dim]`.
    fn gather(&self, layer: usize, n: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let buffers = self.pool.buffers(layer)?;
        let (h, d) = (self.config.n_kv_heads, self.config.head_dim);
        let mut scratch = Vec::new();
        let mut out = [Vec::with_capacity(h * n * d), Vec::with_capacity(h * n * d)];
        for (buffer, out) in buffers.iter().zip(&mut out) {
            for head in 0..h {
                for p in 0..n {
                    let v = self.pool.vector(&self.blocks, head, p);
                    // SAFETY: reads only; this thread runs the pass.
                    out.extend_from_slice(unsafe { buffer.get() }.read(v, 1, d, &mut scratch));
                }
            }
        }
        let [k, v] =
            out.map(|x| Tensor::from_data(TensorData::new(x, [1, h, n, d]), &self.pool.device));
        Ok((k, v))
    }
}

impl KvStore for PagedCache {
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
        if self.len + adding > self.config.capacity {
            return Err(KvCacheError::Full {
                len: self.len,
                adding,
                capacity: self.config.capacity,
            });
        }
        self.make_writable(self.len + adding)
    }

    fn update(
        &mut self,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let t = self.config.check_shape(layer, &keys, &values)?;
        if self.len + t > self.config.capacity {
            return Err(KvCacheError::Full {
                len: self.len,
                adding: t,
                capacity: self.config.capacity,
            });
        }
        let (h, d) = (self.config.n_kv_heads, self.config.head_dim);
        // Token-major rows, as the host path writes them.
        let rows = |x: Tensor<4>| -> Vec<f32> {
            x.swap_dims(1, 2)
                .reshape([t, h * d])
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .expect("f32 after convert")
        };
        let (k, v) = (rows(keys), rows(values));
        {
            let mut view = self.host_view(layer)?;
            for i in 0..t {
                view.write(
                    i,
                    &k[i * h * d..(i + 1) * h * d],
                    &v[i * h * d..(i + 1) * h * d],
                )?;
            }
        }
        self.gather(layer, self.len + t)
    }

    fn host_resident(&self) -> bool {
        true
    }

    fn host_layer(&mut self, layer: usize) -> Result<Option<HostKvLayer<'_>>, KvCacheError> {
        self.host_view(layer).map(Some)
    }

    fn read(&self, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        self.gather(layer, self.len)
    }

    fn advance(&mut self, n: usize) -> Result<(), KvCacheError> {
        if self.len + n > self.config.capacity {
            return Err(KvCacheError::Full {
                len: self.len,
                adding: n,
                capacity: self.config.capacity,
            });
        }
        self.len += n;
        Ok(())
    }

    fn truncate(&mut self, len: usize) {
        // The blocks stay reserved for the capacity; those rewritten are made private by the
        // next `prepare`.
        self.len = self.len.min(len);
    }

    fn reset(&mut self) {
        self.len = 0;
    }

    fn fork(&self) -> Self {
        let mut manager = self.pool.manager();
        for &block in &self.blocks {
            manager.retain(block);
        }
        PagedCache {
            pool: Arc::clone(&self.pool),
            config: self.config,
            blocks: self.blocks.clone(),
            len: self.len,
        }
    }

    fn bytes(&self) -> usize {
        self.blocks.len() * self.pool.bytes_per_block()
    }
}

impl PagedCache {
    fn host_view(&mut self, layer: usize) -> Result<HostKvLayer<'_>, KvCacheError> {
        let buffers = self.pool.buffers(layer)?;
        Ok(HostKvLayer::paged(
            buffers,
            &self.blocks,
            self.pool.block_size,
            layer,
            &self.config,
            self.len,
        ))
    }
}
