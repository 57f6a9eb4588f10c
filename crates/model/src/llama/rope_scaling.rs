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

impl RopeScaling {
    /// `None` when this scaling changes nothing (no stretch, no frequency factors, an
    /// attention factor of 1); a factor of 1 stretches nothing whatever the kind (YaRN's ramp
    /// then mixes a frequency with itself and its magnitude is `1 + 0.1 ln 1`).
    pub fn normalized(self) -> Option<RopeScaling> {
        let kind = if self.factor == 1.0 {
            RopeScalingKind::None
        } else {
            self.kind
        };
        let trivial =
            kind == RopeScalingKind::None && self.attn_factor == 1.0 && self.freq_factors.is_none();
        (!trivial).then_some(RopeScaling { kind, ..self })
    }
}

/// Rotary settings given at run time over a file's, as llama.cpp's `--rope-scaling`,
/// `--rope-scale`, `--rope-freq-base` and `--yarn-orig-ctx` give them: to run a model past
/// the context it was trained for (Qwen2.5's model cards ask for YaRN x4 over 32,768
/// positions this way). Applied by [`LlamaConfig::with_rope_overrides`](super::LlamaConfig::with_rope_overrides).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RopeOverrides {
    /// The scaling kind (`--rope-scaling none|linear|yarn`).
    pub kind: Option<RopeScalingKind>,
    /// The factor the context is stretched by (`--rope-scale N`).
    pub factor: Option<f64>,
    /// The rotary base of global layers (`--rope-freq-base N`).
    pub freq_base: Option<f64>,
    /// YaRN's original context (`--yarn-orig-ctx N`).
    pub original_context: Option<usize>,
}

impl RopeOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == RopeOverrides::default()
    }

    /// The first setting out of range, in words naming its flag.
    pub fn problem(&self) -> Option<String> {
        let positive = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v > 0.0);
        if !positive(self.factor) {
            return Some(format!(
                "--rope-scale must be a positive number, got {}",
                self.factor.unwrap_or_default()
            ));
        }
        if !positive(self.freq_base) {
            return Some(format!(
                "--rope-freq-base must be a positive number, got {}",
                self.freq_base.unwrap_or_default()
            ));
        }
        if self.original_context == Some(0) {
            return Some("--yarn-orig-ctx must be at least 1".into());
        }
        None
    }
}
