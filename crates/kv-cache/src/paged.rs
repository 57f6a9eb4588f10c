//! Many sequences in one pool of fixed-size blocks (paged attention's storage), with prefix
//! caching.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::prelude::*;
use burn::tensor::TensorData;
use kindle_blocks::{BlockError, BlockManager, BlockStats};

use crate::host::PoolBuffer;
use crate::{HostKvLayer, KvCacheConfig, KvCacheError, KvStore, KvType, WINDOW_SLACK};

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
    books: Mutex<Books>,
    /// Per layer: keys, values (a local layer's in blocks of the local group).
    layers: Vec<[PoolBuffer; 2]>,
    /// Per layer: its sliding window (a local layer), or `None` (a global one).
    windows: Vec<Option<usize>>,
    /// The widest window of a local layer; 0 without local layers.
    window: usize,
    device: Device,
}

/// The bookkeeping of a pool's two groups of blocks: the global layers' (by tokens, with
/// prefix caching) and, with local layers, theirs (each block the companion of the global
/// block of the same positions).
#[derive(Debug)]
struct Books {
    global: BlockManager,
    local: Option<BlockManager>,
}

/// A block-table entry of a local layer whose positions fell out of every window.
const NONE: usize = usize::MAX;

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
        Self::with_windows(config, kv_type, (n_blocks, block_size), &[], 0, device)
    }

    /// A pool whose layers with `windows[l] = Some(w)` attend only to the last `w` positions
    /// (local layers, as Gemma-3's): they keep their blocks in a second group of
    /// `local_blocks` blocks, and a sequence holds only those of its last `w +`
    /// [`WINDOW_SLACK`] positions (and of the pass it writes: such a sequence's passes take at
    /// most `WINDOW_SLACK + 1` tokens, [`KvStore::max_pass`]). The global layers keep
    /// `n_blocks` blocks as [`new`](Self::new) does. A local block leaving every window stays
    /// cached if it was published (as the companion of the global block of the same
    /// positions), so that a prompt reusing a prefix finds the window before its end: a prefix
    /// is reused only as far as the local layers still have that window (vLLM's rule for
    /// sliding-window layers). [`local_blocks_for`](Self::local_blocks_for) sizes the group.
    ///
    /// Errors: [`KvCacheError::BadPool`] for no blocks, or local layers with no local blocks.
    pub fn with_windows(
        config: KvCacheConfig,
        kv_type: KvType,
        (n_blocks, block_size): (usize, usize),
        windows: &[Option<usize>],
        local_blocks: usize,
        device: &Device,
    ) -> Result<Arc<Self>, KvCacheError> {
        let windows: Vec<Option<usize>> = (0..config.n_layers)
            .map(|l| windows.get(l).copied().flatten().filter(|&w| w > 0))
            .collect();
        let window = windows.iter().flatten().copied().max().unwrap_or(0);
        let bad = |n_blocks| KvCacheError::BadPool {
            n_blocks,
            block_size,
        };
        if n_blocks == 0 || block_size == 0 || (window > 0 && local_blocks == 0) {
            return Err(bad(if n_blocks == 0 { 0 } else { local_blocks }));
        }
        let vectors = |blocks: usize| {
            blocks
                .checked_mul(block_size)
                .and_then(|v| v.checked_mul(config.n_kv_heads))
                .ok_or(bad(blocks))
        };
        let layers = windows
            .iter()
            .map(|w| {
                let n = vectors(if w.is_some() { local_blocks } else { n_blocks })?;
                Ok([
                    PoolBuffer::zeros(kv_type, n, config.head_dim)?,
                    PoolBuffer::zeros(kv_type, n, config.head_dim)?,
                ])
            })
            .collect::<Result<_, KvCacheError>>()?;
        // After the storage: a pool too large for the machine fails there, as an error,
        // before the bookkeeping's vectors (written when made) are asked for.
        let global = BlockManager::new(n_blocks, block_size).map_err(block_error)?;
        let local = if window > 0 {
            Some(BlockManager::new(local_blocks, block_size).map_err(block_error)?)
        } else {
            None
        };
        Ok(Arc::new(PagedPool {
            config,
            kv_type,
            block_size,
            books: Mutex::new(Books { global, local }),
            layers,
            windows,
            window,
            device: device.clone(),
        }))
    }

    /// Local blocks enough for `sequences` sequences at once, each holding its window and
    /// the most one pass and one rollback add ([`PagedCache`] keeps no more), and as many
    /// again for published ones to stay cached between requests; at most `n_blocks` (what
    /// the global layers have). 0 without local layers.
    pub fn local_blocks_for(
        windows: &[Option<usize>],
        block_size: usize,
        sequences: usize,
        n_blocks: usize,
    ) -> usize {
        let window = windows.iter().flatten().copied().max().unwrap_or(0);
        if window == 0 || block_size == 0 {
            return 0;
        }
        let per_sequence = (window + 2 * WINDOW_SLACK + 1).div_ceil(block_size) + 2;
        per_sequence
            .saturating_mul(sequences.max(1))
            .saturating_mul(2)
            .min(n_blocks)
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // The books are consistent between calls: a panic elsewhere does not poison them.
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// How elements are stored.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Where the blocks of the global layers are (used, cached, free): every layer's,
    /// without local layers.
    pub fn stats(&self) -> BlockStats {
        self.books().global.stats()
    }

    /// Where the local layers' blocks are; `None` without local layers.
    pub fn local_stats(&self) -> Option<BlockStats> {
        self.books().local.as_ref().map(BlockManager::stats)
    }

    /// Bytes of one block of the global layers and of one of the local layers (0 without
    /// them), keys and values.
    pub fn bytes_per_block(&self) -> (usize, usize) {
        let per_layer = self.config.bytes_per_token_as(self.kv_type) / self.config.n_layers.max(1)
            * self.block_size;
        let local = self.windows.iter().filter(|w| w.is_some()).count();
        (per_layer * (self.windows.len() - local), per_layer * local)
    }

    /// Bytes of the whole pool (allocated; resident only as blocks are written).
    pub fn bytes(&self) -> usize {
        let (global, local) = self.bytes_per_block();
        let books = self.books();
        global * books.global.n_blocks()
            + local * books.local.as_ref().map_or(0, BlockManager::n_blocks)
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
        let mut books = self.books();
        let Books { global, local } = &mut *books;
        let reusable = prompt.len().saturating_sub(1) / self.block_size;
        let mut blocks = global.match_prefix(prompt, reusable);
        // Local layers: as far as they still have the window before the reused prefix's end.
        let mut table = Vec::new();
        if let Some(local) = local {
            let window_of =
                |n: usize| (n * self.block_size).saturating_sub(self.window) / self.block_size..n;
            let owners: Vec<(usize, u64)> =
                blocks.iter().map(|&b| (b, global.generation(b))).collect();
            let mut n = blocks.len();
            while n > 0 && !window_of(n).all(|i| local.has_companion(owners[i])) {
                n -= 1;
            }
            global.release_all(&blocks[n..]);
            blocks.truncate(n);
            table = vec![NONE; n];
            for i in window_of(n) {
                table[i] = local
                    .match_companion(owners[i])
                    .expect("checked above, under the same lock");
            }
        }
        let fresh = global.blocks_for(capacity).saturating_sub(blocks.len());
        match global.allocate(fresh) {
            Ok(more) => {
                let len = blocks.len() * self.block_size;
                blocks.extend(more);
                if local.is_some() {
                    table.resize(blocks.len(), NONE);
                }
                drop(books);
                let cache = PagedCache {
                    pool: Arc::clone(self),
                    config: KvCacheConfig {
                        capacity,
                        ..self.config
                    },
                    blocks,
                    local: table,
                    len,
                };
                Ok((cache, len))
            }
            Err(e) => {
                global.release_all(&blocks);
                if let Some(local) = local {
                    local.release_all(&held(&table));
                }
                Err(block_error(e))
            }
        }
    }

    /// Index `cache`'s full blocks, which hold `tokens` (at least the cache's length of
    /// them; those past it are ignored), so that later prompts starting with the same tokens
    /// reuse them; with local layers, each full block's local block (while the cache holds
    /// it) becomes the companion of the global block of the same positions. Returns how many
    /// global blocks were newly indexed.
    pub fn publish(&self, cache: &PagedCache, tokens: &[u32]) -> usize {
        let held = &tokens[..cache.len.min(tokens.len())];
        let mut books = self.books();
        let Books { global, local } = &mut *books;
        let added = global.publish(&cache.blocks, held);
        if let Some(local) = local {
            let full = held.len() / self.block_size;
            for (&g, &l) in cache.blocks[..full].iter().zip(&cache.local) {
                if l != NONE && global.is_published(g) && !local.is_published(l) {
                    local.publish_companion(l, (g, global.generation(g)));
                }
            }
        }
        added
    }

    /// Vector index of `head` at `position` of a sequence whose table is `blocks`.
    pub(crate) fn vector(&self, blocks: &[usize], head: usize, position: usize) -> usize {
        let bs = self.block_size;
        (blocks[position / bs] * self.config.n_kv_heads + head) * bs + position % bs
    }

    /// Copy the keys and values of block `from` into block `to` (held alone) for every
    /// local layer (`local`) or every global one.
    fn copy_block(&self, local: bool, from: usize, to: usize) {
        let (h, bs, d) = (
            self.config.n_kv_heads,
            self.block_size,
            self.config.head_dim,
        );
        let mut scratch = Vec::new();
        let group = self.layers.iter().zip(&self.windows);
        for (buffers, _) in group.filter(|(_, w)| w.is_some() == local) {
            for buffer in buffers {
                for v in 0..h * bs {
                    // SAFETY: `to` is held by the caller alone and nothing reads it; `from`
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
    /// The global layers' blocks (every layer's, without local layers).
    blocks: Vec<usize>,
    /// With local layers, theirs: as many entries as `blocks`, [`NONE`] where no window
    /// reaches any more (empty without local layers).
    local: Vec<usize>,
    len: usize,
}

impl std::fmt::Debug for PagedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedCache")
            .field("blocks", &self.blocks)
            .field("local", &self.local)
            .field("len", &self.len)
            .field("capacity", &self.config.capacity)
            .finish()
    }
}

impl Drop for PagedCache {
    fn drop(&mut self) {
        let mut books = self.pool.books();
        books.global.release_all(&self.blocks);
        if let Some(local) = &mut books.local {
            local.release_all(&held(&self.local));
        }
    }
}

/// The blocks a local table holds (its entries but [`NONE`]), in position order.
fn held(table: &[usize]) -> Vec<usize> {
    table.iter().copied().filter(|&b| b != NONE).collect()
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
    /// index (its contents are about to change); a local layers' block that is missing is
    /// taken from the pool. All or nothing.
    fn make_writable(&mut self, end: usize) -> Result<(), KvCacheError> {
        let bs = self.pool.block_size;
        let span = self.len / bs..end.div_ceil(bs).min(self.blocks.len());
        let pool = Arc::clone(&self.pool);
        let mut books = pool.books();
        let Books { global, local } = &mut *books;
        let global_copies = Self::plan_writes(global, &self.blocks, span.clone(), 0)?;
        let local_copies = match local {
            Some(local) => match Self::plan_writes(local, &self.local, span.clone(), 1) {
                Ok(copies) => Some(copies),
                Err(e) => {
                    global.release_all(&global_copies);
                    return Err(e);
                }
            },
            None => None,
        };
        // Both groups have their blocks: nothing can fail from here on.
        Self::write_plan(
            global,
            &mut self.blocks,
            span.clone(),
            global_copies,
            |from, to| pool.copy_block(false, from, to),
        );
        if let (Some(local), Some(copies)) = (local, local_copies) {
            Self::write_plan(local, &mut self.local, span, copies, |from, to| {
                pool.copy_block(true, from, to)
            });
        }
        Ok(())
    }

    /// The blocks `manager` gives for writing entries `span` of `table`: one for each entry
    /// held with another cache (or, with `missing` 1, missing), allocated now.
    fn plan_writes(
        manager: &mut BlockManager,
        table: &[usize],
        span: std::ops::Range<usize>,
        missing: usize,
    ) -> Result<Vec<usize>, KvCacheError> {
        let needed: usize = span
            .map(|i| match table[i] {
                NONE => missing,
                b => usize::from(manager.refcount(b) > 1),
            })
            .sum();
        manager.allocate(needed).map_err(block_error)
    }

    /// Carry out [`plan_writes`](Self::plan_writes)' plan: a shared entry is copied (`copy`)
    /// into a new block, a missing one takes a new block, a published one held alone leaves
    /// the index.
    fn write_plan(
        manager: &mut BlockManager,
        table: &mut [usize],
        span: std::ops::Range<usize>,
        mut fresh: Vec<usize>,
        copy: impl Fn(usize, usize),
    ) {
        for i in span {
            let old = table[i];
            if old == NONE {
                table[i] = fresh.pop().expect("one block per missing entry");
            } else if manager.refcount(old) > 1 {
                let new = fresh.pop().expect("one copy per shared block");
                copy(old, new);
                manager.release(old);
                table[i] = new;
            } else if manager.is_published(old) {
                manager.unpublish(old);
            }
        }
        debug_assert!(fresh.is_empty());
    }

    /// Release the local blocks of positions no window reaches any more, nor a rollback
    /// right after the next pass ([`KvStore::max_pass`]): those before the last `window +`
    /// [`WINDOW_SLACK`] positions. Published ones stay cached for prompts that reuse them.
    /// The held entries are one run (none before a reused prefix's window, none past the
    /// length), so only the end of that run below `behind` is visited, and the pool is not
    /// locked on a step that gives nothing back.
    fn release_behind(&mut self) {
        let keep = self.pool.window + WINDOW_SLACK;
        let behind = (self.len.saturating_sub(keep) / self.pool.block_size).min(self.local.len());
        let held = self.local[..behind]
            .iter()
            .rev()
            .take_while(|&&b| b != NONE)
            .count();
        if held > 0 {
            self.release_local(behind - held..behind);
        }
    }

    /// Release the local blocks of table entries `range` (those held).
    fn release_local(&mut self, range: std::ops::Range<usize>) {
        let mut books = self.pool.books();
        if let Some(local) = &mut books.local {
            let end = range.end.min(self.local.len());
            for entry in &mut self.local[range.start.min(end)..end] {
                if *entry != NONE {
                    local.release(std::mem::replace(entry, NONE));
                }
            }
        }
    }

    /// Whether the local layers hold the window before position `len` (every position a
    /// query at `len` or later may see).
    fn holds_window_before(&self, len: usize) -> bool {
        let bs = self.pool.block_size;
        self.local.is_empty()
            || self.local[len.saturating_sub(self.pool.window) / bs..len.div_ceil(bs)]
                .iter()
                .all(|&b| b != NONE)
    }

    /// The f32 keys and values of positions `0..n` of `layer`, `[1, n_kv_heads, n, head_dim]`.
    /// A local layer's positions no window reaches any more are zeros (the attention masks
    /// them).
    fn gather(&self, layer: usize, n: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let buffers = self.pool.buffers(layer)?;
        let table = self.table(layer);
        let (h, d) = (self.config.n_kv_heads, self.config.head_dim);
        let bs = self.pool.block_size;
        let mut scratch = Vec::new();
        let mut out = [Vec::with_capacity(h * n * d), Vec::with_capacity(h * n * d)];
        for (buffer, out) in buffers.iter().zip(&mut out) {
            for head in 0..h {
                for p in 0..n {
                    if table[p / bs] == NONE {
                        out.resize(out.len() + d, 0.0);
                        continue;
                    }
                    let v = self.pool.vector(table, head, p);
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
        if adding > self.max_pass() {
            return Err(KvCacheError::PassTooLong {
                adding,
                most: self.max_pass(),
            });
        }
        if !self.local.is_empty() {
            self.release_behind();
        }
        self.make_writable(self.len + adding)
    }

    /// Unlimited without local layers; with them `WINDOW_SLACK + 1`, as a ring's: what a
    /// sequence holds of the local layers stays bounded (the model splits longer passes).
    fn max_pass(&self) -> usize {
        if self.local.is_empty() {
            usize::MAX
        } else {
            WINDOW_SLACK + 1
        }
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
        // next `prepare`. Further back than the local layers still hold their window (more
        // than `WINDOW_SLACK` positions after a pass), the cache empties, as a ring does.
        let len = self.len.min(len);
        self.len = if self.holds_window_before(len) {
            len
        } else {
            0
        };
        // Local blocks of positions past the length are written again when reached.
        self.release_local(self.len.div_ceil(self.pool.block_size)..usize::MAX);
    }

    fn reset(&mut self) {
        self.len = 0;
        self.release_local(0..usize::MAX);
    }

    fn fork(&self) -> Self {
        let mut books = self.pool.books();
        for &block in &self.blocks {
            books.global.retain(block);
        }
        if let Some(local) = &mut books.local {
            for block in held(&self.local) {
                local.retain(block);
            }
        }
        PagedCache {
            pool: Arc::clone(&self.pool),
            config: self.config,
            blocks: self.blocks.clone(),
            local: self.local.clone(),
            len: self.len,
        }
    }

    /// The blocks it holds now: all of the global layers' (reserved for its capacity) and
    /// the local layers' of its window.
    fn bytes(&self) -> usize {
        let (global, local) = self.pool.bytes_per_block();
        self.blocks.len() * global + held(&self.local).len() * local
    }
}

impl PagedCache {
    /// The block table `layer` reads: the local one for a local layer.
    fn table(&self, layer: usize) -> &[usize] {
        match self.pool.windows.get(layer) {
            Some(Some(_)) => &self.local,
            _ => &self.blocks,
        }
    }

    fn host_view(&mut self, layer: usize) -> Result<HostKvLayer<'_>, KvCacheError> {
        let buffers = self.pool.buffers(layer)?;
        Ok(HostKvLayer::paged(
            buffers,
            self.table(layer),
            self.pool.block_size,
            layer,
            &self.config,
            self.len,
        ))
    }
}
