//! Any bytes as a SentencePiece tokenizer.model: kindle-hf's protobuf reader returns the
//! pieces or an error, never panics, and allocates no more pieces than the input can hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(pieces) = kindle_hf::read_tokenizer_model(data) {
        // Each piece is a field key and a length at least.
        assert!(pieces.len() * 2 <= data.len());
        for (_, _, ty) in &pieces {
            assert!((1..=6).contains(ty));
        }
    }
});
