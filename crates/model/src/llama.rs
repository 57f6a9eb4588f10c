//! The Llama-family decoder-only transformer (Llama, Mistral, SmolLM2, TinyLlama) in Burn.
//!
//! Pre-norm blocks of grouped-query attention with rotary positions and a SwiGLU feed-forward
//! network, an RMS-normed output and a (possibly tied) output head. The KV cache lives outside
//! the module: [`Llama::forward`] takes any [`KvStore`] by `&mut` (a fixed [`KvCache`] or a
//! [`SlidingWindowCache`]), and its length is the rotary offset.
//!
//! The order of operations is written once, in `recipe` (generic over the ops of a layer),
//! and described per architecture by an [`ArchSpec`]; two executors run it: Burn tensor ops
//! (`burn_ops`, any device) and plain loops with the quantized kernels on host buffers
//! (`host_ops`, CPU devices, when [`Llama::forward_batch`] finds it applies). Modules:
//! `config` ([`LlamaConfig`], [`AttentionShape`]), `arch` ([`ArchSpec`]), `rope`
//! ([`RopeTable`]), `weights` ([`Norm`], [`Block`]).

use std::ops::Range;

use burn::prelude::*;
use kindle_kernels::Kernels;
use kindle_kv_cache::shift::{KeyRotation, RotaryPairs};
use kindle_kv_cache::{KvCache, KvStore, KvType, SlidingWindowCache};

use crate::error::ModelError;
use burn::tensor::TensorData;

use crate::linear::QLinear;

mod activation;
mod arch;
mod attend_decoded;
#[cfg(target_arch = "x86_64")]
mod attend_heads;
mod attend_keys;
#[cfg(target_arch = "x86_64")]
mod attend_stored;
#[cfg(target_arch = "x86_64")]
mod attend_tiles;
#[cfg(target_arch = "x86_64")]
mod attend_x86;
mod burn_ops;
mod config;
mod host_attend;
mod host_ops;
mod recipe;
mod rope;
mod rope_scaling;
mod softmax;
mod weights;

pub use arch::{
    ArchSpec, EmbeddingScale, FfnActivation, LayerPattern, LayerSpec, NormKind, Positions,
    RopeStyle,
};
pub use config::{AttentionShape, LlamaConfig};
pub use recipe::{BatchSequence, LogitsFor};
pub use rope::{RopeTable, Rotary};
pub use rope_scaling::{RopeOverrides, RopeScaling, RopeScalingKind};
pub use weights::{Block, Norm};

/// A Llama-family model.
#[derive(Module, Debug)]
pub struct Llama {
    /// The token embedding `[vocab, d_model]`, also the output head when tied.
    embedding: QLinear,
    layers: Vec<Block>,
    norm: Norm,
    output: Option<QLinear>,
    /// Learned position embeddings `[context, d_model]` (GPT-2), added to the token embeddings.
    positions: Option<QLinear>,
    #[module(skip)]
    config: LlamaConfig,
    /// What the architecture does differently from Llama (nothing, for Llama).
    #[module(skip)]
    arch: ArchSpec,
    /// Whether the host executor can run these weights (see `host_ops::host_ready`).
    #[module(skip)]
    host_ready: bool,
    /// How the quantized weights are multiplied: activation format and threads.
    #[module(skip)]
    kernels: Kernels,
}

impl Llama {
    /// Assemble a Llama model from its parts. `embedding` is `[vocab, d_model]`; `output` is
    /// `None` for a head tied to the embedding. Quantized weights run with the default
    /// [`Kernels`] (see [`with_kernels`](Self::with_kernels)).
    pub fn from_parts(
        config: LlamaConfig,
        embedding: QLinear,
        layers: Vec<Block>,
        norm: Norm,
        output: Option<QLinear>,
    ) -> Self {
        let parts = Parts {
            config,
            arch: ArchSpec::LLAMA,
            embedding,
            layers,
            norm,
            output,
            positions: None,
        };
        Self::assemble(parts, Kernels::default())
    }

    /// A model of architecture `parts.arch` multiplying its quantized weights with `kernels`.
    pub(crate) fn assemble(parts: Parts, kernels: Kernels) -> Self {
        let Parts {
            config,
            arch,
            embedding,
            layers,
            norm,
            output,
            positions,
        } = parts;
        let host_ready = host_ops::host_ready(
            &embedding,
            &layers,
            &norm,
            [output.as_ref(), positions.as_ref()],
        );
        Llama {
            embedding,
            layers,
            norm,
            output,
            positions,
            config,
            arch,
            host_ready,
            kernels,
        }
    }

    /// Keep only the first `n` layers (`1..=n_layers`; else `false` and nothing changes):
    /// the final norm and the head stay, so the model becomes an early-exit draft of itself
    /// (self-speculation). Caches made afterwards have `n` layers.
    pub fn truncate_layers(&mut self, n: usize) -> bool {
        if n == 0 || n > self.layers.len() {
            return false;
        }
        self.layers.truncate(n);
        self.config.n_layers = n;
        true
    }

    /// The number of weights the model holds (embeddings, every block's matrices, biases and
    /// norms, the final norm, an untied head), counted from the weights themselves.
    pub fn parameter_count(&self) -> u64 {
        let linears = [
            Some(&self.embedding),
            self.output.as_ref(),
            self.positions.as_ref(),
        ];
        let blocks: u64 = self
            .layers
            .iter()
            .map(|b| {
                b.linears().map(QLinear::parameter_count).sum::<u64>()
                    + b.norms().map(Norm::parameter_count).sum::<u64>()
            })
            .sum();
        linears
            .into_iter()
            .flatten()
            .map(QLinear::parameter_count)
            .sum::<u64>()
            + blocks
            + self.norm.parameter_count()
    }

    /// The weight bytes one decode step reads: every block's matrices and the head (the tied
    /// embedding where there is no separate one), as stored; not the embedding table (a row
    /// a token) nor the norms (kilobytes). Decode speed times this is the weights' streaming
    /// rate (`kindle bench --bandwidth`).
    pub fn decode_weight_bytes(&self) -> u64 {
        let head = self.output.as_ref().unwrap_or(&self.embedding);
        self.layers
            .iter()
            .flat_map(|b| b.linears())
            .chain([head])
            .map(QLinear::weight_bytes)
            .sum()
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The model's architecture.
    pub fn arch(&self) -> &ArchSpec {
        &self.arch
    }

    /// The model run as `arch` describes: its rotary bases, embedding scale and activation.
    /// (Which optional weights a layer has is the [`Block`]'s: the recipe applies those
    /// present; the loader attaches the ones `arch` lists.)
    pub fn with_arch(mut self, arch: ArchSpec) -> Self {
        self.arch = arch;
        self
    }

    /// The kernels the quantized weights are multiplied with (activation format, threads).
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// Multiply the quantized weights with `kernels` from now on (another thread count or
    /// activation format; the weights are not touched).
    pub fn set_kernels(&mut self, kernels: Kernels) {
        self.kernels = kernels;
    }

    /// The model with its quantized weights multiplied by `kernels`.
    pub fn with_kernels(mut self, kernels: Kernels) -> Self {
        self.set_kernels(kernels);
        self
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        self.norm.gamma.val().device()
    }

    /// A fresh, empty f32 KV cache for up to `capacity` tokens on the model's device (local
    /// layers keep a ring of their window: see [`new_cache_typed`](Self::new_cache_typed)).
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        self.new_cache_typed(capacity, KvType::F32)
    }

    /// A fresh, empty KV cache for up to `capacity` tokens stored as `kv_type` (f32, f16 or
    /// int8 with per-token, per-head scales).
    pub fn new_cache_typed(&self, capacity: usize, kv_type: KvType) -> KvCache {
        KvCache::with_windows(
            self.config().kv_cache_config(capacity),
            kv_type,
            &self.layer_windows(),
            &self.device(),
        )
    }

    /// Each layer's attention window (`None` for a global layer): a local layer's cache keeps
    /// a ring of its window plus [`WINDOW_SLACK`](kindle_kv_cache::WINDOW_SLACK) positions.
    pub fn layer_windows(&self) -> Vec<Option<usize>> {
        self.arch.layer_windows(self.config())
    }

    /// Bytes of a cache from [`new_cache_typed`](Self::new_cache_typed)`(capacity, kv_type)`.
    pub fn kv_cache_bytes(&self, capacity: usize, kv_type: KvType) -> usize {
        self.config()
            .kv_cache_config(capacity)
            .bytes_with_windows(kv_type, &self.layer_windows())
    }

    /// Bytes of a cache from [`new_sliding_cache`](Self::new_sliding_cache)`(capacity,
    /// kv_type, _)`: every layer the whole capacity.
    pub fn sliding_cache_bytes(&self, capacity: usize, kv_type: KvType) -> usize {
        let config = self.config();
        config
            .kv_cache_config(capacity)
            .bytes_with_windows(kv_type, &vec![None; config.n_layers])
    }

    /// A fresh, empty sliding-window cache of `capacity` tokens stored as `kv_type`: when full
    /// it discards tokens after the first `keep` and re-rotates the rest (llama.cpp's context
    /// shift), so generation can go on past `capacity`.
    ///
    /// Errors: [`KvCacheError::KeepTooLarge`](kindle_kv_cache::KvCacheError::KeepTooLarge)
    /// when `keep >= capacity`.
    ///
    /// Each layer's keys are turned again as the model turned them: its pairs (adjacent, or
    /// halves for Gemma and Qwen2) and its base (Gemma-3's local layers their own); a model
    /// with learned positions (GPT-2) has keys that carry no rotation, and a shift only
    /// renumbers the positions, as llama.cpp's does. Every layer holds the whole capacity:
    /// local layers keep no ring of their window here.
    pub fn new_sliding_cache(
        &self,
        capacity: usize,
        kv_type: KvType,
        keep: usize,
    ) -> Result<SlidingWindowCache, ModelError> {
        let pairs = match self.arch.rope_style {
            arch::RopeStyle::Adjacent => RotaryPairs::Adjacent,
            arch::RopeStyle::Halves => RotaryPairs::Halves,
        };
        let rotary = self.arch.positions == arch::Positions::Rotary;
        let config = self.config();
        let rotations = (0..config.n_layers)
            .map(|l| {
                rotary.then(|| {
                    let spec = self.arch.layer(config, l);
                    KeyRotation {
                        frequencies: config
                            .rope_scaling
                            .is_some()
                            .then(|| config.rotary(&spec).frequencies.into()),
                        ..KeyRotation::new(pairs, spec.rope_theta)
                    }
                })
            })
            .collect();
        Ok(SlidingWindowCache::with_rotations(
            self.config().kv_cache_config(capacity),
            kv_type,
            keep,
            rotations,
            &self.device(),
        )?)
    }

    /// Run `tokens` after those already in `cache`, append their keys and values to it, and
    /// return the logits (`[positions, vocab]` row-major: one row for [`LogitsFor::Last`]).
    ///
    /// The cache first makes room ([`KvStore::prepare`]: a fixed cache refuses tokens that do
    /// not fit; a sliding window discards old ones), then its length is the position of the
    /// first new token.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut dyn KvStore,
        which: LogitsFor,
    ) -> Result<Vec<f32>, ModelError> {
        let mut batch = [BatchSequence { tokens, cache }];
        let mut rows = self.forward_batch(&mut batch, which)?;
        Ok(rows.pop().unwrap_or_default())
    }

    /// Run several sequences in one pass: their new tokens are packed into one activation
    /// matrix, so every weight is read once for the whole batch, while attention runs per
    /// sequence against its own cache (ragged lengths need no padding or mask). Returns each
    /// sequence's logits as [`forward`](Self::forward) would.
    ///
    /// A sequence whose cache takes fewer tokens per pass ([`KvStore::max_pass`]: local layers
    /// keeping a ring of their window) is fed in several passes, with the other sequences in
    /// the first; the logits are the same. So is a pass whose buffers would pass what a GPU
    /// allocates at once: every row's logits, or a long prompt's attention scores (see
    /// [`DENSE_BLOCK_BYTES`](crate::linear::DENSE_BLOCK_BYTES)).
    pub fn forward_batch(
        &self,
        batch: &mut [BatchSequence<'_>],
        which: LogitsFor,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        self.forward_batch_in(batch, which, None)
    }

    /// As [`forward`](Self::forward) with [`LogitsFor::Last`], for the logits of the
    /// vocabulary entries in `rows` (ranges of token ids): the others are unspecified. On the
    /// host path only the head's rows holding them are computed (each logit with the bits
    /// [`forward`](Self::forward) gives it), which is what a speculative draft that proposes
    /// from part of the vocabulary saves; the Burn path computes every row.
    pub fn forward_last_rows(
        &self,
        tokens: &[u32],
        cache: &mut dyn KvStore,
        rows: &[Range<usize>],
    ) -> Result<Vec<f32>, ModelError> {
        let mut batch = [BatchSequence { tokens, cache }];
        let mut out = self.forward_batch_in(&mut batch, LogitsFor::Last, Some(rows))?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`forward_batch`](Self::forward_batch), computing only the head's `head_rows` when
    /// given (see [`forward_last_rows`](Self::forward_last_rows)).
    fn forward_batch_in(
        &self,
        batch: &mut [BatchSequence<'_>],
        which: LogitsFor,
        head_rows: Option<&[Range<usize>]>,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let logits_rows = self.logits_rows_per_pass(which);
        let seq_rows = self.attention_rows_per_pass(batch);
        if batch
            .iter()
            .all(|s| s.tokens.len() <= s.cache.max_pass().min(seq_rows))
            && batch.iter().map(|s| s.tokens.len()).sum::<usize>() <= logits_rows
        {
            return self.forward_batch_pass(batch, which, head_rows);
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); batch.len()];
        let mut done = vec![0usize; batch.len()];
        loop {
            let mut round = Vec::new();
            let mut fed = Vec::new();
            let mut budget = logits_rows;
            for (i, seq) in batch.iter_mut().enumerate() {
                let n = (seq.tokens.len() - done[i])
                    .min(seq.cache.max_pass())
                    .min(seq_rows)
                    .min(budget);
                budget -= n;
                if n > 0 {
                    let tokens: &[u32] = &seq.tokens[done[i]..done[i] + n];
                    round.push(BatchSequence {
                        tokens,
                        cache: &mut *seq.cache,
                    });
                    fed.push((i, n));
                }
            }
            if round.is_empty() {
                return Ok(out);
            }
            let rows = self.forward_batch_pass(&mut round, which, head_rows)?;
            for ((i, n), row) in fed.into_iter().zip(rows) {
                done[i] += n;
                match which {
                    LogitsFor::All => out[i].extend(row),
                    LogitsFor::Last => out[i] = row,
                }
            }
        }
    }

    /// One pass of [`forward_batch`](Self::forward_batch) (every sequence's tokens fit it).
    fn forward_batch_pass(
        &self,
        batch: &mut [BatchSequence<'_>],
        which: LogitsFor,
        head_rows: Option<&[Range<usize>]>,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let (spans, positions, ids) = self.prepare_batch(batch)?;
        let host = host_ops::host_path_applies(self.host_ready, &self.view(), batch, ids.len());
        let mut pass = recipe::Pass {
            seqs: batch,
            spans: &spans,
            positions: &positions,
            ids: &ids,
            which,
            head_rows,
        };
        if host {
            return host_ops::forward_batch_host(&self.view(), &self.kernels, &mut pass);
        }
        let logits = self.forward_prepared(&mut pass)?;
        let vocab = self.config().vocab_size;
        let flat = logits
            .try_into_data()
            .map_err(|e| ModelError::Readback(crate::error::device_error_text(&e)))?
            .try_into_vec::<f32>()
            .map_err(|e| ModelError::Readback(format!("{e:?}")))?;
        let mut rows = flat.chunks_exact(vocab);
        Ok(batch
            .iter()
            .map(|seq| {
                let n = match which {
                    LogitsFor::Last => 1,
                    LogitsFor::All => seq.tokens.len(),
                };
                rows.by_ref()
                    .take(n)
                    .fold(Vec::with_capacity(n * vocab), |mut row, chunk| {
                        row.extend_from_slice(chunk);
                        row
                    })
            })
            .collect())
    }

    /// The most rows whose logits one pass computes: every row on a CPU device; on a GPU as
    /// many as one buffer of [`DENSE_BLOCK_BYTES`](crate::linear::DENSE_BLOCK_BYTES) holds
    /// when every row's logits are asked for (a longer prompt is fed in several passes, as
    /// for a cache that takes fewer tokens a pass).
    fn logits_rows_per_pass(&self, which: LogitsFor) -> usize {
        if which == LogitsFor::Last || crate::device::is_host_device(&self.device()) {
            return usize::MAX;
        }
        (crate::linear::DENSE_BLOCK_BYTES / (self.config().vocab_size * 4)).max(1)
    }

    /// The most rows of one sequence a pass takes: every row on a CPU device; on a GPU as
    /// many as keep a layer's attention scores (`heads x rows x keys`, `f32`, against the
    /// longest sequence's keys after the pass) within one buffer of
    /// [`DENSE_BLOCK_BYTES`](crate::linear::DENSE_BLOCK_BYTES). Burn's attention holds them
    /// whole: a 2,400-token prompt's are 207 MB for SmolLM2, past lavapipe's 128 MiB.
    fn attention_rows_per_pass(&self, batch: &[BatchSequence<'_>]) -> usize {
        if crate::device::is_host_device(&self.device()) {
            return usize::MAX;
        }
        let keys = batch
            .iter()
            .map(|s| s.cache.len() + s.tokens.len())
            .max()
            .unwrap_or(1);
        let heads = self.config().attention().heads;
        (crate::linear::DENSE_BLOCK_BYTES / (heads * 4 * keys).max(1)).max(1)
    }

    /// As [`forward`](Self::forward), leaving the logits on the device: `[1, positions, vocab]`.
    /// Always the Burn path (see [`forward_batch_tensor`](Self::forward_batch_tensor)).
    pub fn forward_tensor(
        &self,
        tokens: &[u32],
        cache: &mut dyn KvStore,
        which: LogitsFor,
    ) -> Result<Tensor<3>, ModelError> {
        self.forward_batch_tensor(&mut [BatchSequence { tokens, cache }], which)
    }

    /// As [`forward_batch`](Self::forward_batch), leaving the logits on the device:
    /// `[1, rows, vocab]`, the sequences' rows one after another. This is always the Burn
    /// path (tensor ops on the model's device), also where
    /// [`forward_batch`](Self::forward_batch) takes the host path.
    pub fn forward_batch_tensor(
        &self,
        batch: &mut [BatchSequence<'_>],
        which: LogitsFor,
    ) -> Result<Tensor<3>, ModelError> {
        let (spans, positions, ids) = self.prepare_batch(batch)?;
        self.forward_prepared(&mut recipe::Pass {
            seqs: batch,
            spans: &spans,
            positions: &positions,
            ids: &ids,
            which,
            head_rows: None,
        })
    }

    /// Check a batch and make room in its caches: each sequence's `(first row, tokens)`, each
    /// row's position and the rows' token ids.
    #[allow(clippy::type_complexity)]
    fn prepare_batch(
        &self,
        batch: &mut [BatchSequence<'_>],
    ) -> Result<(Vec<(usize, usize)>, Vec<usize>, Vec<u32>), ModelError> {
        let config = self.config();
        if batch.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        let mut spans = Vec::with_capacity(batch.len());
        let mut positions = Vec::new();
        let mut ids = Vec::new();
        for seq in batch.iter() {
            if seq.tokens.is_empty() {
                return Err(ModelError::EmptyInput);
            }
            if let Some(&token) = seq
                .tokens
                .iter()
                .find(|&&t| t as usize >= config.vocab_size)
            {
                return Err(ModelError::TokenOutOfRange {
                    token,
                    vocab_size: config.vocab_size,
                });
            }
        }
        // Only once every sequence is valid: a sliding window may discard tokens here.
        for seq in batch.iter_mut() {
            seq.cache.prepare(seq.tokens.len())?;
            spans.push((ids.len(), seq.tokens.len()));
            positions.extend(seq.cache.len()..seq.cache.len() + seq.tokens.len());
            ids.extend_from_slice(seq.tokens);
        }
        Ok((spans, positions, ids))
    }

    /// The Burn path of a prepared batch: the recipe with Burn tensor ops.
    fn forward_prepared(&self, pass: &mut recipe::Pass<'_, '_>) -> Result<Tensor<3>, ModelError> {
        let mut ops = burn_ops::BurnOps::new(&self.kernels, self.device());
        Ok(recipe::forward(&self.view(), &mut ops, pass)?.into_tensor())
    }

    /// What the recipe reads of the model.
    fn view(&self) -> recipe::Model<'_> {
        recipe::Model {
            config: &self.config,
            arch: &self.arch,
            embedding: &self.embedding,
            layers: &self.layers,
            norm: &self.norm,
            output: self.output.as_ref(),
            positions: self.positions.as_ref(),
        }
    }
}

impl LlamaConfig {
    /// A model with these hyperparameters and deterministic pseudo-random weights (for tests
    /// and benchmarks that need no file).
    pub fn init_random(&self, seed: u64, device: &Device) -> Llama {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut tensor = |shape: [usize; 2], scale: f32| {
            let n = shape[0] * shape[1];
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
                })
                .collect();
            Tensor::<2>::from_data(TensorData::new(values, shape), device)
        };
        let (d, shape) = (self.d_model, self.attention());
        let (q, kv) = (shape.q_width(), shape.kv_width());
        let w = 1.0 / (d as f32).sqrt();
        let embedding = QLinear::new(tensor([self.vocab_size, d], 1.0));
        let layers = (0..self.n_layers)
            .map(|_| {
                Block::new(
                    Norm::new(Tensor::ones([d], device), self.rms_eps),
                    QLinear::new(tensor([q, d], w)),
                    QLinear::new(tensor([kv, d], w)),
                    QLinear::new(tensor([kv, d], w)),
                    QLinear::new(tensor([d, q], w)),
                    Norm::new(Tensor::ones([d], device), self.rms_eps),
                    QLinear::new(tensor([self.d_ff, d], w)),
                    QLinear::new(tensor([self.d_ff, d], w)),
                    QLinear::new(tensor([d, self.d_ff], 1.0 / (self.d_ff as f32).sqrt())),
                )
            })
            .collect();
        let output = (!self.tied_embeddings).then(|| QLinear::new(tensor([self.vocab_size, d], w)));
        Llama::from_parts(
            self.clone(),
            embedding,
            layers,
            Norm::new(Tensor::ones([d], device), self.rms_eps),
            output,
        )
    }
}

/// The parts of a model, as the loader assembles them.
pub(crate) struct Parts {
    pub(crate) config: LlamaConfig,
    pub(crate) arch: ArchSpec,
    pub(crate) embedding: QLinear,
    pub(crate) layers: Vec<Block>,
    pub(crate) norm: Norm,
    pub(crate) output: Option<QLinear>,
    pub(crate) positions: Option<QLinear>,
}
