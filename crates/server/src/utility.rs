//! The endpoints beside generation: `/tokenize` and `/detokenize` (llama-server's and vLLM's
//! forms) and llama-server's `/props`.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use crate::app::{Shared, json_response, read_json};
use crate::codec::{Encoding, TextCodec};
use crate::error::ApiError;
use crate::request::{boolean, string};

/// `/tokenize`: llama-server's form (`content`; `add_special` default false, `parse_special`
/// default true; `with_pieces` gives each token's piece, as a byte array where it is not
/// UTF-8 on its own) or vLLM's (`prompt`; `add_special_tokens` default true).
pub(crate) async fn tokenize<C: TextCodec>(
    State(state): State<Shared<C>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let object = read_json(&headers, body, state.config.max_body_bytes).await?;
    let (key, add_key, add_default) = if object.contains_key("content") {
        ("content", "add_special", false)
    } else {
        ("prompt", "add_special_tokens", true)
    };
    let text = string(&object, key)?
        .ok_or_else(|| ApiError::invalid("content", "Missing required parameter: 'content'."))?;
    let encoding = Encoding {
        parse_special: boolean(&object, "parse_special")?.unwrap_or(true),
        add_special: boolean(&object, add_key)?.unwrap_or(add_default),
    };
    let tokens = state
        .codec
        .encode(text, encoding)
        .map_err(|e| ApiError::invalid(key, format!("Could not tokenize the text: {e}")))?;
    let with_pieces = boolean(&object, "with_pieces")?.unwrap_or(false);
    let tokens_json: Vec<Value> = if with_pieces {
        tokens
            .iter()
            .map(|&id| {
                let piece = match String::from_utf8(state.codec.token_bytes(id)) {
                    Ok(text) => json!(text),
                    Err(bytes) => json!(bytes.into_bytes()),
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        tokens.iter().map(|&id| json!(id)).collect()
    };
    Ok(json_response(json!({
        "tokens": tokens_json,
        "count": tokens.len(),
        "max_model_len": state.config.context,
    })))
}

/// `/detokenize`: the text of `tokens`, special tokens rendered (as llama-server).
pub(crate) async fn detokenize<C: TextCodec>(
    State(state): State<Shared<C>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let object = read_json(&headers, body, state.config.max_body_bytes).await?;
    let ids = match object.get("tokens") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .filter(|&id| (id as usize) < state.codec.vocab_size())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tokens",
                            format!("Invalid value for 'tokens': {v} is not a token id."),
                        )
                    })
            })
            .collect::<Result<Vec<u32>, _>>()?,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "tokens",
                "Missing required parameter: 'tokens' (an array of token ids).",
            ));
        }
        Some(other) => {
            return Err(crate::request::expected(
                "tokens",
                "an array of token ids",
                other,
            ));
        }
    };
    let text = state
        .codec
        .render(&ids)
        .map_err(|e| ApiError::invalid("tokens", format!("Could not decode the tokens: {e}")))?;
    Ok(json_response(json!({ "content": text })))
}

/// llama-server's `/props`: the context size, the slots, the model's name and chat template
/// (what llama.cpp's web UI and tools read).
pub(crate) async fn props<C: TextCodec>(State(state): State<Shared<C>>) -> Response {
    let config = &state.config;
    json_response(json!({
        "default_generation_settings": {
            "n_ctx": config.context,
            "model": config.model_name,
        },
        "total_slots": config.parallel,
        "model_alias": config.model_name,
        "model_path": config.model_name,
        "chat_template": state.codec.chat_template().unwrap_or_default(),
        "modalities": {"vision": false, "audio": false},
        "build_info": format!("kindle {}", env!("CARGO_PKG_VERSION")),
    }))
}
