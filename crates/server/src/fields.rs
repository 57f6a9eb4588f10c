//! Reading one field of a JSON request body: each a typed value or an [`ApiError`] (400)
//! naming the field, with OpenAI's wording.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// A JSON object, as a request body must be.
pub type Object = Map<String, Value>;

/// Parse a body into a JSON object (400 for anything else).
pub fn parse_object(body: &[u8]) -> Result<Object, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "We could not parse the JSON body of your request: {e}. The body must be a JSON \
             object."
        ))
    })?;
    match value {
        Value::Object(object) => Ok(object),
        other => Err(ApiError::bad_request(format!(
            "The request body must be a JSON object, not {}.",
            type_name(&other)
        ))),
    }
}

pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `object[key]`, `null` counting as absent.
pub(crate) fn field<'a>(object: &'a Object, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

pub(crate) fn expected(key: &str, what: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        key,
        format!(
            "Invalid value for '{key}': expected {what}, got {}.",
            short(got)
        ),
    )
}

/// A value for an error message, cut short.
pub(crate) fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}...", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

/// An optional number in `[min, max]`.
pub fn number(object: &Object, key: &str, min: f64, max: f64) -> Result<Option<f64>, ApiError> {
    let Some(value) = field(object, key) else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(x) if x >= min && x <= max => Ok(Some(x)),
        _ => Err(expected(
            key,
            &format!("a number between {min} and {max}"),
            value,
        )),
    }
}

/// An optional integer in `[min, max]`.
pub fn integer(object: &Object, key: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
    let Some(value) = field(object, key) else {
        return Ok(None);
    };
    let as_int = value.as_i64().or_else(|| {
        // 3.0 is an integer too (JavaScript clients send them).
        value
            .as_f64()
            .filter(|x| x.fract() == 0.0 && x.abs() < 9.0e15)
            .map(|x| x as i64)
    });
    match as_int {
        Some(x) if x >= min && x <= max => Ok(Some(x)),
        _ => Err(expected(
            key,
            &format!("an integer between {min} and {max}"),
            value,
        )),
    }
}

/// An optional boolean.
pub fn boolean(object: &Object, key: &str) -> Result<Option<bool>, ApiError> {
    match field(object, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(expected(key, "a boolean", other)),
    }
}

/// An optional string.
pub fn string<'a>(object: &'a Object, key: &str) -> Result<Option<&'a str>, ApiError> {
    match field(object, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(expected(key, "a string", other)),
    }
}
