//! SentencePiece (`llama`) vocabularies from GGUF files written here: encodings worked out by
//! hand (following llama.cpp's `llm_tokenizer_spm_session`), round trips of arbitrary text and
//! bytes, decoding rules, and malformed vocabularies.

use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_tokenizer::{TokenType, Tokenizer, TokenizerError};
use proptest::prelude::*;

const SPACE: &str = "\u{2581}";

/// Ids of the tiny vocabulary's pieces (see [`tiny_pieces`]).
const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
const TOOL: u32 = 259;
const UNUSED: u32 = 260;
const MARK: u32 = 261; // "▁"
const A: u32 = 266;
const HE: u32 = 267;
const HELLO: u32 = 270;
const MARK_H: u32 = 271; // "▁h"
const MARK_HE: u32 = 272; // "▁he"
const AA: u32 = 273;
const MARK_A: u32 = 274; // "▁a"

/// The id of byte `b`'s fallback token `<0xXX>`.
fn byte(b: u8) -> u32 {
    3 + u32::from(b)
}

/// `(piece, token type, score)` by id: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, a
/// user-defined `<tool>`, an unused slot, then normal pieces whose scores make the merges
/// below interesting (a stale candidate, a tie).
fn tiny_pieces() -> Vec<(String, i32, f32)> {
    let mut pieces = vec![
        ("<unk>".to_string(), 2, 0.0),
        ("<s>".to_string(), 3, 0.0),
        ("</s>".to_string(), 3, 0.0),
    ];
    pieces.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 6, 0.0)));
    pieces.push(("<tool>".into(), 4, 0.0));
    pieces.push(("<unused0>".into(), 5, 0.0));
    for (text, score) in [
        (SPACE, -5.0),
        ("h", -10.0),
        ("e", -10.0),
        ("l", -10.0),
        ("o", -10.0),
        ("a", -10.0),
        ("he", -2.0),
        ("ll", -1.0),
        ("hell", -2.5),
        ("hello", -6.0),
        ("▁h", -4.0),
        ("▁he", -3.0),
        ("aa", -1.0),
        ("▁a", -20.0),
    ] {
        pieces.push((text.to_string(), 1, score));
    }
    pieces
}

/// The tiny vocabulary as GGUF metadata (no `add_space_prefix` key: llama.cpp's default,
/// true; no `add_bos_token`: true for SentencePiece), with `overrides` replacing or adding
/// keys.
fn tiny_writer_with(overrides: Vec<(&str, MetadataValue)>) -> GgufWriter {
    let pieces = tiny_pieces();
    let mut entries: Vec<(&str, MetadataValue)> = vec![
        ("tokenizer.ggml.model", "llama".into()),
        (
            "tokenizer.ggml.tokens",
            pieces
                .iter()
                .map(|p| p.0.clone())
                .collect::<Vec<_>>()
                .into(),
        ),
        (
            "tokenizer.ggml.token_type",
            pieces.iter().map(|p| p.1).collect::<Vec<_>>().into(),
        ),
        (
            "tokenizer.ggml.scores",
            pieces.iter().map(|p| p.2).collect::<Vec<_>>().into(),
        ),
    ];
    for (key, value) in overrides {
        entries.retain(|(k, _)| *k != key);
        entries.push((key, value));
    }
    entries
        .into_iter()
        .fold(GgufWriter::new(), |writer, (key, value)| {
            writer.metadata(key, value)
        })
}

fn tiny_writer() -> GgufWriter {
    tiny_writer_with(Vec::new())
}

fn build(writer: GgufWriter) -> Result<Tokenizer, TokenizerError> {
    let file = GgufFile::from_bytes(writer.to_bytes()).expect("a valid GGUF file");
    Tokenizer::from_gguf(&file)
}

fn tiny() -> Tokenizer {
    build(tiny_writer()).expect("the tiny vocabulary builds")
}

#[track_caller]
fn check(tok: &Tokenizer, input: &str, parse_special: bool, expected: &[u32]) {
    let got = tok.encode(input, parse_special).expect("encode");
    assert_eq!(got, expected, "{input:?} (parse_special = {parse_special})");
}

#[test]
fn defaults_follow_llama_cpp() {
    let tok = tiny();
    assert!(tok.is_sentencepiece());
    assert!(tok.add_space_prefix());
    assert!(tok.add_bos() && !tok.add_eos());
    // No id keys: SentencePiece's defaults BOS 1, EOS 2, UNK 0.
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.unk_id()),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!(tok.eog_ids(), [EOS]);
    assert_eq!(tok.id_to_piece(MARK_HE), Some("▁he"));
    assert_eq!(tok.piece_to_id("▁he"), Some(MARK_HE));
    assert_eq!(tok.token_type(TOOL), Some(TokenType::UserDefined));
    assert!(tok.inner().is_none());
}

/// Each expectation worked out by hand from llama.cpp's algorithm.
#[test]
fn hand_worked_encodings() {
    let tok = tiny();
    // "▁hello": "ll" (-1) merges, then "he" (-2), which queues "▁he" (-3) and "hell" (-2.5);
    // "hell" wins, so the queued "▁he" and "▁h" (-4) are stale when popped; "hello" (-6) last.
    check(&tok, "hello", false, &[BOS, MARK, HELLO]);
    // A tie ("aa" at 1 and at 2, both -1) goes to the leftmost pair; "▁a" (-20) is then stale.
    check(&tok, "aaa", false, &[BOS, MARK, AA, A]);
    // "é" is not a piece: its UTF-8 bytes' tokens.
    check(&tok, "hé", false, &[BOS, MARK_H, byte(0xC3), byte(0xA9)]);
    // Spaces become "▁" ("▁b" is not a piece: 'b' falls back to its byte).
    check(&tok, "a b", false, &[BOS, MARK_A, MARK, byte(b'b')]);
    // A user-defined token is split out either way, and the text after it gets a space
    // prefix ("▁he" merges: "he" -2 first, then "▁he" -3).
    check(&tok, "<tool>he", false, &[BOS, TOOL, MARK_HE]);
    check(&tok, "<tool>he", true, &[BOS, TOOL, MARK_HE]);
    // A control token is split out only with parse_special; otherwise it is text.
    check(&tok, "<s>he", true, &[BOS, BOS, MARK_HE]);
    check(
        &tok,
        "<s>he",
        false,
        &[BOS, MARK, byte(b'<'), byte(b's'), byte(b'>'), HE],
    );
    check(&tok, "", true, &[BOS]);
}

/// Segments (a chat prompt's template text and message contents) are tokenized as one text:
/// merges cross their boundaries and the space prefix comes once, at the start or after a
/// split-out token; each segment keeps its own special-token parsing.
#[test]
fn segments_are_tokenized_as_one_text() {
    let tok = tiny();
    let segments = |parts: &[(&str, bool)]| tok.encode_segments(parts).unwrap();
    // "he" + "llo" merge into "hello" across the boundary; no BOS.
    assert_eq!(segments(&[("he", true), ("llo", false)]), [MARK, HELLO]);
    assert_eq!(
        segments(&[("he", true), ("llo", false)]),
        tok.encode("hello", false).unwrap()[1..]
    );
    // "<s>" is parsed in a template segment, text in a content segment.
    assert_eq!(segments(&[("<s>", true), ("he", false)]), [BOS, MARK_HE]);
    assert_eq!(
        segments(&[("he", false), ("<s>", false)]),
        [MARK_HE, byte(b'<'), byte(b's'), byte(b'>')]
    );
    // A user-defined token splits either way; the text after it gets the prefix again.
    assert_eq!(
        segments(&[("a", true), ("<tool>", false), ("a", true)]),
        [MARK_A, TOOL, MARK_A]
    );
    assert_eq!(segments(&[]), Vec::<u32>::new());
    assert_eq!(segments(&[("", true), ("", false)]), Vec::<u32>::new());
}

#[test]
fn decoding_rules() {
    let tok = tiny();
    // The first token's leading space is dropped (add_space_prefix), only the first's.
    assert_eq!(
        tok.decode(&[MARK, HELLO, MARK_HE], false).unwrap(),
        "hello he"
    );
    // As llama.cpp's detokenize: BOS takes the strip, so the space after it stays.
    assert_eq!(tok.decode(&[BOS, MARK, HELLO], true).unwrap(), " hello");
    assert_eq!(tok.decode(&[BOS, MARK, HELLO], false).unwrap(), "<s> hello");
    // Control and unknown tokens render only on request; user-defined always; unused never.
    assert_eq!(tok.decode(&[UNK, EOS], true).unwrap(), "");
    assert_eq!(tok.decode(&[UNK, EOS], false).unwrap(), "<unk></s>");
    assert_eq!(tok.decode(&[TOOL], true).unwrap(), "<tool>");
    assert_eq!(tok.decode(&[UNUSED, A], false).unwrap(), "a");
    // Byte tokens are bytes; an incomplete character is U+FFFD until its last byte.
    assert_eq!(
        tok.decode(&[byte(0xE2), byte(0x82)], false).unwrap(),
        "\u{FFFD}"
    );
    assert_eq!(
        tok.decode(&[byte(0xE2), byte(0x82), byte(0xAC)], false)
            .unwrap(),
        "€"
    );
    assert!(matches!(
        tok.decode(&[4000], false),
        Err(TokenizerError::TokenIdOutOfRange { id: 4000, .. })
    ));
}

#[test]
fn add_space_prefix_false_adds_and_strips_nothing() {
    let tok = build(tiny_writer_with(vec![(
        "tokenizer.ggml.add_space_prefix",
        false.into(),
    )]))
    .unwrap();
    assert!(!tok.add_space_prefix());
    check(&tok, "hello", false, &[BOS, HELLO]);
    check(&tok, "<tool>he", false, &[BOS, TOOL, HE]);
    assert_eq!(tok.decode(&[MARK, HELLO], false).unwrap(), " hello");
}

proptest! {
    /// Any text (without the special pieces' spellings) encodes and decodes back to itself.
    #[test]
    fn any_text_round_trips(text in any::<String>()) {
        prop_assume!(!text.contains("<tool>"));
        let tok = tiny();
        for parse_special in [false, true] {
            prop_assume!(!parse_special || !["<s>", "</s>", "<unk>"].iter().any(|s| text.contains(s)));
            let ids = tok.encode(&text, parse_special).unwrap();
            prop_assert_eq!(ids[0], BOS);
            prop_assert_eq!(tok.decode(&ids[1..], false).unwrap(), text.clone());
        }
    }

    /// Any byte sequence spelled with byte tokens decodes to those bytes (invalid UTF-8 as
    /// U+FFFD, as `String::from_utf8_lossy` does). After "a": a first token's leading space,
    /// even a byte token's, is dropped.
    #[test]
    fn any_bytes_decode_from_byte_tokens(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let tok = tiny();
        let mut ids = vec![A];
        ids.extend(bytes.iter().map(|&b| byte(b)));
        prop_assert_eq!(
            tok.decode(&ids, false).unwrap(),
            format!("a{}", String::from_utf8_lossy(&bytes))
        );
        prop_assert_eq!(tok.decode(&[byte(b' '), A], false).unwrap(), "a");
    }
}

#[test]
fn a_tokenizer_model_kindle_does_not_know_is_an_error_naming_the_key() {
    let err = build(tiny_writer_with(vec![(
        "tokenizer.ggml.model",
        "bert".into(),
    )]))
    .unwrap_err();
    assert!(matches!(&err, TokenizerError::UnsupportedModel(m) if m == "bert"));
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");
}

#[test]
fn missing_or_malformed_scores_are_errors_naming_the_key() {
    let pieces = tiny_pieces();
    let without_scores = GgufWriter::new()
        .metadata("tokenizer.ggml.model", "llama")
        .metadata(
            "tokenizer.ggml.tokens",
            pieces.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        )
        .metadata(
            "tokenizer.ggml.token_type",
            pieces.iter().map(|p| p.1).collect::<Vec<_>>(),
        );
    let err = build(without_scores).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::MissingKey(key) if key == "tokenizer.ggml.scores"),
        "{err}"
    );

    let short = tiny_writer_with(vec![("tokenizer.ggml.scores", vec![0.5f32; 10].into())]);
    let err = build(short).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.scores",
                len: 10,
                tokens: 275
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");

    let strings = tiny_writer_with(vec![("tokenizer.ggml.scores", vec!["x"; 275].into())]);
    let err = build(strings).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::MalformedKey { key, .. } if key == "tokenizer.ggml.scores"),
        "{err}"
    );

    let nan = tiny_writer_with(vec![("tokenizer.ggml.scores", vec![f32::NAN; 275].into())]);
    let err = build(nan).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");
}

#[test]
fn mismatched_token_types_are_an_error_naming_the_key() {
    let err = build(tiny_writer_with(vec![(
        "tokenizer.ggml.token_type",
        vec![1i32; 3].into(),
    )]))
    .unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::TokenTypeCountMismatch {
                tokens: 275,
                types: 3
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("tokenizer.ggml.token_type"),
        "{err}"
    );
}

#[test]
fn a_missing_byte_token_is_an_error_naming_the_byte_and_key() {
    let mut pieces = tiny_pieces();
    // No `<0x80>` (and no one-character fallback exists for a byte above 0x7F).
    pieces[byte(0x80) as usize].0 = "<not a byte>".into();
    pieces[byte(0x80) as usize].1 = 1;
    let writer = tiny_writer_with(vec![
        (
            "tokenizer.ggml.tokens",
            pieces
                .iter()
                .map(|p| p.0.clone())
                .collect::<Vec<_>>()
                .into(),
        ),
        (
            "tokenizer.ggml.token_type",
            pieces.iter().map(|p| p.1).collect::<Vec<_>>().into(),
        ),
    ]);
    let err = build(writer).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingByteToken(0x80)),
        "{err}"
    );
    assert!(err.to_string().contains("<0x80>"), "{err}");
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");

    // A byte-typed token whose text is not `<0xXX>`.
    let mut types: Vec<i32> = tiny_pieces().iter().map(|p| p.1).collect();
    types[MARK as usize] = 6;
    let err = build(tiny_writer_with(vec![(
        "tokenizer.ggml.token_type",
        types.into(),
    )]))
    .unwrap_err();
    assert!(
        matches!(&err, TokenizerError::MalformedKey { key, .. } if key == "tokenizer.ggml.tokens"),
        "{err}"
    );
    // Nothing here panics on a wrong value type either.
    let err = build(tiny_writer_with(vec![(
        "tokenizer.ggml.add_space_prefix",
        MetadataValue::U8(1),
    )]))
    .unwrap_err();
    assert!(
        err.to_string().contains("tokenizer.ggml.add_space_prefix"),
        "{err}"
    );
}
