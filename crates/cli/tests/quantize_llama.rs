//! `kindle quantize` against `llama-quantize` on the real models: for ten file types of
//! SmolLM2 (the K-quant mixtures `Q4_K_M`, `Q5_K_M`, `Q3_K_M`, `Q4_K_S`, `Q2_K`, and `Q6_K`,
//! `Q5_0`, `BF16`, and the non-linear `IQ4_NL`, `IQ4_XS`) and four of Gemma-3 (`Q4_K_M`,
//! `Q2_K`, `IQ4_XS`: its 640-wide matrices and four query heads a key head take other
//! branches; `BF16`), every tensor has llama-quantize's type and llama-quantize's
//! bytes, and the whole file is llama-quantize's byte for byte (their sha256 in
//! `testdata/reference/llama-quantize-*.json`, written by `llama_quantize_digests.py` beside
//! them from llama-quantize's own files).

mod common;

use std::path::Path;
use std::process::Command;

use kindle_gguf::GgufFile;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn reference(model: &str) -> Value {
    let path = format!(
        "{}/../../testdata/reference/llama-quantize-{model}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("the reference is JSON")
}

/// `(name, type, sha256 of the bytes)` of every tensor of `file`, by name.
fn digests(file: &GgufFile) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = file
        .tensors()
        .iter()
        .map(|t| {
            let digest = Sha256::digest(file.tensor_bytes(t));
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            (t.name.clone(), t.ty.name().to_string(), hex)
        })
        .collect();
    out.sort();
    out
}

/// The tensors of `got` that differ from the reference's `want`, named.
fn differences(got: &[(String, String, String)], want: &Value) -> Vec<String> {
    let want = want.as_array().expect("tensors");
    let mut out = Vec::new();
    if got.len() != want.len() {
        out.push(format!(
            "{} tensors, llama-quantize wrote {}",
            got.len(),
            want.len()
        ));
    }
    for ((name, ty, sha), w) in got.iter().zip(want) {
        let field = |key: &str| w[key].as_str().expect("a string field");
        let (wname, wty, wsha) = (field("name"), field("type"), field("sha256"));
        if wname != name {
            out.push(format!("tensor {name}, llama-quantize has {wname}"));
        } else if wty != ty {
            out.push(format!("{name}: {ty}, llama-quantize chose {wty}"));
        } else if wsha != sha {
            out.push(format!("{name} ({ty}): other bytes than llama-quantize's"));
        }
    }
    out
}

/// `kindle quantize model out --type ftype extra...`, which must succeed.
fn quantize(model: &Path, out: &Path, ftype: &str, extra: &[&str]) {
    let run = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["quantize", model.to_str().unwrap(), out.to_str().unwrap()])
        .args(["--type", &ftype.to_ascii_lowercase()])
        .args(extra)
        .output()
        .expect("running kindle");
    assert!(
        run.status.success(),
        "kindle quantize --type {ftype} {extra:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Every file type of `reference` made from `model` by `kindle quantize`, against it.
fn check_against(model: &Path, reference: &Value, count: usize) {
    let files = reference["files"].as_object().expect("files");
    assert_eq!(files.len(), count, "file types in the reference");
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (ftype, want) in files {
        let out = dir.path().join(format!("{ftype}.gguf"));
        quantize(model, &out, ftype, &[]);
        let file = GgufFile::open(&out).unwrap();
        let id = file.get_u64("general.file_type").unwrap();
        if Some(id) != want["file_type"].as_u64() {
            failures.push(format!("{ftype}: general.file_type {id}"));
        }
        let tensors = differences(&digests(&file), &want["tensors"]);
        for d in &tensors {
            failures.push(format!("{ftype}: {d}"));
        }
        // Then the whole file: the metadata in llama-quantize's order and the tensors in its.
        let whole = Sha256::digest(std::fs::read(&out).unwrap());
        let whole: String = whole.iter().map(|b| format!("{b:02x}")).collect();
        if tensors.is_empty() && want["file_sha256"] != whole.as_str() {
            failures.push(format!(
                "{ftype}: the tensors are llama-quantize's, the file is not"
            ));
        }
        std::fs::remove_file(&out).unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantize_writes_llama_quantize_s_smollm2_files() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    check_against(&model, &reference("smollm2"), 10);
}

#[test]
fn quantize_writes_llama_quantize_s_gemma3_files() {
    let Some(model) = common::gemma3_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    check_against(&model, &reference("gemma3"), 4);
}

/// The comparison above can fail: the `--pure` file (every matrix `Q4_K` or its fallback) is
/// named as another choice of types, and a file whose bytes differ (the source itself, against
/// its own types) as other bytes.
#[test]
fn a_different_file_is_caught() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let reference = reference("smollm2");
    let want = &reference["files"]["Q4_K_M"]["tensors"];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pure.gguf");
    quantize(&model, &out, "q4_k_m", &["--pure"]);
    let pure = differences(&digests(&GgufFile::open(&out).unwrap()), want);
    assert!(
        pure.iter()
            .any(|d| d.contains("token_embd.weight: Q5_0, llama-quantize chose Q8_0")),
        "{pure:?}"
    );
    assert!(
        pure.iter()
            .any(|d| d.contains("blk.0.ffn_down.weight: Q4_K, llama-quantize chose Q6_K"))
    );
    // The Q4_1 file's tensors under the Q4_K_M file's types: the same names, other bytes.
    let mut source = digests(&GgufFile::open(&model).unwrap());
    for ((_, ty, _), w) in source.iter_mut().zip(want.as_array().unwrap()) {
        *ty = w["type"].as_str().unwrap().to_string();
    }
    let other = differences(&source, want);
    assert!(other.iter().any(|d| d.contains("other bytes")), "{other:?}");
}

/// `--pure` keeps the file type it was given (llama-quantize `--pure` names the file so):
/// `q4_k_s` is 14 and `q3_k_l` 13, not their `_m` siblings' 15 and 12.
#[test]
fn pure_files_keep_their_file_type() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().unwrap();
    for (ty, id) in [("q4_k_s", 14), ("q3_k_l", 13)] {
        let out = dir.path().join(format!("{ty}.gguf"));
        quantize(&model, &out, ty, &["--pure"]);
        let file = GgufFile::open(&out).unwrap();
        assert_eq!(file.get_u64("general.file_type").unwrap(), id, "{ty}");
    }
}

/// Bad input: a weight that is not a number is refused naming the tensor (llama-quantize
/// refuses such a file too), and the input under another name is not overwritten.
#[test]
fn broken_weights_and_the_input_by_another_name_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("nan.gguf");
    let mut values = vec![0.5f32; 32 * 4];
    values[70] = f32::NAN;
    kindle_gguf::GgufWriter::new()
        .metadata("general.architecture", "llama")
        .metadata("llama.block_count", kindle_gguf::MetadataValue::U32(1))
        .tensor_f32("blk.0.ffn_up.weight", &[32, 4], &values)
        .write(&input)
        .unwrap();
    let run = |output: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_kindle"))
            .args([
                "quantize",
                input.to_str().unwrap(),
                output.to_str().unwrap(),
            ])
            .args(["--type", "q8_0"])
            .output()
            .unwrap()
    };
    let out = run(&dir.path().join("out.gguf"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("tensor blk.0.ffn_up.weight holds NaN at value 70"),
        "{stderr}"
    );
    assert!(!dir.path().join("out.gguf").exists());
    let before = std::fs::read(&input).unwrap();
    let out = run(&dir.path().join(".").join("nan.gguf"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the output would overwrite the input"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&input).unwrap(), before);
}
