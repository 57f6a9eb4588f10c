//! `kindle bench` with a drafter (`--draft-model`, `--lookup-ngram`, `--self-speculative`):
//! greedy decoding of real prompts, plain and speculative in turn in one process, so that the
//! speedup is measured where both share the machine's state (on a noisy machine, runs minutes
//! apart can differ by more than the speedup).
//!
//! Each round generates the same tokens twice, plain then drafting (every other round in the
//! other order); the first round is a warm-up. A row gives both decode rates, their ratio
//! (and each round's), the acceptance, tokens per target pass, where a pass's time goes, and
//! whether drafting gave the plain run's tokens (greedy output must not change).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::draft::DraftSettings;
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
    PromptSettings, RunPlan, RunSettings, SamplingSettings,
};
use kindle_cli::run::{self, Mode, Report, Sink};
use kindle_generate::{Event, SpecStats, Speculator};
use serde_json::{Value, json};

use super::bench_format::{BenchOutput, mean_stddev};
use super::draft_args::DraftArgs;
use super::{DeviceArgs, ModelArgs};
use kindle_cli::engine::ContextMode;

/// The flags that make `kindle bench` a drafting bench (with a drafter's).
#[derive(Args, Debug)]
pub struct DraftBenchArgs {
    /// With a drafter (--draft-model, --lookup-ngram, --self-speculative): a file whose whole
    /// text is a prompt to decode from (repeatable, a row each). The bench then generates
    /// greedily from each prompt, plain and drafting in turn in every round, and gives both
    /// decode rates, the speedup, the acceptance and whether the output was the same
    #[arg(long = "prompt-file", value_name = "PATH")]
    pub prompt_files: Vec<PathBuf>,
    /// With a drafter: a prompt to decode from (repeatable, a row each)
    #[arg(long = "prompt", value_name = "TEXT")]
    pub prompt_texts: Vec<String>,
    /// With a drafter: each prompt is a user message in the model's chat template
    #[arg(long)]
    pub chat: bool,
    /// With a drafter: parse special-token text such as <|im_start|> in the prompts
    /// (otherwise plain text)
    #[arg(long, conflicts_with = "chat")]
    pub special: bool,
    #[command(flatten)]
    pub draft: DraftArgs,
}

impl DraftBenchArgs {
    /// Whether the flags give a drafting bench's text (which the plain bench refuses).
    pub fn has_prompts(&self) -> bool {
        !self.prompt_files.is_empty() || !self.prompt_texts.is_empty() || self.chat || self.special
    }
}

/// A drafting bench: its own flags and those of `kindle bench` it takes (or refuses).
pub struct DraftBench<'a> {
    /// The prompts and the drafter.
    pub args: &'a DraftBenchArgs,
    /// The target model.
    pub model: &'a ModelArgs,
    /// Where and how it runs.
    pub device: &'a DeviceArgs,
    /// Whether `-p` was given (refused: a drafting bench times decoding).
    pub prefill: bool,
    /// `-d` (refused but for 0).
    pub depth: &'a [usize],
    /// `-n`: the generation lengths.
    pub generate: &'a [usize],
    /// `-r`: timed rounds after the warm-up.
    pub repetitions: usize,
    /// `--threads-list`.
    pub thread_counts: &'a [usize],
    /// `--bandwidth` (refused).
    pub bandwidth: bool,
    /// `--profile` (refused).
    pub profile: bool,
    /// The output format.
    pub output: BenchOutput,
}

/// A sink that keeps nothing: the bench reads the report.
struct Quiet;

impl Sink for Quiet {
    fn event(&mut self, _: usize, _: &Event) -> Result<()> {
        Ok(())
    }

    fn finish(&mut self, _: &Report<'_>) -> Result<()> {
        Ok(())
    }
}

/// One prompt as the bench names it in its rows.
struct BenchPrompt {
    name: String,
    text: String,
}

/// The prompts: `--prompt-file` (each file's whole text one prompt), then `--prompt`.
fn prompts(args: &DraftBenchArgs) -> Result<Vec<BenchPrompt>> {
    let mut out = Vec::new();
    for path in &args.prompt_files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} is not valid UTF-8 (byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        if text.trim().is_empty() {
            bail!(
                "{} is empty: a prompt to decode from is needed",
                path.display()
            );
        }
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        out.push(BenchPrompt { name, text });
    }
    for (i, text) in args.prompt_texts.iter().enumerate() {
        if text.trim().is_empty() {
            bail!("--prompt {} is empty", i + 1);
        }
        out.push(BenchPrompt {
            name: format!("prompt {}", i + 1),
            text: text.clone(),
        });
    }
    if out.is_empty() {
        bail!(
            "a drafting bench decodes real text: give --prompt-file PATH or --prompt TEXT (random tokens give a draft nothing to guess)"
        );
    }
    Ok(out)
}

/// Refuse the plain bench's flags that mean nothing here.
fn check(args: &DraftBench<'_>) -> Result<()> {
    if args.prefill {
        bail!(
            "-p/--n-prompt times prefill; a drafting bench times decoding from --prompt-file or --prompt (drop -p)"
        );
    }
    if args.depth.iter().any(|&d| d > 0) {
        bail!("-d/--n-depth is for the plain bench; a drafting bench decodes after its prompt");
    }
    if args.bandwidth || args.profile {
        bail!("--bandwidth and --profile are for the plain bench (drop the drafting flags)");
    }
    if args.generate.iter().all(|&n| n == 0) {
        bail!("nothing to time: every -n length is 0 (give a generation length)");
    }
    Ok(())
}

/// How the drafter is named in the rows.
fn drafter_name(draft: &DraftSettings) -> String {
    let max = draft.draft_max();
    let min = draft
        .draft_min
        .map_or_else(String::new, |n| format!(", min {n}"));
    let what = if let Some(n) = draft.lookup_ngram {
        match draft.lookup_min {
            Some(m) => format!("lookup {n}-gram, from {m}"),
            None => format!("lookup {n}-gram"),
        }
    } else if let Some(path) = &draft.draft_model {
        path.file_name().map_or_else(
            || path.display().to_string(),
            |f| f.to_string_lossy().into(),
        )
    } else if let Some(layers) = draft.self_speculative {
        format!("self {layers} layers")
    } else {
        "none".into()
    };
    let vocab = draft
        .draft_vocab
        .map_or_else(String::new, |n| format!(", vocab {n}"));
    let p_min = draft
        .draft_p_min
        .map_or_else(String::new, |p| format!(", p-min {p}"));
    let adaptive = if draft.draft_adaptive {
        ", adaptive"
    } else {
        ""
    };
    format!("{what} (max {max}{min}{vocab}{p_min}{adaptive})")
}

/// Add one generation's counters to `total`.
fn add(total: &mut SpecStats, s: &SpecStats) {
    total.passes += s.passes;
    total.drafted += s.drafted;
    total.accepted += s.accepted;
    total.emitted += s.emitted;
    total.plain_steps += s.plain_steps;
    total.short_drafts += s.short_drafts;
    total.draft_time += s.draft_time;
    total.prefill_time += s.prefill_time;
    total.verify_time += s.verify_time;
    total.plain_time += s.plain_time;
}

/// One generation of `plan`'s one prompt, drafting with `spec` when given: its tokens and its
/// decode rate.
fn generate_once(plan: &RunPlan, spec: Option<&mut Speculator>) -> Result<(Vec<u32>, f64)> {
    let report = run::run_drafting(plan, &Mode::Single, &mut Quiet, spec)?;
    let summary = &report.sequences[0].summary;
    Ok((
        summary.tokens.clone(),
        summary.timings.decode_tokens_per_second(),
    ))
}

/// Run the drafting bench (`draft` is enabled).
pub fn run(args: &DraftBench<'_>, draft: &DraftSettings) -> Result<()> {
    draft.check()?;
    check(args)?;
    let prompts = prompts(args.args)?;
    let lengths: Vec<usize> = args.generate.iter().copied().filter(|&n| n > 0).collect();
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let encoding = if args.args.chat {
        PromptEncoding::Chat {
            system: None,
            template: Default::default(),
        }
    } else {
        PromptEncoding::Plain {
            special: args.args.special,
        }
    };
    let settings = RunSettings {
        model: ModelSettings {
            path: args.model.path()?,
            quantize: args.model.quantize,
            engine: args.device.options(),
        },
        prompts: PromptSettings {
            inputs: prompts
                .iter()
                .map(|p| PromptInput::Text(p.text.clone()))
                .collect(),
            encoding,
        },
        context: ContextSettings {
            size: None,
            default_limit: None,
            mode: ContextMode::Fixed,
            keep: 0,
            max_kv_memory: None,
        },
        sampling: SamplingSettings::default(),
        generation: GenerationSettings {
            max_tokens: longest,
            ..GenerationSettings::default()
        },
    };
    let mut plan = RunPlan::build(&settings)?;
    let encoded = std::mem::take(&mut plan.prompts);
    let threads = if args.thread_counts.is_empty() {
        vec![plan.engine.llama.kernels().threads()]
    } else {
        args.thread_counts.to_vec()
    };
    let model_name = settings
        .model
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned());
    let drafter = drafter_name(draft);
    let cpu = kindle_model::cpu_summary();
    let generation = plan.generation.clone();
    let mut rows = Vec::new();
    for &t in &threads {
        let kernels = plan.engine.llama.kernels().with_threads(t);
        plan.engine.llama.set_kernels(kernels);
        let options = kindle_model::EngineOptions {
            threads: Some(t),
            ..settings.model.engine
        };
        // The draft model loaded once for this thread count, shared by every generation.
        let draft_engine = draft.draft_engine(&plan, &options)?.map(Arc::new);
        for (prompt, ids) in prompts.iter().zip(&encoded) {
            plan.prompts = vec![ids.clone()];
            for &n in &lengths {
                plan.generation = generation.clone().with_max_new_tokens(n);
                let row = bench_one(args, draft, &plan, draft_engine.clone())
                    .with_context(|| format!("{} at {t} threads", prompt.name))?;
                rows.push(json!({
                    "model": model_name,
                    "draft": drafter,
                    "device": args.device.device.name(),
                    "activations": format!("{:?}", args.device.activations).to_lowercase(),
                    "threads": t,
                    "simd": kindle_model::simd_level(),
                    "cpu": cpu,
                    "prompt": prompt.name,
                    "prompt_tokens": ids.ids.len(),
                    "test": format!("tg{n}"),
                    "n_tokens": n,
                    "repetitions": args.repetitions,
                    "row": row,
                }));
            }
        }
    }
    // Flatten each row's measurements into it.
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|mut r| {
            let measured = r["row"].take();
            let object = r.as_object_mut().expect("a row is an object");
            object.remove("row");
            if let Value::Object(m) = measured {
                object.extend(m);
            }
            r
        })
        .collect();
    write_rows(&mut std::io::stdout().lock(), args.output, &rows, &cpu)?;
    if rows.iter().any(|r| r["same_output"] == json!(false)) {
        eprintln!(
            "kindle: drafting changed the greedy output in a row marked `no`: that is a bug (please report it with the row)"
        );
    }
    Ok(())
}

/// The rounds of one prompt and length: returns the row's measurements.
fn bench_one(
    args: &DraftBench<'_>,
    draft: &DraftSettings,
    plan: &RunPlan,
    engine: Option<Arc<kindle_model::Engine>>,
) -> Result<Value> {
    let prompt_len = plan.prompts[0].ids.len();
    let mut plain = Vec::with_capacity(args.repetitions);
    let mut drafting = Vec::with_capacity(args.repetitions);
    let mut stats = SpecStats::default();
    let mut same = true;
    let mut generated = 0;
    for round in 0..=args.repetitions {
        // A speculator a generation, as `kindle generate` makes one (the draft's cache empty).
        let mut spec = draft
            .speculator_with(plan, engine.clone(), prompt_len, plan.capacity)?
            .context("the drafting flags gave no drafter")?;
        let ((tokens, rate), (drafted, drafted_rate)) = if round % 2 == 1 {
            let p = generate_once(plan, None)?;
            (p, generate_once(plan, Some(&mut spec))?)
        } else {
            let d = generate_once(plan, Some(&mut spec))?;
            (generate_once(plan, None)?, d)
        };
        same &= tokens == drafted;
        generated = tokens.len();
        if round > 0 {
            plain.push(rate);
            drafting.push(drafted_rate);
            add(&mut stats, spec.stats());
        }
    }
    let (plain_mean, plain_sd) = mean_stddev(&plain);
    let (draft_mean, draft_sd) = mean_stddev(&drafting);
    let rounds: Vec<f64> = plain
        .iter()
        .zip(&drafting)
        .map(|(p, d)| d / p.max(1e-9))
        .collect();
    let per_pass = |t: std::time::Duration| t.as_secs_f64() * 1e3 / stats.passes.max(1) as f64;
    Ok(json!({
        "generated_tokens": generated,
        "plain_tokens_per_second": plain_mean,
        "plain_stddev": plain_sd,
        "plain_samples": plain,
        "drafting_tokens_per_second": draft_mean,
        "drafting_stddev": draft_sd,
        "drafting_samples": drafting,
        "speedup": draft_mean / plain_mean.max(1e-9),
        "round_speedups": rounds,
        "acceptance_rate": stats.acceptance_rate(),
        "tokens_per_pass": stats.tokens_per_pass(),
        "passes": stats.passes,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "draft_ms_per_pass": per_pass(stats.draft_time),
        "verify_ms_per_pass": per_pass(stats.verify_time),
        "same_output": same,
    }))
}

/// The rows in `output`'s form (after a Markdown table, the CPU).
fn write_rows(
    out: &mut impl std::io::Write,
    output: BenchOutput,
    rows: &[Value],
    cpu: &str,
) -> Result<()> {
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    let s = |r: &Value, k: &str| r[k].as_str().unwrap_or("").to_string();
    let yes = |r: &Value| {
        if r["same_output"] == json!(true) {
            "yes"
        } else {
            "no"
        }
    };
    match output {
        BenchOutput::Json => writeln!(out, "{}", Value::Array(rows.to_vec()))?,
        BenchOutput::Csv => {
            writeln!(
                out,
                "model,draft,activations,threads,prompt,test,generated_tokens,plain_tokens_per_second,drafting_tokens_per_second,speedup,acceptance_rate,tokens_per_pass,draft_ms_per_pass,verify_ms_per_pass,same_output"
            )?;
            for r in rows {
                writeln!(
                    out,
                    "{},\"{}\",{},{},{},{},{},{:.3},{:.3},{:.4},{:.4},{:.3},{:.3},{:.3},{}",
                    s(r, "model"),
                    s(r, "draft"),
                    s(r, "activations"),
                    r["threads"],
                    s(r, "prompt"),
                    s(r, "test"),
                    r["generated_tokens"],
                    f(r, "plain_tokens_per_second"),
                    f(r, "drafting_tokens_per_second"),
                    f(r, "speedup"),
                    f(r, "acceptance_rate"),
                    f(r, "tokens_per_pass"),
                    f(r, "draft_ms_per_pass"),
                    f(r, "verify_ms_per_pass"),
                    yes(r),
                )?;
            }
        }
        BenchOutput::Md => {
            writeln!(
                out,
                "| model | draft | act | threads | prompt | test | tokens | plain t/s | drafting t/s | speedup | each round | accepted | tokens a pass | draft / verify ms a pass | same output |"
            )?;
            writeln!(
                out,
                "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"
            )?;
            for r in rows {
                let rounds: Vec<String> = r["round_speedups"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| format!("{:.2}", x.as_f64().unwrap_or(0.0)))
                            .collect()
                    })
                    .unwrap_or_default();
                writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {:.2} ± {:.2} | {:.2} ± {:.2} | {:.2}x | {} | {:.1}% | {:.2} | {:.1} / {:.1} | {} |",
                    s(r, "model"),
                    s(r, "draft"),
                    s(r, "activations"),
                    r["threads"],
                    s(r, "prompt"),
                    s(r, "test"),
                    r["generated_tokens"],
                    f(r, "plain_tokens_per_second"),
                    f(r, "plain_stddev"),
                    f(r, "drafting_tokens_per_second"),
                    f(r, "drafting_stddev"),
                    f(r, "speedup"),
                    rounds.join(", "),
                    100.0 * f(r, "acceptance_rate"),
                    f(r, "tokens_per_pass"),
                    f(r, "draft_ms_per_pass"),
                    f(r, "verify_ms_per_pass"),
                    yes(r),
                )?;
            }
            writeln!(
                out,
                "\ncpu: {cpu}; kernels: {}; greedy, plain and drafting alternating in each round after a warm-up",
                kindle_model::simd_level()
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(same: bool) -> Value {
        json!({
            "model": "t.gguf", "draft": "d.gguf (max 8, vocab 8192)", "activations": "f32",
            "threads": 2, "prompt": "p", "test": "tg8", "generated_tokens": 8,
            "plain_tokens_per_second": 10.0, "plain_stddev": 1.0,
            "drafting_tokens_per_second": 15.0, "drafting_stddev": 1.5, "speedup": 1.5,
            "round_speedups": [1.4, 1.6], "acceptance_rate": 0.75, "tokens_per_pass": 4.0,
            "draft_ms_per_pass": 20.0, "verify_ms_per_pass": 30.0, "same_output": same,
        })
    }

    fn written(output: BenchOutput, rows: &[Value]) -> String {
        let mut out = Vec::new();
        write_rows(&mut out, output, rows, "a CPU").unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A row where drafting changed the output says so in every form (and one where it did
    /// not says that), so the column catches what it is there to catch.
    #[test]
    fn rows_say_whether_drafting_kept_the_output() {
        let rows = [row(true), row(false)];
        let md = written(BenchOutput::Md, &rows);
        let lines: Vec<&str> = md.lines().collect();
        assert!(
            lines[2].ends_with("| 1.50x | 1.40, 1.60 | 75.0% | 4.00 | 20.0 / 30.0 | yes |"),
            "{md}"
        );
        assert!(lines[3].ends_with("| no |"), "{md}");
        assert!(md.contains("\ncpu: a CPU;"), "{md}");
        let csv = written(BenchOutput::Csv, &rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[1].ends_with(",yes"), "{csv}");
        assert!(lines[2].ends_with(",no"), "{csv}");
        // The drafter's name holds a comma: quoted.
        assert!(
            lines[1].contains(",\"d.gguf (max 8, vocab 8192)\","),
            "{csv}"
        );
        let json: Value = serde_json::from_str(&written(BenchOutput::Json, &rows)).unwrap();
        assert_eq!(json[1]["same_output"], false);
    }

    #[test]
    fn counters_add_up_over_rounds() {
        let one = SpecStats {
            passes: 2,
            drafted: 8,
            accepted: 6,
            emitted: 8,
            plain_steps: 1,
            short_drafts: 1,
            draft_time: std::time::Duration::from_millis(3),
            prefill_time: std::time::Duration::from_millis(1),
            verify_time: std::time::Duration::from_millis(5),
            plain_time: std::time::Duration::from_millis(2),
        };
        let mut total = SpecStats::default();
        add(&mut total, &one);
        add(&mut total, &one);
        assert_eq!(total.passes, 4);
        assert_eq!(total.accepted, 12);
        assert_eq!(total.emitted, 16);
        assert_eq!(total.plain_steps, 2);
        assert_eq!(total.short_drafts, 2);
        assert_eq!(total.verify_time, std::time::Duration::from_millis(10));
        assert_eq!(total.acceptance_rate(), 0.75);
    }

    #[test]
    fn drafters_are_named_with_their_settings() {
        let lookup = DraftSettings {
            lookup_ngram: Some(3),
            ..DraftSettings::default()
        };
        assert_eq!(drafter_name(&lookup), "lookup 3-gram (max 4)");
        let shorter = DraftSettings {
            lookup_min: Some(1),
            ..lookup.clone()
        };
        assert_eq!(drafter_name(&shorter), "lookup 3-gram, from 1 (max 4)");
        let model = DraftSettings {
            draft_model: Some("dir/draft.gguf".into()),
            draft_vocab: Some(8192),
            draft_adaptive: true,
            ..DraftSettings::default()
        };
        assert_eq!(
            drafter_name(&model),
            "draft.gguf (max 8, vocab 8192, adaptive)"
        );
        let layers = DraftSettings {
            self_speculative: Some(8),
            draft_max: Some(5),
            draft_min: Some(2),
            draft_p_min: Some(0.5),
            ..DraftSettings::default()
        };
        assert_eq!(
            drafter_name(&layers),
            "self 8 layers (max 5, min 2, p-min 0.5)"
        );
    }
}
