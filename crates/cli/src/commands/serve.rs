//! `kindle serve`: the model behind an OpenAI-compatible HTTP API (`kindle-server`), with
//! continuous batching.
//!
//! This module maps the flags: the model is loaded through the same run plan as every other
//! command ([`RunPlan::build`], no prompts, the chat template loaded), and the tokenizer and
//! template are handed to the server as its [`TextCodec`].

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::chat::encode_chat_ending;
use kindle_cli::draft::DraftSettings;
use kindle_cli::engine::{ContextMode, parse_bytes};
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptSettings, RunPlan,
    RunSettings, SamplingSettings,
};
use kindle_constrain::{Constrainer, ConstraintSpec};
use kindle_generate::chat::{ChatEnding, ChatMessage, ChatTemplate, TemplateVars};
use kindle_generate::{BoxError, PagedModel, TokenDecoder};
use kindle_model::{EngineOptions, RowArithmetic};
use kindle_sampling::LogitsConstraint;
use kindle_server::draft::{DraftModel, Drafting};
use kindle_server::reasoning::ReasoningFormat;
use kindle_server::{Encoding, Guided, ServerConfig, TextCodec};
use kindle_tokenizer::{Tokenizer, TokenizerError};

use super::draft_args::DraftModelArgs;
use super::{DeviceArgs, ModelArgs, TemplateArgs};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    // The chat template of chat completions, and its default extra variables (a request's
    // `chat_template_kwargs` go over them).
    #[command(flatten)]
    pub template: TemplateArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0: any free port, printed at start)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Most sequences generating at once (each choice of a request is one)
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel: usize,
    /// Context length of each sequence (prompt plus output) [default: the model's, at most
    /// 4096]
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    pub ctx_size: Option<usize>,
    /// Most sequences waiting for a free slot; beyond that requests get 429
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub queue: usize,
    /// Most prompt tokens one engine step feeds; a longer prompt is prefilled in chunks over
    /// several steps while the running sequences keep generating (chunked prefill)
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub batch_tokens: usize,
    /// Turn prefix caching off. With it on (the default), the KV blocks of every prompt are
    /// indexed by their tokens, and a new prompt starting with the same tokens (a system
    /// prompt, a chat history) reuses them instead of computing them again (a draft model's
    /// too: it has a KV pool of its own, as large as the model's)
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Tokens of KV storage in the paged pool that all sequences share [default: --parallel
    /// x --ctx-size]; a request waits until the pool can hold its prompt plus its max_tokens.
    /// Memory is taken as blocks are first used. A model's sliding-window layers (Gemma-3's)
    /// keep blocks of their own, each sequence only those of its window
    #[arg(long = "kv-pool", value_name = "TOKENS")]
    pub kv_pool: Option<usize>,
    /// Tokens per KV block (the prefix cache's granularity)
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub block_size: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Allow browsers on this origin to call the API (repeatable; `*` for any); CORS is off
    /// without it
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Largest request body (suffixes K, M, G as for --max-kv-memory)
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_bytes)]
    pub max_body: usize,
    /// Seconds a connection may take to send a request's headers (counted from connecting,
    /// or from the previous response on a kept-alive connection); then it is closed
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub header_timeout: f64,
    /// On ctrl-c or SIGTERM, seconds that running requests get to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// Chat replies that open with `<think>`: deepseek (or auto) puts the reasoning in the
    /// message's reasoning_content and the answer in content; none leaves the text whole (a
    /// request's reasoning_format overrides it)
    #[arg(long, value_name = "FORMAT", default_value = "auto", value_parser = reasoning_format)]
    pub reasoning_format: ReasoningFormat,
    // The server's draft model (or the model's first layers).
    #[command(flatten)]
    pub draft: DraftModelArgs,
    /// Most tokens the draft model drafts per step. Every request drafts with it while it runs
    /// alone (beside others it decodes in the batch) unless its kindle_draft_max says
    /// otherwise (0: no drafting) or it asks for prompt lookup; the output is unchanged
    /// [default: 8]
    #[arg(long, value_name = "K")]
    pub draft_max: Option<usize>,
    /// The shortest draft of the draft model verified (llama-server's --draft-min): a shorter
    /// one gives a plain step, unless a request's kindle_draft_min says otherwise. Sampled
    /// requests verify every draft where --draft-p-min ends drafts early (dropping the short
    /// ones would change their output distribution) [default: 0, every draft]
    #[arg(long, value_name = "N")]
    pub draft_min: Option<usize>,
}

/// `--reasoning-format`'s parser.
fn reasoning_format(name: &str) -> Result<ReasoningFormat, String> {
    ReasoningFormat::from_name(name)
        .ok_or_else(|| format!("{name:?} is not a reasoning format (none, deepseek or auto)"))
}

/// Run the command.
pub fn run(args: ServeArgs) -> Result<()> {
    if !(args.drain_timeout.is_finite() && args.drain_timeout >= 0.0) {
        bail!(
            "--drain-timeout must be a number of seconds, got {}",
            args.drain_timeout
        );
    }
    if !(args.header_timeout.is_finite() && args.header_timeout > 0.0) {
        bail!(
            "--header-timeout must be a positive number of seconds, got {}",
            args.header_timeout
        );
    }
    let settings = args.settings()?;
    let drafts = DraftSettings {
        draft_min: args.draft_min,
        ..args.draft.settings(args.draft_max)
    };
    if drafts.draft_model.is_none()
        && drafts.self_speculative.is_none()
        && (drafts.draft_max.is_some()
            || drafts.draft_min.is_some()
            || drafts.draft_activations.is_some()
            || drafts.draft_kv_type.is_some()
            || drafts.draft_vocab.is_some()
            || drafts.draft_p_min.is_some())
    {
        bail!(
            "--draft-max, --draft-min, --draft-activations, --draft-kv-type, --draft-vocab and --draft-p-min set the server's draft model: give --draft-model FILE or --self-speculative L (a request asks for prompt lookup itself, with kindle_lookup_ngram)"
        );
    }
    drafts.check()?;
    let name = model_name(&settings);
    let plan = RunPlan::build_checked(&settings, |_| Ok(()))?;
    let draft_engine = drafts.draft_engine(&plan, &settings.model.engine)?;
    let template = plan
        .template
        .context("serving chat completions needs the model's chat template")?;
    let codec = ServeCodec {
        tokenizer: plan.loaded.tokenizer,
        template,
        constrainer: OnceLock::new(),
    };
    let mut config = ServerConfig::new(name, plan.context);
    config.parallel = args.parallel;
    config.queue = args.queue;
    config.step_tokens = args.batch_tokens;
    config.prefix_cache = !args.no_prefix_cache;
    config.kv_pool_tokens = args.kv_pool;
    config.block_size = args.block_size;
    config.api_key = args.api_key.clone();
    config.cors_origins = args.cors_origins.clone();
    config.max_body_bytes = args.max_body;
    config.drain_timeout = Duration::from_secs_f64(args.drain_timeout);
    config.reasoning_format = args.reasoning_format;
    config.header_timeout = Duration::from_secs_f64(args.header_timeout);
    config.validate()?;
    let addr = SocketAddr::new(args.host, args.port);
    let (parallel, context) = (config.parallel, config.context);
    let (pool, block) = (config.pool_tokens(), config.block_size);
    // The draft model, with a pool like the target's (and its prefix cache) unless prefix
    // caching is off.
    let drafting = match draft_engine {
        Some(engine) => {
            let model = if config.prefix_cache {
                DraftModel::pooled(engine, config.pool_blocks(), block, parallel)?
            } else {
                DraftModel::new(engine)
            };
            let model = match drafts.draft_vocab {
                Some(first) => model.with_vocab(first),
                None => model,
            }
            .with_p_min(drafts.draft_p_min.unwrap_or(0.0))?;
            let drafting = Drafting::new(model, drafts.draft_max())?;
            Some(drafting.with_draft_min(drafts.draft_min.unwrap_or(0))?)
        }
        None => None,
    };
    let draft_line = drafting
        .as_ref()
        .map(|d| {
            let pool = d
                .pool_stats()
                .map(|s| format!(" (its KV pool {} tokens)", s.total * s.block_size))
                .unwrap_or_default();
            let p_min = drafts
                .draft_p_min
                .filter(|&p| p > 0.0)
                .map(|p| format!(", stopping below p {p}"))
                .unwrap_or_default();
            let min = drafts
                .draft_min
                .filter(|&n| n > 1)
                .map(|n| format!(", verifying drafts of {n} or more"))
                .unwrap_or_default();
            format!(
                ", drafting {} tokens a step{min}{p_min}{pool}",
                d.draft_max()
            )
        })
        .unwrap_or_default();
    // The pool now (`run` keeps it), to say what its sliding-window layers hold.
    let mut engine = plan.engine;
    kindle_server::engine::open_pool(&mut engine, config.pool_blocks(), block, parallel)?;
    let local = engine
        .local_pool_stats()
        .map(|s| {
            format!(
                ", its sliding-window layers {} tokens",
                s.total * s.block_size
            )
        })
        .unwrap_or_default();
    kindle_server::run(addr, engine, drafting, codec, config, |addr| {
        eprintln!(
            "kindle: serving {} on http://{addr} ({parallel} parallel sequences, context {context}, \
             KV pool {pool} tokens in blocks of {block}{local}{draft_line})",
            addr.ip()
        );
    })
    .with_context(|| format!("serving on {addr}"))?;
    eprintln!("kindle: drained, exiting");
    Ok(())
}

/// The model's name in the API: its file name without `.gguf`.
fn model_name(settings: &RunSettings) -> String {
    let path = &settings.model.path;
    path.file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "kindle".to_string())
}

impl ServeArgs {
    fn settings(&self) -> Result<RunSettings> {
        Ok(RunSettings {
            model: ModelSettings {
                path: self.model.path()?,
                quantize: self.model.quantize,
                // Prompts and decode steps of many requests share each pass: one arithmetic
                // for every row keeps a request's output what it gives alone, whatever its
                // batch, its prompt's chunking or a cached prefix.
                engine: EngineOptions {
                    arithmetic: RowArithmetic::Decode,
                    ..self.device.options()
                },
            },
            prompts: PromptSettings {
                inputs: Vec::new(),
                encoding: PromptEncoding::Chat {
                    system: None,
                    template: self.template.settings(),
                },
            },
            context: ContextSettings {
                size: self.ctx_size,
                default_limit: Some(4096),
                mode: ContextMode::Fixed,
                keep: 0,
                max_kv_memory: None,
            },
            // Each request brings its own sampling settings.
            sampling: SamplingSettings::default(),
            generation: GenerationSettings {
                max_tokens: 1,
                ..GenerationSettings::default()
            },
        })
    }
}

/// The model's tokenizer and chat template, as the server sees them.
struct ServeCodec {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    /// Structured output (`response_format`, `guided_*`) for the model's vocabulary, built
    /// by the first request that asks for it: its token trie takes about 120 MB and two
    /// seconds for a 262,144-token vocabulary, which a server that never constrains its
    /// output should not pay.
    constrainer: OnceLock<Result<Constrainer, String>>,
}

impl TokenDecoder for ServeCodec {
    type Error = TokenizerError;
    fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.tokenizer.decode(ids, true)
    }
}

impl TextCodec for ServeCodec {
    fn encode(&self, text: &str, options: Encoding) -> Result<Vec<u32>, BoxError> {
        Ok(if options.add_special {
            self.tokenizer.encode(text, options.parse_special)?
        } else {
            self.tokenizer
                .encode_segments(&[(text, options.parse_special)])?
        })
    }

    fn encode_chat(
        &self,
        messages: &[ChatMessage],
        ending: ChatEnding,
        vars: &TemplateVars,
    ) -> Result<Vec<u32>, BoxError> {
        // The whole chain in the text: the server quotes it to the client, and the reason is
        // in the causes (a template out of fuel, a `raise_exception` message).
        encode_chat_ending(&self.tokenizer, &self.template, messages, ending, vars)
            .map_err(|e| format!("{e:#}").into())
    }

    fn template_uses(&self, name: &str) -> bool {
        self.template.mentions(name)
    }

    fn tool_format(&self) -> kindle_server::tools::ToolFormat {
        kindle_server::tools::ToolFormat::of_template(self.template.source())
    }

    fn token_text(&self, id: u32) -> String {
        self.tokenizer.decode(&[id], false).unwrap_or_default()
    }

    fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.tokenizer.token_bytes(id).unwrap_or_default()
    }

    fn render(&self, ids: &[u32]) -> Result<String, BoxError> {
        Ok(self.tokenizer.decode(ids, false)?)
    }

    fn chat_template(&self) -> Option<String> {
        Some(self.template.source().to_string())
    }

    fn eog_ids(&self) -> Vec<u32> {
        self.tokenizer.eog_ids().to_vec()
    }

    fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }

    fn constraint(
        &self,
        guided: &Guided,
        field: &str,
    ) -> Result<Box<dyn LogitsConstraint>, String> {
        let spec = match guided {
            Guided::JsonSchema(schema) => ConstraintSpec::JsonSchema(schema.clone()),
            Guided::JsonObject => ConstraintSpec::JsonObject,
            Guided::Regex(rx) => ConstraintSpec::Regex(rx.clone()),
            Guided::Choice(choices) => ConstraintSpec::Choice(choices.clone()),
            Guided::Grammar(grammar) => ConstraintSpec::Lark(grammar.clone()),
            Guided::Gbnf(grammar) => ConstraintSpec::Gbnf(grammar.clone()),
        };
        let constrainer = self
            .constrainer
            .get_or_init(|| Constrainer::new(&self.tokenizer).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| format!("structured output is not available for this model: {e}"))?;
        match constrainer.constraint(&spec, field) {
            Ok(constraint) => Ok(Box::new(constraint)),
            Err(error) => Err(error.to_string()),
        }
    }
}
