//! The byte-level pre-tokenizers kindle knows: a tokenizer.json `pre_tokenizer` recognised as
//! a GGUF `tokenizer.ggml.pre` name, and that name written back as a `pre_tokenizer`.

use serde_json::Value;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::{HfError, Result};

// As Hugging Face writes them.
const HF_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const HF_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
// As llama.cpp (and kindle-tokenizer's own tokenizer.json) write them.
const CPP_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const CPP_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CPP_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One step of a byte-level pre-tokenizer, as far as the GGUF name depends on it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `ByteLevel { use_regex: true }`: GPT-2's split regex, then the byte mapping.
    ByteLevelRegex,
    /// `Digits { individual_digits: true }`.
    Digits,
    /// `Split` on a regex, isolated.
    Split(String),
}

/// The GGUF `pre` name of a tokenizer.json `pre_tokenizer`, or an error naming what it is.
pub(crate) fn recognise(pre: &Value) -> Result<&'static str> {
    let mut steps = Vec::new();
    let mut byte_level = false;
    collect(pre, &mut steps, &mut byte_level)?;
    if !byte_level {
        return Err(HfError::Tokenizer(
            "the pre-tokenizer has no ByteLevel step: only byte-level BPE tokenizer.json files \
             are converted"
                .into(),
        ));
    }
    let split = |s: &Step, res: &[&str]| matches!(s, Step::Split(r) if res.contains(&r.as_str()));
    let name = match steps.as_slice() {
        [Step::ByteLevelRegex] => Some("gpt-2"),
        [s] if split(s, &[CPP_GPT2]) => Some("gpt-2"),
        [Step::Digits, Step::ByteLevelRegex] => Some("smollm"),
        [d, s] if split(d, &[r"\p{N}"]) && split(s, &[CPP_GPT2]) => Some("smollm"),
        [s] if split(s, &[HF_LLAMA3, CPP_LLAMA3]) => Some("llama-bpe"),
        [s] if split(s, &[HF_QWEN2, CPP_QWEN2]) => Some("qwen2"),
        _ => None,
    };
    name.ok_or_else(|| HfError::UnknownPreTokenizer {
        pattern: format!("{steps:?}"),
    })
}

fn collect(pre: &Value, steps: &mut Vec<Step>, byte_level: &mut bool) -> Result<()> {
    let ty = pre.get("type").and_then(Value::as_str).unwrap_or("null");
    let flag = |key: &str| pre.get(key).and_then(Value::as_bool);
    match ty {
        "Sequence" => {
            let list = pre
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    HfError::Tokenizer("pre_tokenizer: a Sequence without `pretokenizers`".into())
                })?;
            for p in list {
                collect(p, steps, byte_level)?;
            }
        }
        "ByteLevel" => {
            if flag("add_prefix_space") == Some(true) {
                return Err(HfError::Tokenizer(
                    "pre_tokenizer: ByteLevel with add_prefix_space is not supported".into(),
                ));
            }
            *byte_level = true;
            if flag("use_regex").unwrap_or(true) {
                steps.push(Step::ByteLevelRegex);
            }
        }
        "Digits" if flag("individual_digits") == Some(true) => steps.push(Step::Digits),
        "Split" => {
            let pattern = pre.get("pattern");
            let regex = pattern.and_then(|p| p.get("Regex")).and_then(Value::as_str);
            let behavior = pre.get("behavior").and_then(Value::as_str);
            match (regex, behavior, flag("invert")) {
                (Some(r), Some("Isolated"), Some(false) | None) => {
                    steps.push(Step::Split(r.to_owned()));
                }
                _ => {
                    return Err(HfError::UnknownPreTokenizer {
                        pattern: format!("Split {}", pre),
                    });
                }
            }
        }
        other => {
            return Err(HfError::UnknownPreTokenizer {
                pattern: format!("{other} {pre}"),
            });
        }
    }
    Ok(())
}

/// The tokenizer.json pre-tokenizer of GGUF `pre` name `name` (the form Hugging Face's own
/// files have), and whether the BPE model takes a word whole when it is a token
/// (`ignore_merges`, Llama 3).
pub(crate) fn build(name: &str) -> Result<(PreTokenizerWrapper, bool)> {
    let split = |re: &str| -> Result<PreTokenizerWrapper> {
        Split::new(
            SplitPattern::Regex(re.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(PreTokenizerWrapper::Split)
        .map_err(|e| HfError::Tokenizer(format!("pre-tokenizer regex: {e}")))
    };
    let bytes = || PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false));
    Ok(match name {
        "gpt2" | "gpt-2" => (
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
            false,
        ),
        "smollm" => (
            PreTokenizerWrapper::Sequence(Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
            ])),
            false,
        ),
        "llama-bpe" | "llama3" | "llama-v3" => (
            PreTokenizerWrapper::Sequence(Sequence::new(vec![split(HF_LLAMA3)?, bytes()])),
            true,
        ),
        "qwen2" => (
            PreTokenizerWrapper::Sequence(Sequence::new(vec![split(HF_QWEN2)?, bytes()])),
            false,
        ),
        other => {
            return Err(HfError::Tokenizer(format!(
                "tokenizer.ggml.pre `{other}` has no tokenizer.json form here \
                 (gpt-2, smollm, llama-bpe and qwen2 do)"
            )));
        }
    })
}
