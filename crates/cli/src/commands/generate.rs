//! `kindle generate`: continue a prompt, streaming the text.

use std::io::{IsTerminal, Read, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::engine::{self, Detokenizer};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_generate::{Event, GenerationConfig, Session, generate};
use serde_json::json;

use crate::{DeviceArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The prompt (read from standard input when absent)
    pub prompt: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Most tokens to generate
    #[arg(
        short = 'n',
        long,
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    pub max_tokens: usize,
    /// Context length of this run (prompt plus output) [default: the model's]
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    pub ctx_size: Option<usize>,
    /// Parse special-token text such as <|im_start|> in the prompt (otherwise plain text)
    #[arg(long)]
    pub special: bool,
    /// Stop when this text is generated (repeatable); it is not printed
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Stop when this token id is generated (repeatable)
    #[arg(long = "stop-token", value_name = "ID")]
    pub stop_token: Vec<u32>,
    /// Stop after this many seconds
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub max_time: Option<f64>,
    /// Print one JSON object at the end instead of streaming text
    #[arg(long)]
    pub json: bool,
    /// Print timings and memory figures to standard error
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// The prompt text: the argument, else standard input.
pub fn read_prompt(prompt: Option<String>) -> Result<String> {
    if let Some(prompt) = prompt {
        return Ok(prompt);
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("no prompt given: pass it as an argument or on standard input");
    }
    let mut bytes = Vec::new();
    stdin
        .read_to_end(&mut bytes)
        .context("reading the prompt from standard input")?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "the prompt on standard input is not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Run the command.
pub fn run(args: GenerateArgs) -> Result<()> {
    let prompt = read_prompt(args.prompt)?;
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let tokenizer = &loaded.tokenizer;
    let prompt_ids = tokenizer.encode(&prompt, args.special)?;
    if prompt_ids.is_empty() {
        bail!("the prompt is empty: a model needs at least one token to continue");
    }
    let model = engine::load_model(&loaded, args.device.device)?;
    let model_ctx = model.llama.config().context_length;
    let ctx = args.ctx_size.unwrap_or(model_ctx);
    if ctx == 0 {
        bail!("--ctx-size must be at least 1");
    }
    if ctx > model_ctx {
        bail!("--ctx-size {ctx} is larger than the model's context length {model_ctx}");
    }
    if prompt_ids.len() >= ctx {
        bail!(
            "the prompt has {} tokens, which leaves no room in a context of {ctx} tokens",
            prompt_ids.len()
        );
    }
    // Preallocate what this run can use, never more than the context.
    let capacity = ctx.min(prompt_ids.len().saturating_add(args.max_tokens.max(1)));
    let cache_config = model.llama.config().kv_cache_config(capacity);
    if args.verbose {
        eprintln!(
            "kindle: {} prompt tokens, KV cache {} tokens = {:.1} MiB ({} bytes per token), device {}",
            prompt_ids.len(),
            capacity,
            cache_config.bytes() as f64 / (1 << 20) as f64,
            cache_config.bytes_per_token(),
            args.device.device.name()
        );
    }

    let encode = |text: &str| tokenizer.encode(text, false).unwrap_or_default();
    let mut sampler = args
        .sampling
        .to_config(tokenizer.eog_ids(), &encode)?
        .build()?;
    sampler.set_prompt_len(prompt_ids.len());
    let mut config = GenerationConfig::default()
        .with_max_new_tokens(args.max_tokens)
        .with_eog_token_ids(tokenizer.eog_ids().iter().copied())
        .with_stop_token_ids(args.stop_token.iter().copied())
        .with_stop_strings(args.stop.iter().cloned());
    if let Some(seconds) = args.max_time {
        if !(seconds.is_finite() && seconds > 0.0) {
            bail!("--max-time must be a positive number of seconds, got {seconds}");
        }
        config = config.with_max_time(Duration::from_secs_f64(seconds));
    }
    let decoder = Detokenizer {
        tokenizer,
        render_special: false,
    };
    let mut session = Session::new(&model, capacity)?;

    let mut stdout = std::io::stdout().lock();
    let mut summary = None;
    for event in generate(
        &model,
        &mut session,
        &prompt_ids,
        &mut sampler,
        &decoder,
        &config,
    )? {
        match event? {
            Event::Token { text, .. } => {
                if !args.json && !text.is_empty() {
                    stdout.write_all(text.as_bytes())?;
                    stdout.flush()?;
                }
            }
            Event::Done(done) => summary = Some(done),
        }
    }
    let summary = summary.context("generation ended without a summary")?;
    let timings = &summary.timings;
    if args.json {
        let out = json!({
            "prompt_tokens": prompt_ids,
            "tokens": summary.tokens,
            "text": summary.text,
            "finish_reason": summary.finish_reason.as_str(),
            "stop": summary.stop.as_ref().map(|s| format!("{s:?}")),
            "seed": sampler.seed(),
            "timings": {
                "prefill_ms": timings.prefill.as_secs_f64() * 1e3,
                "decode_ms": timings.decode.as_secs_f64() * 1e3,
                "prefill_tokens": timings.prefill_tokens,
                "decode_tokens": timings.decode_tokens,
                "prefill_tokens_per_second": timings.prefill_tokens_per_second(),
                "decode_tokens_per_second": timings.decode_tokens_per_second(),
            },
        });
        writeln!(stdout, "{out}")?;
    } else {
        writeln!(stdout)?;
    }
    if args.verbose {
        eprintln!(
            "kindle: finish {}; prefill {} tokens in {:.0} ms ({:.1} tok/s); decode {} tokens in {:.0} ms ({:.1} tok/s); seed {}",
            summary.finish_reason,
            timings.prefill_tokens,
            timings.prefill.as_secs_f64() * 1e3,
            timings.prefill_tokens_per_second(),
            timings.decode_tokens,
            timings.decode.as_secs_f64() * 1e3,
            timings.decode_tokens_per_second(),
            sampler.seed()
        );
    }
    Ok(())
}
