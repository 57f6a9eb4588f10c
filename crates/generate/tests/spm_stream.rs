//! The streaming detokeniser over a real SentencePiece tokenizer (kindle-tokenizer, byte
//! fallback): a character spread over `<0xXX>` tokens comes out once, whole, never as U+FFFD,
//! and the concatenated deltas equal the decode of all ids.

use kindle_generate::{StreamDecoder, TokenDecoder};
use kindle_tokenizer::{GgufVocab, Tokenizer, TokenizerError};
use proptest::prelude::*;

/// The tokenizer behind the generation loop's decoder trait (as the CLI's `Detokenizer`).
struct Detokenizer(Tokenizer);

impl TokenDecoder for Detokenizer {
    type Error = TokenizerError;

    fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.0.decode(ids, true)
    }
}

/// `<s>`, `</s>`, the 256 byte tokens (ids 2..258), then a few words.
fn tokenizer() -> Tokenizer {
    let mut tokens = vec!["<s>".to_string(), "</s>".to_string()];
    let mut token_types = vec![3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    token_types.extend([6; 256]);
    for word in ["▁", "▁price", "▁is", "!"] {
        tokens.push(word.into());
        token_types.push(1);
    }
    let scores = vec![0.0; tokens.len()];
    Tokenizer::from_vocab(GgufVocab {
        model: "llama".into(),
        tokens,
        token_types,
        scores,
        bos: Some(0),
        eos: Some(1),
        add_bos: true,
        ..GgufVocab::default()
    })
    .expect("the vocabulary builds")
}

fn byte(b: u8) -> u32 {
    2 + u32::from(b)
}

const PRICE: u32 = 259;
const IS: u32 = 260;
const BANG: u32 = 261;

#[test]
fn a_character_split_over_byte_tokens_is_emitted_once_complete() {
    let decoder = Detokenizer(tokenizer());
    // "€" is E2 82 AC: nothing until the last byte, then the whole character.
    let mut stream = StreamDecoder::with_context(&decoder, &[0, PRICE]).unwrap();
    let ids = [IS, byte(0xE2), byte(0x82), byte(0xAC), BANG];
    let deltas: Vec<String> = ids.iter().map(|&id| stream.step(id).unwrap()).collect();
    assert_eq!(deltas, [" is", "", "", "€", "!"]);
    assert_eq!(stream.flush().unwrap(), "");

    // Two four-byte characters back to back (🙂🙃), each held until complete.
    let mut stream = StreamDecoder::new(&decoder);
    let bytes = "🙂🙃".as_bytes();
    let deltas: Vec<String> = bytes
        .iter()
        .map(|&b| stream.step(byte(b)).unwrap())
        .collect();
    assert_eq!(deltas, ["", "", "", "🙂", "", "", "", "🙃"]);

    // A stream that ends mid-character flushes U+FFFD, once.
    let mut stream = StreamDecoder::new(&decoder);
    assert_eq!(stream.step(byte(0xE2)).unwrap(), "");
    assert_eq!(stream.flush().unwrap(), "\u{FFFD}");
}

proptest! {
    /// Any text, tokenized (mostly byte fallback here) and streamed a token at a time after a
    /// prompt, comes out as the decode of all ids, without U+FFFD in any delta.
    #[test]
    fn streamed_text_equals_the_whole_decode(text in any::<String>()) {
        let text = text.replace('\u{FFFD}', "?");
        let decoder = Detokenizer(tokenizer());
        let ids = decoder.0.encode(&text, false).unwrap();
        let mut stream = StreamDecoder::with_context(&decoder, &ids[..1]).unwrap();
        let mut out = String::new();
        for &id in &ids[1..] {
            let delta = stream.step(id).unwrap();
            prop_assert!(!delta.contains('\u{FFFD}'), "{:?}", delta);
            out.push_str(&delta);
        }
        out.push_str(&stream.flush().unwrap());
        // After BOS, the leading space of the text's first piece stays (llama.cpp's rule).
        prop_assert_eq!(out, decoder.0.decode(&ids, true).unwrap());
        prop_assert_eq!(decoder.0.decode(&ids[1..], true).unwrap(), text);
    }
}
