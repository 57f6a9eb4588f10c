//! [`LlamaConfig`]: a model's hyperparameters, and [`AttentionShape`], the one place its
//! widths and head counts are derived.

use burn::config::Config;
use kindle_kv_cache::KvCacheConfig;

use super::rope_scaling::{RopeOverrides, RopeScaling, RopeScalingKind};
use crate::error::ModelError;

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
    /// Width of one attention head when the file states it (`attention.key_length`, which
    /// Gemma-3 sets to 256 with `d_model / heads` = 160); `None`: `d_model / n_heads`.
    pub key_length: Option<usize>,
    /// How many positions a local layer's query sees (`attention.sliding_window`), for
    /// architectures with local layers ([`LayerPattern::LocalGlobal`](super::LayerPattern));
    /// `None`: every layer global.
    pub sliding_window: Option<usize>,
    /// What queries are multiplied by before attention, when not `1 / sqrt(head_dim)`
    /// (llama.cpp's Gemma-3 27B: `1 / sqrt(d_model / heads)`).
    pub query_scale: Option<f64>,
    /// How the rotary frequencies are stretched (`rope.scaling.*`, `rope_freqs.weight`);
    /// `None`: the trained frequencies.
    pub rope_scaling: Option<RopeScaling>,
}

/// The shape of a layer's attention: every width and head count the recipe, both executors,
/// the loader and the cache derive from the hyperparameters, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; query head `h` reads KV head `h / group()`.
    pub kv_heads: usize,
    /// Width of one head (rotated by RoPE in adjacent pairs, so even).
    pub head_dim: usize,
}

impl AttentionShape {
    /// Query heads per KV head (grouped-query attention; 1 for multi-head attention).
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Width of a token's queries (and of the attention's output): `heads * head_dim`.
    pub fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of a token's keys, and of its values: `kv_heads * head_dim`.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

impl LlamaConfig {
    /// Width of one attention head: `key_length` when the file states it, else
    /// `d_model / n_heads`.
    pub fn head_dim(&self) -> usize {
        self.key_length
            .unwrap_or(self.d_model / self.n_heads.max(1))
    }

    /// What queries are multiplied by before attention: `query_scale`, else
    /// `1 / sqrt(head_dim)` (for Gemma-3, `1 / sqrt(key_length)`).
    pub fn attention_scale(&self) -> f32 {
        self.query_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim() as f64).sqrt()) as f32
    }

    /// These hyperparameters with rotary settings `o` over the file's, as llama.cpp applies
    /// its flags: `freq_base` replaces the global layers' base; `kind`, `factor` and
    /// `original_context` replace the file's (YaRN's original context defaulting to the
    /// file's, else the training context). A kind or factor given makes the context `f`
    /// times the original (for YaRN llama.cpp's `n_ctx_train`; linear: the file's context),
    /// if longer than the file's.
    pub fn with_rope_overrides(self, o: &RopeOverrides) -> Result<Self, ModelError> {
        if o.is_empty() {
            return Ok(self);
        }
        if let Some(problem) = o.problem() {
            return Err(ModelError::Option(problem));
        }
        let base = self.rope_scaling.clone().unwrap_or(RopeScaling {
            kind: RopeScalingKind::None,
            factor: 1.0,
            original_context: self.context_length,
            attn_factor: 1.0,
            freq_factors: None,
        });
        let scaling = RopeScaling {
            kind: o.kind.unwrap_or(base.kind),
            factor: o.factor.unwrap_or(base.factor),
            original_context: o.original_context.unwrap_or(base.original_context),
            ..base
        };
        let stretched = match scaling.kind {
            _ if o.kind.is_none() && o.factor.is_none() => self.context_length,
            RopeScalingKind::None => self.context_length,
            RopeScalingKind::Linear => (self.context_length as f64 * scaling.factor) as usize,
            RopeScalingKind::Yarn => (scaling.original_context as f64 * scaling.factor) as usize,
        };
        Ok(LlamaConfig {
            rope_theta: o.freq_base.unwrap_or(self.rope_theta),
            context_length: self.context_length.max(stretched),
            rope_scaling: scaling.normalized(),
            ..self
        })
    }

    /// Head counts and widths of the attention (see [`AttentionShape`]).
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            heads: self.n_heads,
            kv_heads: self.n_kv_heads,
            head_dim: self.head_dim(),
        }
    }

    /// Number of weights (embedding, blocks, norms and an untied output head).
    pub fn parameter_count(&self) -> u64 {
        let shape = self.attention();
        let (d, ff, v) = (
            self.d_model as u64,
            self.d_ff as u64,
            self.vocab_size as u64,
        );
        let (q, kv) = (shape.q_width() as u64, shape.kv_width() as u64);
        let block = 2 * d + d * q * 2 + d * kv * 2 + 3 * d * ff;
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
        if self.key_length == Some(0) {
            return Err(bad(
                "attention.key_length",
                "must be positive, got 0".into(),
            ));
        }
        if self.sliding_window == Some(0) {
            return Err(bad(
                "attention.sliding_window",
                "must be positive, got 0".into(),
            ));
        }
        if self.key_length.is_none() && !self.d_model.is_multiple_of(self.n_heads) {
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
}
