//! A parsed GGUF file: its storage (memory-mapped or owned) and access to its tensors.
//!
//! Parsing lives in `parse`, typed access to the metadata in `metadata`.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::error::GgufError;
use super::layout::TensorInfo;
use super::parse::parse;
use super::value::MetadataValue;
use crate::quant::GgmlType;

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
        let quant_err = |reason| GgufError::Quant {
            tensor: name.to_owned(),
            reason,
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
