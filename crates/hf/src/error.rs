//! Errors of the Hugging Face converter.

use std::io;
use std::path::PathBuf;

use kindle_gguf::{GgmlType, GgufError, QuantError};
use thiserror::Error;

/// Why a Hugging Face directory could not be read or written, or converted.
///
/// Every variant names the file, key or tensor at fault.
#[derive(Debug, Error)]
pub enum HfError {
    /// A file could not be opened, mapped, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A JSON file (config, index, tokenizer) is not valid JSON, or not an object.
    #[error("{}: invalid JSON: {reason}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A required key is missing from a JSON file.
    #[error("{}: missing key `{key}`", path.display())]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key (dotted for nested keys).
        key: String,
    },
    /// A key of a JSON file has the wrong type or an invalid value.
    #[error("{}: key `{key}` should be {expected}, found {found}", path.display())]
    WrongType {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What it should be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// `architectures[0]` of config.json (or a GGUF's `general.architecture`) is not one
    /// kindle converts.
    #[error("unsupported architecture `{name}`: supported are {}", supported.join(", "))]
    UnsupportedArchitecture {
        /// The architecture named by the file.
        name: String,
        /// The ones that are supported.
        supported: Vec<&'static str>,
    },
    /// A setting kindle cannot convert (a rotary scaling type, a layer pattern, ...).
    #[error("`{key}`: {reason}")]
    Unsupported {
        /// The key (config.json or GGUF metadata).
        key: String,
        /// Why.
        reason: String,
    },
    /// The directory holds neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{}: no model.safetensors or model.safetensors.index.json", dir.display())]
    NoWeights {
        /// The directory.
        dir: PathBuf,
    },
    /// A shard named by `model.safetensors.index.json` is not there.
    #[error("{}: shard `{shard}` (of tensor `{tensor}`) does not exist", index.display())]
    MissingShard {
        /// The index file.
        index: PathBuf,
        /// The shard's file name.
        shard: String,
        /// A tensor the index places in it.
        tensor: String,
    },
    /// A tensor the index places in a shard is not in that shard.
    #[error("{}: tensor `{tensor}` is not in this shard, as the index says", shard.display())]
    TensorNotInShard {
        /// The shard.
        shard: PathBuf,
        /// The tensor.
        tensor: String,
    },
    /// A safetensors file shorter than its 8-byte header length.
    #[error("{}: {len} bytes is too short for a safetensors file (8-byte header length)", file.display())]
    TooShort {
        /// The file.
        file: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The header length is above the bound (100 MB, as the safetensors crate).
    #[error("{}: header length {len} is above the {max}-byte limit", file.display())]
    HeaderTooLarge {
        /// The file.
        file: PathBuf,
        /// The header length read.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The header length points past the end of the file.
    #[error("{}: header of {len} bytes ends past the end of the file ({file_len} bytes)", file.display())]
    HeaderPastEnd {
        /// The file.
        file: PathBuf,
        /// The header length read.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The header is not UTF-8 JSON holding an object.
    #[error("{}: invalid header: {reason}", file.display())]
    InvalidHeader {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The header names a tensor twice.
    #[error("{}: tensor `{tensor}` appears twice in the header", file.display())]
    DuplicateTensor {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
    },
    /// A tensor entry is not `{dtype, shape, data_offsets}` of the right types.
    #[error("{}: tensor `{tensor}`: {reason}", file.display())]
    InvalidTensorInfo {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's data offsets lie outside the data section.
    #[error(
        "{}: tensor `{tensor}`: data offsets [{start}, {end}) outside the {data_len}-byte data section",
        file.display()
    )]
    OffsetsOutOfBounds {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// First offset.
        start: u64,
        /// End offset.
        end: u64,
        /// Bytes of data after the header.
        data_len: u64,
    },
    /// A tensor's byte length does not match its dtype and shape.
    #[error(
        "{}: tensor `{tensor}`: {layout} needs {expected} bytes, its offsets span {actual}",
        file.display()
    )]
    SizeMismatch {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype and shape, as `F16 [3, 4]`.
        layout: String,
        /// Bytes the dtype and shape need (or why they cannot be counted).
        expected: String,
        /// Bytes its offsets span.
        actual: u64,
    },
    /// Two tensors' data overlap.
    #[error("{}: the data of tensors `{first}` and `{second}` overlap", file.display())]
    Overlap {
        /// The file.
        file: PathBuf,
        /// The tensor that starts first.
        first: String,
        /// The one that starts inside it.
        second: String,
    },
    /// What the `safetensors` crate rejects beyond the checks above (gaps between tensors,
    /// bytes after the last tensor).
    #[error("{}: {source}", file.display())]
    Safetensors {
        /// The file.
        file: PathBuf,
        /// The crate's error.
        source: safetensors::SafeTensorError,
    },
    /// A tensor of a dtype kindle does not convert (only F32, F16 and BF16).
    #[error("tensor `{tensor}`: dtype {dtype} is not supported (F32, F16 and BF16 are)")]
    UnsupportedDtype {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
    },
    /// A tensor name with no mapping for the architecture.
    #[error("tensor `{tensor}` has no {arch} mapping")]
    UnknownTensor {
        /// The tensor.
        tensor: String,
        /// The architecture.
        arch: &'static str,
    },
    /// A tensor the conversion needs is not there.
    #[error("missing tensor `{tensor}`")]
    MissingTensor {
        /// The tensor.
        tensor: String,
    },
    /// A tensor's shape does not fit the model's configuration.
    #[error("tensor `{tensor}`: {reason}")]
    BadShape {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The GGUF side: a missing or malformed key or tensor.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Quantising or dequantising a tensor failed.
    #[error("tensor `{tensor}` as {ty}: {reason}")]
    Quant {
        /// The tensor.
        tensor: String,
        /// The GGML type.
        ty: GgmlType,
        /// The error (in the message, not a `source` that error chains print again).
        reason: QuantError,
    },
    /// The tokenizer files cannot be converted.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A pre-tokenizer whose split pattern kindle does not know as a GGUF `pre` name.
    #[error("tokenizer: unknown pre-tokenizer {pattern}; known: gpt-2, smollm, llama-bpe, qwen2")]
    UnknownPreTokenizer {
        /// The pattern(s), as written in tokenizer.json.
        pattern: String,
    },
}

/// `Result` with [`HfError`].
pub type Result<T, E = HfError> = std::result::Result<T, E>;

/// An [`HfError::Io`] for `path`.
pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> HfError {
    let path = path.into();
    move |source| HfError::Io { path, source }
}
