//! Hugging Face model directories (config.json, safetensors, tokenizer.json) to and from GGUF.
//!
//! kindle's loader reads GGUF only, so a Hugging Face directory is converted **in memory into
//! a GGUF file** ([`HfDir::to_gguf`], [`load_gguf`]), as llama.cpp's `convert_hf_to_gguf.py`
//! does on disk: config.json becomes `{arch}.*` metadata, tensors get GGUF names (Llama's q/k
//! rows permuted to adjacent RoPE pairs, GPT-2's Conv1D weights transposed, Gemma-3's norms
//! plus one), and a byte-level BPE tokenizer.json becomes `tokenizer.ggml.*` metadata. The same
//! writer writes it to disk ([`HfDir::write_gguf`]). [`write_hf`] goes the other way.
//!
//! Architectures: `LlamaForCausalLM` and `MistralForCausalLM` (GGUF `llama`),
//! `Qwen2ForCausalLM` (`qwen2`), `Qwen3ForCausalLM` (`qwen3`), `GPT2LMHeadModel` (`gpt2`), `Gemma3ForCausalLM` and the text
//! model of `Gemma3ForConditionalGeneration` (`gemma3`). Tokenizers, both ways: byte-level BPE
//! through tokenizer.json (pre-tokenizers `gpt-2`, `smollm`, `llama-bpe`, `qwen2`), and
//! SentencePiece (`llama`: Gemma, Llama-2, Mistral) through tokenizer.model, the
//! SentencePiece `ModelProto` llama.cpp reads (pieces, scores and types; added tokens from
//! added_tokens.json and tokenizer_config.json's `added_tokens_decoder`; special ids from
//! tokenizer_config.json, config.json, then the trainer spec), read and written here by a
//! small strict protobuf codec. tokenizer.model is preferred when the tokenizer.json beside it
//! is not byte-level BPE, as llama.cpp does.
//!
//! Safetensors files are memory-mapped and checked before use ([`SafetensorsFile`]): a
//! malformed file is an [`HfError`] naming the file and tensor, never a panic or an
//! allocation sized by an unchecked header number.
//!
//! ```
//! use kindle_gguf::{GgufFile, GgufWriter};
//! use kindle_hf::{HfDir, HfDtype, ToGgufOptions, write_hf_with, HfWriteOptions};
//!
//! // A one-layer Llama as a GGUF file ...
//! let (d, ff, vocab) = (4u64, 8u64, 6u64);
//! let ramp = |n: u64| (0..n).map(|i| i as f32 * 0.25).collect::<Vec<f32>>();
//! let mut w = GgufWriter::new()
//!     .metadata("general.architecture", "llama")
//!     .metadata("llama.block_count", 1u32)
//!     .metadata("llama.context_length", 64u32)
//!     .metadata("llama.embedding_length", d as u32)
//!     .metadata("llama.feed_forward_length", ff as u32)
//!     .metadata("llama.attention.head_count", 2u32)
//!     .metadata("llama.attention.head_count_kv", 1u32)
//!     .metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
//!     .tensor_f32("token_embd.weight", &[d, vocab], &ramp(d * vocab))
//!     .tensor_f32("output_norm.weight", &[d], &ramp(d));
//! for (name, dims) in [
//!     ("attn_norm", vec![d]), ("attn_q", vec![d, d]), ("attn_k", vec![d, 2]),
//!     ("attn_v", vec![d, 2]), ("attn_output", vec![d, d]), ("ffn_norm", vec![d]),
//!     ("ffn_gate", vec![d, ff]), ("ffn_up", vec![d, ff]), ("ffn_down", vec![ff, d]),
//! ] {
//!     let n = dims.iter().product();
//!     w = w.tensor_f32(format!("blk.0.{name}.weight"), &dims, &ramp(n));
//! }
//! let gguf = GgufFile::from_bytes(w.to_bytes())?;
//!
//! // ... written as a Hugging Face directory, and read back as a GGUF file.
//! let dir = std::env::temp_dir().join(format!("kindle-hf-doc-{}", std::process::id()));
//! write_hf_with(&gguf, &dir, &HfWriteOptions { dtype: HfDtype::F32, tokenizer: false })?;
//! let hf = HfDir::open(&dir)?;
//! assert_eq!(hf.config().n_kv_heads, 1);
//! let options = ToGgufOptions { tokenizer: false, ..ToGgufOptions::default() };
//! let back = hf.to_gguf_file(&options)?;
//! for info in gguf.tensors() {
//!     assert_eq!(back.dequantize(&info.name)?, gguf.dequantize(&info.name)?, "{}", info.name);
//! }
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod error;
mod export;
mod hf_dir;
mod json;
pub mod names;
mod pre_tokenizer;
mod rope;
mod safetensors_file;
mod spm_proto;
mod vocab_export;
mod vocab_import;
mod vocab_spm;

use std::path::Path;

pub use config::{Arch, ModelConfig, RopeScaling, SUPPORTED_ARCHITECTURES};
pub use error::{HfError, Result};
pub use export::{HfDtype, HfWriteOptions, write_hf, write_hf_with};
pub use hf_dir::{HfDir, ToGgufOptions};
pub use rope::Llama3Scaling;
pub use safetensors_file::{MAX_HEADER_LEN, SafetensorsFile, SafetensorsTensor};

/// Whether `path` is a Hugging Face model directory (a directory with a config.json), the
/// test the CLI can use to tell `-m dir` from `-m file.gguf`.
pub fn is_hf_dir(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    path.is_dir() && path.join("config.json").is_file()
}

/// The pieces of a SentencePiece `tokenizer.model` (the `ModelProto` protobuf) as
/// `(piece, score, type)` with sentencepiece's type codes (1 normal, 2 unknown, 3 control,
/// 4 user-defined, 5 unused, 6 byte); a malformed file is an [`HfError::Tokenizer`] naming
/// the problem and its byte offset.
pub fn read_tokenizer_model(bytes: &[u8]) -> Result<Vec<(String, f32, i32)>> {
    Ok(spm_proto::parse(bytes)?
        .pieces
        .into_iter()
        .map(|p| (p.piece, p.score, p.ty))
        .collect())
}

/// Opens the Hugging Face directory `dir` and converts it to an in-memory GGUF file with the
/// default options (tensors kept as F32, F16 or BF16; tokenizer included).
pub fn load_gguf(dir: impl AsRef<Path>) -> Result<kindle_gguf::GgufFile> {
    HfDir::open(dir)?.to_gguf_file(&ToGgufOptions::default())
}
