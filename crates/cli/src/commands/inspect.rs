//! `kindle inspect`: metadata, tensors and KV-cache size of a model file, and every reason the
//! model would not load.
//!
//! Any well-formed GGUF file is shown (a malformed one is an error); then the checks that
//! loading makes without reading the weights (hyperparameters, tensor shapes, the tokenizer)
//! run, each problem is printed as `this model would not load: <reason>`, and the command
//! fails when there is one.

use anyhow::{Result, bail};
use clap::Args;
use kindle_cli::engine;
use kindle_gguf::{GgufFile, MetadataValue};
use kindle_model::{KvType, LlamaConfig};
use kindle_tokenizer::Tokenizer;
use serde_json::{Value, json};

use super::ModelArgs;

#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Also print the KV-cache size for a context of N tokens
    #[arg(long, value_name = "N")]
    pub context: Option<usize>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

fn describe(value: &MetadataValue) -> serde_json::Value {
    match value {
        MetadataValue::Array(items) if items.len() > 16 => {
            json!(format!(
                "[{} items of {}]",
                items.len(),
                items.get(0).map(|v| v.type_name()).unwrap_or("?")
            ))
        }
        MetadataValue::Array(items) => {
            serde_json::Value::Array(items.values().map(|v| describe(&v)).collect())
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

/// Run the command.
pub fn run(args: InspectArgs) -> Result<()> {
    let path = args.model.path()?;
    let file = engine::open_file_with(&path, args.model.quantize)?;
    let config = LlamaConfig::from_gguf(&file);
    let problems = load_problems(&file);
    if let (Ok(c), Some(ctx)) = (&config, args.context)
        && c.kv_cache_config(1)
            .bytes_per_token()
            .checked_mul(ctx)
            .is_none()
    {
        bail!("--context {ctx}: its KV cache would be more bytes than this machine can address");
    }
    let kv = config.as_ref().ok().map(|c| {
        let per_token = c.kv_cache_config(1).bytes_per_token();
        let ctx = args.context.unwrap_or(c.context_length);
        // Local layers (a sliding window) keep a ring of their window, not the context.
        let windows = kindle_model::loader::arch_of(&file)
            .map(|arch| arch.layer_windows(c))
            .unwrap_or_default();
        let bytes = c
            .kv_cache_config(ctx)
            .bytes_with_windows(KvType::F32, &windows);
        let local = windows.iter().flatten().count();
        let slots = windows
            .iter()
            .flatten()
            .next()
            .map(|&w| kindle_model::ring_slots(Some(w), ctx));
        json!({ "bytes_per_token": per_token, "context": ctx, "bytes": bytes, "dtype": "f32",
                "local_layers": local, "local_layer_positions": slots })
    });
    if args.json {
        let mut out = file_json(&file);
        out["path"] = json!(path.display().to_string());
        out["kv_cache"] = json!(kv);
        out["supported"] = json!(config.as_ref().err().map(|e| e.to_string()));
        out["rope_scaling"] = json!(
            config
                .as_ref()
                .ok()
                .and_then(|c| c.rope_scaling.as_ref())
                .map(|s| s.describe())
        );
        out["problems"] = json!(problems);
        println!("{out}");
    } else {
        if path.is_dir() {
            println!(
                "{} (Hugging Face directory, shown as the GGUF file it converts to)",
                path.display()
            );
        } else {
            println!("{} (GGUF v{})", path.display(), file.version());
        }
        print_file(&file);
        if let (Ok(c), Some(kv)) = (&config, kv) {
            print_model(c, &kv);
        }
        if !problems.is_empty() {
            println!();
        }
        for problem in &problems {
            println!("this model would not load: {problem}");
        }
    }
    match problems.as_slice() {
        [] => Ok(()),
        [only] => bail!("{}: this model would not load: {only}", path.display()),
        [first, rest @ ..] => bail!(
            "{}: this model would not load: {first} (and {} more, above)",
            path.display(),
            rest.len()
        ),
    }
}

/// Every reason the model in `file` would not load that can be found without reading its
/// weights: hyperparameters and tensor shapes, the tokenizer, the vocabulary's size.
fn load_problems(file: &GgufFile) -> Vec<String> {
    let mut problems: Vec<String> = LlamaConfig::check_gguf(file)
        .iter()
        .map(ToString::to_string)
        .collect();
    match Tokenizer::from_gguf(file) {
        Err(e) => problems.push(format!("building the tokenizer: {e}")),
        Ok(tokenizer) => {
            if let Ok(config) = LlamaConfig::from_gguf(file)
                && let Err(e) = engine::check_vocab(&config, &tokenizer)
            {
                problems.push(e.to_string());
            }
        }
    }
    problems
}

/// Metadata (long values shortened), tensors and their total size.
fn file_json(file: &GgufFile) -> Value {
    let metadata: serde_json::Map<String, Value> = file
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
    json!({
        "version": file.version(),
        "metadata": metadata,
        "tensors": tensors,
        "tensor_bytes": total_bytes,
    })
}

/// The metadata and tensor tables.
fn print_file(file: &GgufFile) {
    let described = file_json(file);
    let metadata = described["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    println!("\nmetadata ({} keys):", metadata.len());
    for (key, value) in &metadata {
        println!("  {key:<45} {value}");
    }
    let total_bytes = described["tensor_bytes"].as_u64().unwrap_or(0);
    println!(
        "\ntensors ({}, {:.1} MiB):",
        file.tensors().len(),
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
}

/// The hyperparameters and the KV cache's size.
fn print_model(c: &LlamaConfig, kv: &Value) {
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
    if let Some(s) = &c.rope_scaling {
        println!("rotary scaling: {}", s.describe());
    }
    let local = match (
        kv["local_layers"].as_u64(),
        kv["local_layer_positions"].as_u64(),
    ) {
        (Some(n), Some(slots)) if n > 0 => {
            format!(" ({n} local layers keep {slots} positions: their window and the slack)")
        }
        _ => String::new(),
    };
    println!(
        "KV cache (f32): {} bytes per token; {} tokens = {:.1} MiB{local}",
        kv["bytes_per_token"],
        kv["context"],
        kv["bytes"].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64
    );
}
