//! Loading a Hugging Face `tokenizer.json`, with the config files beside it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tokenizers::AddedToken;

use crate::eog::end_of_generation;
use crate::{Backend, GgufVocab, HfBackend, Result, TokenType, Tokenizer, TokenizerError};

impl Tokenizer {
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
        let (eot, eom, mut eog) =
            end_of_generation(&pseudo, &|t| token_to_id.get(t).copied(), &mut types);
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

        let special = crate::shared_model::share(special);
        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        Ok(Self {
            backend: Backend::Hf(Box::new(HfBackend {
                special,
                plain,
                missing_bytes: Vec::new(),
            })),
            pieces: Arc::new(pieces.iter().collect()),
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
        })
    }
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
    use crate::tests::tiny_vocab;
    use crate::{TokenType, Tokenizer, TokenizerError};

    #[test]
    fn from_file_reads_tokenizer_json_and_config() {
        let built = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "kindle-tokenizer-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let json = built.inner().unwrap().to_string(false).unwrap();
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
    fn a_tokenizer_json_never_truncates_or_pads_a_prompt() {
        // A file may carry truncation and padding meant for training; kindle keeps every
        // token of a prompt (an over-long one is refused by the engine, not cut here).
        let built = Tokenizer::from_vocab(tiny_vocab()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "kindle-tokenizer-trunc-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut json: serde_json::Value =
            serde_json::from_str(&built.inner().unwrap().to_string(false).unwrap()).unwrap();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
        });
        json["padding"] = serde_json::json!({
            "strategy": { "Fixed": 64 }, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "a"
        });
        std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
        // The file as written is what `tokenizers` itself truncates and pads.
        let raw = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"));
        let loaded = Tokenizer::from_file(dir.join("tokenizer.json"));
        std::fs::remove_dir_all(&dir).unwrap();
        let text = "hello world hello world";
        let want = built.encode(text, false).unwrap();
        assert!(want.len() > 2, "{want:?}");
        let raw = raw.unwrap().encode(text, false).unwrap();
        assert_eq!(
            raw.get_ids().len(),
            64,
            "the planted truncation and padding apply"
        );
        assert_eq!(loaded.unwrap().encode(text, false).unwrap(), want);
    }
}
