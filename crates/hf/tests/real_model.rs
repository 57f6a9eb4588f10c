//! SmolLM2 and Gemma-3 (GGUF, fetched if missing) → Hugging Face directory → GGUF: the same
//! tensors after dequantisation, bit for bit, the same vocabulary and the same token ids.

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

/// Gemma-3-270M (Q4_K_M, a SentencePiece vocabulary of 262,144 tokens; fetched if missing)
/// → Hugging Face directory (F32, tokenizer.model) → GGUF: every tokenizer key equal, the
/// ids llama.cpp gives its reference texts, and every dequantised tensor bit for bit — the
/// norms too: Hugging Face's `w - 1` and back (`(w - 1) + 1` in f32) is exact for all of
/// this model's norm weights (it is for any w in [0.5, 2] and for many more).
#[test]
fn gemma3_round_trips_through_tokenizer_model() {
    let Some(path) = kindle_fetch::fetchable_model_for_tests(&kindle_fetch::GEMMA3_270M) else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let gguf = GgufFile::open(&path).unwrap();
    let dir = TempDir::new("gemma3");
    write_hf(&gguf, dir.path(), HfDtype::F32).unwrap();
    assert!(dir.path().join("tokenizer.model").is_file());
    let back = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&ToGgufOptions::default())
        .unwrap();

    let keys = |f: &GgufFile, prefix: &str| {
        let mut k: Vec<_> = f
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .cloned()
            .collect();
        k.sort_by(|a, b| a.0.cmp(&b.0));
        k
    };
    let (want, got) = (keys(&gguf, "tokenizer."), keys(&back, "tokenizer."));
    let names = |k: &[(String, kindle_gguf::MetadataValue)]| {
        k.iter().map(|e| e.0.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&got), names(&want));
    for ((key, a), (_, b)) in want.iter().zip(&got) {
        assert!(a == b, "{key} differs");
    }

    assert_eq!(back.tensors().len(), gguf.tensors().len());
    for info in gguf.tensors() {
        let b = back
            .tensor(&info.name)
            .unwrap_or_else(|| panic!("{}", info.name));
        assert_eq!(b.dims, info.dims, "{}", info.name);
        let want = gguf.dequantize(&info.name).unwrap();
        let got = back.dequantize(&info.name).unwrap();
        assert_eq!(want.len(), got.len(), "{}", info.name);
        assert!(
            want.iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}: values differ",
            info.name
        );
    }
    let want = Tokenizer::from_gguf(&gguf).unwrap();
    let got = Tokenizer::from_gguf(&back).unwrap();
    assert_eq!(got.add_bos(), want.add_bos());
    let reference = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/reference/gemma3-270m-spm-llama-cpp.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
    let vectors = reference["encode_vectors"].as_array().unwrap();
    assert!(vectors.len() >= 100);
    let mut texts: Vec<String> = TEXTS.iter().map(|t| (*t).to_owned()).collect();
    texts.push("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n".into());
    for v in vectors {
        let text = v["text"].as_str().unwrap();
        // llama.cpp's ids (Gemma's add_space_prefix=false), from the converted GGUF.
        for (parse_special, key) in [(true, "ids_parse_special"), (false, "ids_no_parse_special")] {
            let ids: Vec<u32> = serde_json::from_value(v[key].clone()).unwrap();
            assert_eq!(got.encode(text, parse_special).unwrap(), ids, "{text:?}");
        }
        texts.push(text.to_owned());
    }
    for text in &texts {
        for parse_special in [true, false] {
            let ids = want.encode(text, parse_special).unwrap();
            assert_eq!(got.encode(text, parse_special).unwrap(), ids, "{text:?}");
        }
    }
}
