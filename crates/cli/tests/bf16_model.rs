//! `BF16` files on the CPU kernels: the real SmolLM2 written as `BF16` by `kindle quantize`
//! (llama-quantize's bytes, `quantize_llama.rs`) is held as `BF16` (two bytes a weight, read
//! in place) and gives, bit for bit, the logits of the `F32` file of its widened values (a
//! `bf16` widens exactly, and the dense kernels sum in one order), in a prefill, one token at
//! a time and in verification-sized passes; and `kindle generate` says what the `F32` file
//! says. A `bfloat16` Hugging Face directory made from it keeps `BF16` (as llama.cpp's
//! converter does with `--outtype auto`): it runs as the file and converts back to its bytes.

mod common;

use std::path::Path;
use std::process::Command;

use common::reference::{Passes, all_logits};
use common::*;
use kindle_gguf::{GgmlType, GgufFile};
use kindle_model::{Llama, OpenDevice};

/// `kindle ARGS...`, which must succeed; its stdout.
fn kindle(args: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .output()
        .expect("running kindle");
    assert!(
        run.status.success(),
        "kindle {args:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8(run.stdout).expect("UTF-8 output")
}

fn quantize(input: &Path, output: &Path, ty: &str) {
    kindle(&[
        "quantize",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--type",
        ty,
    ]);
}

fn load(path: &Path) -> Llama {
    let file = GgufFile::open(path).expect("opening the file");
    Llama::load(&file, &OpenDevice::flex()).expect("loading the model")
}

#[test]
fn a_bf16_file_gives_the_bits_of_its_f32_widening() {
    let Some(model) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().unwrap();
    let bf16_path = dir.path().join("bf16.gguf");
    let f32_path = dir.path().join("f32.gguf");
    quantize(&model, &bf16_path, "bf16");
    quantize(&bf16_path, &f32_path, "f32");
    let file = GgufFile::open(&bf16_path).unwrap();
    assert_eq!(file.get_u64("general.file_type").unwrap(), 32);
    assert_eq!(
        file.tensor("blk.0.ffn_down.weight").unwrap().ty,
        GgmlType::BF16
    );

    let (bf16, f32) = (load(&bf16_path), load(&f32_path));
    // Held as stored: half the bytes of the widened matrices (before `BF16` had kernels it
    // was widened to `f32` at load, the same bytes as the `F32` file's).
    assert_eq!(bf16.decode_weight_bytes() * 2, f32.decode_weight_bytes());

    for (name, prompt) in prompts() {
        let mut tokens = ids(&prompt["prompt_ids"]);
        tokens.extend(ids(&prompt["greedy_ids"]));
        // A prefill, one token at a time (decode), and nine-row passes (a drafted run of
        // eight being verified).
        for passes in [Passes::One, Passes::Slices(1), Passes::Slices(9)] {
            let (a, b) = (
                all_logits(&bf16, &tokens, passes),
                all_logits(&f32, &tokens, passes),
            );
            assert_eq!(a.len(), b.len());
            let differ = a
                .iter()
                .zip(&b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            assert_eq!(differ, 0, "{name} {passes:?}: {differ} logits differ");
        }
    }

    let generate = |path: &Path| {
        kindle(&[
            "generate",
            "-m",
            path.to_str().unwrap(),
            "-n",
            "24",
            "--temperature",
            "0",
            "The capital of France is",
        ])
    };
    let text = generate(&bf16_path);
    assert!(text.contains("Paris"), "{text}");
    assert_eq!(text, generate(&f32_path));
}

#[test]
fn a_bfloat16_hf_directory_stays_bf16() {
    let Some(model) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().unwrap();
    let bf16_path = dir.path().join("bf16.gguf");
    let hf = dir.path().join("hf");
    let back = dir.path().join("back.gguf");
    quantize(&model, &bf16_path, "bf16");
    let (file, hf_s) = (bf16_path.to_str().unwrap(), hf.to_str().unwrap());
    kindle(&["convert", file, hf_s, "--to", "hf", "--dtype", "bf16"]);
    kindle(&["convert", hf_s, back.to_str().unwrap()]);
    // Every matrix back in BF16 with the file's bytes (Llama's q/k row permutation undone
    // and redone exactly); the norms F32 in both.
    let (a, b) = (
        GgufFile::open(&bf16_path).unwrap(),
        GgufFile::open(&back).unwrap(),
    );
    assert_eq!(b.get_u64("general.file_type").unwrap(), 32);
    for t in a.tensors() {
        let u = b
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} is missing", t.name));
        assert_eq!(u.ty, t.ty, "{}", t.name);
        assert!(
            a.tensor_bytes(t) == b.tensor_bytes(u),
            "{}: other bytes",
            t.name
        );
    }

    let greedy = |m: &str| {
        kindle(&[
            "generate",
            "-m",
            m,
            "-n",
            "24",
            "--temperature",
            "0",
            "The capital of France is",
        ])
    };
    assert_eq!(greedy(hf_s), greedy(file));
    // `kindle bench` sizes a directory by the tensors it converts to: the file's.
    let rows: serde_json::Value = serde_json::from_str(
        kindle(&[
            "bench", "-m", hf_s, "-p", "4", "-n", "2", "-r", "1", "--json",
        ])
        .trim(),
    )
    .unwrap();
    let tensor_bytes: u64 = a.tensors().iter().map(|t| t.n_bytes()).sum();
    assert_eq!(rows[0]["size_bytes"].as_u64(), Some(tensor_bytes));
}
