//! `kindle explain`: generate a few tokens and show every decision: the candidates, their
//! probability before and after each processor of the chain, the entropy, what each truncation
//! kept; as a table, JSON, pictures (SVG/PNG) and one HTML page; `--compare A B` shows two
//! settings' distributions along the same text.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser};
use kindle_cli::engine::Detokenizer;
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
    PromptSettings, RunPlan, RunSettings, SamplingSettings,
};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_explain::{ExplainOptions, Explanation, explain, page, plot, table};
use kindle_sampling::SamplerConfig;
use serde_json::json;

use super::generate::read_prompt;
use super::{DeviceArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The prompt (read from standard input when absent)
    pub prompt: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Tokens to generate and explain
    #[arg(short = 'n', long, default_value_t = 8)]
    pub max_tokens: usize,
    /// Candidates listed per step (the most likely before and after the chain)
    #[arg(long, default_value_t = 8)]
    pub top: usize,
    /// Parse special-token text in the prompt
    #[arg(long)]
    pub special: bool,
    /// Format the prompt as a user message with the model's chat template
    #[arg(long)]
    pub chat: bool,
    /// Print the explanation as JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Draw the distributions before and after the chain, and the entropy and chosen
    /// probability per step, to this .svg or .png file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Steps that get a bar chart in --plot and --html (1-based, comma-separated) [default:
    /// the first four]
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub plot_steps: Vec<usize>,
    /// Write one self-contained HTML page (tables and pictures) to this file
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Compare two sampling settings along the same text: the first setting's tokens are fed,
    /// and each step shows both settings' distributions (each setting: sampling flags in one
    /// argument, e.g. "--temperature 0.5")
    #[arg(long, num_args = 2, value_names = ["FLAGS_A", "FLAGS_B"], allow_hyphen_values = true)]
    pub compare: Option<Vec<String>>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Sampling flags alone, for parsing `--compare`'s settings.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct CompareFlags {
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// Run the command.
pub fn run(args: ExplainArgs) -> Result<()> {
    if args.max_tokens == 0 {
        bail!("-n/--max-tokens must be at least 1");
    }
    if args.top == 0 {
        bail!("--top must be at least 1");
    }
    let prompt = read_prompt(args.prompt.clone())?;
    // The settings to explain: the flags, or the two of --compare.
    let settings: Vec<(String, SamplingSettings)> = match &args.compare {
        Some(pair) => pair
            .iter()
            .map(|flags| {
                let words: Vec<&str> = flags.split_whitespace().collect();
                let parsed = CompareFlags::try_parse_from(&words)
                    .with_context(|| format!("--compare {flags:?}"))?;
                let sampling = parsed
                    .sampling
                    .settings()
                    .with_context(|| format!("--compare {flags:?}"))?;
                Ok((flags.clone(), sampling))
            })
            .collect::<Result<_>>()?,
        None => vec![(String::new(), args.sampling.settings()?)],
    };
    let encoding = if args.chat {
        PromptEncoding::Chat {
            system: None,
            template: Default::default(),
        }
    } else {
        PromptEncoding::Plain {
            special: args.special,
        }
    };
    let run_settings = |sampling: SamplingSettings| -> Result<RunSettings> {
        Ok(RunSettings {
            model: ModelSettings {
                path: args.model.path()?,
                quantize: args.model.quantize,
                engine: args.device.options(),
            },
            prompts: PromptSettings {
                inputs: vec![PromptInput::Text(prompt.clone())],
                encoding: encoding.clone(),
            },
            context: ContextSettings::default(),
            sampling,
            generation: GenerationSettings {
                max_tokens: args.max_tokens,
                ..GenerationSettings::default()
            },
        })
    };
    let plan = RunPlan::build(&run_settings(settings[0].1.clone())?)?;
    let ids = plan.prompts[0].ids.clone();
    let options = ExplainOptions {
        max_tokens: args.max_tokens,
        top: args.top,
        eog_ids: plan.generation.stop.eog_token_ids.clone(),
    };
    let decoder = Detokenizer {
        tokenizer: &plan.loaded.tokenizer,
        render_special: true,
    };
    let mut sampler = plan.sampler(0, ids.len())?;
    let label = if settings[0].0.is_empty() {
        describe(&plan.sampler, plan.seed())
    } else {
        settings[0].0.clone()
    };
    let first = explain(
        &plan.engine,
        &decoder,
        &ids,
        &mut sampler,
        &label,
        &options,
        None,
    )?;
    let second = match settings.get(1) {
        Some((flags, sampling)) => {
            // The second setting's sampler, resolved as the plan resolves the first's (a
            // setting without --seed draws one).
            let other = sampling.resolve_for(&plan.loaded.tokenizer)?;
            let mut sampler = other.build()?;
            sampler.set_prompt_len(ids.len());
            Some(explain(
                &plan.engine,
                &decoder,
                &ids,
                &mut sampler,
                flags,
                &options,
                Some(&first.tokens()),
            )?)
        }
        None => None,
    };
    output(&args, &first, second.as_ref())
}

/// Print the table or JSON; write the pictures and the page.
fn output(args: &ExplainArgs, first: &Explanation, second: Option<&Explanation>) -> Result<()> {
    match (second, args.json) {
        (Some(b), true) => println!(
            "{}",
            json!({"compare": [first.settings, b.settings], "a": first.to_json(), "b": b.to_json()})
        ),
        (Some(b), false) => print!("{}", table::compare_table(first, b)),
        (None, true) => println!("{}", first.to_json()),
        (None, false) => print!("{}", table::table(first)),
    }
    if let Some(path) = &args.plot {
        plot::write(first, &args.plot_steps, path)?;
        eprintln!("kindle: wrote {}", path.display());
    }
    if let Some(path) = &args.html {
        let html = page::html(first, &args.plot_steps)?;
        std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("kindle: wrote {}", path.display());
    }
    Ok(())
}

/// The sampler's settings that differ from neutral, as a short description (for titles).
fn describe(config: &SamplerConfig, seed: u64) -> String {
    if config.temperature == 0.0 {
        return "greedy".to_string();
    }
    let neutral = SamplerConfig::neutral();
    let mut parts = vec![format!("temperature {}", config.temperature)];
    let mut add = |name: &str, value: f32, default: f32| {
        if value != default {
            parts.push(format!("{name} {value}"));
        }
    };
    add("top_k", config.top_k as f32, neutral.top_k as f32);
    add("top_p", config.top_p, neutral.top_p);
    add("min_p", config.min_p, neutral.min_p);
    add("typical_p", config.typical_p, neutral.typical_p);
    add("repeat_penalty", config.repetition_penalty, 1.0);
    add("presence_penalty", config.presence_penalty, 0.0);
    add("frequency_penalty", config.frequency_penalty, 0.0);
    parts.push(format!("seed {seed}"));
    parts.join(", ")
}
