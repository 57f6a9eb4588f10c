//! Metadata values of a GGUF file.

use std::fmt;

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
    Array(Vec<MetadataValue>),
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
    pub fn as_array(&self) -> Option<&[MetadataValue]> {
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
    fn fmt_bare(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_STR: usize = 64;
        const MAX_ELEMS: usize = 8;
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
            Self::Array(items) => {
                write!(f, "of {} elements [", items.len())?;
                for (i, item) in items.iter().take(MAX_ELEMS).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    item.fmt_bare(f)?;
                }
                if items.len() > MAX_ELEMS {
                    f.write_str(", ...")?;
                }
                f.write_str("]")
            }
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
        Self::Array(v.into_iter().map(Into::into).collect())
    }
}
