//! The error type of the crate.

use std::path::PathBuf;

use kindle_gguf::GgufError;

/// Errors raised while building a tokenizer or encoding/decoding with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The text holds a character that no token of the vocabulary can represent.
    #[error("the text has a character the vocabulary cannot represent: {ch:?} at byte {offset}")]
    Unencodable {
        /// The character.
        ch: char,
        /// Its byte offset in the text.
        offset: usize,
    },
    /// `tokenizer.ggml.model` names a tokenizer model that kindle cannot build.
    #[error(
        "unsupported tokenizer model `{0}` (tokenizer.ggml.model): kindle builds byte-level BPE \
         (`gpt2`) and SentencePiece (`llama`) vocabularies"
    )]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer kindle does not know.
    #[error("unknown pre-tokenizer `{0}` (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// A required metadata key is absent.
    #[error("missing tokenizer metadata key `{0}`")]
    MissingKey(String),
    /// A metadata key is present but has the wrong type or an invalid value.
    #[error("malformed tokenizer metadata key `{key}`: {reason}")]
    MalformedKey {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `tokenizer.ggml.token_type` does not have one entry per token.
    #[error("vocabulary has {tokens} tokens but {types} token types (tokenizer.ggml.token_type)")]
    TokenTypeCountMismatch {
        /// Number of tokens.
        tokens: usize,
        /// Number of token types.
        types: usize,
    },
    /// A per-token array (such as `tokenizer.ggml.scores`) does not have one entry per token.
    #[error(
        "`{key}` has {len} entries but the vocabulary (tokenizer.ggml.tokens) has {tokens} tokens"
    )]
    LengthMismatch {
        /// The metadata key of the array.
        key: &'static str,
        /// Its number of entries.
        len: usize,
        /// Number of tokens.
        tokens: usize,
    },
    /// A SentencePiece vocabulary has no byte-fallback token for a byte, so text holding that
    /// byte outside any piece could not be tokenized.
    #[error(
        "the SentencePiece vocabulary (tokenizer.ggml.tokens) has no byte-fallback token \
         `<0x{0:02X}>` for byte 0x{0:02X}"
    )]
    MissingByteToken(u8),
    /// A special token id (BOS, EOS, ...) is not a valid token id.
    #[error("{which} token id {id} is out of range for a vocabulary of {vocab_size} tokens")]
    SpecialIdOutOfRange {
        /// Which special token (`"bos"`, `"eos"`, `"unk"`, `"pad"`, `"eot"`, `"eom"`).
        which: &'static str,
        /// The offending id.
        id: u64,
        /// Number of tokens in the vocabulary.
        vocab_size: usize,
    },
    /// `add_bos`/`add_eos` is set but the corresponding token id is unknown.
    #[error("the vocabulary asks for a {0} token to be added but has no {0} token id")]
    MissingSpecialToken(&'static str),
    /// A merge rule is not of the form `"left right"`.
    #[error("merge #{index} `{merge}` is malformed: expected two tokens separated by a space")]
    MalformedMerge {
        /// Index of the merge in `tokenizer.ggml.merges`.
        index: usize,
        /// The merge text.
        merge: String,
    },
    /// A merge rule references a token (or produces one) that is not in the vocabulary.
    #[error("merge #{index} `{merge}` references `{token}`, which is not in the vocabulary")]
    UnknownMergeToken {
        /// Index of the merge in `tokenizer.ggml.merges`.
        index: usize,
        /// The merge text.
        merge: String,
        /// The missing token.
        token: String,
    },
    /// A token id passed to [`Tokenizer::decode`](crate::Tokenizer::decode) is not in the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size} tokens")]
    TokenIdOutOfRange {
        /// The offending id.
        id: u32,
        /// Number of tokens in the vocabulary.
        vocab_size: usize,
    },
    /// Reading a tokenizer file failed.
    #[error("failed to read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The GGUF metadata could not be read (other than a missing or malformed key).
    #[error("cannot read tokenizer metadata: {0}")]
    Metadata(#[source] GgufError),
    /// The `tokenizers` crate failed to build or load the tokenizer.
    #[error("failed to build tokenizer: {0}")]
    Build(String),
    /// The `tokenizers` crate failed to encode text.
    #[error("failed to encode text: {0}")]
    Encode(String),
    /// The `tokenizers` crate failed to decode token ids.
    #[error("failed to decode token ids: {0}")]
    Decode(String),
}

/// Result alias for this crate.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// A key missing from or malformed in the GGUF metadata keeps its name: a missing key becomes
/// [`TokenizerError::MissingKey`] and a value of the wrong type
/// [`TokenizerError::MalformedKey`]; any other GGUF error is [`TokenizerError::Metadata`].
impl From<GgufError> for TokenizerError {
    fn from(err: GgufError) -> Self {
        match err {
            GgufError::MissingKey { key } => Self::MissingKey(key),
            GgufError::WrongType {
                key,
                expected,
                actual,
            } => Self::MalformedKey {
                key,
                reason: format!("should be {expected} but is {actual}"),
            },
            other => Self::Metadata(other),
        }
    }
}

/// A [`TokenizerError::MalformedKey`] for `key`.
pub(crate) fn malformed(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::MalformedKey {
        key: key.to_owned(),
        reason: reason.into(),
    }
}
