//! kindle-model's GGUF reader, dequantisation and tokenizer compiled without Burn, with the same
//! module layout (`crate::gguf`, `crate::quant`, `crate::tokenizer`) so the sources compile
//! unchanged.

#![allow(dead_code)]

#[path = "../../crates/model/src/gguf/mod.rs"]
pub mod gguf;
#[path = "../../crates/model/src/quant.rs"]
pub mod quant;
#[path = "../../crates/model/src/tokenizer.rs"]
pub mod tokenizer;

/// Path of the real model: `$KINDLE_MODEL`, else the default cache location.
pub fn model_path() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("KINDLE_MODEL") {
        return path.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}
