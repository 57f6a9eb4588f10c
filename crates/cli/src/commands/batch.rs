//! `kindle generate --prompt A --prompt B ...` / `--prompt-file`: several prompts generated as
//! one batch (one forward pass per step for all unfinished sequences).

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kindle_cli::chat::{chat_template, encode_single_turn};
use kindle_cli::engine::{self, Detokenizer};
use kindle_generate::{Session, generate_batch};
use serde_json::{Value, json};

use super::generate::GenerateArgs;

/// The prompts of a batch: the `--prompt` flags, then the lines of `--prompt-file`.
fn collect_prompts(args: &GenerateArgs) -> Result<Vec<String>> {
    let mut prompts = args.prompts.clone();
    if let Some(path) = &args.prompt_file {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} is not valid UTF-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        prompts.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned),
        );
    }
    if prompts.is_empty() {
        bail!("the batch has no prompt (the prompt file has only empty lines)");
    }
    Ok(prompts)
}

/// Run the batch.
pub fn run(args: GenerateArgs) -> Result<()> {
    if args.num_beams > 1 || args.num_samples > 1 {
        bail!("--num-beams and --num-samples work on a single prompt, not on a batch");
    }
    if args.jsonl {
        bail!("--jsonl streams one sequence; use --json for a batch");
    }
    let prompts = collect_prompts(&args)?;
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let tokenizer = &loaded.tokenizer;
    let template = if args.chat {
        Some(chat_template(tokenizer)?)
    } else {
        None
    };
    let mut prompt_ids = Vec::with_capacity(prompts.len());
    for (i, prompt) in prompts.iter().enumerate() {
        let ids = match &template {
            Some(template) => {
                encode_single_turn(tokenizer, template, args.system.as_deref(), prompt)?
            }
            None => tokenizer
                .encode(prompt, args.special)
                .with_context(|| format!("prompt {}", i + 1))?,
        };
        if ids.is_empty() {
            bail!(
                "prompt {} is empty: a model needs at least one token to continue",
                i + 1
            );
        }
        prompt_ids.push(ids);
    }
    let mut model = engine::load_model(&loaded, &args.device)?;
    let model_ctx = model.llama.config().context_length;
    let ctx = args.ctx_size.unwrap_or(model_ctx);
    if ctx == 0 || ctx > model_ctx {
        bail!("--ctx-size must be between 1 and the model's context length {model_ctx}, got {ctx}");
    }
    for (i, ids) in prompt_ids.iter().enumerate() {
        if ids.len() >= ctx {
            bail!(
                "prompt {} has {} tokens, which leaves no room in a context of {ctx} tokens",
                i + 1,
                ids.len()
            );
        }
    }
    let lens: Vec<usize> = prompt_ids.iter().map(Vec::len).collect();
    let capacity = super::generate::plan_cache(&args, &mut model, ctx, &lens)?;
    let mut sessions = Vec::with_capacity(prompts.len());
    for _ in &prompt_ids {
        sessions.push(Session::new(&model, capacity)?);
    }

    let encode = |text: &str| tokenizer.encode(text, false).unwrap_or_default();
    let sampler_config = args.sampling.to_config(tokenizer.eog_ids(), &encode)?;
    // Without --seed, one random seed is drawn for the batch; sequence i uses seed + i.
    let base_seed = match sampler_config.seed {
        Some(seed) => seed,
        None => sampler_config.clone().build()?.seed(),
    };
    let mut samplers = Vec::with_capacity(prompts.len());
    for (i, ids) in prompt_ids.iter().enumerate() {
        let mut config = sampler_config.clone();
        config.seed = Some(base_seed.wrapping_add(i as u64));
        let mut sampler = config.build()?;
        sampler.set_prompt_len(ids.len());
        samplers.push(sampler);
    }
    let config = super::generate::generation_config(&args, tokenizer)?;
    let decoder = Detokenizer {
        tokenizer,
        render_special: false,
    };

    let started = Instant::now();
    let summaries = generate_batch(
        &model,
        &mut sessions,
        &prompt_ids,
        &mut samplers,
        &decoder,
        &config,
        |_, _| {},
    )?;
    let wall = started.elapsed();
    let generated: usize = summaries.iter().map(|s| s.generated_tokens).sum();
    let prompt_tokens: usize = prompt_ids.iter().map(Vec::len).sum();
    let throughput = generated as f64 / wall.as_secs_f64().max(1e-9);

    let mut stdout = std::io::stdout().lock();
    if args.json {
        let sequences: Vec<Value> = summaries
            .iter()
            .zip(&prompts)
            .zip(&prompt_ids)
            .zip(&samplers)
            .map(|(((summary, prompt), ids), sampler)| {
                json!({
                    "prompt": prompt,
                    "prompt_tokens": ids,
                    "tokens": summary.tokens,
                    "text": summary.text,
                    "finish_reason": summary.finish_reason.as_str(),
                    "seed": sampler.seed(),
                })
            })
            .collect();
        let out = json!({
            "batch_size": prompts.len(),
            "sequences": sequences,
            "timings": {
                "wall_ms": wall.as_secs_f64() * 1e3,
                "prompt_tokens": prompt_tokens,
                "generated_tokens": generated,
                "generated_tokens_per_second": throughput,
            },
        });
        writeln!(stdout, "{out}")?;
    } else {
        for (i, (summary, prompt)) in summaries.iter().zip(&prompts).enumerate() {
            writeln!(stdout, "--- {} {prompt:?}", i + 1)?;
            writeln!(stdout, "{}", summary.text)?;
        }
    }
    if args.verbose {
        eprintln!(
            "kindle: batch of {}: {prompt_tokens} prompt tokens, {generated} generated in {:.0} ms ({throughput:.1} generated tok/s)",
            prompts.len(),
            wall.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
