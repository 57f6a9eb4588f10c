//! Many sequences in one pool of fixed-size blocks (paged attention's storage).

use std::collections::BTreeMap;

use burn::prelude::*;

use crate::{KvCacheConfig, KvCacheError};

/// A sequence held by a [`PagedPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeqId(usize);

impl SeqId {
    /// The id as a number (for messages).
    pub fn index(self) -> usize {
        self.0
    }
}

/// One sequence: its blocks in order, and its length in tokens.
#[derive(Debug, Clone, Default)]
struct Sequence {
    blocks: Vec<usize>,
    len: usize,
}

/// One layer's pool: `[n_blocks, n_kv_heads, block_size, head_dim]` keys and values.
#[derive(Debug, Clone)]
struct LayerPool {
    keys: Tensor<4>,
    values: Tensor<4>,
}

/// Key/value storage for many sequences: every layer has one pool of `n_blocks` blocks of
/// `block_size` tokens, and each sequence a table of the blocks it uses, so sequences of any
/// lengths share one allocation.
///
/// [`fork`](Self::fork) shares all the blocks of a sequence (refcounted); a block is copied
/// only when a sequence writes into one it shares (copy-on-write), so a common prompt is
/// stored once. Storage is f32. Every sequence's tokens sit at positions `0..len`: its length
/// is the RoPE position of its next token.
///
/// Writes follow the model's pattern: [`append`](Self::append) (or [`update`](Self::update))
/// for every layer at positions `len..len + T`, then [`advance`](Self::advance)`(seq, T)`.
///
/// ```
/// use burn::prelude::*;
/// use kindle_kv_cache::{KvCacheConfig, PagedPool};
///
/// let device = Device::flex();
/// let config = KvCacheConfig { n_layers: 1, n_kv_heads: 1, head_dim: 2, capacity: 0 };
/// let mut pool = PagedPool::new(config, 8, 4, &device).unwrap();
/// let a = pool.new_sequence();
/// let x = Tensor::<4>::ones([1, 1, 6, 2], &device);
/// pool.append(a, 0, x.clone(), x).unwrap();
/// pool.advance(a, 6).unwrap();
/// let b = pool.fork(a).unwrap(); // shares both blocks
/// assert_eq!(pool.blocks_in_use(), 2);
/// let y = Tensor::<4>::zeros([1, 1, 1, 2], &device);
/// pool.append(b, 0, y.clone(), y).unwrap(); // copies the shared, partly filled block
/// pool.advance(b, 1).unwrap();
/// assert_eq!(pool.blocks_in_use(), 3);
/// let (keys, _) = pool.gather(b, 0).unwrap();
/// assert_eq!(keys.dims(), [1, 1, 7, 2]);
/// ```
#[derive(Debug, Clone)]
pub struct PagedPool {
    config: KvCacheConfig,
    block_size: usize,
    layers: Vec<LayerPool>,
    refcounts: Vec<usize>,
    free: Vec<usize>,
    sequences: BTreeMap<SeqId, Sequence>,
    next_id: usize,
    device: Device,
}

impl PagedPool {
    /// A zeroed pool of `n_blocks` blocks of `block_size` tokens per layer
    /// (`config.capacity` is not used).
    pub fn new(
        config: KvCacheConfig,
        n_blocks: usize,
        block_size: usize,
        device: &Device,
    ) -> Result<Self, KvCacheError> {
        if n_blocks == 0 || block_size == 0 {
            return Err(KvCacheError::BadPool {
                n_blocks,
                block_size,
            });
        }
        let shape = [n_blocks, config.n_kv_heads, block_size, config.head_dim];
        let layers = (0..config.n_layers)
            .map(|_| LayerPool {
                keys: Tensor::zeros(shape, device),
                values: Tensor::zeros(shape, device),
            })
            .collect();
        Ok(PagedPool {
            config,
            block_size,
            layers,
            refcounts: vec![0; n_blocks],
            // Popped from the end: hand out block 0 first.
            free: (0..n_blocks).rev().collect(),
            sequences: BTreeMap::new(),
            next_id: 0,
            device: device.clone(),
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks per layer.
    pub fn n_blocks(&self) -> usize {
        self.refcounts.len()
    }

    /// Blocks held by at least one sequence.
    pub fn blocks_in_use(&self) -> usize {
        self.n_blocks() - self.free.len()
    }

    /// Bytes of the pool: `2 x layers x blocks x block_size x kv_heads x head_dim x 4`.
    pub fn bytes(&self) -> usize {
        self.config.bytes_per_token() * self.n_blocks() * self.block_size
    }

    /// A new, empty sequence.
    pub fn new_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        self.sequences.insert(id, Sequence::default());
        id
    }

    /// The sequences held, in creation order.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.sequences.keys().copied()
    }

    fn seq(&self, seq: SeqId) -> Result<&Sequence, KvCacheError> {
        self.sequences
            .get(&seq)
            .ok_or(KvCacheError::NoSuchSequence { seq: seq.0 })
    }

    /// Tokens held by `seq` (the position of its next token).
    pub fn len(&self, seq: SeqId) -> Result<usize, KvCacheError> {
        Ok(self.seq(seq)?.len)
    }

    /// A new sequence holding the same tokens as `seq`, sharing its blocks.
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId, KvCacheError> {
        let copy = self.seq(seq)?.clone();
        for &block in &copy.blocks {
            self.refcounts[block] += 1;
        }
        let id = SeqId(self.next_id);
        self.next_id += 1;
        self.sequences.insert(id, copy);
        Ok(id)
    }

    fn release(&mut self, block: usize) {
        self.refcounts[block] -= 1;
        if self.refcounts[block] == 0 {
            self.free.push(block);
        }
    }

    fn allocate(&mut self) -> usize {
        let block = self
            .free
            .pop()
            .expect("free blocks counted before allocating");
        self.refcounts[block] = 1;
        block
    }

    /// Give `seq` blocks for positions up to `end`, and make every block it will write
    /// (positions `len..end`) its own, copying shared ones. All or nothing.
    fn make_writable(&mut self, seq: SeqId, end: usize) -> Result<(), KvCacheError> {
        let bs = self.block_size;
        let s = self.seq(seq)?;
        let needed_blocks = end.div_ceil(bs);
        let first_written = s.len / bs;
        let shared: Vec<usize> = (first_written..needed_blocks.min(s.blocks.len()))
            .filter(|&i| self.refcounts[s.blocks[i]] > 1)
            .collect();
        let new_blocks = needed_blocks.saturating_sub(s.blocks.len());
        let needed = shared.len() + new_blocks;
        if needed > self.free.len() {
            return Err(KvCacheError::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        for i in shared {
            let old = self.sequences[&seq].blocks[i];
            let new = self.allocate();
            for layer in &mut self.layers {
                let [_, h, _, d] = layer.keys.dims();
                let k = layer.keys.clone().slice([old..old + 1, 0..h, 0..bs, 0..d]);
                let v = layer
                    .values
                    .clone()
                    .slice([old..old + 1, 0..h, 0..bs, 0..d]);
                layer.keys =
                    take(&mut layer.keys).slice_assign([new..new + 1, 0..h, 0..bs, 0..d], k);
                layer.values =
                    take(&mut layer.values).slice_assign([new..new + 1, 0..h, 0..bs, 0..d], v);
            }
            self.release(old);
            self.sequences.get_mut(&seq).expect("checked above").blocks[i] = new;
        }
        for _ in 0..new_blocks {
            let block = self.allocate();
            self.sequences
                .get_mut(&seq)
                .expect("checked above")
                .blocks
                .push(block);
        }
        Ok(())
    }

    /// Write the keys and values (`[1, n_kv_heads, T, head_dim]`) of `T` new tokens of `seq`
    /// for `layer` at positions `len..len + T`, taking (and copying-on-write) blocks as needed.
    /// The length does not change until [`advance`](Self::advance).
    pub fn append(
        &mut self,
        seq: SeqId,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(), KvCacheError> {
        let t = self.config.check_shape(layer, &keys, &values)?;
        let start = self.seq(seq)?.len;
        self.make_writable(seq, start + t)?;
        let bs = self.block_size;
        let [_, h, _, d] = keys.dims();
        let blocks = self.sequences[&seq].blocks.clone();
        let pool = &mut self.layers[layer];
        let mut pos = start;
        while pos < start + t {
            let (block, offset) = (blocks[pos / bs], pos % bs);
            let n = (bs - offset).min(start + t - pos);
            let src = [0..1, 0..h, pos - start..pos - start + n, 0..d];
            let dst = [block..block + 1, 0..h, offset..offset + n, 0..d];
            pool.keys =
                take(&mut pool.keys).slice_assign(dst.clone(), keys.clone().slice(src.clone()));
            pool.values = take(&mut pool.values).slice_assign(dst, values.clone().slice(src));
            pos += n;
        }
        Ok(())
    }

    /// The keys and values of `seq`'s positions `0..len` in `layer`, gathered into
    /// contiguous `[1, n_kv_heads, len, head_dim]` tensors for attention.
    pub fn gather(&self, seq: SeqId, layer: usize) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let len = self.seq(seq)?.len;
        self.gather_to(seq, layer, len)
    }

    fn gather_to(
        &self,
        seq: SeqId,
        layer: usize,
        len: usize,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let pool = self.layers.get(layer).ok_or(KvCacheError::NoSuchLayer {
            layer,
            n_layers: self.config.n_layers,
        })?;
        let (h, d) = (self.config.n_kv_heads, self.config.head_dim);
        let nb = len.div_ceil(self.block_size);
        if nb == 0 {
            let empty = Tensor::<4>::zeros([1, h, 0, d], &self.device);
            return Ok((empty.clone(), empty));
        }
        let blocks: Vec<i64> = self.seq(seq)?.blocks[..nb]
            .iter()
            .map(|&b| b as i64)
            .collect();
        let index = Tensor::<1, Int>::from_data(TensorData::new(blocks, [nb]), &self.device);
        let arrange = |pool: &Tensor<4>| {
            pool.clone()
                .select(0, index.clone())
                .swap_dims(0, 1)
                .reshape([1, h, nb * self.block_size, d])
                .narrow(2, 0, len)
        };
        Ok((arrange(&pool.keys), arrange(&pool.values)))
    }

    /// [`append`](Self::append), then the keys and values of positions `0..len + T`
    /// (what [`KvCache::update`](crate::KvCache::update) returns).
    pub fn update(
        &mut self,
        seq: SeqId,
        layer: usize,
        keys: Tensor<4>,
        values: Tensor<4>,
    ) -> Result<(Tensor<4>, Tensor<4>), KvCacheError> {
        let t = keys.dims()[2];
        self.append(seq, layer, keys, values)?;
        let len = self.seq(seq)?.len;
        self.gather_to(seq, layer, len + t)
    }

    /// Move `seq`'s length on by `n` once every layer has been appended to.
    pub fn advance(&mut self, seq: SeqId, n: usize) -> Result<(), KvCacheError> {
        let bs = self.block_size;
        let s = self
            .sequences
            .get_mut(&seq)
            .ok_or(KvCacheError::NoSuchSequence { seq: seq.0 })?;
        let capacity = s.blocks.len() * bs;
        if s.len + n > capacity {
            return Err(KvCacheError::Full {
                len: s.len,
                adding: n,
                capacity,
            });
        }
        s.len += n;
        Ok(())
    }

    /// Forget `seq`'s tokens from position `len` on, releasing blocks it no longer needs.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvCacheError> {
        let bs = self.block_size;
        let s = self
            .sequences
            .get_mut(&seq)
            .ok_or(KvCacheError::NoSuchSequence { seq: seq.0 })?;
        s.len = s.len.min(len);
        let keep = s.len.div_ceil(bs);
        let dropped: Vec<usize> = s.blocks.drain(keep..).collect();
        for block in dropped {
            self.release(block);
        }
        Ok(())
    }

    /// Drop `seq`, releasing its blocks.
    pub fn free(&mut self, seq: SeqId) -> Result<(), KvCacheError> {
        let s = self
            .sequences
            .remove(&seq)
            .ok_or(KvCacheError::NoSuchSequence { seq: seq.0 })?;
        for block in s.blocks {
            self.release(block);
        }
        Ok(())
    }
}

/// Take a pool tensor out so that it is uniquely owned and a write happens in place.
fn take(t: &mut Tensor<4>) -> Tensor<4> {
    let device = t.device();
    std::mem::replace(t, Tensor::empty([0, 0, 0, 0], &device))
}
