//! Crafted bad files: each a clear error naming the problem, never a panic.

mod common;

use common::{TempDir, write_hf_dir};
use kindle_hf::{HfDir, HfError, MAX_HEADER_LEN, SafetensorsFile};
use safetensors::Dtype;
use serde_json::json;

/// A safetensors file with header `header` (JSON text, padded to 8 bytes) and `data`.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend_from_slice(data);
    out
}

fn parse(bytes: Vec<u8>) -> HfError {
    SafetensorsFile::from_bytes("bad.safetensors", bytes).unwrap_err()
}

#[track_caller]
fn assert_names(err: &HfError, parts: &[&str]) {
    let msg = err.to_string();
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should name {p:?}");
    }
}

#[test]
fn header_length_past_the_end_or_too_large() {
    let mut bytes = raw(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    );
    bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
    let err = parse(bytes);
    assert!(
        matches!(err, HfError::HeaderPastEnd { len: 1000, .. }),
        "{err:?}"
    );
    assert_names(&err, &["bad.safetensors", "1000"]);

    for n in [MAX_HEADER_LEN + 1, u64::MAX] {
        let mut bytes = n.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}      ");
        let err = parse(bytes);
        assert!(matches!(err, HfError::HeaderTooLarge { .. }), "{err:?}");
        assert_names(&err, &["bad.safetensors", "header length"]);
    }
    let err = parse(vec![1, 2, 3]);
    assert!(matches!(err, HfError::TooShort { len: 3, .. }), "{err:?}");
}

#[test]
fn invalid_json_and_non_objects() {
    for header in [
        "{not json",
        "[1, 2]",
        "\"x\"",
        r#"{"a": 1}"#,
        r#"{"a":{"dtype":"F32"}}"#,
    ] {
        let err = parse(raw(header, &[]));
        assert!(
            matches!(
                err,
                HfError::InvalidHeader { .. } | HfError::InvalidTensorInfo { .. }
            ),
            "{header}: {err:?}"
        );
        assert_names(&err, &["bad.safetensors"]);
    }
    let err = parse(raw(
        r#"{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    ));
    assert_names(&err, &["`w`", "F33"]);
    let mut bytes = raw("{}", &[]);
    bytes[8] = 0xff;
    assert!(matches!(parse(bytes), HfError::InvalidHeader { .. }));
}

#[test]
fn offsets_outside_the_data_or_overlapping() {
    let err = parse(raw(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0; 4],
    ));
    assert!(
        matches!(&err, HfError::OffsetsOutOfBounds { tensor, end: 8, data_len: 4, .. } if tensor == "w"),
        "{err:?}"
    );
    let err = parse(raw(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#,
        &[0; 8],
    ));
    assert!(matches!(err, HfError::OffsetsOutOfBounds { .. }), "{err:?}");
    let err = parse(raw(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
        &[0; 12],
    ));
    assert!(
        matches!(&err, HfError::Overlap { first, second, .. } if first == "a" && second == "b"),
        "{err:?}"
    );
    assert_names(&err, &["`a`", "`b`", "overlap"]);
    // A gap, or bytes after the last tensor: the safetensors crate's own checks.
    let err = parse(raw(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
        &[0; 8],
    ));
    assert!(matches!(err, HfError::Safetensors { .. }), "{err:?}");
    let err = parse(raw(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 8],
    ));
    assert!(matches!(err, HfError::Safetensors { .. }), "{err:?}");
}

#[test]
fn dtype_and_shape_must_match_the_byte_length() {
    let err = parse(raw(
        r#"{"w":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}}"#,
        &[0; 4],
    ));
    assert!(
        matches!(&err, HfError::SizeMismatch { tensor, actual: 4, .. } if tensor == "w"),
        "{err:?}"
    );
    assert_names(&err, &["`w`", "F16", "[3]", "6 bytes"]);
    let huge = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{},{}],"data_offsets":[0,4]}}}}"#,
        u64::MAX,
        2
    );
    let err = parse(raw(&huge, &[0; 4]));
    assert!(matches!(err, HfError::SizeMismatch { .. }), "{err:?}");
}

#[test]
fn duplicate_names_are_refused() {
    // serde_json's maps (and so the safetensors crate) keep the last of two equal keys.
    let err = parse(raw(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
        &[0; 8],
    ));
    assert!(
        matches!(&err, HfError::DuplicateTensor { tensor, .. } if tensor == "w"),
        "{err:?}"
    );
    assert_names(&err, &["`w`", "twice"]);
}

#[test]
fn unsupported_dtypes_name_the_tensor() {
    let file = SafetensorsFile::from_bytes(
        "ok.safetensors",
        raw(
            r#"{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#,
            &[0; 8],
        ),
    )
    .unwrap();
    let err = file.to_f32("ids").unwrap_err();
    assert!(
        matches!(&err, HfError::UnsupportedDtype { tensor, dtype } if tensor == "ids" && dtype == "I64"),
        "{err:?}"
    );
}

#[test]
fn a_missing_shard_is_named() {
    let dir = TempDir::new("missing-shard");
    std::fs::write(
        dir.path().join("config.json"),
        common::llama_config(true).to_string(),
    )
    .unwrap();
    let index =
        json!({ "weight_map": { "model.norm.weight": "model-00002-of-00002.safetensors" } });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = HfDir::open(dir.path()).unwrap_err();
    assert!(
        matches!(&err, HfError::MissingShard { shard, tensor, .. }
        if shard == "model-00002-of-00002.safetensors" && tensor == "model.norm.weight"),
        "{err:?}"
    );
    assert_names(
        &err,
        &[
            "model.safetensors.index.json",
            "model-00002-of-00002.safetensors",
        ],
    );

    // A shard that lacks a tensor the index puts there.
    std::fs::write(
        dir.path().join("model-00002-of-00002.safetensors"),
        common::safetensors_bytes(&[("other".into(), Dtype::F32, vec![1], vec![0.0])]),
    )
    .unwrap();
    let err = HfDir::open(dir.path()).unwrap_err();
    assert!(matches!(err, HfError::TensorNotInShard { .. }), "{err:?}");
    // A shard path leaving the directory.
    let index = json!({ "weight_map": { "model.norm.weight": "../x.safetensors" } });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    assert!(matches!(
        HfDir::open(dir.path()).unwrap_err(),
        HfError::WrongType { .. }
    ));

    let empty = TempDir::new("no-weights");
    std::fs::write(
        empty.path().join("config.json"),
        common::llama_config(true).to_string(),
    )
    .unwrap();
    assert!(matches!(
        HfDir::open(empty.path()).unwrap_err(),
        HfError::NoWeights { .. }
    ));
}

#[test]
fn config_json_missing_keys_and_wrong_types_are_named() {
    let tensors = [(
        "model.norm.weight".to_string(),
        Dtype::F32,
        vec![8],
        vec![1.0; 8],
    )];
    let cases: [(&str, serde_json::Value, &str); 5] = [
        (
            "hidden_size",
            serde_json::Value::Null,
            "missing key `hidden_size`",
        ),
        (
            "num_attention_heads",
            json!("eight"),
            "`num_attention_heads` should be a non-negative integer",
        ),
        (
            "rms_norm_eps",
            json!([1]),
            "`rms_norm_eps` should be a number",
        ),
        (
            "tie_word_embeddings",
            json!(1),
            "`tie_word_embeddings` should be a bool",
        ),
        (
            "architectures",
            json!(["BertModel"]),
            "unsupported architecture `BertModel`",
        ),
    ];
    for (key, value, want) in cases {
        let dir = TempDir::new("config");
        let mut config = common::llama_config(true);
        if value.is_null() {
            config.as_object_mut().unwrap().remove(key);
        } else {
            config[key] = value;
        }
        write_hf_dir(dir.path(), &config, &tensors);
        let err = HfDir::open(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(want), "{key}: {msg}");
        if key == "architectures" {
            assert!(
                msg.contains("LlamaForCausalLM") && msg.contains("GPT2LMHeadModel"),
                "{msg}"
            );
        } else {
            assert!(msg.contains("config.json"), "{msg}");
        }
    }
    let dir = TempDir::new("config-json");
    std::fs::write(dir.path().join("config.json"), "{ not json").unwrap();
    let err = HfDir::open(dir.path()).unwrap_err();
    assert!(matches!(err, HfError::Json { .. }), "{err:?}");
    let err = HfDir::open(dir.path().join("absent")).unwrap_err();
    assert!(matches!(err, HfError::Io { .. }), "{err:?}");

    // GPT-2: its own keys.
    let dir = TempDir::new("gpt2-config");
    write_hf_dir(
        dir.path(),
        &json!({ "architectures": ["GPT2LMHeadModel"], "n_embd": 8, "n_head": 2 }),
        &tensors,
    );
    assert_names(
        &HfDir::open(dir.path()).unwrap_err(),
        &["`n_layer`", "config.json"],
    );
    // An unconverted rotary scaling, and Llama 3's on another architecture.
    let dir = TempDir::new("rope");
    let mut config = common::llama_config(true);
    config["rope_scaling"] = json!({ "rope_type": "longrope", "factor": 8.0 });
    write_hf_dir(dir.path(), &config, &tensors);
    assert_names(
        &HfDir::open(dir.path()).unwrap_err(),
        &["rope_scaling.rope_type", "longrope", "llama3"],
    );
    config["rope_scaling"] = json!({ "rope_type": "llama3", "factor": 8.0 });
    config["architectures"] = json!(["Qwen2ForCausalLM"]);
    write_hf_dir(dir.path(), &config, &tensors);
    assert_names(
        &HfDir::open(dir.path()).unwrap_err(),
        &["rope_scaling.rope_type", "llama3", "qwen2"],
    );
}

#[test]
fn fuzz_style_garbage_never_panics() {
    let base = raw(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,1],"data_offsets":[8,12]}}"#,
        &[0; 12],
    );
    assert!(SafetensorsFile::from_bytes("ok", base.clone()).is_ok());
    let values = common::values(77, 20_000, 0.0, 1.0);
    for (i, r) in values.chunks(2).enumerate() {
        let mut bytes = base.clone();
        let at = (r[0] * bytes.len() as f32) as usize % bytes.len();
        bytes[at] = (r[1] * 256.0) as u8;
        if i % 7 == 0 {
            bytes.truncate(at);
        }
        if let Ok(file) = SafetensorsFile::from_bytes("fuzz", bytes) {
            for t in file.tensors().to_vec() {
                let _ = file.to_f32(&t.name);
            }
        }
    }
}
