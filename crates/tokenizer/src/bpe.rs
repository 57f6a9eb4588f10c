//! Checks on a byte-level BPE vocabulary: its merges, and the bytes it cannot spell.

use std::collections::{HashMap, HashSet};

use crate::{Result, TokenizerError};

/// Bytes of a byte-level BPE vocabulary without a single-byte token: byte `b` is written as the
/// character GPT-2's byte-to-unicode table maps it to.
pub(crate) fn missing_byte_tokens(pieces: &[String]) -> Vec<u8> {
    let known: HashSet<&str> = pieces.iter().map(String::as_str).collect();
    let mut shifted = 0u32;
    let mut missing = Vec::new();
    for byte in 0u8..=255 {
        let printable = matches!(byte, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            u32::from(byte)
        } else {
            shifted += 1;
            255 + shifted
        };
        let ch = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
        if !known.contains(ch.encode_utf8(&mut [0; 4]) as &str) {
            missing.push(byte);
        }
    }
    missing
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
