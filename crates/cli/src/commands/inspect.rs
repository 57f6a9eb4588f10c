//! `kindle inspect`: metadata, tensors and KV-cache size of a model file.

use anyhow::Result;
use clap::Args;
use kindle_cli::engine;
use kindle_gguf::MetadataValue;
use kindle_model::LlamaConfig;
use serde_json::json;

use crate::ModelArgs;

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

/// Run the command.
pub fn run(args: InspectArgs) -> Result<()> {
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
