//! The incremental detokeniser: property tests on a fake byte-level decoder, plus a
//! SentencePiece-like decoder that strips the leading space of a sequence.

mod common;

use std::convert::Infallible;

use common::ByteVocab;
use kindle_generate::{StreamDecoder, TokenDecoder};
use proptest::prelude::*;

const REPLACEMENT: char = '\u{FFFD}';

fn stream_all(vocab: &ByteVocab, context: &[u32], ids: &[u32]) -> (Vec<String>, String) {
    let mut stream = StreamDecoder::with_context(vocab, context).unwrap();
    let deltas: Vec<String> = ids.iter().map(|&id| stream.step(id).unwrap()).collect();
    let rest = stream.flush().unwrap();
    (deltas, rest)
}

/// Byte strings as tokens (arbitrary bytes, so invalid UTF-8 too) and a sequence of them.
fn vocab_and_ids() -> impl Strategy<Value = (ByteVocab, Vec<u32>, Vec<u32>)> {
    prop::collection::vec(
        prop_oneof![
            prop::collection::vec(any::<u8>(), 1..4),
            // Pieces of real multi-byte characters, more likely to form valid text.
            "[aé€😀 ]{1,2}".prop_map(|s| s.into_bytes()),
            (0usize..4).prop_map(|i| "é€😀".as_bytes()[i..i + 1].to_vec()),
        ],
        1..24,
    )
    .prop_flat_map(|pieces| {
        let n = pieces.len() as u32;
        (
            Just(ByteVocab { pieces }),
            prop::collection::vec(0..n, 0..6),
            prop::collection::vec(0..n, 0..60),
        )
    })
}

/// A string without U+FFFD cut into byte tokens at random places (each token its own id).
fn split_text() -> impl Strategy<Value = (String, ByteVocab, Vec<u32>)> {
    (
        any::<String>().prop_map(|s| s.replace('\u{FFFD}', "?")),
        prop::collection::vec(1usize..5, 1..200),
    )
        .prop_map(|(text, cuts)| {
            let bytes = text.as_bytes();
            let mut pieces = Vec::new();
            let mut at = 0;
            for cut in cuts.iter().cycle() {
                if at >= bytes.len() {
                    break;
                }
                let end = (at + cut).min(bytes.len());
                pieces.push(bytes[at..end].to_vec());
                at = end;
            }
            let ids = (0..pieces.len() as u32).collect();
            (text, ByteVocab { pieces }, ids)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn deltas_join_to_the_full_decode((vocab, _, ids) in vocab_and_ids()) {
        let (deltas, rest) = stream_all(&vocab, &[], &ids);
        let full = vocab.decode(&ids).unwrap();
        prop_assert_eq!(deltas.concat() + &rest, full.clone());
        if !full.contains('\u{FFFD}') {
            prop_assert!(deltas.iter().all(|d| !d.contains(REPLACEMENT)), "{:?}", deltas);
            prop_assert_eq!(rest, "");
        }
    }

    #[test]
    fn deltas_after_a_context_join_to_the_rest_of_the_decode(
        (vocab, context, ids) in vocab_and_ids()
    ) {
        let (deltas, rest) = stream_all(&vocab, &context, &ids);
        let ctx_text = vocab.decode(&context).unwrap();
        let all: Vec<u32> = context.iter().chain(&ids).copied().collect();
        let full = vocab.decode(&all).unwrap();
        if ctx_text.ends_with('\u{FFFD}') {
            // An unusable context (it ends mid-character) is ignored.
            prop_assert_eq!(deltas.concat() + &rest, vocab.decode(&ids).unwrap());
        } else {
            prop_assert!(full.starts_with(&ctx_text));
            prop_assert_eq!(deltas.concat() + &rest, &full[ctx_text.len()..]);
        }
    }

    #[test]
    fn valid_text_split_anywhere_never_streams_replacement_chars(
        (text, vocab, ids) in split_text()
    ) {
        let (deltas, rest) = stream_all(&vocab, &[], &ids);
        prop_assert!(deltas.iter().all(|d| !d.contains(REPLACEMENT)), "{:?}", deltas);
        prop_assert_eq!(rest, "");
        prop_assert_eq!(deltas.concat(), text);
    }
}

/// SentencePiece-style: "▁" is a space, and the decode of a sequence drops its leading space.
struct SentencePiece(Vec<&'static str>);

impl TokenDecoder for SentencePiece {
    type Error = Infallible;

    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        let text: String = ids.iter().map(|&i| self.0[i as usize]).collect();
        let text = text.replace('▁', " ");
        Ok(text.strip_prefix(' ').unwrap_or(&text).to_string())
    }
}

#[test]
fn the_prefix_window_keeps_spaces_a_leading_strip_would_drop() {
    let sp = SentencePiece(vec!["▁Hello", "▁world", "!", "▁Say"]);
    let mut stream = StreamDecoder::new(&sp);
    let deltas: Vec<String> = [0, 1, 2].iter().map(|&i| stream.step(i).unwrap()).collect();
    assert_eq!(deltas, ["Hello", " world", "!"]);

    // After a prompt context, even the first word keeps its space.
    let mut stream = StreamDecoder::with_context(&sp, &[3]).unwrap();
    let deltas: Vec<String> = [0, 1].iter().map(|&i| stream.step(i).unwrap()).collect();
    assert_eq!(deltas, [" Hello", " world"]);
    assert_eq!(stream.flush().unwrap(), "");
}
