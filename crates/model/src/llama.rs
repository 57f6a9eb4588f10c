//! The Llama-family decoder-only transformer (Llama, Mistral, SmolLM2, TinyLlama) in Burn.
//!
//! Pre-norm blocks of grouped-query attention with rotary positions and a SwiGLU feed-forward
//! network, an RMS-normed output and a (possibly tied) output head. The KV cache lives outside
//! the module: [`Llama::forward`] takes any [`KvStore`] by `&mut` (a fixed [`KvCache`] or a
//! [`SlidingWindowCache`]), and its length is the rotary offset.

use burn::config::Config;
use burn::module::Param;
use burn::prelude::*;
use burn::tensor::TensorData;
use burn::tensor::activation::silu;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use kindle_kv_cache::{KvCache, KvCacheConfig, KvStore, KvType, SlidingWindowCache};

use crate::error::ModelError;
use crate::linear::{LinearWeight, QLinear};

mod host;

/// Hyperparameters of a Llama-family model.
#[derive(Config, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary size (rows of the embedding and of the output head).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Number of transformer blocks.
    pub n_layers: usize,
    /// Query heads per block.
    pub n_heads: usize,
    /// Key/value heads per block (`n_heads` for MHA, 1 for MQA, in between for GQA).
    pub n_kv_heads: usize,
    /// Width of the feed-forward network's hidden layer.
    pub d_ff: usize,
    /// Rotary base frequency (`theta`).
    #[config(default = 10000.0)]
    pub rope_theta: f64,
    /// Epsilon of the RMS norms.
    #[config(default = 1e-5)]
    pub rms_eps: f64,
    /// Context length the model was trained with.
    #[config(default = 2048)]
    pub context_length: usize,
    /// Whether the output head reuses the token embedding.
    #[config(default = true)]
    pub tied_embeddings: bool,
}

impl LlamaConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Number of weights (embedding, blocks, norms and an untied output head).
    pub fn parameter_count(&self) -> u64 {
        let (d, hd, ff, v) = (
            self.d_model as u64,
            self.head_dim() as u64,
            self.d_ff as u64,
            self.vocab_size as u64,
        );
        let (h, hkv) = (self.n_heads as u64, self.n_kv_heads as u64);
        let block = 2 * d + d * h * hd * 2 + d * hkv * hd * 2 + 3 * d * ff;
        let output = if self.tied_embeddings { 0 } else { v * d };
        v * d + self.n_layers as u64 * block + d + output
    }

    /// Check that the hyperparameters are usable and consistent with each other.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |key: &str, problem: String| ModelError::Hyperparameter {
            key: key.into(),
            problem,
        };
        for (key, value) in [
            ("vocab_size", self.vocab_size),
            ("embedding_length", self.d_model),
            ("block_count", self.n_layers),
            ("attention.head_count", self.n_heads),
            ("attention.head_count_kv", self.n_kv_heads),
            ("feed_forward_length", self.d_ff),
            ("context_length", self.context_length),
        ] {
            if value == 0 {
                return Err(bad(key, "must be positive, got 0".into()));
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(bad(
                "attention.head_count",
                format!(
                    "{} heads do not divide the embedding width {}",
                    self.n_heads, self.d_model
                ),
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad(
                "attention.head_count_kv",
                format!(
                    "{} KV heads do not divide {} query heads",
                    self.n_kv_heads, self.n_heads
                ),
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(bad(
                "rope.dimension_count",
                format!("head width {} is odd", self.head_dim()),
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(bad(
                "rope.freq_base",
                format!("must be a positive number, got {}", self.rope_theta),
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return Err(bad(
                "attention.layer_norm_rms_epsilon",
                format!("must be a positive number, got {}", self.rms_eps),
            ));
        }
        Ok(())
    }

    /// The shape of a KV cache for this model holding `capacity` tokens.
    pub fn kv_cache_config(&self, capacity: usize) -> KvCacheConfig {
        KvCacheConfig {
            n_layers: self.n_layers,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim(),
            capacity,
        }
    }

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
        let (d, hd) = (self.d_model, self.head_dim());
        let w = 1.0 / (d as f32).sqrt();
        let embedding = QLinear::new(tensor([self.vocab_size, d], 1.0));
        let layers = (0..self.n_layers)
            .map(|_| Block {
                attn_norm: RmsNorm::new(Tensor::ones([d], device), self.rms_eps),
                wq: QLinear::new(tensor([self.n_heads * hd, d], w)),
                wk: QLinear::new(tensor([self.n_kv_heads * hd, d], w)),
                wv: QLinear::new(tensor([self.n_kv_heads * hd, d], w)),
                wo: QLinear::new(tensor([d, self.n_heads * hd], w)),
                ffn_norm: RmsNorm::new(Tensor::ones([d], device), self.rms_eps),
                w_gate: QLinear::new(tensor([self.d_ff, d], w)),
                w_up: QLinear::new(tensor([self.d_ff, d], w)),
                w_down: QLinear::new(tensor([d, self.d_ff], 1.0 / (self.d_ff as f32).sqrt())),
            })
            .collect();
        let output = (!self.tied_embeddings).then(|| QLinear::new(tensor([self.vocab_size, d], w)));
        Llama::from_parts(
            self.clone(),
            embedding,
            layers,
            RmsNorm::new(Tensor::ones([d], device), self.rms_eps),
            output,
        )
    }
}

/// Root-mean-square layer norm: `x / sqrt(mean(x^2) + eps) * gamma` over the last dimension.
#[derive(Module, Debug)]
pub struct RmsNorm {
    /// Per-feature scale.
    pub gamma: Param<Tensor<1>>,
    /// Added to the mean square for stability.
    pub eps: f64,
}

impl RmsNorm {
    /// A norm with the given scale.
    pub fn new(gamma: Tensor<1>, eps: f64) -> Self {
        RmsNorm {
            gamma: Param::from_tensor(gamma),
            eps,
        }
    }

    /// Normalise `[batch, seq, d]` activations.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let inv_rms = x
            .clone()
            .square()
            .mean_dim(2)
            .add_scalar(self.eps)
            .sqrt()
            .recip();
        x * inv_rms * self.gamma.val().unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0)
    }
}

/// One pre-norm transformer block: attention then SwiGLU feed-forward, each residual.
#[derive(Module, Debug)]
pub struct Block {
    attn_norm: RmsNorm,
    wq: QLinear,
    wk: QLinear,
    wv: QLinear,
    wo: QLinear,
    ffn_norm: RmsNorm,
    w_gate: QLinear,
    w_up: QLinear,
    w_down: QLinear,
}

impl Block {
    /// Assemble a block from its weights (`[d_out, d_in]` matrices).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        attn_norm: RmsNorm,
        wq: QLinear,
        wk: QLinear,
        wv: QLinear,
        wo: QLinear,
        ffn_norm: RmsNorm,
        w_gate: QLinear,
        w_up: QLinear,
        w_down: QLinear,
    ) -> Self {
        Block {
            attn_norm,
            wq,
            wk,
            wv,
            wo,
            ffn_norm,
            w_gate,
            w_up,
            w_down,
        }
    }
}

/// Rotation tables for a run of positions.
struct Rope {
    /// `[1, 1, T, head_dim / 2, 1]`
    cos: Tensor<5>,
    /// `[1, 1, T, head_dim / 2, 1]`
    sin: Tensor<5>,
}

impl Rope {
    /// Angles `pos * theta^(-2i/d)` for each of `positions`, computed in f64, stored as f32.
    fn new(positions: &[usize], head_dim: usize, theta: f64, device: &Device) -> Self {
        let half = head_dim / 2;
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64))
            .collect();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &pos in positions {
            for &freq in &inv_freq {
                let angle = pos as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [1, 1, positions.len(), half, 1];
        Rope {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
        }
    }

    /// Rotate adjacent pairs `(2i, 2i+1)` of every head (GGUF's llama layout: the converter
    /// permuted the q/k rows so that this is the right pairing).
    ///
    /// `x`: `[batch, heads, T, head_dim]`.
    fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let [b, h, t, d] = x.dims();
        let pairs = x.reshape([b, h, t, d / 2, 2]);
        let x0 = pairs.clone().narrow(4, 0, 1);
        let x1 = pairs.narrow(4, 1, 1);
        let out0 = x0.clone() * self.cos.clone() - x1.clone() * self.sin.clone();
        let out1 = x0 * self.sin.clone() + x1 * self.cos.clone();
        Tensor::cat(vec![out0, out1], 4).reshape([b, h, t, d])
    }
}

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Only the last position (generation).
    Last,
    /// Every position (scoring).
    All,
}

/// The weights of the host path: every matrix quantized, norms copied to the host.
#[derive(Debug, Clone)]
struct HostWeights {
    /// Per block: the attention and feed-forward norms' scales.
    norms: Vec<[Vec<f32>; 2]>,
    /// The output norm's scale.
    output_norm: Vec<f32>,
}

impl HostWeights {
    /// The host copies of the norms if every weight matrix (and the embedding) is quantized;
    /// `None` otherwise (the model then always runs on the Burn path).
    fn new(
        embedding: &QLinear,
        layers: &[Block],
        norm: &RmsNorm,
        output: Option<&QLinear>,
    ) -> Option<Self> {
        let quantized = |l: &QLinear| matches!(l.weight(), LinearWeight::Quantized(_));
        let all = quantized(embedding)
            && output.is_none_or(quantized)
            && layers.iter().all(|b| {
                [&b.wq, &b.wk, &b.wv, &b.wo, &b.w_gate, &b.w_up, &b.w_down]
                    .into_iter()
                    .all(quantized)
            });
        if !all {
            return None;
        }
        let host = |n: &RmsNorm| -> Option<Vec<f32>> {
            n.gamma
                .val()
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .ok()
        };
        Some(HostWeights {
            norms: layers
                .iter()
                .map(|b| Some([host(&b.attn_norm)?, host(&b.ffn_norm)?]))
                .collect::<Option<_>>()?,
            output_norm: host(norm)?,
        })
    }
}

/// A Llama-family model.
#[derive(Module, Debug)]
pub struct Llama {
    /// The token embedding `[vocab, d_model]`, also the output head when tied.
    embedding: QLinear,
    layers: Vec<Block>,
    norm: RmsNorm,
    output: Option<QLinear>,
    #[module(skip)]
    config: LlamaConfig,
    /// The host path's weights, when every matrix is quantized (see [`host`]): copies of the
    /// norms' scales taken by [`from_parts`](Self::from_parts).
    #[module(skip)]
    host: Option<HostWeights>,
}

impl Llama {
    /// Assemble a model from its parts. `embedding` is `[vocab, d_model]`; `output` is `None`
    /// for a head tied to the embedding.
    pub fn from_parts(
        config: LlamaConfig,
        embedding: QLinear,
        layers: Vec<Block>,
        norm: RmsNorm,
        output: Option<QLinear>,
    ) -> Self {
        let host = HostWeights::new(&embedding, &layers, &norm, output.as_ref());
        Llama {
            embedding,
            layers,
            norm,
            output,
            config,
            host,
        }
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        self.norm.gamma.val().device()
    }

    /// A fresh, empty KV cache for up to `capacity` tokens on the model's device.
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(self.config().kv_cache_config(capacity), &self.device())
    }

    /// A fresh, empty KV cache for up to `capacity` tokens stored as `kv_type` (f32, f16 or
    /// int8 with per-token, per-head scales).
    pub fn new_cache_typed(&self, capacity: usize, kv_type: KvType) -> KvCache {
        KvCache::with_type(
            self.config().kv_cache_config(capacity),
            kv_type,
            &self.device(),
        )
    }

    /// A fresh, empty sliding-window cache of `capacity` tokens stored as `kv_type`: when full
    /// it discards tokens after the first `keep` and re-rotates the rest (llama.cpp's context
    /// shift), so generation can go on past `capacity`.
    ///
    /// Errors: [`KvCacheError::KeepTooLarge`](kindle_kv_cache::KvCacheError::KeepTooLarge)
    /// when `keep >= capacity`.
    pub fn new_sliding_cache(
        &self,
        capacity: usize,
        kv_type: KvType,
        keep: usize,
    ) -> Result<SlidingWindowCache, ModelError> {
        Ok(SlidingWindowCache::with_type(
            self.config().kv_cache_config(capacity),
            kv_type,
            keep,
            self.config().rope_theta,
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
    pub fn forward_batch(
        &self,
        batch: &mut [BatchSequence<'_>],
        which: LogitsFor,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let (spans, positions, ids) = self.prepare_batch(batch)?;
        if self.host_path_applies(batch, ids.len()) {
            return self.forward_batch_host(batch, &spans, &positions, &ids, which);
        }
        let logits = self.forward_prepared(batch, &spans, &positions, &ids, which)?;
        let vocab = self.config().vocab_size;
        let flat = logits
            .into_data()
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
                rows.by_ref().take(n).flatten().copied().collect()
            })
            .collect())
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
        self.forward_prepared(batch, &spans, &positions, &ids, which)
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

    /// The Burn path of a prepared batch.
    fn forward_prepared(
        &self,
        batch: &mut [BatchSequence<'_>],
        spans: &[(usize, usize)],
        positions: &[usize],
        ids: &[u32],
        which: LogitsFor,
    ) -> Result<Tensor<3>, ModelError> {
        let config = self.config();
        let device = self.device();
        let n = ids.len();
        let mut x = self.embedding.embed(ids, &device);

        let rope = Rope::new(positions, config.head_dim(), config.rope_theta, &device);
        for (index, block) in self.layers.iter().enumerate() {
            x = self.block_forward(block, index, x, &rope, batch, spans)?;
        }
        for seq in batch.iter_mut() {
            seq.cache.advance(seq.tokens.len())?;
        }

        if which == LogitsFor::Last && n > batch.len() {
            let last_rows = spans
                .iter()
                .map(|&(start, len)| x.clone().narrow(1, start + len - 1, 1))
                .collect();
            x = Tensor::cat(last_rows, 1);
        }
        let x = self.norm.forward(x);
        Ok(match &self.output {
            Some(head) => head.forward(x),
            None => self.embedding.forward(x),
        })
    }

    fn block_forward(
        &self,
        block: &Block,
        index: usize,
        x: Tensor<3>,
        rope: &Rope,
        batch: &mut [BatchSequence<'_>],
        spans: &[(usize, usize)],
    ) -> Result<Tensor<3>, ModelError> {
        let config = self.config();
        let [b, t, _] = x.dims();
        let (h, hkv, hd) = (config.n_heads, config.n_kv_heads, config.head_dim());

        let normed = block.attn_norm.forward(x.clone());
        let q = block
            .wq
            .forward(normed.clone())
            .reshape([b, t, h, hd])
            .swap_dims(1, 2);
        let k = block
            .wk
            .forward(normed.clone())
            .reshape([b, t, hkv, hd])
            .swap_dims(1, 2);
        let v = block
            .wv
            .forward(normed)
            .reshape([b, t, hkv, hd])
            .swap_dims(1, 2);
        let q = rope.apply(q);
        let k = rope.apply(k);
        let mut contexts = Vec::with_capacity(batch.len());
        for (seq, &(start, len)) in batch.iter_mut().zip(spans) {
            let (keys, values) = seq.cache.update(
                index,
                k.clone().narrow(2, start, len),
                v.clone().narrow(2, start, len),
            )?;
            contexts.push(attend(
                q.clone().narrow(2, start, len),
                keys,
                values,
                h,
                hkv,
            ));
        }
        let context = match contexts.pop() {
            Some(only) if contexts.is_empty() => only,
            Some(last) => {
                contexts.push(last);
                Tensor::cat(contexts, 2)
            }
            None => return Err(ModelError::EmptyInput),
        };
        let context = context.swap_dims(1, 2).reshape([b, t, h * hd]);
        let x = x + block.wo.forward(context);

        let normed = block.ffn_norm.forward(x.clone());
        let gate = silu(block.w_gate.forward(normed.clone()));
        let up = block.w_up.forward(normed);
        Ok(x + block.w_down.forward(gate * up))
    }
}

/// One sequence of a batched forward pass: its new tokens and its cache.
pub struct BatchSequence<'a> {
    /// Tokens to run after those already in `cache`.
    pub tokens: &'a [u32],
    /// The sequence's keys and values (any [`KvStore`]); the tokens are appended to it.
    pub cache: &'a mut dyn KvStore,
}

/// Causal grouped-query attention of `q` (`[1, h, T, hd]`) over `keys`/`values`
/// (`[1, hkv, S, hd]`, the last `T` of them new): `[1, h, T, hd]`.
fn attend(q: Tensor<4>, keys: Tensor<4>, values: Tensor<4>, h: usize, hkv: usize) -> Tensor<4> {
    let [b, _, t, hd] = q.dims();
    let s = keys.dims()[2];
    let rep = h / hkv;
    if t == 1 {
        // One query per head: group the query heads by the KV head they read
        // (head h reads KV head h / rep), so no key or value is copied.
        let q = q.reshape([b, hkv, rep, hd]);
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: false,
        };
        attention(q, keys, values, None, None, options).reshape([b, h, 1, hd])
    } else {
        let keys = keys
            .unsqueeze_dim::<5>(2)
            .expand([b, hkv, rep, s, hd])
            .reshape([b, h, s, hd]);
        let values = values
            .unsqueeze_dim::<5>(2)
            .expand([b, hkv, rep, s, hd])
            .reshape([b, h, s, hd]);
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: true,
        };
        attention(q, keys, values, None, None, options)
    }
}
