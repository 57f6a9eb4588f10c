//! llama.cpp's pre-tokenizers: the split regexes per `tokenizer.ggml.pre` name.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::{Result, TokenizerError};

// Regexes from llama.cpp's `llm_tokenizer_bpe` (src/llama-vocab.cpp), per pre-tokenizer type.
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const RE_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_DIGIT: &str = r"\p{N}";

/// A llama.cpp pre-tokenizer type: its split regexes and the flags it implies.
pub(crate) struct PreTokenizer {
    regexes: &'static [&'static str],
    /// Take a fragment whole when it is itself a token (llama.cpp `ignore_merges`).
    pub(crate) ignore_merges: bool,
    /// llama.cpp's default for `add_bos` when the GGUF does not say.
    pub(crate) add_bos_default: bool,
}

impl PreTokenizer {
    /// Looks up a `tokenizer.ggml.pre` name (`None` for names llama.cpp does not map to one of
    /// the supported regex sets).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
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

    pub(crate) fn build(&self) -> Result<Sequence> {
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

#[cfg(test)]
mod tests {
    use crate::tests::{byte_alphabet, id, tiny_vocab};
    use crate::{GgufVocab, Tokenizer};

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
