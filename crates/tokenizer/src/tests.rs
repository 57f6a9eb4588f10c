//! Tests of [`Tokenizer`] built from a vocabulary, and the fixtures the module tests share.

use crate::{GgufVocab, TokenType, Tokenizer, TokenizerError};

/// The 256 byte-level symbols in GPT-2 order, as a vocabulary of 256 tokens.
pub(crate) fn byte_alphabet() -> Vec<String> {
    let mut bytes: Vec<u32> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .map(u32::from)
        .collect();
    let mut chars: Vec<u32> = bytes.clone();
    let mut extra = 0;
    for b in 0..256u32 {
        if !bytes.contains(&b) {
            bytes.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    let mut table: Vec<(u32, char)> = bytes
        .into_iter()
        .zip(chars.into_iter().map(|c| char::from_u32(c).unwrap()))
        .collect();
    table.sort_unstable();
    table.into_iter().map(|(_, c)| c.to_string()).collect()
}

/// Byte alphabet (ids 0..256) + merges for "hello" / " world" + special tokens.
pub(crate) fn tiny_vocab() -> GgufVocab {
    let mut tokens = byte_alphabet();
    let mut merges = Vec::new();
    for (l, r) in [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
        ("o", "r"),
        ("Ġw", "or"),
        ("l", "d"),
        ("Ġwor", "ld"),
    ] {
        tokens.push(format!("{l}{r}"));
        merges.push(format!("{l} {r}"));
    }
    let mut token_types = vec![1; tokens.len()];
    for (text, ty) in [("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool>", 4)] {
        tokens.push(text.to_owned());
        token_types.push(ty);
    }
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        merges,
        token_types,
        bos: Some(265),
        eos: Some(266),
        ..GgufVocab::default()
    }
}

pub(crate) fn id(tok: &Tokenizer, piece: &str) -> u32 {
    tok.piece_to_id(piece).unwrap()
}

#[test]
fn merges_are_applied() {
    let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
    let ids = tok.encode("hello world", false).unwrap();
    assert_eq!(ids, [id(&tok, "hello"), id(&tok, "Ġworld")]);
    // "hel" has no full merge: "he" + "l".
    assert_eq!(
        tok.encode("hel", false).unwrap(),
        [id(&tok, "he"), id(&tok, "l")]
    );
    // smollm splits digits individually.
    assert_eq!(
        tok.encode("42", false).unwrap(),
        [id(&tok, "4"), id(&tok, "2")]
    );
}

#[test]
fn parse_special_on_and_off() {
    let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
    let text = "<|im_start|>hello<|im_end|>";
    let on = tok.encode(text, true).unwrap();
    assert_eq!(on, [265, id(&tok, "hello"), 266]);
    let off = tok.encode(text, false).unwrap();
    assert!(!off.contains(&265) && !off.contains(&266));
    assert_eq!(tok.decode(&off, false).unwrap(), text);
    // User-defined tokens are split out either way.
    assert_eq!(tok.encode("<tool>", false).unwrap(), [267]);
    assert_eq!(tok.encode("<tool>", true).unwrap(), [267]);
    // No BOS/EOS unless asked for.
    assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());
    let mut vocab = tiny_vocab();
    vocab.add_bos = true;
    let tok = Tokenizer::from_vocab(vocab).unwrap();
    assert_eq!(tok.encode("", true).unwrap(), [265]);
}

#[test]
fn decode_round_trip_and_skip_special() {
    let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
    for text in ["hello world", "  héllo\n\twörld 123 — ✓", "日本語", ""] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
    let ids = tok.encode("<|im_start|>hello<|im_end|>", true).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "hello");
    assert_eq!(
        tok.decode(&ids, false).unwrap(),
        "<|im_start|>hello<|im_end|>"
    );
    assert!(matches!(
        tok.decode(&[9999], false),
        Err(TokenizerError::TokenIdOutOfRange { id: 9999, .. })
    ));
}

#[test]
fn eog_and_accessors() {
    let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
    assert_eq!(tok.eog_ids(), [266]);
    assert_eq!(tok.eot_id(), Some(266));
    assert_eq!(tok.bos_id(), Some(265));
    assert_eq!(tok.vocab_size(), 268);
    assert_eq!(tok.id_to_piece(32), Some("Ġ"));
    assert_eq!(tok.id_to_piece(65), Some("A"));
    assert_eq!(tok.token_type(267), Some(TokenType::UserDefined));
    assert!(!tok.add_bos());
}

#[test]
fn unknown_pre_tokenizer_is_an_error() {
    let mut vocab = tiny_vocab();
    vocab.pre = Some("klingon".into());
    let err = Tokenizer::from_vocab(vocab).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnknownPreTokenizer(n) if n == "klingon"));
    assert!(err.to_string().contains("klingon"));
}

#[test]
fn unsupported_model_is_an_error() {
    let mut vocab = tiny_vocab();
    vocab.model = "t5-unigram".into();
    let err = Tokenizer::from_vocab(vocab).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnsupportedModel(m) if m == "t5-unigram"));
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");
}

#[test]
fn special_id_out_of_range_is_an_error() {
    let mut vocab = tiny_vocab();
    vocab.eos = Some(5000);
    let err = Tokenizer::from_vocab(vocab).unwrap_err();
    assert!(matches!(
        err,
        TokenizerError::SpecialIdOutOfRange {
            which: "eos",
            id: 5000,
            vocab_size: 268
        }
    ));
}

#[test]
fn vocabulary_errors() {
    let mut vocab = tiny_vocab();
    vocab.token_types.pop();
    assert!(matches!(
        Tokenizer::from_vocab(vocab),
        Err(TokenizerError::TokenTypeCountMismatch {
            tokens: 268,
            types: 267
        })
    ));
    let mut vocab = tiny_vocab();
    vocab.merges.push("he zz".into());
    assert!(matches!(
        Tokenizer::from_vocab(vocab),
        Err(TokenizerError::UnknownMergeToken { token, .. }) if token == "zz"
    ));
    let mut vocab = tiny_vocab();
    vocab.merges.push("hello".into());
    assert!(matches!(
        Tokenizer::from_vocab(vocab),
        Err(TokenizerError::MalformedMerge { index: 9, .. })
    ));
    let mut vocab = tiny_vocab();
    vocab.bos = None;
    vocab.add_bos = true;
    assert!(matches!(
        Tokenizer::from_vocab(vocab),
        Err(TokenizerError::MissingSpecialToken("bos"))
    ));
}

#[test]
fn inner_supports_streaming_decode() {
    let tok = Tokenizer::from_vocab(tiny_vocab()).unwrap();
    let text = "héllo<|im_end|> world";
    let ids = tok.encode(text, true).unwrap();
    let mut stream = tok.inner().unwrap().decode_stream(false);
    let mut out = String::new();
    for &id in &ids {
        if let Some(chunk) = stream.step(id).unwrap() {
            out.push_str(&chunk);
        }
    }
    assert_eq!(out, text);
}

/// GPT-2's byte-level alphabet read back: printable bytes are themselves, the others the
/// characters from U+0100 in byte order (`Ġ` a space, `Ċ` a newline), every byte once.
#[test]
fn byte_level_pieces_give_their_bytes() {
    assert_eq!(crate::bpe::char_byte('a'), Some(b'a'));
    assert_eq!(crate::bpe::char_byte('Ġ'), Some(b' '));
    assert_eq!(crate::bpe::char_byte('Ċ'), Some(b'\n'));
    assert_eq!(crate::bpe::char_byte('\u{0100}'), Some(0));
    assert_eq!(crate::bpe::char_byte('ð'), Some(0xF0));
    assert_eq!(crate::bpe::char_byte('\u{0143}'), Some(0xAD));
    assert_eq!(crate::bpe::char_byte('\u{0144}'), None);
    assert_eq!(crate::bpe::char_byte(' '), None);
    let mut seen = [false; 256];
    for c in ('\u{21}'..='\u{FF}').chain('\u{100}'..='\u{143}') {
        if let Some(b) = crate::bpe::char_byte(c) {
            assert!(!seen[b as usize], "byte {b} twice");
            seen[b as usize] = true;
        }
    }
    assert!(seen.iter().all(|&s| s), "every byte spelled");
    // Half of 🐱 (F0 9F 90 B1) as byte-level pieces.
    assert_eq!(super::byte_level_piece("ðŁ"), Some(vec![0xF0, 0x9F]));
    assert_eq!(crate::spm::byte_value("<0xF0>"), Some(0xF0));
    assert_eq!(crate::spm::byte_value("<0xF>"), None);
}
