//! The configurable part of the processor chain: which stages run, in which order.

use std::fmt;
use std::str::FromStr;

use crate::SamplingError;

/// One configurable stage of the processor chain.
///
/// The order of these stages is set by [`crate::SamplerConfig::order`] (parsed from a
/// llama.cpp-style `--samplers` string with [`parse_order`]). Logit bias, min-tokens and the
/// no-repeat-n-gram ban are *not* stages: they always run first, before the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Repetition (CTRL), frequency and presence penalties (`penalties`, short `e`).
    Penalties,
    /// DRY sequence-repetition penalty (`dry`, short `d`).
    Dry,
    /// Top-n-sigma truncation (`top_n_sigma`, short `s`).
    TopNSigma,
    /// Top-k truncation (`top_k`, short `k`).
    TopK,
    /// Locally typical sampling (`typ_p`, also `typical_p`/`typical`, short `y`).
    TypicalP,
    /// Nucleus (top-p) truncation (`top_p`, short `p`).
    TopP,
    /// Min-p truncation (`min_p`, short `m`).
    MinP,
    /// Exclude Top Choices (`xtc`, short `x`).
    Xtc,
    /// Temperature scaling (`temperature`, also `temp`, short `t`).
    Temperature,
}

const KNOWN: &str = "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature";

impl Stage {
    /// Every stage, in the default (llama.cpp) order.
    pub const ALL: [Stage; 9] = LLAMA_CPP_ORDER;

    /// The canonical (llama.cpp) name of the stage.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Penalties => "penalties",
            Stage::Dry => "dry",
            Stage::TopNSigma => "top_n_sigma",
            Stage::TopK => "top_k",
            Stage::TypicalP => "typ_p",
            Stage::TopP => "top_p",
            Stage::MinP => "min_p",
            Stage::Xtc => "xtc",
            Stage::Temperature => "temperature",
        }
    }

    /// llama.cpp's one-letter code for the stage (`--sampling-seq`).
    pub fn short(self) -> char {
        match self {
            Stage::Penalties => 'e',
            Stage::Dry => 'd',
            Stage::TopNSigma => 's',
            Stage::TopK => 'k',
            Stage::TypicalP => 'y',
            Stage::TopP => 'p',
            Stage::MinP => 'm',
            Stage::Xtc => 'x',
            Stage::Temperature => 't',
        }
    }

    fn from_short(c: char) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.short() == c)
    }

    /// True for stages that drop tokens (skipped when mirostat selects the token).
    pub fn is_truncation(self) -> bool {
        matches!(
            self,
            Stage::TopNSigma
                | Stage::TopK
                | Stage::TypicalP
                | Stage::TopP
                | Stage::MinP
                | Stage::Xtc
        )
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Stage {
    type Err = SamplingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        Ok(match norm.as_str() {
            "penalties" | "penalty" | "repetition_penalty" => Stage::Penalties,
            "dry" => Stage::Dry,
            "top_n_sigma" | "top_nsigma" | "nsigma" => Stage::TopNSigma,
            "top_k" => Stage::TopK,
            "typ_p" | "typical_p" | "typical" | "typ" => Stage::TypicalP,
            "top_p" | "nucleus" => Stage::TopP,
            "min_p" => Stage::MinP,
            "xtc" => Stage::Xtc,
            "temperature" | "temp" => Stage::Temperature,
            _ => {
                return Err(SamplingError::UnknownStage {
                    name: s.trim().to_string(),
                    known: KNOWN,
                });
            }
        })
    }
}

/// llama.cpp's default order (also kindle's default):
/// `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`.
pub const LLAMA_CPP_ORDER: [Stage; 9] = [
    Stage::Penalties,
    Stage::Dry,
    Stage::TopNSigma,
    Stage::TopK,
    Stage::TypicalP,
    Stage::TopP,
    Stage::MinP,
    Stage::Xtc,
    Stage::Temperature,
];

/// Hugging Face `transformers`' order: logits processors (repetition penalty; DRY has no HF
/// equivalent and is put with the penalties) and then the warpers in `generate()`'s order:
/// `penalties;dry;temperature;top_k;top_p;min_p;typ_p`, followed by the stages HF lacks
/// (`top_n_sigma;xtc`).
pub const HF_ORDER: [Stage; 9] = [
    Stage::Penalties,
    Stage::Dry,
    Stage::Temperature,
    Stage::TopK,
    Stage::TopP,
    Stage::MinP,
    Stage::TypicalP,
    Stage::TopNSigma,
    Stage::Xtc,
];

/// A named stage order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderPreset {
    /// [`LLAMA_CPP_ORDER`] (the default).
    LlamaCpp,
    /// [`HF_ORDER`].
    HuggingFace,
}

impl OrderPreset {
    /// The stages of this preset.
    pub fn stages(self) -> Vec<Stage> {
        match self {
            OrderPreset::LlamaCpp => LLAMA_CPP_ORDER.to_vec(),
            OrderPreset::HuggingFace => HF_ORDER.to_vec(),
        }
    }
}

impl FromStr for OrderPreset {
    type Err = SamplingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "llama.cpp" | "llamacpp" | "llama_cpp" | "llama" => Ok(OrderPreset::LlamaCpp),
            "hf" | "huggingface" | "hugging_face" | "transformers" => Ok(OrderPreset::HuggingFace),
            _ => Err(SamplingError::invalid(
                "sampler_preset",
                s,
                "one of llama.cpp, hf",
            )),
        }
    }
}

/// Parses a sampler order.
///
/// Accepts llama.cpp's `--samplers` syntax (names separated by `;`, `,` or whitespace, e.g.
/// `"penalties;dry;top_k;temperature"`) and its one-letter `--sampling-seq` syntax (e.g.
/// `"edkypmxt"`). Stages left out are not applied; a repeated stage is an error.
///
/// ```
/// use kindle_sampling::{parse_order, Stage};
/// assert_eq!(parse_order("top_k;temp").unwrap(), vec![Stage::TopK, Stage::Temperature]);
/// assert_eq!(parse_order("kt").unwrap(), vec![Stage::TopK, Stage::Temperature]);
/// assert!(parse_order("top_k;top_k").is_err());
/// ```
pub fn parse_order(s: &str) -> Result<Vec<Stage>, SamplingError> {
    let s = s.trim();
    let is_sep = |c: char| c == ';' || c == ',' || c.is_whitespace();
    let stages: Vec<Stage> = if !s.contains(is_sep)
        && s.len() > 1
        && s.chars().all(|c| Stage::from_short(c).is_some())
    {
        s.chars().filter_map(Stage::from_short).collect()
    } else {
        s.split(is_sep)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?
    };
    check_unique(&stages)?;
    Ok(stages)
}

/// Formats an order as a llama.cpp `--samplers` string (`;`-separated canonical names).
pub fn format_order(order: &[Stage]) -> String {
    order.iter().map(|s| s.name()).collect::<Vec<_>>().join(";")
}

pub(crate) fn check_unique(order: &[Stage]) -> Result<(), SamplingError> {
    for (i, s) in order.iter().enumerate() {
        if order[..i].contains(s) {
            return Err(SamplingError::DuplicateStage { name: s.name() });
        }
    }
    Ok(())
}
