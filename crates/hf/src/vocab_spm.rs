//! SentencePiece vocabularies (GGUF `tokenizer.ggml.model = llama`) both ways through
//! `tokenizer.model`, as llama.cpp's `_create_vocab_sentencepiece` / `_set_vocab_sentencepiece`
//! and `SpecialVocab` read them.

use kindle_gguf::{GgufFile, MetadataValue};
use serde_json::{Map, Value, json};

use crate::config::Arch;
use crate::error::{HfError, Result};
use crate::json::JsonObject;
use crate::spm_proto::{self, MODEL_BPE, Piece, SpmModel, piece_type};
use crate::vocab_import::{
    CONTROL, NORMAL, TokenizerFiles, UNKNOWN, UNUSED, USER_DEFINED, add_special, chat_template,
    looks_special,
};

/// GGUF's byte token type (llama.cpp's `LLAMA_TOKEN_TYPE_BYTE`).
const BYTE: i32 = 6;

/// The score llama.cpp gives added tokens (added_tokens.json, `added_tokens_decoder`).
const ADDED_SCORE: f32 = -1000.0;

/// The GGUF tokenizer metadata of `tokenizer.model` (bytes `model`) with the other files
/// of `files`: llama.cpp's `_set_vocab_sentencepiece`, then `SpecialVocab`.
pub(crate) fn metadata(
    files: &TokenizerFiles,
    model: &[u8],
    arch: Arch,
    vocab_size: Option<u64>,
    model_config: Option<&JsonObject>,
) -> Result<Vec<(String, MetadataValue)>> {
    let spm = spm_proto::parse(model)?;
    let bad = |what: String| HfError::Tokenizer(format!("tokenizer.model: {what}"));
    let n = vocab_size.unwrap_or(spm.pieces.len() as u64);
    if n > (spm.pieces.len() as u64)
        .saturating_mul(2)
        .saturating_add(1 << 20)
    {
        return Err(bad(format!(
            "config.json's vocab_size {n} is far above the {} pieces",
            spm.pieces.len()
        )));
    }
    let n = n as usize; // bounded just above
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut types = vec![UNUSED; n];
    for (i, p) in spm.pieces.iter().take(n).enumerate() {
        tokens[i].clone_from(&p.piece);
        scores[i] = p.score;
        // llama.cpp asks IsUnknown, IsControl, IsUnused, IsByte: user-defined pieces are normal.
        types[i] = match p.ty {
            piece_type::UNKNOWN => UNKNOWN,
            piece_type::CONTROL => CONTROL,
            piece_type::UNUSED => UNUSED,
            piece_type::BYTE => BYTE,
            _ => NORMAL,
        };
    }
    if let Some(added) = &files.added_tokens {
        for (content, id) in &added.map {
            let id = id
                .as_u64()
                .ok_or_else(|| added.wrong(content, "a token id", id))?;
            if let Some(i) = usize::try_from(id).ok().filter(|&i| i < n) {
                tokens[i].clone_from(content);
                scores[i] = ADDED_SCORE;
                types[i] = USER_DEFINED;
            }
        }
    }
    if let Some(config) = &files.config
        && let Some(decoder) = config.object("added_tokens_decoder")?
    {
        for (id, data) in &decoder.map {
            let content = data.get("content").and_then(Value::as_str);
            let (Ok(id), Some(content)) = (id.parse::<usize>(), content) else {
                return Err(decoder.wrong(id, "{\"content\": ...} under a token id", data));
            };
            if id >= n {
                continue;
            }
            let special = data.get("special").and_then(Value::as_bool) == Some(true);
            if special || looks_special(content) {
                types[id] = CONTROL;
                content.clone_into(&mut tokens[id]);
            } else {
                types[id] = USER_DEFINED;
                tokens[id] = content.replace('\u{2581}', " ");
            }
            scores[id] = ADDED_SCORE;
        }
    }

    let mut out: Vec<(String, MetadataValue)> = vec![
        ("tokenizer.ggml.model".into(), "llama".into()),
        ("tokenizer.ggml.pre".into(), "default".into()),
        ("tokenizer.ggml.tokens".into(), tokens.into()),
        ("tokenizer.ggml.scores".into(), scores.into()),
        ("tokenizer.ggml.token_type".into(), types.into()),
    ];
    // Special ids: tokenizer_config.json's `{typ}_token` found among tokenizer.json's added
    // tokens (llama.cpp), else config.json's `{typ}_token_id`, else the trainer spec's id.
    let added_id = |content: &str| -> Option<u64> {
        let list = files.json.as_ref()?.map.get("added_tokens")?.as_array()?;
        list.iter()
            .find(|t| t.get("content").and_then(Value::as_str) == Some(content))?
            .get("id")?
            .as_u64()
    };
    let special_id = |typ: &str| -> Option<u64> {
        let entry = files.config.as_ref()?.map.get(&format!("{typ}_token"))?;
        added_id(entry.as_str().or_else(|| entry.get("content")?.as_str())?)
    };
    for (typ, key, trained) in [
        ("bos", "bos_token_id", spm.bos_id),
        ("eos", "eos_token_id", spm.eos_id),
        ("unk", "unknown_token_id", spm.unk_id),
        ("pad", "padding_token_id", spm.pad_id),
    ] {
        let from_model = || model_config?.map.get(&format!("{typ}_token_id"))?.as_u64();
        let from_trainer = u64::try_from(trained).ok();
        if let Some(id) = special_id(typ)
            .or_else(from_model)
            .or(from_trainer)
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
    // `add_sep_token` from tokenizer_config.json only (llama.cpp also infers it from a
    // tokenizer.json's pair template; Gemma's says false).
    if let Some(c) = &files.config
        && let Some(sep) = c.opt_bool("add_sep_token")?
    {
        out.push(("tokenizer.ggml.add_sep_token".into(), sep.into()));
    }
    // Gemma: always false (llama.cpp). Others: tokenizer_config.json's add_prefix_space
    // (llama.cpp), else the normalizer's add_dummy_prefix when false (llama.cpp's default is
    // true, and it does not read the normalizer).
    let add_space = match arch {
        Arch::Gemma3 => Some(false),
        _ => match &files.config {
            Some(c) => c.opt_bool("add_prefix_space")?,
            None => None,
        }
        .or((!spm.add_dummy_prefix).then_some(false)),
    };
    if let Some(a) = add_space {
        out.push(("tokenizer.ggml.add_space_prefix".into(), a.into()));
    }
    if let Some(t) = chat_template(files)? {
        out.push(("tokenizer.chat_template".into(), t.into()));
    }
    Ok(out)
}

/// `tokenizer.model` and the tokenizer_config.json of a SentencePiece GGUF vocabulary.
pub(crate) fn export(file: &GgufFile, arch: Arch) -> Result<(Vec<u8>, Value)> {
    let tokens = file.get_str_array("tokenizer.ggml.tokens")?;
    let n = tokens.len();
    let scores = read_scores(file)?;
    let types = file
        .opt_i32_array("tokenizer.ggml.token_type")?
        .unwrap_or_default();
    for (key, len) in [
        ("tokenizer.ggml.scores", scores.len()),
        ("tokenizer.ggml.token_type", types.len()),
    ] {
        if len != 0 && len != n {
            return Err(HfError::Tokenizer(format!(
                "{key} has {len} entries for {n} tokens"
            )));
        }
    }
    let ty = |i: usize| types.get(i).copied().unwrap_or(NORMAL);
    let score = |i: usize| scores.get(i).copied().unwrap_or(0.0);
    let pieces: Vec<Piece> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| Piece {
            piece: (*t).to_owned(),
            score: score(i),
            ty: match ty(i) {
                UNKNOWN => piece_type::UNKNOWN,
                CONTROL => piece_type::CONTROL,
                USER_DEFINED => piece_type::USER_DEFINED,
                UNUSED => piece_type::UNUSED,
                BYTE => piece_type::BYTE,
                _ => piece_type::NORMAL,
            },
        })
        .collect();
    let id = |key: &str| -> Result<Option<u32>> {
        Ok(file.opt_u32(key)?.filter(|&id| (id as usize) < n))
    };
    let ids = [
        id("tokenizer.ggml.unknown_token_id")?,
        id("tokenizer.ggml.bos_token_id")?,
        id("tokenizer.ggml.eos_token_id")?,
        id("tokenizer.ggml.padding_token_id")?,
    ];
    let trained = |id: Option<u32>| id.map_or(-1, |i| i as i32);
    let add_space = file.opt_bool("tokenizer.ggml.add_space_prefix")?;
    let byte_fallback = (0..n).any(|i| ty(i) == BYTE);
    let model = SpmModel {
        pieces,
        model_type: MODEL_BPE,
        byte_fallback,
        unk_id: trained(ids[0]),
        bos_id: trained(ids[1]),
        eos_id: trained(ids[2]),
        pad_id: trained(ids[3]),
        normalizer_name: "identity".into(),
        add_dummy_prefix: add_space.unwrap_or(true),
        remove_extra_whitespaces: false,
        escape_whitespaces: true,
    };

    let mut config = Map::new();
    let class = match arch {
        Arch::Gemma3 => "GemmaTokenizer",
        _ => "LlamaTokenizer",
    };
    config.insert("tokenizer_class".into(), json!(class));
    config.insert("clean_up_tokenization_spaces".into(), json!(false));
    config.insert("legacy".into(), json!(false));
    for key in ["add_bos_token", "add_eos_token", "add_sep_token"] {
        if let Some(b) = file.opt_bool(&format!("tokenizer.ggml.{key}"))? {
            config.insert(key.into(), json!(b));
        }
    }
    if arch != Arch::Gemma3
        && let Some(a) = add_space
    {
        config.insert("add_prefix_space".into(), json!(a));
    }
    for (key, id) in ["unk_token", "bos_token", "eos_token", "pad_token"]
        .iter()
        .zip(ids)
    {
        if let Some(id) = id {
            config.insert((*key).into(), json!(tokens[id as usize]));
        }
    }
    // Added tokens whose llama.cpp override (type from `special`, score -1000) gives back
    // the GGUF's type and score exactly.
    let mut decoder = Map::new();
    for (i, t) in tokens.iter().enumerate() {
        let control = ty(i) == CONTROL;
        let user = ty(i) == USER_DEFINED && !looks_special(t) && !t.contains('\u{2581}');
        if (control || user) && score(i) == ADDED_SCORE {
            decoder.insert(
                i.to_string(),
                json!({ "content": t, "lstrip": false, "normalized": false, "rstrip": false,
                        "single_word": false, "special": control }),
            );
        }
    }
    config.insert("added_tokens_decoder".into(), Value::Object(decoder));
    if let Some(t) = file.opt_str("tokenizer.chat_template")? {
        config.insert("chat_template".into(), json!(t));
    }
    Ok((spm_proto::write(&model), Value::Object(config)))
}

/// `tokenizer.ggml.scores` as `f32` (empty when absent; exact for `f32` arrays).
fn read_scores(file: &GgufFile) -> Result<Vec<f32>> {
    let Some(list) = file.opt_array("tokenizer.ggml.scores")? else {
        return Ok(Vec::new());
    };
    list.values()
        .enumerate()
        .map(|(i, v)| match v {
            MetadataValue::F32(f) => Ok(f),
            other => other.as_f64().map(|f| f as f32).ok_or_else(|| {
                HfError::Tokenizer(format!("tokenizer.ggml.scores[{i}] is not a number"))
            }),
        })
        .collect()
}
