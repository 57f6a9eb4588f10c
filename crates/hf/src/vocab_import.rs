//! tokenizer.json (+ tokenizer_config.json, config.json, chat_template.jinja) → GGUF
//! `tokenizer.*` metadata, as llama.cpp's `_set_vocab_gpt2` and `SpecialVocab` write it;
//! SentencePiece directories (tokenizer.model) go to [`crate::vocab_spm`].

use std::path::Path;

use kindle_gguf::MetadataValue;
use serde_json::Value;

use crate::error::{HfError, Result, io_error};
use crate::json::JsonObject;
use crate::pre_tokenizer;

/// GGUF token type codes (llama.cpp's `llama_token_type`).
pub(crate) const NORMAL: i32 = 1;
pub(crate) const UNKNOWN: i32 = 2;
pub(crate) const CONTROL: i32 = 3;
pub(crate) const USER_DEFINED: i32 = 4;
pub(crate) const UNUSED: i32 = 5;

/// The tokenizer files of a Hugging Face directory.
#[derive(Debug, Clone)]
pub(crate) struct TokenizerFiles {
    /// tokenizer.json.
    pub(crate) json: Option<JsonObject>,
    /// tokenizer.model's bytes (SentencePiece).
    pub(crate) model: Option<Vec<u8>>,
    /// added_tokens.json.
    pub(crate) added_tokens: Option<JsonObject>,
    pub(crate) config: Option<JsonObject>,
    pub(crate) chat_template: Option<String>,
}

impl TokenizerFiles {
    /// The tokenizer files in `dir`; `None` without a tokenizer.json or tokenizer.model.
    pub(crate) fn read(dir: &Path) -> Result<Option<Self>> {
        let json = JsonObject::read_opt(&dir.join("tokenizer.json"))?;
        let model_path = dir.join("tokenizer.model");
        let model = if model_path.is_file() {
            Some(std::fs::read(&model_path).map_err(io_error(&model_path))?)
        } else {
            None
        };
        if json.is_none() && model.is_none() {
            return Ok(None);
        }
        let jinja = dir.join("chat_template.jinja");
        let chat_template = if jinja.is_file() {
            Some(std::fs::read_to_string(&jinja).map_err(io_error(&jinja))?)
        } else {
            None
        };
        Ok(Some(Self {
            json,
            model,
            added_tokens: JsonObject::read_opt(&dir.join("added_tokens.json"))?,
            config: JsonObject::read_opt(&dir.join("tokenizer_config.json"))?,
            chat_template,
        }))
    }

    /// Whether the vocabulary is read from tokenizer.model: there is one, and no
    /// tokenizer.json or one that is not byte-level BPE (llama.cpp reads SentencePiece
    /// vocabularies, Gemma's and Llama-2's byte-fallback BPE tokenizer.json included, from
    /// tokenizer.model).
    pub(crate) fn is_sentencepiece(&self) -> bool {
        let byte_level = |j: &JsonObject| {
            let model = j.map.get("model");
            let ty = model.and_then(|m| m.get("type")).and_then(Value::as_str);
            let fallback = model.and_then(|m| m.get("byte_fallback"));
            ty.is_none_or(|t| t == "BPE") && fallback.and_then(Value::as_bool) != Some(true)
        };
        self.model.is_some() && !self.json.as_ref().is_some_and(byte_level)
    }
}

/// llama.cpp's `does_token_look_special`.
pub(crate) fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// The GGUF tokenizer metadata of `files`; `vocab_size` (config.json) pads the token list with
/// `[PAD{i}]` unused tokens as llama.cpp does; `model_config` gives fallback special ids.
pub(crate) fn metadata(
    files: &TokenizerFiles,
    vocab_size: Option<u64>,
    model_config: Option<&JsonObject>,
) -> Result<Vec<(String, MetadataValue)>> {
    let Some(tj) = &files.json else {
        return Err(HfError::Tokenizer("no tokenizer.json".into()));
    };
    let bad = |what: String| HfError::Tokenizer(format!("{}: {what}", tj.path.display()));
    let model = tj.object("model")?.ok_or_else(|| tj.missing("model"))?;
    let kind = model.opt_str("type")?.unwrap_or("BPE");
    if kind != "BPE" {
        return Err(bad(format!("model type {kind} is not converted (BPE is)")));
    }
    if model.opt_bool("byte_fallback")? == Some(true) {
        return Err(bad(
            "a SentencePiece-style BPE (byte_fallback) is not converted to GGUF: llama.cpp reads \
             those from tokenizer.model"
                .into(),
        ));
    }
    match tj.map.get("normalizer") {
        None | Some(Value::Null) => {}
        Some(n) if n.get("type").and_then(Value::as_str) == Some("NFC") => {}
        Some(n) => return Err(bad(format!("normalizer {n} is not supported"))),
    }
    let pre = pre_tokenizer::recognise(tj.map.get("pre_tokenizer").unwrap_or(&Value::Null))?;

    // Ids: the model's vocabulary and the added tokens.
    let vocab = model
        .object("vocab")?
        .ok_or_else(|| model.missing("model.vocab"))?;
    let mut entries: Vec<(u64, String, i32)> = Vec::with_capacity(vocab.map.len());
    for (text, id) in &vocab.map {
        let id = id
            .as_u64()
            .ok_or_else(|| model.wrong("model.vocab", "token ids", id))?;
        entries.push((id, text.clone(), NORMAL));
    }
    let added = match tj.map.get("added_tokens") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(other) => return Err(tj.wrong("added_tokens", "a list", other)),
    };
    let mut added_ids = Vec::with_capacity(added.len());
    for token in &added {
        let (Some(id), Some(content)) = (
            token.get("id").and_then(Value::as_u64),
            token.get("content").and_then(Value::as_str),
        ) else {
            return Err(tj.wrong("added_tokens", "a list of {id, content}", token));
        };
        let special = token
            .get("special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let ty = if special || looks_special(content) {
            CONTROL
        } else {
            USER_DEFINED
        };
        entries.push((id, content.to_owned(), ty));
        added_ids.push((content.to_owned(), id));
    }
    let max_id = entries.iter().map(|e| e.0).max().map_or(0, |m| m + 1);
    let n = vocab_size.unwrap_or(max_id).max(max_id);
    if vocab_size.is_some_and(|v| v < max_id) {
        return Err(bad(format!(
            "token id {} is past config.json's vocab_size {}",
            max_id - 1,
            vocab_size.unwrap_or_default()
        )));
    }
    // n is bounded by the ids present, each from the file.
    let n = usize::try_from(n).map_err(|_| bad("vocabulary too large".into()))?;
    if n > entries.len().saturating_mul(2).saturating_add(1 << 20) {
        return Err(bad(format!(
            "vocab_size {n} is far above the {} tokens",
            entries.len()
        )));
    }
    let mut tokens: Vec<Option<(String, i32)>> = vec![None; n];
    for (id, text, ty) in entries {
        tokens[id as usize] = Some((text, ty));
    }
    let (tokens, types): (Vec<String>, Vec<i32>) = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| (format!("[PAD{i}]"), UNUSED)))
        .unzip();

    let merges = merges(&model)?;

    // Special tokens: tokenizer_config.json's `{typ}_token` (an added token's content), else
    // config.json's `{typ}_token_id`.
    let config = files.config.as_ref();
    let special_id = |typ: &str| -> Option<u64> {
        let entry = config?.map.get(&format!("{typ}_token"))?;
        let content = entry.as_str().or_else(|| entry.get("content")?.as_str())?;
        added_ids
            .iter()
            .find(|(c, _)| c == content)
            .map(|(_, id)| *id)
    };
    let mut out: Vec<(String, MetadataValue)> = vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), pre.into()),
        ("tokenizer.ggml.tokens".into(), tokens.into()),
        ("tokenizer.ggml.token_type".into(), types.into()),
        ("tokenizer.ggml.merges".into(), merges.into()),
    ];
    for (typ, key) in [
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("unk", "unknown_token_id"),
        ("pad", "padding_token_id"),
    ] {
        let from_model = || model_config?.map.get(&format!("{typ}_token_id"))?.as_u64();
        if let Some(id) = special_id(typ)
            .or_else(from_model)
            .filter(|&id| id < n as u64)
        {
            out.push((
                format!("tokenizer.ggml.{key}"),
                MetadataValue::U32(id as u32),
            ));
        }
    }
    let (add_bos, add_eos) = add_special(files, &special_id)?;
    if let Some(b) = add_bos {
        out.push(("tokenizer.ggml.add_bos_token".into(), b.into()));
    }
    if let Some(e) = add_eos {
        out.push(("tokenizer.ggml.add_eos_token".into(), e.into()));
    }
    if let Some(t) = chat_template(files)? {
        out.push(("tokenizer.chat_template".into(), t.into()));
    }
    Ok(out)
}

/// `model.merges`: `"a b"` strings, or `[a, b]` pairs (spaces inside written as `Ġ`, as
/// llama.cpp does).
fn merges(model: &JsonObject) -> Result<Vec<String>> {
    let list = match model.map.get("merges") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(model.wrong("model.merges", "a list", other)),
    };
    let space = |s: &str| s.replace(' ', "\u{120}");
    list.iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(a), Value::String(b)] => Ok(format!("{} {}", space(a), space(b))),
                _ => Err(model.wrong("model.merges", "pairs of strings", m)),
            },
            _ => Err(model.wrong("model.merges", "strings or pairs", m)),
        })
        .collect()
}

/// Whether BOS and EOS are added: the post-processor first (a TemplateProcessing's leading
/// and trailing special tokens; ByteLevel: neither), then tokenizer_config.json's
/// `add_bos_token` / `add_eos_token`.
pub(crate) fn add_special(
    files: &TokenizerFiles,
    special_id: &dyn Fn(&str) -> Option<u64>,
) -> Result<(Option<bool>, Option<bool>)> {
    let (mut bos, mut eos) = (None, None);
    let post = files
        .json
        .as_ref()
        .and_then(|j| j.map.get("post_processor"))
        .cloned()
        .unwrap_or(Value::Null);
    let processors = match post.get("processors").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None if post.is_null() => Vec::new(),
        None => vec![post],
    };
    for p in &processors {
        match p.get("type").and_then(Value::as_str) {
            Some("ByteLevel") => {
                bos.get_or_insert(false);
                eos.get_or_insert(false);
            }
            Some("TemplateProcessing") => {
                let single = p.get("single").and_then(Value::as_array);
                let special = |v: Option<&Value>| {
                    v?.get("SpecialToken")?
                        .get("id")?
                        .as_str()
                        .map(str::to_owned)
                };
                let ids_of = |content: Option<String>| {
                    let tokens = p.get("special_tokens")?.get(content?)?.get("ids")?;
                    tokens.as_array()?.first()?.as_u64()
                };
                if let Some(single) = single.filter(|s| s.len() > 1) {
                    let first = ids_of(special(single.first()));
                    let last = ids_of(special(single.last()));
                    let is = |id: Option<u64>, typ: &str| {
                        id.is_some() && special_id(typ).is_none_or(|s| id == Some(s))
                    };
                    bos = Some(is(first, "bos"));
                    eos = Some(is(last, "eos"));
                }
            }
            _ => {}
        }
    }
    if let Some(c) = &files.config {
        bos = bos.or(c.opt_bool("add_bos_token")?);
        eos = eos.or(c.opt_bool("add_eos_token")?);
    }
    Ok((bos, eos))
}

/// tokenizer_config.json's `chat_template` (a list: its `default`), else chat_template.jinja.
pub(crate) fn chat_template(files: &TokenizerFiles) -> Result<Option<String>> {
    let from_config = match files
        .config
        .as_ref()
        .and_then(|c| c.map.get("chat_template"))
    {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template")?.as_str())
            .map(str::to_owned),
        _ => None,
    };
    Ok(from_config.or_else(|| files.chat_template.clone()))
}
