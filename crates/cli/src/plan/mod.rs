//! The run plan: one path from settings to a model ready to generate, shared by every command
//! that runs a model (`generate` and its batches, `chat`, `score`) and by a server.
//!
//! Two steps, kept apart so that a caller without a command line (a server building a request
//! from JSON) can use the second alone:
//!
//! 1. *flags → settings*: each command turns its flags into [`RunSettings`] (plain data: no
//!    clap type; [`SamplingArgs::settings`](crate::sampling_args::SamplingArgs::settings)
//!    for the sampling flags).
//! 2. *settings → plan*: [`RunPlan::build`] opens the file and its tokenizer, encodes the
//!    prompts, resolves the sampler and generation configurations (so that a bad flag fails
//!    before the weights load), loads the weights, and sizes the KV caches. Each stage is a
//!    public function of the settings ([`PromptSettings::encode`],
//!    [`SamplingSettings::resolve_for`], [`GenerationSettings::config`],
//!    [`ContextSettings::plan_cache`]) for callers that load the model once and plan many
//!    requests against it.
//!
//! What runs a plan is [`crate::run`]; what prints its events is [`crate::sink`].

mod settings;

pub use settings::{
    ContextSettings, DEFAULT_DRY_BREAKERS, GenerationSettings, ModelSettings, Prompt,
    PromptEncoding, PromptInput, PromptSettings, RunSettings, SamplingSettings, check_not_empty,
    prompt_name,
};

use anyhow::Result;
use kindle_generate::chat::ChatTemplate;
use kindle_generate::{GenerationConfig, Session};
use kindle_model::Engine;
use kindle_sampling::{Sampler, SamplerConfig};

use crate::engine::{self, Detokenizer, Loaded};

/// A model loaded and everything a run of it needs.
pub struct RunPlan {
    /// The model file and its tokenizer.
    pub loaded: Loaded,
    /// The weights on the device, the cache kind set by the context settings.
    pub engine: Engine,
    /// The model's chat template, when the prompts are chat messages.
    pub template: Option<ChatTemplate>,
    /// The prompts, encoded (none for a chat, whose prompts come turn by turn).
    pub prompts: Vec<Prompt>,
    /// The sampler configuration, its seed drawn when none was given: sequence `i` of the run
    /// samples with seed + `i`.
    pub sampler: SamplerConfig,
    /// Stops and per-token reporting.
    pub generation: GenerationConfig,
    /// The context length of the run.
    pub context: usize,
    /// Each KV cache's capacity in tokens.
    pub capacity: usize,
}

impl RunPlan {
    /// Plan a run: open the file, encode the prompts (none may be empty), resolve the sampler
    /// and generation configurations, load the weights, size the caches.
    pub fn build(settings: &RunSettings) -> Result<RunPlan> {
        Self::build_checked(settings, check_not_empty)
    }

    /// [`RunPlan::build`] with `check` instead of [`check_not_empty`] run on the encoded
    /// prompts before the weights load (for a command's own requirement, such as scoring's two
    /// tokens).
    pub fn build_checked(
        settings: &RunSettings,
        check: impl FnOnce(&[Prompt]) -> Result<()>,
    ) -> Result<RunPlan> {
        let loaded = engine::open_with(&settings.model.path, settings.model.quantize)?;
        let tokenizer = &loaded.tokenizer;
        let template = settings.prompts.template(tokenizer)?;
        let prompts = settings.prompts.encode(tokenizer, template.as_ref())?;
        check(&prompts)?;
        let sampler = with_seed(settings.sampling.resolve_for(tokenizer)?)?;
        let generation = settings.generation.config(tokenizer)?;
        let mut engine = engine::load_model_with(&loaded, &settings.model.engine)?;
        let context = settings
            .context
            .context_length(engine.llama.config().context_length)?;
        let capacity = settings.context.plan_cache(
            &mut engine,
            context,
            &prompts,
            settings.generation.max_tokens,
        )?;
        Ok(RunPlan {
            loaded,
            engine,
            template,
            prompts,
            sampler,
            generation,
            context,
            capacity,
        })
    }

    /// The seed of the run (sequence `i` samples with seed + `i`).
    pub fn seed(&self) -> u64 {
        self.sampler.seed.unwrap_or_default()
    }

    /// The sampler of sequence `index`, for a prompt of `prompt_len` tokens.
    pub fn sampler(&self, index: usize, prompt_len: usize) -> Result<Sampler> {
        let mut config = self.sampler.clone();
        config.seed = Some(self.seed().wrapping_add(index as u64));
        let mut sampler = config.build()?;
        sampler.set_prompt_len(prompt_len);
        Ok(sampler)
    }

    /// A new session with a cache of the planned capacity.
    pub fn session(&self) -> Result<Session<Engine>> {
        Ok(Session::new(&self.engine, self.capacity)?)
    }

    /// The tokenizer as the generation loop's decoder (special tokens not rendered).
    pub fn decoder(&self) -> Detokenizer<'_> {
        Detokenizer {
            tokenizer: &self.loaded.tokenizer,
            render_special: false,
        }
    }

    /// The plan's KV cache for people: `64 tokens = 2.8 MiB (46080 bytes per token)` and the
    /// device, for `-v`.
    pub fn cache_summary(&self) -> String {
        let kv_type = self.engine.kv_type;
        let llama = &self.engine.llama;
        let cache_config = llama.config().kv_cache_config(self.capacity);
        format!(
            "{kv_type} KV cache {} tokens = {:.1} MiB ({} bytes per token{}){}, device {}",
            self.capacity,
            self.engine.cache_bytes(self.capacity) as f64 / (1 << 20) as f64,
            cache_config.bytes_per_token_as(kv_type),
            match llama.layer_windows().iter().flatten().next() {
                // A sliding cache keeps every position in every layer.
                Some(w) if self.engine.sliding_keep.is_none() => format!(
                    "; local layers keep {} positions",
                    kindle_model::ring_slots(Some(*w), self.capacity)
                ),
                _ => String::new(),
            },
            match self.engine.sliding_keep {
                Some(keep) => format!(", sliding (keep {keep})"),
                None => String::new(),
            },
            self.engine.device.kind.name()
        )
    }
}

/// `config` with its seed fixed: the given one, else one drawn now.
fn with_seed(mut config: SamplerConfig) -> Result<SamplerConfig> {
    if config.seed.is_none() {
        config.seed = Some(config.clone().build()?.seed());
    }
    Ok(config)
}
