//! `kindle generate`'s KV cache flags on the real model: `--context-mode sliding` runs past a
//! tiny context, `--max-kv-memory` refuses a cache over budget, `--keep` is checked.

mod common;

use std::process::{Command, Output};

use common::model_path;
use serde_json::Value;

const PROMPT: &str = "The capital of France is";
/// SmolLM2-135M's f32 KV cache per token: 2 (K, V) x 30 layers x 3 heads x 64 x 4 bytes.
const BYTES_PER_TOKEN: usize = 2 * 30 * 3 * 64 * 4;

fn kindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .arg("generate")
        .arg("-m")
        .arg(model_path())
        .args(args)
        .output()
        .expect("running kindle")
}

fn ok_json(args: &[&str]) -> (Value, String) {
    let out = kindle(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kindle generate {args:?} failed: {stderr}"
    );
    let json = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (json, stderr)
}

fn fails(args: &[&str]) -> String {
    let out = kindle(args);
    assert!(
        !out.status.success(),
        "kindle generate {args:?} should have failed"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn sliding_context_generates_past_a_tiny_context() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (out, stderr) = ok_json(&[
        PROMPT,
        "--json",
        "--verbose",
        "--context-mode",
        "sliding",
        "-c",
        "64",
        "--keep",
        "8",
        "-n",
        "200",
        "--min-tokens",
        "200",
        "--seed",
        "1",
    ]);
    assert_eq!(out["tokens"].as_array().unwrap().len(), 200);
    assert_eq!(out["finish_reason"], "length");
    // The prompt has 5 tokens, so the kept prefix is clamped to them; the cache is the context.
    assert!(
        stderr.contains("KV cache 64 tokens") && stderr.contains("sliding (keep 5)"),
        "{stderr}"
    );
}

/// Gemma-3 slides too: each layer's keys are turned back with its own base (local 10,000,
/// global 1,000,000) and half-split pairs, every layer holding the whole context.
#[test]
fn gemma3_slides_past_a_tiny_context() {
    let Some(gemma) = common::gemma3_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["generate", "-m"])
        .arg(&gemma)
        .args([
            PROMPT,
            "--json",
            "--verbose",
            "--context-mode",
            "sliding",
            "-c",
            "48",
            "-n",
            "120",
            "--min-tokens",
            "120",
            "--seed",
            "1",
        ])
        .output()
        .expect("running kindle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["tokens"].as_array().unwrap().len(), 120);
    assert_eq!(json["finish_reason"], "length");
    // 18 layers x 1 KV head x 256 x 2 (K, V) x 4 bytes a token, every layer whole.
    assert!(
        stderr.contains("KV cache 48 tokens = 1.7 MiB (36864 bytes per token), sliding (keep 0)")
            && !stderr.contains("local layers keep"),
        "{stderr}"
    );
}

#[test]
fn fixed_context_stops_at_the_context() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (out, _) = ok_json(&[
        PROMPT,
        "--json",
        "-c",
        "64",
        "-n",
        "200",
        "--min-tokens",
        "200",
    ]);
    let prompt = out["prompt_tokens"].as_array().unwrap().len();
    assert_eq!(out["tokens"].as_array().unwrap().len(), 64 - prompt);
    assert_eq!(out["finish_reason"], "length");
}

#[test]
fn max_kv_memory_refuses_a_cache_over_budget_naming_both_sizes() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let stderr = fails(&[PROMPT, "-c", "64", "-n", "100", "--max-kv-memory", "1K"]);
    let needed = 64 * BYTES_PER_TOKEN;
    assert!(
        stderr.contains(&format!("needs {needed} bytes"))
            && stderr.contains("--max-kv-memory 1024 bytes"),
        "{stderr}"
    );
    // A budget that fits runs; sliding mode sizes the cache by the context, not the run.
    let (out, _) = ok_json(&[
        PROMPT,
        "--json",
        "-c",
        "64",
        "-n",
        "4",
        "--max-kv-memory",
        "3MiB",
    ]);
    assert_eq!(out["tokens"].as_array().unwrap().len(), 4);
    let stderr = fails(&[
        PROMPT,
        "-c",
        "1024",
        "-n",
        "4",
        "--context-mode",
        "sliding",
        "--max-kv-memory",
        "3MiB",
    ]);
    assert!(
        stderr.contains(&format!("needs {} bytes", 1024 * BYTES_PER_TOKEN)),
        "{stderr}"
    );
    let stderr = fails(&[PROMPT, "--max-kv-memory", "lots"]);
    assert!(stderr.contains("lots"), "{stderr}");
}

#[test]
fn keep_is_checked() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let stderr = fails(&[
        PROMPT,
        "-c",
        "64",
        "--context-mode",
        "sliding",
        "--keep",
        "64",
    ]);
    assert!(stderr.contains("--keep 64"), "{stderr}");
    let stderr = fails(&[PROMPT, "-c", "64", "--keep", "4"]);
    assert!(stderr.contains("--context-mode sliding"), "{stderr}");
}
