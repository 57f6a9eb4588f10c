//! The real model against llama.cpp with nothing rounded on either side: SmolLM2 written as
//! `F32` by `kindle quantize` (llama-quantize's bytes, `quantize_llama.rs`), and llama.cpp's
//! logits on that file with an `f32` KV cache and no flash attention (its `F32` matrix
//! products keep `f32` activations), every position of the three reference prompts and
//! their greedy continuations (`testdata/reference/smollm2-f32-llama-cpp.json`: the top 10
//! logits and the log-sum-exp of each position). On the `Q4_1` file the rule is a top-5
//! logprob within 0.6 (llama.cpp's 8-bit activations); here every compared logit is within
//! [`TOLERANCE`], on both executors, prefilled and decoded one token at a time.

mod common;

use common::reference::{top_logits_difference, top_logits_differences};
use common::*;
use kindle_gguf::GgufFile;
use kindle_model::{Llama, LoadOptions, LogitsFor, OpenDevice, RopeOverrides, WeightFormat};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// How far a logit (or a log-sum-exp) may be from llama.cpp's (logits of size 10-25).
/// Measured: 2.1e-4 at most (the host executor's prefill product, `france`); decoding 5.6e-5
/// at most; the Burn executor 8.4e-5: `f32` sums in other orders over 30 layers.
const TOLERANCE: f32 = 4e-4;

fn reference() -> Value {
    reference_file("smollm2-f32-llama-cpp.json")
}

/// SmolLM2 as `F32`, written to `out` by `kindle quantize`.
fn write_f32(model: &Path, out: &Path) {
    let run = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["quantize", model.to_str().unwrap(), out.to_str().unwrap()])
        .args(["--type", "f32"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The `F32` file, written once for the tests of this binary and checked to be the one
/// llama.cpp ran; `None` only with `KINDLE_SKIP_REAL_MODEL=1`.
fn f32_file() -> Option<GgufFile> {
    static CELL: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let model = real_model()?;
    let (_, path) = CELL.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f32.gguf");
        write_f32(&model, &path);
        assert_eq!(
            sha256_hex(&path),
            reference()["sha256"],
            "the F32 file is not the one llama.cpp ran"
        );
        (dir, path)
    });
    Some(GgufFile::open(path).unwrap())
}

#[test]
fn f32_logits_match_llama_cpp_s_f32_logits() {
    let Some(file) = f32_file() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let reference = reference();
    for weights in [WeightFormat::Quantized, WeightFormat::DenseF32] {
        let model =
            Llama::from_gguf_with(&file, &OpenDevice::flex().device, LoadOptions::new(weights))
                .unwrap();
        for (name, a, s) in top_logits_differences(&model, &reference) {
            eprintln!("{name}, {weights:?}: prefill {a:.1e}, decode {s:.1e}");
            assert!(
                a <= TOLERANCE && s <= TOLERANCE,
                "{name}, {weights:?}: {a}, {s} from llama.cpp"
            );
        }
    }
}

/// The comparison catches a model that is slightly off: the same file run with its rotary
/// base 1% low (`--rope-freq-base 99000`) is far past the tolerance.
#[test]
fn a_slightly_wrong_rotary_base_is_caught() {
    let Some(file) = f32_file() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let reference = reference();
    let rope = RopeOverrides {
        freq_base: Some(99000.0),
        ..RopeOverrides::default()
    };
    let options = LoadOptions::new(WeightFormat::Quantized).with_rope(rope);
    let model = Llama::from_gguf_with(&file, &OpenDevice::flex().device, options).unwrap();
    let case = &reference["prompts"]["chat"];
    let tokens = ids(&case["tokens"]);
    let mut cache = model.new_cache(tokens.len());
    let all = model.forward(&tokens, &mut cache, LogitsFor::All).unwrap();
    let off = top_logits_difference(
        &all,
        model.config().vocab_size,
        case["positions"].as_array().unwrap(),
    );
    eprintln!("base 99000: {off:.1e} from llama.cpp");
    assert!(off > 10.0 * TOLERANCE, "only {off}");
}
