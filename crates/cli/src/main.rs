//! `kindle`: text generation with local language models.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use kindle_cli::engine::{self, BurnModel, Detokenizer, DeviceKind};
use kindle_cli::fetch;
use kindle_cli::sampling_args::SamplingArgs;
use kindle_generate::{Event, GenerationConfig, Session, generate, score};
use kindle_model::LlamaConfig;
use kindle_model::gguf::MetadataValue;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(
    name = "kindle",
    version,
    about = "Text generation with local language models (GGUF), on Burn"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Continue a prompt, streaming the text as it is generated.
    Generate(GenerateArgs),
    /// Teacher-forced scoring: each next token's logprob, the argmax, the top N, perplexity.
    Score(ScoreArgs),
    /// Show the token ids and pieces of a text.
    Tokenize(TokenizeArgs),
    /// Show a model's metadata, tensors and KV-cache size.
    Inspect(InspectArgs),
    /// Download the default model (SmolLM2-135M-Instruct, Q4_1) into the cache folder.
    FetchModel,
}

#[derive(Args, Debug)]
struct ModelArgs {
    /// GGUF model file [default: SmolLM2-135M-Instruct Q4_1, fetched on first use]
    #[arg(short, long, value_name = "PATH")]
    model: Option<PathBuf>,
}

impl ModelArgs {
    fn path(&self) -> Result<PathBuf> {
        match &self.model {
            Some(path) => Ok(path.clone()),
            None => fetch::ensure_default_model(&mut |msg| eprintln!("kindle: {msg}")),
        }
    }
}

#[derive(Args, Debug)]
struct DeviceArgs {
    /// Where the model runs
    #[arg(long, value_enum, default_value = "flex")]
    device: DeviceKind,
}

#[derive(Args, Debug)]
struct GenerateArgs {
    /// The prompt (read from standard input when absent)
    prompt: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Most tokens to generate
    #[arg(short = 'n', long, default_value_t = 256)]
    max_tokens: usize,
    /// Context length of this run (prompt plus output) [default: the model's]
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    ctx_size: Option<usize>,
    /// Parse special-token text such as <|im_start|> in the prompt (otherwise plain text)
    #[arg(long)]
    special: bool,
    /// Stop when this text is generated (repeatable); it is not printed
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// Stop when this token id is generated (repeatable)
    #[arg(long = "stop-token", value_name = "ID")]
    stop_token: Vec<u32>,
    /// Stop after this many seconds
    #[arg(long, value_name = "SECONDS")]
    max_time: Option<f64>,
    /// Print one JSON object at the end instead of streaming text
    #[arg(long)]
    json: bool,
    /// Print timings and memory figures to standard error
    #[arg(short, long)]
    verbose: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(Args, Debug)]
struct ScoreArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Text to score (tokenized without special-token parsing unless --special)
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    text: Option<String>,
    /// Token ids to score, comma-separated
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Parse special-token text in --text
    #[arg(long)]
    special: bool,
    /// How many top alternatives to list per position
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct TokenizeArgs {
    /// Text to tokenize
    text: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Parse special-token text such as <|im_start|>
    #[arg(long)]
    special: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct InspectArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Also print the KV-cache size for a context of N tokens
    #[arg(long, value_name = "N")]
    context: Option<usize>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => run_generate(args),
        Command::Score(args) => run_score(args),
        Command::Tokenize(args) => run_tokenize(args),
        Command::Inspect(args) => run_inspect(args),
        Command::FetchModel => fetch::fetch_default_model(&mut |msg| eprintln!("kindle: {msg}"))
            .map(|path| {
                println!("{}", path.display());
            }),
    };
    if let Err(error) = result {
        eprintln!("kindle: error: {error:#}");
        std::process::exit(1);
    }
}

fn read_prompt(prompt: Option<String>) -> Result<String> {
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

fn run_generate(args: GenerateArgs) -> Result<()> {
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
    let capacity = ctx.min(prompt_ids.len() + args.max_tokens.max(1));
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

fn run_score(args: ScoreArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let ids = match (&args.ids, &args.text) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => loaded.tokenizer.encode(text, args.special)?,
        (None, None) => bail!("give --text or --ids"),
    };
    if ids.len() < 2 {
        bail!("scoring needs at least 2 tokens, got {}", ids.len());
    }
    let model: BurnModel = engine::load_model(&loaded, args.device.device)?;
    let mut session = Session::new(&model, ids.len())?;
    let scored = score(&model, &mut session, &ids, args.top)?;
    if args.json {
        let positions: Vec<_> = scored
            .positions
            .iter()
            .map(|p| {
                json!({
                    "pos": p.pos,
                    "next_token": p.next_token,
                    "logprob": p.logprob,
                    "argmax": p.argmax,
                    "top": p.top.iter().map(|&(id, lp)| json!([id, lp])).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "tokens": ids, "positions": positions, "perplexity": scored.perplexity })
        );
    } else {
        println!(
            "{:>5} {:>8} {:>10} {:>8}  piece",
            "pos", "next", "logprob", "argmax"
        );
        for p in &scored.positions {
            let piece = loaded
                .tokenizer
                .decode(&[p.next_token], false)
                .unwrap_or_default();
            println!(
                "{:>5} {:>8} {:>10.4} {:>8}  {:?}",
                p.pos, p.next_token, p.logprob, p.argmax, piece
            );
        }
        println!(
            "perplexity {:.4} over {} predicted tokens",
            scored.perplexity,
            scored.positions.len()
        );
    }
    Ok(())
}

fn run_tokenize(args: TokenizeArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let ids = loaded.tokenizer.encode(&args.text, args.special)?;
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| loaded.tokenizer.id_to_piece(id).unwrap_or("").to_string())
        .collect();
    if args.json {
        println!("{}", json!({ "ids": ids, "pieces": pieces }));
    } else {
        for (id, piece) in ids.iter().zip(&pieces) {
            println!("{id:>8} -> {piece:?}");
        }
    }
    Ok(())
}

fn describe(value: &MetadataValue) -> serde_json::Value {
    match value {
        MetadataValue::Array(items) if items.len() > 16 => {
            json!(format!(
                "[{} items of {}]",
                items.len(),
                items.first().map(|v| v.type_name()).unwrap_or("?")
            ))
        }
        MetadataValue::Array(items) => {
            serde_json::Value::Array(items.iter().map(describe).collect())
        }
        MetadataValue::String(s) if s.len() > 200 => json!(format!(
            "{}... ({} bytes)",
            &s[..s.floor_char_boundary(200)],
            s.len()
        )),
        MetadataValue::String(s) => json!(s),
        MetadataValue::Bool(b) => json!(b),
        MetadataValue::F32(_) | MetadataValue::F64(_) => json!(value.as_f64()),
        _ => value
            .as_i64()
            .map(|v| json!(v))
            .unwrap_or_else(|| json!(value.as_u64())),
    }
}

fn run_inspect(args: InspectArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let file = &loaded.file;
    let config = LlamaConfig::from_gguf(file);
    let metadata: serde_json::Map<String, serde_json::Value> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), describe(v)))
        .collect();
    let tensors: Vec<_> = file
        .tensors()
        .iter()
        .map(|t| json!({ "name": t.name, "type": t.ty.name(), "dims": t.dims, "bytes": t.n_bytes() }))
        .collect();
    let total_bytes: u64 = file.tensors().iter().map(|t| t.n_bytes()).sum();
    let kv = config.as_ref().ok().map(|c| {
        let per_token = c.kv_cache_config(1).bytes_per_token();
        let ctx = args.context.unwrap_or(c.context_length);
        json!({ "bytes_per_token": per_token, "context": ctx, "bytes": per_token * ctx, "dtype": "f32" })
    });
    if args.json {
        println!(
            "{}",
            json!({
                "path": path.display().to_string(),
                "version": file.version(),
                "metadata": metadata,
                "tensors": tensors,
                "tensor_bytes": total_bytes,
                "kv_cache": kv,
                "supported": config.as_ref().err().map(|e| e.to_string()),
            })
        );
        return Ok(());
    }
    println!("{} (GGUF v{})", path.display(), file.version());
    println!("\nmetadata ({} keys):", metadata.len());
    for (key, value) in &metadata {
        println!("  {key:<45} {value}");
    }
    println!(
        "\ntensors ({}, {:.1} MiB):",
        tensors.len(),
        total_bytes as f64 / (1 << 20) as f64
    );
    for t in file.tensors() {
        println!(
            "  {:<32} {:<5} {:<18} {:>10}",
            t.name,
            t.ty.name(),
            format!("{:?}", t.dims),
            t.n_bytes()
        );
    }
    match (&config, kv) {
        (Ok(c), Some(kv)) => {
            println!(
                "\nmodel: {} layers, d_model {}, {} heads ({} KV heads, head dim {}), ffn {}, vocab {}, context {}",
                c.n_layers,
                c.d_model,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim(),
                c.d_ff,
                c.vocab_size,
                c.context_length
            );
            println!(
                "KV cache (f32): {} bytes per token; {} tokens = {:.1} MiB",
                kv["bytes_per_token"],
                kv["context"],
                kv["bytes"].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64
            );
        }
        (Err(e), _) => println!("\nkindle cannot run this model: {e}"),
        _ => {}
    }
    Ok(())
}
