//! Checks the SentencePiece tokenizer against llama.cpp's tokenization of Gemma-3-270M
//! (`testdata/reference/gemma3-270m-q4_k_m.json`, key `tokenizer_vectors`: each text with BOS,
//! with and without special-token parsing).
//!
//! A second file, `testdata/reference/gemma3-270m-spm-llama-cpp.json`, holds 300 random texts
//! and 200 random id sequences run through llama.cpp's own SentencePiece code (copied from the
//! llama-cpp-python 0.3.36 sdist and compiled around the file's vocabulary; see its `about`),
//! with and without special parsing and a space prefix.
//!
//! Needs the real Gemma file (`kindle_fetch::fetchable_model_for_tests`: the cache folder's
//! copy, fetched if missing; only `KINDLE_SKIP_REAL_MODEL=1` skips). Only its vocabulary is
//! read.

use kindle_fetch::GEMMA3_270M;
use kindle_gguf::GgufFile;
use kindle_tokenizer::{GgufVocab, TokenType, Tokenizer};
use serde_json::Value;

fn reference() -> Value {
    read_json("gemma3-270m-q4_k_m.json")
}

fn read_json(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/reference/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).expect("reading the reference JSON"))
        .expect("parsing the reference JSON")
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an array of ids")
        .iter()
        .map(|v| u32::try_from(v.as_u64().expect("an id")).expect("a 32-bit id"))
        .collect()
}

/// Gemma's vocabulary; `None` only with `KINDLE_SKIP_REAL_MODEL=1`.
fn gemma_vocab() -> Option<GgufVocab> {
    let path = kindle_fetch::fetchable_model_for_tests(&GEMMA3_270M)?;
    let file =
        GgufFile::open(&path).unwrap_or_else(|e| panic!("failed to open {}: {e}", path.display()));
    Some(GgufVocab::from_gguf(&file).expect("reading Gemma's vocabulary metadata"))
}

/// Gemma's tokenizer; `None` only with `KINDLE_SKIP_REAL_MODEL=1`.
fn gemma() -> Option<Tokenizer> {
    Some(Tokenizer::from_vocab(gemma_vocab()?).expect("building Gemma's tokenizer"))
}

#[test]
fn gemma_tokenizer_matches_llama_cpp_reference_vectors() {
    let Some(tokenizer) = gemma() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let reference = reference();
    let vectors = reference["tokenizer_vectors"]
        .as_array()
        .expect("tokenizer_vectors is an array");
    assert_eq!(vectors.len(), 8);
    let mut failures = Vec::new();
    for vector in vectors {
        let text = vector["text"].as_str().expect("text is a string");
        for (parse_special, key) in [
            (true, "ids_add_bos_parse_special"),
            (false, "ids_add_bos_no_special"),
        ] {
            let want = ids(&vector[key]);
            let got = tokenizer.encode(text, parse_special).expect("encode");
            if got != want {
                failures.push(format!(
                    "{text:?} parse_special={parse_special}: got {got:?}, want {want:?}"
                ));
            }
            // Gemma adds no space prefix, so every vector after BOS decodes back to its text
            // (with parse_special, the turn markers rendered as themselves).
            assert_eq!(got.first(), Some(&2), "{text:?} starts with BOS");
            let decoded = tokenizer.decode(&got[1..], false).expect("decode");
            if decoded != text {
                failures.push(format!(
                    "{text:?} parse_special={parse_special}: decodes to {decoded:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatch(es) against llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gemma_vocabulary_metadata() {
    let Some(tokenizer) = gemma() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert!(tokenizer.is_sentencepiece());
    assert!(!tokenizer.add_space_prefix());
    assert_eq!(tokenizer.vocab_size(), 262_144);
    assert_eq!(tokenizer.bos_id(), Some(2));
    assert_eq!(tokenizer.eos_id(), Some(1));
    assert_eq!(tokenizer.unk_id(), Some(3));
    assert_eq!(tokenizer.pad_id(), Some(0));
    assert!(tokenizer.add_bos() && !tokenizer.add_eos());
    // `<end_of_turn>` is found by its text, as llama.cpp does, and ends generation.
    assert_eq!(tokenizer.eot_id(), Some(106));
    assert!(tokenizer.is_eog(1) && tokenizer.is_eog(106));
    assert_eq!(tokenizer.id_to_piece(236743), Some("\u{2581}"));
    assert_eq!(tokenizer.token_type(238), Some(TokenType::Byte));
    assert_eq!(tokenizer.id_to_piece(238), Some("<0x00>"));
    // A character outside the vocabulary falls back to its UTF-8 bytes' tokens, and decodes
    // back; skipping special tokens drops BOS and the turn markers.
    let text = "\u{10FFFD}";
    let ids = tokenizer.encode(text, false).unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert!(
        ids[1..]
            .iter()
            .all(|&id| tokenizer.token_type(id) == Some(TokenType::Byte))
    );
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), text);
    let ids = tokenizer
        .encode("<start_of_turn>user\nhi<end_of_turn>", true)
        .unwrap();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "user\nhi");
}

#[test]
fn gemma_tokenizer_matches_llama_cpp_code_on_random_texts_and_ids() {
    let Some(vocab) = gemma_vocab() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let plain = Tokenizer::from_vocab(vocab.clone()).expect("Gemma's tokenizer");
    let prefixed = Tokenizer::from_vocab(GgufVocab {
        add_space_prefix: Some(true),
        ..vocab
    })
    .expect("Gemma's tokenizer with a space prefix");
    let reference = read_json("gemma3-270m-spm-llama-cpp.json");
    let mut failures = Vec::new();
    let encodes = reference["encode_vectors"]
        .as_array()
        .expect("encode_vectors");
    assert_eq!(encodes.len(), 300);
    for vector in encodes {
        let text = vector["text"].as_str().expect("text");
        for (tokenizer, parse_special, key) in [
            (&plain, true, "ids_parse_special"),
            (&plain, false, "ids_no_parse_special"),
            (&prefixed, true, "ids_parse_special_space_prefix"),
            (&prefixed, false, "ids_no_parse_special_space_prefix"),
        ] {
            let want = ids(&vector[key]);
            let got = tokenizer.encode(text, parse_special).expect("encode");
            if got != want {
                failures.push(format!("{text:?} {key}: got {got:?}, want {want:?}"));
            }
        }
    }
    let decodes = reference["decode_vectors"]
        .as_array()
        .expect("decode_vectors");
    assert_eq!(decodes.len(), 200);
    for vector in decodes {
        let id_list = ids(&vector["ids"]);
        for (skip_special, key) in [(false, "text_render_special"), (true, "text_skip_special")] {
            let want = vector[key].as_str().expect("text");
            let got = plain.decode(&id_list, skip_special).expect("decode");
            if got != want {
                failures.push(format!("{id_list:?} {key}: got {got:?}, want {want:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatch(es) against llama.cpp's code:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
