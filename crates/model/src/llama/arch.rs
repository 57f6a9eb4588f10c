//! [`ArchSpec`]: what one decoder-only architecture does differently from another, as data.
//! The recipe ([`recipe`](super::recipe)) reads it, and so does the loader (which tensors a
//! file has); adding an architecture is filling in one of these plus the loader's names for
//! its tensors, and a new op only where it computes something no executor has yet.

use super::LlamaConfig;

/// The description of a decoder-only architecture (Llama's is [`ArchSpec::LLAMA`], Gemma-3's
/// [`ArchSpec::GEMMA3`]).
///
/// Every layer is: norm → q/k/v projections (+ biases) → q/k head norms → RoPE → cache write
/// → grouped-query attention (over the whole cache, or the last `window` positions of a local
/// layer) → output projection → post norm → residual add → norm → gate/up projections →
/// gated activation → down projection → post norm → residual add; the model is the embedding
/// (scaled) → the layers → final norm → head. The flags below switch the optional steps; the
/// steps themselves are written once, in the recipe.
///
/// What differs between the two supported architectures:
/// - Llama: none of the optional steps, SwiGLU, adjacent RoPE pairs (GGUF's converter
///   permuted the q/k rows for them), one rotary base.
/// - Gemma-3: `qk_norm`, `post_norms`, `embedding_scale: SqrtWidth`, GeGLU
///   ([`FfnActivation::GeluTanh`]), RoPE on halves ([`RopeStyle::Halves`], llama.cpp's
///   "NeoX" type), and [`LayerPattern::LocalGlobal`]: five local layers (sliding window,
///   rotary base 10,000) then one global layer (the file's `rope.freq_base`). Its head width
///   is `attention.key_length` (256, not `d_model / heads`), queries are scaled by
///   `1 / sqrt(key_length)` ([`LlamaConfig::attention_scale`]), and its norms' `1 + weight`
///   is already in the GGUF weights (llama.cpp's converter adds the 1), so its RMSNorm is
///   Llama's.
/// - GPT-2: [`Positions::Learned`], [`NormKind::Layer`], `fused_qkv`, `linear_bias`, a plain
///   (not gated) GELU feed-forward network.
/// - Qwen2: `qkv_bias` (the loader attaches `attn_{q,k,v}.bias` with
///   [`QLinear::with_bias`](crate::linear::QLinear::with_bias)) and RoPE on halves;
///   otherwise Llama's values.
/// - Qwen3: Qwen2 without the biases and with `qk_norm` (each query and key head RMS-normed
///   before RoPE, as Gemma-3's); its head width is `attention.key_length` (128 in
///   Qwen3-0.6B, not `d_model / heads`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArchSpec {
    /// `general.architecture` of the files it reads.
    pub name: &'static str,
    /// Which layers are local (sliding window, their own rotary base) and which global.
    pub layers: LayerPattern,
    /// How RoPE pairs the features of a head.
    pub rope_style: RopeStyle,
    /// What the embedding rows are multiplied by before the first layer.
    pub embedding_scale: EmbeddingScale,
    /// Whether the q, k and v projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Whether each query and key head is RMS-normed before RoPE (Gemma-3, Qwen3).
    pub qk_norm: bool,
    /// Whether the attention's and the feed-forward network's outputs are RMS-normed before
    /// their residual adds (Gemma-2/3's "sandwich" norms).
    pub post_norms: bool,
    /// The feed-forward network's activation: `act(gate) * up` for a gated one, `act(up)`
    /// for a plain one (see [`ffn_gated`](Self::ffn_gated)).
    pub ffn_activation: FfnActivation,
    /// Whether the feed-forward network is gated (`ffn_gate`: Llama, Gemma, Qwen2) or plain
    /// (`down(act(up(x)))`: GPT-2).
    pub ffn_gated: bool,
    /// How positions enter the model: rotary embeddings on q and k, or learned position
    /// embeddings added to the token embeddings (GPT-2).
    pub positions: Positions,
    /// RMSNorm (Llama, Gemma, Qwen2) or LayerNorm with a bias (GPT-2).
    pub norm: NormKind,
    /// Whether the fused `attn_qkv` matrix holds q, k and v (GPT-2), split at load.
    pub fused_qkv: bool,
    /// Whether every projection has a bias: q/k/v (fused or not), the attention's output and
    /// the feed-forward network's matrices (GPT-2).
    pub linear_bias: bool,
}

/// How a model knows where a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions {
    /// Rotary embeddings applied to each query and key head ([`ArchSpec::rope_style`]).
    Rotary,
    /// A learned embedding per position (`position_embd.weight`, as many rows as the context
    /// length) added to the token embeddings; no rotation.
    Learned,
}

/// Which normalisation the model's norms are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `x / sqrt(mean(x^2) + eps) * w`.
    Rms,
    /// `(x - mean) / sqrt(var + eps) * w + b`.
    Layer,
}

/// What the embedding rows are multiplied by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingScale {
    /// Nothing (Llama).
    One,
    /// `sqrt(d_model)` (Gemma).
    SqrtWidth,
}

/// The activation of a gated feed-forward network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnActivation {
    /// `silu(gate) * up`: SwiGLU (Llama, Qwen2).
    Silu,
    /// `gelu(gate) * up` with GELU's tanh approximation,
    /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`: GeGLU (Gemma).
    GeluTanh,
}

/// Which features of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i + 1)` (llama.cpp's "normal" type; GGUF's llama converter
    /// permuted the q/k rows for it).
    Adjacent,
    /// Pairs `(i, i + head_dim / 2)` (llama.cpp's "NeoX" type: Gemma, Qwen2, ...).
    Halves,
}

/// Which layers attend to the whole context and which only to a sliding window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LayerPattern {
    /// Every layer global: the whole cache, the model's `rope_theta`.
    Uniform,
    /// Every `period`-th layer (layers `period - 1`, `2 * period - 1`, ...) global, the
    /// others local: they attend to the last [`LlamaConfig::sliding_window`] positions
    /// (their own included) and rotate with `local_rope_theta` (Gemma-3: period 6, base
    /// 10,000; a file's `attention.sliding_window_pattern` and `rope.freq_base_swa` override
    /// them). Without a window in the config every layer is global.
    LocalGlobal {
        /// One global layer every `period` layers.
        period: usize,
        /// The local layers' rotary base.
        local_rope_theta: f64,
    },
}

/// What one layer does that may differ from its neighbours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSpec {
    /// The rotary base.
    pub rope_theta: f64,
    /// For a local layer, how many positions a query sees (its own and the `window - 1`
    /// before it); `None` for a global layer.
    pub window: Option<usize>,
}

impl ArchSpec {
    /// Llama, Mistral, SmolLM2, TinyLlama: pre-norm blocks, no biases, SwiGLU, one rotary
    /// base.
    pub const LLAMA: ArchSpec = ArchSpec {
        name: "llama",
        layers: LayerPattern::Uniform,
        rope_style: RopeStyle::Adjacent,
        embedding_scale: EmbeddingScale::One,
        qkv_bias: false,
        qk_norm: false,
        post_norms: false,
        ffn_activation: FfnActivation::Silu,
        ffn_gated: true,
        positions: Positions::Rotary,
        norm: NormKind::Rms,
        fused_qkv: false,
        linear_bias: false,
    };

    /// Gemma-3 (see the type's docs for what differs from Llama).
    pub const GEMMA3: ArchSpec = ArchSpec {
        name: "gemma3",
        layers: LayerPattern::LocalGlobal {
            period: 6,
            local_rope_theta: 10000.0,
        },
        rope_style: RopeStyle::Halves,
        embedding_scale: EmbeddingScale::SqrtWidth,
        qkv_bias: false,
        qk_norm: true,
        post_norms: true,
        ffn_activation: FfnActivation::GeluTanh,
        ..ArchSpec::LLAMA
    };

    /// Qwen2 (and Qwen2.5): Llama's layer with biases on the q, k and v projections and RoPE
    /// on halves (llama.cpp's "NeoX" type).
    pub const QWEN2: ArchSpec = ArchSpec {
        name: "qwen2",
        layers: LayerPattern::Uniform,
        rope_style: RopeStyle::Halves,
        embedding_scale: EmbeddingScale::One,
        qkv_bias: true,
        ..ArchSpec::LLAMA
    };

    /// Qwen3: Llama's layer with each query and key head RMS-normed before RoPE (no biases)
    /// and RoPE on halves (llama.cpp's `LLM_ARCH_QWEN3`).
    pub const QWEN3: ArchSpec = ArchSpec {
        name: "qwen3",
        layers: LayerPattern::Uniform,
        rope_style: RopeStyle::Halves,
        embedding_scale: EmbeddingScale::One,
        qk_norm: true,
        ..ArchSpec::LLAMA
    };

    /// GPT-2: learned positions, LayerNorms with biases, a fused q/k/v matrix, biases on
    /// every projection, a plain GELU (tanh) feed-forward network, multi-head attention.
    pub const GPT2: ArchSpec = ArchSpec {
        name: "gpt2",
        qkv_bias: true,
        ffn_activation: FfnActivation::GeluTanh,
        ffn_gated: false,
        positions: Positions::Learned,
        norm: NormKind::Layer,
        fused_qkv: true,
        linear_bias: true,
        ..ArchSpec::LLAMA
    };

    /// Every architecture the loader reads.
    pub const SUPPORTED: &'static [ArchSpec] = &[
        ArchSpec::LLAMA,
        ArchSpec::GEMMA3,
        ArchSpec::QWEN2,
        ArchSpec::QWEN3,
        ArchSpec::GPT2,
    ];

    /// The description of architecture `name` (`general.architecture`), if supported.
    pub fn named(name: &str) -> Option<&'static ArchSpec> {
        ArchSpec::SUPPORTED.iter().find(|spec| spec.name == name)
    }

    /// Whether layer `index` is local (a sliding window) in a model with hyperparameters
    /// `config`.
    pub fn is_local(&self, config: &LlamaConfig, index: usize) -> bool {
        match self.layers {
            LayerPattern::Uniform => false,
            LayerPattern::LocalGlobal { period, .. } => {
                config.sliding_window.is_some() && !(index + 1).is_multiple_of(period.max(1))
            }
        }
    }

    /// Layer `index`'s spec in a model with hyperparameters `config`.
    pub fn layer(&self, config: &LlamaConfig, index: usize) -> LayerSpec {
        match self.layers {
            LayerPattern::LocalGlobal {
                local_rope_theta, ..
            } if self.is_local(config, index) => LayerSpec {
                rope_theta: local_rope_theta,
                window: config.sliding_window,
            },
            _ => LayerSpec {
                rope_theta: config.rope_theta,
                window: None,
            },
        }
    }

    /// Each layer's attention window in a model with hyperparameters `config` (`None` for a
    /// global layer).
    pub fn layer_windows(&self, config: &LlamaConfig) -> Vec<Option<usize>> {
        (0..config.n_layers)
            .map(|l| self.layer(config, l).window)
            .collect()
    }

    /// The factor the embedding rows are multiplied by, `None` for 1.
    pub fn embedding_factor(&self, config: &LlamaConfig) -> Option<f32> {
        match self.embedding_scale {
            EmbeddingScale::One => None,
            EmbeddingScale::SqrtWidth => Some((config.d_model as f32).sqrt()),
        }
    }
}

impl Default for ArchSpec {
    /// [`ArchSpec::LLAMA`].
    fn default() -> Self {
        ArchSpec::LLAMA
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_uses_one_base_and_gemma3_alternates_five_local_layers_and_one_global() {
        let config = LlamaConfig::new(8, 8, 12, 2, 1, 8).with_rope_theta(1e6);
        let llama = ArchSpec::named("llama").cloned().unwrap_or_default();
        assert!((0..12).all(|l| llama.layer(&config, l)
            == LayerSpec {
                rope_theta: 1e6,
                window: None
            }));
        let gemma = ArchSpec::named("gemma3").expect("gemma3 is supported");
        // Without a window every layer is global.
        assert!((0..12).all(|l| gemma.layer(&config, l).window.is_none()));
        let config = config.with_sliding_window(Some(512));
        let layers: Vec<LayerSpec> = (0..12).map(|l| gemma.layer(&config, l)).collect();
        for (l, spec) in layers.iter().enumerate() {
            let global = l == 5 || l == 11;
            assert_eq!(spec.rope_theta, if global { 1e6 } else { 1e4 }, "layer {l}");
            assert_eq!(spec.window, (!global).then_some(512), "layer {l}");
        }
        assert_eq!(ArchSpec::named("gemma2"), None);
    }
}
