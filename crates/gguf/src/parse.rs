//! Parsing and validation of a GGUF file's header, metadata and tensor infos.

use std::collections::HashMap;
use std::fmt;

use super::error::GgufError;
use super::layout::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, TensorInfo};
use super::strings::StringArray;
use super::value::{MetadataArray, MetadataValue, min_encoded_size, type_id, type_id_name};
use crate::quant::GgmlType;

/// Fewest bytes a metadata entry occupies: key length, value type, a one-byte value.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Fewest bytes a tensor info occupies: name length, n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 8 + 4 + 8;
/// Longest prefix of an invalid string shown in an error.
const MAX_LOSSY_CHARS: usize = 64;

/// What a parse produced: everything a [`GgufFile`](super::GgufFile) holds but the bytes.
pub(super) struct Parsed {
    pub(super) version: u32,
    pub(super) alignment: u32,
    pub(super) metadata: Vec<(String, MetadataValue)>,
    pub(super) metadata_index: HashMap<String, usize>,
    pub(super) tensors: Vec<TensorInfo>,
    pub(super) tensor_index: HashMap<String, usize>,
    pub(super) data_offset: u64,
}

/// What is being read, for error messages (rendered only on error).
#[derive(Clone, Copy)]
enum Ctx<'a> {
    Header(&'static str),
    Key(u64),
    ValueType(&'a str),
    Value(&'a str),
    ArrayHeader(&'a str),
    Elem(&'a str, u64),
    TensorName(u64),
    Tensor(&'a str, &'static str),
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ctx::Header(what) => write!(f, "the header {what}"),
            Ctx::Key(i) => write!(f, "the key of metadata entry #{i}"),
            Ctx::ValueType(key) => write!(f, "the value type of key `{key}`"),
            Ctx::Value(key) => write!(f, "the value of key `{key}`"),
            Ctx::ArrayHeader(key) => write!(f, "the array header of key `{key}`"),
            Ctx::Elem(key, i) => write!(f, "element {i} of array key `{key}`"),
            Ctx::TensorName(i) => write!(f, "the name of tensor info #{i}"),
            Ctx::Tensor(name, field) => write!(f, "the {field} of tensor `{name}`"),
        }
    }
}

/// A bounds-checked reader over the file's bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn truncated(&self, ctx: Ctx<'_>, needed: u64) -> GgufError {
        GgufError::Truncated {
            what: ctx.to_string(),
            offset: self.pos as u64,
            needed,
            available: self.remaining() as u64,
        }
    }

    fn take(&mut self, n: usize, ctx: Ctx<'_>) -> Result<&'a [u8], GgufError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| self.truncated(ctx, n as u64))?;
        let slice = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(ctx, n as u64))?;
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, ctx: Ctx<'_>) -> Result<[u8; N], GgufError> {
        let slice = self.take(N, ctx)?;
        <[u8; N]>::try_from(slice).map_err(|_| self.truncated(ctx, N as u64))
    }

    fn u8(&mut self, ctx: Ctx<'_>) -> Result<u8, GgufError> {
        Ok(u8::from_le_bytes(self.array(ctx)?))
    }

    fn u32(&mut self, ctx: Ctx<'_>) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(ctx)?))
    }

    fn u64(&mut self, ctx: Ctx<'_>) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(ctx)?))
    }

    fn string(&mut self, ctx: Ctx<'_>) -> Result<String, GgufError> {
        self.str(ctx).map(str::to_owned)
    }

    /// A GGUF string (`u64` length, UTF-8 bytes), borrowed from the file's bytes.
    fn str(&mut self, ctx: Ctx<'_>) -> Result<&'a str, GgufError> {
        let offset = self.pos as u64;
        let len = self.u64(ctx)?;
        let remaining = self.remaining();
        let n = match usize::try_from(len) {
            Ok(n) if n <= remaining => n,
            _ => {
                return Err(GgufError::StringTooLong {
                    what: ctx.to_string(),
                    offset,
                    len,
                    remaining: remaining as u64,
                });
            }
        };
        let bytes_offset = self.pos as u64;
        let bytes = self.take(n, ctx)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: ctx.to_string(),
                offset: bytes_offset,
                lossy: String::from_utf8_lossy(bytes)
                    .chars()
                    .take(MAX_LOSSY_CHARS)
                    .collect(),
            }),
        }
    }

    /// Read a count of entries each at least `min_size` bytes long, rejecting one the rest of
    /// the file cannot hold.
    fn count(&mut self, what: &'static str, min_size: u64) -> Result<usize, GgufError> {
        let count = self.u64(Ctx::Header(what))?;
        self.check_count(what, count, min_size)
    }

    fn check_count(
        &self,
        what: &'static str,
        count: u64,
        min_size: u64,
    ) -> Result<usize, GgufError> {
        let remaining = self.remaining() as u64;
        let max = remaining.checked_div(min_size).unwrap_or(0);
        match usize::try_from(count) {
            Ok(n) if count <= max => Ok(n),
            _ => Err(GgufError::CountTooLarge {
                what,
                count,
                offset: self.pos as u64,
                remaining,
                max,
            }),
        }
    }
}

/// Parse and validate a whole GGUF file held in `buf`: header, metadata, tensor infos, and
/// every tensor's data range against the size of the file.
pub(super) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };

    let magic: [u8; 4] = c.array(Ctx::Header("magic"))?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(Ctx::Header("version"))?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count_raw = c.u64(Ctx::Header("tensor count"))?;
    c.check_count("tensor count", tensor_count_raw, MIN_TENSOR_INFO_SIZE)?;
    let kv_count = c.count("metadata key-value count", MIN_KV_SIZE)?;

    let mut metadata = Vec::with_capacity(kv_count);
    let mut metadata_index = HashMap::with_capacity(kv_count);
    for i in 0..kv_count {
        let key = c.string(Ctx::Key(i as u64))?;
        let ty = c.u32(Ctx::ValueType(&key))?;
        let value = read_value(&mut c, ty, &key)?;
        if metadata_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        metadata_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    let alignment = match metadata_index.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(&i) => match metadata.get(i) {
            Some((_, v)) => check_alignment(v)?,
            None => DEFAULT_ALIGNMENT,
        },
    };

    // Now that the metadata is read, the tensor count must fit in what is left.
    let tensor_count = c.check_count("tensor count", tensor_count_raw, MIN_TENSOR_INFO_SIZE)?;
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count);
    let mut tensor_index = HashMap::with_capacity(tensor_count);
    for i in 0..tensor_count {
        let info = read_tensor_info(&mut c, i as u64, alignment)?;
        if tensor_index.contains_key(&info.name) {
            return Err(GgufError::DuplicateTensor { name: info.name });
        }
        tensor_index.insert(info.name.clone(), tensors.len());
        tensors.push(info);
    }

    // The data section starts at the next multiple of the alignment.
    let infos_end = c.pos as u64;
    let data_offset = infos_end
        .checked_next_multiple_of(u64::from(alignment))
        .ok_or_else(|| c.truncated(Ctx::Header("padding before the data section"), 0))?;
    let file_len = buf.len() as u64;
    let data_len = match file_len.checked_sub(data_offset) {
        Some(len) => len,
        None if tensors.is_empty() => 0,
        None => {
            return Err(c.truncated(
                Ctx::Header("padding before the data section"),
                data_offset - infos_end,
            ));
        }
    };

    for t in &tensors {
        let size = t.n_bytes();
        match t.offset.checked_add(size) {
            Some(end) if end <= data_len => {}
            _ => {
                return Err(GgufError::TensorPastEnd {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    size,
                    data_len,
                });
            }
        }
    }
    check_overlaps(&tensors)?;

    Ok(Parsed {
        version,
        alignment,
        metadata,
        metadata_index,
        tensors,
        tensor_index,
        data_offset,
    })
}

fn check_alignment(value: &MetadataValue) -> Result<u32, GgufError> {
    let bad = |reason: String| GgufError::BadAlignment {
        value: value.to_string(),
        reason,
    };
    match *value {
        MetadataValue::U32(0) => Err(bad("must not be zero".into())),
        MetadataValue::U32(a) if !a.is_power_of_two() => Err(bad("must be a power of two".into())),
        MetadataValue::U32(a) if a > MAX_ALIGNMENT => {
            Err(bad(format!("must be at most {MAX_ALIGNMENT}")))
        }
        MetadataValue::U32(a) => Ok(a),
        _ => Err(bad(format!("must be a u32, not {}", value.type_name()))),
    }
}

fn read_value(c: &mut Cursor<'_>, ty: u32, key: &str) -> Result<MetadataValue, GgufError> {
    if ty == type_id::ARRAY {
        let elem_ty = c.u32(Ctx::ArrayHeader(key))?;
        if elem_ty == type_id::ARRAY {
            return Err(GgufError::NestedArray {
                key: key.to_owned(),
            });
        }
        let (Some(min_size), Some(elem_type)) = (min_encoded_size(elem_ty), type_id_name(elem_ty))
        else {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                type_id: elem_ty,
            });
        };
        let count = c.u64(Ctx::ArrayHeader(key))?;
        let remaining = c.remaining() as u64;
        let n = match (count.checked_mul(min_size), usize::try_from(count)) {
            (Some(bytes), Ok(n)) if bytes <= remaining => n,
            _ => {
                return Err(GgufError::ArrayTooLarge {
                    key: key.to_owned(),
                    count,
                    elem_type,
                    remaining,
                });
            }
        };
        Ok(MetadataValue::Array(read_array(c, elem_ty, n, key)?))
    } else {
        read_scalar(c, ty, key, Ctx::Value(key))
    }
}

/// `n` elements of type `elem_ty` (not an array: checked by the caller), stored by type.
fn read_array(
    c: &mut Cursor<'_>,
    elem_ty: u32,
    n: usize,
    key: &str,
) -> Result<MetadataArray, GgufError> {
    use MetadataArray as A;
    let ctx = |i: usize| Ctx::Elem(key, i as u64);
    macro_rules! numbers {
        ($variant:ident, $t:ty) => {{
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(<$t>::from_le_bytes(c.array(ctx(i))?));
            }
            A::$variant(v)
        }};
    }
    Ok(match elem_ty {
        type_id::U8 => numbers!(U8, u8),
        type_id::I8 => numbers!(I8, i8),
        type_id::U16 => numbers!(U16, u16),
        type_id::I16 => numbers!(I16, i16),
        type_id::U32 => numbers!(U32, u32),
        type_id::I32 => numbers!(I32, i32),
        type_id::F32 => numbers!(F32, f32),
        type_id::U64 => numbers!(U64, u64),
        type_id::I64 => numbers!(I64, i64),
        type_id::F64 => numbers!(F64, f64),
        type_id::STRING => {
            let mut strings = StringArray::with_capacity(n);
            for i in 0..n {
                strings.push(c.str(ctx(i))?);
            }
            strings.shrink_to_fit();
            A::String(strings)
        }
        type_id::BOOL => {
            let mut bools = Vec::with_capacity(n);
            for i in 0..n {
                // Each byte checked (0 or 1) as a scalar bool is.
                if let MetadataValue::Bool(b) = read_scalar(c, elem_ty, key, ctx(i))? {
                    bools.push(b);
                }
            }
            A::Bool(bools)
        }
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                type_id: elem_ty,
            });
        }
    })
}

fn read_scalar(
    c: &mut Cursor<'_>,
    ty: u32,
    key: &str,
    ctx: Ctx<'_>,
) -> Result<MetadataValue, GgufError> {
    use MetadataValue as V;
    Ok(match ty {
        type_id::U8 => V::U8(c.u8(ctx)?),
        type_id::I8 => V::I8(i8::from_le_bytes(c.array(ctx)?)),
        type_id::U16 => V::U16(u16::from_le_bytes(c.array(ctx)?)),
        type_id::I16 => V::I16(i16::from_le_bytes(c.array(ctx)?)),
        type_id::U32 => V::U32(c.u32(ctx)?),
        type_id::I32 => V::I32(i32::from_le_bytes(c.array(ctx)?)),
        type_id::F32 => V::F32(f32::from_le_bytes(c.array(ctx)?)),
        type_id::BOOL => {
            let offset = c.pos as u64;
            match c.u8(ctx)? {
                0 => V::Bool(false),
                1 => V::Bool(true),
                value => {
                    return Err(GgufError::InvalidBool {
                        what: ctx.to_string(),
                        offset,
                        value,
                    });
                }
            }
        }
        type_id::STRING => V::String(c.string(ctx)?),
        type_id::U64 => V::U64(c.u64(ctx)?),
        type_id::I64 => V::I64(i64::from_le_bytes(c.array(ctx)?)),
        type_id::F64 => V::F64(f64::from_le_bytes(c.array(ctx)?)),
        type_id::ARRAY => {
            return Err(GgufError::NestedArray {
                key: key.to_owned(),
            });
        }
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                type_id: ty,
            });
        }
    })
}

fn read_tensor_info(
    c: &mut Cursor<'_>,
    index: u64,
    alignment: u32,
) -> Result<TensorInfo, GgufError> {
    let name = c.string(Ctx::TensorName(index))?;
    let n_dims = c.u32(Ctx::Tensor(&name, "dimension count"))?;
    if !(1..=4).contains(&n_dims) {
        return Err(GgufError::BadDims {
            tensor: name,
            n_dims,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64(Ctx::Tensor(&name, "dimensions"))?);
    }
    let type_id = c.u32(Ctx::Tensor(&name, "type"))?;
    let offset = c.u64(Ctx::Tensor(&name, "data offset"))?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            tensor: name,
            type_id,
        });
    };

    if dims.contains(&0) {
        return Err(GgufError::EmptyTensor { tensor: name, dims });
    }
    let block = ty.block_size() as u64;
    let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let n_bytes = n_elements
        .and_then(|n| n.checked_div(block))
        .and_then(|blocks| blocks.checked_mul(ty.type_size() as u64));
    if n_bytes.is_none_or(|b| usize::try_from(b).is_err()) {
        return Err(GgufError::ShapeOverflow { tensor: name, dims });
    }
    let ne0 = dims.first().copied().unwrap_or(0);
    if block == 0 || ne0 % block != 0 {
        return Err(GgufError::BlockMisaligned {
            tensor: name,
            ty,
            ne0,
            block_size: block,
        });
    }
    if offset % u64::from(alignment) != 0 {
        return Err(GgufError::MisalignedOffset {
            tensor: name,
            offset,
            alignment,
        });
    }
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
    })
}

/// Reject tensors whose data ranges overlap, naming both.
fn check_overlaps(tensors: &[TensorInfo]) -> Result<(), GgufError> {
    let mut order: Vec<(u64, u64, &str)> = tensors
        .iter()
        .map(|t| (t.offset, t.n_bytes(), t.name.as_str()))
        .collect();
    order.sort_unstable();
    for pair in order.windows(2) {
        let [(a_off, a_size, a_name), (b_off, _, b_name)] = *pair else {
            continue;
        };
        if b_off < a_off.saturating_add(a_size) {
            return Err(GgufError::TensorOverlap {
                tensor: b_name.to_owned(),
                offset: b_off,
                other: a_name.to_owned(),
                other_offset: a_off,
                other_size: a_size,
            });
        }
    }
    Ok(())
}
