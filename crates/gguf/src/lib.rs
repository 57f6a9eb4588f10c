//! Reading (and, for tests, writing) GGUF model files, versions 2 and 3.
//!
//! [`GgufFile`] parses a file's header, metadata and tensor infos and validates all of them
//! against the size of the file before allocating anything: a malformed or hostile file gives
//! a [`GgufError`] naming the problem (key, tensor, offset), never a panic or a huge
//! allocation. Tensor data stays in the memory-mapped (or owned) bytes and is handed out as
//! slices, or dequantised to `f32` on request. [`GgufWriter`] writes valid files.
//!
//! ```
//! use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
//! use kindle_gguf::quant::GgmlType;
//!
//! let bytes = GgufWriter::new()
//!     .metadata("general.architecture", "llama")
//!     .metadata("llama.block_count", MetadataValue::U32(2))
//!     .tensor_f32("output_norm.weight", &[4], &[1.0, 2.0, 3.0, 4.0])
//!     .to_bytes();
//!
//! let file = GgufFile::from_bytes(bytes)?;
//! assert_eq!(file.architecture()?, "llama");
//! assert_eq!(file.get_u64("llama.block_count")?, 2);
//! let norm = file.tensor("output_norm.weight").expect("written above");
//! assert_eq!(norm.ty, GgmlType::F32);
//! assert_eq!(file.tensor_bytes(norm).len(), 16);
//! assert_eq!(file.dequantize("output_norm.weight")?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), kindle_gguf::GgufError>(())
//! ```

mod error;
mod layout;
mod metadata;
pub mod mix;
mod parse;
pub mod quant;
mod reader;
mod strings;
mod value;
pub mod writer;

pub use error::GgufError;
pub use layout::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, TensorInfo};
pub use quant::{GgmlType, QuantError};
pub use reader::{GgufFile, SharedBytes};
pub use strings::StringArray;
pub use value::{MetadataArray, MetadataValue};
pub use writer::{GgufWriter, WriteError};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;

    fn all_values() -> Vec<(&'static str, MetadataValue)> {
        use MetadataValue as V;
        vec![
            ("u8", V::U8(200)),
            ("i8", V::I8(-100)),
            ("u16", V::U16(60_000)),
            ("i16", V::I16(-30_000)),
            ("u32", V::U32(4_000_000_000)),
            ("i32", V::I32(-2_000_000_000)),
            ("f32", V::F32(1.5e-5)),
            ("bool.t", V::Bool(true)),
            ("bool.f", V::Bool(false)),
            ("string", V::String("héllo ✓".into())),
            ("string.empty", V::String(String::new())),
            ("u64", V::U64(u64::MAX)),
            ("i64", V::I64(i64::MIN)),
            ("f64", V::F64(-2.5e300)),
            ("arr.u8", V::Array(vec![V::U8(1), V::U8(2)].into())),
            ("arr.i8", V::Array(vec![V::I8(-1)].into())),
            ("arr.u16", V::Array(vec![V::U16(7)].into())),
            ("arr.i16", V::Array(vec![V::I16(-7)].into())),
            (
                "arr.u32",
                V::Array(vec![V::U32(1), V::U32(2), V::U32(3)].into()),
            ),
            ("arr.i32", V::Array(vec![V::I32(-1), V::I32(3)].into())),
            ("arr.f32", V::Array(vec![V::F32(0.25), V::F32(-8.0)].into())),
            (
                "arr.bool",
                V::Array(vec![V::Bool(true), V::Bool(false)].into()),
            ),
            (
                "arr.string",
                V::Array(vec![V::String("a".into()), V::String(String::new())].into()),
            ),
            ("arr.u64", V::Array(vec![V::U64(u64::MAX)].into())),
            ("arr.i64", V::Array(vec![V::I64(-5)].into())),
            ("arr.f64", V::Array(vec![V::F64(3.25)].into())),
            ("arr.empty", V::Array(vec![].into())),
        ]
    }

    /// `write` streams the bytes `to_bytes` builds, and `into_bytes_with` builds them too: odd
    /// tensor sizes, padding longer than the writer's zero buffer (alignment 8192) and none at
    /// all.
    #[test]
    fn written_files_are_to_bytes_bytes() {
        let dir = std::env::temp_dir().join(format!("kindle-gguf-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for alignment in [32, 8192] {
            let writer = GgufWriter::new()
                .alignment(alignment)
                .metadata("general.architecture", "llama")
                .tensor("a", &[3], GgmlType::I8, vec![1, 2, 3])
                .tensor_f32("b", &[5], &[1.0, 2.0, 3.0, 4.0, 5.0])
                .tensor("c", &[32], GgmlType::I8, vec![7; 32]);
            let path = dir.join(format!("w{alignment}.gguf"));
            writer.write(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), writer.to_bytes());
            writer.write_checked(&path).unwrap();
            let bytes = writer.to_bytes();
            assert_eq!(bytes.len(), bytes.capacity(), "reserved exactly");
            let into = writer
                .clone()
                .into_bytes_with(|_, _| Err("nothing is planned"));
            assert_eq!(into.as_ref(), Ok(&bytes));
            // The same file with `b` planned: its bytes come from `fill` at its place.
            let planned = GgufWriter::new()
                .alignment(alignment)
                .metadata("general.architecture", "llama")
                .tensor("a", &[3], GgmlType::I8, vec![1, 2, 3])
                .planned_tensor("b", &[5], GgmlType::F32, 20)
                .tensor("c", &[32], GgmlType::I8, vec![7; 32]);
            let mut asked = Vec::new();
            let built = planned.clone().into_bytes_with(|i, out| {
                asked.push(i);
                out.extend(
                    [1.0f32, 2.0, 3.0, 4.0, 5.0]
                        .iter()
                        .flat_map(|v| v.to_le_bytes()),
                );
                Ok::<_, ()>(())
            });
            assert_eq!(built.as_ref(), Ok(&bytes));
            assert_eq!(asked, [1]);
            // Written to disk the same way, and checked; `fill`'s error removes the file.
            let out = dir.join(format!("p{alignment}.gguf"));
            let fill = |_: usize, out: &mut Vec<u8>| {
                out.extend(
                    [1.0f32, 2.0, 3.0, 4.0, 5.0]
                        .iter()
                        .flat_map(|v| v.to_le_bytes()),
                );
                Ok::<_, ()>(())
            };
            planned.write_checked_with(&out, fill).unwrap();
            assert_eq!(std::fs::read(&out).unwrap(), bytes);
            let stopped = planned.write_checked_with(&out, |_, _| Err("stop"));
            assert!(matches!(stopped, Err(crate::WriteError::Fill("stop"))));
            assert!(!out.exists());
            // A length other than planned is an error naming the tensor, and no file.
            let short = planned.write_checked_with(&out, |_, out| {
                out.push(0);
                Ok::<_, ()>(())
            });
            let Err(crate::WriteError::Io(e)) = short else {
                panic!("{short:?}")
            };
            assert!(
                e.to_string()
                    .contains("tensor b: 1 bytes given, 20 planned"),
                "{e}"
            );
            assert!(!out.exists());
            // `fill`'s error is returned.
            assert_eq!(planned.into_bytes_with(|_, _| Err("stop")), Err("stop"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_value_type_round_trips() {
        let values = all_values();
        let mut w = GgufWriter::new();
        for (k, v) in &values {
            w = w.metadata(*k, v.clone());
        }
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(file.version(), 3);
        assert_eq!(file.alignment(), 32);
        assert!(file.tensors().is_empty());
        let read: Vec<(&str, &MetadataValue)> = file
            .metadata()
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        let expected: Vec<(&str, &MetadataValue)> = values.iter().map(|(k, v)| (*k, v)).collect();
        assert_eq!(read, expected);
        for (k, v) in &values {
            assert_eq!(file.get(k), Some(v));
        }
        // Arrays read back stored by element type (one vector, strings in one buffer), not as
        // a value per element.
        use MetadataArray as A;
        let array = |k: &str| file.get_array(k).unwrap();
        assert!(matches!(array("arr.u8"), A::U8(v) if v == &[1, 2]));
        assert!(matches!(array("arr.i32"), A::I32(v) if v == &[-1, 3]));
        assert!(matches!(array("arr.f32"), A::F32(v) if v == &[0.25, -8.0]));
        assert!(matches!(array("arr.bool"), A::Bool(v) if v == &[true, false]));
        assert!(matches!(array("arr.string"), A::String(s) if s.iter().eq(["a", ""])));
        assert!(matches!(array("arr.f64"), A::F64(v) if v == &[3.25]));
        assert!(matches!(array("arr.empty"), A::U8(v) if v.is_empty()));
    }

    #[test]
    fn alignment_64_places_data_on_64_byte_boundaries() {
        let bytes = GgufWriter::new()
            .alignment(64)
            .tensor("a", &[3], GgmlType::I8, vec![1, 2, 3])
            .tensor("b", &[5], GgmlType::I8, vec![4, 5, 6, 7, 8])
            .tensor_f32("c", &[2, 2], &[1.0, 2.0, 3.0, 4.0])
            .to_bytes();
        let file = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(file.alignment(), 64);
        assert_eq!(file.get_u64(ALIGNMENT_KEY).unwrap(), 64);
        assert_eq!(file.data_offset() % 64, 0);
        let offsets: Vec<u64> = file.tensors().iter().map(|t| t.offset).collect();
        assert_eq!(offsets, [0, 64, 128]);
        assert_eq!(file.tensor_bytes(file.tensor("a").unwrap()), [1, 2, 3]);
        assert_eq!(
            file.tensor_bytes(file.tensor("b").unwrap()),
            [4, 5, 6, 7, 8]
        );
        assert_eq!(file.as_bytes().len() as u64, file.data_offset() + 192);

        // Alignment given as metadata works the same.
        let bytes = GgufWriter::new()
            .metadata(ALIGNMENT_KEY, MetadataValue::U32(128))
            .tensor("a", &[3], GgmlType::I8, vec![1, 2, 3])
            .tensor("b", &[1], GgmlType::I8, vec![9])
            .to_bytes();
        let file = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(file.alignment(), 128);
        assert_eq!(file.tensor("b").unwrap().offset, 128);
        assert_eq!(file.tensor_data("b").unwrap(), [9]);
    }

    #[test]
    fn tensor_bytes_slices_exactly() {
        let q8: Vec<u8> = (0..2 * 34).map(|i| i as u8).collect();
        let bytes = GgufWriter::new()
            .tensor("q", &[32, 2], GgmlType::Q8_0, q8.clone())
            .tensor_f32("v", &[3], &[1.0, -1.0, 0.5])
            .to_bytes();
        let file = GgufFile::from_bytes(bytes).unwrap();
        let q = file.tensor("q").unwrap();
        assert_eq!(q.dims, [32, 2]);
        assert_eq!(q.n_elements(), 64);
        assert_eq!(q.n_bytes(), 68);
        assert_eq!(q.shape_rows_cols(), (2, 32));
        assert_eq!(q.shape(), [2, 32]);
        assert_eq!(file.tensor_bytes(q), q8.as_slice());
        let v = file.tensor("v").unwrap();
        assert_eq!(v.offset, 96);
        assert_eq!(file.tensor_bytes(v).len(), 12);
        assert_eq!(
            file.tensors()
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["q", "v"]
        );
        // An info that does not belong to the file gives an empty slice, not a panic.
        let foreign = TensorInfo {
            name: "x".into(),
            dims: vec![u64::MAX],
            ty: GgmlType::F32,
            offset: u64::MAX,
        };
        assert!(file.tensor_bytes(&foreign).is_empty());
    }

    #[test]
    fn dequantize_f32_and_errors() {
        let values = [1.0f32, -2.5, 3.25, 0.0, 7.0, -0.125];
        let bytes = GgufWriter::new()
            .tensor_f32("w", &[3, 2], &values)
            .tensor("q", &[256], GgmlType::Q8_K, vec![0; 292])
            .to_bytes();
        let file = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(file.dequantize("w").unwrap(), values);

        let err = file.dequantize("nope").unwrap_err();
        assert!(matches!(&err, GgufError::MissingTensor { name } if name == "nope"));
        assert!(err.to_string().contains("`nope`"));
        let err = file.dequantize("q").unwrap_err();
        assert!(matches!(err, GgufError::Quant { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("`q`") && msg.contains("Q8_K"), "{msg}");
    }

    #[test]
    fn open_reads_a_file_and_names_a_missing_one() {
        let dir = std::env::temp_dir().join(format!("kindle-gguf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        GgufWriter::new()
            .metadata("general.architecture", "llama")
            .tensor_f32("t", &[2], &[1.0, 2.0])
            .write(&path)
            .unwrap();
        let file = GgufFile::open(&path).unwrap();
        assert_eq!(file.architecture().unwrap(), "llama");
        assert_eq!(file.dequantize("t").unwrap(), [1.0, 2.0]);

        let empty = dir.join("empty.gguf");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(
            GgufFile::open(&empty),
            Err(GgufError::Truncated { .. })
        ));

        let missing = dir.join("missing.gguf");
        let err = GgufFile::open(&missing).unwrap_err();
        assert!(matches!(err, GgufError::Io { .. }));
        assert!(err.to_string().contains("missing.gguf"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn metadata_value_helpers() {
        use MetadataValue as V;
        assert_eq!(V::I8(-1).as_u64(), None);
        assert_eq!(V::I64(5).as_u64(), Some(5));
        assert_eq!(V::U64(u64::MAX).as_i64(), None);
        assert_eq!(V::U16(9).as_f64(), Some(9.0));
        assert_eq!(V::String("x".into()).as_f64(), None);
        assert_eq!(V::Bool(true).as_u64(), None);
        assert_eq!(V::Array(vec![].into()).type_name(), "array");
        assert_eq!(V::U32(13).to_string(), "u32 13");
        assert_eq!(V::String("ab".into()).to_string(), "string \"ab\"");
        let long = V::from((0..20u32).collect::<Vec<_>>());
        assert_eq!(
            long.to_string(),
            "array of 20 elements [0, 1, 2, 3, 4, 5, 6, 7, ...]"
        );
    }
}
