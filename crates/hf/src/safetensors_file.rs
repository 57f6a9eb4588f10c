//! One safetensors file, memory-mapped (or owned) and checked before anything is read.
//!
//! The layout: an 8-byte little-endian header length `n`, `n` bytes of UTF-8 JSON (an object
//! of tensor entries `{dtype, shape, data_offsets}` and an optional `__metadata__`), then the
//! data section. Every check is made here with a typed error naming the tensor (the
//! `safetensors` crate's own errors name no file and often no tensor), then the crate's
//! `read_metadata` runs as a second line (it also rejects gaps between tensors and bytes after
//! the last one). Nothing is allocated from a header number before it is checked against the
//! file's length.

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::Dtype;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};

use crate::error::{HfError, Result, io_error};

/// The largest header accepted, as the `safetensors` crate (100 MB).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// The bytes of a file: a read-only memory map, or owned bytes.
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Owned(v) => v,
        }
    }
}

/// One tensor of a safetensors file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsTensor {
    /// Its name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape, row-major (the last dimension varies fastest).
    pub shape: Vec<u64>,
    /// Its bytes, relative to the start of the data section.
    pub range: std::ops::Range<usize>,
}

impl SafetensorsTensor {
    /// The number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A checked safetensors file: its tensors and their bytes.
///
/// ```
/// use kindle_hf::SafetensorsFile;
///
/// let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data)
///     .expect("consistent");
/// let bytes = safetensors::serialize([("w", view)], None).expect("serialisable");
/// let file = SafetensorsFile::from_bytes("mem.safetensors", bytes)?;
/// assert_eq!(file.tensors()[0].name, "w");
/// assert_eq!(file.to_f32("w")?, [1.0, 2.0]);
/// # Ok::<(), kindle_hf::HfError>(())
/// ```
pub struct SafetensorsFile {
    path: PathBuf,
    storage: Storage,
    data_start: usize,
    tensors: Vec<SafetensorsTensor>,
    metadata: Vec<(String, String)>,
}

impl fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl SafetensorsFile {
    /// Maps the file at `path` and checks it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(io_error(path))?;
        // SAFETY: the map is read-only; kindle does not write model files while reading
        // them, and every offset is checked against the map's length before use.
        let map = unsafe { Mmap::map(&file) }.map_err(io_error(path))?;
        Self::parse(path.to_owned(), Storage::Mapped(map))
    }

    /// Checks `bytes` as a safetensors file; `name` names it in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        Self::parse(name.into(), Storage::Owned(bytes))
    }

    fn parse(path: PathBuf, storage: Storage) -> Result<Self> {
        let bytes = storage.bytes();
        let (data_start, tensors, metadata) = check(&path, bytes)?;
        safetensors::SafeTensors::read_metadata(bytes).map_err(|source| HfError::Safetensors {
            file: path.clone(),
            source,
        })?;
        Ok(Self {
            path,
            storage,
            data_start,
            tensors,
            metadata,
        })
    }

    /// The file's path (or the name given to [`from_bytes`](Self::from_bytes)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensors, in the order of their data.
    pub fn tensors(&self) -> &[SafetensorsTensor] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&SafetensorsTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The `__metadata__` entries (string to string).
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// Let the operating system drop the resident pages of `tensor`'s bytes, for a caller
    /// that has converted them (a memory-mapped file only; owned bytes stay). They stay
    /// readable: a later read faults them back in from the file.
    pub fn release(&self, tensor: &SafetensorsTensor) {
        #[cfg(unix)]
        if let Storage::Mapped(map) = &self.storage {
            let start = self.data_start.saturating_add(tensor.range.start);
            let len = tensor.range.end.saturating_sub(tensor.range.start);
            if start.saturating_add(len) <= map.len() && len > 0 {
                // SAFETY: the map is a read-only mapping of the file, so dropping its pages
                // loses nothing: the next read of any of them refills it from the file.
                let _ = unsafe {
                    map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = tensor;
    }

    /// The bytes of `tensor` (a tensor of this file).
    pub fn data(&self, tensor: &SafetensorsTensor) -> &[u8] {
        let start = self.data_start.saturating_add(tensor.range.start);
        let end = self.data_start.saturating_add(tensor.range.end);
        self.storage.bytes().get(start..end).unwrap_or_default()
    }

    /// The values of tensor `name` as `f32` (exact for F32, F16 and BF16; other dtypes are
    /// [`HfError::UnsupportedDtype`]).
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        let tensor = self.tensor(name).ok_or_else(|| HfError::MissingTensor {
            tensor: name.to_owned(),
        })?;
        decode_f32(&tensor.name, tensor.dtype, self.data(tensor))
    }
}

/// `bytes` of dtype `dtype` as `f32`, exactly.
pub(crate) fn decode_f32(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>> {
    Ok(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => {
            return Err(HfError::UnsupportedDtype {
                tensor: name.to_owned(),
                dtype: format!("{other:?}"),
            });
        }
    })
}

type Checked = (usize, Vec<SafetensorsTensor>, Vec<(String, String)>);

/// Every check of the format, each failure naming the file and tensor.
fn check(path: &Path, bytes: &[u8]) -> Result<Checked> {
    let file = || path.to_owned();
    let file_len = bytes.len() as u64;
    let Some(len_bytes) = bytes.first_chunk::<8>() else {
        return Err(HfError::TooShort {
            file: file(),
            len: file_len,
        });
    };
    let n = u64::from_le_bytes(*len_bytes);
    if n > MAX_HEADER_LEN {
        return Err(HfError::HeaderTooLarge {
            file: file(),
            len: n,
            max: MAX_HEADER_LEN,
        });
    }
    if n > file_len - 8 {
        return Err(HfError::HeaderPastEnd {
            file: file(),
            len: n,
            file_len,
        });
    }
    // Both bounded by the file's length now.
    let data_start = 8 + n as usize;
    let header =
        std::str::from_utf8(&bytes[8..data_start]).map_err(|e| HfError::InvalidHeader {
            file: file(),
            reason: format!("not UTF-8: {e}"),
        })?;
    let entries = parse_entries(header).map_err(|reason| HfError::InvalidHeader {
        file: file(),
        reason,
    })?;
    let data_len = file_len - data_start as u64;

    let mut seen = HashSet::with_capacity(entries.len());
    let mut tensors = Vec::with_capacity(entries.len());
    let mut metadata = Vec::new();
    for (name, value) in entries {
        if !seen.insert(name.clone()) {
            return Err(HfError::DuplicateTensor {
                file: file(),
                tensor: name,
            });
        }
        if name == "__metadata__" {
            metadata = parse_metadata(value).map_err(|reason| HfError::InvalidHeader {
                file: file(),
                reason: format!("__metadata__: {reason}"),
            })?;
            continue;
        }
        let bad = |reason: String| HfError::InvalidTensorInfo {
            file: file(),
            tensor: name.clone(),
            reason,
        };
        let info: RawInfo = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        let dtype: Dtype = serde_json::from_value(serde_json::Value::String(info.dtype.clone()))
            .map_err(|_| bad(format!("unknown dtype {:?}", info.dtype)))?;
        let (start, end) = info.data_offsets;
        if start > end || end > data_len {
            return Err(HfError::OffsetsOutOfBounds {
                file: file(),
                tensor: name,
                start,
                end,
                data_len,
            });
        }
        let bits = info
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.bitsize() as u64));
        if bits.is_none_or(|b| !b.is_multiple_of(8) || b / 8 != end - start) {
            return Err(HfError::SizeMismatch {
                file: file(),
                tensor: name,
                layout: format!("dtype {} and shape {:?}", info.dtype, info.shape),
                expected: bits.map_or("more than 2^64".into(), |b| {
                    if b.is_multiple_of(8) {
                        (b / 8).to_string()
                    } else {
                        format!("{b} bits, not whole")
                    }
                }),
                actual: end - start,
            });
        }
        // Bounded by the data length, which fits in usize.
        let range = start as usize..end as usize;
        tensors.push(SafetensorsTensor {
            name,
            dtype,
            shape: info.shape,
            range,
        });
    }
    tensors.sort_by_key(|t| (t.range.start, t.range.end));
    for pair in tensors.windows(2) {
        if pair[1].range.start < pair[0].range.end {
            return Err(HfError::Overlap {
                file: file(),
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok((data_start, tensors, metadata))
}

#[derive(Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

fn parse_metadata(value: serde_json::Value) -> std::result::Result<Vec<(String, String)>, String> {
    let serde_json::Value::Object(map) = value else {
        return Err(format!("should be an object, found {value}"));
    };
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(format!("value of `{k}` should be a string, found {other}")),
        })
        .collect()
}

/// The header's top-level entries in file order, duplicates kept (serde_json's maps would
/// keep only the last one).
fn parse_entries(header: &str) -> std::result::Result<Vec<(String, serde_json::Value)>, String> {
    struct Entries(Vec<(String, serde_json::Value)>);
    struct EntriesVisitor;
    impl<'de> Visitor<'de> for EntriesVisitor {
        type Value = Entries;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                out.push(entry);
            }
            Ok(Entries(out))
        }
    }
    impl<'de> Deserialize<'de> for Entries {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(EntriesVisitor)
        }
    }
    // safetensors pads the header with trailing spaces.
    serde_json::from_str::<Entries>(header.trim_end())
        .map(|e| e.0)
        .map_err(|e| e.to_string())
}
