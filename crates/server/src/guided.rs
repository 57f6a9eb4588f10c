//! Structured output fields: OpenAI's `response_format` (`json_object`, `json_schema`),
//! vLLM's `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`, and llama-server's
//! `grammar` (GBNF), `json_schema` and `response_format` with a `schema`.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq)]
pub enum Guided {
    /// JSON valid against this schema.
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// A full match of this regex.
    Regex(String),
    /// One of these strings.
    Choice(Vec<String>),
    /// A string of this Lark grammar.
    Grammar(String),
    /// A string of this GBNF grammar (llama.cpp's format).
    Gbnf(String),
}

/// A request's output constraint and the field that asked for it (at most one field may).
pub fn guided(object: &Map<String, Value>) -> Result<Option<(Guided, &'static str)>, ApiError> {
    let mut found = Vec::new();
    if let Some(value) = object.get("response_format").filter(|v| !v.is_null())
        && let Some(spec) = response_format(value)?
    {
        found.push((spec, "response_format"));
    }
    for key in ["guided_json", "json_schema"] {
        if let Some(value) = object.get(key).filter(|v| !v.is_null()) {
            let schema = match value {
                Value::String(text) => serde_json::from_str(text)
                    .map_err(|e| ApiError::invalid(key, format!("'{key}' is not JSON: {e}")))?,
                other => other.clone(),
            };
            found.push((Guided::JsonSchema(schema), key));
        }
    }
    if let Some(value) = object.get("guided_regex").filter(|v| !v.is_null()) {
        let rx = value
            .as_str()
            .ok_or_else(|| ApiError::invalid("guided_regex", "'guided_regex' must be a string."))?;
        found.push((Guided::Regex(rx.to_owned()), "guided_regex"));
    }
    if let Some(value) = object.get("guided_choice").filter(|v| !v.is_null()) {
        let choices = value
            .as_array()
            .filter(|a| !a.is_empty())
            .and_then(|a| {
                a.iter()
                    .map(|c| c.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                ApiError::invalid(
                    "guided_choice",
                    "'guided_choice' must be a non-empty array of strings.",
                )
            })?;
        found.push((Guided::Choice(choices), "guided_choice"));
    }
    if let Some(value) = object.get("guided_grammar").filter(|v| !v.is_null()) {
        let grammar = value.as_str().ok_or_else(|| {
            ApiError::invalid("guided_grammar", "'guided_grammar' must be a string.")
        })?;
        found.push((Guided::Grammar(grammar.to_owned()), "guided_grammar"));
    }
    // llama-server's `grammar`: GBNF, or llguidance's Lark behind `%llguidance`, as there.
    if let Some(value) = object.get("grammar").filter(|v| !v.is_null()) {
        let grammar = value
            .as_str()
            .ok_or_else(|| ApiError::invalid("grammar", "'grammar' must be a string."))?;
        if grammar.trim_start().starts_with("%llguidance") {
            found.push((Guided::Grammar(grammar.to_owned()), "grammar"));
        } else if !grammar.trim().is_empty() {
            found.push((Guided::Gbnf(grammar.to_owned()), "grammar"));
        }
    }
    if found.len() > 1 {
        return Err(ApiError::invalid(
            found[1].1,
            format!(
                "'{}' and '{}' cannot be combined: give one output constraint.",
                found[0].1, found[1].1
            ),
        ));
    }
    Ok(found.pop())
}

/// `response_format`: `{"type": "text"}` (no constraint), `{"type": "json_object"}` or
/// `{"type": "json_schema", "json_schema": {"name": .., "schema": {..}}}`; as llama-server,
/// either JSON type with a `schema` beside `type` is that schema.
fn response_format(value: &Value) -> Result<Option<Guided>, ApiError> {
    let invalid = |message: &str| ApiError::invalid("response_format", message);
    let object = value
        .as_object()
        .ok_or_else(|| invalid("'response_format' must be an object."))?;
    let schema = object.get("schema").filter(|v| !v.is_null());
    match object.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object" | "json_schema") if schema.is_some() => {
            Ok(schema.cloned().map(Guided::JsonSchema))
        }
        Some("json_object") => Ok(Some(Guided::JsonObject)),
        Some("json_schema") => {
            let schema = object
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| {
                    invalid("'response_format.json_schema.schema' is missing: give the schema.")
                })?;
            Ok(Some(Guided::JsonSchema(schema.clone())))
        }
        _ => Err(invalid(
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Option<(Guided, &'static str)>, ApiError> {
        guided(value.as_object().unwrap())
    }

    /// llama-server's forms: a top-level `json_schema`, and `response_format` with the schema
    /// beside its type.
    #[test]
    fn llama_server_forms() {
        let schema = json!({"type": "object", "required": ["a"]});
        assert_eq!(
            parse(json!({"json_schema": schema})).unwrap(),
            Some((Guided::JsonSchema(schema.clone()), "json_schema"))
        );
        for ty in ["json_object", "json_schema"] {
            assert_eq!(
                parse(json!({"response_format": {"type": ty, "schema": schema}})).unwrap(),
                Some((Guided::JsonSchema(schema.clone()), "response_format"))
            );
        }
        let both = parse(json!({"json_schema": schema, "guided_json": schema})).unwrap_err();
        assert!(both.message.contains("cannot be combined"), "{both:?}");
    }

    #[test]
    fn llama_server_grammar_is_gbnf_or_lark() {
        let gbnf = "root ::= \"yes\" | \"no\"";
        assert_eq!(
            parse(json!({"grammar": gbnf})).unwrap(),
            Some((Guided::Gbnf(gbnf.into()), "grammar"))
        );
        let lark = "%llguidance {}\nstart: \"yes\"";
        assert_eq!(
            parse(json!({"grammar": lark})).unwrap(),
            Some((Guided::Grammar(lark.into()), "grammar"))
        );
        assert_eq!(parse(json!({"grammar": ""})).unwrap(), None);
        assert!(parse(json!({"grammar": 3})).is_err());
    }

    #[test]
    fn every_form() {
        assert_eq!(parse(json!({})).unwrap(), None);
        assert_eq!(
            parse(json!({"response_format": {"type": "text"}})).unwrap(),
            None
        );
        assert_eq!(
            parse(json!({"response_format": {"type": "json_object"}})).unwrap(),
            Some((Guided::JsonObject, "response_format"))
        );
        let schema = json!({"type": "integer"});
        assert_eq!(
            parse(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})).unwrap(),
            Some((Guided::JsonSchema(schema.clone()), "response_format"))
        );
        assert_eq!(
            parse(json!({"guided_json": "{\"type\": \"integer\"}"})).unwrap(),
            Some((Guided::JsonSchema(schema), "guided_json"))
        );
        assert_eq!(
            parse(json!({"guided_choice": ["a", "b"]})).unwrap(),
            Some((
                Guided::Choice(vec!["a".into(), "b".into()]),
                "guided_choice"
            ))
        );
        assert_eq!(
            parse(json!({"guided_regex": "[0-9]+"})).unwrap(),
            Some((Guided::Regex("[0-9]+".into()), "guided_regex"))
        );
    }

    #[test]
    fn invalid_values_name_their_field() {
        for (body, param) in [
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format",
            ),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_regex": 3}), "guided_regex"),
            (json!({"guided_json": "{"}), "guided_json"),
            (
                json!({"guided_regex": "a", "guided_choice": ["b"]}),
                "guided_choice",
            ),
        ] {
            let error = parse(body.clone()).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
            assert_eq!(error.status, 400);
        }
    }
}
