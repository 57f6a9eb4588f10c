//! The conversation inputs of a request: a completions request's prompts (texts or token
//! ids), a chat request's messages and its extra chat-template variables.

use kindle_generate::chat::{ChatEnding, ChatMessage, TemplateVars};
use serde_json::Value;

use crate::error::ApiError;
use crate::fields::{Object, expected, field, short, type_name};

/// The prompts of a completions request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text to encode.
    Text(String),
    /// Token ids.
    Ids(Vec<u32>),
}

/// `prompt`: a string, an array of strings, an array of token ids, or an array of such arrays.
pub fn prompts(object: &Object) -> Result<Vec<PromptInput>, ApiError> {
    let bad = |what: &str| {
        ApiError::invalid(
            "prompt",
            format!(
                "Invalid value for 'prompt': {what}. Expected a string, an array of strings, an \
                 array of token ids or an array of arrays of token ids."
            ),
        )
    };
    let Some(value) = field(object, "prompt") else {
        return Err(ApiError::invalid(
            "prompt",
            "Missing required parameter: 'prompt'.",
        ));
    };
    let ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| bad(&format!("{} is not a token id", short(v))))
            })
            .collect()
    };
    let inputs = match value {
        Value::String(s) => vec![PromptInput::Text(s.clone())],
        Value::Array(items) if items.is_empty() => return Err(bad("the array is empty")),
        Value::Array(items) => match &items[0] {
            Value::Number(_) => vec![PromptInput::Ids(ids(items)?)],
            Value::String(_) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(PromptInput::Text(s.clone())),
                    other => Err(bad(&format!("{} is not a string", short(other)))),
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => items
                .iter()
                .map(|item| match item {
                    Value::Array(inner) => Ok(PromptInput::Ids(ids(inner)?)),
                    other => Err(bad(&format!("{} is not an array", short(other)))),
                })
                .collect::<Result<_, _>>()?,
            other => return Err(bad(&format!("{} is not a prompt", short(other)))),
        },
        other => return Err(bad(&format!("got {}", type_name(other)))),
    };
    Ok(inputs)
}

/// `chat_template_kwargs` (vLLM's and llama-server's name): extra variables for the chat
/// template, a JSON object such as `{"enable_thinking": false}`; none when absent.
pub fn template_vars(object: &Object) -> Result<TemplateVars, ApiError> {
    const KEY: &str = "chat_template_kwargs";
    match field(object, KEY) {
        None | Some(Value::Null) => Ok(TemplateVars::default()),
        Some(Value::Object(vars)) => TemplateVars::from_json(vars)
            .map_err(|e| ApiError::invalid(KEY, format!("Invalid '{KEY}': {e}."))),
        Some(other) => Err(expected(KEY, "an object", other)),
    }
}

/// `documents` (vLLM's and `apply_chat_template`'s name): texts for a retrieval-augmented
/// template (Command R, Granite), a list of objects such as `{"title": ..., "text": ...}`;
/// none when absent.
pub fn documents(object: &Object) -> Result<Option<Value>, ApiError> {
    const KEY: &str = "documents";
    match field(object, KEY) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => match items.iter().position(|d| !d.is_object()) {
            None => Ok(Some(Value::Array(items.clone()))),
            Some(i) => Err(expected(
                &format!("{KEY}[{i}]"),
                "an object such as {\"title\": ..., \"text\": ...}",
                &items[i],
            )),
        },
        Some(other) => Err(expected(KEY, "an array of objects", other)),
    }
}

/// Where the rendered conversation ends: `add_generation_prompt` (default true) and
/// `continue_final_message` (default false: true continues the last message's content, a
/// prefilled reply; vLLM's and `transformers`' names), which cannot both be true.
pub fn chat_ending(object: &Object) -> Result<ChatEnding, ApiError> {
    let prompt = crate::fields::boolean(object, "add_generation_prompt")?;
    let continues = crate::fields::boolean(object, "continue_final_message")?.unwrap_or(false);
    match (prompt, continues) {
        (Some(true), true) => Err(ApiError::invalid(
            "continue_final_message",
            "Cannot set both 'continue_final_message' and 'add_generation_prompt' to true: \
             continuing the final message leaves its turn open (set 'add_generation_prompt' \
             to false).",
        )),
        (_, true) => Ok(ChatEnding::Continue),
        (Some(false), false) => Ok(ChatEnding::Closed),
        (None | Some(true), false) => Ok(ChatEnding::Prompt),
    }
}

/// `messages`: a non-empty array of `{role, content}`, content a string or an array of text
/// parts.
pub fn messages(object: &Object) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match field(object, "messages") {
        None => {
            return Err(ApiError::invalid(
                "messages",
                "Missing required parameter: 'messages'.",
            ));
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages",
                "Invalid value for 'messages': the array is empty.",
            ));
        }
        Some(other) => return Err(expected("messages", "an array of messages", other)),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| message(i, item))
        .collect()
}

fn message(i: usize, item: &Value) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{i}]");
    let Value::Object(object) = item else {
        return Err(expected(
            &param,
            "an object with 'role' and 'content'",
            item,
        ));
    };
    let role = match field(object, "role") {
        Some(Value::String(role)) => match role.as_str() {
            "system" | "user" | "assistant" | "tool" => role.clone(),
            "developer" => "system".to_string(),
            other => {
                return Err(ApiError::invalid(
                    format!("{param}.role"),
                    format!(
                        "Invalid value for '{param}.role': {other:?} (expected system, developer, \
                         user, assistant or tool)."
                    ),
                ));
            }
        },
        Some(other) => return Err(expected(&format!("{param}.role"), "a string", other)),
        None => {
            return Err(ApiError::invalid(
                format!("{param}.role"),
                format!("Missing required parameter: '{param}.role'."),
            ));
        }
    };
    let content_param = format!("{param}.content");
    let content = match field(object, "content") {
        None | Some(Value::Null) if role == "assistant" => String::new(),
        None => {
            return Err(ApiError::invalid(
                &content_param,
                format!("Missing required parameter: '{content_param}'."),
            ));
        }
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            &content_param,
                            format!(
                                "Invalid content part in '{content_param}': only {{\"type\": \
                                 \"text\", \"text\": ...}} parts are supported, got {}.",
                                short(part)
                            ),
                        ));
                    }
                }
            }
            text
        }
        Some(other) => {
            return Err(expected(
                &content_param,
                "a string or an array of text parts",
                other,
            ));
        }
    };
    let mut message = ChatMessage::new(role.clone(), content);
    // What templates read beside the content: an assistant turn's calls (their arguments as
    // objects, as vLLM hands them to templates), a tool result's call id and name.
    if role == "assistant"
        && let Some(calls) = field(object, "tool_calls").filter(|v| !v.is_null())
    {
        message = message.with_field("tool_calls", tool_calls(&param, calls)?);
    }
    for key in ["tool_call_id", "name", "reasoning_content"] {
        match field(object, key) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                message = message.with_field(key, Value::String(text.clone()));
            }
            Some(other) => return Err(expected(&format!("{param}.{key}"), "a string", other)),
        }
    }
    Ok(message)
}

/// An assistant message's `tool_calls`, checked (each with a function's `name` and its
/// `arguments`, JSON text or an object), the arguments as objects.
fn tool_calls(param: &str, calls: &Value) -> Result<Value, ApiError> {
    let param = format!("{param}.tool_calls");
    let Value::Array(items) = calls else {
        return Err(expected(&param, "an array of tool calls", calls));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, call) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
            Some(v @ Value::Object(_)) => Some(v.clone()),
            _ => None,
        };
        let (Some(name), Some(arguments)) = (name, arguments.filter(Value::is_object)) else {
            return Err(ApiError::invalid(
                &at,
                format!(
                    "Invalid value for '{at}': expected {{\"type\": \"function\", \"function\": \
                     {{\"name\": ..., \"arguments\": \"<a JSON object>\"}}}}."
                ),
            ));
        };
        let mut call = call.clone();
        call["function"] = serde_json::json!({"name": name, "arguments": arguments});
        out.push(call);
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::parse_object;

    fn obj(json: &str) -> Object {
        parse_object(json.as_bytes()).unwrap()
    }

    #[test]
    fn prompts_in_every_form() {
        let p = prompts(&obj(r#"{"prompt":"hi"}"#)).unwrap();
        assert_eq!(p, [PromptInput::Text("hi".into())]);
        let p = prompts(&obj(r#"{"prompt":[1,2]}"#)).unwrap();
        assert_eq!(p, [PromptInput::Ids(vec![1, 2])]);
        let p = prompts(&obj(r#"{"prompt":[[1],[2,3]]}"#)).unwrap();
        assert_eq!(p.len(), 2);
        let p = prompts(&obj(r#"{"prompt":["a","b"]}"#)).unwrap();
        assert_eq!(p.len(), 2);
        for bad in [
            r#"{"prompt":[]}"#,
            r#"{"prompt":[1,"a"]}"#,
            r#"{"prompt":[-1]}"#,
            r#"{"prompt":{}}"#,
            r#"{}"#,
        ] {
            let e = prompts(&obj(bad)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("prompt"), "{bad}");
        }
    }

    #[test]
    fn messages_are_checked() {
        let m = messages(&obj(
            r#"{"messages":[{"role":"developer","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#,
        ))
        .unwrap();
        assert_eq!(m[0].role, "system");
        assert_eq!(m[1].content, "ab");
        for (body, param) in [
            (r#"{"messages":[]}"#, "messages"),
            (
                r#"{"messages":[{"role":"king","content":"x"}]}"#,
                "messages[0].role",
            ),
            (r#"{"messages":[{"content":"x"}]}"#, "messages[0].role"),
            (r#"{"messages":[{"role":"user"}]}"#, "messages[0].content"),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                "messages[0].content",
            ),
            (r#"{"messages":"hi"}"#, "messages"),
        ] {
            let e = messages(&obj(body)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
        }
    }
}
