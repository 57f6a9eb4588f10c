//! The raw bytes of every token of a kindle vocabulary, as llguidance's token trie wants them.

use std::collections::HashMap;

use kindle_tokenizer::{TokenType, Tokenizer};

/// The byte llguidance puts before a special token's text, so that no grammar can produce it.
const SPECIAL: u8 = 0xff;

/// Each token's bytes, indexed by id: byte-level BPE pieces mapped back through GPT-2's
/// byte-to-character table, SentencePiece pieces with `▁` as a space and `<0xXX>` as its byte;
/// control, unknown, unused and undefined tokens marked special (0xFF then their text).
pub(crate) fn token_bytes(tokenizer: &Tokenizer) -> Vec<Vec<u8>> {
    let unicode_to_byte = byte_level_table();
    let spm = tokenizer.is_sentencepiece();
    (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let piece = tokenizer.id_to_piece(id).unwrap_or_default();
            let kind = tokenizer.token_type(id).unwrap_or(TokenType::Normal);
            match kind {
                TokenType::Control
                | TokenType::Unknown
                | TokenType::Unused
                | TokenType::Undefined => {
                    let mut bytes = vec![SPECIAL];
                    bytes.extend_from_slice(piece.as_bytes());
                    bytes
                }
                TokenType::Byte => byte_value(piece)
                    .map(|b| vec![b])
                    .unwrap_or_else(|| piece.as_bytes().to_vec()),
                TokenType::UserDefined => piece.as_bytes().to_vec(),
                TokenType::Normal if spm => piece.replace('\u{2581}', " ").into_bytes(),
                TokenType::Normal => piece
                    .chars()
                    .map(|c| unicode_to_byte.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| piece.as_bytes().to_vec()),
            }
        })
        .collect()
}

/// The inverse of GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
/// others (controls, space, 0x7F..=0xA0, 0xAD) for U+0100 onwards in byte order.
fn byte_level_table() -> HashMap<char, u8> {
    let mut table = HashMap::with_capacity(256);
    let mut next = 256u32;
    for byte in 0u8..=255 {
        let printable = matches!(byte, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            u32::from(byte)
        } else {
            next += 1;
            next - 1
        };
        if let Some(c) = char::from_u32(code) {
            table.insert(c, byte);
        }
    }
    table
}

/// The byte a SentencePiece `<0xXX>` piece stands for.
fn byte_value(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_inverts_gpt2() {
        let table = byte_level_table();
        assert_eq!(table.len(), 256);
        assert_eq!(table[&'\u{120}'], b' '); // Ġ
        assert_eq!(table[&'\u{10a}'], b'\n'); // Ċ
        assert_eq!(table[&'a'], b'a');
    }

    #[test]
    fn byte_pieces() {
        assert_eq!(byte_value("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_value("a"), None);
    }
}
