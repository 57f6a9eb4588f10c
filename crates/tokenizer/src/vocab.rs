//! The vocabulary as a GGUF file stores it (`tokenizer.ggml.*` metadata) and its token types.

use kindle_gguf::{GgufFile, MetadataValue};

use crate::pre_tokenizer::PreTokenizer;
use crate::{Result, TokenizerError};

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
pub(crate) const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
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

pub(crate) fn malformed(key: &str, reason: impl Into<String>) -> TokenizerError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::tiny_vocab;
    use crate::{Tokenizer, TokenizerError};

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
}
