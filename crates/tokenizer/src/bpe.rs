//! Checks on a byte-level BPE vocabulary: its merges, and the bytes it cannot spell.

use std::collections::{HashMap, HashSet};

use crate::{Result, TokenizerError};

/// Bytes of a byte-level BPE vocabulary without a single-byte token: byte `b` is written as the
/// character GPT-2's byte-to-unicode table maps it to.
pub(crate) fn missing_byte_tokens(pieces: &[String]) -> Vec<u8> {
    let known: HashSet<&str> = pieces.iter().map(String::as_str).collect();
    (0u8..=255)
        .filter(|&byte| !known.contains(byte_char(byte).encode_utf8(&mut [0; 4]) as &str))
        .collect()
}

/// GPT-2's `bytes_to_unicode`: printable ASCII and Latin-1 bytes stand for themselves, the
/// other 68 bytes for U+0100.. in byte order.
pub(crate) fn byte_char(byte: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(byte) {
        return char::from(byte);
    }
    let shifted = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(0x100 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// [`byte_char`] read back: the byte a byte-level character spells, if it spells one.
pub(crate) fn char_byte(c: char) -> Option<u8> {
    (0u8..=255).find(|&b| byte_char(b) == c)
}

/// Splits `"left right"` merges and checks that both sides and the result are tokens.
pub(crate) fn parse_merges(
    merges: &[String],
    token_to_id: &HashMap<String, u32>,
) -> Result<Vec<(String, String)>> {
    let mut seen = HashSet::with_capacity(merges.len());
    let mut out = Vec::with_capacity(merges.len());
    for (index, merge) in merges.iter().enumerate() {
        // As llama.cpp: split at the first space that is not the first character.
        let split = merge
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c == ' ')
            .map(|(i, _)| i)
            .filter(|&i| i + 1 < merge.len());
        let Some(split) = split else {
            return Err(TokenizerError::MalformedMerge {
                index,
                merge: merge.clone(),
            });
        };
        let (left, right) = (&merge[..split], &merge[split + 1..]);
        let joined = format!("{left}{right}");
        for token in [left, right, joined.as_str()] {
            if !token_to_id.contains_key(token) {
                return Err(TokenizerError::UnknownMergeToken {
                    index,
                    merge: merge.clone(),
                    token: token.to_owned(),
                });
            }
        }
        // llama.cpp keeps the first rank of a repeated merge.
        if seen.insert((left, right)) {
            out.push((left.to_owned(), right.to_owned()));
        }
    }
    Ok(out)
}
