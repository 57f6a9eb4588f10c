//! GGUF `tokenizer.*` metadata → tokenizer.json (byte-level BPE, built with the `tokenizers`
//! crate) or tokenizer.model (SentencePiece, [`crate::vocab_spm`]), tokenizer_config.json and
//! generation_config.json.

use std::collections::HashSet;

use kindle_gguf::GgufFile;
use serde_json::{Map, Value, json};
use tokenizers::AddedToken;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::processors::template::TemplateProcessing;

use crate::config::Arch;
use crate::error::{HfError, Result};
use crate::pre_tokenizer;
use crate::vocab_import::{CONTROL, UNKNOWN, UNUSED, USER_DEFINED};
use crate::vocab_spm;

/// The tokenizer files of a GGUF vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct TokenizerOut {
    pub(crate) tokenizer_json: Option<String>,
    pub(crate) tokenizer_model: Option<Vec<u8>>,
    pub(crate) tokenizer_config: Value,
    pub(crate) generation_config: Value,
}

/// Whether `file` has tokenizer metadata at all.
pub(crate) fn has_vocab(file: &GgufFile) -> bool {
    file.get("tokenizer.ggml.model").is_some()
}

/// Checks that the vocabulary of `file` can be written as tokenizer.json (before anything is
/// written): byte-level BPE with a known pre-tokenizer.
pub(crate) fn check(file: &GgufFile) -> Result<()> {
    let model = file.get_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(HfError::Tokenizer(format!(
            "tokenizer.ggml.model `{model}` is not converted (byte-level BPE, `gpt2`, is \
             written as tokenizer.json, SentencePiece, `llama`, as tokenizer.model)"
        )));
    }
    pre_tokenizer::build(file.opt_str("tokenizer.ggml.pre")?.unwrap_or("default"))?;
    Ok(())
}

/// The tokenizer files of `file`'s vocabulary: SentencePiece (`llama`) as tokenizer.model,
/// byte-level BPE as tokenizer.json (see [`check`]).
pub(crate) fn export(file: &GgufFile, arch: Arch) -> Result<TokenizerOut> {
    if file.get_str("tokenizer.ggml.model")? == "llama" {
        let (model, config) = vocab_spm::export(file, arch)?;
        return Ok(TokenizerOut {
            tokenizer_json: None,
            tokenizer_model: Some(model),
            tokenizer_config: config,
            generation_config: generation_config(file)?,
        });
    }
    check(file)?;
    let pre_name = file.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
    let (pre, ignore_merges) = pre_tokenizer::build(pre_name)?;
    let tokens = file.get_str_array("tokenizer.ggml.tokens")?;
    let n = tokens.len();
    let types = file
        .opt_i32_array("tokenizer.ggml.token_type")?
        .unwrap_or_default();
    if !types.is_empty() && types.len() != n {
        return Err(HfError::Tokenizer(format!(
            "tokenizer.ggml.token_type has {} entries for {n} tokens",
            types.len()
        )));
    }
    let ty = |i: usize| types.get(i).copied().unwrap_or(1);
    // llama.cpp's padding tokens for ids the tokenizer does not use stay out of the file.
    let padding = |i: usize, t: &str| ty(i) == UNUSED && t == format!("[PAD{i}]");

    let mut seen = HashSet::with_capacity(n);
    let mut vocab = Vec::with_capacity(n);
    for (i, t) in tokens.iter().enumerate() {
        if padding(i, t) {
            continue;
        }
        if !seen.insert(*t) {
            return Err(HfError::Tokenizer(format!(
                "token {t:?} (id {i}) appears twice in tokenizer.ggml.tokens; tokenizer.json \
                 cannot hold both"
            )));
        }
        vocab.push(((*t).to_owned(), i as u32));
    }
    let merges = file
        .opt_str_array("tokenizer.ggml.merges")?
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, m)| {
            // As llama.cpp: split at the first space that is not the first character.
            m.char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(at, _)| (m[..at].to_owned(), m[at + 1..].to_owned()))
                .ok_or_else(|| HfError::Tokenizer(format!("merge {index} {m:?} has no space")))
        })
        .collect::<Result<Vec<_>>>()?;

    let bpe = BPE::builder()
        .vocab_and_merges(
            vocab
                .into_iter()
                .collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| HfError::Tokenizer(format!("building the BPE model: {e}")))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre));
    tok.with_decoder(Some(ByteLevelDecoder::default()));

    let added: Vec<AddedToken> = tokens
        .iter()
        .enumerate()
        .filter(|&(i, t)| !t.is_empty() && matches!(ty(i), CONTROL | UNKNOWN | USER_DEFINED))
        .map(|(i, t)| AddedToken::from((*t).to_owned(), ty(i) != USER_DEFINED).normalized(false))
        .collect();
    tok.add_tokens(&added);

    let id = |key: &str| -> Result<Option<(u32, String)>> {
        Ok(file
            .opt_u32(key)?
            .and_then(|id| tokens.get(id as usize).map(|t| (id, (*t).to_owned()))))
    };
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let unk = id("tokenizer.ggml.unknown_token_id")?;
    let pad = id("tokenizer.ggml.padding_token_id")?;
    let add_bos = file.opt_bool("tokenizer.ggml.add_bos_token")?;
    let add_eos = file.opt_bool("tokenizer.ggml.add_eos_token")?;
    let mut template = Vec::new();
    let mut specials = Vec::new();
    if let (Some(true), Some((id, t))) = (add_bos, &bos) {
        template.push(t.clone());
        specials.push((t.clone(), *id));
    }
    template.push("$A".to_owned());
    if let (Some(true), Some((id, t))) = (add_eos, &eos) {
        template.push(t.clone());
        specials.push((t.clone(), *id));
    }
    if !specials.is_empty() {
        let processor = TemplateProcessing::builder()
            .try_single(template)
            .map_err(|e| HfError::Tokenizer(format!("post-processor: {e}")))?
            .special_tokens(specials)
            .build()
            .map_err(|e| HfError::Tokenizer(format!("post-processor: {e}")))?;
        tok.with_post_processor(Some(processor));
    }
    let tokenizer_json = tok
        .to_string(true)
        .map_err(|e| HfError::Tokenizer(format!("writing tokenizer.json: {e}")))?;

    let mut config = Map::new();
    config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
    config.insert("clean_up_tokenization_spaces".into(), json!(false));
    for (key, value) in [("add_bos_token", add_bos), ("add_eos_token", add_eos)] {
        config.insert(key.into(), json!(value.unwrap_or(false)));
    }
    for (key, token) in [
        ("bos_token", &bos),
        ("eos_token", &eos),
        ("unk_token", &unk),
        ("pad_token", &pad),
    ] {
        if let Some((_, t)) = token {
            config.insert(key.into(), json!(t));
        }
    }
    if let Some(t) = file.opt_str("tokenizer.chat_template")? {
        config.insert("chat_template".into(), json!(t));
    }
    Ok(TokenizerOut {
        tokenizer_json: Some(tokenizer_json),
        tokenizer_model: None,
        tokenizer_config: Value::Object(config),
        generation_config: generation_config(file)?,
    })
}

/// generation_config.json: the BOS, EOS and padding ids.
fn generation_config(file: &GgufFile) -> Result<Value> {
    let n = file.get_str_array("tokenizer.ggml.tokens")?.len();
    let mut generation = Map::new();
    for (key, gguf) in [
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(id) = file.opt_u32(gguf)?.filter(|&id| (id as usize) < n) {
            generation.insert(key.into(), json!(id));
        }
    }
    Ok(Value::Object(generation))
}
