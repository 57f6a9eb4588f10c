//! In-place host access to one layer of a cache on a CPU device.
//!
//! A CPU forward pass that keeps its activations on the host (kindle's fused decode path) reads
//! and writes the cache here instead of through Burn tensor ops. On CPU backends a uniquely
//! owned, contiguous tensor converts to [`TensorData`] and back without copying (the buffer
//! moves), so a [`HostKvLayer`] is a view of the cache's own storage: the bytes are not copied
//! in either direction, and the tensors are put back when the view is dropped. A paged
//! pool's layers ([`PoolBuffer`]) are host memory already; a view of one reads them through a
//! sequence's block table.

use std::cell::UnsafeCell;

use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use half::f16;
use half::vec::HalfBitsVecExt;

use crate::storage::{Buffer, placeholder};
use crate::{KvCacheConfig, KvCacheError, KvType};

/// A buffer's contents moved out of its tensors.
pub(crate) enum HostBuffer {
    /// f32 or f16 elements `[1, heads, capacity, head_dim]`.
    Float(TensorData),
    /// int8 elements and their f32 scales `[1, heads, capacity, 1]`.
    Int8 {
        data: TensorData,
        scales: TensorData,
    },
}

// Element access. The dtypes are the ones `Buffer::zeros` made, so a mismatch is a bug here.
fn slice<E: burn::tensor::Element>(data: &TensorData) -> &[E] {
    data.as_slice::<E>()
        .expect("cache buffer of the dtype it was made with")
}

fn slice_mut<E: burn::tensor::Element>(data: &mut TensorData) -> &mut [E] {
    data.as_mut_slice::<E>()
        .expect("cache buffer of the dtype it was made with")
}

// Moving a buffer's contents to the host and back (here, beside `HostBuffer`, so that the
// storage module does not need to know the host views).
impl Buffer {
    /// Move the contents out as host data, leaving empty placeholders (see [`HostBuffer`]:
    /// without a copy on CPU devices when the tensors are not shared).
    pub(crate) fn take_host(&mut self) -> HostBuffer {
        match self {
            Buffer::Float(buf) => {
                let device = buf.device();
                HostBuffer::Float(std::mem::replace(buf, placeholder(&device)).into_data())
            }
            Buffer::Int8 { data, scales } => {
                let device = scales.device();
                let empty = Tensor::empty([0, 0, 0, 0], (&device, DType::I8));
                HostBuffer::Int8 {
                    data: std::mem::replace(data, empty).into_data(),
                    scales: std::mem::replace(scales, placeholder(&device)).into_data(),
                }
            }
        }
    }

    /// Put back what [`take_host`](Self::take_host) moved out.
    pub(crate) fn put_host(&mut self, host: HostBuffer, device: &Device) {
        *self = match host {
            HostBuffer::Float(data) => {
                let dtype = data.dtype();
                Buffer::Float(Tensor::from_data(data, (device, dtype)))
            }
            HostBuffer::Int8 { data, scales } => Buffer::Int8 {
                data: Tensor::from_data(data, (device, DType::I8)),
                scales: Tensor::from_data(scales, device),
            },
        };
    }
}

impl HostBuffer {
    /// Store vector `index` (`head * capacity + position`) from `x` (`head_dim` values).
    pub(crate) fn write(&mut self, index: usize, x: &[f32]) {
        let d = x.len();
        let range = index * d..(index + 1) * d;
        match self {
            HostBuffer::Float(data) if data.dtype() == DType::F16 => {
                for (out, &v) in slice_mut::<f16>(data)[range].iter_mut().zip(x) {
                    *out = f16::from_f32(v);
                }
            }
            HostBuffer::Float(data) => slice_mut::<f32>(data)[range].copy_from_slice(x),
            HostBuffer::Int8 { data, scales } => {
                // As `Buffer::write`: symmetric absmax / 127 per vector.
                let absmax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                let scale = absmax / 127.0;
                let divisor = scale.max(f32::MIN_POSITIVE);
                for (out, &v) in slice_mut::<i8>(data)[range].iter_mut().zip(x) {
                    *out = (v / divisor).round().clamp(-127.0, 127.0) as i8;
                }
                slice_mut::<f32>(scales)[index] = scale;
            }
        }
    }

    /// Vectors `start..start + n` (`d` wide) of an f32 buffer, borrowed.
    ///
    /// # Panics
    /// If the buffer does not store f32.
    fn f32_run(&self, start: usize, n: usize, d: usize) -> &[f32] {
        match self {
            HostBuffer::Float(data) if data.dtype() == DType::F32 => {
                &slice::<f32>(data)[start * d..(start + n) * d]
            }
            _ => panic!("f32_run on a buffer that does not store f32"),
        }
    }

    /// Vectors `start..start + n` (`d` wide) of an f16 buffer, borrowed.
    ///
    /// # Panics
    /// If the buffer does not store f16.
    fn f16_run(&self, start: usize, n: usize, d: usize) -> &[f16] {
        match self {
            HostBuffer::Float(data) if data.dtype() == DType::F16 => {
                &slice::<f16>(data)[start * d..(start + n) * d]
            }
            _ => panic!("f16_run on a buffer that does not store f16"),
        }
    }

    /// Vectors `start..start + n` (`d` wide) of an int8 buffer and their scales, borrowed.
    ///
    /// # Panics
    /// If the buffer does not store int8.
    fn int8_run(&self, start: usize, n: usize, d: usize) -> (&[i8], &[f32]) {
        match self {
            HostBuffer::Int8 { data, scales } => (
                &slice::<i8>(data)[start * d..(start + n) * d],
                &slice::<f32>(scales)[start..start + n],
            ),
            _ => panic!("int8_run on a buffer that does not store int8"),
        }
    }

    /// Vectors `start..start + n` (`head_dim` = `d` wide) as f32: borrowed when stored as f32,
    /// decoded into `scratch` otherwise.
    pub(crate) fn read<'s>(
        &'s self,
        start: usize,
        n: usize,
        d: usize,
        scratch: &'s mut Vec<f32>,
    ) -> &'s [f32] {
        let range = start * d..(start + n) * d;
        match self {
            HostBuffer::Float(data) if data.dtype() == DType::F16 => {
                use half::slice::HalfFloatSliceExt;
                scratch.resize(n * d, 0.0);
                slice::<f16>(data)[range].convert_to_f32_slice(scratch);
                scratch
            }
            HostBuffer::Float(data) => &slice::<f32>(data)[range],
            HostBuffer::Int8 { data, scales } => {
                scratch.clear();
                let q = &slice::<i8>(data)[range];
                let scales = &slice::<f32>(scales)[start..start + n];
                for (row, &scale) in q.chunks_exact(d).zip(scales) {
                    scratch.extend(row.iter().map(|&v| f32::from(v) * scale));
                }
                scratch
            }
        }
    }
}

/// One layer's keys or values for every block: vector `(block * n_kv_heads + head) *
/// block_size + offset` is `head_dim` elements.
pub(crate) struct PoolBuffer(UnsafeCell<HostBuffer>);

// SAFETY: a block is written only by the one cache that holds it alone (`PagedCache::prepare`
// copies or unindexes any other first), from the thread running the forward pass, before the
// pass's attention reads; reads of shared blocks only ever read. See `HostKvLayer`'s paged
// storage for the accesses.
unsafe impl Sync for PoolBuffer {}
// SAFETY: the buffer owns its memory; nothing in it is tied to a thread.
unsafe impl Send for PoolBuffer {}

impl PoolBuffer {
    /// A zeroed buffer of `vectors` vectors of `head_dim` values, or
    /// [`KvCacheError::Allocation`] when the memory cannot be had (a pool asked for more than
    /// the machine gives is an error, not an abort).
    pub(crate) fn zeros(
        kv_type: KvType,
        vectors: usize,
        head_dim: usize,
    ) -> Result<Self, KvCacheError> {
        let shape = [vectors, head_dim];
        let n = vectors
            .checked_mul(head_dim)
            .ok_or(KvCacheError::Allocation { bytes: usize::MAX })?;
        // Zeroed allocations: pages are touched (resident) only once a block is written.
        let host = match kv_type {
            KvType::F32 => HostBuffer::Float(TensorData::new(zeroed::<f32>(n)?, shape)),
            KvType::F16 => {
                let zeros: Vec<f16> = zeroed::<u16>(n)?.reinterpret_into();
                HostBuffer::Float(TensorData::new(zeros, shape))
            }
            KvType::Int8 => HostBuffer::Int8 {
                data: TensorData::new(zeroed::<i8>(n)?, shape),
                scales: TensorData::new(zeroed::<f32>(vectors)?, [vectors, 1]),
            },
        };
        Ok(PoolBuffer(UnsafeCell::new(host)))
    }

    /// The buffer, for reading.
    ///
    /// # Safety
    /// No write to the vectors read may run at the same time (see the type's `Sync`).
    pub(crate) unsafe fn get(&self) -> &HostBuffer {
        // SAFETY: as the caller promises.
        unsafe { &*self.0.get() }
    }

    /// The buffer, for writing.
    ///
    /// # Safety
    /// The caller holds the blocks written alone, and nothing reads them meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_mut(&self) -> &mut HostBuffer {
        // SAFETY: as the caller promises.
        unsafe { &mut *self.0.get() }
    }
}

/// Numbers whose all-zero bytes are the value 0.
trait ZeroBits: Copy {}
impl ZeroBits for f32 {}
impl ZeroBits for u16 {}
impl ZeroBits for i8 {}

/// `n` zeros from the allocator's zeroed memory (`calloc`: large ones are fresh pages, not
/// resident until written), or [`KvCacheError::Allocation`] instead of aborting.
fn zeroed<T: ZeroBits>(n: usize) -> Result<Vec<T>, KvCacheError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n)
        .map_err(|_| KvCacheError::Allocation { bytes: usize::MAX })?;
    // SAFETY: the layout's size is not zero.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(KvCacheError::Allocation {
            bytes: layout.size(),
        });
    }
    // SAFETY: `ptr` was allocated by the global allocator with `T`'s alignment for `n`
    // values, all initialised (zero bits are a `T`).
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// One layer's keys and values, viewed in place on the host for a forward pass (see the
/// module docs). Obtained from [`KvStore::host_layer`](crate::KvStore::host_layer); the cache's
/// tensors are restored when it is dropped.
///
/// Positions are those of the cache: [`len`](Self::len) tokens are held; the pass writes its
/// `T` new tokens at `len..len + T` ([`write`](Self::write)) and reads any positions below
/// `len + T` ([`keys`](Self::keys), [`values`](Self::values)). As with
/// [`KvStore::update`](crate::KvStore::update), the length moves on only with
/// [`KvStore::advance`](crate::KvStore::advance).
pub struct HostKvLayer<'a> {
    store: Store<'a>,
    layer: usize,
    n_kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    len: usize,
}

/// An int8 cache's vectors as stored ([`HostKvLayer::key_runs_int8`]): one entry per stretch
/// stored together, in position order.
#[derive(Debug, Clone)]
pub struct Int8Runs<'a> {
    /// Each stretch's quants, whole `head_dim`-wide vectors.
    pub quants: Vec<&'a [i8]>,
    /// Each stretch's scales, one per vector.
    pub scales: Vec<&'a [f32]>,
}

/// Where a [`HostKvLayer`]'s vectors are.
// A view lives for one layer of one pass: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Store<'a> {
    /// A contiguous cache's buffers, moved out of their tensors until drop: vector
    /// `head * ring + position % ring`.
    Owned {
        slots: [&'a mut Buffer; 2],
        host: [Option<HostBuffer>; 2],
        device: Device,
        /// Positions stored per head: the capacity, or a local layer's ring (position `p`
        /// in slot `p % ring`).
        ring: usize,
    },
    /// A paged pool's layer, read through a sequence's block table: vector
    /// `(blocks[position / block_size] * n_kv_heads + head) * block_size + position %
    /// block_size`.
    Paged {
        buffers: &'a [PoolBuffer; 2],
        blocks: &'a [usize],
        block_size: usize,
    },
}

impl<'a> HostKvLayer<'a> {
    /// View `layer`'s buffers of a cache shaped as `config` holding `len` tokens.
    pub(crate) fn new(
        [keys, values]: [&'a mut Buffer; 2],
        device: Device,
        layer: usize,
        config: &KvCacheConfig,
        slots: usize,
        len: usize,
    ) -> Self {
        let host = [Some(keys.take_host()), Some(values.take_host())];
        HostKvLayer {
            store: Store::Owned {
                slots: [keys, values],
                host,
                device,
                ring: slots,
            },
            layer,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            capacity: config.capacity,
            len,
        }
    }

    /// View a paged pool's `layer` through a sequence's block table (see
    /// [`PagedCache`](crate::PagedCache)); `config.capacity` is the sequence's.
    pub(crate) fn paged(
        buffers: &'a [PoolBuffer; 2],
        blocks: &'a [usize],
        block_size: usize,
        layer: usize,
        config: &KvCacheConfig,
        len: usize,
    ) -> Self {
        HostKvLayer {
            store: Store::Paged {
                buffers,
                blocks,
                block_size,
            },
            layer,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            capacity: config.capacity.min(blocks.len() * block_size),
            len,
        }
    }

    /// Vector index of `head` at `position`, and how many positions from there on are
    /// stored one after another.
    fn locate(&self, head: usize, position: usize) -> (usize, usize) {
        match &self.store {
            Store::Owned { ring, .. } => {
                let slot = position % ring;
                (head * ring + slot, ring - slot)
            }
            Store::Paged {
                blocks, block_size, ..
            } => {
                let (block, offset) = (blocks[position / block_size], position % block_size);
                (
                    (block * self.n_kv_heads + head) * block_size + offset,
                    block_size - offset,
                )
            }
        }
    }

    fn buffer(&self, which: usize) -> &HostBuffer {
        match &self.store {
            Store::Owned { host, .. } => host[which]
                .as_ref()
                .expect("host buffers are present until drop"),
            // SAFETY: reading while no write runs: a pass writes its tokens through its views
            // before any view is read (see `PoolBuffer`).
            Store::Paged { buffers, .. } => unsafe { buffers[which].get() },
        }
    }

    /// Tokens held before this pass (the position of the first new token).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token was held before this pass.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Key/value heads.
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Whether keys and values are stored as `f32`, so that [`keys`](Self::keys) and
    /// [`values`](Self::values) borrow the cache's memory instead of decoding.
    pub fn stores_f32(&self) -> bool {
        matches!(self.buffer(0), HostBuffer::Float(data) if data.dtype() == DType::F32)
    }

    /// Whether keys and values are stored as `f16`, so that [`key_runs_f16`](Self::key_runs_f16)
    /// and [`value_runs_f16`](Self::value_runs_f16) borrow the cache's memory.
    pub fn stores_f16(&self) -> bool {
        matches!(self.buffer(0), HostBuffer::Float(data) if data.dtype() == DType::F16)
    }

    /// Whether keys and values are stored as int8 with a scale per vector, so that
    /// [`key_runs_int8`](Self::key_runs_int8) and [`value_runs_int8`](Self::value_runs_int8)
    /// borrow the cache's memory.
    pub fn stores_int8(&self) -> bool {
        matches!(self.buffer(0), HostBuffer::Int8 { .. })
    }

    /// Store the keys and values of the pass's new token number `offset` (position
    /// `len + offset`), each `[n_kv_heads * head_dim]`, heads one after another (the layout a
    /// key or value projection produces for one token).
    ///
    /// Errors: [`KvCacheError::Full`] past the capacity, [`KvCacheError::BadShape`] for
    /// vectors of another length.
    pub fn write(
        &mut self,
        offset: usize,
        keys: &[f32],
        values: &[f32],
    ) -> Result<(), KvCacheError> {
        let (h, d) = (self.n_kv_heads, self.head_dim);
        if keys.len() != h * d || values.len() != h * d {
            return Err(KvCacheError::BadShape {
                layer: self.layer,
                n_kv_heads: h,
                head_dim: d,
                got: vec![keys.len().max(values.len())],
            });
        }
        let position = self.len + offset;
        if position >= self.capacity {
            return Err(KvCacheError::Full {
                len: self.len,
                adding: offset + 1,
                capacity: self.capacity,
            });
        }
        for (which, x) in [keys, values].into_iter().enumerate() {
            for (head, vector) in x.chunks_exact(d).enumerate() {
                let (index, _) = self.locate(head, position);
                match &mut self.store {
                    Store::Owned { host, .. } => host[which]
                        .as_mut()
                        .expect("host buffers are present until drop")
                        .write(index, vector),
                    // SAFETY: the cache made the blocks at `len..` its own before the pass
                    // (`PagedCache::prepare`), and nothing reads them while the pass writes.
                    Store::Paged { buffers, .. } => {
                        unsafe { buffers[which].get_mut() }.write(index, vector)
                    }
                }
            }
        }
        Ok(())
    }

    /// The keys of `head` at positions `0..n` as f32 `[n, head_dim]`: the cache's own memory
    /// when it stores f32 contiguously, otherwise decoded or gathered into `scratch`.
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `n > capacity`.
    pub fn keys<'s>(&'s self, head: usize, n: usize, scratch: &'s mut Vec<f32>) -> &'s [f32] {
        self.keys_at(head, 0, n, scratch)
    }

    /// The values of `head` at positions `0..n`, as [`keys`](Self::keys).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `n > capacity`.
    pub fn values<'s>(&'s self, head: usize, n: usize, scratch: &'s mut Vec<f32>) -> &'s [f32] {
        self.values_at(head, 0, n, scratch)
    }

    /// The keys of `head` at positions `start..start + n`, as [`keys`](Self::keys).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn keys_at<'s>(
        &'s self,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> &'s [f32] {
        self.read_at(0, head, start, n, scratch)
    }

    /// The values of `head` at positions `start..start + n`, as [`keys`](Self::keys).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn values_at<'s>(
        &'s self,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> &'s [f32] {
        self.read_at(1, head, start, n, scratch)
    }

    /// The keys of `head` at positions `start..start + n` as runs of whole `head_dim`-wide
    /// vectors, in position order: when the cache stores f32, slices of its own memory, one
    /// per stretch stored together (one for a contiguous cache, one per block for a paged
    /// one), so nothing is copied; otherwise one run decoded into `scratch`.
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn key_runs<'s>(
        &'s self,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> Vec<&'s [f32]> {
        self.runs(0, head, start, n, scratch)
    }

    /// The values of `head` at positions `start..start + n`, as [`key_runs`](Self::key_runs).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn value_runs<'s>(
        &'s self,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> Vec<&'s [f32]> {
        self.runs(1, head, start, n, scratch)
    }

    /// The keys of `head` at positions `start..start + n` as they are stored, when the cache
    /// stores `f16`: slices of its own memory, whole `head_dim`-wide vectors in position order,
    /// one per stretch stored together, as [`key_runs`](Self::key_runs) borrows f32 (a kernel
    /// that widens as it reads gets the values [`key_runs`](Self::key_runs) would decode, and
    /// reads half the bytes). `None` when the cache stores another type.
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn key_runs_f16(&self, head: usize, start: usize, n: usize) -> Option<Vec<&[f16]>> {
        self.f16_runs(0, head, start, n)
    }

    /// The values of `head` at positions `start..start + n`, as
    /// [`key_runs_f16`](Self::key_runs_f16).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn value_runs_f16(&self, head: usize, start: usize, n: usize) -> Option<Vec<&[f16]>> {
        self.f16_runs(1, head, start, n)
    }

    /// The keys of `head` at positions `start..start + n` as they are stored, when the cache
    /// stores int8: for each stretch stored together, its quants (whole `head_dim`-wide
    /// vectors, in position order) and their scales, one per vector (vector `i`'s values are
    /// `f32::from(q) * scale[i]`, what [`key_runs`](Self::key_runs) decodes). `None` when the
    /// cache stores another type.
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn key_runs_int8(&self, head: usize, start: usize, n: usize) -> Option<Int8Runs<'_>> {
        self.int8_runs(0, head, start, n)
    }

    /// The values of `head` at positions `start..start + n`, as
    /// [`key_runs_int8`](Self::key_runs_int8).
    ///
    /// # Panics
    /// If `head >= n_kv_heads` or `start + n > capacity`.
    pub fn value_runs_int8(&self, head: usize, start: usize, n: usize) -> Option<Int8Runs<'_>> {
        self.int8_runs(1, head, start, n)
    }

    fn int8_runs(&self, which: usize, head: usize, start: usize, n: usize) -> Option<Int8Runs<'_>> {
        if !self.stores_int8() {
            return None;
        }
        let buffer = self.buffer(which);
        let (mut quants, mut scales) = (Vec::new(), Vec::new());
        self.for_each_stretch(head, start, n, |index, take| {
            let (q, s) = buffer.int8_run(index, take, self.head_dim);
            quants.push(q);
            scales.push(s);
        });
        Some(Int8Runs { quants, scales })
    }

    fn f16_runs(&self, which: usize, head: usize, start: usize, n: usize) -> Option<Vec<&[f16]>> {
        if !self.stores_f16() {
            return None;
        }
        let buffer = self.buffer(which);
        let mut out = Vec::new();
        self.for_each_stretch(head, start, n, |index, take| {
            out.push(buffer.f16_run(index, take, self.head_dim));
        });
        Some(out)
    }

    /// `f(index, count)` for every stretch of `head`'s positions `start..start + n` stored
    /// together (vector `index` and the `count` after it), in position order.
    fn for_each_stretch(
        &self,
        head: usize,
        start: usize,
        n: usize,
        mut f: impl FnMut(usize, usize),
    ) {
        self.check_range(head, start, n);
        let mut position = start;
        while position < start + n {
            let (index, run) = self.locate(head, position);
            let take = run.min(start + n - position);
            f(index, take);
            position += take;
        }
    }

    fn runs<'s>(
        &'s self,
        which: usize,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> Vec<&'s [f32]> {
        if !self.stores_f32() {
            return vec![self.read_at(which, head, start, n, scratch)];
        }
        let buffer = self.buffer(which);
        let mut out = Vec::new();
        self.for_each_stretch(head, start, n, |index, take| {
            out.push(buffer.f32_run(index, take, self.head_dim));
        });
        out
    }

    fn check_range(&self, head: usize, start: usize, n: usize) {
        assert!(
            head < self.n_kv_heads && start + n <= self.capacity,
            "cache range"
        );
    }

    fn read_at<'s>(
        &'s self,
        which: usize,
        head: usize,
        start: usize,
        n: usize,
        scratch: &'s mut Vec<f32>,
    ) -> &'s [f32] {
        self.check_range(head, start, n);
        let (index, run) = self.locate(head, start);
        let buffer = self.buffer(which);
        if n <= run {
            return buffer.read(index, n, self.head_dim, scratch);
        }
        // A range over several blocks of a paged pool: gathered.
        let mut decoded = Vec::new();
        scratch.clear();
        self.for_each_stretch(head, start, n, |index, take| {
            scratch.extend_from_slice(buffer.read(index, take, self.head_dim, &mut decoded));
        });
        scratch
    }
}

impl Drop for HostKvLayer<'_> {
    fn drop(&mut self) {
        if let Store::Owned {
            slots,
            host,
            device,
            ..
        } = &mut self.store
        {
            for (slot, host) in slots.iter_mut().zip(host) {
                if let Some(host) = host.take() {
                    slot.put_host(host, device);
                }
            }
        }
    }
}

impl std::fmt::Debug for HostKvLayer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKvLayer")
            .field("layer", &self.layer)
            .field("n_kv_heads", &self.n_kv_heads)
            .field("head_dim", &self.head_dim)
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests;
