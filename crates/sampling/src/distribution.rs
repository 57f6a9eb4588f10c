//! The processed distribution as a whole row, and draws from a given distribution: what
//! speculative decoding needs to apply its acceptance rule to exactly the distribution the
//! sampler would draw from.

use crate::select::uniform;
use crate::{Sampler, SamplingError};

impl Sampler {
    /// The distribution this sampler would draw the next token from, given `logits` and the
    /// `history` (prompt boundary as set with [`Sampler::set_prompt_len`]): every processor of
    /// the chain applied, then the probabilities of every token (0 for tokens the chain
    /// removed) in `out`, one entry per token. Greedy sampling gives a one-hot row on its
    /// choice. `logits` is scratch, as for [`Sampler::sample`].
    ///
    /// Random stages (XTC) consume the random stream, as they would in `sample`. Mirostat has
    /// no fixed distribution (its state moves with each draw): an
    /// [`InvalidParameter`](SamplingError::InvalidParameter) error.
    ///
    /// ```
    /// use kindle_sampling::{SamplerConfig, Sampler};
    /// let mut s = SamplerConfig { temperature: 1.0, top_k: 2, seed: Some(1), ..SamplerConfig::neutral() }.build().unwrap();
    /// let mut p = Vec::new();
    /// s.processed_distribution(&mut [0.0, 1.0, 1.0f32.ln() + 1.0, -5.0], &[], &mut p).unwrap();
    /// assert_eq!(p[0], 0.0);
    /// assert!((p[1] - 0.5).abs() < 1e-12 && (p[2] - 0.5).abs() < 1e-12);
    /// ```
    pub fn processed_distribution(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        out: &mut Vec<f64>,
    ) -> Result<(), SamplingError> {
        let prompt_len = self.prompt_len();
        self.run(logits, history, prompt_len, None, Some(out))?;
        Ok(())
    }

    /// Draw a token from `probs` (non-negative weights, one per token, need not sum to 1)
    /// with this sampler's random stream: a cumulative scan in id order.
    pub fn draw_from(&mut self, probs: &[f64]) -> Result<u32, SamplingError> {
        let sum: f64 = probs.iter().filter(|p| **p > 0.0).sum();
        let last = probs
            .iter()
            .rposition(|&p| p > 0.0)
            .ok_or(SamplingError::AllMasked)?;
        let target = uniform(self.rng_mut()) * sum;
        let mut acc = 0.0f64;
        for (i, &p) in probs.iter().enumerate() {
            if p > 0.0 {
                acc += p;
                if acc > target {
                    return Ok(i as u32);
                }
            }
        }
        Ok(last as u32)
    }

    /// A uniform number in `[0, 1)` from this sampler's random stream (53 random bits).
    pub fn uniform(&mut self) -> f64 {
        uniform(self.rng_mut())
    }
}
