//! `kindle bench`: prompt-processing and text-generation speed, in the form llama-bench
//! reports it (`pp512`, `tg128`, tokens per second with standard deviation).

use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use kindle_cli::engine::{self, DeviceArgs};
use kindle_model::LogitsFor;
use serde_json::{Value, json};

use super::ModelArgs;
use super::bench_draft::{self, DraftBench, DraftBenchArgs};

pub use super::bench_format::BenchOutput;
use super::bench_format::mean_stddev;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Prompt lengths to time (prefill), comma-separated; 0 skips [default: 512]
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',')]
    pub prompt: Vec<usize>,
    /// Generation lengths to time (decode, one token per step), comma-separated; 0 skips
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub generate: Vec<usize>,
    /// Depths to time each test at, comma-separated, as llama-bench's `-d`: the test runs
    /// after this many tokens are already in the KV cache (prefilled once, untimed)
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Repetitions of each test
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// Kernel thread counts to test, comma-separated [default: the physical cores]
    #[arg(long = "threads-list", value_delimiter = ',', value_name = "T,...")]
    pub thread_counts: Vec<usize>,
    /// Output format
    #[arg(short = 'o', long, value_enum, default_value = "md")]
    pub output: BenchOutput,
    /// Print the rows as JSON (the same as `--output json`)
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
    /// Also measure the machine's read bandwidth at each thread count (after the tests: a
    /// 1 GiB buffer read on the kernels' threads, best of six passes with and without their
    /// prefetch) and show each decode test's weight bytes per second beside it (CPU devices)
    #[arg(long)]
    pub bandwidth: bool,
    /// Also time every weight product the CPU kernels run in each test (CPU devices): by
    /// shape, its calls, time and weight bytes per second per step (a decode token or a
    /// prefill pass); the attention (with its cache writes); and the time outside them
    /// (norms, activations, the threads' hand-offs; a long prefill that runs as Burn's dense
    /// matmul counts there too), printed after the table (Markdown) or in each row
    /// (`"profile"`, JSON)
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub drafting: DraftBenchArgs,
}

/// Bytes of the buffer `--bandwidth` reads: far past any last-level cache.
const BANDWIDTH_BYTES: usize = 1 << 30;

/// Deterministic pseudo-random token ids (llama-bench also times random tokens).
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// Peak resident memory of this process so far (Linux `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Run the command.
pub fn run(mut args: BenchArgs) -> Result<()> {
    if args.repetitions == 0 {
        bail!("-r/--repetitions must be at least 1");
    }
    if args.thread_counts.contains(&0) {
        bail!("thread counts must be at least 1");
    }
    if let Some(n) = args
        .thread_counts
        .iter()
        .find(|&&n| n > kindle_model::MAX_THREADS)
    {
        bail!(
            "--threads-list {n} is more than {} threads",
            kindle_model::MAX_THREADS
        );
    }
    let draft = args.drafting.draft.settings();
    if draft.enabled() {
        let output = if args.json {
            BenchOutput::Json
        } else {
            args.output
        };
        return bench_draft::run(
            &DraftBench {
                args: &args.drafting,
                model: &args.model,
                device: &args.device,
                prefill: !args.prompt.is_empty(),
                depth: &args.depth,
                generate: &args.generate,
                repetitions: args.repetitions,
                thread_counts: &args.thread_counts,
                bandwidth: args.bandwidth,
                profile: args.profile,
                output,
            },
            &draft,
        );
    }
    draft.check()?;
    if args.drafting.has_prompts() {
        bail!(
            "--prompt-file, --prompt, --chat and --special give a drafting bench its text: they need --draft-model FILE, --lookup-ngram N or --self-speculative L (the plain bench times random tokens, as llama-bench)"
        );
    }
    if args.prompt.is_empty() {
        args.prompt = vec![512];
    }
    if args.prompt.iter().chain(&args.generate).all(|&n| n == 0) {
        bail!("nothing to time: every -p and -n length is 0 (give a prompt or generation length)");
    }
    if args.bandwidth && !args.device.device.is_host() {
        bail!(
            "--bandwidth measures the CPU's read bandwidth: it applies to CPU devices, not {}",
            args.device.device.name()
        );
    }
    if args.profile && !args.device.device.is_host() {
        bail!(
            "--profile times the CPU kernels' products: it applies to CPU devices, not {}",
            args.device.device.name()
        );
    }
    let path = args.model.path()?;
    let loaded = engine::open_with(&path, args.model.quantize)?;
    let mut model = engine::load_model(&loaded, &args.device)?;
    let config = model.llama.config().clone();
    let vocab = config.vocab_size;
    // A Hugging Face directory: the bytes of the tensors it converts to (its files hold them
    // in another dtype, beside a tokenizer).
    let file_bytes = if path.is_dir() {
        loaded.file.tensors().iter().map(|t| t.n_bytes()).sum()
    } else {
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
    };
    let threads = if !args.device.device.is_host() {
        // The GPU does the work; host threads only matter to the CPU kernels.
        if !args.thread_counts.is_empty() {
            eprintln!(
                "kindle: --threads-list applies to CPU devices; {} runs once",
                args.device.device.name()
            );
        }
        vec![model.llama.kernels().threads()]
    } else if args.thread_counts.is_empty() {
        // The model was loaded with `-t` (or the default).
        vec![model.llama.kernels().threads()]
    } else {
        args.thread_counts.clone()
    };
    let longest = args
        .prompt
        .iter()
        .chain(&args.generate)
        .copied()
        .max()
        .unwrap_or(0);
    let weight_bytes = model.llama.decode_weight_bytes();
    let deepest = args.depth.iter().copied().max().unwrap_or(0);
    if deepest + longest + 1 > config.context_length {
        bail!(
            "a test of {longest} tokens at depth {deepest} does not fit the model's context of {}",
            config.context_length
        );
    }
    let mut rows: Vec<Value> = Vec::new();
    // What every figure is taken on (read once: `/proc/cpuinfo` and the feature checks).
    let cpu = kindle_model::cpu_summary();
    for &t in &threads {
        // The same weights, multiplied on `t` threads from now on.
        let kernels = model.llama.kernels().with_threads(t);
        model.llama.set_kernels(kernels);
        let llama = &model.llama;
        let mut tests: Vec<(String, usize, bool)> = Vec::new();
        tests.extend(
            args.prompt
                .iter()
                .filter(|&&p| p > 0)
                .map(|&p| (format!("pp{p}"), p, true)),
        );
        tests.extend(
            args.generate
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| (format!("tg{n}"), n, false)),
        );
        for &depth in &args.depth {
            // The context before every test at this depth: prefilled once (untimed), then
            // rolled back to `depth` before each repetition, as llama-bench does.
            let capacity = depth + longest + 1;
            let mut cache = llama.new_cache_typed(capacity, args.device.kv_type);
            if depth > 0 {
                let context = tokens(depth, vocab, 0x5eed_0000 + depth as u64);
                llama.forward(&context, &mut cache, LogitsFor::Last)?;
            }
            for (name, n, prefill) in &tests {
                let (n, prefill) = (*n, *prefill);
                let input = tokens(n.max(1), vocab, n as u64);
                // One untimed warm-up run, then the timed repetitions.
                let mut samples = Vec::with_capacity(args.repetitions);
                let mut first_token_ms = Vec::new();
                let mut timed = std::time::Duration::ZERO;
                for rep in 0..=args.repetitions {
                    cache.truncate(depth);
                    if rep == 1 && args.profile {
                        // The warm-up's products are not counted.
                        kindle_model::profile::take_profile();
                        kindle_model::profile::set_profiling(true);
                    }
                    let elapsed = if prefill {
                        let start = Instant::now();
                        llama.forward(&input, &mut cache, LogitsFor::Last)?;
                        start.elapsed()
                    } else {
                        let mut token = input[0];
                        let start = Instant::now();
                        for i in 0..n {
                            llama.forward(&[token], &mut cache, LogitsFor::Last)?;
                            if i == 0 && rep > 0 {
                                first_token_ms.push(start.elapsed().as_secs_f64() * 1e3);
                            }
                            token = input[(i + 1) % input.len()];
                        }
                        start.elapsed()
                    };
                    if rep > 0 {
                        timed += elapsed;
                        samples.push(n as f64 / elapsed.as_secs_f64());
                        if prefill {
                            first_token_ms.push(elapsed.as_secs_f64() * 1e3);
                        }
                    }
                }
                let profile = args.profile.then(|| {
                    kindle_model::profile::set_profiling(false);
                    let steps = args.repetitions * if prefill { 1 } else { n };
                    profile_json(kindle_model::profile::take_profile(), timed, steps)
                });
                let (mean, stddev) = mean_stddev(&samples);
                let (ttft, _) = mean_stddev(&first_token_ms);
                // llama-bench's name for a test at depth: `tg128 @ d4096`.
                let test = if depth > 0 {
                    format!("{name} @ d{depth}")
                } else {
                    name.clone()
                };
                rows.push(json!({
                    "model": path.file_name().map(|f| f.to_string_lossy().into_owned()),
                    "size_bytes": file_bytes,
                    "params": model.llama.parameter_count(),
                    "device": args.device.device.name(),
                    // On a GPU the products run in --dtype; on the CPU in --activations.
                    "activations": if args.device.device.is_host() {
                        format!("{:?}", args.device.activations).to_lowercase()
                    } else {
                        args.device.dtype.name().to_string()
                    },
                    "dtype": args.device.dtype.name(),
                    "kv_type": args.device.kv_type.to_string(),
                    "threads": t,
                    // The kernels' SIMD level (`KINDLE_SIMD` may cap it) and the CPU.
                    "simd": kindle_model::simd_level(),
                    "cpu": cpu,
                    "test": test,
                    "n_tokens": n,
                    "n_depth": depth,
                    "repetitions": args.repetitions,
                    "tokens_per_second": mean,
                    "stddev": stddev,
                    "samples": samples,
                    "time_to_first_token_ms": ttft,
                    "peak_rss_bytes": peak_rss(),
                    // A decode step reads every weight once: its streaming rate.
                    "weight_bytes_per_token": weight_bytes,
                    "weights_gbps": (!prefill).then(|| mean * weight_bytes as f64 / 1e9),
                    "profile": profile,
                }));
            }
        }
    }
    if args.bandwidth {
        // After the tests, so that the buffer is not in their peak RSS.
        let mut measured = Vec::new();
        for &t in &threads {
            let kernels = model.llama.kernels().with_threads(t);
            let gbps = kindle_model::read_bandwidth(&kernels, BANDWIDTH_BYTES, 6) / 1e9;
            measured.push((t, gbps));
        }
        for row in &mut rows {
            let t = row["threads"].as_u64().unwrap_or(0) as usize;
            let Some(&(_, gbps)) = measured.iter().find(|&&(n, _)| n == t) else {
                continue;
            };
            row["read_gbps"] = json!(gbps);
            if let Some(w) = row["weights_gbps"].as_f64() {
                row["of_read_bandwidth"] = json!(w / gbps);
            }
        }
    }
    let output = if args.json {
        BenchOutput::Json
    } else {
        args.output
    };
    let mut stdout = std::io::stdout().lock();
    match output {
        BenchOutput::Json => writeln!(stdout, "{}", Value::Array(rows))?,
        BenchOutput::Csv => {
            writeln!(
                stdout,
                "model,size_bytes,device,activations,kv_type,threads,test,tokens_per_second,stddev,time_to_first_token_ms,peak_rss_bytes"
            )?;
            for r in &rows {
                writeln!(
                    stdout,
                    "{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{}",
                    r["model"].as_str().unwrap_or(""),
                    r["size_bytes"],
                    r["device"].as_str().unwrap_or(""),
                    r["activations"].as_str().unwrap_or(""),
                    r["kv_type"].as_str().unwrap_or(""),
                    r["threads"],
                    r["test"].as_str().unwrap_or(""),
                    r["tokens_per_second"].as_f64().unwrap_or(0.0),
                    r["stddev"].as_f64().unwrap_or(0.0),
                    r["time_to_first_token_ms"].as_f64().unwrap_or(0.0),
                    r["peak_rss_bytes"],
                )?;
            }
        }
        BenchOutput::Md => {
            let (head, rule) = if args.bandwidth {
                (
                    " weights GB/s | read GB/s | of read |",
                    " ---: | ---: | ---: |",
                )
            } else {
                ("", "")
            };
            writeln!(
                stdout,
                "| model | size | params | device | act | threads | test | t/s | ttft ms | peak RSS |{head}"
            )?;
            writeln!(
                stdout,
                "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |{rule}"
            )?;
            for r in &rows {
                let extra = if args.bandwidth {
                    let cell = |v: &Value, percent: bool| match v.as_f64() {
                        Some(x) if percent => format!(" {:.0}% |", 100.0 * x),
                        Some(x) => format!(" {x:.1} |"),
                        None => " |".to_string(),
                    };
                    cell(&r["weights_gbps"], false)
                        + &cell(&r["read_gbps"], false)
                        + &cell(&r["of_read_bandwidth"], true)
                } else {
                    String::new()
                };
                writeln!(
                    stdout,
                    "| {} | {:.1} MiB | {:.1} M | {} | {} | {} | {} | {:.2} ± {:.2} | {:.1} | {:.0} MiB |{extra}",
                    r["model"].as_str().unwrap_or(""),
                    r["size_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
                    r["params"].as_f64().unwrap_or(0.0) / 1e6,
                    r["device"].as_str().unwrap_or(""),
                    r["activations"].as_str().unwrap_or(""),
                    r["threads"],
                    r["test"].as_str().unwrap_or(""),
                    r["tokens_per_second"].as_f64().unwrap_or(0.0),
                    r["stddev"].as_f64().unwrap_or(0.0),
                    r["time_to_first_token_ms"].as_f64().unwrap_or(0.0),
                    r["peak_rss_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
                )?;
            }
            // As llama-bench ends its table with its build: what the figures were taken on.
            writeln!(
                stdout,
                "\ncpu: {}; kernels: {}",
                cpu,
                kindle_model::simd_level()
            )?;
            for r in rows.iter().filter(|r| r["profile"].is_object()) {
                write_profile(&mut stdout, r)?;
            }
        }
    }
    // On standard error, so the table stays llama-bench's.
    if let Some(line) = super::generate::gathered_line() {
        eprintln!("kindle: {line}");
    }
    Ok(())
}

/// A test's profile (`--profile`): each kind of weight product and each other timed
/// operation (the attention) per step (`steps`: the timed repetitions' decode tokens, or
/// their prefill passes), and the step's time outside them.
fn profile_json(
    stats: Vec<kindle_model::profile::ProductStat>,
    timed: std::time::Duration,
    steps: usize,
) -> Value {
    let steps = steps.max(1) as f64;
    let step_ms = timed.as_secs_f64() * 1e3 / steps;
    let (mut products, mut operations) = (Vec::new(), Vec::new());
    let (mut products_ms, mut operations_ms) = (0.0, 0.0);
    for s in &stats {
        let ms = s.time.as_secs_f64() * 1e3 / steps;
        let mut entry = json!({
            "activation_rows": s.activation_rows,
            "calls_per_step": s.calls as f64 / steps,
            "ms_per_step": ms,
            "share": if step_ms > 0.0 { ms / step_ms } else { 0.0 },
        });
        if let Some(name) = s.operation {
            operations_ms += ms;
            entry["name"] = json!(name);
            operations.push(entry);
            continue;
        }
        products_ms += ms;
        let names: Vec<String> = s
            .matrices
            .iter()
            .map(|(ty, rows, cols)| format!("{} {rows}x{cols}", ty.name()))
            .collect();
        let seconds = s.time.as_secs_f64();
        entry["matrices"] = json!(names.join(" + "));
        entry["activations"] = json!(if s.int8 { "int8" } else { "f32" });
        entry["weights_gbps"] = json!(if seconds > 0.0 {
            s.calls as f64 * s.weight_bytes as f64 / seconds / 1e9
        } else {
            0.0
        });
        products.push(entry);
    }
    json!({
        "step_ms": step_ms,
        "products_ms": products_ms,
        "operations_ms": operations_ms,
        "outside_ms": step_ms - products_ms - operations_ms,
        "products": products,
        "operations": operations,
    })
}

/// `--profile`'s table for one row (Markdown).
fn write_profile(out: &mut impl Write, row: &Value) -> std::io::Result<()> {
    let p = &row["profile"];
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let step = if row["test"].as_str().unwrap_or("").starts_with("pp") {
        "pass"
    } else {
        "token"
    };
    let operations = p["operations"].as_array().cloned().unwrap_or_default();
    let named: String = operations
        .iter()
        .map(|o| {
            format!(
                ", {:.2} in {}",
                num(&o["ms_per_step"]),
                o["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    writeln!(
        out,
        "\nprofile: {}, {} threads: {:.2} ms a {step}, {:.2} in the products{named}, {:.2} outside them",
        row["test"].as_str().unwrap_or(""),
        row["threads"],
        num(&p["step_ms"]),
        num(&p["products_ms"]),
        num(&p["outside_ms"]),
    )?;
    writeln!(
        out,
        "| product | rows | act | calls/{step} | ms/{step} | share | weights GB/s |"
    )?;
    writeln!(out, "| --- | ---: | --- | ---: | ---: | ---: | ---: |")?;
    for q in p["products"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.3} | {:.1}% | {:.1} |",
            q["matrices"].as_str().unwrap_or(""),
            q["activation_rows"],
            q["activations"].as_str().unwrap_or(""),
            num(&q["calls_per_step"]),
            num(&q["ms_per_step"]),
            100.0 * num(&q["share"]),
            num(&q["weights_gbps"]),
        )?;
    }
    for o in &operations {
        writeln!(
            out,
            "| ({}) | {} | | {:.0} | {:.3} | {:.1}% | |",
            o["name"].as_str().unwrap_or(""),
            o["activation_rows"],
            num(&o["calls_per_step"]),
            num(&o["ms_per_step"]),
            100.0 * num(&o["share"]),
        )?;
    }
    Ok(())
}
