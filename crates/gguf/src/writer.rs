//! Writing GGUF files (version 3), mainly to build small models for tests.

use std::io;
use std::path::Path;

use super::layout::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ALIGNMENT};
use super::value::{MetadataArray, MetadataValue};
use crate::quant::GgmlType;

/// Why [`GgufWriter::write_checked_with`] failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError<E> {
    /// Writing the file or reading it back (a difference is `InvalidData`, named).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The `fill` callback's error.
    #[error("{0}")]
    Fill(E),
}

/// A digest of `bytes` (SipHash, this process's keys), for the read-back check of bytes the
/// writer does not keep.
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
    h.write(bytes);
    h.finish()
}

/// A tensor queued for writing.
#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    bytes: Vec<u8>,
    /// For a tensor added by [`GgufWriter::planned_tensor`]: its length, its bytes (empty
    /// here) to come from [`GgufWriter::into_bytes_with`]'s `fill`.
    planned: Option<usize>,
}

impl PendingTensor {
    fn len(&self) -> usize {
        self.planned.unwrap_or(self.bytes.len())
    }

    /// Its bytes, for the methods that write what they were given.
    ///
    /// # Panics
    /// For a planned tensor: only [`GgufWriter::into_bytes_with`] has its bytes.
    fn given(&self) -> &[u8] {
        assert!(
            self.planned.is_none(),
            "tensor {}: its bytes are planned, so only into_bytes_with writes it",
            self.name
        );
        &self.bytes
    }
}

/// Builds a GGUF version 3 file in memory.
///
/// The writer writes what it is given without validating it (so tests can also build
/// malformed files): metadata in insertion order, then tensor infos in insertion order, then
/// each tensor's bytes at the next multiple of the alignment, padded with zeros to a multiple
/// of the alignment (as llama.cpp does).
///
/// The alignment is 32 unless set with [`GgufWriter::alignment`] (which also writes the
/// `general.alignment` key) or given as a `u32` `general.alignment` metadata value. Arrays
/// are written with the type of their first element (`u8` for an empty array), so they must be
/// homogeneous.
///
/// ```
/// use kindle_gguf::{GgufFile, GgufWriter};
/// use kindle_gguf::quant::GgmlType;
///
/// let bytes = GgufWriter::new()
///     .alignment(64)
///     .metadata("general.architecture", "llama")
///     .tensor("raw", &[4], GgmlType::I8, vec![1, 2, 3, 4])
///     .tensor_f32("norm", &[2], &[0.5, 1.5])
///     .to_bytes();
/// let file = GgufFile::from_bytes(bytes)?;
/// assert_eq!(file.alignment(), 64);
/// assert_eq!(file.tensor("norm").unwrap().offset, 64);
/// # Ok::<(), kindle_gguf::GgufError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    alignment: Option<u32>,
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    /// An empty writer (no metadata, no tensors, alignment 32).
    pub fn new() -> Self {
        Self::default()
    }

    /// Align tensor data to `alignment` bytes and write it as `general.alignment` (after the
    /// other metadata, unless that key is given with [`GgufWriter::metadata`]).
    ///
    /// An alignment the reader would reject (zero, not a power of two, above 2^24) is written
    /// as the key, but the data is then aligned to 32.
    pub fn alignment(mut self, alignment: u32) -> Self {
        self.alignment = Some(alignment);
        self
    }

    /// Add a metadata entry (entries keep insertion order; duplicates are written as given).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<MetadataValue>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Add a tensor with dimensions `dims` (ggml order, ne0 first), type `ty` and data `bytes`.
    pub fn tensor(
        mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        bytes: Vec<u8>,
    ) -> Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
            bytes,
            planned: None,
        });
        self
    }

    /// Add a tensor whose `len` bytes are not given yet: [`into_bytes_with`](Self::into_bytes_with)
    /// asks for them when it reaches the tensor, so a converter can write a file's bytes
    /// without holding every tensor beside them. The other methods that write bytes panic on
    /// a writer with planned tensors.
    pub fn planned_tensor(
        mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        len: usize,
    ) -> Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
            bytes: Vec::new(),
            planned: Some(len),
        });
        self
    }

    /// Add an `F32` tensor with dimensions `dims` (ggml order, ne0 first) and values `values`.
    pub fn tensor_f32(self, name: impl Into<String>, dims: &[u64], values: &[f32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, GgmlType::F32, bytes)
    }

    /// The metadata as written: the entries given, plus `general.alignment` when set with
    /// [`GgufWriter::alignment`] and not given as metadata.
    fn effective_metadata(&self) -> Vec<(&str, MetadataValue)> {
        let mut entries: Vec<(&str, MetadataValue)> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if let Some(a) = self.alignment
            && !self.metadata.iter().any(|(k, _)| k == ALIGNMENT_KEY)
        {
            entries.push((ALIGNMENT_KEY, MetadataValue::U32(a)));
        }
        entries
    }

    /// The alignment the data is padded to.
    fn data_alignment(&self) -> u64 {
        let given = self
            .metadata
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .map(|(_, v)| match v {
                MetadataValue::U32(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(self.alignment);
        match given {
            Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => u64::from(a),
            _ => u64::from(DEFAULT_ALIGNMENT),
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header();
        let align = self.data_alignment();
        out.reserve_exact(self.data_len(align));
        for t in &self.tensors {
            out.extend_from_slice(t.given());
            pad(&mut out, align);
        }
        out
    }

    /// The file's bytes, as [`to_bytes`](Self::to_bytes), in one buffer reserved whole; each
    /// tensor's buffer is freed once copied, and the bytes of a planned tensor
    /// ([`planned_tensor`](Self::planned_tensor)) are appended by `fill(index, out)` (`index`
    /// counts every tensor added) when the file reaches it, so the writer's tensors and the
    /// file are never both whole in memory. `fill`'s error stops the writing and is returned.
    ///
    /// # Panics
    /// When `fill` appends another number of bytes than the tensor's planned length.
    pub fn into_bytes_with<E>(
        mut self,
        mut fill: impl FnMut(usize, &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Vec<u8>, E> {
        let mut out = self.header();
        let align = self.data_alignment();
        out.reserve_exact(self.data_len(align));
        for (i, t) in std::mem::take(&mut self.tensors).into_iter().enumerate() {
            match t.planned {
                Some(len) => {
                    let start = out.len();
                    fill(i, &mut out)?;
                    assert_eq!(
                        out.len() - start,
                        len,
                        "tensor {}: fill wrote another length than planned",
                        t.name
                    );
                }
                None => out.extend_from_slice(&t.bytes),
            }
            pad(&mut out, align);
        }
        Ok(out)
    }

    /// The bytes of the tensors' data, each padded to `align`.
    fn data_len(&self, align: u64) -> usize {
        self.tensors
            .iter()
            .map(|t| (t.len() as u64).next_multiple_of(align) as usize)
            .sum()
    }

    /// Everything before the tensor data: the header, the metadata, the tensor infos and the
    /// padding to the data's alignment.
    fn header(&self) -> Vec<u8> {
        let align = self.data_alignment();
        let metadata = self.effective_metadata();
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in &metadata {
            write_str(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            write_payload(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.len() as u64).next_multiple_of(align);
        }
        pad(&mut out, align);
        out
    }

    /// Write the file to `path` ([`to_bytes`](Self::to_bytes)' bytes, streamed: the tensors
    /// are not copied into one buffer first).
    pub fn write(&self, path: impl AsRef<Path>) -> io::Result<()> {
        use std::io::Write;
        let align = self.data_alignment();
        let mut out = io::BufWriter::new(std::fs::File::create(path)?);
        let header = self.header();
        out.write_all(&header)?;
        let zeros = [0u8; MAX_PAD];
        for t in &self.tensors {
            let bytes = t.given();
            out.write_all(bytes)?;
            let padded = (bytes.len() as u64).next_multiple_of(align) - bytes.len() as u64;
            let mut left = padded as usize;
            while left > 0 {
                let n = left.min(MAX_PAD);
                out.write_all(&zeros[..n])?;
                left -= n;
            }
        }
        out.flush()
    }

    /// Write the file to `path`, then read it back and check that it holds exactly the
    /// metadata and tensors given (names, shapes, types, bytes); a difference is an
    /// `InvalidData` error naming it. A file that could not be written whole (a full disk) or
    /// does not read back is removed, not left behind half written.
    pub fn write_checked(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        let result = self.write(path).and_then(|()| self.check(path));
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// [`write_checked`](Self::write_checked) for a writer with planned tensors
    /// ([`planned_tensor`](Self::planned_tensor)): each one's bytes come from `fill(index,
    /// buffer)` (`index` counts every tensor added; the buffer is emptied before each call and
    /// reused) when the file reaches it, and are written at once, so one tensor at a time is
    /// in memory. Reading back checks what `write_checked` checks, a planned tensor's bytes
    /// against a digest of what `fill` gave, and drops each tensor's mapped pages once read.
    /// `fill`'s error stops the writing ([`WriteError::Fill`]); the file is then removed, as
    /// after an I/O error ([`WriteError::Io`]).
    pub fn write_checked_with<E>(
        &self,
        path: impl AsRef<Path>,
        mut fill: impl FnMut(usize, &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), WriteError<E>> {
        use std::io::Write;
        let path = path.as_ref();
        let mut digests = vec![None; self.tensors.len()];
        let written = (|| -> Result<(), WriteError<E>> {
            let align = self.data_alignment();
            let mut out = io::BufWriter::new(std::fs::File::create(path)?);
            out.write_all(&self.header())?;
            let mut buffer = Vec::new();
            let zeros = [0u8; MAX_PAD];
            for (i, t) in self.tensors.iter().enumerate() {
                let bytes = match t.planned {
                    Some(len) => {
                        buffer.clear();
                        fill(i, &mut buffer).map_err(WriteError::Fill)?;
                        if buffer.len() != len {
                            return Err(WriteError::Io(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "tensor {}: {} bytes given, {len} planned",
                                    t.name,
                                    buffer.len()
                                ),
                            )));
                        }
                        digests[i] = Some(digest(&buffer));
                        &buffer[..]
                    }
                    None => &t.bytes[..],
                };
                out.write_all(bytes)?;
                let mut left =
                    ((bytes.len() as u64).next_multiple_of(align) - bytes.len() as u64) as usize;
                while left > 0 {
                    let n = left.min(MAX_PAD);
                    out.write_all(&zeros[..n])?;
                    left -= n;
                }
            }
            out.flush()?;
            self.check_with(path, &digests)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(path);
        }
        written
    }

    /// What [`write_checked`](Self::write_checked) checks of the file at `path`.
    fn check(&self, path: &Path) -> io::Result<()> {
        self.check_with(path, &vec![None; self.tensors.len()])
    }

    /// [`check`](Self::check), with the digests of the planned tensors' bytes (by index).
    fn check_with(&self, path: &Path, digests: &[Option<u64>]) -> io::Result<()> {
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let file = crate::GgufFile::open(path)
            .map_err(|e| bad(format!("reading back {}: {e}", path.display())))?;
        let written = self.effective_metadata();
        let read = file.metadata();
        if written.len() != read.len() {
            return Err(bad(format!(
                "{} metadata entries written, {} read back",
                written.len(),
                read.len()
            )));
        }
        for ((key, value), (rkey, rvalue)) in written.iter().zip(read) {
            if key != rkey || value != rvalue {
                return Err(bad(format!("metadata {key} does not read back as written")));
            }
        }
        if file.tensors().len() != self.tensors.len() {
            return Err(bad("the tensor count does not read back as written".into()));
        }
        for ((t, info), planned) in self.tensors.iter().zip(file.tensors()).zip(digests) {
            let bytes = file.shared_tensor_bytes(info);
            let same = match planned {
                Some(d) => digest(&bytes) == *d,
                None => t.given() == &bytes[..],
            };
            // Read: its pages need not stay resident while the rest is checked.
            bytes.release_pages();
            if t.name != info.name || t.dims != info.dims || t.ty != info.ty || !same {
                return Err(bad(format!(
                    "tensor {} does not read back as written",
                    t.name
                )));
            }
        }
        Ok(())
    }
}

/// The zeros written at a time between tensors.
const MAX_PAD: usize = 4096;

fn pad(out: &mut Vec<u8>, align: u64) {
    let len = out.len() as u64;
    out.resize(len.next_multiple_of(align) as usize, 0);
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Write a value without its type id (arrays: element type, count, elements).
fn write_payload(out: &mut Vec<u8>, value: &MetadataValue) {
    use MetadataValue as V;
    match value {
        V::U8(v) => out.push(*v),
        V::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::Bool(v) => out.push(u8::from(*v)),
        V::String(s) => write_str(out, s),
        V::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::Array(items) => {
            out.extend_from_slice(&items.elem_type_id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            match items {
                MetadataArray::String(strings) => strings.iter().for_each(|s| write_str(out, s)),
                MetadataArray::Values(values) => values.iter().for_each(|v| write_payload(out, v)),
                _ => items.values().for_each(|v| write_payload(out, &v)),
            }
        }
    }
}
