//! SmolLM2 (GGUF, fetched if missing) → Hugging Face directory → GGUF: the same tensors after
//! dequantisation, bit for bit, the same vocabulary and the same token ids.

mod common;

use common::TempDir;
use kindle_gguf::{GgmlType, GgufFile};
use kindle_hf::{HfDir, HfDtype, ToGgufOptions, write_hf};
use kindle_tokenizer::Tokenizer;

const TEXTS: &[&str] = &[
    "Hello, world! It's 2024 and I've got 12345 apples.",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "ünïcödé ✓ 日本語 🦙 Ελληνικά",
    "fn main() { println!(\"{}\", 1 + 2); }",
];

#[test]
fn smollm2_round_trips_through_a_hugging_face_directory() {
    let Some(path) = kindle_fetch::real_model_for_tests() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let gguf = GgufFile::open(&path).unwrap();
    let dir = TempDir::new("smollm2");
    write_hf(&gguf, dir.path(), HfDtype::F32).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["architectures"][0], "LlamaForCausalLM");
    assert_eq!(config["hidden_size"], 576);
    assert_eq!(config["num_key_value_heads"], 3);
    assert_eq!(config["tie_word_embeddings"], true);

    let back = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&ToGgufOptions::default())
        .unwrap();
    assert_eq!(back.tensors().len(), gguf.tensors().len());
    for info in gguf.tensors() {
        let b = back
            .tensor(&info.name)
            .unwrap_or_else(|| panic!("{}", info.name));
        assert_eq!(b.dims, info.dims, "{}", info.name);
        assert_eq!(b.ty, GgmlType::F32);
        let want = gguf.dequantize(&info.name).unwrap();
        let got = back.dequantize(&info.name).unwrap();
        assert!(
            want.iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}: values differ",
            info.name
        );
    }
    for key in [
        "llama.block_count",
        "llama.context_length",
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.chat_template",
    ] {
        assert_eq!(back.get(key), gguf.get(key), "{key}");
    }
    let want = Tokenizer::from_gguf(&gguf).unwrap();
    let got = Tokenizer::from_gguf(&back).unwrap();
    let json = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
    assert_eq!(got.add_bos(), want.add_bos());
    for text in TEXTS {
        for parse_special in [true, false] {
            let ids = want.encode(text, parse_special).unwrap();
            assert_eq!(got.encode(text, parse_special).unwrap(), ids, "{text:?}");
            assert_eq!(json.encode(text, parse_special).unwrap(), ids, "{text:?}");
        }
    }
}
