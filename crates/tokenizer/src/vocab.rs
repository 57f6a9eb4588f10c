//! The vocabulary as a GGUF file stores it (`tokenizer.ggml.*` metadata) and its token types.

use kindle_gguf::GgufFile;

use crate::Result;
use crate::error::malformed;
use crate::pre_tokenizer::PreTokenizer;

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
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
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
    /// `tokenizer.ggml.scores`: one score per token, read for SentencePiece vocabularies
    /// (which require it); higher merges first.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.add_space_prefix`: put a space before the text (SentencePiece only);
    /// `None` means llama.cpp's default, true.
    pub add_space_prefix: Option<bool>,
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
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
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
    /// `tokenizer.ggml.model` and `tokenizer.ggml.tokens` are required (and
    /// `tokenizer.ggml.scores` for SentencePiece, checked when the tokenizer is built);
    /// everything else is optional. When `add_bos_token` is absent the default is llama.cpp's:
    /// true for SentencePiece and Llama 3 (`llama-bpe`) vocabularies, false otherwise. A
    /// SentencePiece vocabulary without BOS, EOS or unknown token ids gets llama.cpp's
    /// defaults, 1, 2 and 0 (where the vocabulary has such ids).
    ///
    /// A missing required key gives [`MissingKey`](crate::TokenizerError::MissingKey) and a
    /// value of the wrong type [`MalformedKey`](crate::TokenizerError::MalformedKey), both
    /// naming the key.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let owned = |strs: Vec<&str>| strs.into_iter().map(str::to_owned).collect::<Vec<_>>();
        let model = file.get_str(KEY_MODEL)?.to_owned();
        let pre = file.opt_str(KEY_PRE)?.map(str::to_owned);
        let tokens = owned(file.get_str_array(KEY_TOKENS)?);
        let merges = file
            .opt_str_array(KEY_MERGES)?
            .map(owned)
            .unwrap_or_default();
        let token_types = file.opt_i32_array(KEY_TOKEN_TYPE)?.unwrap_or_default();
        let spm = model == "llama";
        let scores = if spm {
            read_scores(file)?.unwrap_or_default()
        } else {
            Vec::new()
        };
        // llama.cpp's default special ids for SentencePiece, used where the key is absent.
        let n = tokens.len();
        let spm_default = |id: u32| (spm && (id as usize) < n).then_some(id);
        let default_add_bos = spm
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
            scores,
            add_space_prefix: file.opt_bool(KEY_ADD_SPACE_PREFIX)?,
            bos: file.opt_u32(KEY_BOS)?.or_else(|| spm_default(1)),
            eos: file.opt_u32(KEY_EOS)?.or_else(|| spm_default(2)),
            unk: file.opt_u32(KEY_UNK)?.or_else(|| spm_default(0)),
            pad: file.opt_u32(KEY_PAD)?,
            eot: file.opt_u32(KEY_EOT)?,
            eom: file.opt_u32(KEY_EOM)?,
            add_bos: file.opt_bool(KEY_ADD_BOS)?.unwrap_or(default_add_bos),
            add_eos: file.opt_bool(KEY_ADD_EOS)?.unwrap_or(false),
            chat_template: file.opt_str(KEY_CHAT_TEMPLATE)?.map(str::to_owned),
        })
    }
}

/// `tokenizer.ggml.scores`: an array of numbers (llama.cpp accepts `f32` and `i32`).
fn read_scores(file: &GgufFile) -> Result<Option<Vec<f32>>> {
    let Some(items) = file.opt_array(KEY_SCORES)? else {
        return Ok(None);
    };
    if let kindle_gguf::MetadataArray::F32(scores) = items {
        return Ok(Some(scores.clone()));
    }
    items
        .values()
        .enumerate()
        .map(|(i, item)| {
            item.as_f64().map(|v| v as f32).ok_or_else(|| {
                malformed(
                    KEY_SCORES,
                    format!("should be an array of numbers but element {i} is {item}"),
                )
            })
        })
        .collect::<Result<Vec<f32>>>()
        .map(Some)
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

    #[test]
    fn every_malformed_key_is_named() {
        use kindle_gguf::{GgufWriter, MetadataValue};

        let base = || {
            GgufWriter::new()
                .metadata(KEY_MODEL, "gpt2")
                .metadata(KEY_TOKENS, vec!["a", "b"])
        };
        let cases: [(&str, MetadataValue, &str); 6] = [
            (
                KEY_PRE,
                MetadataValue::U32(1),
                "should be a string but is u32 1",
            ),
            (KEY_MERGES, vec![true].into(), "element 0 is bool true"),
            (KEY_TOKEN_TYPE, vec![1i64 << 40].into(), "element 0 is i64"),
            (KEY_EOS, MetadataValue::I32(-1), "unsigned 32-bit integer"),
            (
                KEY_BOS,
                MetadataValue::U64(1 << 32),
                "unsigned 32-bit integer",
            ),
            (KEY_ADD_BOS, MetadataValue::U8(1), "should be a bool"),
        ];
        for (bad_key, value, reason_part) in cases {
            let file = GgufFile::from_bytes(base().metadata(bad_key, value).to_bytes()).unwrap();
            let err = GgufVocab::from_gguf(&file).unwrap_err();
            assert!(
                matches!(&err, TokenizerError::MalformedKey { key, reason }
                    if key == bad_key && reason.contains(reason_part)),
                "{bad_key}: {err:?}"
            );
            assert!(err.to_string().contains(bad_key), "{err}");
        }
        let file =
            GgufFile::from_bytes(GgufWriter::new().metadata(KEY_MODEL, "gpt2").to_bytes()).unwrap();
        let err = GgufVocab::from_gguf(&file).unwrap_err();
        assert!(matches!(&err, TokenizerError::MissingKey(key) if key == KEY_TOKENS));
        assert_eq!(
            err.to_string(),
            "missing tokenizer metadata key `tokenizer.ggml.tokens`"
        );
    }
}
