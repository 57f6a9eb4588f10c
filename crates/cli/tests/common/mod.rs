//! Helpers shared by the real-model tests: the default model (fetched like the CLI does) and
//! the llama.cpp reference outputs.

#![allow(dead_code)]

pub mod reference;

use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Path of the real model: `$KINDLE_MODEL`, else the default model, fetched if missing.
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("KINDLE_MODEL") {
            return PathBuf::from(path);
        }
        // Test binaries may fetch at once: each writes its own partial file and renames it.
        kindle_fetch::ensure_default_model(&mut |event| eprintln!("{event}"))
            .expect("fetching the default model (see the message above)")
    })
    .clone()
}

/// The llama.cpp reference outputs shipped in `testdata/reference`.
pub fn reference() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/reference/smollm2-135m-instruct-q4_1.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).expect("reading the reference JSON"))
            .expect("parsing the reference JSON")
    })
}

/// Ids of a JSON array.
pub fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an array of ids")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

/// The reference prompts, by name.
pub fn prompts() -> Vec<(String, &'static Value)> {
    reference()["prompts"]
        .as_object()
        .expect("prompts")
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect()
}

/// Log-softmax in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| ((l as f64) - max).exp()).sum();
    let log_sum = sum.ln();
    logits.iter().map(|&l| l as f64 - max - log_sum).collect()
}

/// Index of the largest value (lowest index on ties).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}
