//! Helpers shared by the CLI's test binaries: the real model (found the way the fetcher finds
//! it), the llama.cpp reference outputs ([`reference`] checks a model against them) and tiny
//! model files ([`tiny`]).

#![allow(dead_code)]

pub mod reference;
pub mod server;
pub mod tiny;
pub mod tiny_hf;

use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The real model ([`kindle_fetch::real_model_for_tests`]): `$KINDLE_MODEL`, else the default
/// model in the cache folder (`$KINDLE_CACHE_DIR`, `$XDG_CACHE_HOME/kindle/models`,
/// `~/.cache/kindle/models`), fetched if missing. Panics naming where it looked when it cannot
/// be found. `None` only with `KINDLE_SKIP_REAL_MODEL=1`: a test that needs the model begins
/// with `let Some(..) = real_model() else { return };`.
pub fn real_model() -> Option<PathBuf> {
    kindle_fetch::real_model_for_tests()
}

/// [`real_model`]'s path, for the helpers of a test that began by checking [`real_model`].
///
/// # Panics
///
/// As [`real_model`], and when `KINDLE_SKIP_REAL_MODEL=1` is set (the test did not check).
pub fn model_path() -> PathBuf {
    real_model().expect(
        "KINDLE_SKIP_REAL_MODEL=1 is set, but this test needs the real model and did not return \
         when `common::real_model()` gave None",
    )
}

/// A real model whose llama.cpp reference outputs are in `testdata/reference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealModel {
    /// SmolLM2-135M-Instruct Q4_1 (llama architecture, byte-level BPE): the default model.
    SmolLM2,
    /// Gemma-3 270M Q4_K_M (gemma3 architecture, SentencePiece vocabulary).
    Gemma3,
}

impl RealModel {
    /// The model file ([`real_model`] for SmolLM2, [`gemma3_model`] for Gemma-3); `None` only
    /// with `KINDLE_SKIP_REAL_MODEL=1`.
    pub fn path(self) -> Option<PathBuf> {
        match self {
            RealModel::SmolLM2 => real_model(),
            RealModel::Gemma3 => gemma3_model(),
        }
    }

    /// llama.cpp's outputs on this model, parsed once.
    pub fn reference(self) -> &'static Value {
        static SMOLLM2: OnceLock<Value> = OnceLock::new();
        static GEMMA3: OnceLock<Value> = OnceLock::new();
        let (cell, name) = match self {
            RealModel::SmolLM2 => (&SMOLLM2, "smollm2-135m-instruct-q4_1.json"),
            RealModel::Gemma3 => (&GEMMA3, "gemma3-270m-q4_k_m.json"),
        };
        cell.get_or_init(|| reference_file(name))
    }

    /// The reference prompts, by name.
    pub fn prompts(self) -> Vec<(String, &'static Value)> {
        self.reference()["prompts"]
            .as_object()
            .expect("prompts")
            .iter()
            .map(|(k, v)| (k.clone(), v))
            .collect()
    }
}

/// The Gemma-3 model ([`kindle_fetch::fetchable_model_for_tests`]): in the cache folder
/// (`$KINDLE_CACHE_DIR`, `$XDG_CACHE_HOME/kindle/models`, `~/.cache/kindle/models`), fetched
/// if missing; panics naming where it looked when it cannot be had. `None` only with
/// `KINDLE_SKIP_REAL_MODEL=1`.
pub fn gemma3_model() -> Option<PathBuf> {
    kindle_fetch::fetchable_model_for_tests(&kindle_fetch::GEMMA3_270M)
}

/// llama.cpp's reference outputs on SmolLM2 ([`RealModel::SmolLM2`]).
pub fn reference() -> &'static Value {
    RealModel::SmolLM2.reference()
}

/// `testdata/reference/<name>`, parsed.
pub fn reference_file(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("parsing the reference JSON")
}

/// The sha256 of a file's bytes, in hex (what the references name the files they were made
/// on by).
pub fn sha256_hex(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A GGUF model on the flex device with its kernels' activations in `format`.
pub fn load_with_activations(
    path: &std::path::Path,
    format: kindle_model::ActivationFormat,
) -> kindle_model::Llama {
    let file =
        kindle_gguf::GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let model = kindle_model::Llama::load(&file, &kindle_model::OpenDevice::flex()).unwrap();
    let options = model.kernels().options().with_activations(format);
    model.with_kernels(kindle_model::Kernels::new(options))
}

/// The GGUF file `from` written to `to` with each tensor's bytes passed through `change`
/// (metadata and shapes kept): a slightly wrong model, for a check that must catch it.
pub fn rewrite_tensors(
    from: &std::path::Path,
    to: &std::path::Path,
    mut change: impl FnMut(&kindle_gguf::TensorInfo, &mut [u8]),
) {
    let file = kindle_gguf::GgufFile::open(from).unwrap();
    let mut w = kindle_gguf::GgufWriter::new();
    for (key, value) in file.metadata() {
        w = w.metadata(key.clone(), value.clone());
    }
    for t in file.tensors() {
        let mut bytes = file.tensor_bytes(t).to_vec();
        change(t, &mut bytes);
        w = w.tensor(t.name.clone(), &t.dims, t.ty, bytes);
    }
    w.write(to).unwrap();
}

/// The prompts of a reference object (`{"name": {...}, ...}`), by name.
pub fn named_prompts(prompts: &Value) -> Vec<(String, &Value)> {
    prompts
        .as_object()
        .expect("prompts")
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect()
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

/// The SmolLM2 reference prompts, by name.
pub fn prompts() -> Vec<(String, &'static Value)> {
    RealModel::SmolLM2.prompts()
}
