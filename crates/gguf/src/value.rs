//! Metadata values of a GGUF file.

use std::fmt;

use super::strings::StringArray;

/// GGUF metadata value type ids (the `u32` written before every value).
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The name of a GGUF value type id, or `None` for an id the format does not define.
pub(crate) fn type_id_name(id: u32) -> Option<&'static str> {
    Some(match id {
        type_id::U8 => "u8",
        type_id::I8 => "i8",
        type_id::U16 => "u16",
        type_id::I16 => "i16",
        type_id::U32 => "u32",
        type_id::I32 => "i32",
        type_id::F32 => "f32",
        type_id::BOOL => "bool",
        type_id::STRING => "string",
        type_id::ARRAY => "array",
        type_id::U64 => "u64",
        type_id::I64 => "i64",
        type_id::F64 => "f64",
        _ => return None,
    })
}

/// The fewest bytes a value of type `id` occupies in a file (for a string: its length prefix),
/// or `None` for arrays and unknown ids.
pub(crate) fn min_encoded_size(id: u32) -> Option<u64> {
    Some(match id {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        _ => return None,
    })
}

/// One metadata value of a GGUF file.
///
/// Arrays hold elements of a single type; kindle rejects arrays of arrays when reading.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7 (one byte, 0 or 1).
    Bool(bool),
    /// Type 8 (`u64` length, then UTF-8 bytes).
    String(String),
    /// Type 9 (`u32` element type, `u64` count, then the elements).
    Array(MetadataArray),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

impl MetadataValue {
    /// The value as a `u64`, for any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an `i64`, for any integer type holding a value that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => i64::try_from(v).ok(),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an `f64`, for any numeric type (64-bit integers may round).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            Self::U64(v) => Some(v as f64),
            Self::I64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value as a string slice, for [`MetadataValue::String`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a `bool`, for [`MetadataValue::Bool`].
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The elements, for [`MetadataValue::Array`].
    pub fn as_array(&self) -> Option<&MetadataArray> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of this value's type (`"u32"`, `"string"`, `"array"`, ...).
    pub fn type_name(&self) -> &'static str {
        type_id_name(self.type_id()).unwrap_or("unknown")
    }

    /// The GGUF value type id of this value.
    pub(crate) fn type_id(&self) -> u32 {
        match self {
            Self::U8(_) => type_id::U8,
            Self::I8(_) => type_id::I8,
            Self::U16(_) => type_id::U16,
            Self::I16(_) => type_id::I16,
            Self::U32(_) => type_id::U32,
            Self::I32(_) => type_id::I32,
            Self::F32(_) => type_id::F32,
            Self::Bool(_) => type_id::BOOL,
            Self::String(_) => type_id::STRING,
            Self::Array(_) => type_id::ARRAY,
            Self::U64(_) => type_id::U64,
            Self::I64(_) => type_id::I64,
            Self::F64(_) => type_id::F64,
        }
    }
}

/// Short human-readable rendering: `u32 13`, `string "llama"`, `array of 3 u32 [1, 2, 3]`
/// (long strings and arrays are abbreviated).
impl fmt::Display for MetadataValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())?;
        f.write_str(" ")?;
        self.fmt_bare(f)
    }
}

impl MetadataValue {
    pub(crate) fn fmt_bare(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_STR: usize = 64;
        match self {
            Self::U8(v) => write!(f, "{v}"),
            Self::I8(v) => write!(f, "{v}"),
            Self::U16(v) => write!(f, "{v}"),
            Self::I16(v) => write!(f, "{v}"),
            Self::U32(v) => write!(f, "{v}"),
            Self::I32(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::U64(v) => write!(f, "{v}"),
            Self::I64(v) => write!(f, "{v}"),
            Self::F64(v) => write!(f, "{v}"),
            Self::String(s) => {
                if s.chars().count() > MAX_STR {
                    let head: String = s.chars().take(MAX_STR).collect();
                    write!(f, "{head:?}...")
                } else {
                    write!(f, "{s:?}")
                }
            }
            Self::Array(items) => write!(f, "{items}"),
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for MetadataValue {
            fn from(v: $t) -> Self {
                Self::$v(v)
            }
        })*
    };
}

from_impls!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64,
);

impl From<&str> for MetadataValue {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}

impl<T: Into<MetadataValue>> From<Vec<T>> for MetadataValue {
    fn from(v: Vec<T>) -> Self {
        Self::Array(MetadataArray::Values(
            v.into_iter().map(Into::into).collect(),
        ))
    }
}

impl From<MetadataArray> for MetadataValue {
    fn from(a: MetadataArray) -> Self {
        Self::Array(a)
    }
}

/// A metadata array (GGUF type 9). Arrays read from a file hold one element type and are
/// stored as a vector of it; [`MetadataArray::Values`] holds any list of values built by hand
/// (written with the first element's type; arrays of arrays can be written, so that tests can
/// make files kindle must refuse).
#[derive(Debug, Clone)]
pub enum MetadataArray {
    /// Of `u8`.
    U8(Vec<u8>),
    /// Of `i8`.
    I8(Vec<i8>),
    /// Of `u16`.
    U16(Vec<u16>),
    /// Of `i16`.
    I16(Vec<i16>),
    /// Of `u32`.
    U32(Vec<u32>),
    /// Of `i32`.
    I32(Vec<i32>),
    /// Of `f32`.
    F32(Vec<f32>),
    /// Of `bool`.
    Bool(Vec<bool>),
    /// Of strings.
    String(StringArray),
    /// Of `u64`.
    U64(Vec<u64>),
    /// Of `i64`.
    I64(Vec<i64>),
    /// Of `f64`.
    F64(Vec<f64>),
    /// Any list of values.
    Values(Vec<MetadataValue>),
}

macro_rules! each_typed {
    ($self:expr, $v:ident => $e:expr, $s:ident => $se:expr, $vals:ident => $ve:expr) => {
        match $self {
            MetadataArray::U8($v) => $e,
            MetadataArray::I8($v) => $e,
            MetadataArray::U16($v) => $e,
            MetadataArray::I16($v) => $e,
            MetadataArray::U32($v) => $e,
            MetadataArray::I32($v) => $e,
            MetadataArray::F32($v) => $e,
            MetadataArray::Bool($v) => $e,
            MetadataArray::U64($v) => $e,
            MetadataArray::I64($v) => $e,
            MetadataArray::F64($v) => $e,
            MetadataArray::String($s) => $se,
            MetadataArray::Values($vals) => $ve,
        }
    };
}

impl MetadataArray {
    /// The number of elements.
    pub fn len(&self) -> usize {
        each_typed!(self, v => v.len(), s => s.len(), v => v.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a value (a string is copied).
    pub fn get(&self, i: usize) -> Option<MetadataValue> {
        each_typed!(
            self,
            v => v.get(i).map(|&x| MetadataValue::from(x)),
            s => s.get(i).map(MetadataValue::from),
            v => v.get(i).cloned()
        )
    }

    /// The elements as values, in order (strings copied).
    pub fn values(&self) -> impl Iterator<Item = MetadataValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The strings, if every element is one.
    pub fn strs(&self) -> Option<Vec<&str>> {
        match self {
            MetadataArray::String(s) => Some(s.iter().collect()),
            MetadataArray::Values(v) => v.iter().map(MetadataValue::as_str).collect(),
            _ if self.is_empty() => Some(Vec::new()),
            _ => None,
        }
    }

    /// The GGUF type id of the elements as written: the stored type, or for
    /// [`MetadataArray::Values`] the first element's (`u8` when empty).
    pub(crate) fn elem_type_id(&self) -> u32 {
        match self {
            MetadataArray::U8(_) => type_id::U8,
            MetadataArray::I8(_) => type_id::I8,
            MetadataArray::U16(_) => type_id::U16,
            MetadataArray::I16(_) => type_id::I16,
            MetadataArray::U32(_) => type_id::U32,
            MetadataArray::I32(_) => type_id::I32,
            MetadataArray::F32(_) => type_id::F32,
            MetadataArray::Bool(_) => type_id::BOOL,
            MetadataArray::String(_) => type_id::STRING,
            MetadataArray::U64(_) => type_id::U64,
            MetadataArray::I64(_) => type_id::I64,
            MetadataArray::F64(_) => type_id::F64,
            MetadataArray::Values(v) => v.first().map_or(type_id::U8, MetadataValue::type_id),
        }
    }
}

impl PartialEq for MetadataArray {
    /// Equal elements in order, however stored.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.values().eq(other.values())
    }
}

impl From<Vec<MetadataValue>> for MetadataArray {
    fn from(v: Vec<MetadataValue>) -> Self {
        MetadataArray::Values(v)
    }
}

impl From<StringArray> for MetadataArray {
    fn from(s: StringArray) -> Self {
        MetadataArray::String(s)
    }
}

impl fmt::Display for MetadataArray {
    /// `of N elements [a, b, ...]` (at most eight shown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_ELEMS: usize = 8;
        write!(f, "of {} elements [", self.len())?;
        for (i, item) in self.values().take(MAX_ELEMS).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            item.fmt_bare(f)?;
        }
        if self.len() > MAX_ELEMS {
            f.write_str(", ...")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod array_tests {
    use super::*;

    #[test]
    fn arrays_compare_by_elements_however_stored() {
        let typed = MetadataArray::U32(vec![1, 2]);
        let values = MetadataArray::Values(vec![MetadataValue::U32(1), MetadataValue::U32(2)]);
        assert_eq!(typed, values);
        assert_ne!(typed, MetadataArray::U32(vec![1, 3]));
        assert_ne!(
            typed,
            MetadataArray::I32(vec![1, 2]),
            "the element type counts"
        );
        assert_eq!(typed.to_string(), "of 2 elements [1, 2]");
        let strings = MetadataArray::String(["x", "ab"].into_iter().collect());
        assert_eq!(strings.get(1), Some(MetadataValue::String("ab".into())));
        assert_eq!(strings.strs(), Some(vec!["x", "ab"]));
        assert_eq!(MetadataArray::U8(vec![1]).strs(), None);
    }
}
