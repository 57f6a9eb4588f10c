//! Tool calling on chat completions, in the Hermes format that Qwen2.5, Qwen3 and many
//! fine-tunes are trained on: the request's `tools` go to the chat template (as
//! `apply_chat_template(tools=...)` passes them), the model writes each call as
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, and the server turns those
//! blocks into the message's `tool_calls` (`finish_reason: "tool_calls"`). `tool_choice`:
//! `none` (the template gets no tools; nothing is parsed), `auto` (the default), `required`
//! or one named function (the output is constrained to calls, of that function, with
//! arguments valid against its `parameters` schema).
//!
//! ```
//! use kindle_server::tools::parse_calls;
//! let (content, calls) =
//!     parse_calls("Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
//! assert_eq!(content, "Let me look.");
//! assert_eq!(calls[0].name, "weather");
//! assert_eq!(calls[0].arguments, r#"{"city": "Oslo"}"#); // as the model wrote them
//! ```

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::fields::{Object, expected, field};

pub(crate) mod scan;

/// The tag that opens a call.
pub const OPEN: &str = "<tool_call>";
/// The tag that closes it.
pub const CLOSE: &str = "</tool_call>";

/// How a model writes its calls, judged from its chat template's text
/// ([`ToolFormat::of_template`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks among text (Hermes:
    /// Qwen2.5, Qwen3 and many fine-tunes).
    #[default]
    Hermes,
    /// The whole reply one JSON object `{"name": ..., "parameters": {...}}` (or a list of
    /// them), as Llama 3.1-3.3's templates ask for (after `<|python_tag|>`, which decoding
    /// drops).
    Llama3,
    /// The whole reply a JSON list of `{"name": ..., "arguments": {...}}` after the
    /// `[TOOL_CALLS]` control token (which decoding drops), as Mistral's v0.3 templates (Mistral
    /// 7B Instruct v0.3, Mixtral, Mistral Nemo) ask for; call ids are nine letters and digits,
    /// which those templates check.
    Mistral,
}

impl ToolFormat {
    /// The format a chat template's source asks for: Hermes where it writes `<tool_call>`,
    /// Mistral's where it writes `[TOOL_CALLS]`, Llama 3's where it asks for `"parameters"` or
    /// names `<|python_tag|>`, else Hermes.
    pub fn of_template(source: &str) -> Self {
        if source.contains(OPEN) {
            ToolFormat::Hermes
        } else if source.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if source.contains("<|python_tag|>")
            || source.contains("\"parameters\": dictionary of argument name")
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Hermes
        }
    }

    /// The key a call's arguments go under (the first the parser reads).
    fn arguments_key(self) -> &'static str {
        argument_keys(self)[0]
    }

    /// A new call's id: OpenAI's `call_` and 24 hexadecimal digits, or for Mistral nine
    /// letters and digits (its templates refuse any other).
    pub fn call_id(self) -> String {
        let (t, n) = id_parts();
        match self {
            ToolFormat::Mistral => {
                // The clock and the counter mixed, as nine base-62 digits.
                const DIGITS: &[u8] =
                    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
                let mut x = t ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                (0..9)
                    .map(|_| {
                        let d = DIGITS[(x % 62) as usize] as char;
                        x /= 62;
                        d
                    })
                    .collect()
            }
            _ => openai_id(t, n),
        }
    }
}

/// Which calls the model may or must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// None: the template is not given the tools.
    None,
    /// Calls or an answer, as the model decides.
    Auto,
    /// At least one call.
    Required,
    /// Calls of this function only.
    Named(String),
}

/// A request's tools and its `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    /// The tools as the request gave them (`{"type": "function", "function": {...}}`).
    pub list: Vec<Value>,
    /// What the model may do with them.
    pub choice: ToolChoice,
    /// Whether a reply may make several calls (`parallel_tool_calls`, default true).
    pub parallel: bool,
    /// How the model writes calls (set from the chat template; Hermes until then).
    pub format: ToolFormat,
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Its id (see [`ToolFormat::call_id`]).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments, as JSON text (OpenAI's `function.arguments`).
    pub arguments: String,
}

/// `tools` and `tool_choice` of a chat request; `None` without tools.
pub fn tools(object: &Object) -> Result<Option<Tools>, ApiError> {
    let list = match field(object, "tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => return Err(expected("tools", "an array of tools", other)),
    };
    let mut names = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let param = format!("tools[{i}]");
        let function = match (tool.get("type"), tool.get("function")) {
            (Some(Value::String(t)), Some(Value::Object(f))) if t == "function" => f,
            _ => {
                return Err(ApiError::invalid(
                    &param,
                    format!(
                        "Invalid value for '{param}': expected {{\"type\": \"function\", \
                         \"function\": {{\"name\": ..., \"parameters\": {{...}}}}}}."
                    ),
                ));
            }
        };
        match function.get("name") {
            Some(Value::String(name)) if !name.is_empty() => names.push(name.clone()),
            _ => {
                return Err(ApiError::invalid(
                    format!("{param}.function.name"),
                    format!("Missing or empty '{param}.function.name'."),
                ));
            }
        }
        if let Some(p) = function.get("parameters")
            && !p.is_object()
        {
            return Err(expected(
                &format!("{param}.function.parameters"),
                "a JSON schema object",
                p,
            ));
        }
    }
    let choice = match field(object, "tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "Invalid value for 'tool_choice': {other:?} (expected none, auto, \
                         required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}})."
                    ),
                ));
            }
        },
        Some(Value::Object(o)) => match o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) => ToolChoice::Named(name.to_string()),
            None => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "Invalid value for 'tool_choice': a named choice is {\"type\": \"function\", \
                     \"function\": {\"name\": ...}}.",
                ));
            }
        },
        Some(other) => return Err(expected("tool_choice", "a string or an object", other)),
    };
    let parallel = match field(object, "parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(expected("parallel_tool_calls", "a boolean", other)),
    };
    if list.is_empty() {
        return match choice {
            ToolChoice::Required | ToolChoice::Named(_) => Err(ApiError::invalid(
                "tool_choice",
                "'tool_choice' asks for a call, but the request has no 'tools'.",
            )),
            _ => Ok(None),
        };
    }
    if let ToolChoice::Named(name) = &choice
        && !names.contains(name)
    {
        return Err(ApiError::invalid(
            "tool_choice",
            format!("'tool_choice' names {name:?}, which is not one of the request's tools."),
        ));
    }
    Ok(Some(Tools {
        list,
        choice,
        parallel,
        format: ToolFormat::default(),
    }))
}

impl Tools {
    /// The template variables the tools give (`tools`), unless the choice is `none`.
    pub fn template_vars(&self) -> Map<String, Value> {
        let mut vars = Map::new();
        if self.choice != ToolChoice::None {
            vars.insert("tools".into(), Value::Array(self.list.clone()));
        }
        vars
    }

    /// Whether the reply is parsed for calls.
    pub fn parses(&self) -> bool {
        self.choice != ToolChoice::None
    }

    /// Whether the choice asks for a call (so the output is constrained to calls).
    pub fn forces_call(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// For `required` or a named function, a Lark grammar (llguidance's dialect) of one or
    /// more calls in the model's format whose arguments follow the functions' `parameters`
    /// schemas.
    pub fn grammar(&self) -> Option<String> {
        let allowed: Vec<&Value> = match &self.choice {
            ToolChoice::None | ToolChoice::Auto => return None,
            ToolChoice::Required => self.list.iter().collect(),
            ToolChoice::Named(name) => self
                .list
                .iter()
                .filter(|t| t["function"]["name"].as_str() == Some(name))
                .collect(),
        };
        let calls: Vec<Value> = allowed
            .iter()
            .map(|t| {
                let parameters = match t["function"].get("parameters") {
                    Some(p) => p.clone(),
                    None => json!({"type": "object"}),
                };
                let key = self.format.arguments_key();
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"const": t["function"]["name"]},
                        key: parameters,
                    },
                    "required": ["name", key],
                    "additionalProperties": false,
                })
            })
            .collect();
        // Compact JSON (llguidance's options): no whitespace for a small model to wander in.
        let schema = json!({
            "anyOf": calls,
            "x-guidance": {"whitespace_flexible": false, "item_separator": ", ",
                           "key_separator": ": "},
        });
        Some(match self.format {
            ToolFormat::Hermes => {
                let more = if self.parallel {
                    " (\"\\n\" call)*"
                } else {
                    ""
                };
                format!(
                    "start: call{more}\ncall: \"{OPEN}\\n\" body \"\\n{CLOSE}\"\n\
                     body: %json {schema}\n"
                )
            }
            // One object a reply (parallel calls are a Hermes feature here).
            ToolFormat::Llama3 => format!("start: body\nbody: %json {schema}\n"),
            ToolFormat::Mistral => {
                let more = if self.parallel { " (\", \" body)*" } else { "" };
                format!("start: \"[\" body{more} \"]\"\nbody: %json {schema}\n")
            }
        })
    }
}

/// Split a reply into its text and its calls, in the model's format (see [`ToolFormat`]);
/// no calls when the reply has none that parse.
pub fn parse_calls_as(format: ToolFormat, text: &str) -> (String, Vec<ToolCall>) {
    match format {
        ToolFormat::Hermes => parse_calls(text),
        ToolFormat::Llama3 | ToolFormat::Mistral => {
            let body = text.trim();
            let body = ["<|python_tag|>", "[TOOL_CALLS]"]
                .iter()
                .fold(body, |b, tag| b.strip_prefix(tag).unwrap_or(b))
                .trim();
            let calls = match serde_json::from_str::<Value>(body) {
                Ok(Value::Array(_)) => scan::list_items(body).and_then(|items| {
                    items
                        .into_iter()
                        .map(|(start, end)| call_of(&body[start..end], format))
                        .collect()
                }),
                Ok(Value::Object(_)) => call_of(body, format).map(|c| vec![c]),
                _ => None,
            };
            match calls {
                Some(calls) if !calls.is_empty() => (String::new(), calls),
                _ => (text.to_string(), Vec::new()),
            }
        }
    }
}

/// The keys a call's arguments may be under, in `format`.
pub(crate) fn argument_keys(format: ToolFormat) -> &'static [&'static str] {
    match format {
        ToolFormat::Hermes | ToolFormat::Mistral => &["arguments"],
        ToolFormat::Llama3 => &["parameters", "arguments"],
    }
}

/// A call from the text of a JSON object with a string `name` and its arguments under one of
/// `keys` (an object, or JSON text of one; none: `{}`). The arguments are the object's text
/// as the model wrote it (what a stream sends piece by piece).
fn call_of(body: &str, format: ToolFormat) -> Option<ToolCall> {
    let keys = argument_keys(format);
    let value: Value = serde_json::from_str(body).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let scan = scan::scan_call(body, keys)?;
    let arguments = match scan.arguments {
        None => "{}".to_string(),
        Some((start, end)) => {
            let raw = &body[start..end?];
            match serde_json::from_str::<Value>(raw).ok()? {
                Value::Object(_) => raw.to_string(),
                Value::String(text) => {
                    let parsed: Value = serde_json::from_str(&text).ok()?;
                    parsed.is_object().then(|| text.trim().to_string())?
                }
                _ => return None,
            }
        }
    };
    Some(ToolCall {
        id: format.call_id(),
        name,
        arguments,
    })
}

/// Split a reply into its text and its calls: every `<tool_call>` block whose body is a JSON
/// object with a string `name` and an `arguments` object (or JSON text of one) is a call
/// (arguments compacted to JSON text); the rest, trimmed, is the text. A block that does not
/// parse stays in the text; a last block left open (the token limit cut it) is a call if its
/// body is one, else dropped after calls (no answer, and no call), else text.
pub fn parse_calls(text: &str) -> (String, Vec<ToolCall>) {
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut at = 0;
    while let Some(start) = text[at..].find(OPEN).map(|i| at + i) {
        let body_start = start + OPEN.len();
        let Some(end) = text[body_start..].find(CLOSE).map(|i| body_start + i) else {
            // The last block, left open (the token limit cut its closing tag or more): a
            // call if its body is one, or if its name was written (its arguments as far as
            // they go, as a stream has sent them), dropped if calls came before it, else text.
            let body = text[body_start..].trim();
            let call = call_of(body, ToolFormat::Hermes).or_else(|| cut_call(body));
            if call.is_some() || !calls.is_empty() {
                rest.push_str(&text[at..start]);
                calls.extend(call);
                at = text.len();
            }
            break;
        };
        match call_of(text[body_start..end].trim(), ToolFormat::Hermes) {
            Some(call) => {
                rest.push_str(&text[at..start]);
                calls.push(call);
            }
            None => rest.push_str(&text[at..end + CLOSE.len()]),
        }
        at = end + CLOSE.len();
    }
    rest.push_str(&text[at..]);
    (rest.trim().to_string(), calls)
}

/// A Hermes call the token limit cut after its name and the start of its arguments: the
/// arguments as written so far (not JSON: OpenAI's calls cut by `max_tokens` are the same).
fn cut_call(body: &str) -> Option<ToolCall> {
    let keys = argument_keys(ToolFormat::Hermes);
    let scan = scan::scan_call(body, keys)?;
    let name = scan.name?;
    let (start, None) = scan.arguments? else {
        return None;
    };
    Some(ToolCall {
        id: ToolFormat::Hermes.call_id(),
        name,
        arguments: body[start..].trim_end().to_string(),
    })
}

/// What makes a call id unique: the clock (nanoseconds) and a process-wide counter.
fn id_parts() -> (u64, u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t, n)
}

/// OpenAI's form of an id, unique within the process: `call_` and 24 hexadecimal digits.
fn openai_id(t: u64, n: u64) -> String {
    format!("call_{t:016x}{n:08x}")
}

/// The `tool_calls` of a message.
pub fn calls_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Object {
        crate::fields::parse_object(text.as_bytes()).unwrap()
    }

    fn named(calls: &[ToolCall]) -> Vec<(&str, &str)> {
        calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn mistral_replies_are_a_list_of_calls_with_nine_character_ids() {
        let template = "{% if tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]\
                        {% endif %}... [TOOL_CALLS] {{ calls | tojson }}";
        assert_eq!(ToolFormat::of_template(template), ToolFormat::Mistral);
        let reply = r#" [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]"#;
        let (text, calls) = parse_calls_as(ToolFormat::Mistral, reply);
        assert_eq!(text, "");
        assert_eq!(named(&calls), [("a", r#"{"x": 1}"#), ("b", "{}")]);
        let (_, shown) = parse_calls_as(ToolFormat::Mistral, &format!("[TOOL_CALLS]{reply}"));
        assert_eq!(named(&shown), named(&calls));
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| ToolFormat::Mistral.call_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric())),
            "{ids:?}"
        );
        // Not calls: prose, a list of other things.
        for text in ["Sunny.", "[1, 2]", r#"[{"name": "a", "arguments": {}}, 3]"#] {
            assert_eq!(
                parse_calls_as(ToolFormat::Mistral, text),
                (text.to_string(), Vec::new())
            );
        }
        let t = tools(&obj(
            r#"{"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}"#,
        ))
        .unwrap()
        .unwrap();
        let mistral = Tools {
            format: ToolFormat::Mistral,
            ..t
        };
        let grammar = mistral.grammar().unwrap();
        assert!(
            grammar.starts_with("start: \"[\" body (\", \" body)* \"]\"")
                && grammar.contains("\"arguments\""),
            "{grammar}"
        );
    }

    #[test]
    fn calls_are_parsed_and_the_rest_is_text() {
        let (text, calls) = parse_calls(
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n\
             <tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}</tool_call>",
        );
        assert_eq!(text, "");
        assert_eq!(
            named(&calls),
            [("a", r#"{"x": 1}"#), ("b", r#"{"y": [2]}"#)]
        );
        assert!(
            calls
                .iter()
                .all(|c| c.id.starts_with("call_") && c.id.len() == 29)
        );
        assert_ne!(calls[0].id, calls[1].id);
        // Not a call: a body that is not such an object, or a block left open.
        for text in [
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>",
            "hi <tool_call>{\"name\": \"a\"",
        ] {
            let (rest, calls) = parse_calls(text);
            assert!(calls.is_empty(), "{text}");
            assert_eq!(rest, text.trim(), "{text}");
        }
    }

    #[test]
    fn llama3_replies_are_one_json_call_or_text() {
        let (text, calls) = parse_calls_as(
            ToolFormat::Llama3,
            " {\"name\": \"w\", \"parameters\": {\"city\": \"Oslo\"}}",
        );
        assert_eq!(text, "");
        assert_eq!(named(&calls), [("w", r#"{"city": "Oslo"}"#)]);
        let (_, calls) = parse_calls_as(
            ToolFormat::Llama3,
            r#"[{"name": "a", "parameters": {}}, {"name": "b", "arguments": {"x": 1}}]"#,
        );
        assert_eq!(calls.len(), 2);
        for text in [
            "The weather is fine.",
            "{\"city\": \"Oslo\"}",
            "{\"name\": \"w\", \"parameters\": 3}",
        ] {
            assert_eq!(
                parse_calls_as(ToolFormat::Llama3, text),
                (text.to_string(), Vec::new())
            );
        }
        // The format a template asks for.
        assert_eq!(
            ToolFormat::of_template("... <tool_call> ..."),
            ToolFormat::Hermes
        );
        assert_eq!(
            ToolFormat::of_template(
                "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
            ),
            ToolFormat::Llama3
        );
        assert_eq!(ToolFormat::of_template("{{ tools }}"), ToolFormat::Hermes);
        let t = tools(&crate::fields::parse_object(
            br#"{"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}"#,
        ).unwrap())
        .unwrap()
        .unwrap();
        let llama = Tools {
            format: ToolFormat::Llama3,
            ..t
        };
        let grammar = llama.grammar().unwrap();
        assert!(
            grammar.starts_with("start: body") && grammar.contains("\"parameters\""),
            "{grammar}"
        );
    }

    #[test]
    fn tools_and_choices_are_checked() {
        let tool =
            r#"{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}"#;
        let t = tools(&obj(&format!(r#"{{"tools": [{tool}]}}"#)))
            .unwrap()
            .unwrap();
        assert_eq!(t.choice, ToolChoice::Auto);
        assert!(t.grammar().is_none() && t.parses());
        let t = tools(&obj(&format!(
            r#"{{"tools": [{tool}], "tool_choice": {{"type": "function", "function": {{"name": "f"}}}}}}"#
        )))
        .unwrap()
        .unwrap();
        let grammar = t.grammar().unwrap();
        assert!(
            grammar.contains("%json") && grammar.contains("call)*"),
            "{grammar}"
        );
        let one = tools(&obj(&format!(
            r#"{{"tools": [{tool}], "tool_choice": "required", "parallel_tool_calls": false}}"#
        )))
        .unwrap()
        .unwrap();
        assert!(!one.grammar().unwrap().contains("call)*"));
        let none = tools(&obj(&format!(
            r#"{{"tools": [{tool}], "tool_choice": "none"}}"#
        )))
        .unwrap()
        .unwrap();
        assert!(none.template_vars().is_empty() && !none.parses());
        assert_eq!(tools(&obj("{}")).unwrap(), None);
        for (body, param) in [
            (r#"{"tools": 3}"#.to_string(), "tools"),
            (r#"{"tools": [{"type": "function"}]}"#.into(), "tools[0]"),
            (
                r#"{"tools": [{"type": "function", "function": {"name": ""}}]}"#.into(),
                "tools[0].function.name",
            ),
            (
                format!(r#"{{"tools": [{tool}], "tool_choice": "always"}}"#),
                "tool_choice",
            ),
            (
                format!(
                    r#"{{"tools": [{tool}], "tool_choice": {{"type": "function", "function": {{"name": "g"}}}}}}"#
                ),
                "tool_choice",
            ),
            (r#"{"tool_choice": "required"}"#.into(), "tool_choice"),
            (
                format!(r#"{{"tools": [{tool}], "parallel_tool_calls": 1}}"#),
                "parallel_tool_calls",
            ),
        ] {
            let e = tools(&obj(&body)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
        }
    }
}
