//! Llama 3's rotary frequency factors: what `convert_hf_to_gguf.py` writes as
//! `rope_freqs.weight` for a `rope_scaling` of type `llama3` (Llama 3.1 and later).

/// The `llama3` scaling of a `config.json` (`rope_scaling`), with the converter's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    /// `factor` (8).
    pub factor: f64,
    /// `low_freq_factor` (1).
    pub low_freq_factor: f64,
    /// `high_freq_factor` (4).
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings` (8192).
    pub original_context: u64,
}

impl Default for Llama3Scaling {
    fn default() -> Self {
        Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        }
    }
}

impl Llama3Scaling {
    /// The divisor of each of the `head_dim / 2` rotary frequencies of base `theta`, in `f32`
    /// as the converter computes them (`torch.float32`): 1 for a wavelength under
    /// `original_context / high_freq_factor`, `factor` over `original_context /
    /// low_freq_factor`, and a smooth step between.
    ///
    /// ```
    /// use kindle_hf::Llama3Scaling;
    ///
    /// let f = Llama3Scaling::default().frequency_factors(64, 500000.0);
    /// assert_eq!((f.len(), f[0], f[31]), (32, 1.0, 8.0));
    /// ```
    pub fn frequency_factors(&self, head_dim: usize, theta: f64) -> Vec<f32> {
        let context = self.original_context as f32;
        let (low, high) = (self.low_freq_factor as f32, self.high_freq_factor as f32);
        let factor = self.factor as f32;
        let low_freq_wavelen = context / low;
        let high_freq_wavelen = context / high;
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / (theta as f32).powf((2 * i) as f32 / head_dim as f32);
                let wavelen = (2.0 * std::f64::consts::PI) as f32 / freq;
                if wavelen < high_freq_wavelen {
                    1.0
                } else if wavelen > low_freq_wavelen {
                    factor
                } else {
                    let smooth = (context / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.2 1B's `rope_freqs.weight` (`head_dim` 64, base 500,000, the default
    /// scaling), the values llama.cpp's converter writes: 1 for the first 15 pairs (wavelengths
    /// under 2048), 8 from pair 18 on (over 8192), a smooth step between.
    #[test]
    fn the_llama_3_2_factors() {
        let f = Llama3Scaling::default().frequency_factors(64, 500000.0);
        let step: Vec<usize> = (0..32).filter(|&i| f[i] != 1.0 && f[i] != 8.0).collect();
        assert!(f[..step[0]].iter().all(|&v| v == 1.0), "{f:?}");
        assert!(
            f[step[step.len() - 1] + 1..].iter().all(|&v| v == 8.0),
            "{f:?}"
        );
        // Pair i's wavelength 2 pi 500000^(i/32): 2048 < w < 8192 for i in 15..=17.
        assert_eq!(step, [15, 16, 17], "{f:?}");
        // The smooth step: 8192 / w - 1 over 3, as a harmonic mix of 1 and 8.
        for &i in &step {
            let w = 2.0 * std::f64::consts::PI * 500000f64.powf(i as f64 / 32.0);
            let smooth = (8192.0 / w - 1.0) / 3.0;
            let want = 1.0 / ((1.0 - smooth) / 8.0 + smooth);
            assert!(
                (f64::from(f[i]) - want).abs() < 1e-5 * want,
                "pair {i}: {} vs {want}",
                f[i]
            );
        }
        assert!(step.windows(2).all(|w| f[w[0]] < f[w[1]]));
    }
}
