//! [`SamplerConfig`]: every sampling parameter, validated by [`SamplerConfig::build`].

use crate::SamplingError;
use crate::order::{LLAMA_CPP_ORDER, Stage, check_unique};

/// Which part of the history the repetition, frequency and presence penalties look at.
///
/// The history passed to the sampler holds prompt + generated tokens; the sampler knows where
/// the prompt ends from [`crate::Sampler::set_prompt_len`] or [`crate::History::prompt_len`].
/// The penalty window ([`SamplerConfig::penalty_last_n`]) is taken from the end of the scoped
/// part. DRY and no-repeat-n-gram always look at the whole history (as in llama.cpp and
/// Hugging Face).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PenaltyScope {
    /// Prompt and generated tokens (llama.cpp and Hugging Face behaviour; the default).
    #[default]
    PromptAndOutput,
    /// Generated tokens only (OpenAI-style frequency/presence semantics).
    OutputOnly,
}

/// Mirostat adaptive sampling (Basu et al. 2021), which replaces the truncation stages.
///
/// When enabled, the truncation stages (top-k, top-p, min-p, typical-p, top-n-sigma, XTC) are
/// skipped; penalties, DRY and temperature still run in their configured order, then mirostat
/// truncates and draws, and updates its state `mu` (initially `2 * tau`) from the observed
/// surprise. This mirrors llama.cpp.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Mirostat {
    /// Off (the default).
    #[default]
    Off,
    /// Mirostat 1: estimates the Zipf exponent from the top 100 tokens and picks a top-k.
    V1 {
        /// Target surprise (cross-entropy) in bits (`--mirostat-ent`, llama.cpp default 5.0).
        tau: f32,
        /// Learning rate (`--mirostat-lr`, llama.cpp default 0.1).
        eta: f32,
    },
    /// Mirostat 2: drops tokens whose surprise exceeds `mu`.
    V2 {
        /// Target surprise (cross-entropy) in bits (`--mirostat-ent`, llama.cpp default 5.0).
        tau: f32,
        /// Learning rate (`--mirostat-lr`, llama.cpp default 0.1).
        eta: f32,
    },
}

/// DRY ("Don't Repeat Yourself") sequence-repetition penalty, as in koboldcpp / llama.cpp /
/// text-generation-webui.
///
/// If the last tokens of the history repeat an earlier sequence of length `L >= allowed_length`
/// that was followed by token `t`, then `t`'s logit is lowered by
/// `multiplier * base^(L - allowed_length)`. Matches never extend across a sequence breaker.
/// Breakers are token ids (like text-generation-webui, which uses the last token of each
/// encoded breaker string); llama.cpp's multi-token breaker matching is not reproduced.
#[derive(Debug, Clone, PartialEq)]
pub struct DryConfig {
    /// Penalty multiplier; 0 disables DRY (the default).
    pub multiplier: f32,
    /// Exponential base, at least 1 (llama.cpp default 1.75).
    pub base: f32,
    /// Longest repeated sequence that is not penalised (llama.cpp default 2).
    pub allowed_length: usize,
    /// How many recent tokens to scan: -1 = the whole history (llama.cpp default), 0 = off.
    pub penalty_last_n: i64,
    /// Token ids that break a repeated sequence (e.g. the ids of `"\n"`, `":"`, `"\""`, `"*"`).
    pub sequence_breakers: Vec<u32>,
}

/// llama.cpp's default DRY sequence breakers, as texts (each stands for the last token of its
/// encoding; a caller with a tokenizer turns them into [`DryConfig::sequence_breakers`]).
pub const DEFAULT_DRY_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

impl Default for DryConfig {
    fn default() -> Self {
        DryConfig {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: -1,
            sequence_breakers: Vec::new(),
        }
    }
}

impl DryConfig {
    /// Whether DRY changes anything.
    pub fn is_enabled(&self) -> bool {
        self.multiplier > 0.0 && self.penalty_last_n != 0
    }
}

/// Every sampling parameter. Neutral values switch a processor off; see each field.
///
/// Processing happens in this order:
/// 1. always first, in this order: [`logit_bias`](Self::logit_bias),
///    [`min_tokens`](Self::min_tokens) (suppresses [`eog_ids`](Self::eog_ids)),
///    [`no_repeat_ngram_size`](Self::no_repeat_ngram_size);
/// 2. the configurable chain [`order`](Self::order), by default llama.cpp's
///    `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`
///    ([`crate::LLAMA_CPP_ORDER`]; Hugging Face's is [`crate::HF_ORDER`]). Stages missing from
///    the order are not applied, even if configured;
/// 3. selection: argmax when `temperature == 0`, mirostat when enabled, otherwise a categorical
///    draw from the seeded ChaCha8 stream.
///
/// ```
/// use kindle_sampling::SamplerConfig;
/// let config = SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, seed: Some(42), ..SamplerConfig::neutral() };
/// let mut sampler = config.build().unwrap();
/// assert_eq!(sampler.seed(), 42);
/// let token = sampler.sample(&mut [0.5, 2.0, 1.0, -1.0], &[]).unwrap();
/// assert!(token < 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Temperature, `>= 0`; 1 = unchanged, 0 = greedy (argmax of the processed logits).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off; negative is an error; larger than the
    /// vocabulary is clamped.
    pub top_k: i64,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in `(0, 1]`;
    /// 1 = off. The top token is always kept.
    pub top_p: f32,
    /// Keep tokens with probability `>= min_p * p_max`, in `[0, 1]`; 0 = off.
    pub min_p: f32,
    /// Locally typical sampling mass, in `(0, 1]`; 1 = off.
    pub typical_p: f32,
    /// Keep tokens with logit `>= max - n * sigma` (sigma: standard deviation of the kept
    /// logits); `<= 0` = off (llama.cpp uses -1).
    pub top_n_sigma: f32,
    /// Probability that XTC fires at a step, in `[0, 1]`; 0 = off.
    pub xtc_probability: f32,
    /// XTC threshold, in `[0, 1]`: when it fires, every token with probability `>= threshold`
    /// except the least likely of them is removed (nothing happens unless two qualify; above
    /// 0.5 it can never fire). llama.cpp default 0.1.
    pub xtc_threshold: f32,
    /// Mirostat selection (off by default).
    pub mirostat: Mirostat,
    /// DRY penalty (off by default).
    pub dry: DryConfig,
    /// CTRL repetition penalty, `> 0`: positive logits of repeated tokens are divided by it,
    /// negative ones multiplied; 1 = off.
    pub repetition_penalty: f32,
    /// OpenAI frequency penalty: `logit -= count * frequency_penalty`; 0 = off.
    pub frequency_penalty: f32,
    /// OpenAI presence penalty: `logit -= presence_penalty` if the token occurred; 0 = off.
    pub presence_penalty: f32,
    /// Penalty window: the last `n` tokens of the scoped history; -1 = all of it, 0 = penalties
    /// off. llama.cpp default 64.
    pub penalty_last_n: i64,
    /// Which tokens the penalties consider (default: prompt and output).
    pub penalty_scope: PenaltyScope,
    /// Ban any token that would complete an n-gram of this size already in the history
    /// (Hugging Face `no_repeat_ngram_size`); 0 = off.
    pub no_repeat_ngram_size: usize,
    /// Additive bias by token id; `-inf` bans the token. Applied first. Repeated ids add up.
    pub logit_bias: Vec<(u32, f32)>,
    /// Suppress the end-of-generation ids until this many tokens have been generated; 0 = off.
    pub min_tokens: usize,
    /// End-of-generation token ids (needed by [`min_tokens`](Self::min_tokens)).
    pub eog_ids: Vec<u32>,
    /// Seed of the ChaCha8 stream; `None` draws one from OS entropy, reported by
    /// [`crate::Sampler::seed`] so the run can be replayed.
    pub seed: Option<u64>,
    /// Order of the configurable chain (default [`crate::LLAMA_CPP_ORDER`]).
    pub order: Vec<Stage>,
}

impl Default for SamplerConfig {
    /// Same as [`SamplerConfig::neutral`].
    fn default() -> Self {
        Self::neutral()
    }
}

impl SamplerConfig {
    /// Every processor off, temperature 1: plain sampling from the model's distribution.
    pub fn neutral() -> Self {
        SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            mirostat: Mirostat::Off,
            dry: DryConfig::default(),
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            penalty_scope: PenaltyScope::PromptAndOutput,
            no_repeat_ngram_size: 0,
            logit_bias: Vec::new(),
            min_tokens: 0,
            eog_ids: Vec::new(),
            seed: None,
            order: LLAMA_CPP_ORDER.to_vec(),
        }
    }

    /// Greedy decoding (temperature 0, everything else neutral, seed 0): the argmax of the
    /// logits after bias/penalties (of the raw logits when nothing else is configured).
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            seed: Some(0),
            ..Self::neutral()
        }
    }

    /// Alias of [`SamplerConfig::greedy`]: fully deterministic decoding.
    pub fn deterministic() -> Self {
        Self::greedy()
    }

    /// llama.cpp's defaults: penalties window 64 (repeat penalty 1.0), top-k 40, top-p 0.95,
    /// min-p 0.05, temperature 0.8, llama.cpp order.
    pub fn llama_cpp_defaults() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            ..Self::neutral()
        }
    }

    /// Checks every parameter; errors name the parameter and its value.
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(SamplingError::invalid(
                "temperature",
                self.temperature,
                "must be finite and >= 0 (0 = greedy)",
            ));
        }
        if self.top_k < 0 {
            return Err(SamplingError::invalid(
                "top_k",
                self.top_k,
                "must be >= 0 (0 = off)",
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::invalid(
                "top_p",
                self.top_p,
                "must be in (0, 1] (1 = off)",
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingError::invalid(
                "min_p",
                self.min_p,
                "must be in [0, 1] (0 = off)",
            ));
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return Err(SamplingError::invalid(
                "typical_p",
                self.typical_p,
                "must be in (0, 1] (1 = off)",
            ));
        }
        if !self.top_n_sigma.is_finite() {
            return Err(SamplingError::invalid(
                "top_n_sigma",
                self.top_n_sigma,
                "must be finite (<= 0 = off)",
            ));
        }
        if !(0.0..=1.0).contains(&self.xtc_probability) {
            return Err(SamplingError::invalid(
                "xtc_probability",
                self.xtc_probability,
                "must be in [0, 1] (0 = off)",
            ));
        }
        if !(0.0..=1.0).contains(&self.xtc_threshold) {
            return Err(SamplingError::invalid(
                "xtc_threshold",
                self.xtc_threshold,
                "must be in [0, 1]",
            ));
        }
        if let Mirostat::V1 { tau, eta } | Mirostat::V2 { tau, eta } = self.mirostat {
            if !(tau > 0.0 && tau.is_finite()) {
                return Err(SamplingError::invalid(
                    "mirostat_tau",
                    tau,
                    "must be finite and > 0",
                ));
            }
            if !(eta > 0.0 && eta.is_finite()) {
                return Err(SamplingError::invalid(
                    "mirostat_eta",
                    eta,
                    "must be finite and > 0",
                ));
            }
        }
        let dry = &self.dry;
        if !(dry.multiplier >= 0.0 && dry.multiplier.is_finite()) {
            return Err(SamplingError::invalid(
                "dry_multiplier",
                dry.multiplier,
                "must be finite and >= 0 (0 = off)",
            ));
        }
        if !(dry.base >= 1.0 && dry.base.is_finite()) {
            return Err(SamplingError::invalid(
                "dry_base",
                dry.base,
                "must be finite and >= 1",
            ));
        }
        if dry.penalty_last_n < -1 {
            return Err(SamplingError::invalid(
                "dry_penalty_last_n",
                dry.penalty_last_n,
                "must be >= -1 (-1 = whole history, 0 = off)",
            ));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(SamplingError::invalid(
                "repetition_penalty",
                self.repetition_penalty,
                "must be finite and > 0 (1 = off)",
            ));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(SamplingError::invalid(
                "frequency_penalty",
                self.frequency_penalty,
                "must be finite (0 = off)",
            ));
        }
        if !self.presence_penalty.is_finite() {
            return Err(SamplingError::invalid(
                "presence_penalty",
                self.presence_penalty,
                "must be finite (0 = off)",
            ));
        }
        if self.penalty_last_n < -1 {
            return Err(SamplingError::invalid(
                "penalty_last_n",
                self.penalty_last_n,
                "must be >= -1 (-1 = whole history, 0 = off)",
            ));
        }
        for &(id, bias) in &self.logit_bias {
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(SamplingError::invalid(
                    "logit_bias",
                    format!("{id}={bias}"),
                    "bias must be finite or -inf",
                ));
            }
        }
        if self.min_tokens > 0 && self.eog_ids.is_empty() {
            return Err(SamplingError::invalid(
                "min_tokens",
                self.min_tokens,
                "needs eog_ids (the end-of-generation ids to suppress)",
            ));
        }
        check_unique(&self.order)?;
        Ok(())
    }

    /// Whether the penalties stage changes anything.
    pub(crate) fn penalties_enabled(&self) -> bool {
        self.penalty_last_n != 0
            && (self.repetition_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}
