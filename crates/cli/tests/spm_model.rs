//! A tiny llama model with random weights and a SentencePiece vocabulary (byte fallback,
//! a space prefix), written by the test: every command that takes `-m` runs on it, and the
//! streamed text is the decode of the generated ids even where characters are split over
//! byte tokens.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::tiny::TinyLlama;
use kindle_gguf::{GgufFile, MetadataValue};
use kindle_tokenizer::Tokenizer;
use serde_json::Value;

/// `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then a few pieces.
fn vocab() -> (Vec<String>, Vec<i32>, Vec<f32>) {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut types = vec![2, 3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend([6; 256]);
    let mut scores = vec![0.0; tokens.len()];
    let pieces = [
        "▁", "▁H", "i", "▁Hi", "t", "h", "e", "r", "▁t", "he", "▁the", "re", "▁there", "é", "▁é",
    ];
    for (rank, piece) in pieces.iter().enumerate() {
        tokens.push((*piece).to_string());
        types.push(1);
        scores.push(-(rank as f32));
    }
    (tokens, types, scores)
}

/// The model file, written once per test binary.
fn model() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let (tokens, types, scores) = vocab();
        let shape = TinyLlama {
            vocab: tokens.len() as u64,
            d_model: 32,
            ff: 64,
            heads: 4,
            kv_heads: 2,
            layers: 2,
        };
        let mut writer = shape
            .writer_without_vocab()
            .metadata("tokenizer.ggml.model", "llama")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.scores", scores)
            .metadata("tokenizer.ggml.bos_token_id", MetadataValue::U32(1))
            .metadata("tokenizer.ggml.eos_token_id", MetadataValue::U32(2));
        // Pseudo-random weights (a fixed linear congruential sequence).
        let mut state = 0x2545_f491_u64;
        for (name, dims) in shape.tensors() {
            let n = dims.iter().product::<u64>() as usize;
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
                })
                .collect();
            writer = writer.tensor_f32(name, &dims, &values);
        }
        // In the target's test folder, not littering /tmp: written under a name of this
        // process, then renamed (the same bytes every run, so a concurrent run is harmless).
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join("kindle-spm-model.gguf");
        let partial = dir.join(format!("kindle-spm-model.{}.part", std::process::id()));
        std::fs::write(&partial, writer.to_bytes()).expect("writing the model");
        std::fs::rename(&partial, &path).expect("renaming the model into place");
        path
    })
    .clone()
}

fn kindle(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kindle");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("writing stdin");
    drop(input);
    let out = child.wait_with_output().expect("kindle's output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kindle {args:?} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

#[test]
fn generate_streams_the_decode_of_the_ids() {
    let model = model();
    let model = model.to_str().expect("UTF-8 path");
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(model).expect("open")).expect("vocab");
    let flags = [
        "-n",
        "40",
        "--temperature",
        "1.5",
        "--seed",
        "7",
        "Hi there é",
    ];
    for seed in ["7", "8", "9"] {
        let mut args = vec!["generate", "-m", model, "--json"];
        args.extend(flags);
        *args.iter_mut().rev().nth(1).expect("seed") = seed;
        let json: Value = serde_json::from_str(&kindle(&args, None)).expect("JSON");
        let prompt = ids(&json["prompt_tokens"]);
        let generated = ids(&json["tokens"]);
        let text = json["text"].as_str().expect("text");
        assert_eq!(prompt, tokenizer.encode("Hi there é", false).unwrap());
        // The text is what the generated ids add to the prompt's decode.
        let mut all = prompt.clone();
        all.extend(&generated);
        let whole = tokenizer.decode(&all, true).unwrap();
        let before = tokenizer.decode(&prompt, true).unwrap();
        assert_eq!(
            whole.strip_prefix(before.as_str()),
            Some(text),
            "seed {seed}"
        );

        // Streamed a token at a time, the same text: split characters come out once.
        args[3] = "--jsonl";
        let lines: Vec<Value> = kindle(&args, None)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        let (tokens, done) = lines.split_at(lines.len() - 1);
        let streamed: Vec<u32> = tokens
            .iter()
            .map(|l| l["token"].as_u64().unwrap() as u32)
            .collect();
        assert_eq!(streamed, generated, "seed {seed}");
        let joined: String = tokens.iter().map(|l| l["text"].as_str().unwrap()).collect();
        assert_eq!(joined, text, "seed {seed}");
        assert_eq!(done[0]["text"].as_str(), Some(text));
    }
}

#[test]
fn tokenize_chat_and_score_run_on_it() {
    let model = model();
    let model = model.to_str().expect("UTF-8 path");
    let json: Value = serde_json::from_str(&kindle(
        &["tokenize", "--json", "-m", model, "Hi there é"],
        None,
    ))
    .expect("JSON");
    // "▁H" + "i", "▁t" + "he" then + "re", "▁" + "é": BOS and three pieces.
    assert_eq!(ids(&json["ids"]), [1, 262, 271, 273]);
    let out = kindle(
        &["chat", "-m", model, "-n", "8", "--seed", "1"],
        Some("Hi there\n"),
    );
    assert!(!out.contains('\u{FFFD}') || out.len() > 1);
    kindle(&["score", "-m", model, "--text", "Hi there é"], None);
}
