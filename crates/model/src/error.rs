//! The model crate's error type.

use kindle_gguf::GgufError;
use kindle_kv_cache::KvCacheError;
use kindle_tokenizer::TokenizerError;
use thiserror::Error;

/// What went wrong loading or running a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The tokenizer could not be built or used.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The device could not be opened or cannot run the asked float type.
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// An option of the run is out of range (for example zero threads).
    #[error("{0}")]
    Option(String),
    /// The KV cache refused an operation.
    #[error(transparent)]
    Cache(#[from] KvCacheError),
    /// `general.architecture` names an architecture kindle cannot run.
    #[error(
        "unsupported model architecture '{0}' (kindle runs: llama, qwen2, qwen3, gemma3, gpt2)"
    )]
    UnsupportedArchitecture(String),
    /// A position past the last learned position embedding (GPT-2's context length).
    #[error(
        "position {position} is past the model's {limit} learned positions (its context length)"
    )]
    PastLearnedPositions {
        /// The position asked for.
        position: usize,
        /// How many positions the model has embeddings for.
        limit: usize,
    },
    /// A hyperparameter is missing, out of range or inconsistent with another.
    #[error("bad hyperparameter {key}: {problem}")]
    Hyperparameter {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("required tensor '{0}' is missing from the model file")]
    MissingTensor(String),
    /// The file holds a tensor the architecture, as kindle runs it, does not read (llama.cpp
    /// refuses a file with tensors it does not create; one it does create and kindle lacks,
    /// a bias say, would be silently left out).
    #[error(
        "tensor '{name}' is in the model file but kindle's {arch} does not read it: running \
         without it would give other numbers than the model's"
    )]
    UnexpectedTensor {
        /// The tensor.
        name: String,
        /// The architecture (`general.architecture`).
        arch: String,
    },
    /// A tensor's shape does not match the hyperparameters.
    #[error("tensor '{name}' has shape {got:?}, expected {expected:?} from the hyperparameters")]
    TensorShape {
        /// The tensor.
        name: String,
        /// The shape the hyperparameters imply.
        expected: Vec<u64>,
        /// The shape in the file.
        got: Vec<u64>,
    },
    /// A forward pass was asked to run on no tokens.
    #[error("a forward pass needs at least one token")]
    EmptyInput,
    /// A token id is not in the vocabulary.
    #[error("token id {token} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// Tokens in the vocabulary.
        vocab_size: usize,
    },
    /// A KV cache said its storage is host memory but gave no host view of a layer (a
    /// [`KvStore`](kindle_kv_cache::KvStore) implementation breaking its contract).
    #[error("the KV cache is host resident but gave no host view of layer {layer}")]
    HostCache {
        /// The layer asked for.
        layer: usize,
    },
    /// Reading results back from the device failed.
    #[error("reading tensor data back from the device failed: {0}")]
    Readback(String),
}

/// What a failed device execution says, shortened for a person: Burn's error lists every op
/// it skipped after the failure (thousands of lines); the cause is its last `Caused by:` line,
/// and a buffer the device refused is named with its size.
pub(crate) fn device_error_text(error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    let cause = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.to_lowercase().contains("backtrace"))
        .rev()
        .find(|line| !line.starts_with("Asked at") && !line.starts_with("Caused by"))
        .unwrap_or("the device failed")
        .to_string();
    match cause.strip_prefix("can't allocate buffer of size: ") {
        Some(bytes) => format!(
            "the device refused a buffer of {bytes} bytes (larger than one buffer may be there, \
             or its memory is full)"
        ),
        None => cause,
    }
}

#[cfg(test)]
mod tests {
    use super::device_error_text;

    #[test]
    fn a_refused_buffer_is_named_with_its_size() {
        let burn = "An error happened during execution\nCaused by:\n  Several failures at once\n\
                    Caused by:\n  skipped `MatmulEntry`: it needed memory 7\nCaused by:\n  An IO \
                    error happened\nCaused by:\n  can't allocate buffer of size: 671088640\n\
                    \n\nBacktrace:\nNo backtrace available\nAsked at:\nNo backtrace available\n";
        assert_eq!(
            device_error_text(&burn),
            "the device refused a buffer of 671088640 bytes (larger than one buffer may be there, \
             or its memory is full)"
        );
        assert_eq!(
            device_error_text(&"Caused by:\n  the queue was lost\n"),
            "the queue was lost"
        );
    }
}
