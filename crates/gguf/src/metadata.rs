//! Typed access to a GGUF file's metadata: `get_*` for required keys, `opt_*` for optional
//! ones, each error naming the key.

use super::error::GgufError;
use super::reader::GgufFile;
use super::value::{MetadataArray, MetadataValue};

impl GgufFile {
    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a MetadataValue) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match convert(value) {
            Some(v) => Ok(Some(v)),
            None => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected,
                actual: match value {
                    MetadataValue::String(_) | MetadataValue::Array(_) => {
                        value.type_name().to_owned()
                    }
                    _ => value.to_string(),
                },
            }),
        }
    }

    fn required<T>(key: &str, value: Result<Option<T>, GgufError>) -> Result<T, GgufError> {
        value?.ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    /// `key` as an array, converted element by element by `convert`; `None` when absent. The
    /// error for a bad element names its index and value.
    fn typed_array<T>(
        &self,
        key: &str,
        expected: &'static str,
        convert: impl Fn(&MetadataValue) -> Option<T>,
    ) -> Result<Option<Vec<T>>, GgufError> {
        let Some(items) = self.typed(key, expected, MetadataValue::as_array)? else {
            return Ok(None);
        };
        items
            .values()
            .enumerate()
            .map(|(i, item)| {
                convert(&item).ok_or_else(|| GgufError::WrongType {
                    key: key.to_owned(),
                    expected,
                    actual: format!("an array whose element {i} is {item}"),
                })
            })
            .collect::<Result<Vec<T>, GgufError>>()
            .map(Some)
    }

    /// `key` as an unsigned integer (any integer type holding a non-negative value);
    /// `None` when absent, an error when of another type.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "a non-negative integer", MetadataValue::as_u64)
    }

    /// `key` as a `u32` (any integer type holding a value in `0..=u32::MAX`, such as a token
    /// id); `None` when absent, an error when of another type or out of range.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.typed(key, "an unsigned 32-bit integer", |v| {
            v.as_u64().and_then(|n| u32::try_from(n).ok())
        })
    }

    /// `key` as a signed integer (any integer type holding a value that fits an `i64`);
    /// `None` when absent, an error when of another type.
    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.typed(key, "an integer", MetadataValue::as_i64)
    }

    /// `key` as a float (any numeric type); `None` when absent, an error when of another type.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.typed(key, "a number", MetadataValue::as_f64)
    }

    /// `key` as a string; `None` when absent, an error when of another type.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.typed(key, "a string", MetadataValue::as_str)
    }

    /// `key` as a bool; `None` when absent, an error when of another type.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.typed(key, "a bool", MetadataValue::as_bool)
    }

    /// `key` as an array; `None` when absent, an error when of another type.
    pub fn opt_array(&self, key: &str) -> Result<Option<&MetadataArray>, GgufError> {
        self.typed(key, "an array", MetadataValue::as_array)
    }

    /// `key` as an array of strings (such as a vocabulary's tokens); `None` when absent, an
    /// error when not an array or when an element is not a string (naming the element).
    pub fn opt_str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        const EXPECTED: &str = "an array of strings";
        let Some(items) = self.typed(key, EXPECTED, MetadataValue::as_array)? else {
            return Ok(None);
        };
        match items.strs() {
            Some(strs) => Ok(Some(strs)),
            None => {
                // The error names the first element that is not a string.
                self.typed_array(key, EXPECTED, |v| v.as_str().map(|_| ()))?;
                Err(GgufError::WrongType {
                    key: key.to_owned(),
                    expected: EXPECTED,
                    actual: format!("an array {items}"),
                })
            }
        }
    }

    /// `key` as an array of `i32` (any integer element type holding values that fit, such as
    /// token type codes); `None` when absent, an error when not an array or when an element
    /// is not such an integer (naming the element).
    pub fn opt_i32_array(&self, key: &str) -> Result<Option<Vec<i32>>, GgufError> {
        self.typed_array(key, "an array of 32-bit integers", |v| {
            v.as_i64().and_then(|n| i32::try_from(n).ok())
        })
    }

    /// `key` as an unsigned integer; an error naming the key when absent or of another type.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        Self::required(key, self.opt_u64(key))
    }

    /// `key` as a `u32`; an error naming the key when absent, of another type or out of range.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        Self::required(key, self.opt_u32(key))
    }

    /// `key` as a signed integer; an error naming the key when absent or of another type.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        Self::required(key, self.opt_i64(key))
    }

    /// `key` as a float; an error naming the key when absent or not numeric.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        Self::required(key, self.opt_f64(key))
    }

    /// `key` as a string; an error naming the key when absent or of another type.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        Self::required(key, self.opt_str(key))
    }

    /// `key` as a bool; an error naming the key when absent or of another type.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        Self::required(key, self.opt_bool(key))
    }

    /// `key` as an array; an error naming the key when absent or of another type.
    pub fn get_array(&self, key: &str) -> Result<&MetadataArray, GgufError> {
        Self::required(key, self.opt_array(key))
    }

    /// `key` as an array of strings; an error naming the key when absent, not an array, or
    /// holding an element that is not a string.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        Self::required(key, self.opt_str_array(key))
    }

    /// `key` as an array of `i32`; an error naming the key when absent, not an array, or
    /// holding an element that is not an integer fitting an `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        Self::required(key, self.opt_i32_array(key))
    }

    /// The model architecture (`general.architecture`, e.g. `"llama"`).
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }
}

#[cfg(test)]
mod tests {
    use crate::{GgufError, GgufFile, GgufWriter, MetadataValue};

    #[test]
    fn typed_getters() {
        let w = GgufWriter::new()
            .metadata("n", MetadataValue::U32(7))
            .metadata("neg", MetadataValue::I32(-3))
            .metadata("f", MetadataValue::F32(0.5))
            .metadata("s", "text")
            .metadata("b", true)
            .metadata("a", vec![1u32, 2]);
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(file.get_u64("n").unwrap(), 7);
        assert_eq!(file.get_i64("neg").unwrap(), -3);
        assert_eq!(file.get_f64("n").unwrap(), 7.0);
        assert_eq!(file.get_f64("f").unwrap(), 0.5);
        assert_eq!(file.get_str("s").unwrap(), "text");
        assert!(file.get_bool("b").unwrap());
        assert_eq!(file.get_array("a").unwrap().len(), 2);
        assert_eq!(file.opt_u64("absent").unwrap(), None);
        assert_eq!(file.opt_str("s").unwrap(), Some("text"));

        let err = file.get_u64("neg").unwrap_err();
        assert!(matches!(err, GgufError::WrongType { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("`neg`") && msg.contains("i32 -3"), "{msg}");
        let err = file.get_str("n").unwrap_err();
        assert!(err.to_string().contains("string"), "{err}");
        assert!(matches!(
            file.opt_bool("s"),
            Err(GgufError::WrongType { .. })
        ));
        let err = file.get_f64("absent").unwrap_err();
        assert!(matches!(&err, GgufError::MissingKey { key } if key == "absent"));
        assert!(err.to_string().contains("`absent`"));
        let err = file.architecture().unwrap_err();
        assert!(err.to_string().contains("general.architecture"), "{err}");
    }

    #[test]
    fn u32_getters_take_any_integer_in_range() {
        let w = GgufWriter::new()
            .metadata("id8", MetadataValue::U8(7))
            .metadata("id64", MetadataValue::U64(u64::from(u32::MAX)))
            .metadata("big", MetadataValue::U64(u64::from(u32::MAX) + 1))
            .metadata("neg", MetadataValue::I32(-1))
            .metadata("s", "text");
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(file.get_u32("id8").unwrap(), 7);
        assert_eq!(file.opt_u32("id64").unwrap(), Some(u32::MAX));
        assert_eq!(file.opt_u32("absent").unwrap(), None);
        for key in ["big", "neg", "s"] {
            let err = file.opt_u32(key).unwrap_err();
            assert!(
                matches!(&err, GgufError::WrongType { key: k, .. } if k == key),
                "{err:?}"
            );
            assert!(err.to_string().contains("unsigned 32-bit"), "{err}");
        }
        assert_wrong_type(file.get_u32("big"), "u64 4294967296");
        let err = file.get_u32("absent").unwrap_err();
        assert!(matches!(&err, GgufError::MissingKey { key } if key == "absent"));
    }

    #[test]
    fn string_array_getters() {
        let w = GgufWriter::new()
            .metadata("tokens", vec!["a", "", "Ġb"])
            .metadata("empty", MetadataValue::Array(vec![].into()))
            .metadata("ints", vec![1u32, 2])
            .metadata("s", "text");
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(file.get_str_array("tokens").unwrap(), ["a", "", "Ġb"]);
        assert_eq!(file.opt_str_array("empty").unwrap(), Some(vec![]));
        assert_eq!(file.opt_str_array("absent").unwrap(), None);

        let err = file.opt_str_array("ints").unwrap_err();
        assert!(matches!(&err, GgufError::WrongType { key, .. } if key == "ints"));
        let msg = err.to_string();
        assert!(
            msg.contains("`ints`") && msg.contains("an array of strings"),
            "{msg}"
        );
        assert!(msg.contains("element 0 is u32 1"), "{msg}");
        assert_wrong_type(file.get_str_array("s"), "is string");
        let err = file.get_str_array("absent").unwrap_err();
        assert!(matches!(&err, GgufError::MissingKey { key } if key == "absent"));
    }

    #[test]
    fn i32_array_getters() {
        let w = GgufWriter::new()
            .metadata("types", vec![1i32, 3, -2])
            .metadata("small", vec![1u8, 6])
            .metadata("wide", vec![0i64, i64::from(i32::MAX) + 1])
            .metadata("strings", vec!["x"])
            .metadata("b", true);
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(file.get_i32_array("types").unwrap(), [1, 3, -2]);
        assert_eq!(file.opt_i32_array("small").unwrap(), Some(vec![1, 6]));
        assert_eq!(file.opt_i32_array("absent").unwrap(), None);
        assert_wrong_type(file.opt_i32_array("wide"), "element 1 is i64 2147483648");
        assert_wrong_type(file.get_i32_array("strings"), "element 0 is string \"x\"");
        assert_wrong_type(file.get_i32_array("b"), "is bool true");
        let err = file.get_i32_array("absent").unwrap_err();
        assert!(matches!(&err, GgufError::MissingKey { key } if key == "absent"));
    }

    /// Assert that `result` is a [`GgufError::WrongType`] whose message contains `actual`.
    #[track_caller]
    fn assert_wrong_type<T: std::fmt::Debug>(result: Result<T, GgufError>, actual: &str) {
        match result {
            Err(err @ GgufError::WrongType { .. }) => {
                let msg = err.to_string();
                assert!(msg.contains(actual), "{msg:?} should contain {actual:?}");
            }
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
}
