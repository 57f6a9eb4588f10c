//! Any UTF-8 text: encoding with the real SmolLM2 tokenizer (special-token text as plain text)
//! and decoding gives the text back.
#![no_main]

use std::sync::LazyLock;

use kindle_fuzz::gguf::GgufFile;
use kindle_fuzz::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

static TOKENIZER: LazyLock<Tokenizer> = LazyLock::new(|| {
    let path = kindle_fuzz::model_path();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).expect("the real model's tokenizer")
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tokenizer = &*TOKENIZER;
    let mut ids = tokenizer.encode(text, false).expect("encode");
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
    let special = tokenizer.encode(text, true).expect("encode with special tokens");
    let _ = tokenizer.decode(&special, true).expect("decode skipping special tokens");
});
