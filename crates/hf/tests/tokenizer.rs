//! Byte-level BPE tokenizers both ways: tokenizer.json → GGUF metadata → kindle's tokenizer
//! encodes as kindle's tokenizer on the tokenizer.json; GGUF → tokenizer.json → the
//! tokenizers crate encodes as kindle's tokenizer on the GGUF.

mod common;

use common::{CONTROL, TempDir, USER, id_of, vocab, write_hf_dir};
use kindle_gguf::{GgufFile, GgufWriter};
use kindle_hf::{HfDir, HfDtype, HfError, HfWriteOptions, ToGgufOptions, write_hf, write_hf_with};
use kindle_tokenizer::Tokenizer;
use serde_json::{Value, json};

const TEXTS: &[&str] = &[
    "Hello world",
    "hello  world\n\nthe 12345 numbers 7",
    "It's 3.14! I've been 'told he's there, 'RE you sure? 'M not, 'D",
    "<|im_start|>user\nhi<|im_end|>\n",
    "tabs\tand <tool> tokens<|endoftext|>",
    "ünïcödé ✓ 日本語 🦙🦙",
    " leading space and trailing  ",
    "\n \n\n \t\t  x\r\n",
    "",
];

const HF_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const HF_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn byte_level(use_regex: bool) -> Value {
    json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex })
}

/// A Hugging Face tokenizer.json of `vocab()`, written as Hugging Face writes each kind.
fn hf_tokenizer_json(kind: &str) -> Value {
    let v = vocab();
    let split = |re: &str| {
        json!({ "type": "Sequence", "pretokenizers": [
            { "type": "Split", "pattern": { "Regex": re }, "behavior": "Isolated", "invert": false },
            byte_level(false),
        ]})
    };
    let pre = match kind {
        "gpt2" => byte_level(true),
        "smollm" => json!({ "type": "Sequence", "pretokenizers": [
            { "type": "Digits", "individual_digits": true }, byte_level(true) ]}),
        "llama3" => split(HF_LLAMA3),
        _ => split(HF_QWEN2),
    };
    let model_vocab: serde_json::Map<String, Value> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| v.types[*i] == 1 || kind != "qwen2") // Qwen2 keeps added tokens out
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let added: Vec<Value> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| v.types[*i] != 1)
        .map(|(i, t)| {
            json!({ "id": i, "content": t, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": v.types[i] == 3 })
        })
        .collect();
    let bos = id_of(&v, "<|im_start|>");
    let post = if kind == "llama3" {
        json!({ "type": "TemplateProcessing",
            "single": [ { "SpecialToken": { "id": "<|im_start|>", "type_id": 0 } },
                        { "Sequence": { "id": "A", "type_id": 0 } } ],
            "pair": [ { "Sequence": { "id": "A", "type_id": 0 } }, { "Sequence": { "id": "B", "type_id": 1 } } ],
            "special_tokens": { "<|im_start|>": { "id": "<|im_start|>", "ids": [bos], "tokens": ["<|im_start|>"] } } })
    } else {
        json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false })
    };
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": if kind == "qwen2" { json!({ "type": "NFC" }) } else { Value::Null },
        "pre_tokenizer": pre, "post_processor": post,
        "decoder": byte_level(true),
        "model": { "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": kind == "llama3",
            "vocab": model_vocab,
            "merges": v.merges.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>() },
    })
}

/// A Hugging Face directory (tiny Qwen2 weights) with the tokenizer files of `kind`.
fn hf_dir_with_tokenizer(kind: &str, vocab_size: usize) -> TempDir {
    let dir = TempDir::new(kind);
    let config = json!({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 4, "intermediate_size": 4,
        "num_hidden_layers": 0, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 8, "rms_norm_eps": 1e-6, "vocab_size": vocab_size,
        "tie_word_embeddings": true, "eos_token_id": 3,
    });
    let n = vocab_size as u64 * 4;
    write_hf_dir(
        dir.path(),
        &config,
        &[(
            "model.embed_tokens.weight".into(),
            safetensors::Dtype::F32,
            vec![vocab_size, 4],
            common::values(5, n, -1.0, 1.0),
        )],
    );
    let write =
        |name: &str, v: &Value| std::fs::write(dir.path().join(name), v.to_string()).unwrap();
    write("tokenizer.json", &hf_tokenizer_json(kind));
    write(
        "tokenizer_config.json",
        &json!({
            "bos_token": "<|im_start|>", "eos_token": { "content": "<|im_end|>" },
            "add_bos_token": kind == "llama3", "chat_template": "{{ messages }}",
        }),
    );
    dir
}

fn assert_same_ids(a: &Tokenizer, b: &Tokenizer, what: &str) {
    for text in TEXTS {
        for parse_special in [true, false] {
            assert_eq!(
                a.encode(text, parse_special).unwrap(),
                b.encode(text, parse_special).unwrap(),
                "{what}: {text:?} parse_special={parse_special}"
            );
        }
    }
}

#[test]
fn tokenizer_json_to_gguf_encodes_as_the_tokenizer_json() {
    let v = vocab();
    for (kind, pre) in [
        ("gpt2", "gpt-2"),
        ("smollm", "smollm"),
        ("llama3", "llama-bpe"),
        ("qwen2", "qwen2"),
    ] {
        let dir = hf_dir_with_tokenizer(kind, v.tokens.len() + 3);
        let file = HfDir::open(dir.path())
            .unwrap()
            .to_gguf_file(&ToGgufOptions::default())
            .unwrap();
        assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
        assert_eq!(file.get_str("tokenizer.ggml.pre").unwrap(), pre, "{kind}");
        let tokens = file.get_str_array("tokenizer.ggml.tokens").unwrap();
        // Padded to config.json's vocab_size with llama.cpp's unused `[PAD{i}]` tokens.
        assert_eq!(tokens.len(), v.tokens.len() + 3);
        assert_eq!(tokens[v.tokens.len()], format!("[PAD{}]", v.tokens.len()));
        let types = file.get_i32_array("tokenizer.ggml.token_type").unwrap();
        assert_eq!(&types[..v.types.len()], v.types.as_slice(), "{kind}");
        assert_eq!(types[v.tokens.len()..], [5, 5, 5]);
        let merges = file.get_str_array("tokenizer.ggml.merges").unwrap();
        assert_eq!(merges.len(), v.merges.len());
        assert_eq!(merges[0], "h e");
        assert_eq!(
            file.get_u32("tokenizer.ggml.bos_token_id").unwrap(),
            id_of(&v, "<|im_start|>")
        );
        assert_eq!(
            file.get_u32("tokenizer.ggml.eos_token_id").unwrap(),
            id_of(&v, "<|im_end|>")
        );
        assert_eq!(
            file.get_bool("tokenizer.ggml.add_bos_token").unwrap(),
            kind == "llama3"
        );
        assert_eq!(
            file.get_str("tokenizer.chat_template").unwrap(),
            "{{ messages }}"
        );

        let from_gguf = Tokenizer::from_gguf(&file).unwrap();
        let from_json = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
        assert_same_ids(&from_gguf, &from_json, kind);
        assert!(
            from_gguf.encode("Hello world", false).unwrap().len() < 5,
            "merges used"
        );
    }
}

#[test]
fn gguf_to_tokenizer_json_encodes_as_the_gguf() {
    for pre in ["gpt-2", "smollm", "llama-bpe", "qwen2"] {
        for add_bos in [false, true] {
            // A tiny model with the vocabulary, BOS added or not.
            let tiny = common::tiny_gguf("qwen2", pre);
            let mut w = GgufWriter::new();
            for (k, v) in tiny.metadata() {
                let v = match k.as_str() {
                    "tokenizer.ggml.add_bos_token" => add_bos.into(),
                    _ => v.clone(),
                };
                w = w.metadata(k.clone(), v);
            }
            for t in tiny.tensors() {
                w = w.tensor(t.name.clone(), &t.dims, t.ty, tiny.tensor_bytes(t).to_vec());
            }
            let model = GgufFile::from_bytes(w.to_bytes()).unwrap();
            let dir = TempDir::new("tok-out");
            write_hf(&model, dir.path(), HfDtype::F32).unwrap();

            let kindle = Tokenizer::from_gguf(&model).unwrap();
            assert_eq!(kindle.add_bos(), add_bos);
            let hf = tokenizers::Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
            for text in TEXTS {
                let want = kindle.encode(text, true).unwrap();
                let got = hf.encode(*text, true).unwrap();
                assert_eq!(
                    got.get_ids(),
                    want.as_slice(),
                    "{pre} add_bos={add_bos}: {text:?}"
                );
                // And kindle's own reading of the written files.
                let again = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
                assert_eq!(
                    again.encode(text, false).unwrap(),
                    kindle.encode(text, false).unwrap()
                );
            }
            // Decoding gives the text back.
            let ids = kindle.encode(TEXTS[5], false).unwrap();
            assert_eq!(hf.decode(&ids, true).unwrap(), TEXTS[5]);
            let config: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(config["add_bos_token"], add_bos);
            assert_eq!(config["bos_token"], CONTROL[1]);
            assert_eq!(config["chat_template"], "{{ messages }}");
            let added = hf.get_added_tokens_decoder();
            let v = vocab();
            assert!(added[&id_of(&v, CONTROL[0])].special);
            assert!(!added[&id_of(&v, USER)].special);
        }
    }
}

#[test]
fn unknown_pre_tokenizers_and_vocabularies_are_named_errors() {
    let v = vocab();
    let dir = hf_dir_with_tokenizer("gpt2", v.tokens.len());
    let mut tj = hf_tokenizer_json("gpt2");
    tj["pre_tokenizer"] = json!({ "type": "Sequence", "pretokenizers": [
        { "type": "Split", "pattern": { "Regex": "\\p{L}+" }, "behavior": "Isolated", "invert": false },
        byte_level(false) ]});
    std::fs::write(dir.path().join("tokenizer.json"), tj.to_string()).unwrap();
    let err = HfDir::open(dir.path())
        .unwrap()
        .to_gguf(&ToGgufOptions::default())
        .unwrap_err();
    assert!(
        matches!(&err, HfError::UnknownPreTokenizer { pattern } if pattern.contains(r"\\p{L}+")),
        "{err}"
    );

    tj["pre_tokenizer"] = json!({ "type": "Metaspace", "replacement": "▁" });
    tj["model"]["byte_fallback"] = json!(true);
    std::fs::write(dir.path().join("tokenizer.json"), tj.to_string()).unwrap();
    let err = HfDir::open(dir.path())
        .unwrap()
        .to_gguf(&ToGgufOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("byte_fallback"), "{err}");
    // Without the tokenizer the weights still convert.
    let options = ToGgufOptions {
        tokenizer: false,
        ..ToGgufOptions::default()
    };
    assert!(HfDir::open(dir.path()).unwrap().to_gguf(&options).is_ok());

    // A vocabulary kindle does not convert (`t5`): refused before anything is written.
    let model = common::tiny_gguf("gemma3", "smollm");
    let mut w = GgufWriter::new();
    for (k, val) in model.metadata() {
        let val = if k == "tokenizer.ggml.model" {
            "t5".into()
        } else {
            val.clone()
        };
        w = w.metadata(k.clone(), val);
    }
    for t in model.tensors() {
        w = w.tensor(
            t.name.clone(),
            &t.dims,
            t.ty,
            model.tensor_bytes(t).to_vec(),
        );
    }
    let spm = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let out = TempDir::new("spm");
    let err = write_hf(&spm, out.path().join("x"), HfDtype::F32).unwrap_err();
    assert!(err.to_string().contains("`t5` is not converted"), "{err}");
    assert!(!out.path().join("x").exists());
    let options = HfWriteOptions {
        dtype: HfDtype::F32,
        tokenizer: false,
    };
    write_hf_with(&spm, out.path().join("x"), &options).unwrap();
    assert!(!out.path().join("x/tokenizer.json").exists());
    assert!(out.path().join("x/model.safetensors").exists());
}
