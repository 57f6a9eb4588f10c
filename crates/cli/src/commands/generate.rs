//! `kindle generate`: continue a prompt, streaming the text; or several prompts as one batch
//! (`--prompt A --prompt B`, `--prompt-file`).
//!
//! This module only turns the flags into a [`RunSettings`], a [`Mode`] and a [`Format`]; the
//! run plan, the runner of the mode and the sink of the format do the rest.

use std::io::{IsTerminal, Read};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use kindle_cli::constrain_args::{ConstraintArgs, constraint_line, run_constrained};
use kindle_cli::engine::{ContextMode, parse_bytes};
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
    PromptSettings, RunPlan, RunSettings,
};
use kindle_cli::run::{self, Mode};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_cli::sink::{Format, sink_for};
use kindle_generate::{BeamConfig, EarlyStopping};
use kindle_model::{ActivationFormat, RowArithmetic};

use super::draft_args::DraftArgs;
use super::{DeviceArgs, ModelArgs, TemplateArgs};

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
        visible_aliases = ["n-predict", "predict"],
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
    #[arg(long = "stop-token", value_name = "ID", allow_negative_numbers = true)]
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
    #[command(flatten)]
    pub template: TemplateArgs,
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
    #[command(flatten)]
    pub draft: DraftArgs,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

/// Run the command.
pub fn run(args: GenerateArgs) -> Result<()> {
    let mode = args.mode()?;
    let constraint = args.constraint.spec()?;
    let inputs = match mode {
        Mode::Batch => args.batch_prompts()?,
        _ => vec![read_prompt(args.prompt.clone())?],
    };
    let draft = args.draft.settings();
    draft.check()?;
    if draft.enabled() {
        run::check_drafting(&mode)?;
    }
    let mut settings = args.settings(inputs)?;
    if mode == Mode::Batch {
        // A batch's rows mix prompts of different lengths, then decode steps: one arithmetic
        // for all of them keeps each output what its prompt gives alone in a batch of one.
        settings.model.engine.arithmetic = RowArithmetic::Decode;
    }
    let plan = RunPlan::build(&settings)?;
    let mut spec = draft.speculator(
        &plan,
        &settings.model.engine,
        plan.prompts[0].ids.len(),
        plan.capacity,
    )?;
    if args.verbose {
        spec = spec.map(|s| s.with_timing_step());
    }
    if args.verbose && mode == Mode::Single {
        eprintln!(
            "kindle: {} prompt tokens, {}",
            plan.prompts[0].ids.len(),
            plan.cache_summary()
        );
    }
    if args.verbose && (draft.draft_model.is_some() || draft.self_speculative.is_some()) {
        let (activations, kv_type) = draft.draft_formats(&settings.model.engine);
        let activations = match activations {
            ActivationFormat::Int8 => "int8",
            ActivationFormat::F32 => "f32",
        };
        eprintln!("kindle: draft model: {activations} activations, {kv_type} KV cache");
    }
    if args.verbose
        && let Some(scaling) = &plan.engine.llama.config().rope_scaling
    {
        eprintln!("kindle: rotary scaling: {}", scaling.describe());
    }
    let mut sink = sink_for(
        args.format(),
        std::io::stdout().lock(),
        args.sampling.logprobs.is_some(),
    );
    let report = match &constraint {
        Some((constraint, flag)) => {
            run_constrained(&plan, &mode, constraint, flag, sink.as_mut(), spec.as_mut())?
        }
        None => run::run_drafting(&plan, &mode, sink.as_mut(), spec.as_mut())?,
    };
    if args.verbose {
        if let Some(spec) = &spec {
            eprintln!("kindle: {}", spec.stats().line());
        }
        for line in report.timing_lines() {
            eprintln!("kindle: {line}");
        }
        for sequence in &report.sequences {
            if let Some(stats) = &sequence.summary.timings.constraint {
                eprintln!("kindle: {}", constraint_line(stats));
            }
        }
        if let Some(line) = gathered_line() {
            eprintln!("kindle: {line}");
        }
    }
    Ok(())
}

impl GenerateArgs {
    /// How to generate: the mode the flags ask for, after checking they go together.
    fn mode(&self) -> Result<Mode> {
        if self.num_beams == 0 || self.num_samples == 0 {
            bail!("--num-beams and --num-samples must be at least 1");
        }
        if self.num_beams > 1 && self.num_samples > 1 {
            bail!("--num-beams and --num-samples cannot be combined");
        }
        if self.num_return_sequences > self.num_beams {
            bail!(
                "--num-return-sequences {} is more than --num-beams {}",
                self.num_return_sequences,
                self.num_beams
            );
        }
        if !self.prompts.is_empty() || self.prompt_file.is_some() {
            if self.num_beams > 1 || self.num_samples > 1 {
                bail!("--num-beams and --num-samples work on a single prompt, not on a batch");
            }
            if self.jsonl {
                bail!("--jsonl streams one sequence; use --json for a batch");
            }
            return Ok(Mode::Batch);
        }
        Ok(if self.num_beams > 1 {
            Mode::Beams(BeamConfig {
                num_beams: self.num_beams,
                num_return_sequences: self.num_return_sequences,
                length_penalty: self.length_penalty,
                early_stopping: self.early_stopping,
            })
        } else if self.num_samples > 1 {
            Mode::Samples(self.num_samples)
        } else {
            Mode::Single
        })
    }

    fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else if self.jsonl {
            Format::Jsonl
        } else {
            Format::Text
        }
    }

    /// The prompts of a batch: the `--prompt` flags, then the lines of `--prompt-file`.
    fn batch_prompts(&self) -> Result<Vec<String>> {
        let mut prompts = self.prompts.clone();
        if let Some(path) = &self.prompt_file {
            prompts.extend(read_prompt_file(path)?);
        }
        if prompts.is_empty() {
            bail!("the batch has no prompt (the prompt file has only empty lines)");
        }
        Ok(prompts)
    }

    /// The plain settings of the run (fetching the default model when it is missing).
    fn settings(&self, prompts: Vec<String>) -> Result<RunSettings> {
        let max_time = match self.max_time {
            Some(seconds) if !(seconds.is_finite() && seconds > 0.0) => {
                bail!("--max-time must be a positive number of seconds, got {seconds}");
            }
            Some(seconds) => Some(Duration::from_secs_f64(seconds)),
            None => None,
        };
        let sampling = self.sampling.settings()?;
        let encoding = if self.chat {
            PromptEncoding::Chat {
                system: self.system.clone(),
                template: self.template.settings(),
            }
        } else {
            if self.template.chat_template_file.is_some()
                || self.template.chat_template_kwargs.is_some()
            {
                bail!("--chat-template-file and --chat-template-kwargs need --chat");
            }
            PromptEncoding::Plain {
                special: self.special,
            }
        };
        Ok(RunSettings {
            model: ModelSettings {
                path: self.model.path()?,
                quantize: self.model.quantize,
                engine: self.device.options(),
            },
            prompts: PromptSettings {
                inputs: prompts.into_iter().map(PromptInput::Text).collect(),
                encoding,
            },
            context: ContextSettings {
                size: self.ctx_size,
                default_limit: None,
                mode: self.context_mode,
                keep: self.keep,
                max_kv_memory: self.max_kv_memory,
            },
            sampling,
            generation: GenerationSettings {
                max_tokens: self.max_tokens,
                stop_strings: self.stop.clone(),
                stop_tokens: self.stop_token.clone(),
                max_time,
                top_logprobs: self.sampling.logprobs.unwrap_or(0),
            },
        })
    }
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
        anyhow!(
            "the prompt on standard input is not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The non-empty lines of a prompt file.
fn read_prompt_file(path: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{} is not valid UTF-8 (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// For `-v`: that the machine was busy enough for the kernels' threads to run gathered onto
/// one core (`kindle_model::gatherings`), if it was.
pub(crate) fn gathered_line() -> Option<String> {
    gathered_text(kindle_model::gatherings())
}

fn gathered_text(times: usize) -> Option<String> {
    (times > 0).then(|| {
        format!(
            "the machine was busy: the kernels' threads ran gathered onto one core ({times} {}; \
             KINDLE_GATHER=0 leaves them where the scheduler puts them)",
            if times == 1 { "time" } else { "times" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::gathered_text;

    #[test]
    fn the_gathering_line_appears_only_after_a_gathering() {
        assert_eq!(gathered_text(0), None);
        let once = gathered_text(1).unwrap();
        assert!(once.contains("one core (1 time; KINDLE_GATHER=0"), "{once}");
        assert!(gathered_text(3).unwrap().contains("(3 times;"));
    }
}
