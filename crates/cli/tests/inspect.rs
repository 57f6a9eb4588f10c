//! `kindle inspect` on crafted GGUF files: a well-formed file is always shown (metadata and
//! tensors), then each reason its model would not load is named, and the exit status says
//! whether it would.

use std::process::{Command, Output};

use kindle_gguf::{GgufWriter, MetadataValue};
use serde_json::Value;

const D: u64 = 16;
const FF: u64 = 32;
const VOCAB: u64 = 64;
const HEAD_DIM: u64 = 4;
const LAYERS: u64 = 2;

/// The tiny model's metadata (vocabulary of 64 printable characters, width 16, 2 blocks, 4
/// heads, 2 KV heads), with `changes` set over it.
fn metadata(changes: &[(&'static str, MetadataValue)]) -> Vec<(&'static str, MetadataValue)> {
    let tokens: Vec<MetadataValue> = (0..VOCAB)
        .map(|i| MetadataValue::String(char::from(b'!' + i as u8).to_string()))
        .collect();
    let mut meta: Vec<(&'static str, MetadataValue)> = vec![
        ("general.architecture", "llama".into()),
        ("general.name", "tiny".into()),
        ("llama.block_count", MetadataValue::U32(LAYERS as u32)),
        ("llama.context_length", MetadataValue::U32(64)),
        ("llama.embedding_length", MetadataValue::U32(D as u32)),
        ("llama.feed_forward_length", MetadataValue::U32(FF as u32)),
        ("llama.attention.head_count", MetadataValue::U32(4)),
        ("llama.attention.head_count_kv", MetadataValue::U32(2)),
        (
            "llama.rope.dimension_count",
            MetadataValue::U32(HEAD_DIM as u32),
        ),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.pre", "gpt2".into()),
        ("tokenizer.ggml.tokens", MetadataValue::Array(tokens.into())),
    ];
    for (key, value) in changes {
        meta.retain(|(k, _)| k != key);
        meta.push((key, value.clone()));
    }
    meta
}

/// The bytes of the tiny model with metadata `changes` (the tensors always those of the
/// unchanged model).
fn tiny_model(changes: &[(&'static str, MetadataValue)]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (key, value) in metadata(changes) {
        w = w.metadata(key, value);
    }
    let kv = 2 * HEAD_DIM;
    let mut tensors = vec![
        ("token_embd.weight".to_string(), vec![D, VOCAB]),
        ("output_norm.weight".to_string(), vec![D]),
    ];
    for l in 0..LAYERS {
        let p = format!("blk.{l}.");
        tensors.extend([
            (format!("{p}attn_norm.weight"), vec![D]),
            (format!("{p}ffn_norm.weight"), vec![D]),
            (format!("{p}attn_q.weight"), vec![D, D]),
            (format!("{p}attn_k.weight"), vec![D, kv]),
            (format!("{p}attn_v.weight"), vec![D, kv]),
            (format!("{p}attn_output.weight"), vec![D, D]),
            (format!("{p}ffn_gate.weight"), vec![D, FF]),
            (format!("{p}ffn_up.weight"), vec![D, FF]),
            (format!("{p}ffn_down.weight"), vec![FF, D]),
        ]);
    }
    for (name, dims) in tensors {
        let n = dims.iter().product::<u64>() as usize;
        let values: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.01).collect();
        w = w.tensor_f32(name, &dims, &values);
    }
    w.to_bytes()
}

/// A scratch folder for one test's crafted files, removed when the test ends.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("kindle-inspect-")
        .tempdir()
        .expect("creating the scratch folder")
}

/// Write the tiny model with `changes` as `name` and run `kindle inspect` on it.
fn inspect(name: &str, changes: &[(&'static str, MetadataValue)], json: bool) -> Output {
    let dir = scratch();
    let path = dir.path().join(name);
    std::fs::write(&path, tiny_model(changes)).expect("writing a crafted file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_kindle"));
    command.arg("inspect").arg("-m").arg(&path);
    if json {
        command.arg("--json");
    }
    command.output().expect("running kindle")
}

/// `kindle inspect` (text) shows the file, then fails naming every one of `reasons`, each on a
/// "this model would not load" line; returns those lines.
fn assert_would_not_load(
    name: &str,
    changes: &[(&'static str, MetadataValue)],
    reasons: &[&str],
) -> Vec<String> {
    let out = inspect(name, changes, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{name}: inspect succeeded: {stdout}");
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    // The file is shown.
    assert!(stdout.contains("general.architecture"), "{name}: {stdout}");
    assert!(stdout.contains("tokenizer.ggml.model"), "{name}: {stdout}");
    assert!(stdout.contains("blk.1.ffn_down.weight"), "{name}: {stdout}");
    let lines: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("this model would not load: "))
        .map(str::to_owned)
        .collect();
    for reason in reasons {
        assert!(
            lines.iter().any(|l| l.contains(reason)),
            "{name}: no reason naming {reason:?} in {lines:?}"
        );
    }
    assert!(stderr.contains("would not load"), "{name}: {stderr}");
    assert!(
        stderr.contains(name),
        "{name}: stderr names the file: {stderr}"
    );
    lines
}

#[test]
fn an_unsupported_tokenizer_is_named_after_the_metadata() {
    let lines = assert_would_not_load(
        "rwkv-vocab.gguf",
        &[("tokenizer.ggml.model", "rwkv".into())],
        &[
            "tokenizer",
            "unsupported tokenizer model `rwkv`",
            "tokenizer.ggml.model",
        ],
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    // A SentencePiece vocabulary without scores names the missing key.
    let lines = assert_would_not_load(
        "sentencepiece.gguf",
        &[("tokenizer.ggml.model", "llama".into())],
        &["tokenizer", "tokenizer.ggml.scores"],
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    // The same in JSON: the metadata and the reason, and a failure.
    let out = inspect(
        "rwkv-vocab.gguf",
        &[("tokenizer.ggml.model", "rwkv".into())],
        true,
    );
    assert!(!out.status.success());
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["metadata"]["tokenizer.ggml.model"], "rwkv");
    assert_eq!(json["tensors"].as_array().unwrap().len(), 20);
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].as_str().unwrap().contains("tokenizer"));
    // The hyperparameters are fine: the KV cache is still reported.
    assert_eq!(
        json["kv_cache"]["bytes_per_token"],
        2 * 2 * 2 * HEAD_DIM * 4
    );
}

#[test]
fn kv_heads_that_do_not_divide_the_heads() {
    let lines = assert_would_not_load(
        "kv-heads.gguf",
        &[("llama.attention.head_count_kv", MetadataValue::U32(3))],
        &["head_count_kv", "3 KV heads", "4 query heads"],
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[test]
fn an_embedding_width_off_by_one() {
    assert_would_not_load(
        "width.gguf",
        &[("llama.embedding_length", MetadataValue::U32(D as u32 + 1))],
        &[
            "4 heads do not divide the embedding width 17",
            "'token_embd.weight' has shape [16, 64], expected [17, 64]",
        ],
    );
}

#[test]
fn a_block_count_one_too_many_names_every_missing_tensor() {
    let lines = assert_would_not_load(
        "blocks.gguf",
        &[("llama.block_count", MetadataValue::U32(LAYERS as u32 + 1))],
        &[
            "'blk.2.attn_q.weight' is missing",
            "'blk.2.ffn_down.weight' is missing",
        ],
    );
    // All nine tensors of the block that is not there, nothing else.
    assert_eq!(lines.len(), 9, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("blk.2.")), "{lines:?}");
}

#[test]
fn a_good_tiny_model_would_load() {
    let out = inspect("good.gguf", &[], false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("would not load"), "{stdout}");
    assert!(
        stdout.contains("model: 2 layers, d_model 16, 4 heads (2 KV heads"),
        "{stdout}"
    );
    let out = inspect("good.gguf", &[], true);
    assert!(out.status.success());
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["problems"], serde_json::json!([]));
}

/// A file's rotary scaling is shown (text and JSON); one kindle does not run is a reason the
/// model would not load, naming the key.
#[test]
fn rotary_scaling_is_shown_or_refused() {
    let yarn = [
        ("llama.rope.scaling.type", "yarn".into()),
        ("llama.rope.scaling.factor", MetadataValue::F32(4.0)),
        (
            "llama.rope.scaling.original_context_length",
            MetadataValue::U32(1024),
        ),
    ];
    let out = inspect("yarn.gguf", &yarn, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("rotary scaling: YaRN x4 from 1024 positions (cos and sin x1.139)"),
        "{stdout}"
    );
    let out = inspect("yarn.gguf", &yarn, true);
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        json["rope_scaling"],
        "YaRN x4 from 1024 positions (cos and sin x1.139)"
    );
    assert_would_not_load(
        "longrope.gguf",
        &[("llama.rope.scaling.type", "longrope".into())],
        &["llama.rope.scaling.type", "longrope"],
    );
}

#[test]
fn a_malformed_file_is_still_an_error() {
    let dir = scratch();
    let path = dir.path().join("cut.gguf");
    let bytes = tiny_model(&[]);
    std::fs::write(&path, &bytes[..bytes.len() / 3]).expect("writing a crafted file");
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["inspect", "-m"])
        .arg(&path)
        .output()
        .expect("running kindle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("cut.gguf"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing is shown of a malformed file"
    );
}

#[test]
fn a_context_whose_cache_does_not_fit_in_memory_addresses_is_refused() {
    let dir = scratch();
    let path = dir.path().join("good.gguf");
    std::fs::write(&path, tiny_model(&[])).expect("writing a tiny model");
    let run = |context: &str| {
        Command::new(env!("CARGO_BIN_EXE_kindle"))
            .args(["inspect", "--json", "--context", context, "-m"])
            .arg(&path)
            .output()
            .expect("running kindle")
    };
    // It printed a wrapped byte count before.
    let out = run("18446744073709551615");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--context 18446744073709551615") && stderr.contains("address"),
        "{stderr}"
    );
    let out = run("4096");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
