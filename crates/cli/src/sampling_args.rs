//! The sampling flags of `kindle generate`, named as llama.cpp users know them, and their
//! conversion into plain [`SamplingSettings`] (a [`kindle_sampling::SamplerConfig`] whose
//! tokenizer-dependent parts are filled in by the run plan).
//!
//! **Default: greedy.** With no sampling flag, kindle decodes greedily (temperature 0), like
//! `--temperature 0`. When `--temperature` is not given but a flag that only makes sense when
//! sampling is (`--top-k`, `--top-p`, `--min-p`, `--typical-p`, `--top-n-sigma`,
//! `--xtc-probability`, `--mirostat`), the temperature is 1 (plain sampling, as in Hugging Face).
//! Penalties, logit bias, DRY, n-gram bans and min-tokens work in both modes. Other defaults
//! follow llama.cpp (`--repeat-last-n 64`, `--dry-base 1.75`, `--xtc-threshold 0.1`, ...), with
//! every processor off.

use clap::{Args, ValueEnum};
use kindle_sampling::{
    DryConfig, Mirostat, OrderPreset, PenaltyScope, SamplerConfig, SamplingError, parse_order,
};

pub use crate::plan::DEFAULT_DRY_BREAKERS;
use crate::plan::SamplingSettings;

/// Which history tokens the repetition/frequency/presence penalties count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PenaltyScopeArg {
    /// Prompt and generated tokens (llama.cpp / Hugging Face behaviour).
    #[value(name = "prompt-and-output", alias = "all")]
    PromptAndOutput,
    /// Generated tokens only (OpenAI-style).
    #[value(name = "output-only", alias = "output")]
    OutputOnly,
}

/// A named order of the processor chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SamplerPresetArg {
    /// llama.cpp: `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`.
    #[value(name = "llama.cpp", alias = "llama")]
    LlamaCpp,
    /// Hugging Face: `penalties;dry;temperature;top_k;top_p;min_p;typ_p;top_n_sigma;xtc`.
    #[value(name = "hf", alias = "transformers")]
    Hf,
}

/// One `--logit-bias` entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitBiasArg {
    /// Token id.
    pub id: u32,
    /// Additive bias (`-inf` bans the token).
    pub bias: f32,
}

/// Parses `ID=BIAS` (or llama.cpp's `ID+BIAS` / `ID-BIAS`); `BIAS` may be `-inf`.
pub fn parse_logit_bias(s: &str) -> Result<LogitBiasArg, String> {
    let s = s.trim();
    let (id, bias) = if let Some((id, bias)) = s.split_once('=') {
        (id, bias.to_string())
    } else if let Some(pos) = s.find(['+', '-']) {
        (&s[..pos], s[pos..].to_string())
    } else {
        return Err(format!(
            "expected ID=BIAS (e.g. 15043=-inf or 15043=1.5), got {s:?}"
        ));
    };
    let id: u32 = id
        .trim()
        .parse()
        .map_err(|_| format!("invalid token id {:?} in {s:?}", id.trim()))?;
    let bias_text = bias.trim().trim_start_matches('+');
    let bias: f32 = match bias_text.to_ascii_lowercase().as_str() {
        "-inf" | "-infinity" => f32::NEG_INFINITY,
        _ => bias_text
            .parse()
            .map_err(|_| format!("invalid bias {bias_text:?} in {s:?}"))?,
    };
    if bias.is_nan() || bias == f32::INFINITY {
        return Err(format!("bias must be finite or -inf, got {bias_text:?}"));
    }
    Ok(LogitBiasArg { id, bias })
}

/// Sampling flags (flatten into a command with `#[command(flatten)]`).
#[derive(Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Temperature; 0 = greedy. Default: 0 (greedy), or 1 when a sampling-only flag such as
    /// --top-k is given.
    #[arg(
        long,
        visible_alias = "temp",
        value_name = "T",
        allow_negative_numbers = true
    )]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens (0 = off).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub top_k: i64,
    /// Nucleus sampling: keep the smallest set of tokens reaching probability P (1 = off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Keep tokens with probability >= P * p(max) (0 = off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Locally typical sampling mass (1 = off).
    #[arg(
        long,
        visible_alias = "typical",
        value_name = "P",
        default_value_t = 1.0
    )]
    pub typical_p: f32,
    /// Keep tokens with logit >= max - N * sigma (<= 0 = off).
    #[arg(long, value_name = "N", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,
    /// XTC: probability of removing the top choices at each step (0 = off).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub xtc_probability: f32,
    /// XTC: tokens with probability >= this are "top choices" (> 0.5 = off).
    #[arg(long, value_name = "P", default_value_t = 0.1)]
    pub xtc_threshold: f32,
    /// Mirostat: 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 (replaces the truncation stages).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mirostat: u8,
    /// Mirostat learning rate (eta).
    #[arg(long, value_name = "ETA", default_value_t = 0.1)]
    pub mirostat_lr: f32,
    /// Mirostat target entropy (tau), in bits.
    #[arg(long, value_name = "TAU", default_value_t = 5.0)]
    pub mirostat_ent: f32,
    /// DRY penalty multiplier (0 = off).
    #[arg(long, value_name = "M", default_value_t = 0.0)]
    pub dry_multiplier: f32,
    /// DRY exponential base.
    #[arg(long, value_name = "B", default_value_t = 1.75)]
    pub dry_base: f32,
    /// Longest repeated sequence DRY leaves unpenalised.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub dry_allowed_length: usize,
    /// Tokens DRY scans (-1 = whole history, 0 = off).
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i64,
    /// A DRY sequence breaker (repeatable; default "\n", ":", "\"", "*"; "none" for none).
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breakers: Vec<String>,
    /// Repetition penalty (CTRL rule; 1 = off).
    #[arg(
        long,
        visible_alias = "repetition-penalty",
        value_name = "R",
        default_value_t = 1.0
    )]
    pub repeat_penalty: f32,
    /// Penalise the last N tokens (-1 = whole history, 0 = penalties off).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i64,
    /// Frequency penalty: logit -= count * F (0 = off).
    #[arg(
        long,
        value_name = "F",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// Presence penalty: logit -= P if the token occurred (0 = off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    /// Which tokens the penalties count.
    #[arg(long, value_enum, value_name = "SCOPE", default_value_t = PenaltyScopeArg::PromptAndOutput)]
    pub penalty_scope: PenaltyScopeArg,
    /// Shorthand for --penalty-scope output-only.
    #[arg(long, conflicts_with = "penalty_scope")]
    pub no_penalize_prompt: bool,
    /// Ban tokens that would repeat an n-gram of this size (0 = off).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub no_repeat_ngram_size: usize,
    /// Bias a token: ID=BIAS (repeatable; BIAS may be -inf to ban the token).
    #[arg(long, value_name = "ID=BIAS", value_parser = parse_logit_bias, allow_hyphen_values = true)]
    pub logit_bias: Vec<LogitBiasArg>,
    /// Do not end generation before N tokens were generated.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub min_tokens: usize,
    /// Never end at an end-of-generation token (llama.cpp's --ignore-eos): they are masked at
    /// every step, so a run goes on to -n, a stop or the context's end.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Seed of the random stream (default: random, reported so the run can be replayed).
    #[arg(short = 's', long, value_name = "SEED")]
    pub seed: Option<u64>,
    /// Order of the processor chain, llama.cpp syntax (e.g.
    /// "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature", or "edskypmxt").
    #[arg(long, value_name = "ORDER", conflicts_with = "sampler_preset")]
    pub samplers: Option<String>,
    /// Named chain order (default llama.cpp).
    #[arg(long, value_enum, value_name = "PRESET")]
    pub sampler_preset: Option<SamplerPresetArg>,
    /// Report log-probabilities of the chosen token and the N most likely ones.
    #[arg(long, value_name = "N")]
    pub logprobs: Option<usize>,
}

impl SamplingArgs {
    /// Whether a flag that only matters when sampling (not under greedy decoding) was given.
    pub fn wants_sampling(&self) -> bool {
        self.top_k != 0
            || self.top_p != 1.0
            || self.min_p != 0.0
            || self.typical_p != 1.0
            || self.top_n_sigma > 0.0
            || self.xtc_probability != 0.0
            || self.mirostat != 0
    }

    /// The effective temperature (see the module docs).
    pub fn effective_temperature(&self) -> f32 {
        self.temperature
            .unwrap_or(if self.wants_sampling() { 1.0 } else { 0.0 })
    }

    /// The flags as plain settings: the chain order parsed, the DRY sequence breakers
    /// unescaped (still text: [`SamplingSettings::resolve`] encodes them with the model's
    /// tokenizer, fills in its end-of-generation ids and validates the whole).
    pub fn settings(&self) -> Result<SamplingSettings, SamplingError> {
        let order = match (&self.samplers, self.sampler_preset) {
            (Some(s), _) => parse_order(s)?,
            (None, Some(SamplerPresetArg::Hf)) => OrderPreset::HuggingFace.stages(),
            (None, Some(SamplerPresetArg::LlamaCpp)) | (None, None) => {
                OrderPreset::LlamaCpp.stages()
            }
        };
        let mirostat = match self.mirostat {
            0 => Mirostat::Off,
            1 => Mirostat::V1 {
                tau: self.mirostat_ent,
                eta: self.mirostat_lr,
            },
            _ => Mirostat::V2 {
                tau: self.mirostat_ent,
                eta: self.mirostat_lr,
            },
        };
        let dry = DryConfig {
            multiplier: self.dry_multiplier,
            base: self.dry_base,
            allowed_length: self.dry_allowed_length,
            penalty_last_n: self.dry_penalty_last_n,
            sequence_breakers: Vec::new(),
        };
        let dry_breakers = if self.dry_sequence_breakers.is_empty() {
            None
        } else if self.dry_sequence_breakers.iter().any(|b| b == "none") {
            Some(Vec::new())
        } else {
            Some(
                self.dry_sequence_breakers
                    .iter()
                    .map(|b| unescape(b))
                    .collect(),
            )
        };
        let scope = if self.no_penalize_prompt || self.penalty_scope == PenaltyScopeArg::OutputOnly
        {
            PenaltyScope::OutputOnly
        } else {
            PenaltyScope::PromptAndOutput
        };
        let config = SamplerConfig {
            temperature: self.effective_temperature(),
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            top_n_sigma: self.top_n_sigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            mirostat,
            dry,
            repetition_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.repeat_last_n,
            penalty_scope: scope,
            no_repeat_ngram_size: self.no_repeat_ngram_size,
            logit_bias: self.logit_bias.iter().map(|b| (b.id, b.bias)).collect(),
            // No count of tokens reaches `usize::MAX`: the end is held back for good.
            min_tokens: if self.ignore_eos {
                usize::MAX
            } else {
                self.min_tokens
            },
            eog_ids: Vec::new(),
            seed: self.seed,
            order,
        };
        Ok(SamplingSettings {
            config,
            dry_breakers,
        })
    }
}

/// `\n`, `\t`, `\"`, `\\` escapes in breaker strings typed on a command line.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use kindle_sampling::{HF_ORDER, LLAMA_CPP_ORDER, Stage};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sampling: SamplingArgs,
    }

    fn parse(args: &[&str]) -> SamplingArgs {
        Cli::try_parse_from(std::iter::once("kindle").chain(args.iter().copied()))
            .unwrap()
            .sampling
    }

    fn no_tokenizer(_: &str) -> Vec<u32> {
        Vec::new()
    }

    /// Flags → settings → a resolved configuration, `encode` standing for a tokenizer.
    trait ToConfig {
        fn to_config(
            &self,
            eog_ids: &[u32],
            encode: &dyn Fn(&str) -> Vec<u32>,
        ) -> anyhow::Result<SamplerConfig>;
    }

    impl ToConfig for SamplingArgs {
        fn to_config(
            &self,
            eog_ids: &[u32],
            encode: &dyn Fn(&str) -> Vec<u32>,
        ) -> anyhow::Result<SamplerConfig> {
            self.settings()?.resolve(eog_ids, &|text| Ok(encode(text)))
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_greedy_and_neutral() {
        let args = parse(&[]);
        let config = args.to_config(&[2], &no_tokenizer).unwrap();
        assert_eq!(config.temperature, 0.0);
        assert_eq!(config.top_k, 0);
        assert_eq!(config.repetition_penalty, 1.0);
        assert_eq!(config.penalty_last_n, 64);
        assert_eq!(config.order, LLAMA_CPP_ORDER.to_vec());
        assert_eq!(config.seed, None);
        assert_eq!(args.logprobs, None);
        assert!(config.build().is_ok());
    }

    #[test]
    fn sampling_flags_switch_to_temperature_one() {
        assert_eq!(
            parse(&["--top-k", "40"])
                .to_config(&[], &no_tokenizer)
                .unwrap()
                .temperature,
            1.0
        );
        assert_eq!(
            parse(&["--top-k", "40", "--temp", "0.7"]).effective_temperature(),
            0.7
        );
        assert_eq!(
            parse(&["--repeat-penalty", "1.1"]).effective_temperature(),
            0.0
        );
    }

    #[test]
    fn llama_cpp_style_flags() {
        let args = parse(&[
            "--temp",
            "0.8",
            "--top-k",
            "40",
            "--top-p",
            "0.95",
            "--min-p",
            "0.05",
            "--typical-p",
            "0.9",
            "--top-n-sigma",
            "1.5",
            "--xtc-probability",
            "0.5",
            "--xtc-threshold",
            "0.2",
            "--repeat-penalty",
            "1.1",
            "--repeat-last-n",
            "-1",
            "--frequency-penalty",
            "-0.5",
            "--presence-penalty",
            "0.3",
            "--no-repeat-ngram-size",
            "3",
            "--min-tokens",
            "5",
            "--seed",
            "42",
            "--logprobs",
            "5",
            "--logit-bias",
            "15=-inf",
            "--logit-bias",
            "7=1.5",
            "--logit-bias",
            "9-2",
        ]);
        let c = args.to_config(&[2], &no_tokenizer).unwrap();
        assert_eq!(
            (c.temperature, c.top_k, c.top_p, c.min_p, c.typical_p),
            (0.8, 40, 0.95, 0.05, 0.9)
        );
        assert_eq!(
            (c.top_n_sigma, c.xtc_probability, c.xtc_threshold),
            (1.5, 0.5, 0.2)
        );
        assert_eq!(
            (
                c.repetition_penalty,
                c.penalty_last_n,
                c.frequency_penalty,
                c.presence_penalty
            ),
            (1.1, -1, -0.5, 0.3)
        );
        assert_eq!(
            (c.no_repeat_ngram_size, c.min_tokens, c.seed),
            (3, 5, Some(42))
        );
        assert_eq!(
            c.logit_bias,
            vec![(15, f32::NEG_INFINITY), (7, 1.5), (9, -2.0)]
        );
        assert_eq!(c.eog_ids, vec![2]);
        assert_eq!(args.logprobs, Some(5));
        // --ignore-eos holds the end back for good (over --min-tokens); without
        // end-of-generation ids there is nothing to hold back.
        let args = parse(&["--ignore-eos", "--min-tokens", "3"]);
        let c = args.to_config(&[2, 7], &no_tokenizer).unwrap();
        assert_eq!((c.min_tokens, c.eog_ids), (usize::MAX, vec![2, 7]));
        let c = args.to_config(&[], &no_tokenizer).unwrap();
        assert_eq!(c.min_tokens, 0);
    }

    #[test]
    fn mirostat_dry_scope_and_order() {
        let args = parse(&[
            "--mirostat",
            "2",
            "--mirostat-lr",
            "0.2",
            "--mirostat-ent",
            "4",
            "--dry-multiplier",
            "0.8",
            "--dry-sequence-breaker",
            "\\n",
            "--dry-sequence-breaker",
            "abc",
            "--no-penalize-prompt",
            "--samplers",
            "penalties;top_k;temperature",
        ]);
        let encode = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
        let c = args.to_config(&[], &encode).unwrap();
        assert_eq!(c.mirostat, Mirostat::V2 { tau: 4.0, eta: 0.2 });
        assert_eq!(c.dry.sequence_breakers, vec![10, u32::from(b'c')]);
        assert_eq!(c.penalty_scope, PenaltyScope::OutputOnly);
        assert_eq!(
            c.order,
            vec![Stage::Penalties, Stage::TopK, Stage::Temperature]
        );
        // Default breakers when DRY is on and none are given.
        let c = parse(&["--dry-multiplier", "1"])
            .to_config(&[], &encode)
            .unwrap();
        assert_eq!(c.dry.sequence_breakers.len(), 4);
        let c = parse(&["--dry-multiplier", "1", "--dry-sequence-breaker", "none"])
            .to_config(&[], &encode)
            .unwrap();
        assert!(c.dry.sequence_breakers.is_empty());
        let c = parse(&["--sampler-preset", "hf", "--penalty-scope", "output"])
            .to_config(&[], &encode)
            .unwrap();
        assert_eq!(c.order, HF_ORDER.to_vec());
        assert_eq!(c.penalty_scope, PenaltyScope::OutputOnly);
    }

    #[test]
    fn invalid_values_are_rejected() {
        let bad = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("kindle").chain(args.iter().copied())).is_err()
        };
        assert!(bad(&["--mirostat", "3"]));
        assert!(bad(&["--logit-bias", "abc"]));
        assert!(bad(&["--logit-bias", "5=inf"]));
        assert!(bad(&["--samplers", "top_k", "--sampler-preset", "hf"]));
        let err = parse(&["--top-p", "1.5"])
            .to_config(&[], &no_tokenizer)
            .unwrap_err();
        assert!(err.to_string().contains("top_p = 1.5"), "{err}");
        let err = parse(&["--top-k", "-1"])
            .to_config(&[], &no_tokenizer)
            .unwrap_err();
        assert!(err.to_string().contains("top_k = -1"), "{err}");
        assert!(
            parse(&["--min-tokens", "3"])
                .to_config(&[], &no_tokenizer)
                .is_err()
        );
        assert!(
            parse(&["--samplers", "top_k;bogus"])
                .to_config(&[], &no_tokenizer)
                .is_err()
        );
    }

    #[test]
    fn logit_bias_parsing() {
        assert_eq!(
            parse_logit_bias("15043=-inf").unwrap(),
            LogitBiasArg {
                id: 15043,
                bias: f32::NEG_INFINITY
            }
        );
        assert_eq!(
            parse_logit_bias("1=+2.5").unwrap(),
            LogitBiasArg { id: 1, bias: 2.5 }
        );
        assert_eq!(
            parse_logit_bias("1+2.5").unwrap(),
            LogitBiasArg { id: 1, bias: 2.5 }
        );
        assert_eq!(
            parse_logit_bias("1-inf").unwrap(),
            LogitBiasArg {
                id: 1,
                bias: f32::NEG_INFINITY
            }
        );
        assert!(parse_logit_bias("x=1").is_err());
        assert!(parse_logit_bias("1=nan").is_err());
    }
}
