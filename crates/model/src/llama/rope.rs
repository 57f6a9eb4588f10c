//! Rotary position embeddings: the one table both executors rotate with.

use super::rope_scaling::{RopeScaling, RopeScalingKind};
use super::{LayerSpec, LlamaConfig, RopeStyle};

/// What a layer rotates by: each pair's angle per position (radians) and what `cos` and `sin`
/// are multiplied by.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotary {
    /// Pair `i`'s angle per position, `head_dim / 2` values.
    pub frequencies: Vec<f64>,
    /// What `cos` and `sin` are multiplied by (1 but for YaRN and `attn_factor`).
    pub magnitude: f64,
}

impl Rotary {
    /// The trained frequencies `theta^(-2i / head_dim)` of `head_dim`-wide heads, with
    /// `scaling` where the model has it; `global`: the layer sees the whole context (scaled
    /// by a linear or YaRN factor), not a sliding window.
    pub fn new(head_dim: usize, theta: f64, scaling: Option<&RopeScaling>, global: bool) -> Self {
        let half = head_dim / 2;
        let mut frequencies: Vec<f64> = (0..half)
            .map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64))
            .collect();
        let Some(s) = scaling else {
            return Rotary {
                frequencies,
                magnitude: 1.0,
            };
        };
        if let Some(factors) = &s.freq_factors {
            for (f, &ff) in frequencies.iter_mut().zip(factors) {
                *f /= f64::from(ff);
            }
        }
        let mut magnitude = s.attn_factor;
        let scale = if global && s.kind != RopeScalingKind::None {
            1.0 / s.factor
        } else {
            1.0
        };
        match s.kind {
            RopeScalingKind::None => {}
            RopeScalingKind::Linear => frequencies.iter_mut().for_each(|f| *f *= scale),
            RopeScalingKind::Yarn => {
                let [low, high] = yarn_correction_dims(head_dim, s.original_context, theta);
                for (i, f) in frequencies.iter_mut().enumerate() {
                    let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                    *f *= scale * (1.0 - ramp) + ramp;
                }
                // llama.cpp's `yarn_attn_factor` (`get_mscale(factor)` over the same factor
                // it cancels) times `rope_yarn`'s `1 + 0.1 ln(1 / freq_scale)`.
                if global && s.factor > 1.0 {
                    magnitude *= 1.0 + 0.1 * s.factor.ln();
                }
            }
        }
        Rotary {
            frequencies,
            magnitude,
        }
    }
}

impl LlamaConfig {
    /// What a layer of spec `layer` rotates its queries and keys by: its base, with the
    /// model's [`RopeScaling`] (linear and YaRN factors on global layers only, as llama.cpp).
    pub fn rotary(&self, layer: &LayerSpec) -> Rotary {
        Rotary::new(
            self.head_dim(),
            layer.rope_theta,
            self.rope_scaling.as_ref(),
            layer.window.is_none(),
        )
    }
}

/// YaRN's correction dimensions (llama.cpp's `ggml_rope_yarn_corr_dims` with `beta_fast` 32
/// and `beta_slow` 1): the pairs below `low` keep their frequency, those above `high` are
/// interpolated, a linear ramp between.
fn yarn_correction_dims(head_dim: usize, original_context: usize, theta: f64) -> [f64; 2] {
    let dim = |rotations: f64| {
        head_dim as f64 * (original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * theta.ln())
    };
    [
        dim(32.0).floor().max(0.0),
        dim(1.0).ceil().min(head_dim as f64 - 1.0),
    ]
}

/// `cos` and `sin` of the rotary angles `position * theta^(-2i / head_dim)` of a pass's rows,
/// `[rows, head_dim / 2]` row-major. The angles are computed in `f64` and stored as `f32`
/// (llama.cpp's precision); the host executor reads the table as it is, the Burn executor
/// uploads it once per pass.
///
/// Pair `i` is `(2i, 2i + 1)` ([`RopeStyle::Adjacent`]: GGUF's llama converter permuted the
/// q/k rows so that this is the right pairing) or `(i, i + head_dim / 2)`
/// ([`RopeStyle::Halves`], Gemma's).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTable {
    style: RopeStyle,
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// The table of `positions` (one row each) for heads `head_dim` wide (even), rotary base
    /// `theta`.
    pub fn new(positions: &[usize], head_dim: usize, theta: f64) -> Self {
        Self::of(positions, &Rotary::new(head_dim, theta, None, true))
    }

    /// The table of `positions` (one row each) for the angles and magnitude of `rotary`.
    pub fn of(positions: &[usize], rotary: &Rotary) -> Self {
        let half = rotary.frequencies.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        let m = rotary.magnitude;
        for &pos in positions {
            for &freq in &rotary.frequencies {
                // Times 1 (every model but YaRN's and an attention factor's) is exact.
                let angle = pos as f64 * freq;
                cos.push((angle.cos() * m) as f32);
                sin.push((angle.sin() * m) as f32);
            }
        }
        RopeTable {
            style: RopeStyle::Adjacent,
            half,
            cos,
            sin,
        }
    }

    /// The same angles, pairing features as `style` says.
    pub fn with_style(self, style: RopeStyle) -> Self {
        RopeTable { style, ..self }
    }

    /// How the table pairs a head's features.
    pub fn style(&self) -> RopeStyle {
        self.style
    }

    /// Rows (positions).
    pub fn rows(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Pairs per head: `head_dim / 2`.
    pub fn half(&self) -> usize {
        self.half
    }

    /// `(cos, sin)` of row `r`, `head_dim / 2` each.
    pub fn row(&self, r: usize) -> (&[f32], &[f32]) {
        let range = r * self.half..(r + 1) * self.half;
        (&self.cos[range.clone()], &self.sin[range])
    }

    /// The whole table: `(cos, sin)`, `[rows, head_dim / 2]` each.
    pub fn into_parts(self) -> (Vec<f32>, Vec<f32>) {
        (self.cos, self.sin)
    }

    /// Rotate every `head_dim`-wide head of `row` (one token's queries or keys, heads one
    /// after another) by row `r`'s angles.
    pub fn rotate(&self, r: usize, row: &mut [f32]) {
        let (cos, sin) = self.row(r);
        for head in row.chunks_exact_mut(2 * self.half) {
            match self.style {
                RopeStyle::Adjacent => {
                    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0 * c - x1 * s;
                        pair[1] = x0 * s + x1 * c;
                    }
                }
                RopeStyle::Halves => {
                    let (first, second) = head.split_at_mut(self.half);
                    for (((a, b), &c), &s) in first.iter_mut().zip(second).zip(cos).zip(sin) {
                        let (x0, x1) = (*a, *b);
                        *a = x0 * c - x1 * s;
                        *b = x0 * s + x1 * c;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angles_are_position_times_frequency() {
        let table = RopeTable::new(&[0, 3], 4, 100.0);
        assert_eq!((table.rows(), table.half()), (2, 2));
        assert_eq!(table.row(0), (&[1.0, 1.0][..], &[0.0, 0.0][..]));
        let (cos, sin) = table.row(1);
        // Pair 0 turns by 3 radians, pair 1 by 3 / 100^(2/4) = 0.3.
        assert_eq!((cos[0], sin[0]), (3f64.cos() as f32, 3f64.sin() as f32));
        assert!((cos[1] - 0.3f32.cos()).abs() < 1e-6 && (sin[1] - 0.3f32.sin()).abs() < 1e-6);
    }

    /// Linear and YaRN factors stretch global layers only (llama.cpp gives a local layer
    /// `freq_scale` 1); frequency factors and the attention factor apply to every layer.
    #[test]
    fn local_layers_keep_their_frequencies() {
        let plain = Rotary::new(8, 100.0, None, true);
        for kind in [RopeScalingKind::Linear, RopeScalingKind::Yarn] {
            let s = RopeScaling::new(kind)
                .with_factor(8.0)
                .with_original_context(64);
            assert_eq!(Rotary::new(8, 100.0, Some(&s), false), plain, "{kind:?}");
            assert_ne!(Rotary::new(8, 100.0, Some(&s), true), plain, "{kind:?}");
            let s = s
                .with_attn_factor(0.5)
                .with_freq_factors(Some(vec![1.0, 2.0, 4.0, 8.0]));
            let local = Rotary::new(8, 100.0, Some(&s), false);
            assert_eq!(local.magnitude, 0.5);
            for (i, (a, b)) in local.frequencies.iter().zip(&plain.frequencies).enumerate() {
                assert_eq!(*a, b / f64::from(1u32 << i), "pair {i}");
            }
        }
    }

    /// YaRN's ramp between llama.cpp's correction dimensions: 64-wide heads, base 100,000,
    /// 1024 original positions: `64 ln(1024 / (32 * 2 pi)) / (2 ln 1e5)` = 4.52 and
    /// `64 ln(1024 / (2 pi)) / (2 ln 1e5)` = 14.16, so pairs 0..=4 keep their frequency,
    /// pairs from 15 on are divided by the factor, and pair 10 lies `(10 - 4) / 11` of the
    /// way.
    #[test]
    fn yarn_ramps_between_the_correction_dimensions() {
        assert_eq!(yarn_correction_dims(64, 1024, 1e5), [4.0, 15.0]);
        let s = RopeScaling::new(RopeScalingKind::Yarn)
            .with_factor(4.0)
            .with_original_context(1024);
        let plain = Rotary::new(64, 1e5, None, true);
        let yarn = Rotary::new(64, 1e5, Some(&s), true);
        let ratio: Vec<f64> = (0..32)
            .map(|i| yarn.frequencies[i] / plain.frequencies[i])
            .collect();
        assert!(ratio[..=4].iter().all(|&r| r == 1.0), "{ratio:?}");
        assert!(
            ratio[15..].iter().all(|&r| (r - 0.25).abs() < 1e-15),
            "{ratio:?}"
        );
        let mix = 6.0 / 11.0;
        assert!((ratio[10] - (0.25 * mix + (1.0 - mix))).abs() < 1e-15);
        assert!((yarn.magnitude - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-15);
    }

    #[test]
    fn rotation_turns_adjacent_pairs() {
        let table = RopeTable::new(&[1], 2, 10000.0);
        let mut row = [1.0, 0.0, 0.0, 2.0];
        table.rotate(0, &mut row);
        let (c, s) = (1f64.cos() as f32, 1f64.sin() as f32);
        assert_eq!(row, [c, s, -2.0 * s, 2.0 * c]);
        // Halves pair feature 0 with 1 of a 2-wide head as well; with 4-wide heads the
        // pairs are (0, 2) and (1, 3).
        let table = RopeTable::new(&[1], 4, 1.0).with_style(RopeStyle::Halves);
        let mut row = [1.0, 0.0, 0.0, 2.0];
        table.rotate(0, &mut row);
        assert_eq!(row, [c, -2.0 * s, s, 2.0 * c]);
    }
}
