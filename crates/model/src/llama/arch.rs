//! [`ArchSpec`]: what one decoder-only architecture does differently from another, as data.
//! The recipe ([`recipe`](super::recipe)) reads it, and so does the loader (which tensors a
//! file has); adding an architecture is filling in one of these plus the loader's names for
//! its tensors, and a new op only where it computes something no executor has yet.

use super::LlamaConfig;

/// The description of a decoder-only architecture (Llama's is [`ArchSpec::LLAMA`]).
///
/// Every layer is: norm → q/k/v projections (+ biases) → q/k head norms → RoPE → cache write
/// → grouped-query attention → output projection → post norm → residual add → norm →
/// gate/up projections → gated activation → down projection → post norm → residual add; the
/// model is the embedding (scaled) → the layers → final norm → head. The flags below switch
/// the optional steps; the steps themselves are written once, in the recipe.
///
/// What Gemma-3 and Qwen2 would fill in:
/// - Qwen2: `qkv_bias` (the loader attaches `attn_{q,k,v}.bias` with
///   [`QLinear::with_bias`](crate::linear::QLinear::with_bias)); otherwise Llama's values.
/// - Gemma-3: `qk_norm`, `post_norms`, `embedding_scale: SqrtWidth`, and per layer
///   ([`layer`](Self::layer)) a rotary base that alternates between local and global layers.
///   Still to add for it: a [`FfnActivation::GeluTanh`]-style variant (GeGLU: one arm in each
///   executor's `gated`), a `sliding_window` in [`LayerSpec`] (an argument of the executors'
///   `attend_with_cache`), and its attention scale.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchSpec {
    /// `general.architecture` of the files it reads.
    pub name: &'static str,
    /// The rotary base of every layer, or per layer (see [`LayerSpec`]).
    pub rope: RopeBases,
    /// What the embedding rows are multiplied by before the first layer.
    pub embedding_scale: EmbeddingScale,
    /// Whether the q, k and v projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Whether each query and key head is RMS-normed before RoPE (Gemma-3).
    pub qk_norm: bool,
    /// Whether the attention's and the feed-forward network's outputs are RMS-normed before
    /// their residual adds (Gemma-2/3's "sandwich" norms).
    pub post_norms: bool,
    /// The gated feed-forward network's activation: `act(gate) * up`.
    pub ffn_activation: FfnActivation,
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
}

/// Which rotary base each layer uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeBases {
    /// The model's `rope_theta` in every layer.
    Uniform,
    /// `local` in every layer but each `period`-th (layers `period - 1`, `2 * period - 1`,
    /// ...), which use the model's `rope_theta` (Gemma-3: local 10,000, period 6).
    LocalGlobal {
        /// The local layers' base.
        local: f64,
        /// One global layer every `period` layers.
        period: usize,
    },
}

/// What one layer does that may differ from its neighbours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSpec {
    /// The rotary base.
    pub rope_theta: f64,
}

impl ArchSpec {
    /// Llama, Mistral, SmolLM2, TinyLlama: pre-norm blocks, no biases, SwiGLU, one rotary
    /// base.
    pub const LLAMA: ArchSpec = ArchSpec {
        name: "llama",
        rope: RopeBases::Uniform,
        embedding_scale: EmbeddingScale::One,
        qkv_bias: false,
        qk_norm: false,
        post_norms: false,
        ffn_activation: FfnActivation::Silu,
    };

    /// Every architecture the loader reads.
    pub const SUPPORTED: &'static [ArchSpec] = &[ArchSpec::LLAMA];

    /// The description of architecture `name` (`general.architecture`), if supported.
    pub fn named(name: &str) -> Option<&'static ArchSpec> {
        ArchSpec::SUPPORTED.iter().find(|spec| spec.name == name)
    }

    /// Layer `index`'s spec in a model with hyperparameters `config`.
    pub fn layer(&self, config: &LlamaConfig, index: usize) -> LayerSpec {
        let rope_theta = match self.rope {
            RopeBases::Uniform => config.rope_theta,
            RopeBases::LocalGlobal { local, period } => {
                if (index + 1).is_multiple_of(period.max(1)) {
                    config.rope_theta
                } else {
                    local
                }
            }
        };
        LayerSpec { rope_theta }
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
    fn llama_uses_one_base_and_gemma_style_bases_alternate() {
        let config = LlamaConfig::new(8, 8, 12, 2, 1, 8).with_rope_theta(1e6);
        let llama = ArchSpec::named("llama").cloned().unwrap_or_default();
        assert!((0..12).all(|l| llama.layer(&config, l).rope_theta == 1e6));
        let local_global = ArchSpec {
            rope: RopeBases::LocalGlobal {
                local: 1e4,
                period: 6,
            },
            ..ArchSpec::LLAMA
        };
        let bases: Vec<f64> = (0..12)
            .map(|l| local_global.layer(&config, l).rope_theta)
            .collect();
        assert_eq!(bases[5], 1e6);
        assert_eq!(bases[11], 1e6);
        assert_eq!(bases.iter().filter(|&&b| b == 1e4).count(), 10);
        assert_eq!(ArchSpec::named("gemma3"), None);
    }
}
