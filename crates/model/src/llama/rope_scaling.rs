//! [`RopeScaling`]: how a model stretches its rotary frequencies, as its file states it.

use burn::config::Config;

/// How a model stretches its rotary frequencies (GGUF's `{arch}.rope.scaling.*` keys and
/// Llama 3's `rope_freqs.weight`), exactly as llama.cpp's `ggml_rope_ext` turns them:
///
/// - `freq_factors` (Llama 3.1 and later): pair `i`'s frequency is divided by
///   `freq_factors[i]` on every layer.
/// - [`RopeScalingKind::Linear`]: positions are divided by `factor` (the frequency times
///   `1 / factor`) on global layers (a local, sliding-window layer of Gemma-3 keeps its own).
/// - [`RopeScalingKind::Yarn`]: YaRN, pair by pair a mix of the interpolated
///   (`1 / factor`) and the original frequency by the ramp between llama.cpp's correction
///   dimensions (`beta_fast` 32, `beta_slow` 1, over `original_context` positions), and
///   `cos`/`sin` scaled by `1 + 0.1 ln(factor)` (llama.cpp's `mscale`).
///
/// `attn_factor` (`rope.scaling.attn_factor`) multiplies `cos` and `sin` in every case.
#[derive(Config, Debug, PartialEq)]
pub struct RopeScaling {
    /// How positions are stretched on global layers.
    pub kind: RopeScalingKind,
    /// `rope.scaling.factor`: how many times longer the context is stretched (1: not).
    #[config(default = 1.0)]
    pub factor: f64,
    /// YaRN's original context length (`rope.scaling.original_context_length`, else the
    /// model's `context_length`).
    #[config(default = 0)]
    pub original_context: usize,
    /// `rope.scaling.attn_factor`: what `cos` and `sin` are multiplied by.
    #[config(default = 1.0)]
    pub attn_factor: f64,
    /// Per-pair divisors of the frequencies (`rope_freqs.weight`, `head_dim / 2` values).
    pub freq_factors: Option<Vec<f32>>,
}

impl RopeScaling {
    /// In words, as `kindle inspect` shows it: `linear x4`, `YaRN x4 from 1024 positions
    /// (cos and sin x1.139)`, `Llama 3 frequency factors 1 to 8 (32 pairs)`, joined by `; `.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match self.kind {
            RopeScalingKind::None => {}
            RopeScalingKind::Linear => parts.push(format!("linear x{}", self.factor)),
            RopeScalingKind::Yarn => parts.push(format!(
                "YaRN x{} from {} positions (cos and sin x{:.3})",
                self.factor,
                self.original_context,
                1.0 + 0.1 * self.factor.max(1.0).ln()
            )),
        }
        if let Some(f) = &self.freq_factors {
            let (lo, hi) = f
                .iter()
                .fold((f32::INFINITY, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            parts.push(format!(
                "Llama 3 frequency factors {lo} to {hi} ({} pairs)",
                f.len()
            ));
        }
        if self.attn_factor != 1.0 {
            parts.push(format!("attention factor {}", self.attn_factor));
        }
        parts.join("; ")
    }
}

/// The kinds of [`RopeScaling`] (GGUF's `rope.scaling.type`).
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum RopeScalingKind {
    /// `none`: the trained frequencies (frequency factors still apply).
    None,
    /// `linear`: positions divided by the factor.
    Linear,
    /// `yarn`: YaRN.
    Yarn,
}
