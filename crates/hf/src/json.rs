//! Typed access to the keys of a JSON object read from a file, each error naming the key and
//! the file.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{HfError, Result, io_error};

/// A JSON object and the file it came from.
#[derive(Debug, Clone)]
pub(crate) struct JsonObject {
    pub(crate) path: PathBuf,
    pub(crate) map: Map<String, Value>,
}

impl JsonObject {
    /// Reads `path` as a JSON object.
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        Self::parse(path, &text)
    }

    /// Reads `path` as a JSON object if the file exists.
    pub(crate) fn read_opt(path: &Path) -> Result<Option<Self>> {
        if path.is_file() {
            Self::read(path).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Parses `text` (from `path`) as a JSON object.
    pub(crate) fn parse(path: &Path, text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|e| HfError::Json {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        match value {
            Value::Object(map) => Ok(Self {
                path: path.to_owned(),
                map,
            }),
            other => Err(HfError::Json {
                path: path.to_owned(),
                reason: format!("expected an object, found {}", kind(&other)),
            }),
        }
    }

    /// The nested object `key` as a [`JsonObject`] of the same file (`None` if absent or null).
    pub(crate) fn object(&self, key: &str) -> Result<Option<JsonObject>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(JsonObject {
                path: self.path.clone(),
                map: map.clone(),
            })),
            Some(other) => Err(self.wrong(key, "an object", other)),
        }
    }

    pub(crate) fn wrong(&self, key: &str, expected: &'static str, found: &Value) -> HfError {
        HfError::WrongType {
            path: self.path.clone(),
            key: key.to_owned(),
            expected,
            found: describe(found),
        }
    }

    pub(crate) fn missing(&self, key: &str) -> HfError {
        HfError::MissingKey {
            path: self.path.clone(),
            key: key.to_owned(),
        }
    }

    /// `key` as a non-negative integer; `None` when absent or null.
    pub(crate) fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    /// `key` as a non-negative integer; an error when absent.
    pub(crate) fn u64(&self, key: &str) -> Result<u64> {
        self.opt_u64(key)?.ok_or_else(|| self.missing(key))
    }

    /// The first of `keys` present, as a non-negative integer; an error naming the first key
    /// when none is.
    pub(crate) fn u64_of(&self, keys: &[&str]) -> Result<u64> {
        for key in keys {
            if let Some(v) = self.opt_u64(key)? {
                return Ok(v);
            }
        }
        Err(self.missing(keys.first().copied().unwrap_or_default()))
    }

    /// `key` as a number; `None` when absent or null.
    pub(crate) fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a number", v)),
        }
    }

    /// `key` as a bool; `None` when absent or null.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "a bool", v)),
        }
    }

    /// `key` as a string; `None` when absent or null.
    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }
}

/// The JSON kind of `value`.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `value` in an error message: its kind, and the value when short.
fn describe(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 40 {
        format!("{} {text}", kind(value))
    } else {
        kind(value).to_owned()
    }
}

/// An `f32` as the shortest decimal that reads back as it, as an `f64` JSON number (so
/// `1e-5f32` is written `1e-05`, not `9.999999747378752e-06`).
pub(crate) fn f32_number(v: f32) -> Value {
    format!("{v:e}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}
