//! Tokenizer: a Hugging Face [`tokenizers::Tokenizer`] built from GGUF tokenizer metadata (or
//! loaded from a `tokenizer.json`), wrapped so that it tokenizes exactly like llama.cpp.
//!
//! # Example
//!
//! ```
//! use kindle_tokenizer::{GgufVocab, Tokenizer};
//!
//! // A tiny byte-level BPE vocabulary: "Ġ" is the byte-level spelling of a space.
//! let vocab = GgufVocab {
//!     model: "gpt2".into(),
//!     pre: Some("gpt2".into()),
//!     tokens: ["<|end|>", "h", "i", "Ġ", "hi", "Ġhi"].map(String::from).to_vec(),
//!     merges: vec!["h i".into(), "Ġ hi".into()],
//!     token_types: vec![3, 1, 1, 1, 1, 1], // 3 = control, 1 = normal
//!     eos: Some(0),
//!     ..GgufVocab::default()
//! };
//! let tokenizer = Tokenizer::from_vocab(vocab)?;
//!
//! // With `parse_special`, control tokens written in the text become their ids.
//! assert_eq!(tokenizer.encode("hi hi<|end|>", true)?, [4, 5, 0]);
//! assert_eq!(tokenizer.id_to_piece(5), Some("Ġhi"));
//! assert_eq!(tokenizer.decode(&[4, 5, 0], true)?, "hi hi");
//! assert_eq!(tokenizer.eog_ids(), [0]);
//! # Ok::<(), kindle_tokenizer::TokenizerError>(())
//! ```
//!
//! # How llama.cpp's behaviour is reproduced
//!
//! * **Pre-tokenization.** llama.cpp splits text with a list of regexes per `tokenizer.ggml.pre`
//!   type (`regex_exprs` in `llama-vocab.cpp`); every regex splits every fragment left by the
//!   previous one, and the text between matches is kept as fragments of its own. That is
//!   exactly a [`Sequence`] of [`Split`] pre-tokenizers with
//!   [`SplitDelimiterBehavior::Isolated`], followed by a byte-level mapping
//!   (`ByteLevel { use_regex: false }`). The same regexes are used here.
//! * **BPE.** Merges are applied by rank within each fragment, as in both implementations. For
//!   `llama-bpe` (Llama 3) a fragment that is itself a token is taken whole (`ignore_merges`).
//! * **Special tokens.** Control and unknown tokens are registered as *special* added tokens and
//!   user-defined tokens as plain added tokens. With `parse_special == false` a second copy of
//!   the tokenizer with [`encode_special_tokens`](tokenizers::TokenizerImpl::set_encode_special_tokens)
//!   set tokenizes control tokens as plain text but still splits out user-defined tokens,
//!   which is what llama.cpp does.
//! * **BOS/EOS** are added only if `add_bos` / `add_eos` say so; nothing else is added.
//! * **End of generation.** [`Tokenizer::eog_ids`] follows llama.cpp: EOS, EOT, EOM, the FIM
//!   pad/repo/separator tokens and every token whose text is one of llama.cpp's end-of-turn
//!   spellings (such tokens are forced to control type, as llama.cpp does).
//!
//! Only byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`) can be built from GGUF
//! metadata; SentencePiece (`"llama"`) vocabularies are rejected with
//! [`TokenizerError::UnsupportedModel`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use kindle_gguf::{GgufFile, MetadataValue};

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
        "unsupported tokenizer model `{0}`: only byte-level BPE (`gpt2`) vocabularies are supported{hint}",
        hint = if .0 == "llama" { " (SentencePiece `llama` vocabularies are not implemented)" } else { "" }
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
    #[error("vocabulary has {tokens} tokens but {types} token types")]
    TokenTypeCountMismatch {
        /// Number of tokens.
        tokens: usize,
        /// Number of token types.
        types: usize,
    },
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
    /// A token id passed to [`Tokenizer::decode`] is not in the vocabulary.
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

/// Result alias for this module.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// Type of a vocabulary entry (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: undefined (treated like a normal token).
    Undefined,
    /// 1: an ordinary token produced by BPE.
    Normal,
    /// 2: the unknown token; special.
    Unknown,
    /// 3: a control token such as `<|im_start|>`; special.
    Control,
    /// 4: a user-defined token, always matched verbatim in text.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte token (`<0x0A>`), used by SentencePiece vocabularies.
    Byte,
}

impl TokenType {
    /// Maps the GGUF integer code to a type; unknown codes are an error.
    pub fn from_gguf(code: i32) -> Option<Self> {
        Some(match code {
            0 => Self::Undefined,
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }

    /// Whether llama.cpp treats this token as special (skipped by `decode(.., true)`, only
    /// recognised in text with `parse_special`).
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::Unknown)
    }
}

/// Tokenizer metadata as stored in a GGUF file, in a plain struct so that tokenizers can be
/// built (and tested) without a GGUF file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) is supported.
    pub model: String,
    /// `tokenizer.ggml.pre`: pre-tokenizer name (`"smollm"`, `"llama-bpe"`, `"qwen2"`, ...);
    /// `None` means llama.cpp's `default`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: token texts, indexed by id (byte-level spelling, e.g. `"Ġworld"`).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.merges`: BPE merges `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.token_type`: one [`TokenType`] code per token; empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (end of turn).
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id` (end of message).
    pub eom: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: prepend BOS when encoding.
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token`: append EOS when encoding.
    pub add_eos: bool,
    /// `tokenizer.chat_template`: Jinja chat template.
    pub chat_template: Option<String>,
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

impl GgufVocab {
    /// Reads the tokenizer metadata of a GGUF file.
    ///
    /// `tokenizer.ggml.model` and `tokenizer.ggml.tokens` are required; everything else is
    /// optional. When `add_bos_token` is absent the default is llama.cpp's: true for
    /// SentencePiece and Llama 3 (`llama-bpe`) vocabularies, false otherwise.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let model = required_str(file, KEY_MODEL)?.to_owned();
        let pre = optional_str(file, KEY_PRE)?.map(str::to_owned);
        let tokens = string_array(file, KEY_TOKENS)?.ok_or_else(|| missing(KEY_TOKENS))?;
        let merges = string_array(file, KEY_MERGES)?.unwrap_or_default();
        let token_types = match file.get(KEY_TOKEN_TYPE) {
            None => Vec::new(),
            Some(value) => array_of(value, KEY_TOKEN_TYPE)?
                .iter()
                .map(|v| {
                    v.as_i64()
                        .and_then(|t| i32::try_from(t).ok())
                        .ok_or_else(|| malformed(KEY_TOKEN_TYPE, "expected an array of integers"))
                })
                .collect::<Result<_>>()?,
        };
        let default_add_bos = model == "llama"
            || pre
                .as_deref()
                .and_then(PreTokenizer::from_name)
                .is_some_and(|p| p.add_bos_default);
        Ok(Self {
            model,
            pre,
            tokens,
            merges,
            token_types,
            bos: optional_id(file, KEY_BOS)?,
            eos: optional_id(file, KEY_EOS)?,
            unk: optional_id(file, KEY_UNK)?,
            pad: optional_id(file, KEY_PAD)?,
            eot: optional_id(file, KEY_EOT)?,
            eom: optional_id(file, KEY_EOM)?,
            add_bos: optional_bool(file, KEY_ADD_BOS)?.unwrap_or(default_add_bos),
            add_eos: optional_bool(file, KEY_ADD_EOS)?.unwrap_or(false),
            chat_template: optional_str(file, KEY_CHAT_TEMPLATE)?.map(str::to_owned),
        })
    }
}

fn missing(key: &str) -> TokenizerError {
    TokenizerError::MissingKey(key.to_owned())
}

fn malformed(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::MalformedKey {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn required_str<'a>(file: &'a GgufFile, key: &str) -> Result<&'a str> {
    optional_str(file, key)?.ok_or_else(|| missing(key))
}

fn optional_str<'a>(file: &'a GgufFile, key: &str) -> Result<Option<&'a str>> {
    file.get(key)
        .map(|v| {
            v.as_str()
                .ok_or_else(|| malformed(key, "expected a string"))
        })
        .transpose()
}

fn optional_bool(file: &GgufFile, key: &str) -> Result<Option<bool>> {
    file.get(key)
        .map(|v| v.as_bool().ok_or_else(|| malformed(key, "expected a bool")))
        .transpose()
}

fn optional_id(file: &GgufFile, key: &str) -> Result<Option<u32>> {
    file.get(key)
        .map(|v| {
            v.as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| malformed(key, "expected a token id (unsigned 32-bit integer)"))
        })
        .transpose()
}

fn array_of<'a>(value: &'a MetadataValue, key: &str) -> Result<&'a [MetadataValue]> {
    value
        .as_array()
        .ok_or_else(|| malformed(key, "expected an array"))
}

fn string_array(file: &GgufFile, key: &str) -> Result<Option<Vec<String>>> {
    file.get(key)
        .map(|value| {
            array_of(value, key)?
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| malformed(key, "expected an array of strings"))
                })
                .collect()
        })
        .transpose()
}

// Regexes from llama.cpp's `llm_tokenizer_bpe` (src/llama-vocab.cpp), per pre-tokenizer type.
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const RE_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_DIGIT: &str = r"\p{N}";

/// A llama.cpp pre-tokenizer type: its split regexes and the flags it implies.
struct PreTokenizer {
    regexes: &'static [&'static str],
    /// Take a fragment whole when it is itself a token (llama.cpp `ignore_merges`).
    ignore_merges: bool,
    /// llama.cpp's default for `add_bos` when the GGUF does not say.
    add_bos_default: bool,
}

impl PreTokenizer {
    /// Looks up a `tokenizer.ggml.pre` name (`None` for names llama.cpp does not map to one of
    /// the supported regex sets).
    fn from_name(name: &str) -> Option<Self> {
        let (regexes, ignore_merges, add_bos_default): (&'static [&'static str], bool, bool) =
            match name {
                "default" => (
                    &[
                        r"[\p{P}\$\+<=>\^~\|]+",
                        RE_GPT2,
                        r"\p{N}+",
                        r"[0-9][0-9][0-9]",
                    ],
                    false,
                    false,
                ),
                "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" => (&[RE_GPT2], false, false),
                "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
                | "minerva-7b" => (&[RE_DIGIT, RE_GPT2], false, false),
                "llama-bpe" | "llama3" | "llama-v3" | "falcon3" => (&[RE_LLAMA3], true, true),
                "dbrx" | "smaug-bpe" => (&[RE_LLAMA3], false, false),
                "qwen2" | "stablelm2" | "deepseek-r1-qwen" | "megrez" => {
                    (&[RE_QWEN2], false, false)
                }
                _ => return None,
            };
        Some(Self {
            regexes,
            ignore_merges,
            add_bos_default,
        })
    }

    fn build(&self) -> Result<Sequence> {
        let mut steps = Vec::with_capacity(self.regexes.len() + 1);
        for re in self.regexes {
            let split = Split::new(
                SplitPattern::Regex((*re).to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Build(format!("pre-tokenizer regex {re:?}: {e}")))?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, true, false,
        )));
        Ok(Sequence::new(steps))
    }
}

/// Texts llama.cpp auto-detects as the end-of-turn token when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Texts of tokens llama.cpp always treats as end of generation (forcing them to control).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];
/// Texts that end generation only if the token is already a control token.
const EOG_TEXTS_IF_CONTROL: &[&str] = &["</s>"];
/// FIM pad / repository / file-separator tokens (llama.cpp adds them to the EOG set).
const FIM_EOG_TEXTS: &[&[&str]] = &[
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"],
    &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"],
    &["<|file_sep|>"],
];

/// kindle's tokenizer: byte-level BPE that reproduces llama.cpp's tokenization.
///
/// Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Clone)]
pub struct Tokenizer {
    /// Splits control tokens out of the text (`parse_special == true`).
    special: tokenizers::Tokenizer,
    /// Tokenizes control tokens as plain text (`parse_special == false`).
    plain: tokenizers::Tokenizer,
    pieces: Vec<String>,
    types: Vec<TokenType>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    chat_template: Option<String>,
    /// Bytes that no token of a byte-level vocabulary can represent (empty: not checked).
    missing_bytes: Vec<u8>,
}

/// Bytes of a byte-level BPE vocabulary without a single-byte token: byte `b` is written as the
/// character GPT-2's byte-to-unicode table maps it to.
fn missing_byte_tokens(pieces: &[String]) -> Vec<u8> {
    let known: HashSet<&str> = pieces.iter().map(String::as_str).collect();
    let mut shifted = 0u32;
    let mut missing = Vec::new();
    for byte in 0u8..=255 {
        let printable = matches!(byte, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            u32::from(byte)
        } else {
            shifted += 1;
            255 + shifted
        };
        let ch = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
        if !known.contains(ch.encode_utf8(&mut [0; 4]) as &str) {
            missing.push(byte);
        }
    }
    missing
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.pieces.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        Self::from_vocab(GgufVocab::from_gguf(file)?)
    }

    /// Builds a tokenizer from GGUF-style vocabulary metadata.
    pub fn from_vocab(vocab: GgufVocab) -> Result<Self> {
        if vocab.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(vocab.model));
        }
        let pre_name = vocab.pre.as_deref().unwrap_or("default");
        let pre = PreTokenizer::from_name(pre_name)
            .ok_or_else(|| TokenizerError::UnknownPreTokenizer(pre_name.to_owned()))?;
        let n = vocab.tokens.len();
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::Build(format!(
                "vocabulary of {n} tokens does not fit 32-bit token ids"
            )));
        }

        let mut types = if vocab.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else if vocab.token_types.len() != n {
            return Err(TokenizerError::TokenTypeCountMismatch {
                tokens: n,
                types: vocab.token_types.len(),
            });
        } else {
            vocab
                .token_types
                .iter()
                .map(|&code| {
                    TokenType::from_gguf(code).ok_or_else(|| {
                        malformed(KEY_TOKEN_TYPE, format!("unknown token type code {code}"))
                    })
                })
                .collect::<Result<Vec<_>>>()?
        };

        for (which, id) in [
            ("bos", vocab.bos),
            ("eos", vocab.eos),
            ("unk", vocab.unk),
            ("pad", vocab.pad),
            ("eot", vocab.eot),
            ("eom", vocab.eom),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::SpecialIdOutOfRange {
                    which,
                    id: u64::from(id),
                    vocab_size: n,
                });
            }
        }
        if vocab.add_bos && vocab.bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("bos"));
        }
        if vocab.add_eos && vocab.eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("eos"));
        }

        // llama.cpp: later duplicates win in the text -> id map.
        let token_to_id: HashMap<String, u32> = vocab
            .tokens
            .iter()
            .enumerate()
            .map(|(id, text)| (text.clone(), id as u32))
            .collect();

        let (eot, eom, eog) = end_of_generation(&vocab, &token_to_id, &mut types);

        let merges = parse_merges(&vocab.merges, &token_to_id)?;
        let bpe_vocab: BpeVocab = token_to_id.into_iter().collect();
        let bpe = BPE::builder()
            .vocab_and_merges(bpe_vocab, merges)
            .ignore_merges(pre.ignore_merges)
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string()))?;

        let mut special = tokenizers::Tokenizer::new(bpe);
        special.with_pre_tokenizer(Some(pre.build()?));
        special.with_decoder(Some(ByteLevelDecoder::default()));
        let added: Vec<AddedToken> = vocab
            .tokens
            .iter()
            .zip(&types)
            .filter(|(text, ty)| {
                !text.is_empty() && (ty.is_special() || **ty == TokenType::UserDefined)
            })
            .map(|(text, ty)| AddedToken::from(text.clone(), ty.is_special()).normalized(false))
            .collect();
        special.add_tokens(&added);

        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);

        let missing_bytes = missing_byte_tokens(&vocab.tokens);
        Ok(Self {
            special,
            plain,
            pieces: vocab.tokens,
            types,
            bos: vocab.bos,
            eos: vocab.eos,
            unk: vocab.unk,
            pad: vocab.pad,
            eot,
            eom,
            eog,
            add_bos: vocab.add_bos,
            add_eos: vocab.add_eos,
            chat_template: vocab.chat_template,
            missing_bytes,
        })
    }

    /// Loads a Hugging Face `tokenizer.json`.
    ///
    /// BOS/EOS/UNK/PAD tokens, `add_bos_token`/`add_eos_token` and the chat template are read
    /// from a `tokenizer_config.json` next to it when present (the chat template also from
    /// `chat_template.jinja`), extra end-of-generation ids from `generation_config.json`.
    /// Without `add_bos_token`, BOS is added if the file's post-processor adds it. Added tokens
    /// marked special count as control tokens, other added tokens as user-defined.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let json = read_to_string(path)?;
        let mut special = tokenizers::Tokenizer::from_bytes(json.as_bytes())
            .map_err(|e| TokenizerError::Build(format!("{}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let config = read_json_opt(&dir.join("tokenizer_config.json"))?;
        let generation = read_json_opt(&dir.join("generation_config.json"))?;

        let vocab = special.get_vocab(true);
        let n = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
        let mut pieces = vec![String::new(); n];
        let mut types = vec![TokenType::Normal; n];
        for (text, id) in vocab {
            pieces[id as usize] = text;
        }
        for (id, token) in special.get_added_tokens_decoder() {
            types[id as usize] = if token.special {
                TokenType::Control
            } else {
                TokenType::UserDefined
            };
        }

        let config_token = |key: &str| -> Option<u32> {
            let value = config.as_ref()?.get(key)?;
            let text = value.as_str().or_else(|| value.get("content")?.as_str())?;
            special.token_to_id(text)
        };
        let bos = config_token("bos_token");
        let eos = config_token("eos_token");
        let unk = config_token("unk_token");
        let pad = config_token("pad_token");
        let config_bool = |key: &str| -> Option<bool> { config.as_ref()?.get(key)?.as_bool() };

        // What the file's post-processor adds around a sequence.
        let framing = special
            .encode("", true)
            .map_err(|e| TokenizerError::Build(e.to_string()))?;
        let framing = framing.get_ids();
        let add_bos = config_bool("add_bos_token")
            .unwrap_or_else(|| bos.is_some() && framing.first().copied() == bos);
        let add_eos = config_bool("add_eos_token")
            .unwrap_or_else(|| eos.is_some() && eos != bos && framing.last().copied() == eos);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("bos"));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("eos"));
        }

        let chat_template = match config.as_ref().and_then(|c| c.get("chat_template")) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: take "default", else the first.
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_owned),
            _ => None,
        };
        let chat_template = match chat_template {
            Some(t) => Some(t),
            None => {
                let jinja = dir.join("chat_template.jinja");
                if jinja.is_file() {
                    Some(read_to_string(&jinja)?)
                } else {
                    None
                }
            }
        };

        let token_to_id: HashMap<String, u32> = pieces
            .iter()
            .enumerate()
            .filter(|(_, text)| !text.is_empty())
            .map(|(id, text)| (text.clone(), id as u32))
            .collect();
        let pseudo = GgufVocab {
            tokens: Vec::new(),
            eos,
            ..GgufVocab::default()
        };
        let (eot, eom, mut eog) = end_of_generation(&pseudo, &token_to_id, &mut types);
        if let Some(generation) = &generation {
            let ids = match generation.get("eos_token_id") {
                Some(serde_json::Value::Array(list)) => {
                    list.iter().filter_map(|v| v.as_u64()).collect()
                }
                Some(v) => v.as_u64().into_iter().collect(),
                None => Vec::new(),
            };
            eog.extend(
                ids.into_iter()
                    .filter(|&id| (id as usize) < n)
                    .map(|id| id as u32),
            );
            eog.sort_unstable();
            eog.dedup();
        }
        // Tokens llama.cpp forces to control type must be special added tokens too.
        let added = special.get_added_tokens_decoder();
        let forced: Vec<AddedToken> = types
            .iter()
            .enumerate()
            .filter(|&(id, ty)| {
                *ty == TokenType::Control
                    && !pieces[id].is_empty()
                    && !added.get(&(id as u32)).is_some_and(|t| t.special)
            })
            .map(|(id, _)| AddedToken::from(pieces[id].clone(), true).normalized(false))
            .collect();
        special.add_special_tokens(&forced);

        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        Ok(Self {
            special,
            plain,
            pieces,
            types,
            bos,
            eos,
            unk,
            pad,
            eot,
            eom,
            eog,
            add_bos,
            add_eos,
            chat_template,
            missing_bytes: Vec::new(),
        })
    }

    /// Tokenizes `text`.
    ///
    /// With `parse_special`, control tokens written in the text (`"<|im_start|>"`) become their
    /// ids; without it they are tokenized as ordinary text. User-defined tokens are recognised
    /// either way (as in llama.cpp). BOS/EOS are added only if the vocabulary asks for them.
    ///
    /// A character whose bytes the vocabulary cannot represent is an error naming it (llama.cpp
    /// drops such bytes silently).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.special
        } else {
            &self.plain
        };
        self.check_representable(text, parse_special)?;
        let encoding = tokenizer
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 2);
        ids.extend(self.bos.filter(|_| self.add_bos));
        ids.extend_from_slice(encoding.get_ids());
        ids.extend(self.eos.filter(|_| self.add_eos));
        Ok(ids)
    }

    /// An error for the first character whose bytes have no token, unless it lies inside the
    /// text of an added token the encoding splits out (control and unknown tokens with
    /// `parse_special`, user-defined tokens always). The scan for added tokens runs only when
    /// the text holds such a byte at all.
    fn check_representable(&self, text: &str, parse_special: bool) -> Result<()> {
        let missing = |ch: &char| {
            ch.encode_utf8(&mut [0; 4])
                .bytes()
                .any(|b| self.missing_bytes.contains(&b))
        };
        if self.missing_bytes.is_empty() || !text.chars().any(|ch| missing(&ch)) {
            return Ok(());
        }
        let mut covered = Vec::new();
        for (piece, &ty) in self.pieces.iter().zip(&self.types) {
            let split_out = ty == TokenType::UserDefined || (parse_special && ty.is_special());
            if split_out && !piece.is_empty() {
                covered.extend(
                    text.match_indices(piece.as_str())
                        .map(|(at, p)| at..at + p.len()),
                );
            }
        }
        match text
            .char_indices()
            .find(|(offset, ch)| missing(ch) && !covered.iter().any(|r| r.contains(offset)))
        {
            Some((offset, ch)) => Err(TokenizerError::Unencodable { ch, offset }),
            None => Ok(()),
        }
    }

    /// Turns token ids back into text. With `skip_special`, control and unknown tokens are
    /// dropped. Byte sequences that are not valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.pieces.len()) {
            return Err(TokenizerError::TokenIdOutOfRange {
                id,
                vocab_size: self.pieces.len(),
            });
        }
        self.special
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// The raw vocabulary entry of `id` (byte-level spelling, e.g. `"Ġworld"`).
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(String::as_str)
    }

    /// The id of the vocabulary entry spelled exactly `piece`.
    pub fn piece_to_id(&self, piece: &str) -> Option<u32> {
        self.special.token_to_id(piece)
    }

    /// The type of token `id` (after llama.cpp's end-of-generation fix-ups).
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// Beginning-of-sequence token id.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token id.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Unknown token id.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }

    /// Padding token id.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// End-of-turn token id (from metadata, or auto-detected by text as llama.cpp does).
    pub fn eot_id(&self) -> Option<u32> {
        self.eot
    }

    /// End-of-message token id (from metadata, or `<|eom_id|>`).
    pub fn eom_id(&self) -> Option<u32> {
        self.eom
    }

    /// Ids that end generation, sorted ascending (llama.cpp's EOG set).
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The Jinja chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Whether [`encode`](Self::encode) prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether [`encode`](Self::encode) appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// The underlying Hugging Face tokenizer (the one that parses special tokens), e.g. for
    /// [`decode_stream`](tokenizers::TokenizerImpl::decode_stream).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.special
    }
}

/// Splits `"left right"` merges and checks that both sides and the result are tokens.
fn parse_merges(
    merges: &[String],
    token_to_id: &HashMap<String, u32>,
) -> Result<Vec<(String, String)>> {
    let mut seen = HashSet::with_capacity(merges.len());
    let mut out = Vec::with_capacity(merges.len());
    for (index, merge) in merges.iter().enumerate() {
        // As llama.cpp: split at the first space that is not the first character.
        let split = merge
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c == ' ')
            .map(|(i, _)| i)
            .filter(|&i| i + 1 < merge.len());
        let Some(split) = split else {
            return Err(TokenizerError::MalformedMerge {
                index,
                merge: merge.clone(),
            });
        };
        let (left, right) = (&merge[..split], &merge[split + 1..]);
        let joined = format!("{left}{right}");
        for token in [left, right, joined.as_str()] {
            if !token_to_id.contains_key(token) {
                return Err(TokenizerError::UnknownMergeToken {
                    index,
                    merge: merge.clone(),
                    token: token.to_owned(),
                });
            }
        }
        // llama.cpp keeps the first rank of a repeated merge.
        if seen.insert((left, right)) {
            out.push((left.to_owned(), right.to_owned()));
        }
    }
    Ok(out)
}

/// llama.cpp's end-of-generation rules. Returns `(eot, eom, sorted eog ids)` and forces the
/// detected tokens to control type.
fn end_of_generation(
    vocab: &GgufVocab,
    token_to_id: &HashMap<String, u32>,
    types: &mut [TokenType],
) -> (Option<u32>, Option<u32>, Vec<u32>) {
    let find = |texts: &[&str]| -> Option<u32> {
        texts
            .iter()
            .filter_map(|t| token_to_id.get(*t).copied())
            .min()
    };
    let mut force_control = |id: u32| types[id as usize] = TokenType::Control;

    let eot = vocab.eot.or_else(|| find(EOT_TEXTS));
    let eom = vocab.eom.or_else(|| find(&["<|eom_id|>"]));
    let mut eog: Vec<u32> = Vec::new();
    for id in [eot, eom].into_iter().flatten() {
        if vocab.eot != Some(id) && vocab.eom != Some(id) {
            force_control(id);
        }
    }
    for texts in FIM_EOG_TEXTS {
        if let Some(id) = find(texts) {
            force_control(id);
            eog.push(id);
        }
    }
    for text in EOG_TEXTS {
        if let Some(&id) = token_to_id.get(*text) {
            force_control(id);
            eog.push(id);
        }
    }
    for text in EOG_TEXTS_IF_CONTROL {
        if let Some(&id) = token_to_id.get(*text)
            && types[id as usize] == TokenType::Control
        {
            eog.push(id);
        }
    }
    eog.extend([vocab.eos, eot, eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    (eot, eom, eog)
}

fn read_to_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })
}

fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = read_to_string(path)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TokenizerError::Build(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 256 byte-level symbols in GPT-2 order, as a vocabulary of 256 tokens.
    fn byte_alphabet() -> Vec<String> {
        let mut bytes: Vec<u32> = (b'!'..=b'~')
            .chain(0xA1..=0xAC)
            .chain(0xAE..=0xFF)
            .map(u32::from)
            .collect();
        let mut chars: Vec<u32> = bytes.clone();
        let mut extra = 0;
        for b in 0..256u32 {
            if !bytes.contains(&b) {
                bytes.push(b);
                chars.push(256 + extra);
                extra += 1;
            }
        }
        let mut table: Vec<(u32, char)> = bytes
            .into_iter()
            .zip(chars.into_iter().map(|c| char::from_u32(c).unwrap()))
            .collect();
        table.sort_unstable();
        table.into_iter().map(|(_, c)| c.to_string()).collect()
    }

    /// Byte alphabet (ids 0..256) + merges for "hello" / " world" + special tokens.
    fn tiny_vocab() -> GgufVocab {
        let mut tokens = byte_alphabet();
        let mut merges = Vec::new();
        for (l, r) in [
            ("h", "e"),
            ("l", "l"),
            ("he", "ll"),
            ("hell", "o"),
            ("Ġ", "w"),
            ("o", "r"),
            ("Ġw", "or"),
            ("l", "d"),
            ("Ġwor", "ld"),
        ] {
            tokens.push(format!("{l}{r}"));
            merges.push(format!("{l} {r}"));
        }
        let mut token_types = vec![1; tokens.len()];
        for (text, ty) in [("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool>", 4)] {
            tokens.push(text.to_owned());
            token_types.push(ty);
        }
        GgufVocab {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            tokens,
            merges,
            token_types,
            bos: Some(265),
            eos: Some(266),
            ..GgufVocab::default()
        }
    }

    fn id(tok: &Tokenizer, piece: &str) -> u32 {
        tok.piece_to_id(piece).unwrap()
    }

    #[test]
    fn merges_are_applied() {
        let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let ids = tok.encode("hello world", false).unwrap();
        assert_eq!(ids, [id(&tok, "hello"), id(&tok, "Ġworld")]);
        // "hel" has no full merge: "he" + "l".
        assert_eq!(
            tok.encode("hel", false).unwrap(),
            [id(&tok, "he"), id(&tok, "l")]
        );
        // smollm splits digits individually.
        assert_eq!(
            tok.encode("42", false).unwrap(),
            [id(&tok, "4"), id(&tok, "2")]
        );
    }

    #[test]
    fn parse_special_on_and_off() {
        let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let text = "<|im_start|>hello<|im_end|>";
        let on = tok.encode(text, true).unwrap();
        assert_eq!(on, [265, id(&tok, "hello"), 266]);
        let off = tok.encode(text, false).unwrap();
        assert!(!off.contains(&265) && !off.contains(&266));
        assert_eq!(tok.decode(&off, false).unwrap(), text);
        // User-defined tokens are split out either way.
        assert_eq!(tok.encode("<tool>", false).unwrap(), [267]);
        assert_eq!(tok.encode("<tool>", true).unwrap(), [267]);
        // No BOS/EOS unless asked for.
        assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());
        let mut vocab = tiny_vocab();
        vocab.add_bos = true;
        let tok = Tokenizer::from_vocab(vocab).unwrap();
        assert_eq!(tok.encode("", true).unwrap(), [265]);
    }

    #[test]
    fn decode_round_trip_and_skip_special() {
        let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        for text in ["hello world", "  héllo\n\twörld 123 — ✓", "日本語", ""] {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(tok.decode(&ids, false).unwrap(), text);
        }
        let ids = tok.encode("<|im_start|>hello<|im_end|>", true).unwrap();
        assert_eq!(tok.decode(&ids, true).unwrap(), "hello");
        assert_eq!(
            tok.decode(&ids, false).unwrap(),
            "<|im_start|>hello<|im_end|>"
        );
        assert!(matches!(
            tok.decode(&[9999], false),
            Err(TokenizerError::TokenIdOutOfRange { id: 9999, .. })
        ));
    }

    #[test]
    fn eog_and_accessors() {
        let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        assert_eq!(tok.eog_ids(), [266]);
        assert_eq!(tok.eot_id(), Some(266));
        assert_eq!(tok.bos_id(), Some(265));
        assert_eq!(tok.vocab_size(), 268);
        assert_eq!(tok.id_to_piece(32), Some("Ġ"));
        assert_eq!(tok.id_to_piece(65), Some("A"));
        assert_eq!(tok.token_type(267), Some(TokenType::UserDefined));
        assert!(!tok.add_bos());
    }

    #[test]
    fn unknown_pre_tokenizer_is_an_error() {
        let mut vocab = tiny_vocab();
        vocab.pre = Some("klingon".into());
        let err = Tokenizer::from_vocab(vocab).unwrap_err();
        assert!(matches!(&err, TokenizerError::UnknownPreTokenizer(n) if n == "klingon"));
        assert!(err.to_string().contains("klingon"));
    }

    #[test]
    fn unsupported_model_is_an_error() {
        let mut vocab = tiny_vocab();
        vocab.model = "llama".into();
        let err = Tokenizer::from_vocab(vocab).unwrap_err();
        assert!(matches!(&err, TokenizerError::UnsupportedModel(m) if m == "llama"));
        assert!(err.to_string().contains("SentencePiece"));
    }

    #[test]
    fn special_id_out_of_range_is_an_error() {
        let mut vocab = tiny_vocab();
        vocab.eos = Some(5000);
        let err = Tokenizer::from_vocab(vocab).unwrap_err();
        assert!(matches!(
            err,
            TokenizerError::SpecialIdOutOfRange {
                which: "eos",
                id: 5000,
                vocab_size: 268
            }
        ));
    }

    #[test]
    fn vocabulary_errors() {
        let mut vocab = tiny_vocab();
        vocab.token_types.pop();
        assert!(matches!(
            Tokenizer::from_vocab(vocab),
            Err(TokenizerError::TokenTypeCountMismatch {
                tokens: 268,
                types: 267
            })
        ));
        let mut vocab = tiny_vocab();
        vocab.merges.push("he zz".into());
        assert!(matches!(
            Tokenizer::from_vocab(vocab),
            Err(TokenizerError::UnknownMergeToken { token, .. }) if token == "zz"
        ));
        let mut vocab = tiny_vocab();
        vocab.merges.push("hello".into());
        assert!(matches!(
            Tokenizer::from_vocab(vocab),
            Err(TokenizerError::MalformedMerge { index: 9, .. })
        ));
        let mut vocab = tiny_vocab();
        vocab.bos = None;
        vocab.add_bos = true;
        assert!(matches!(
            Tokenizer::from_vocab(vocab),
            Err(TokenizerError::MissingSpecialToken("bos"))
        ));
    }

    #[test]
    fn every_supported_pre_tokenizer_builds_and_round_trips() {
        for pre in [
            None,
            Some("default"),
            Some("gpt2"),
            Some("gpt-2"),
            Some("smollm"),
            Some("llama-bpe"),
            Some("qwen2"),
            Some("dbrx"),
        ] {
            let vocab = GgufVocab {
                pre: pre.map(str::to_owned),
                ..tiny_vocab()
            };
            let tok = Tokenizer::from_vocab(vocab).unwrap();
            let text = "Hello, world! It's 12345 +-<=> ok\r\n\n  x\t";
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(tok.decode(&ids, false).unwrap(), text, "pre = {pre:?}");
        }
    }

    #[test]
    fn pre_tokenizer_splits_follow_llama_cpp() {
        let with_pre = |pre: &str| {
            let mut vocab = tiny_vocab();
            vocab.pre = Some(pre.into());
            vocab.tokens.push("12".into());
            vocab.token_types.push(1);
            vocab.merges.push("1 2".into());
            Tokenizer::from_vocab(vocab).unwrap()
        };
        let pieces = |tok: &Tokenizer, text: &str| -> Vec<String> {
            let ids = tok.encode(text, false).unwrap();
            ids.iter()
                .map(|&id| tok.id_to_piece(id).unwrap().to_owned())
                .collect()
        };
        // smollm and qwen2 isolate every digit; gpt2 and llama3 keep digit runs together.
        assert_eq!(pieces(&with_pre("smollm"), "12"), ["1", "2"]);
        assert_eq!(pieces(&with_pre("qwen2"), "12"), ["1", "2"]);
        assert_eq!(pieces(&with_pre("gpt2"), "12"), ["12"]);
        assert_eq!(pieces(&with_pre("llama-bpe"), "12"), ["12"]);
        // gpt2 keeps a space with the following word; a trailing space stays alone.
        assert_eq!(
            pieces(&with_pre("gpt2"), "hello world "),
            ["hello", "Ġworld", "Ġ"]
        );
    }

    #[test]
    fn from_file_reads_tokenizer_json_and_config() {
        let built = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "kindle-tokenizer-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let json = built.inner().to_string(false).unwrap();
        std::fs::write(dir.join("tokenizer.json"), json).unwrap();
        let config = serde_json::json!({
            "bos_token": "<|im_start|>",
            "eos_token": { "content": "<|im_end|>" },
            "add_bos_token": true,
            "chat_template": "{{ messages }}",
        });
        std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
        let loaded = Tokenizer::from_file(dir.join("tokenizer.json"));
        std::fs::remove_dir_all(&dir).unwrap();
        let loaded = loaded.unwrap();

        assert_eq!(loaded.vocab_size(), built.vocab_size());
        assert_eq!(loaded.bos_id(), Some(265));
        assert_eq!(loaded.eos_id(), Some(266));
        assert!(loaded.add_bos());
        assert_eq!(loaded.eog_ids(), [266]);
        assert_eq!(loaded.chat_template(), Some("{{ messages }}"));
        assert_eq!(loaded.token_type(267), Some(TokenType::UserDefined));
        let text = "<|im_start|>hello world<tool>42<|im_end|>";
        for parse_special in [true, false] {
            let mut want = vec![265];
            want.extend(built.encode(text, parse_special).unwrap());
            assert_eq!(loaded.encode(text, parse_special).unwrap(), want);
        }
        assert!(matches!(
            Tokenizer::from_file(std::env::temp_dir().join("kindle-no-such-dir/tokenizer.json")),
            Err(TokenizerError::Io { .. })
        ));
    }

    #[test]
    fn from_gguf_reads_tokenizer_metadata() {
        use kindle_gguf::GgufWriter;

        let vocab = tiny_vocab();
        let writer = GgufWriter::new()
            .metadata(KEY_MODEL, "gpt2")
            .metadata(KEY_PRE, "smollm")
            .metadata(KEY_TOKENS, vocab.tokens.clone())
            .metadata(KEY_MERGES, vocab.merges.clone())
            .metadata(KEY_TOKEN_TYPE, vocab.token_types.clone())
            .metadata(KEY_BOS, 265u32)
            .metadata(KEY_EOS, 266u32)
            .metadata(KEY_ADD_BOS, false)
            .metadata(KEY_CHAT_TEMPLATE, "{{ x }}");
        let file = GgufFile::from_bytes(writer.to_bytes()).unwrap();
        let read = GgufVocab::from_gguf(&file).unwrap();
        assert_eq!(
            read,
            GgufVocab {
                chat_template: Some("{{ x }}".into()),
                ..vocab
            }
        );
        let tok = Tokenizer::from_gguf(&file).unwrap();
        assert_eq!(tok.encode("hello world", false).unwrap(), [259, 264]);

        // Wrong types and missing keys are reported with the key name.
        let bad = GgufWriter::new()
            .metadata(KEY_MODEL, "gpt2")
            .metadata(KEY_TOKENS, vec![1u32, 2]);
        let file = GgufFile::from_bytes(bad.to_bytes()).unwrap();
        assert!(matches!(
            GgufVocab::from_gguf(&file),
            Err(TokenizerError::MalformedKey { key, .. }) if key == KEY_TOKENS
        ));
        let file = GgufFile::from_bytes(GgufWriter::new().to_bytes()).unwrap();
        assert!(matches!(
            GgufVocab::from_gguf(&file),
            Err(TokenizerError::MissingKey(key)) if key == KEY_MODEL
        ));
    }

    #[test]
    fn inner_supports_streaming_decode() {
        let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let text = "héllo<|im_end|> world";
        let ids = tok.encode(text, true).unwrap();
        let mut stream = tok.inner().decode_stream(false);
        let mut out = String::new();
        for &id in &ids {
            if let Some(chunk) = stream.step(id).unwrap() {
                out.push_str(&chunk);
            }
        }
        assert_eq!(out, text);
    }

    #[test]
    fn llama3_ignores_merges_for_whole_tokens() {
        // "abc" is a token but no merge produces it: llama-bpe takes it whole, gpt2 does not.
        let mut tokens = byte_alphabet();
        tokens.push("ab".into());
        tokens.push("abc".into());
        let vocab = GgufVocab {
            model: "gpt2".into(),
            pre: Some("llama-bpe".into()),
            tokens,
            merges: vec!["a b".into()],
            bos: Some(0),
            ..GgufVocab::default()
        };
        let tok = Tokenizer::from_vocab(vocab.clone()).unwrap();
        assert_eq!(tok.encode("abc", false).unwrap(), [257]);
        let tok = Tokenizer::from_vocab(GgufVocab {
            pre: Some("gpt2".into()),
            ..vocab
        })
        .unwrap();
        assert_eq!(tok.encode("abc", false).unwrap(), [256, id(&tok, "c")]);
    }
}
