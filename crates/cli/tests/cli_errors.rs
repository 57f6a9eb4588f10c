//! The `kindle` binary on bad model files, bad flag values and odd prompts: every error exits
//! non-zero with a message naming the problem, legitimate odd inputs succeed, and nothing
//! panics.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::tiny::TinyLlama;

/// Run `kindle` with `args`, feeding `stdin` (empty when `None`).
fn kindle(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kindle");
    {
        let mut pipe = child.stdin.take().expect("stdin");
        // The binary may exit before reading: a broken pipe here is not the test's concern.
        let _ = pipe.write_all(stdin.unwrap_or_default());
    }
    child.wait_with_output().expect("running kindle")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `kindle args` must fail with a message naming every one of `parts`, without panicking.
fn assert_fails(args: &[&str], stdin: Option<&[u8]>, parts: &[&str]) {
    let out = kindle(args, stdin);
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?} succeeded; stderr: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for part in parts {
        assert!(
            err.contains(part),
            "{args:?}: stderr {err:?} does not name {part:?}"
        );
    }
}

/// `kindle args` must succeed without panicking; returns its stdout.
fn assert_succeeds(args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = kindle(args, stdin);
    let err = stderr(&out);
    assert!(out.status.success(), "{args:?} failed: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A scratch folder for one test's crafted files, removed when the test ends.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("kindle-cli-errors-")
        .tempdir()
        .expect("creating the scratch folder")
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writing a crafted file");
    path.to_str().expect("UTF-8 temp path").to_owned()
}

/// The real model's path; `None` only with `KINDLE_SKIP_REAL_MODEL=1`.
fn model() -> Option<String> {
    let path = common::real_model()?;
    Some(path.to_str().expect("UTF-8 model path").to_owned())
}

/// A tiny llama GGUF (vocabulary 64, width 16, 2 blocks, 4 heads) with `kv_heads` KV heads.
fn tiny_model(kv_heads: u32) -> Vec<u8> {
    let shape = TinyLlama {
        vocab: 64,
        d_model: 16,
        ff: 32,
        heads: 4,
        kv_heads: kv_heads.into(),
        layers: 2,
    };
    let mut w = shape.writer();
    for (name, dims) in shape.tensors() {
        let n = dims.iter().product::<u64>() as usize;
        let values: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.01).collect();
        w = w.tensor_f32(name, &dims, &values);
    }
    w.to_bytes()
}

// --- Bad model files -------------------------------------------------------------------------

/// Each bad file, through every command that opens a model.
fn assert_bad_file(path: &str, parts: &[&str]) {
    assert_fails(&["generate", "-m", path, "-n", "2", "Hi"], None, parts);
    assert_fails(&["inspect", "-m", path], None, parts);
    assert_fails(&["tokenize", "-m", path, "Hi"], None, parts);
    assert_fails(&["score", "-m", path, "--text", "Hi there"], None, parts);
}

#[test]
fn an_empty_file() {
    let dir = scratch();
    let path = write_file(dir.path(), "empty.gguf", b"");
    assert_bad_file(&path, &["empty.gguf", "truncated", "magic"]);
}

#[test]
fn a_file_with_a_bad_magic() {
    let dir = scratch();
    let path = write_file(
        dir.path(),
        "magic.gguf",
        b"GGUX\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
    );
    assert_bad_file(&path, &["magic.gguf", "not a GGUF file", "magic"]);
}

#[test]
fn a_text_file() {
    let dir = scratch();
    let path = write_file(
        dir.path(),
        "notes.txt",
        b"these are not the weights you are looking for\n",
    );
    assert_bad_file(&path, &["notes.txt", "not a GGUF file"]);
}

#[test]
fn a_truncated_real_model() {
    let dir = scratch();
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let bytes = std::fs::read(common::model_path()).expect("reading the real model");
    let path = write_file(dir.path(), "truncated.gguf", &bytes[..1 << 20]);
    assert_bad_file(&path, &["truncated.gguf", "bytes"]);
    // Cut inside the tensor data: the header parses, a tensor runs past the end.
    let path = write_file(dir.path(), "truncated-data.gguf", &bytes[..bytes.len() / 2]);
    assert_fails(
        &["generate", "-m", &path, "-n", "2", "Hi"],
        None,
        &["truncated-data.gguf", "past the end"],
    );
}

#[test]
fn a_tiny_model_whose_kv_heads_do_not_divide_its_heads() {
    let dir = scratch();
    let path = write_file(dir.path(), "kv-heads.gguf", &tiny_model(3));
    assert_fails(
        &["generate", "-m", &path, "-n", "2", "AB"],
        None,
        &["head_count_kv", "3 KV heads", "4 query heads"],
    );
}

#[test]
fn a_consistent_tiny_model_generates() {
    let dir = scratch();
    let path = write_file(dir.path(), "tiny.gguf", &tiny_model(2));
    assert_succeeds(&["generate", "-m", &path, "-n", "3", "AB"], None);
}

#[test]
fn a_directory_instead_of_a_file() {
    let scratch = scratch();
    let dir = scratch.path().join("a-directory.gguf");
    std::fs::create_dir_all(&dir).unwrap();
    assert_bad_file(dir.to_str().unwrap(), &["a-directory.gguf", "directory"]);
}

#[test]
fn a_missing_path() {
    let dir = scratch();
    let path = dir.path().join("no-such-model.gguf");
    assert_bad_file(
        path.to_str().unwrap(),
        &["no-such-model.gguf", "does not exist"],
    );
}

// --- Bad flag values -------------------------------------------------------------------------

/// `kindle generate` on the real model with `flags` must fail naming every one of `parts`.
fn assert_bad_flags(flags: &[&str], parts: &[&str]) {
    let model = common::model_path();
    let model = model.to_str().expect("UTF-8 model path");
    let mut args = vec!["generate", "-m", model];
    args.extend_from_slice(flags);
    args.push("Hello");
    assert_fails(&args, None, parts);
}

#[test]
fn bad_temperatures() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["--temperature", "-1"], &["temperature", "-1"]);
    assert_bad_flags(&["--temperature", "nan"], &["temperature", "NaN"]);
    assert_bad_flags(&["--temperature", "inf"], &["temperature"]);
    assert_bad_flags(&["--temperature", "warm"], &["--temperature", "warm"]);
}

#[test]
fn bad_top_p() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["-n", "4", "--top-p", "0"], &["top_p", "0"]);
    assert_bad_flags(&["-n", "4", "--top-p", "1.5"], &["top_p", "1.5"]);
    assert_bad_flags(&["-n", "4", "--top-p", "-0.5"], &["top_p", "-0.5"]);
}

#[test]
fn bad_min_p_top_k_and_repeat_penalty() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["-n", "4", "--min-p", "2"], &["min_p", "2"]);
    assert_bad_flags(&["-n", "4", "--top-k", "-3"], &["top_k", "-3"]);
    assert_bad_flags(
        &["-n", "4", "--repeat-penalty", "0"],
        &["repetition_penalty", "0"],
    );
}

#[test]
fn bad_max_tokens() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["--max-tokens", "abc"], &["--max-tokens", "abc"]);
    assert_bad_flags(&["--max-tokens", "-5"], &["--max-tokens"]);
}

#[test]
fn bad_logit_biases() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(
        &["-n", "4", "--logit-bias", "99999999=1"],
        &["--logit-bias", "99999999", "49152"],
    );
    assert_bad_flags(
        &["-n", "4", "--logit-bias", "x"],
        &["--logit-bias", "\"x\""],
    );
    assert_bad_flags(&["-n", "4", "--logit-bias", "5=much"], &["--logit-bias"]);
}

/// A stop token the vocabulary does not have could never stop anything: refused before the
/// weights load, naming the id and the vocabulary.
#[test]
fn bad_stop_tokens() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(
        &["-n", "4", "--stop-token", "49152"],
        &["--stop-token", "49152", "vocabulary of 49152"],
    );
    assert_bad_flags(&["-n", "4", "--stop-token", "-1"], &["--stop-token"]);
    assert_bad_flags(&["-n", "4", "--stop", ""], &["--stop \"\" is empty"]);
}

#[test]
fn bad_context_sizes() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(
        &["-n", "4", "--ctx-size", "0"],
        &["--ctx-size", "at least 1"],
    );
    assert_bad_flags(
        &["-n", "4", "--ctx-size", "100000"],
        &["--ctx-size 100000", "8192"],
    );
}

#[test]
fn bad_thread_counts() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["-n", "4", "-t", "0"], &["--threads must be at least 1"]);
    // Past the pool's bound: a clear error, not an abort spawning 100,000 threads.
    assert_bad_flags(&["-n", "4", "-t", "100000"], &["--threads 100000", "512"]);
    let model = common::model_path();
    let model = model.to_str().expect("UTF-8 model path");
    assert_fails(
        &["serve", "-m", model, "--port", "0", "-t", "100000"],
        None,
        &["--threads 100000", "512"],
    );
    assert_fails(
        &[
            "bench",
            "-m",
            model,
            "-p",
            "0",
            "-n",
            "1",
            "--threads-list",
            "1,100000",
        ],
        None,
        &["--threads-list 100000", "512"],
    );
}

#[test]
fn bad_max_time() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["-n", "4", "--max-time", "-1"], &["--max-time", "-1"]);
    assert_bad_flags(&["-n", "4", "--max-time", "0"], &["--max-time"]);
    assert_bad_flags(&["-n", "4", "--max-time", "nan"], &["--max-time"]);
}

#[test]
fn bad_mirostat_and_sampler_order() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(&["-n", "4", "--mirostat", "3"], &["--mirostat", "3"]);
    assert_bad_flags(&["-n", "4", "--samplers", "bogus"], &["bogus", "known"]);
}

#[test]
fn a_dry_sequence_breaker_the_tokenizer_cannot_encode() {
    let dir = scratch();
    // An empty breaker encodes to no token at all.
    assert_bad_flags(
        &[
            "-n",
            "4",
            "--dry-multiplier",
            "0.8",
            "--dry-sequence-breaker",
            "",
        ],
        &["--dry-sequence-breaker", "no token"],
    );
    // Checked with DRY off too: an invalid value is an error whatever the other flags.
    assert_bad_flags(
        &[
            "-n",
            "4",
            "--dry-sequence-breaker",
            ":",
            "--dry-sequence-breaker",
            "",
        ],
        &["--dry-sequence-breaker"],
    );
    // The tiny model's vocabulary (printable ASCII) has no token for "é".
    let path = write_file(dir.path(), "tiny-dry.gguf", &tiny_model(2));
    assert_fails(
        &[
            "generate",
            "-m",
            &path,
            "-n",
            "2",
            "--dry-multiplier",
            "0.8",
            "--dry-sequence-breaker",
            "é",
            "AB",
        ],
        None,
        &["--dry-sequence-breaker", "é"],
    );
    // Its defaults include "\n", which it cannot encode either: default breakers it lacks
    // are left out, not an error.
    assert_succeeds(
        &[
            "generate",
            "-m",
            &path,
            "-n",
            "2",
            "--dry-multiplier",
            "0.8",
            "AB",
        ],
        None,
    );
}

#[test]
fn a_huge_max_tokens_is_bounded_by_the_context() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_succeeds(
        &[
            "generate",
            "-m",
            &model,
            "--ctx-size",
            "24",
            "-n",
            "18446744073709551615",
            "Hello",
        ],
        None,
    );
}

// --- Odd prompts -----------------------------------------------------------------------------

#[test]
fn an_empty_prompt() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_fails(&["generate", "-m", &model, "-n", "4", ""], None, &["empty"]);
    // And an empty standard input.
    assert_fails(
        &["generate", "-m", &model, "-n", "4"],
        Some(b""),
        &["empty"],
    );
}

#[test]
fn a_prompt_of_only_special_tokens() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_succeeds(
        &[
            "generate",
            "-m",
            &model,
            "-n",
            "4",
            "--special",
            "<|im_start|><|im_end|>",
        ],
        None,
    );
}

#[test]
fn a_prompt_longer_than_the_context() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let prompt = "word ".repeat(40);
    assert_fails(
        &[
            "generate",
            "-m",
            &model,
            "-n",
            "4",
            "--ctx-size",
            "16",
            &prompt,
        ],
        None,
        &["prompt", "16"],
    );
}

#[test]
fn invalid_utf8_on_standard_input() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_fails(
        &["generate", "-m", &model, "-n", "4"],
        Some(b"abc\xff\xfe"),
        &["UTF-8", "byte 3"],
    );
}

#[test]
fn a_prompt_read_from_standard_input() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_succeeds(&["generate", "-m", &model, "-n", "4"], Some(b"Once upon"));
}

#[test]
fn special_token_text_without_special_is_plain_text() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let special: serde_json::Value = serde_json::from_str(&assert_succeeds(
        &[
            "tokenize",
            "-m",
            &model,
            "--json",
            "--special",
            "<|im_end|>",
        ],
        None,
    ))
    .unwrap();
    let im_end = special["ids"][0].as_u64().unwrap();
    assert_eq!(special["ids"].as_array().unwrap().len(), 1);

    let out: serde_json::Value = serde_json::from_str(&assert_succeeds(
        &[
            "generate",
            "-m",
            &model,
            "-n",
            "4",
            "--json",
            "<|im_end|> hello",
        ],
        None,
    ))
    .unwrap();
    let prompt: Vec<u64> = out["prompt_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(prompt.len() > 2, "{prompt:?}");
    assert!(
        !prompt.contains(&im_end),
        "<|im_end|> became the special token: {prompt:?}"
    );
}

#[test]
fn control_characters_and_unusual_unicode_are_fine() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let odd = "\u{1}\t\r\n\u{200b}\u{feff}e\u{301} 🦀 \u{10ffff}";
    assert_succeeds(&["generate", "-m", &model, "-n", "4", odd], None);
    // A NUL cannot be an argument, but can come on standard input.
    assert_succeeds(
        &["generate", "-m", &model, "-n", "4"],
        Some(format!("\u{0}{odd}").as_bytes()),
    );
}

/// A `KINDLE_SIMD` the kernels do not know is an error naming the value and the choices, before
/// any work; a known one is accepted (a cap above the CPU's level changes nothing).
#[test]
fn an_unknown_simd_cap_is_an_error() {
    let run = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_kindle"))
            .args(["tokenize", "--help"])
            .env("KINDLE_SIMD", value)
            .output()
            .expect("running kindle")
    };
    let out = run("avx1024");
    let err = stderr(&out);
    assert!(!out.status.success(), "KINDLE_SIMD=avx1024 was accepted");
    assert!(
        err.contains("KINDLE_SIMD=\"avx1024\"") && err.contains("avx512, vnni, avx2, scalar"),
        "{err}"
    );
    for value in ["avx2", "AVX512", "scalar"] {
        let out = run(value);
        assert!(
            out.status.success(),
            "KINDLE_SIMD={value}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn serve_refuses_a_kv_pool_it_cannot_have() {
    let Some(model) = model() else {
        return;
    };
    let serve = |tokens: &str, parts: &[&str]| {
        let args = [
            "serve",
            "-m",
            &model,
            "--port",
            "0",
            "-c",
            "256",
            "--kv-pool",
            tokens,
        ];
        assert_fails(&args, None, parts);
    };
    // Smaller than one context: a request could never fit.
    serve("100", &["--kv-pool", "at least the context length"]);
    // More memory than the machine has (and more than can be counted): an error, not an
    // abort.
    for tokens in ["1000000000000000", "1000000000000000000"] {
        serve(tokens, &["KV pool", "could not be allocated"]);
    }
}

#[test]
fn bad_chat_templates() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    assert_bad_flags(
        &["--chat", "--chat-template-kwargs", "[1]"],
        &["--chat-template-kwargs", "expected a JSON object"],
    );
    assert_bad_flags(
        &["--chat", "--chat-template-kwargs", "{\"messages\": 1}"],
        &["--chat-template-kwargs", "'messages' is set by kindle"],
    );
    assert_bad_flags(
        &["--chat", "--chat-template-kwargs", "{nope"],
        &["--chat-template-kwargs", "not JSON"],
    );
    assert_bad_flags(
        &["--chat-template-kwargs", "{\"enable_thinking\": false}"],
        &["need --chat"],
    );
    let dir = scratch();
    assert_bad_flags(
        &["--chat", "--chat-template-file", "/no/such/template.jinja"],
        &["chat template file", "/no/such/template.jinja"],
    );
    let broken = write_file(dir.path(), "broken.jinja", b"{% for m in messages %}");
    assert_bad_flags(
        &["--chat", "--chat-template-file", &broken],
        &["compiling the chat template", "broken.jinja"],
    );
}
