//! Any UTF-8 text: encoding with the real SmolLM2 tokenizer (special-token text as plain text)
//! and decoding gives the text back.
//!
//! Finding of the first run (now a regression test in `crates/cli/tests/tokenizer_reference.rs`):
//! SmolLM2's vocabulary has no token for 21 of the 256 bytes (0x04, 0x06, 0x13, 0x14, 0x16,
//! 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..=0xFF), and `encode` silently dropped characters
//! containing them. It now refuses such text; this target checks it does exactly then.
#![no_main]

use std::sync::LazyLock;

use kindle_gguf::GgufFile;
use kindle_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

static TOKENIZER: LazyLock<Tokenizer> = LazyLock::new(|| {
    let path = kindle_fuzz::model_path();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).expect("the real model's tokenizer")
});

/// Bytes without a byte-level token in the vocabulary (GPT-2's byte-to-character mapping).
static MISSING_BYTES: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut shifted = 0;
    (0..=255u8)
        .filter(|&b| {
            let c = if printable(u32::from(b)) {
                char::from(b)
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).expect("a character")
            };
            TOKENIZER.piece_to_id(&c.to_string()).is_none()
        })
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tokenizer = &*TOKENIZER;
    let unencodable = text.bytes().any(|b| MISSING_BYTES.contains(&b));
    let encoded = tokenizer.encode(text, false);
    assert_eq!(encoded.is_err(), unencodable, "{encoded:?}");
    let Ok(mut ids) = encoded else {
        return;
    };
    // SmolLM2 adds no BOS/EOS; strip them anyway if a model did.
    if tokenizer.add_bos() && !ids.is_empty() {
        ids.remove(0);
    }
    if tokenizer.add_eos() {
        ids.pop();
    }
    let decoded = tokenizer.decode(&ids, false).expect("decode");
    assert_eq!(decoded, text, "ids {ids:?}");
    // Parsing special-token text must never fail either.
    let special = tokenizer
        .encode(text, true)
        .expect("encode with special tokens");
    let _ = tokenizer
        .decode(&special, true)
        .expect("decode skipping special tokens");
});
