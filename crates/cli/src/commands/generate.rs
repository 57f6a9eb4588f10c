//! `kindle generate`: continue a prompt, streaming the text.

use std::io::{IsTerminal, Read, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::engine::{self, ContextMode, Detokenizer, parse_bytes, show_bytes};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_generate::{
    BeamConfig, EarlyStopping, Event, GenerationConfig, Session, Summary, Timings, beam_search,
    generate, generate_samples,
};
use kindle_model::Engine;
use kindle_sampling::Sampler;
use kindle_tokenizer::Tokenizer;
use serde_json::{Value, json};

use crate::{DeviceArgs, ModelArgs};
use kindle_cli::chat::{chat_template, encode_single_turn};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The prompt (read from standard input when absent)
    pub prompt: Option<String>,
    /// Run several prompts as one batch (repeatable): each step runs all unfinished sequences
    /// through one forward pass; each has its own sampler (seed, seed+1, ...) and stops
    #[arg(long = "prompt", value_name = "TEXT", conflicts_with = "prompt")]
    pub prompts: Vec<String>,
    /// A file of prompts, one per line (empty lines skipped), run as one batch
    #[arg(long, value_name = "PATH", conflicts_with = "prompt")]
    pub prompt_file: Option<std::path::PathBuf>,
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
    /// When the context is full: fixed (generation stops) or sliding (llama.cpp's context
    /// shift: keep the first --keep tokens, discard half of the rest, go on until --max-tokens)
    #[arg(long, value_enum, value_name = "MODE", default_value = "fixed")]
    pub context_mode: ContextMode,
    /// With --context-mode sliding: tokens from the start of the prompt that are never
    /// discarded when the context shifts (at most the prompt's length)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: usize,
    /// Refuse to run when the KV cache would take more than this many bytes (suffixes K, M, G
    /// or KiB, MiB, GiB for powers of 1024; KB, MB, GB for powers of 1000)
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_kv_memory: Option<usize>,
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
    /// Treat the prompt as a user message and apply the model's chat template
    #[arg(long)]
    pub chat: bool,
    /// With --chat: a system message before the user message
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
    /// Beam search with this many beams (1 = off)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_beams: usize,
    /// Beam search: score = sum logprob / length ^ this (> 0 favours longer sequences)
    #[arg(
        long,
        value_name = "X",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub length_penalty: f32,
    /// Beam search: stop when num-beams sequences are finished (true), when no beam can do
    /// better judging by the current length (false), or by the longest length (never)
    #[arg(long, value_name = "WHEN", default_value = "false")]
    pub early_stopping: EarlyStopping,
    /// Beam search: how many of the best sequences to return
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_return_sequences: usize,
    /// Generate N samples of the prompt, with seeds SEED, SEED+1, ...; the prompt is run once
    /// (-n is --max-tokens, as in llama.cpp)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_samples: usize,
    /// Print one JSON object at the end instead of streaming text
    #[arg(long, conflicts_with = "jsonl")]
    pub json: bool,
    /// Print one JSON line per generated token, then one with the finish reason and counts
    #[arg(long)]
    pub jsonl: bool,
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

/// The stop conditions and logprob settings of a run, from its flags and the model's
/// end-of-generation ids.
pub fn generation_config(args: &GenerateArgs, tokenizer: &Tokenizer) -> Result<GenerationConfig> {
    let mut config = GenerationConfig::default()
        .with_max_new_tokens(args.max_tokens)
        .with_eog_token_ids(tokenizer.eog_ids().iter().copied())
        .with_stop_token_ids(args.stop_token.iter().copied())
        .with_stop_strings(args.stop.iter().cloned())
        .with_top_logprobs(args.sampling.logprobs.unwrap_or(0));
    if let Some(seconds) = args.max_time {
        if !(seconds.is_finite() && seconds > 0.0) {
            bail!("--max-time must be a positive number of seconds, got {seconds}");
        }
        config = config.with_max_time(Duration::from_secs_f64(seconds));
    }
    Ok(config)
}

/// Run the command.
pub fn run(args: GenerateArgs) -> Result<()> {
    if args.num_beams == 0 || args.num_samples == 0 {
        bail!("--num-beams and --num-samples must be at least 1");
    }
    if args.num_beams > 1 && args.num_samples > 1 {
        bail!("--num-beams and --num-samples cannot be combined");
    }
    if args.num_return_sequences > args.num_beams {
        bail!(
            "--num-return-sequences {} is more than --num-beams {}",
            args.num_return_sequences,
            args.num_beams
        );
    }
    if !args.prompts.is_empty() || args.prompt_file.is_some() {
        return super::batch::run(args);
    }
    let prompt = read_prompt(args.prompt.clone())?;
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let tokenizer = &loaded.tokenizer;
    let prompt_ids = if args.chat {
        let template = chat_template(tokenizer)?;
        encode_single_turn(tokenizer, &template, args.system.as_deref(), &prompt)?
    } else {
        tokenizer.encode(&prompt, args.special)?
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty: a model needs at least one token to continue");
    }
    let mut model = engine::load_model(&loaded, &args.device)?;
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
    let capacity = plan_cache(&args, &mut model, ctx, &[prompt_ids.len()])?;
    if args.verbose {
        let cache_config = model.llama.config().kv_cache_config(capacity);
        eprintln!(
            "kindle: {} prompt tokens, {} KV cache {} tokens = {:.1} MiB ({} bytes per token){}, device {}",
            prompt_ids.len(),
            args.device.kv_type,
            capacity,
            cache_config.bytes_as(args.device.kv_type) as f64 / (1 << 20) as f64,
            cache_config.bytes_per_token_as(args.device.kv_type),
            match model.sliding_keep {
                Some(keep) => format!(", sliding (keep {keep})"),
                None => String::new(),
            },
            args.device.device.name()
        );
    }

    let encode = |text: &str| tokenizer.encode(text, false).unwrap_or_default();
    let sampler_config = args.sampling.to_config(tokenizer.eog_ids(), &encode)?;
    let mut sampler = sampler_config.clone().build()?;
    sampler.set_prompt_len(prompt_ids.len());
    let config = generation_config(&args, tokenizer)?;
    let decoder = Detokenizer {
        tokenizer,
        render_special: false,
    };
    let mut session = Session::new(&model, capacity)?;
    let mut stdout = std::io::stdout().lock();

    if args.num_beams > 1 {
        let beam = BeamConfig {
            num_beams: args.num_beams,
            num_return_sequences: args.num_return_sequences,
            length_penalty: args.length_penalty,
            early_stopping: args.early_stopping,
        };
        let out = beam_search(&model, &mut session, &prompt_ids, &decoder, &config, &beam)?;
        let sequences: Vec<Value> = out
            .sequences
            .iter()
            .map(|s| {
                json!({
                    "prompt": prompt,
                    "tokens": s.tokens,
                    "text": s.text,
                    "score": s.score,
                    "sum_logprob": s.sum_logprob,
                    "finish_reason": s.finish_reason.as_str(),
                })
            })
            .collect();
        if args.json {
            let best = out.sequences.first();
            let out = json!({
                "prompt_tokens": prompt_ids,
                "tokens": best.map(|s| s.tokens.clone()).unwrap_or_default(),
                "text": best.map(|s| s.text.clone()).unwrap_or_default(),
                "finish_reason": best.map(|s| s.finish_reason.as_str()),
                "num_beams": args.num_beams,
                "timings": timings_json(&out.timings),
                "sequences": sequences,
            });
            writeln!(stdout, "{out}")?;
        } else if args.jsonl {
            for sequence in &sequences {
                writeln!(stdout, "{sequence}")?;
            }
        } else {
            for (i, s) in out.sequences.iter().enumerate() {
                if out.sequences.len() > 1 {
                    writeln!(stdout, "--- {} (score {:.4})", i + 1, s.score)?;
                }
                writeln!(stdout, "{}", s.text)?;
            }
        }
        if args.verbose {
            report(&out.timings, None);
        }
        return Ok(());
    }

    if args.num_samples > 1 {
        let base = sampler.seed();
        let mut samplers: Vec<Sampler> = (0..args.num_samples as u64)
            .map(|i| {
                let mut config = sampler_config.clone();
                config.seed = Some(base.wrapping_add(i));
                let mut s = config.build()?;
                s.set_prompt_len(prompt_ids.len());
                Ok(s)
            })
            .collect::<Result<_>>()?;
        let mut lines = Vec::new();
        let summaries = generate_samples(
            &model,
            &mut session,
            &prompt_ids,
            &mut samplers,
            &decoder,
            &config,
            |i, event| {
                if args.jsonl
                    && let Some(mut line) = token_json(event)
                {
                    line["sample"] = json!(i);
                    lines.push(line);
                }
            },
        )?;
        let sequences: Vec<Value> = summaries
            .iter()
            .zip(&samplers)
            .map(|(s, sampler)| {
                json!({
                    "prompt": prompt,
                    "tokens": s.tokens,
                    "text": s.text,
                    "finish_reason": s.finish_reason.as_str(),
                    "seed": sampler.seed(),
                })
            })
            .collect();
        if args.json {
            let first = &summaries[0];
            let mut out = summary_json(&prompt_ids, first, base);
            out["sequences"] = Value::Array(sequences);
            writeln!(stdout, "{out}")?;
        } else if args.jsonl {
            for line in lines {
                writeln!(stdout, "{line}")?;
            }
            for (i, (s, sampler)) in summaries.iter().zip(&samplers).enumerate() {
                let mut done = done_json(s);
                done["sample"] = json!(i);
                done["seed"] = json!(sampler.seed());
                writeln!(stdout, "{done}")?;
            }
        } else {
            for (i, (s, sampler)) in summaries.iter().zip(&samplers).enumerate() {
                writeln!(stdout, "--- {} (seed {})", i + 1, sampler.seed())?;
                writeln!(stdout, "{}", s.text)?;
            }
        }
        if args.verbose {
            for s in &summaries {
                report(&s.timings, Some(s));
            }
        }
        return Ok(());
    }

    let mut summary = None;
    let mut logprobs = Vec::new();
    for event in generate(
        &model,
        &mut session,
        &prompt_ids,
        &mut sampler,
        &decoder,
        &config,
    )? {
        let event = event?;
        if args.jsonl {
            if let Some(line) = token_json(&event) {
                writeln!(stdout, "{line}")?;
                stdout.flush()?;
            }
        } else if args.json {
            if args.sampling.logprobs.is_some()
                && let Some(line) = token_json(&event)
            {
                logprobs.push(line);
            }
        } else if let Event::Token { text, .. } = &event
            && !text.is_empty()
        {
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
        if let Event::Done(done) = event {
            summary = Some(done);
        }
    }
    let summary = summary.context("generation ended without a summary")?;
    if args.json {
        let mut out = summary_json(&prompt_ids, &summary, sampler.seed());
        if args.sampling.logprobs.is_some() {
            out["logprobs"] = Value::Array(logprobs);
        }
        writeln!(stdout, "{out}")?;
    } else if args.jsonl {
        writeln!(stdout, "{}", done_json(&summary))?;
    } else {
        writeln!(stdout)?;
    }
    if args.verbose {
        report(&summary.timings, Some(&summary));
        eprintln!("kindle: seed {}", sampler.seed());
    }
    Ok(())
}

/// Size the KV caches of a run of prompts of `prompt_lens` tokens in a context of `ctx`: set
/// the model's cache kind from `--context-mode`/`--keep`, check `--max-kv-memory` against all
/// the caches together, and return each cache's capacity in tokens.
///
/// A fixed cache holds what the run can use (prompt + `--max-tokens`, at most `ctx`); a
/// sliding one holds `ctx` tokens, whatever the length of the run.
pub(crate) fn plan_cache(
    args: &GenerateArgs,
    model: &mut Engine,
    ctx: usize,
    prompt_lens: &[usize],
) -> Result<usize> {
    let shortest = prompt_lens.iter().copied().min().unwrap_or(0);
    let longest = prompt_lens.iter().copied().max().unwrap_or(0);
    let capacity = match args.context_mode {
        ContextMode::Fixed => {
            if args.keep > 0 {
                bail!("--keep applies to --context-mode sliding");
            }
            model.sliding_keep = None;
            ctx.min(longest.saturating_add(args.max_tokens.max(1)))
        }
        ContextMode::Sliding => {
            if args.keep >= ctx {
                bail!(
                    "--keep {} leaves no room to slide in a context of {ctx} tokens (--keep must be less than --ctx-size)",
                    args.keep
                );
            }
            // As llama.cpp: never keep more than the prompt.
            model.sliding_keep = Some(args.keep.min(shortest));
            ctx
        }
    };
    let kv_type = args.device.kv_type;
    let per_cache = model
        .llama
        .config()
        .kv_cache_config(capacity)
        .bytes_as(kv_type);
    let total = per_cache.saturating_mul(prompt_lens.len());
    if let Some(budget) = args.max_kv_memory
        && total > budget
    {
        let caches = if prompt_lens.len() == 1 {
            String::new()
        } else {
            format!(" ({} caches)", prompt_lens.len())
        };
        bail!(
            "the {kv_type} KV cache of {capacity} tokens{caches} needs {}, more than --max-kv-memory {}; \
             lower --ctx-size or --max-tokens, or use --kv-type f16 or int8",
            show_bytes(total),
            show_bytes(budget)
        );
    }
    Ok(capacity)
}

/// The `--jsonl` line of a token event (`None` for `Done`).
fn token_json(event: &Event) -> Option<Value> {
    let Event::Token {
        id,
        text,
        logprob,
        top_logprobs,
    } = event
    else {
        return None;
    };
    let mut line = json!({ "token": id, "text": text, "logprob": logprob });
    if !top_logprobs.is_empty() {
        line["top_logprobs"] = json!(
            top_logprobs
                .iter()
                .map(|&(id, lp)| json!([id, lp]))
                .collect::<Vec<_>>()
        );
    }
    Some(line)
}

/// The last `--jsonl` line.
fn done_json(summary: &Summary) -> Value {
    json!({
        "finish_reason": summary.finish_reason.as_str(),
        "stop": summary.stop.as_ref().map(|s| format!("{s:?}")),
        "prompt_tokens": summary.prompt_tokens,
        "generated_tokens": summary.generated_tokens,
        "text": summary.text,
        "timings": timings_json(&summary.timings),
    })
}

/// The `--json` object of one generation.
fn summary_json(prompt_ids: &[u32], summary: &Summary, seed: u64) -> Value {
    json!({
        "prompt_tokens": prompt_ids,
        "tokens": summary.tokens,
        "text": summary.text,
        "finish_reason": summary.finish_reason.as_str(),
        "stop": summary.stop.as_ref().map(|s| format!("{s:?}")),
        "seed": seed,
        "timings": timings_json(&summary.timings),
    })
}

fn timings_json(timings: &Timings) -> Value {
    json!({
        "prefill_ms": timings.prefill.as_secs_f64() * 1e3,
        "decode_ms": timings.decode.as_secs_f64() * 1e3,
        "prefill_tokens": timings.prefill_tokens,
        "decode_tokens": timings.decode_tokens,
        "prefill_tokens_per_second": timings.prefill_tokens_per_second(),
        "decode_tokens_per_second": timings.decode_tokens_per_second(),
    })
}

fn report(timings: &Timings, summary: Option<&Summary>) {
    eprintln!(
        "kindle: finish {}; prefill {} tokens in {:.0} ms ({:.1} tok/s); decode {} tokens in {:.0} ms ({:.1} tok/s)",
        summary.map_or("-", |s| s.finish_reason.as_str()),
        timings.prefill_tokens,
        timings.prefill.as_secs_f64() * 1e3,
        timings.prefill_tokens_per_second(),
        timings.decode_tokens,
        timings.decode.as_secs_f64() * 1e3,
        timings.decode_tokens_per_second(),
    );
}
