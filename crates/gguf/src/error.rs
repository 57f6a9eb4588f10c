//! Errors of the GGUF reader.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::quant::{GgmlType, QuantError};

/// Why a GGUF file could not be read, or a value or tensor could not be had from it.
///
/// Offsets are byte offsets from the start of the file.
#[derive(Debug, Error)]
pub enum GgufError {
    /// The file could not be opened, inspected or mapped.
    #[error("cannot read GGUF file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error(
        "not a GGUF file: bad magic {found:02x?} ({:?}), expected [47, 47, 55, 46] (\"GGUF\")",
        String::from_utf8_lossy(found)
    )]
    BadMagic {
        /// The first four bytes of the file.
        found: [u8; 4],
    },
    /// The GGUF version is not 2 or 3.
    #[error("unsupported GGUF version {version}{}: kindle reads versions 2 and 3", version_hint(*version))]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
    },
    /// The file ends before a field that should be there.
    #[error(
        "truncated GGUF file: reading {what} at offset {offset} needs {needed} bytes, only {available} remain"
    )]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// The tensor or metadata count in the header cannot fit in the rest of the file.
    #[error(
        "{what} {count} is too large for the file: the {remaining} bytes left after offset {offset} hold at most {max} entries"
    )]
    CountTooLarge {
        /// Which count (`"tensor count"` or `"metadata key-value count"`).
        what: &'static str,
        /// The count read.
        count: u64,
        /// Where the entries start.
        offset: u64,
        /// Bytes left from `offset`.
        remaining: u64,
        /// The most entries of minimal size that fit.
        max: u64,
    },
    /// A string's length is longer than the rest of the file.
    #[error(
        "string too long: {what} at offset {offset} has length {len} but only {remaining} bytes remain"
    )]
    StringTooLong {
        /// Which string (a key, a value, a tensor name).
        what: String,
        /// Offset of the string's length prefix.
        offset: u64,
        /// The length read.
        len: u64,
        /// Bytes left after the length prefix.
        remaining: u64,
    },
    /// A string is not valid UTF-8.
    #[error("invalid UTF-8 in {what} at offset {offset} (reads as {lossy:?})")]
    InvalidUtf8 {
        /// Which string (a key, a value, a tensor name).
        what: String,
        /// Offset of the string's bytes.
        offset: u64,
        /// The string with invalid sequences replaced (abbreviated).
        lossy: String,
    },
    /// A metadata value (or array element) has a type id GGUF does not define.
    #[error("metadata key `{key}` has unknown value type {type_id}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// An array's element count cannot fit in the rest of the file.
    #[error(
        "metadata array `{key}` of {count} {elem_type} elements cannot fit in the {remaining} bytes left"
    )]
    ArrayTooLarge {
        /// The key.
        key: String,
        /// The element count read.
        count: u64,
        /// The element type name.
        elem_type: &'static str,
        /// Bytes left after the array header.
        remaining: u64,
    },
    /// An array of arrays (allowed by the format, used by no model, rejected by kindle).
    #[error("metadata key `{key}` is an array of arrays, which kindle does not support")]
    NestedArray {
        /// The key.
        key: String,
    },
    /// A bool value is neither 0 nor 1.
    #[error("invalid bool in {what} at offset {offset}: byte {value} is neither 0 nor 1")]
    InvalidBool {
        /// Which value (names the key).
        what: String,
        /// Offset of the byte.
        offset: u64,
        /// The byte read.
        value: u8,
    },
    /// A metadata key appears twice.
    #[error("duplicate metadata key `{key}`")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A tensor name appears twice.
    #[error("duplicate tensor name `{name}`")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// `general.alignment` is not a power-of-two `u32` between 1 and 2^24.
    #[error("invalid general.alignment {value}: {reason}")]
    BadAlignment {
        /// The value, with its type.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor has no dimensions or more than four.
    #[error("tensor `{tensor}` has {n_dims} dimensions; GGUF tensors have 1 to 4")]
    BadDims {
        /// The tensor.
        tensor: String,
        /// The dimension count read.
        n_dims: u32,
    },
    /// A tensor has a zero dimension, so no elements.
    #[error("tensor `{tensor}` has shape {dims:?} with a zero dimension: it holds no elements")]
    EmptyTensor {
        /// The tensor.
        tensor: String,
        /// Its dimensions (ggml order).
        dims: Vec<u64>,
    },
    /// A tensor's element or byte count overflows 64 bits.
    #[error("tensor `{tensor}` has shape {dims:?} whose size overflows 64 bits")]
    ShapeOverflow {
        /// The tensor.
        tensor: String,
        /// Its dimensions (ggml order).
        dims: Vec<u64>,
    },
    /// A tensor's row length is not a whole number of blocks of its type.
    #[error(
        "tensor `{tensor}` of type {ty} has row length (ne0) {ne0}, not a multiple of the block size {block_size}"
    )]
    BlockMisaligned {
        /// The tensor.
        tensor: String,
        /// Its type.
        ty: GgmlType,
        /// Its row length.
        ne0: u64,
        /// The type's block size.
        block_size: u64,
    },
    /// A tensor has a ggml type id kindle does not know (named where ggml has a name for it:
    /// [`ggml_type_name`](crate::quant::ggml_type_name)).
    #[error(
        "tensor `{tensor}` has ggml type id {type_id}{}, which kindle does not read",
        crate::quant::ggml_type_name(*type_id).map(|n| format!(" ({n})")).unwrap_or_default()
    )]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type id read.
        type_id: u32,
    },
    /// A tensor's data offset is not a multiple of the alignment.
    #[error(
        "tensor `{tensor}` has data offset {offset}, not a multiple of the alignment {alignment}"
    )]
    MisalignedOffset {
        /// The tensor.
        tensor: String,
        /// Its offset (relative to the data section).
        offset: u64,
        /// The file's alignment.
        alignment: u32,
    },
    /// A tensor's data runs past the end of the file.
    #[error(
        "tensor `{tensor}` data (offset {offset}, {size} bytes) runs past the end of the file: the data section holds {data_len} bytes"
    )]
    TensorPastEnd {
        /// The tensor.
        tensor: String,
        /// Its offset (relative to the data section).
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// Bytes in the data section.
        data_len: u64,
    },
    /// Two tensors' data overlap.
    #[error(
        "tensor `{tensor}` data (offset {offset}) overlaps tensor `{other}` data (offset {other_offset}, {other_size} bytes)"
    )]
    TensorOverlap {
        /// The tensor starting later.
        tensor: String,
        /// Its offset (relative to the data section).
        offset: u64,
        /// The tensor it overlaps.
        other: String,
        /// That tensor's offset.
        other_offset: u64,
        /// That tensor's size in bytes.
        other_size: u64,
    },
    /// A required metadata key is absent.
    #[error("missing metadata key `{key}`")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value has the wrong type.
    #[error("metadata key `{key}` should be {expected} but is {actual}")]
    WrongType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The value's type (for integers out of range, names the value).
        actual: String,
    },
    /// A tensor is absent.
    #[error("missing tensor `{name}`")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A tensor could not be dequantised.
    #[error("cannot dequantize tensor `{tensor}`: {reason}")]
    Quant {
        /// The tensor.
        tensor: String,
        /// Why (in the message: not a `source`, which error chains would print twice).
        reason: QuantError,
    },
}

fn version_hint(version: u32) -> &'static str {
    match version {
        1 => " (version 1 used 32-bit counts and is obsolete)",
        v if (2..=3).contains(&v.swap_bytes()) => " (a big-endian GGUF file?)",
        _ => "",
    }
}
