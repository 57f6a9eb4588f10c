//! The plain settings of a run: what a command's flags (or a server request's JSON) say, as
//! data with no clap type, and how each turns into what the generation loop takes once the
//! tokenizer and model are known.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kindle_generate::GenerationConfig;
use kindle_generate::chat::ChatTemplate;
use kindle_gguf::quant::GgmlType;
use kindle_model::{Engine, EngineOptions};
use kindle_sampling::SamplerConfig;
use kindle_tokenizer::Tokenizer;

use crate::chat::{TemplateSettings, chat_template, encode_single_turn};
use crate::engine::{ContextMode, show_bytes};

/// Which model file runs, and where and how.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// The GGUF file or Hugging Face directory.
    pub path: PathBuf,
    /// The type dense weight matrices are quantized to at load (`--quantize`), if any.
    pub quantize: Option<GgmlType>,
    /// Device, float type, threads, activations, KV type.
    pub engine: EngineOptions,
}

/// One prompt as given: text to encode, or token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text, encoded as [`PromptEncoding`] says.
    Text(String),
    /// Token ids, used as they are.
    Ids(Vec<u32>),
}

/// How prompt texts become token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptEncoding {
    /// The text as it is; special-token text (such as `<|im_start|>`) parsed only when
    /// `special`.
    Plain {
        /// Parse special-token text.
        special: bool,
    },
    /// Each text is a user message in the model's chat template, after an optional system
    /// message; message contents are never parsed for special tokens.
    Chat {
        /// The system message.
        system: Option<String>,
        /// Which template, with which extra variables.
        template: TemplateSettings,
    },
}

/// The prompts of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSettings {
    /// One prompt (a single run), several (a batch), or none (prompts come later, as the turns
    /// of a chat).
    pub inputs: Vec<PromptInput>,
    /// How texts are encoded.
    pub encoding: PromptEncoding,
}

/// A prompt ready to run: its text (when it was given as text) and its token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The text as given (for a chat prompt, the user message).
    pub text: Option<String>,
    /// The ids the model is fed.
    pub ids: Vec<u32>,
}

/// How a prompt is named in messages: "the prompt", or "prompt 3" in a batch.
pub fn prompt_name(index: usize, count: usize) -> String {
    if count == 1 {
        "the prompt".to_string()
    } else {
        format!("prompt {}", index + 1)
    }
}

impl PromptSettings {
    /// The model's chat template when the prompts are chat messages.
    pub fn template(&self, tokenizer: &Tokenizer) -> Result<Option<ChatTemplate>> {
        match &self.encoding {
            PromptEncoding::Chat { template, .. } => Ok(Some(chat_template(tokenizer, template)?)),
            PromptEncoding::Plain { .. } => Ok(None),
        }
    }

    /// Encode every prompt (`template`: from [`PromptSettings::template`]).
    pub fn encode(
        &self,
        tokenizer: &Tokenizer,
        template: Option<&ChatTemplate>,
    ) -> Result<Vec<Prompt>> {
        let count = self.inputs.len();
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, input)| {
                self.encode_one(tokenizer, template, input)
                    .with_context(|| prompt_name(i, count))
            })
            .collect()
    }

    fn encode_one(
        &self,
        tokenizer: &Tokenizer,
        template: Option<&ChatTemplate>,
        input: &PromptInput,
    ) -> Result<Prompt> {
        let text = match input {
            PromptInput::Ids(ids) => {
                return Ok(Prompt {
                    text: None,
                    ids: ids.clone(),
                });
            }
            PromptInput::Text(text) => text,
        };
        let ids = match (&self.encoding, template) {
            (PromptEncoding::Plain { special }, _) => tokenizer.encode(text, *special)?,
            (PromptEncoding::Chat { system, .. }, Some(template)) => {
                encode_single_turn(tokenizer, template, system.as_deref(), text)?
            }
            (PromptEncoding::Chat { .. }, None) => {
                bail!("a chat prompt needs the model's chat template")
            }
        };
        Ok(Prompt {
            text: Some(text.clone()),
            ids,
        })
    }
}

/// Every prompt must have a token to continue from: an empty one is an error naming it.
pub fn check_not_empty(prompts: &[Prompt]) -> Result<()> {
    match prompts.iter().position(|p| p.ids.is_empty()) {
        Some(i) => bail!(
            "{} is empty: a model needs at least one token to continue",
            prompt_name(i, prompts.len())
        ),
        None => Ok(()),
    }
}

/// The KV cache of a run: how long its context is, what happens when it is full, and how much
/// memory it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSettings {
    /// Context length (prompt plus output); `None`: the model's.
    pub size: Option<usize>,
    /// When `size` is `None`, at most this many tokens (`kindle chat`: 4096).
    pub default_limit: Option<usize>,
    /// Fixed (generation stops when full) or sliding (llama.cpp's context shift).
    pub mode: ContextMode,
    /// With a sliding context: tokens from the start never discarded.
    pub keep: usize,
    /// Refuse a run whose KV caches together need more bytes than this.
    pub max_kv_memory: Option<usize>,
}

impl Default for ContextSettings {
    /// The model's context, fixed, no memory budget.
    fn default() -> Self {
        ContextSettings {
            size: None,
            default_limit: None,
            mode: ContextMode::Fixed,
            keep: 0,
            max_kv_memory: None,
        }
    }
}

impl ContextSettings {
    /// The run's context length, checked against the model's (`model_ctx`).
    pub fn context_length(&self, model_ctx: usize) -> Result<usize> {
        let ctx = match (self.size, self.default_limit) {
            (Some(size), _) => size,
            (None, Some(limit)) => model_ctx.min(limit),
            (None, None) => model_ctx,
        };
        if ctx == 0 {
            bail!("--ctx-size must be at least 1");
        }
        if ctx > model_ctx {
            bail!("--ctx-size {ctx} is larger than the model's context length {model_ctx}");
        }
        Ok(ctx)
    }

    /// Size the KV caches of a run of `prompts` generating up to `max_tokens` each in a context
    /// of `ctx`: check that each prompt fits, set the engine's cache kind from `mode`/`keep`,
    /// check `max_kv_memory` against all the caches together, and return each cache's capacity
    /// in tokens.
    ///
    /// A fixed cache holds what the run can use (prompt + `max_tokens`, at most `ctx`); a
    /// sliding one holds `ctx` tokens, whatever the length of the run.
    pub fn plan_cache(
        &self,
        engine: &mut Engine,
        ctx: usize,
        prompts: &[Prompt],
        max_tokens: usize,
    ) -> Result<usize> {
        check_prompts_fit(ctx, prompts, max_tokens)?;
        let shortest = prompts.iter().map(|p| p.ids.len()).min().unwrap_or(0);
        let longest = prompts.iter().map(|p| p.ids.len()).max().unwrap_or(0);
        let capacity = match self.mode {
            ContextMode::Fixed => {
                if self.keep > 0 {
                    bail!("--keep applies to --context-mode sliding");
                }
                engine.sliding_keep = None;
                ctx.min(longest.saturating_add(max_tokens.max(1)))
            }
            ContextMode::Sliding => {
                if self.keep >= ctx {
                    bail!(
                        "--keep {} leaves no room to slide in a context of {ctx} tokens (--keep must be less than --ctx-size)",
                        self.keep
                    );
                }
                // As llama.cpp: never keep more than the prompt.
                engine.sliding_keep = Some(self.keep.min(shortest));
                ctx
            }
        };
        self.check_memory(engine, capacity, prompts.len().max(1))?;
        Ok(capacity)
    }

    /// `max_kv_memory` against `caches` caches of `capacity` tokens.
    fn check_memory(&self, engine: &Engine, capacity: usize, caches: usize) -> Result<()> {
        let kv_type = engine.kv_type;
        let per_cache = engine.cache_bytes(capacity);
        let total = per_cache.saturating_mul(caches);
        if let Some(budget) = self.max_kv_memory
            && total > budget
        {
            let caches = if caches == 1 {
                String::new()
            } else {
                format!(" ({caches} caches)")
            };
            bail!(
                "the {kv_type} KV cache of {capacity} tokens{caches} needs {}, more than --max-kv-memory {}; \
                 lower --ctx-size or --max-tokens, or use --kv-type f16 or int8",
                show_bytes(total),
                show_bytes(budget)
            );
        }
        Ok(())
    }
}

/// Each prompt must leave room for a token in a context of `ctx` (or, when nothing is to be
/// generated, fit in it).
fn check_prompts_fit(ctx: usize, prompts: &[Prompt], max_tokens: usize) -> Result<()> {
    let room = usize::from(max_tokens > 0);
    for (i, prompt) in prompts.iter().enumerate() {
        let len = prompt.ids.len();
        if len.saturating_add(room) > ctx {
            let name = prompt_name(i, prompts.len());
            if room == 0 {
                bail!("{name} has {len} tokens, more than a context of {ctx} tokens");
            }
            bail!("{name} has {len} tokens, which leaves no room in a context of {ctx} tokens");
        }
    }
    Ok(())
}

/// The sampler of a run before the tokenizer is known: the end-of-generation ids and the DRY
/// sequence breakers' token ids are filled in by [`SamplingSettings::resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingSettings {
    /// Every sampling parameter (`eog_ids` and `dry.sequence_breakers` are replaced).
    pub config: SamplerConfig,
    /// DRY sequence breakers as text, each standing for the last token of its encoding.
    /// `None`: llama.cpp's defaults, used when DRY is on, leaving out any the vocabulary cannot
    /// encode; `Some`: the caller's, each of which must encode (checked even with DRY off).
    pub dry_breakers: Option<Vec<String>>,
}

impl Default for SamplingSettings {
    /// Greedy decoding with seed 0 (no random seed is drawn).
    fn default() -> Self {
        SamplingSettings {
            config: SamplerConfig::greedy(),
            dry_breakers: None,
        }
    }
}

/// llama.cpp's default DRY sequence breakers.
pub use kindle_sampling::DEFAULT_DRY_BREAKERS;

impl SamplingSettings {
    /// The validated sampler configuration for a model whose end-of-generation ids are
    /// `eog_ids`, `encode` turning a breaker's text into token ids.
    pub fn resolve(
        &self,
        eog_ids: &[u32],
        encode: &dyn Fn(&str) -> Result<Vec<u32>>,
    ) -> Result<SamplerConfig> {
        let mut config = self.config.clone();
        config.eog_ids = eog_ids.to_vec();
        if eog_ids.is_empty() && config.min_tokens == usize::MAX {
            // --ignore-eos on a vocabulary without end-of-generation tokens: none to hold back.
            config.min_tokens = 0;
        }
        let mut breakers = Vec::new();
        match &self.dry_breakers {
            Some(given) => {
                for text in given {
                    breakers.push(encode_breaker(text, encode)?);
                }
            }
            None if config.dry.is_enabled() => breakers.extend(
                DEFAULT_DRY_BREAKERS
                    .iter()
                    .filter_map(|text| encode_breaker(text, encode).ok()),
            ),
            None => {}
        }
        if !config.dry.is_enabled() {
            breakers.clear();
        }
        breakers.sort_unstable();
        breakers.dedup();
        config.dry.sequence_breakers = breakers;
        config.validate()?;
        Ok(config)
    }

    /// [`SamplingSettings::resolve`] with the model's tokenizer: breakers are encoded as plain
    /// text, without the BOS or EOS the vocabulary may add.
    ///
    /// A `--logit-bias` id outside the vocabulary is refused here, before the weights load.
    pub fn resolve_for(&self, tokenizer: &Tokenizer) -> Result<SamplerConfig> {
        let vocab = tokenizer.vocab_size();
        if let Some(&(id, _)) = self
            .config
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= vocab)
        {
            bail!("--logit-bias token id {id} is out of range for a vocabulary of {vocab} tokens");
        }
        self.resolve(tokenizer.eog_ids(), &|text| {
            Ok(encode_without_added_tokens(tokenizer, text)?)
        })
    }
}

/// The token id a DRY sequence breaker stands for: the last of its encoding.
fn encode_breaker(text: &str, encode: &dyn Fn(&str) -> Result<Vec<u32>>) -> Result<u32> {
    let ids = encode(text).map_err(|e| anyhow!("--dry-sequence-breaker {text:?}: {e:#}"))?;
    ids.last().copied().ok_or_else(|| {
        anyhow!(
            "--dry-sequence-breaker {text:?} encodes to no token (an empty breaker breaks nothing)"
        )
    })
}

/// `text` as plain text, without the BOS or EOS the vocabulary adds around an encoding.
fn encode_without_added_tokens(
    tokenizer: &Tokenizer,
    text: &str,
) -> Result<Vec<u32>, kindle_tokenizer::TokenizerError> {
    let mut ids = tokenizer.encode(text, false)?;
    if tokenizer.add_bos() && ids.first().copied() == tokenizer.bos_id() {
        ids.remove(0);
    }
    if tokenizer.add_eos() && ids.last().copied() == tokenizer.eos_id() {
        ids.pop();
    }
    Ok(ids)
}

/// When generation stops and what it reports per token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationSettings {
    /// Most new tokens per sequence.
    pub max_tokens: usize,
    /// Stop when one of these texts is generated (not part of the output).
    pub stop_strings: Vec<String>,
    /// Stop when one of these token ids is generated.
    pub stop_tokens: Vec<u32>,
    /// Stop after this long.
    pub max_time: Option<Duration>,
    /// Report the log-probabilities of this many most likely tokens with each token.
    pub top_logprobs: usize,
}

impl GenerationSettings {
    /// The generation loop's configuration, with the model's end-of-generation ids; a stop
    /// token id outside the vocabulary (one that could never be generated) is refused.
    pub fn config(&self, tokenizer: &Tokenizer) -> Result<GenerationConfig> {
        let vocab = tokenizer.vocab_size();
        if let Some(id) = self.stop_tokens.iter().find(|&&id| id as usize >= vocab) {
            bail!("--stop-token {id} is out of range for a vocabulary of {vocab} tokens");
        }
        if self.stop_strings.iter().any(String::is_empty) {
            bail!("--stop \"\" is empty: a stop string needs at least one character");
        }
        let mut config = GenerationConfig::default()
            .with_max_new_tokens(self.max_tokens)
            .with_eog_token_ids(tokenizer.eog_ids().iter().copied())
            .with_stop_token_ids(self.stop_tokens.iter().copied())
            .with_stop_strings(self.stop_strings.iter().cloned())
            .with_top_logprobs(self.top_logprobs);
        if let Some(max_time) = self.max_time {
            config = config.with_max_time(max_time);
        }
        Ok(config)
    }
}

/// Everything a run is planned from.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The model file and device.
    pub model: ModelSettings,
    /// The prompts.
    pub prompts: PromptSettings,
    /// The KV cache.
    pub context: ContextSettings,
    /// The sampler.
    pub sampling: SamplingSettings,
    /// Stops and reporting.
    pub generation: GenerationSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> Result<Vec<u32>> {
        Ok(text.bytes().map(u32::from).collect())
    }

    fn with_dry(breakers: Option<Vec<&str>>) -> SamplingSettings {
        let mut settings = SamplingSettings::default();
        settings.config.dry.multiplier = 0.8;
        settings.dry_breakers = breakers.map(|b| b.into_iter().map(String::from).collect());
        settings
    }

    #[test]
    fn breakers_are_the_last_token_of_each_text() {
        let config = with_dry(Some(vec!["\n", "abc", "c"]))
            .resolve(&[2], &bytes)
            .unwrap();
        assert_eq!(config.dry.sequence_breakers, vec![10, u32::from(b'c')]);
        assert_eq!(config.eog_ids, vec![2]);
        let config = with_dry(None).resolve(&[], &bytes).unwrap();
        assert_eq!(config.dry.sequence_breakers.len(), 4);
    }

    #[test]
    fn a_breaker_that_encodes_to_nothing_is_an_error_naming_the_flag() {
        let err = with_dry(Some(vec![":", ""]))
            .resolve(&[], &bytes)
            .unwrap_err();
        assert!(
            err.to_string().contains("--dry-sequence-breaker \"\""),
            "{err}"
        );
        let failing = |_: &str| -> Result<Vec<u32>> { bail!("no token for 'é'") };
        let err = with_dry(Some(vec!["é"]))
            .resolve(&[], &failing)
            .unwrap_err();
        assert!(
            err.to_string().contains("--dry-sequence-breaker \"é\""),
            "{err}"
        );
        assert!(err.to_string().contains("no token for"), "{err}");
        // Checked with DRY off too; the defaults are never an error.
        let mut off = with_dry(Some(vec![""]));
        off.config.dry.multiplier = 0.0;
        assert!(off.resolve(&[], &bytes).is_err());
        assert!(with_dry(None).resolve(&[], &failing).is_ok());
    }

    #[test]
    fn context_lengths() {
        let context = ContextSettings::default();
        assert_eq!(context.context_length(8192).unwrap(), 8192);
        let chat = ContextSettings {
            default_limit: Some(4096),
            ..ContextSettings::default()
        };
        assert_eq!(chat.context_length(8192).unwrap(), 4096);
        assert_eq!(chat.context_length(2048).unwrap(), 2048);
        let zero = ContextSettings {
            size: Some(0),
            ..ContextSettings::default()
        };
        assert!(zero.context_length(64).is_err());
        let big = ContextSettings {
            size: Some(65),
            ..ContextSettings::default()
        };
        let err = big.context_length(64).unwrap_err().to_string();
        assert!(err.contains("--ctx-size 65") && err.contains("64"), "{err}");
    }

    #[test]
    fn prompts_must_leave_room() {
        let prompt = |n: usize| Prompt {
            text: None,
            ids: vec![1; n],
        };
        assert!(check_prompts_fit(4, &[prompt(3)], 1).is_ok());
        let err = check_prompts_fit(4, &[prompt(4)], 1)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("the prompt has 4 tokens"), "{err}");
        let err = check_prompts_fit(4, &[prompt(1), prompt(4)], 1)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("prompt 2 has 4 tokens"), "{err}");
        // Nothing to generate: the prompt may fill the context.
        assert!(check_prompts_fit(4, &[prompt(4)], 0).is_ok());
    }
}
