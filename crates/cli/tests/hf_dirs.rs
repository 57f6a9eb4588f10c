//! Hugging Face model directories on the real model: SmolLM2 (Q4_1 GGUF) written as an f32
//! Hugging Face directory by `kindle_hf::write_hf` loads into the same model (the same
//! logits, prefill and decode, on the reference prompts; the same tokenizer and chat
//! template) and converts back to a GGUF file that gives those logits again; and the
//! `kindle` binary runs, inspects and converts such directories, with clear errors for bad ones.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::reference::{Passes, all_logits};
use common::*;
use kindle_cli::engine;
use kindle_gguf::GgufFile;
use kindle_gguf::quant::GgmlType;
use kindle_hf::{HfDir, HfDtype, ToGgufOptions};
use kindle_model::{Llama, LogitsFor, OpenDevice};

/// The real model written as an f32 Hugging Face directory once per test binary (under the
/// target's temporary folder, replaced on every run: a static is never dropped, so a
/// `TempDir` here would leak 0.5 GB per run).
fn hf_dir() -> Option<&'static Path> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let path = real_model()?;
    let dir = DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hf_dirs/smollm2-f32");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = GgufFile::open(&path).expect("opening the real model");
        kindle_hf::write_hf(&file, &dir, HfDtype::F32).expect("writing the HF directory");
        dir
    });
    Some(dir.as_path())
}

fn load(file: &GgufFile) -> Llama {
    Llama::load(file, &OpenDevice::flex()).expect("loading the model")
}

/// Each reference prompt followed by llama.cpp's greedy continuation (teacher forcing).
fn sequences() -> Vec<Vec<u32>> {
    prompts()
        .into_iter()
        .map(|(_, p)| {
            let mut all = ids(&p["prompt_ids"]);
            all.extend(ids(&p["greedy_ids"]));
            all
        })
        .collect()
}

/// Largest difference between two runs' logits.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Logits of every position, one prefill pass, then the same tokens decoded one at a time
/// after a prefill of the first half (so attention reads the cache back).
fn prefill_and_decode(model: &Llama, tokens: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let prefill = all_logits(model, tokens, Passes::One);
    let half = tokens.len() / 2;
    let mut cache = model.new_cache(tokens.len());
    let mut decode = model
        .forward(&tokens[..half], &mut cache, LogitsFor::All)
        .unwrap();
    for &t in &tokens[half..] {
        decode.extend(model.forward(&[t], &mut cache, LogitsFor::Last).unwrap());
    }
    (prefill, decode)
}

#[test]
fn an_f32_hf_directory_gives_the_logits_of_the_gguf_file_it_came_from() {
    let Some(dir) = hf_dir() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let gguf = GgufFile::open(model_path()).unwrap();
    let hf = engine::open_file(dir).expect("opening the HF directory");
    // The same weights as an f32 GGUF file: the dequantised Q4_1 values, which the HF
    // directory holds exactly.
    let gguf_f32 = GgufFile::from_bytes(
        engine::requantize(&gguf, engine::Scheme::Pure(GgmlType::F32), true)
            .unwrap()
            .to_bytes(),
    )
    .unwrap();
    // And back: the HF directory converted to a GGUF file.
    let back = HfDir::open(dir)
        .and_then(|d| d.to_gguf_file(&ToGgufOptions::default()))
        .unwrap();
    let (m_gguf, m_f32, m_hf, m_back) = (load(&gguf), load(&gguf_f32), load(&hf), load(&back));
    let (mut worst_q4, mut worst_decode) = (0f32, 0f32);
    for tokens in sequences() {
        let (hf_prefill, hf_decode) = prefill_and_decode(&m_hf, &tokens);
        let (f32_prefill, f32_decode) = prefill_and_decode(&m_f32, &tokens);
        let (back_prefill, back_decode) = prefill_and_decode(&m_back, &tokens);
        // Same values, same kernels: the same bits.
        assert_eq!(
            max_diff(&hf_prefill, &f32_prefill),
            0.0,
            "HF vs f32 GGUF, prefill"
        );
        assert_eq!(
            max_diff(&hf_decode, &f32_decode),
            0.0,
            "HF vs f32 GGUF, decode"
        );
        assert_eq!(
            max_diff(&hf_prefill, &back_prefill),
            0.0,
            "HF vs HF→GGUF, prefill"
        );
        assert_eq!(
            max_diff(&hf_decode, &back_decode),
            0.0,
            "HF vs HF→GGUF, decode"
        );
        // The Q4_1 file multiplies the same values with its own kernel (another order of
        // additions): 0 in prefill (both dequantise for the same matmul) and 7.3e-5 in decode
        // on a Zen 4 (AVX-512); the bound leaves room for the AVX2 kernels' order.
        let (q_prefill, q_decode) = prefill_and_decode(&m_gguf, &tokens);
        worst_q4 = worst_q4.max(max_diff(&hf_prefill, &q_prefill));
        worst_decode = worst_decode.max(max_diff(&hf_decode, &q_decode));
    }
    eprintln!(
        "f32 HF directory vs the Q4_1 GGUF file: largest logit difference {worst_q4:.2e} \
         (prefill), {worst_decode:.2e} (decode)"
    );
    assert!(worst_q4 < 1e-3, "prefill logits differ by {worst_q4}");
    assert!(
        worst_decode < 1e-3,
        "decode logits differ by {worst_decode}"
    );
}

#[test]
fn the_hf_directory_gives_llama_cpps_tokens_on_the_reference_prompts() {
    let Some(dir) = hf_dir() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    // llama.cpp's greedy tokens on the Q4_1 file, up to the first close call (margin 0.5),
    // and its teacher-forced distributions, from the f32 directory.
    let model = load(&engine::open_file(dir).unwrap());
    common::reference::check_free_running(&model, Passes::One);
    common::reference::check_teacher_forced(&model);
}

#[test]
fn the_hf_directory_keeps_the_tokenizer_and_the_chat_template() {
    let Some(dir) = hf_dir() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let gguf = engine::open(&model_path()).unwrap();
    let hf = engine::open(dir).unwrap();
    // The tokenizer.json itself, through the `tokenizers` crate.
    let json = kindle_tokenizer::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    assert_eq!(gguf.tokenizer.chat_template(), hf.tokenizer.chat_template());
    assert_eq!(gguf.tokenizer.chat_template(), json.chat_template());
    assert!(gguf.tokenizer.chat_template().is_some());
    assert_eq!(gguf.tokenizer.eog_ids(), hf.tokenizer.eog_ids());
    let mut texts: Vec<String> = prompts()
        .into_iter()
        .map(|(_, p)| p["prompt"].as_str().unwrap().to_string())
        .collect();
    texts.extend(
        [
            "Hello world! 12345 café naïve 日本語 🙂  spaces\ttabs\n\nnewlines",
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
            "def f(x):\n    return x**2  # squares",
        ]
        .map(String::from),
    );
    for text in &texts {
        for special in [false, true] {
            let expected = gguf.tokenizer.encode(text, special).unwrap();
            assert_eq!(
                hf.tokenizer.encode(text, special).unwrap(),
                expected,
                "{text:?}"
            );
            assert_eq!(
                json.encode(text, special).unwrap(),
                expected,
                "{text:?} (tokenizer.json)"
            );
        }
    }
}

fn kindle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .output()
        .expect("running kindle")
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "kindle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

#[test]
fn kindle_generates_from_inspects_and_converts_hf_directories() {
    let Some(dir) = hf_dir() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let model = model_path();
    let greedy = |m: &str| {
        stdout(&kindle(&[
            "generate",
            "-m",
            m,
            "The capital of France is",
            "-n",
            "24",
            "--temperature",
            "0",
        ]))
    };
    let from_gguf = greedy(path_str(&model));
    assert!(from_gguf.starts_with(" Paris"), "{from_gguf:?}");
    assert_eq!(greedy(path_str(dir)), from_gguf);

    // --quantize q4_1 on the f32 directory gives back the file's Q4_1 blocks for the
    // matrices that were Q4_1, so the same text.
    let quantized = stdout(&kindle(&[
        "generate",
        "-m",
        path_str(dir),
        "--quantize",
        "q4_1",
        "The capital of France is",
        "-n",
        "24",
        "--temperature",
        "0",
    ]));
    assert!(quantized.starts_with(" Paris"), "{quantized:?}");

    let inspect = stdout(&kindle(&["inspect", "-m", path_str(dir)]));
    assert!(inspect.contains("Hugging Face directory"), "{inspect}");
    assert!(inspect.contains("30 layers, d_model 576"), "{inspect}");

    // Back to GGUF through the binary, f16 and q8_0, and round the f16 file again to HF.
    let out = tempfile::tempdir().unwrap();
    let f16: PathBuf = out.path().join("smol-f16.gguf");
    stdout(&kindle(&[
        "convert",
        path_str(dir),
        path_str(&f16),
        "--type",
        "f16",
    ]));
    let f16_text = greedy(path_str(&f16));
    assert!(f16_text.starts_with(" Paris"), "{f16_text:?}");
    let again = out.path().join("again");
    stdout(&kindle(&[
        "convert",
        path_str(&f16),
        path_str(&again),
        "--to",
        "hf",
        "--dtype",
        "f16",
    ]));
    assert_eq!(greedy(path_str(&again)), f16_text);

    // Nothing is overwritten without --force.
    let refused = kindle(&["convert", path_str(dir), path_str(&f16)]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("exists (--force replaces it)"),
        "{message}"
    );
    assert!(
        kindle(&["convert", path_str(dir), path_str(&f16), "--force"])
            .status
            .success()
    );
}

#[test]
fn bad_hf_directories_are_named_errors() {
    let Some(dir) = hf_dir() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let fail = |args: &[&str]| -> String {
        let output = kindle(args);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?} should fail cleanly"
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let empty = tempfile::tempdir().unwrap();
    let message = fail(&["generate", "-m", path_str(empty.path()), "Hi"]);
    assert!(message.contains("without a config.json"), "{message}");

    // A copy of the directory whose config.json lacks a key, then has a key of the wrong type.
    let bad = tempfile::tempdir().unwrap();
    for name in [
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::os::unix::fs::symlink(dir.join(name), bad.path().join(name)).unwrap();
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let mut missing = config.clone();
    missing.as_object_mut().unwrap().remove("num_hidden_layers");
    std::fs::write(bad.path().join("config.json"), missing.to_string()).unwrap();
    let message = fail(&["generate", "-m", path_str(bad.path()), "Hi"]);
    assert!(message.contains("num_hidden_layers"), "{message}");
    let mut wrong = config.clone();
    wrong["hidden_size"] = serde_json::json!("576");
    std::fs::write(bad.path().join("config.json"), wrong.to_string()).unwrap();
    let message = fail(&["inspect", "-m", path_str(bad.path())]);
    assert!(message.contains("hidden_size"), "{message}");

    // A truncated safetensors file.
    let truncated = tempfile::tempdir().unwrap();
    std::fs::write(truncated.path().join("config.json"), config.to_string()).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(
        truncated.path().join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let message = fail(&["generate", "-m", path_str(truncated.path()), "Hi"]);
    assert!(message.contains("model.safetensors"), "{message}");
}

#[test]
fn gemma3_as_an_hf_directory_runs_as_the_gguf_file() {
    let Some(path) = gemma3_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().unwrap();
    let gguf = GgufFile::open(&path).unwrap();
    kindle_hf::write_hf(&gguf, dir.path(), HfDtype::F32).expect("writing Gemma-3 as HF");
    // SentencePiece goes through tokenizer.model (no tokenizer.json).
    assert!(dir.path().join("tokenizer.model").is_file());
    let hf = engine::open(dir.path()).unwrap();
    let original = engine::open(&path).unwrap();
    assert_eq!(
        hf.tokenizer.chat_template(),
        original.tokenizer.chat_template()
    );
    let text = "The capital of France is Paris. Ünïcödé ☃ and <start_of_turn>user\nhi";
    for special in [false, true] {
        assert_eq!(
            hf.tokenizer.encode(text, special).unwrap(),
            original.tokenizer.encode(text, special).unwrap()
        );
    }
    // The f32 directory holds the dequantised weights exactly: the same logits as the same
    // values in an f32 GGUF file, bit for bit; the Q4_K/Q5_0/Q6_K/Q8_0 file's within rounding.
    let gguf_f32 = GgufFile::from_bytes(
        engine::requantize(&gguf, engine::Scheme::Pure(GgmlType::F32), true)
            .unwrap()
            .to_bytes(),
    )
    .unwrap();
    let tokens = original
        .tokenizer
        .encode("The capital of France is", true)
        .unwrap();
    let (m_hf, m_f32, m_q) = (load(&hf.file), load(&gguf_f32), load(&gguf));
    let (hf_prefill, hf_decode) = prefill_and_decode(&m_hf, &tokens);
    let (f32_prefill, f32_decode) = prefill_and_decode(&m_f32, &tokens);
    assert_eq!(max_diff(&hf_prefill, &f32_prefill), 0.0);
    assert_eq!(max_diff(&hf_decode, &f32_decode), 0.0);
    let (q_prefill, q_decode) = prefill_and_decode(&m_q, &tokens);
    let worst = max_diff(&hf_prefill, &q_prefill).max(max_diff(&hf_decode, &q_decode));
    eprintln!("Gemma-3 f32 HF directory vs the Q4_K_M file: largest logit difference {worst:.2e}");
    assert!(worst < 1e-3, "logits differ by {worst}");
    let greedy = |m: &str| {
        stdout(&kindle(&[
            "generate",
            "-m",
            m,
            "The capital of France is",
            "-n",
            "16",
            "--temperature",
            "0",
        ]))
    };
    assert_eq!(greedy(path_str(dir.path())), greedy(path_str(&path)));
}
