//! The model behind the generation loop's traits: [`Engine`] implements
//! [`kindle_generate::LanguageModel`], [`EngineCache`] its [`ModelCache`]; [`EngineOptions`]
//! says where and how a model runs (device, float type, threads, activations, KV type).
//!
//! This is the seam between the crates that know Burn and those that do not: the CLI (and
//! the server) build an [`EngineOptions`] from their flags, call [`Engine::load`], and see
//! only `LanguageModel` from then on.

use std::sync::Arc;

use kindle_generate::{BlockStats, LanguageModel, ModelCache, PagedModel};
use kindle_gguf::GgufFile;
use kindle_kernels::{ActivationFormat, KernelOptions, RowArithmetic};
use kindle_kv_cache::{
    KvCache, KvCacheError, KvStore, KvType, PagedCache, PagedPool, SlidingWindowCache,
};

use crate::device::{DeviceKind, Dtype, OpenDevice};
use crate::error::ModelError;
use crate::llama::{BatchSequence, Llama, LogitsFor, RopeOverrides};

/// Where and how a model runs: what every command that runs one shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineOptions {
    /// The device.
    pub device: DeviceKind,
    /// Float type of dense weights and matrix products (GPU devices; CPU devices take `f32`).
    pub dtype: Dtype,
    /// Threads for the CPU kernels; `None`: the physical cores.
    pub threads: Option<usize>,
    /// Activations of the quantized CPU kernels.
    pub activations: ActivationFormat,
    /// How KV caches store keys and values.
    pub kv_type: KvType,
    /// The arithmetic of the CPU kernels' products of several rows
    /// ([`RowArithmetic::ByRows`]: a prompt of 32 tokens or more takes the prefill product,
    /// decode steps the decode kernels). A server batching prompts and decode steps of many
    /// requests together asks for [`RowArithmetic::Decode`], so that a row's logits do not
    /// depend on its batch, its prompt's chunking or a cached prefix.
    pub arithmetic: RowArithmetic,
    /// Rotary settings over the file's (`--rope-scaling`, `--rope-scale`, ...).
    pub rope: RopeOverrides,
}

impl Default for EngineOptions {
    /// Flex, `f32`, the physical cores, `f32` activations, an `f32` KV cache.
    fn default() -> Self {
        EngineOptions {
            device: DeviceKind::Flex,
            dtype: Dtype::F32,
            threads: None,
            activations: ActivationFormat::F32,
            kv_type: KvType::F32,
            arithmetic: RowArithmetic::ByRows,
            rope: RopeOverrides::default(),
        }
    }
}

impl EngineOptions {
    /// The same options on another device.
    pub fn on(device: DeviceKind) -> Self {
        EngineOptions {
            device,
            ..EngineOptions::default()
        }
    }

    /// Check the options that need no device (threads from 1 to [`kindle_kernels::MAX_THREADS`],
    /// rotary settings in range).
    pub fn validate(&self) -> Result<(), ModelError> {
        if let Some(problem) = self.rope.problem() {
            return Err(ModelError::Option(problem));
        }
        match self.threads {
            Some(0) => Err(ModelError::Option("--threads must be at least 1".into())),
            Some(n) if n > kindle_kernels::MAX_THREADS => Err(ModelError::Option(format!(
                "--threads {n} is more than {} (this machine runs {} at once)",
                kindle_kernels::MAX_THREADS,
                std::thread::available_parallelism().map_or(1, |p| p.get())
            ))),
            _ => Ok(()),
        }
    }

    /// The CPU kernels' options: thread count and activation format (the model loaded with
    /// them holds them; nothing process-wide is set).
    pub fn kernel_options(&self) -> KernelOptions {
        KernelOptions {
            threads: self.threads,
            activations: self.activations,
            arithmetic: self.arithmetic,
        }
    }
}

/// A [`Llama`] behind the generation loop's [`LanguageModel`] trait.
pub struct Engine {
    /// The transformer.
    pub llama: Llama,
    /// How new caches store keys and values.
    pub kv_type: KvType,
    /// `Some(keep)`: new caches are sliding windows that never discard their first `keep`
    /// tokens (llama.cpp's context shift); `None`: fixed caches that fill up.
    pub sliding_keep: Option<usize>,
    /// The device it runs on.
    pub device: OpenDevice,
    /// The pool that [`PagedModel::pooled_cache`] draws from, once opened.
    pub pool: Option<Arc<PagedPool>>,
}

impl Engine {
    /// Bytes of one cache of `capacity` tokens as [`LanguageModel::new_cache`] makes it:
    /// fixed (local layers a ring of their window) or sliding (every layer whole).
    pub fn cache_bytes(&self, capacity: usize) -> usize {
        match self.sliding_keep {
            None => self.llama.kv_cache_bytes(capacity, self.kv_type),
            Some(_) => self.llama.sliding_cache_bytes(capacity, self.kv_type),
        }
    }

    /// Open the device `options` name and load `file`'s weights onto it.
    pub fn load(file: &GgufFile, options: &EngineOptions) -> Result<Engine, ModelError> {
        options.validate()?;
        let device = OpenDevice::open(options.device, options.dtype)?;
        if !options
            .device
            .holds_kv_type(&device.device, options.kv_type)
        {
            return Err(crate::device::DeviceError::KvTypeUnsupported {
                kv_type: options.kv_type,
                device: options.device,
            }
            .into());
        }
        let load = device
            .load_options()
            .with_kernels(options.kernel_options())
            .with_rope(options.rope);
        let llama = Llama::from_gguf_with(file, &device.device, load)?;
        Ok(Engine {
            llama,
            kv_type: options.kv_type,
            sliding_keep: None,
            device,
            pool: None,
        })
    }
}

/// A KV cache behind the generation loop's [`ModelCache`] trait: fixed or sliding.
#[derive(Debug)]
pub enum EngineCache {
    /// Fills up; a forward pass that does not fit is an error.
    Fixed(KvCache),
    /// Discards old tokens (after the kept prefix) to make room.
    Sliding(SlidingWindowCache),
    /// Blocks of a shared [`PagedPool`] (`kindle serve`).
    Paged(PagedCache),
}

impl EngineCache {
    /// The cache as the model sees it.
    pub fn store(&mut self) -> &mut dyn KvStore {
        match self {
            EngineCache::Fixed(c) => c,
            EngineCache::Sliding(c) => c,
            EngineCache::Paged(c) => c,
        }
    }

    fn store_ref(&self) -> &dyn KvStore {
        match self {
            EngineCache::Fixed(c) => c,
            EngineCache::Sliding(c) => c,
            EngineCache::Paged(c) => c,
        }
    }

    /// Bytes of the cache's storage.
    pub fn bytes(&self) -> usize {
        self.store_ref().bytes()
    }
}

impl ModelCache for EngineCache {
    fn len(&self) -> usize {
        self.store_ref().len()
    }
    fn capacity(&self) -> usize {
        self.store_ref().capacity()
    }
    fn truncate(&mut self, len: usize) {
        self.store().truncate(len)
    }
    fn max_pass(&self) -> usize {
        self.store_ref().max_pass()
    }
    fn fork(&self) -> Self {
        match self {
            EngineCache::Fixed(c) => EngineCache::Fixed(c.fork()),
            EngineCache::Sliding(c) => EngineCache::Sliding(c.fork()),
            EngineCache::Paged(c) => EngineCache::Paged(c.fork()),
        }
    }
    fn sliding_keep(&self) -> Option<usize> {
        match self {
            EngineCache::Fixed(_) | EngineCache::Paged(_) => None,
            EngineCache::Sliding(c) => Some(c.keep()),
        }
    }
    fn discarded(&self) -> usize {
        match self {
            EngineCache::Fixed(_) | EngineCache::Paged(_) => 0,
            EngineCache::Sliding(c) => c.discarded(),
        }
    }
}

impl LanguageModel for Engine {
    type Cache = EngineCache;
    type Error = ModelError;

    fn vocab_size(&self) -> usize {
        self.llama.config().vocab_size
    }
    fn context_length(&self) -> usize {
        self.llama.config().context_length
    }
    fn new_cache(&self, capacity: usize) -> Result<EngineCache, ModelError> {
        Ok(match self.sliding_keep {
            None => EngineCache::Fixed(self.llama.new_cache_typed(capacity, self.kv_type)),
            Some(keep) => {
                EngineCache::Sliding(self.llama.new_sliding_cache(capacity, self.kv_type, keep)?)
            }
        })
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut EngineCache,
    ) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, cache.store(), LogitsFor::Last)
    }
    /// Only the head's rows holding `rows` on the host path ([`Llama::forward_last_rows`]).
    fn forward_last_in(
        &self,
        tokens: &[u32],
        cache: &mut EngineCache,
        rows: &[std::ops::Range<usize>],
    ) -> Result<Vec<f32>, ModelError> {
        let mut logits = self.llama.forward_last_rows(tokens, cache.store(), rows)?;
        kindle_generate::mask_outside(&mut logits, rows);
        Ok(logits)
    }
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut EngineCache)],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut sequences: Vec<BatchSequence<'_>> = batch
            .iter_mut()
            .map(|(tokens, cache)| BatchSequence {
                tokens,
                cache: cache.store(),
            })
            .collect();
        self.llama.forward_batch(&mut sequences, LogitsFor::Last)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut EngineCache) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, cache.store(), LogitsFor::All)
    }
    /// On the kernels' threads ([`Kernels::parallel_for`](kindle_kernels::Kernels::parallel_for)),
    /// idle between passes; no thread is started for it.
    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        self.llama.kernels().parallel_for(n, task);
    }
}

impl PagedModel for Engine {
    /// A pool in host memory stored as the engine's KV type; on a GPU device the Burn path
    /// gathers each sequence's keys and values from it for every layer (correct, not fast:
    /// paged attention on the GPU is not written yet). Local layers (Gemma-3's) keep blocks
    /// of their own, enough for `sequences` windows and as many cached
    /// ([`PagedPool::local_blocks_for`]).
    fn open_pool(
        &mut self,
        blocks: usize,
        block_size: usize,
        sequences: usize,
    ) -> Result<(), ModelError> {
        let config = self.llama.config().kv_cache_config(0);
        let windows = self.llama.layer_windows();
        let local = PagedPool::local_blocks_for(&windows, block_size, sequences, blocks);
        let pool = PagedPool::with_windows(
            config,
            self.kv_type,
            (blocks, block_size),
            &windows,
            local,
            &self.llama.device(),
        )?;
        self.pool = Some(pool);
        Ok(())
    }

    fn pooled_cache(
        &self,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Option<(EngineCache, usize)>, ModelError> {
        let pool = self.pool.as_ref().ok_or_else(|| {
            ModelError::Option("no paged KV pool is open (PagedModel::open_pool)".into())
        })?;
        match pool.cache_for(prompt, capacity) {
            Ok((cache, reused)) => Ok(Some((EngineCache::Paged(cache), reused))),
            Err(KvCacheError::OutOfBlocks { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn publish(&self, cache: &EngineCache, tokens: &[u32]) -> usize {
        match cache {
            EngineCache::Paged(c) => c.pool().publish(c, tokens),
            _ => 0,
        }
    }

    fn pool_stats(&self) -> Option<BlockStats> {
        self.pool.as_ref().map(|p| p.stats())
    }

    fn local_pool_stats(&self) -> Option<BlockStats> {
        self.pool.as_ref().and_then(|p| p.local_stats())
    }
}
