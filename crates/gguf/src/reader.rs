//! Parsing and validation of GGUF files, and access to what they hold.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::error::GgufError;
use super::value::{MetadataValue, min_encoded_size, type_id, type_id_name};
use crate::quant::GgmlType;

/// The metadata key giving the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The alignment used when a file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// The largest alignment kindle accepts (2^24).
pub const MAX_ALIGNMENT: u32 = 1 << 24;

/// Fewest bytes a metadata entry occupies: key length, value type, a one-byte value.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Fewest bytes a tensor info occupies: name length, n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 8 + 4 + 8;
/// Longest prefix of an invalid string shown in an error.
const MAX_LOSSY_CHARS: usize = 64;

/// Where a tensor's data lies and how to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` (ne0) is the fastest-varying one, the row length.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dimensions; saturates for shapes a validated file
    /// never has).
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Number of bytes of data (saturates for shapes a validated file never has).
    pub fn n_bytes(&self) -> u64 {
        let block = self.ty.block_size() as u64;
        let blocks = self.n_elements().checked_div(block).unwrap_or(0);
        blocks.saturating_mul(self.ty.type_size() as u64)
    }

    /// Row length: `ne0`, the number of values in one row.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// Number of rows: product of all dimensions but the first (1 for a vector).
    pub fn n_rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// `(rows, cols)` of the tensor seen as a matrix of rows of `ne0` values.
    pub fn shape_rows_cols(&self) -> (u64, u64) {
        (self.n_rows(), self.row_len())
    }

    /// The shape in row-major order (slowest-varying first, as Burn and NumPy write it): the
    /// reverse of [`TensorInfo::dims`].
    pub fn shape(&self) -> Vec<usize> {
        self.dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect()
    }
}

/// The bytes of a GGUF file: memory-mapped or owned.
enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn as_slice(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A byte range of a GGUF file that keeps the file's storage alive (see
/// [`GgufFile::shared_tensor_bytes`]); dereferences to `&[u8]`.
#[derive(Clone)]
pub struct SharedBytes {
    storage: Arc<Storage>,
    start: usize,
    len: usize,
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // The range was taken from a slice of this same storage.
        &self.storage.as_slice()[self.start..self.start + self.len]
    }
}

impl SharedBytes {
    /// Let the operating system drop this range's pages from the process's resident memory,
    /// for a caller that has copied what it needs (memory-mapped files only; nothing happens
    /// for bytes read into memory). The bytes stay readable: a later read faults them back in
    /// from the file. Pages shared with neighbouring ranges are dropped too, and come back the
    /// same way.
    pub fn release_pages(&self) {
        self.release_range(0, self.len);
    }

    /// [`SharedBytes::release_pages`] for bytes `offset..offset + len` of this range (clamped
    /// to it).
    pub fn release_range(&self, offset: usize, len: usize) {
        let offset = offset.min(self.len);
        let len = len.min(self.len - offset);
        if len == 0 {
            return;
        }
        #[cfg(unix)]
        if let Storage::Mmap(map) = &*self.storage {
            // SAFETY: the map is a read-only mapping of the file, so dropping its pages loses
            // nothing: the next read of any of them refills it from the file.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.start + offset,
                    len,
                )
            };
        }
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBytes")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

/// A parsed, validated GGUF file (versions 2 and 3).
///
/// Parsing checks every count, length, shape and offset against the size of the file, so a
/// `GgufFile` only exists for a file whose metadata is well formed and whose tensors all lie,
/// aligned and without overlapping, inside the data section.
pub struct GgufFile {
    bytes: Arc<Storage>,
    version: u32,
    alignment: u32,
    metadata: Vec<(String, MetadataValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: u64,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("len", &self.bytes.as_slice().len())
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-map and parse the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io_err = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let bytes = if len == 0 {
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and kindle never writes model files while reading
            // them; like every mmap-based reader, we rely on no other process truncating or
            // rewriting the file while it is mapped.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
            Storage::Mmap(map)
        };
        Self::parse(bytes)
    }

    /// Parse a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::parse(Storage::Owned(bytes))
    }

    fn parse(bytes: Storage) -> Result<GgufFile, GgufError> {
        let p = parse(bytes.as_slice())?;
        Ok(GgufFile {
            bytes: Arc::new(bytes),
            version: p.version,
            alignment: p.alignment,
            metadata: p.metadata,
            metadata_index: p.metadata_index,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
            data_offset: p.data_offset,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, 32 when absent).
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Offset of the data section from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All the bytes of the file.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.metadata
    }

    /// The value of metadata key `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        let &i = self.metadata_index.get(key)?;
        self.metadata.get(i).map(|(_, v)| v)
    }

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

    /// The tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let &i = self.tensor_index.get(name)?;
        self.tensors.get(i)
    }

    /// The tensor named `name`, or an error naming it.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name).ok_or_else(|| GgufError::MissingTensor {
            name: name.to_owned(),
        })
    }

    /// The data of `info`, exactly [`TensorInfo::n_bytes`] bytes for a tensor of this file
    /// (empty for an info whose data does not lie in this file).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let range = (|| {
            let start = self.data_offset.checked_add(info.offset)?;
            let end = start.checked_add(info.n_bytes())?;
            Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        })();
        range
            .and_then(|r| self.bytes.as_slice().get(r))
            .unwrap_or(&[])
    }

    /// The data of `info` as a cheaply clonable handle that keeps the file's bytes (its memory
    /// map) alive: what weight matrices that read quantized blocks in place hold on to.
    /// Empty, like [`GgufFile::tensor_bytes`], for an info whose data does not lie in this file.
    pub fn shared_tensor_bytes(&self, info: &TensorInfo) -> SharedBytes {
        let bytes = self.tensor_bytes(info);
        let base = self.bytes.as_slice().as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).saturating_sub(base);
        SharedBytes {
            storage: Arc::clone(&self.bytes),
            start,
            len: bytes.len(),
        }
    }

    /// The data of the tensor named `name`, or an error naming it.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8], GgufError> {
        Ok(self.tensor_bytes(self.require_tensor(name)?))
    }

    /// The values of the tensor named `name` as `f32`, in file order (ne0 fastest).
    ///
    /// Errors name the tensor when it is missing or its type cannot be dequantised.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let info = self.require_tensor(name)?;
        let quant_err = |source| GgufError::Quant {
            tensor: name.to_owned(),
            source,
        };
        if !info.ty.can_dequantize() {
            return Err(quant_err(crate::quant::QuantError::Unsupported(info.ty)));
        }
        let data = self.tensor_bytes(info);
        if info.ty == GgmlType::F32 {
            return Ok(data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect());
        }
        // Validated at parse time: the data lies in the file, so the count is O(file size).
        let n = usize::try_from(info.n_elements()).map_err(|_| GgufError::ShapeOverflow {
            tensor: name.to_owned(),
            dims: info.dims.clone(),
        })?;
        let mut out = vec![0f32; n];
        crate::quant::dequantize(info.ty, data, &mut out).map_err(quant_err)?;
        Ok(out)
    }
}

/// What a parse produced.
struct Parsed {
    version: u32,
    alignment: u32,
    metadata: Vec<(String, MetadataValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: u64,
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
            Ok(s) => Ok(s.to_owned()),
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

fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
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
        let mut items = Vec::with_capacity(n);
        for i in 0..n {
            items.push(read_scalar(c, elem_ty, key, Ctx::Elem(key, i as u64))?);
        }
        Ok(MetadataValue::Array(items))
    } else {
        read_scalar(c, ty, key, Ctx::Value(key))
    }
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
