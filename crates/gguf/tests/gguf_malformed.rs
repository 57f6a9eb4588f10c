//! Crafted malformed GGUF files: each must give the specific `GgufError` variant with a
//! message naming the problem, and no input may make the reader panic.

use kindle_gguf::quant::GgmlType;
use kindle_gguf::{ALIGNMENT_KEY, GgufError, GgufFile, GgufWriter, MetadataValue};

/// A low-level little-endian byte builder for files the writer cannot produce.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }
    fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn str(self, s: &[u8]) -> Raw {
        self.u64(s.len() as u64).bytes(s)
    }
    fn zeros(self, n: usize) -> Raw {
        self.bytes(&vec![0; n])
    }
    fn tensor_info(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
}

/// Parse `bytes`, expecting an error.
fn parse_err(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(file) => panic!("malformed file parsed: {file:?}"),
        Err(e) => e,
    }
}

/// Assert the message of `err` contains every one of `parts`.
fn assert_names(err: &GgufError, parts: &[&str]) {
    let msg = err.to_string();
    for part in parts {
        assert!(msg.contains(part), "message {msg:?} does not name {part:?}");
    }
}

/// A small valid file whose last tensor ends exactly at the end of the file.
fn valid_file() -> Vec<u8> {
    GgufWriter::new()
        .metadata("general.architecture", "llama")
        .metadata("llama.block_count", MetadataValue::U32(2))
        .metadata("llama.rope.freq_base", MetadataValue::F32(10000.0))
        .metadata("general.flag", true)
        .metadata("tokenizer.ggml.tokens", vec!["<s>", "</s>", "a", "b"])
        .metadata("tokenizer.ggml.token_type", vec![3i32, 3, 1, 1])
        .metadata("general.big", MetadataValue::I64(-7))
        .tensor("blk.0.q", &[32, 2], GgmlType::Q8_0, vec![7; 68])
        .tensor_f32("output_norm.weight", &[8], &[1.0; 8])
        .to_bytes()
}

/// Position of the `offset` field of the tensor info named `name` with `n_dims` dimensions.
fn offset_field(bytes: &[u8], name: &str, n_dims: usize) -> usize {
    let mut pattern = (name.len() as u64).to_le_bytes().to_vec();
    pattern.extend_from_slice(name.as_bytes());
    let start = bytes
        .windows(pattern.len())
        .rposition(|w| w == pattern.as_slice())
        .expect("tensor info present");
    start + pattern.len() + 4 + 8 * n_dims + 4
}

fn patch_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn valid_file_parses() {
    let file = GgufFile::from_bytes(valid_file()).unwrap();
    assert_eq!(file.tensors().len(), 2);
    assert_eq!(file.metadata().len(), 7);
    assert_eq!(file.get_array("tokenizer.ggml.tokens").unwrap().len(), 4);
}

#[test]
fn bad_magic() {
    let mut bytes = valid_file();
    bytes[..4].copy_from_slice(b"GGML");
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::BadMagic { found } if &found == b"GGML"),
        "{err:?}"
    );
    assert_names(&err, &["magic", "GGML"]);
}

#[test]
fn unsupported_versions() {
    for version in [0u32, 1, 4, 0x0300_0000] {
        let err = parse_err(Raw::header(version, 0, 0).0);
        assert!(
            matches!(err, GgufError::UnsupportedVersion { version: v } if v == version),
            "{err:?}"
        );
        assert_names(&err, &["version", &version.to_string()]);
    }
    let err = parse_err(Raw::header(1, 0, 0).0);
    assert_names(&err, &["version 1"]);
}

#[test]
fn tensor_count_too_large() {
    let err = parse_err(Raw::header(3, u64::MAX, 0).zeros(64).0);
    assert!(
        matches!(
            err,
            GgufError::CountTooLarge {
                what: "tensor count",
                count: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &["tensor count", &u64::MAX.to_string()]);
}

#[test]
fn kv_count_too_large() {
    let err = parse_err(Raw::header(3, 0, u64::MAX).zeros(64).0);
    assert!(
        matches!(
            err,
            GgufError::CountTooLarge {
                count: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &["metadata key-value count", &u64::MAX.to_string()]);
}

#[test]
fn key_longer_than_file() {
    let bytes = Raw::header(3, 0, 1).u64(1000).bytes(b"abcdefghijklmnop").0;
    let err = parse_err(bytes);
    assert!(
        matches!(
            err,
            GgufError::StringTooLong {
                len: 1000,
                offset: 24,
                remaining: 16,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &["key of metadata entry #0", "1000", "offset 24"]);
}

#[test]
fn string_value_longer_than_file() {
    let bytes = Raw::header(3, 0, 1)
        .str(b"general.name")
        .u32(8)
        .u64(1 << 40)
        .bytes(b"short")
        .0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::StringTooLong { len, .. } if len == 1 << 40),
        "{err:?}"
    );
    assert_names(&err, &["`general.name`", &(1u64 << 40).to_string()]);
}

#[test]
fn tensor_name_longer_than_file() {
    let bytes = Raw::header(3, 1, 0).u64(10_000).zeros(40).0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::StringTooLong { len: 10_000, .. }),
        "{err:?}"
    );
    assert_names(&err, &["name of tensor info #0", "10000"]);
}

#[test]
fn huge_arrays_rejected_before_allocating() {
    for (elem_type, count) in [
        (4u32, 1u64 << 40),
        (8, 1 << 40),
        (0, u64::MAX),
        (10, u64::MAX),
    ] {
        let bytes = Raw::header(3, 0, 1)
            .str(b"tokenizer.ggml.scores")
            .u32(9)
            .u32(elem_type)
            .u64(count)
            .zeros(64)
            .0;
        let err = parse_err(bytes);
        assert!(
            matches!(err, GgufError::ArrayTooLarge { count: c, .. } if c == count),
            "{err:?}"
        );
        assert_names(&err, &["`tokenizer.ggml.scores`", &count.to_string()]);
    }
}

#[test]
fn nested_arrays_rejected() {
    let nested =
        MetadataValue::Array(vec![MetadataValue::Array(vec![MetadataValue::U8(1)].into())].into());
    let err = parse_err(GgufWriter::new().metadata("nested", nested).to_bytes());
    assert!(
        matches!(&err, GgufError::NestedArray { key } if key == "nested"),
        "{err:?}"
    );
    assert_names(&err, &["`nested`", "array of arrays"]);

    // Even an empty array of arrays.
    let bytes = Raw::header(3, 0, 1).str(b"e").u32(9).u32(9).u64(0).0;
    assert!(matches!(parse_err(bytes), GgufError::NestedArray { .. }));
}

#[test]
fn unknown_value_type() {
    let bytes = Raw::header(3, 0, 1).str(b"weird").u32(13).zeros(16).0;
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::UnknownValueType { key, type_id: 13 } if key == "weird"),
        "{err:?}"
    );
    assert_names(&err, &["`weird`", "13"]);

    let bytes = Raw::header(3, 0, 1)
        .str(b"arr")
        .u32(9)
        .u32(99)
        .u64(1)
        .zeros(16)
        .0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::UnknownValueType { type_id: 99, .. }),
        "{err:?}"
    );
    assert_names(&err, &["`arr`", "99"]);
}

#[test]
fn unknown_tensor_type() {
    let bytes = Raw::header(3, 1, 0)
        .tensor_info("blk.0.ffn_up.weight", &[32], 99, 0)
        .zeros(256)
        .0;
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::UnknownTensorType { tensor, type_id: 99 } if tensor == "blk.0.ffn_up.weight"),
        "{err:?}"
    );
    assert_names(&err, &["`blk.0.ffn_up.weight`", "99"]);
}

/// A type ggml defines but kindle does not read is named: a `TQ1_0` (ternary) matrix.
#[test]
fn a_known_but_unread_tensor_type_is_named() {
    let bytes = Raw::header(3, 1, 0)
        .tensor_info("blk.0.ffn_up.weight", &[256], 34, 0)
        .zeros(256)
        .0;
    let err = parse_err(bytes);
    assert_names(&err, &["`blk.0.ffn_up.weight`", "34", "TQ1_0"]);
}

#[test]
fn duplicate_key() {
    let bytes = GgufWriter::new()
        .metadata("general.name", "a")
        .metadata("llama.block_count", 2u32)
        .metadata("general.name", "b")
        .to_bytes();
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::DuplicateKey { key } if key == "general.name"),
        "{err:?}"
    );
    assert_names(&err, &["duplicate", "`general.name`"]);
}

#[test]
fn duplicate_tensor_name() {
    let bytes = GgufWriter::new()
        .tensor_f32("token_embd.weight", &[2], &[1.0, 2.0])
        .tensor_f32("token_embd.weight", &[2], &[3.0, 4.0])
        .to_bytes();
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::DuplicateTensor { name } if name == "token_embd.weight"),
        "{err:?}"
    );
    assert_names(&err, &["duplicate", "`token_embd.weight`"]);
}

#[test]
fn bad_alignments() {
    let cases: [(MetadataValue, &[&str]); 5] = [
        (MetadataValue::U32(0), &["u32 0", "zero"]),
        (MetadataValue::U32(13), &["u32 13", "power of two"]),
        (MetadataValue::U32(1 << 30), &["1073741824", "at most"]),
        (MetadataValue::String("32".into()), &["string", "u32"]),
        (MetadataValue::U64(32), &["u64 32", "u32"]),
    ];
    for (value, parts) in cases {
        let bytes = GgufWriter::new()
            .metadata(ALIGNMENT_KEY, value.clone())
            .tensor_f32("t", &[8], &[0.0; 8])
            .to_bytes();
        let err = parse_err(bytes);
        assert!(
            matches!(err, GgufError::BadAlignment { .. }),
            "{value:?}: {err:?}"
        );
        assert_names(&err, &["general.alignment"]);
        assert_names(&err, parts);
    }
}

#[test]
fn zero_and_five_dims() {
    for dims in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let bytes = GgufWriter::new().tensor_f32("odd", dims, &[1.0]).to_bytes();
        let err = parse_err(bytes);
        assert!(
            matches!(&err, GgufError::BadDims { tensor, n_dims } if tensor == "odd" && *n_dims as usize == dims.len()),
            "{err:?}"
        );
        assert_names(&err, &["`odd`", &format!("{} dimensions", dims.len())]);
    }
}

#[test]
fn shape_product_overflow() {
    for (dims, ty) in [
        (&[1u64 << 32, 1 << 32, 2][..], GgmlType::F32),
        (&[1 << 62][..], GgmlType::F32),
        (&[u64::MAX - 31, 2][..], GgmlType::Q8_0),
    ] {
        let bytes = Raw::header(3, 1, 0)
            .tensor_info("huge", dims, ty.id(), 0)
            .zeros(64)
            .0;
        let err = parse_err(bytes);
        assert!(
            matches!(&err, GgufError::ShapeOverflow { tensor, .. } if tensor == "huge"),
            "{dims:?}: {err:?}"
        );
        assert_names(&err, &["`huge`", "overflows"]);
    }
}

#[test]
fn row_not_whole_blocks() {
    let bytes = GgufWriter::new()
        .tensor("blk.0.attn_k.weight", &[33, 2], GgmlType::Q4_0, vec![0; 64])
        .to_bytes();
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::BlockMisaligned { tensor, ne0: 33, block_size: 32, ty: GgmlType::Q4_0 } if tensor == "blk.0.attn_k.weight"),
        "{err:?}"
    );
    assert_names(&err, &["`blk.0.attn_k.weight`", "Q4_0", "33", "32"]);
}

#[test]
fn misaligned_offset() {
    let mut bytes = valid_file();
    let at = offset_field(&bytes, "output_norm.weight", 1);
    patch_u64(&mut bytes, at, 68);
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::MisalignedOffset { tensor, offset: 68, alignment: 32 } if tensor == "output_norm.weight"),
        "{err:?}"
    );
    assert_names(&err, &["`output_norm.weight`", "68", "32"]);
}

#[test]
fn offset_past_end() {
    for offset in [1u64 << 20, 128, u64::MAX - 31] {
        let mut bytes = valid_file();
        let at = offset_field(&bytes, "output_norm.weight", 1);
        patch_u64(&mut bytes, at, offset);
        let err = parse_err(bytes);
        assert!(
            matches!(&err, GgufError::TensorPastEnd { tensor, offset: o, size: 32, .. } if tensor == "output_norm.weight" && *o == offset),
            "{err:?}"
        );
        assert_names(
            &err,
            &["`output_norm.weight`", "past the end", &offset.to_string()],
        );
    }
}

#[test]
fn overlapping_tensors() {
    // Second tensor moved onto the first (which spans 68 bytes, padded to 96).
    for offset in [0u64, 32, 64] {
        let mut bytes = valid_file();
        let at = offset_field(&bytes, "output_norm.weight", 1);
        patch_u64(&mut bytes, at, offset);
        let err = parse_err(bytes);
        assert!(matches!(err, GgufError::TensorOverlap { .. }), "{err:?}");
        assert_names(&err, &["`output_norm.weight`", "`blk.0.q`", "overlaps"]);
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid_file();
    assert!(GgufFile::from_bytes(bytes.clone()).is_ok());
    for cut in 0..bytes.len() {
        let err = parse_err(bytes[..cut].to_vec());
        // Each cut gives a real diagnosis, not a catch-all.
        assert!(
            matches!(
                err,
                GgufError::Truncated { .. }
                    | GgufError::StringTooLong { .. }
                    | GgufError::CountTooLarge { .. }
                    | GgufError::ArrayTooLarge { .. }
                    | GgufError::TensorPastEnd { .. }
            ),
            "cut at {cut}: {err:?}"
        );
    }
    let err = parse_err(bytes[..10].to_vec());
    assert!(
        matches!(
            err,
            GgufError::Truncated {
                offset: 8,
                needed: 8,
                available: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &["tensor count", "offset 8", "needs 8", "2 remain"]);
}

#[test]
fn zero_element_tensor() {
    let bytes = GgufWriter::new()
        .tensor("empty", &[0, 4], GgmlType::F32, vec![])
        .tensor_f32("ok", &[1], &[1.0])
        .to_bytes();
    let err = parse_err(bytes);
    assert!(
        matches!(&err, GgufError::EmptyTensor { tensor, dims } if tensor == "empty" && dims == &[0, 4]),
        "{err:?}"
    );
    assert_names(&err, &["`empty`", "no elements"]);
}

#[test]
fn bool_not_zero_or_one() {
    let bytes = Raw::header(3, 0, 1).str(b"general.flag").u32(7).u8(2).0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::InvalidBool { value: 2, .. }),
        "{err:?}"
    );
    assert_names(&err, &["`general.flag`", "byte 2"]);

    let bytes = Raw::header(3, 0, 1)
        .str(b"flags")
        .u32(9)
        .u32(7)
        .u64(3)
        .bytes(&[1, 0, 255])
        .0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::InvalidBool { value: 255, .. }),
        "{err:?}"
    );
    assert_names(&err, &["element 2", "`flags`"]);
}

#[test]
fn invalid_utf8_in_key_and_tensor_name() {
    let bytes = Raw::header(3, 0, 1).str(b"gen\xffral").u32(4).u32(1).0;
    let err = parse_err(bytes);
    assert!(
        matches!(err, GgufError::InvalidUtf8 { offset: 32, .. }),
        "{err:?}"
    );
    assert_names(&err, &["UTF-8", "key of metadata entry #0", "offset 32"]);

    let bytes = Raw::header(3, 1, 0)
        .tensor_info("t\u{e9}", &[1], 0, 0)
        .zeros(64)
        .0;
    let mut bytes = bytes;
    bytes[33] = 0xc3; // keep a lead byte...
    bytes[34] = 0x28; // ...followed by a non-continuation byte
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::InvalidUtf8 { .. }), "{err:?}");
    assert_names(&err, &["UTF-8", "name of tensor info #0"]);
}

/// A tiny xorshift generator, so the fuzz loop is deterministic.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let valid = valid_file();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut ok = 0;
    for i in 0..4000 {
        let mut bytes = valid.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            bytes[at] = match rng.below(4) {
                0 => bytes[at] ^ (1 << rng.below(8)),
                1 => 0xff,
                2 => 0,
                _ => rng.next() as u8,
            };
        }
        if i % 4 == 0 {
            let cut = rng.below(bytes.len() + 1);
            bytes.truncate(cut);
        }
        if let Ok(file) = GgufFile::from_bytes(bytes) {
            ok += 1;
            // A file that parses must hand out in-bounds slices of the right size.
            for t in file.tensors() {
                assert_eq!(file.tensor_bytes(t).len() as u64, t.n_bytes());
                let _ = file.dequantize(&t.name);
            }
        }
    }
    // Flips inside tensor data leave valid files: the loop must exercise both outcomes.
    assert!(ok > 0 && ok < 4000, "{ok} of 4000 mutated files parsed");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Arbitrary bytes after a valid header never panic.
        #[test]
        fn arbitrary_body_never_panics(
            version in 2u32..=3,
            n_tensors in prop_oneof![0u64..4, any::<u64>()],
            n_kv in prop_oneof![0u64..4, any::<u64>()],
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let bytes = Raw::header(version, n_tensors, n_kv).bytes(&body).0;
            let _ = GgufFile::from_bytes(bytes);
        }

        /// Overwriting a window of a valid file with arbitrary bytes never panics.
        #[test]
        fn overwritten_window_never_panics(
            at in 0usize..600,
            patch in proptest::collection::vec(any::<u8>(), 1..16),
        ) {
            let mut bytes = valid_file();
            let start = at % bytes.len();
            for (i, b) in patch.iter().enumerate() {
                if let Some(slot) = bytes.get_mut(start + i) {
                    *slot = *b;
                }
            }
            let _ = GgufFile::from_bytes(bytes);
        }
    }
}
