//! A toy byte-level vocabulary (one token per byte, "yes", "no" and an end token) and helpers
//! that drive a constraint over it (shared by `tests/toy.rs` and `tests/gbnf.rs`).

#![allow(dead_code)]

use kindle_sampling::LogitsConstraint;
use kindle_tokenizer::{GgufVocab, Tokenizer};

/// The end-of-generation token of [`toy`].
pub const END: u32 = 258;

/// GPT-2's byte-to-character table: the piece of each single-byte token.
fn byte_piece(byte: u8) -> String {
    let mut next = 256u32;
    for b in 0u8..=255 {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            u32::from(b)
        } else {
            next += 1;
            next - 1
        };
        if b == byte {
            return char::from_u32(code).unwrap().to_string();
        }
    }
    unreachable!()
}

/// Ids 0..256: the bytes; 256: "yes"; 257: "no"; 258: `<|end|>` (end of generation).
pub fn toy() -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(byte_piece).collect();
    tokens.extend(["yes", "no", "<|end|>"].map(String::from));
    let mut token_types = vec![1; 258];
    token_types.push(3);
    Tokenizer::from_vocab(GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens,
        merges: vec![],
        token_types,
        eos: Some(END),
        ..GgufVocab::default()
    })
    .unwrap()
}

/// The tokens `constraint` allows next, and the one it forces if only one is allowed.
pub fn allowed(constraint: &mut dyn LogitsConstraint) -> (Vec<u32>, Option<u32>) {
    let mut logits = vec![0.0f32; 259];
    let forced = constraint.mask(&mut logits).unwrap();
    let ids = (0..259u32)
        .filter(|&i| logits[i as usize] > f32::NEG_INFINITY)
        .collect();
    (ids, forced)
}

/// Drive `constraint` with `text` (one byte token each), panicking at a byte it disallows.
pub fn feed(constraint: &mut dyn LogitsConstraint, text: &str) {
    for &b in text.as_bytes() {
        let (ids, _) = allowed(constraint);
        assert!(ids.contains(&u32::from(b)), "{:?} not allowed", b as char);
        constraint.advance(u32::from(b)).unwrap();
    }
}

/// Whether `constraint` allows `text` byte by byte and then the end token: the grammar
/// accepts `text` in full (not merely a prefix of it).
pub fn accepts(constraint: &mut dyn LogitsConstraint, text: &str) -> bool {
    for &b in text.as_bytes() {
        let (ids, _) = allowed(constraint);
        if !ids.contains(&u32::from(b)) || constraint.advance(u32::from(b)).is_err() {
            return false;
        }
    }
    constraint.is_complete() || allowed(constraint).0.contains(&END)
}
