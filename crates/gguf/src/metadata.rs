//! Typed access to a GGUF file's metadata: `get_*` for required keys, `opt_*` for optional
//! ones, each error naming the key.

use super::error::GgufError;
use super::reader::GgufFile;
use super::value::MetadataValue;

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

    /// `key` as an unsigned integer (any integer type holding a non-negative value);
    /// `None` when absent, an error when of another type.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "a non-negative integer", MetadataValue::as_u64)
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
    pub fn opt_array(&self, key: &str) -> Result<Option<&[MetadataValue]>, GgufError> {
        self.typed(key, "an array", MetadataValue::as_array)
    }

    /// `key` as an unsigned integer; an error naming the key when absent or of another type.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        Self::required(key, self.opt_u64(key))
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
    pub fn get_array(&self, key: &str) -> Result<&[MetadataValue], GgufError> {
        Self::required(key, self.opt_array(key))
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
}
