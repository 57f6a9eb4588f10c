//! SentencePiece (`llama`) vocabularies both ways through tokenizer.model: GGUF → Hugging
//! Face directory → GGUF keeps every tokenizer key and every encoding; malformed
//! tokenizer.model files are named errors.

mod common;

use common::TempDir;
use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_hf::{HfDir, HfDtype, HfError, ToGgufOptions, write_hf};
use kindle_tokenizer::Tokenizer;
use serde_json::{Value, json};

const TEXTS: &[&str] = &[
    "hello world",
    " hello  world\n\nhello",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<tool>aa <tool> <ctrl>",
    "<bos>hello<eos> <pad><unk>",
    "ünïcödé ✓ 日本語 🦙 Ελληνικά",
    "\t\r\n  x  ",
    "",
];

/// `(piece, GGUF token type, score)`: Gemma-style control tokens (score -1000, as llama.cpp
/// writes `added_tokens_decoder` entries), a control token with score 0, a user-defined
/// token, an unused slot, 256 byte tokens and scored pieces.
fn pieces() -> Vec<(String, i32, f32)> {
    let mut p: Vec<(String, i32, f32)> = vec![
        ("<pad>".into(), 3, -1000.0),
        ("<eos>".into(), 3, -1000.0),
        ("<bos>".into(), 3, -1000.0),
        ("<unk>".into(), 2, 0.0),
        ("<start_of_turn>".into(), 3, -1000.0),
        ("<end_of_turn>".into(), 3, -1000.0),
        ("<ctrl>".into(), 3, 0.0),
        ("<tool>".into(), 4, -1000.0),
        ("<unused0>".into(), 5, 0.0),
    ];
    p.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 6, 0.0)));
    for (i, text) in [
        "▁", "h", "e", "l", "o", "a", "w", "r", "d", "u", "s", "m", "\n", "he", "ll", "hell",
        "hello", "▁h", "▁he", "▁hello", "aa", "▁a", "or", "ld", "▁w", "▁world", "\n\n", "▁▁",
        "user", "model", "er",
    ]
    .iter()
    .enumerate()
    {
        p.push(((*text).into(), 1, -1.0 - (i as f32) * 0.75));
    }
    p
}

/// The tiny model of `arch` (from the common helpers) with `pieces()` as its vocabulary
/// and `extra` tokenizer keys; embeddings resized to the vocabulary.
fn spm_gguf(arch: &str, extra: Vec<(&str, MetadataValue)>) -> GgufFile {
    let base = common::tiny_gguf(arch, "smollm");
    let p = pieces();
    let n = p.len() as u64;
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata() {
        if !k.starts_with("tokenizer.") {
            w = w.metadata(k.clone(), v.clone());
        }
    }
    let vocab: Vec<(&str, MetadataValue)> = vec![
        ("tokenizer.ggml.model", "llama".into()),
        ("tokenizer.ggml.pre", "default".into()),
        (
            "tokenizer.ggml.tokens",
            p.iter().map(|t| t.0.clone()).collect::<Vec<_>>().into(),
        ),
        (
            "tokenizer.ggml.scores",
            p.iter().map(|t| t.2).collect::<Vec<_>>().into(),
        ),
        (
            "tokenizer.ggml.token_type",
            p.iter().map(|t| t.1).collect::<Vec<_>>().into(),
        ),
        ("tokenizer.ggml.bos_token_id", MetadataValue::U32(2)),
        ("tokenizer.ggml.eos_token_id", MetadataValue::U32(1)),
        ("tokenizer.ggml.unknown_token_id", MetadataValue::U32(3)),
        ("tokenizer.ggml.padding_token_id", MetadataValue::U32(0)),
        ("tokenizer.chat_template", "{{ messages }}".into()),
    ];
    for (k, v) in vocab.into_iter().chain(extra) {
        w = w.metadata(k, v);
    }
    for t in base.tensors() {
        if t.name == "token_embd.weight" || t.name == "output.weight" {
            let values = common::values(7, t.dims[0] * n, -1.0, 1.0);
            w = w.tensor_f32(t.name.clone(), &[t.dims[0], n], &values);
        } else {
            w = w.tensor(t.name.clone(), &t.dims, t.ty, base.tensor_bytes(t).to_vec());
        }
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn tokenizer_keys(file: &GgufFile) -> Vec<(String, MetadataValue)> {
    let mut keys: Vec<_> = file
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys
}

fn assert_same_encodings(want: &GgufFile, got: &GgufFile, what: &str) {
    let want = Tokenizer::from_gguf(want).unwrap();
    let got = Tokenizer::from_gguf(got).unwrap();
    for text in TEXTS {
        for parse_special in [true, false] {
            assert_eq!(
                got.encode(text, parse_special).unwrap(),
                want.encode(text, parse_special).unwrap(),
                "{what}: {text:?} parse_special={parse_special}"
            );
        }
    }
}

/// GGUF → directory → GGUF; the directory's path is returned too.
fn round_trip(file: &GgufFile, tag: &str) -> (TempDir, GgufFile) {
    let dir = TempDir::new(tag);
    write_hf(file, dir.path(), HfDtype::F32).unwrap();
    let back = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&ToGgufOptions::default())
        .unwrap();
    (dir, back)
}

#[test]
fn sentencepiece_vocabularies_round_trip_through_tokenizer_model() {
    let cases: Vec<(&str, Vec<(&str, MetadataValue)>)> = vec![
        (
            "gemma3",
            vec![
                ("tokenizer.ggml.add_bos_token", true.into()),
                ("tokenizer.ggml.add_eos_token", false.into()),
                ("tokenizer.ggml.add_space_prefix", false.into()),
            ],
        ),
        ("llama", vec![]), // llama.cpp's defaults: add BOS, add a space prefix
        (
            "llama",
            vec![
                ("tokenizer.ggml.add_bos_token", false.into()),
                ("tokenizer.ggml.add_eos_token", true.into()),
                ("tokenizer.ggml.add_space_prefix", false.into()),
            ],
        ),
        (
            "llama",
            vec![("tokenizer.ggml.add_space_prefix", true.into())],
        ),
    ];
    for (i, (arch, extra)) in cases.into_iter().enumerate() {
        let what = format!("case {i} ({arch})");
        let file = spm_gguf(arch, extra);
        let (dir, back) = round_trip(&file, "spm");
        assert!(dir.path().join("tokenizer.model").is_file(), "{what}");
        assert!(!dir.path().join("tokenizer.json").exists(), "{what}");
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap(),
        )
        .unwrap();
        let class = if arch == "gemma3" {
            "GemmaTokenizer"
        } else {
            "LlamaTokenizer"
        };
        assert_eq!(config["tokenizer_class"], class, "{what}");
        assert_eq!(config["bos_token"], "<bos>", "{what}");
        assert_eq!(config["added_tokens_decoder"]["4"]["special"], true);
        assert_eq!(config["added_tokens_decoder"]["7"]["content"], "<tool>");
        assert_eq!(tokenizer_keys(&back), tokenizer_keys(&file), "{what}");
        assert_same_encodings(&file, &back, &what);
        for info in file.tensors() {
            let (a, b) = (file.dequantize(&info.name), back.dequantize(&info.name));
            assert_eq!(a.unwrap(), b.unwrap(), "{what}: {}", info.name);
        }

        // With a byte-fallback tokenizer.json beside it (as Gemma and Llama-2 ship),
        // tokenizer.model is still what is read.
        let tj = json!({ "model": { "type": "BPE", "byte_fallback": true, "vocab": {}, "merges": [] },
            "added_tokens": [ { "id": 2, "content": "<bos>", "special": true } ] });
        std::fs::write(dir.path().join("tokenizer.json"), tj.to_string()).unwrap();
        let again = HfDir::open(dir.path())
            .unwrap()
            .to_gguf_file(&ToGgufOptions::default())
            .unwrap();
        assert_eq!(tokenizer_keys(&again), tokenizer_keys(&file), "{what}");
    }
}

#[test]
fn hugging_face_directories_files_are_not_private() {
    use std::os::unix::fs::PermissionsExt;
    let file = spm_gguf("gemma3", vec![]);
    let dir = TempDir::new("mode");
    write_hf(&file, dir.path(), HfDtype::F32).unwrap();
    let mode = |name: &str| {
        std::fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for name in [
        "model.safetensors",
        "tokenizer.model",
        "tokenizer_config.json",
    ] {
        assert_eq!(mode(name), mode("config.json"), "{name}");
    }
    assert_ne!(mode("model.safetensors") & 0o044, 0, "readable by others");
}

#[test]
fn llama_cpp_overrides_from_added_tokens_and_padding_to_vocab_size() {
    let file = spm_gguf("llama", vec![]);
    let dir = TempDir::new("spm-added");
    write_hf(&file, dir.path(), HfDtype::F32).unwrap();
    let n = pieces().len();
    // added_tokens.json makes a token user-defined (score -1000); config.json's larger
    // vocab_size pads with `[PAD{i}]` unused tokens (score -10000).
    std::fs::write(
        dir.path().join("added_tokens.json"),
        json!({ "<extra>": 8 }).to_string(),
    )
    .unwrap();
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["vocab_size"] = json!(n + 2);
    std::fs::write(&path, config.to_string()).unwrap();
    let options = ToGgufOptions {
        tokenizer: true,
        ..ToGgufOptions::default()
    };
    let hf = HfDir::open(dir.path()).unwrap();
    // The weights do not have the padded rows, so only the vocabulary is checked here.
    let back = hf.to_gguf_file(&options).unwrap();
    let tokens = back.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), n + 2);
    assert_eq!(tokens[8], "<extra>");
    assert_eq!(tokens[n + 1], format!("[PAD{}]", n + 1));
    let types = back.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!((types[8], types[n], types[n + 1]), (4, 5, 5));
}

/// Converts the directory `dir` with its tokenizer.model replaced by `bytes`.
fn convert_with_model(dir: &TempDir, bytes: &[u8]) -> Result<GgufFile, HfError> {
    std::fs::write(dir.path().join("tokenizer.model"), bytes).unwrap();
    HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&ToGgufOptions::default())
}

#[test]
fn malformed_tokenizer_models_are_named_errors() {
    let file = spm_gguf("llama", vec![]);
    let dir = TempDir::new("spm-good");
    write_hf(&file, dir.path(), HfDtype::F32).unwrap();
    let good = std::fs::read(dir.path().join("tokenizer.model")).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..good.len() - 3].to_vec(), "runs past the end"),
        (vec![0x0a, 0x05, 0x0a, 0x01], "runs past the end"),
        (vec![0x0a, 0xff, 0xff], "truncated varint"),
        (
            [0x20].into_iter().chain([0xff; 11]).collect(),
            "varint longer",
        ),
        (vec![0x08, 0x01], "wire type 0, expected 2"), // pieces as a varint
        (vec![0x0a, 0x02, 0x15, 0x00], "runs past the end"), // score cut short
        (vec![0x0a, 0x02, 0x10, 0x01], "wire type 0, expected 5"), // score as a varint
        (vec![0x0a, 0x02, 0x18, 0x09], "type 9"),
        (vec![0x0a, 0x03, 0x0a, 0x01, 0xff], "not UTF-8"),
        (vec![0x2b], "field 5 has wire type 3"), // a group
        (vec![0x00], "field number 0"),
    ];
    for (bytes, want) in cases {
        let err = convert_with_model(&dir, &bytes).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, HfError::Tokenizer(_))
                && text.contains("tokenizer.model")
                && text.contains(want),
            "{bytes:02x?}: {text} (wanted {want:?})"
        );
    }
    // Every prefix of a good file: an error or a model, never a panic.
    for n in (0..good.len()).step_by(37) {
        let _ = convert_with_model(&dir, &good[..n]);
    }
}
