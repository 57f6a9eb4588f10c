//! [`ConstraintSpec`]: what the output must be, as the user wrote it.

use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

use crate::{ConstrainError, gbnf_to_lark};

/// An output constraint: a JSON schema, any JSON object, a regex, a list of choices or a Lark or
/// GBNF grammar.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintSpec {
    /// A JSON value valid against this JSON schema.
    JsonSchema(Value),
    /// Any JSON object (`{"type": "object"}`).
    JsonObject,
    /// A string matching this regex in full (Rust `regex` syntax, no look-around).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A string of this Lark grammar (llguidance's dialect: `start: ...`, `/regex/` terminals,
    /// `%json { schema }` embedded schemas).
    Lark(String),
    /// A string of this GBNF grammar (llama.cpp's format: `root ::= ...`), converted to Lark
    /// by [`crate::gbnf_to_lark`].
    Gbnf(String),
}

impl ConstraintSpec {
    /// Parse a JSON schema from text; a syntax error is [`ConstrainError::NotJson`] with the
    /// line and column, under `source` (the flag or field it came from).
    pub fn json_schema(text: &str, source: &str) -> Result<Self, ConstrainError> {
        serde_json::from_str(text)
            .map(ConstraintSpec::JsonSchema)
            .map_err(|e| ConstrainError::NotJson {
                source_name: source.to_owned(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
    }

    /// What kind of constraint, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonSchema(_) | ConstraintSpec::JsonObject => "JSON schema",
            ConstraintSpec::Regex(_) => "regex",
            ConstraintSpec::Choice(_) => "choice list",
            ConstraintSpec::Lark(_) | ConstraintSpec::Gbnf(_) => "grammar",
        }
    }

    /// The llguidance grammar. JSON comes out compact with `", "` and `": "` separators (no
    /// free whitespace, which a sampled model could otherwise spin in) unless the schema sets
    /// its own `x-guidance` options.
    pub(crate) fn grammar(&self, source: &str) -> Result<TopLevelGrammar, ConstrainError> {
        Ok(match self {
            ConstraintSpec::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_json_options(schema.clone()))
            }
            ConstraintSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(with_json_options(json!({"type": "object"})))
            }
            ConstraintSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            ConstraintSpec::Choice(choices) => {
                if choices.is_empty() {
                    return Err(ConstrainError::Invalid {
                        source_name: source.to_owned(),
                        kind: self.kind(),
                        message: "no choice given".into(),
                    });
                }
                let alternatives: Vec<String> = choices.iter().map(|c| escape(c)).collect();
                TopLevelGrammar::from_regex(&format!("({})", alternatives.join("|")))
            }
            ConstraintSpec::Lark(grammar) => TopLevelGrammar::from_lark(grammar.clone()),
            ConstraintSpec::Gbnf(grammar) => {
                let lark = gbnf_to_lark(grammar).map_err(|e| match e {
                    ConstrainError::Gbnf {
                        line,
                        column,
                        message,
                        ..
                    } => ConstrainError::Gbnf {
                        source_name: source.to_owned(),
                        line,
                        column,
                        message,
                    },
                    other => other,
                })?;
                TopLevelGrammar::from_lark(lark)
            }
        })
    }
}

/// `schema` with kindle's JSON layout options, unless it has an `x-guidance` of its own.
fn with_json_options(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema
        && !map.contains_key("x-guidance")
    {
        map.insert(
            "x-guidance".into(),
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            }),
        );
    }
    schema
}

/// `text` as a regex that matches it literally.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~/\"".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_regex_syntax() {
        assert_eq!(escape("a.b|c"), r"a\.b\|c");
    }

    #[test]
    fn json_syntax_errors_have_a_position() {
        let err = ConstraintSpec::json_schema("{\n  \"type\": }", "--json-schema").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("--json-schema: not valid JSON at line 2, column"),
            "{text}"
        );
    }
}
