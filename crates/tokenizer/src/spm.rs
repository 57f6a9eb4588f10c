//! SentencePiece (`tokenizer.ggml.model == "llama"`) vocabularies, tokenized and detokenized
//! as llama.cpp does (`llm_tokenizer_spm_session`, `tokenizer_st_partition`,
//! `token_to_piece` and `detokenize` in `src/llama-vocab.cpp`).
//!
//! Written here rather than taken from the `tokenizers` crate: its `Unigram` model segments by
//! Viterbi over piece log-probabilities, and its `BPE` model needs a ranked merge table and
//! turns characters missing from the vocabulary into byte tokens before merging, whereas
//! llama.cpp merges any adjacent pair whose concatenation is a token, highest score first, and
//! falls back to `<0xXX>` tokens only for what is left unmerged. Both differ on real
//! vocabularies; this module is llama.cpp's algorithm, step for step.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::error::malformed;
use crate::piece_index::PieceIndex;
use crate::vocab::{KEY_SCORES, KEY_TOKENS};
use crate::{Result, TokenType, TokenizerError};
use kindle_gguf::StringArray;

/// SentencePiece's space marker (U+2581), which stands for a space inside pieces.
const SPACE_MARKER: &str = "\u{2581}";

/// A SentencePiece vocabulary ready to tokenize.
#[derive(Debug)]
pub(crate) struct Spm {
    /// Piece texts by id (an empty piece is spelled `[EMPTY_<id>]`, as llama.cpp does),
    /// shared with the [`Tokenizer`](crate::Tokenizer) that holds this model.
    pieces: Arc<StringArray>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    /// Piece text to id; later duplicates win, as in llama.cpp.
    token_to_id: PieceIndex,
    /// The token of every byte (`<0xXX>`, else the one-character piece).
    byte_tokens: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first: split out of the text
    /// before the rest is tokenized.
    specials: Vec<u32>,
    /// `tokenizer.ggml.add_space_prefix`: a space is put before text that starts the input
    /// or follows a special token, and detokenizing drops the first token's leading space.
    add_space_prefix: bool,
}

/// A part of the text: plain text still to tokenize, or a special token split out of it.
#[derive(Clone, Copy, Debug)]
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// A SentencePiece vocabulary's pieces as [`Spm::new`] takes them: an empty piece renamed
/// `[EMPTY_<id>]` (as llama.cpp does), and the index from text to id.
pub(crate) fn index_pieces(texts: Vec<String>) -> (Arc<StringArray>, PieceIndex) {
    let mut pieces = StringArray::with_capacity(texts.len());
    for (id, text) in texts.into_iter().enumerate() {
        if text.is_empty() {
            pieces.push(&format!("[EMPTY_{id}]"));
        } else {
            pieces.push(&text);
        }
    }
    pieces.shrink_to_fit();
    let index = PieceIndex::new(&pieces);
    (Arc::new(pieces), index)
}

/// The length of piece `id`'s text.
fn piece_len(pieces: &StringArray, id: u32) -> usize {
    pieces.get(id as usize).map_or(0, str::len)
}

impl Spm {
    /// Checks the vocabulary and builds the lookup tables. `pieces` (with their index) come
    /// from [`index_pieces`]; they and `types` have one entry per token (checked by the
    /// caller); `scores` is checked here.
    pub(crate) fn new(
        pieces: Arc<StringArray>,
        token_to_id: PieceIndex,
        scores: Vec<f32>,
        types: Vec<TokenType>,
        add_space_prefix: bool,
    ) -> Result<Self> {
        let n = pieces.len();
        if scores.is_empty() {
            return Err(TokenizerError::MissingKey(KEY_SCORES.into()));
        }
        if scores.len() != n {
            return Err(TokenizerError::LengthMismatch {
                key: KEY_SCORES,
                len: scores.len(),
                tokens: n,
            });
        }
        if let Some(id) = scores.iter().position(|s| s.is_nan()) {
            return Err(malformed(
                KEY_SCORES,
                format!("the score of token {id} is NaN"),
            ));
        }
        let mut byte_tokens = Vec::with_capacity(256);
        for byte in 0..=255u8 {
            // llama.cpp looks up the one-byte C string: never for NUL, and only ASCII is a `str`.
            let single = (1..0x80)
                .contains(&byte)
                .then(|| char::from(byte).to_string());
            let id = token_to_id
                .get(&pieces, &format!("<0x{byte:02X}>"))
                .or_else(|| single.and_then(|s| token_to_id.get(&pieces, &s)))
                .ok_or(TokenizerError::MissingByteToken(byte))?;
            byte_tokens.push(id);
        }
        for (id, (piece, ty)) in pieces.iter().zip(&types).enumerate() {
            if *ty == TokenType::Byte && byte_value(piece).is_none() {
                return Err(malformed(
                    KEY_TOKENS,
                    format!("token {id} has the byte type but its text {piece:?} is not <0xXX>"),
                ));
            }
        }
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                matches!(
                    types[id as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                )
            })
            .collect();
        specials.sort_by_key(|&id| std::cmp::Reverse(piece_len(&pieces, id)));
        Ok(Spm {
            pieces,
            scores,
            types,
            token_to_id,
            byte_tokens,
            specials,
            add_space_prefix,
        })
    }

    /// The text of piece `id` (empty past the vocabulary).
    fn piece(&self, id: u32) -> &str {
        self.pieces.get(id as usize).unwrap_or_default()
    }

    /// The id of the piece spelled `piece`.
    pub(crate) fn piece_to_id(&self, piece: &str) -> Option<u32> {
        self.token_to_id.get(&self.pieces, piece)
    }

    /// Whether a space is put before the text (`tokenizer.ggml.add_space_prefix`).
    pub(crate) fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// llama.cpp's `tokenize` for SPM vocabularies (no BOS or EOS) on a text made of
    /// `segments`, appended to `out`. Each segment is split with its own `parse_special`
    /// (control and unknown tokens split out only with it, user-defined tokens always), and the
    /// segments are tokenized as one text: text on both sides of a segment boundary is one
    /// fragment (merges cross the boundary, and only the start of the text or text after a
    /// split-out token gets the space prefix).
    pub(crate) fn encode_segments(&self, segments: &[(&str, bool)], out: &mut Vec<u32>) {
        let mut pending = String::new();
        for &(text, parse_special) in segments {
            for fragment in self.partition(text, parse_special) {
                match fragment {
                    Fragment::Text(raw) => pending.push_str(raw),
                    Fragment::Token(id) => {
                        self.flush_text(&mut pending, out);
                        out.push(id);
                    }
                }
            }
        }
        self.flush_text(&mut pending, out);
    }

    /// Tokenizes the text fragment in `pending` (if any) and empties it. A fragment starts the
    /// text or follows a split-out token, so it gets the space prefix when the vocabulary asks
    /// for one (llama.cpp's `is_prev_special` is always true where it is read).
    fn flush_text(&self, pending: &mut String, out: &mut Vec<u32>) {
        if pending.is_empty() {
            return;
        }
        let mut text = String::with_capacity(pending.len() + 1);
        if self.add_space_prefix {
            text.push(' ');
        }
        text.push_str(pending);
        self.tokenize_fragment(&text.replace(' ', SPACE_MARKER), out);
        pending.clear();
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest first, every
    /// non-overlapping occurrence (left to right) in every remaining text fragment is split out.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        for &id in &self.specials {
            if !parse_special && self.types[id as usize] != TokenType::UserDefined {
                continue;
            }
            let piece = self.piece(id);
            if !fragments
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(piece)))
            {
                continue;
            }
            let mut split = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(raw) = fragment else {
                    split.push(fragment);
                    continue;
                };
                let mut start = 0;
                for (at, matched) in raw.match_indices(piece) {
                    if at > start {
                        split.push(Fragment::Text(&raw[start..at]));
                    }
                    split.push(Fragment::Token(id));
                    start = at + matched.len();
                }
                if start < raw.len() {
                    split.push(Fragment::Text(&raw[start..]));
                }
            }
            fragments = split;
        }
        fragments
    }

    /// `llm_tokenizer_spm_session::tokenize`: start from the characters, merge the adjacent
    /// pair whose concatenation is the highest-scoring token (leftmost on ties) until no pair
    /// is a token, then emit each symbol's token or, for a character not in the vocabulary,
    /// its bytes' tokens.
    fn tokenize_fragment(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, ch)) in text.char_indices().enumerate() {
            let len = ch.len_utf8();
            symbols.push(Symbol {
                start,
                len,
                prev: i.checked_sub(1),
                next: (start + len < text.len()).then_some(i + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        for right in 1..symbols.len() {
            self.push_bigram(text, &symbols, Some(right - 1), Some(right), &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
            // One side was merged into something else since this pair was queued.
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.len {
                continue;
            }
            symbols[bigram.left].len += right.len;
            symbols[bigram.right].len = 0;
            symbols[bigram.left].next = right.next;
            if let Some(next) = right.next {
                symbols[next].prev = Some(bigram.left);
            }
            self.push_bigram(text, &symbols, left.prev, Some(bigram.left), &mut queue);
            self.push_bigram(text, &symbols, Some(bigram.left), right.next, &mut queue);
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            let symbol = symbols[i];
            let piece = &text[symbol.start..symbol.start + symbol.len];
            match self.piece_to_id(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.bytes().map(|b| self.byte_tokens[usize::from(b)])),
            }
            at = symbol.next;
        }
    }

    /// `try_add_bigram`: queue the pair if its concatenation is a token.
    fn push_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: Option<usize>,
        right: Option<usize>,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = symbols[left].start;
        let len = symbols[left].len + symbols[right].len;
        if let Some(id) = self.piece_to_id(&text[start..start + len]) {
            queue.push(Bigram {
                left,
                right,
                score: self.scores[id as usize],
                len,
            });
        }
    }

    /// llama.cpp's `detokenize` with `remove_special = false`: each token's piece
    /// (`token_to_piece`), the first one's leading space dropped when the vocabulary adds a
    /// space prefix. Control and unknown tokens are rendered only with `render_special`;
    /// unused and undefined tokens are never rendered. Bytes that are not valid UTF-8 (a
    /// character whose byte tokens are not all there) become U+FFFD.
    pub(crate) fn decode(&self, ids: &[u32], render_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, render_special)).into_owned()
    }

    /// [`decode`](Self::decode)'s bytes, before they are read as UTF-8 (a byte-fallback piece
    /// of a character alone is not valid UTF-8).
    pub(crate) fn decode_bytes(&self, ids: &[u32], render_special: bool) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        let mut strip_space = self.add_space_prefix;
        for &id in ids {
            let start = bytes.len();
            self.push_piece(id, render_special, &mut bytes);
            if strip_space && bytes.get(start) == Some(&b' ') {
                bytes.remove(start);
            }
            strip_space = false;
        }
        bytes
    }

    /// `token_to_piece` for one id (in range: checked by the caller).
    fn push_piece(&self, id: u32, render_special: bool, out: &mut Vec<u8>) {
        let piece = self.piece(id);
        match self.types[id as usize] {
            TokenType::Control | TokenType::Unknown if !render_special => {}
            TokenType::Control | TokenType::Unknown | TokenType::UserDefined => {
                out.extend_from_slice(piece.as_bytes());
            }
            TokenType::Normal => out.extend_from_slice(piece.replace(SPACE_MARKER, " ").as_bytes()),
            TokenType::Byte => out.extend(byte_value(piece)),
            TokenType::Unused | TokenType::Undefined => {}
        }
    }
}

/// The byte a `<0xXX>` piece stands for.
pub(crate) fn byte_value(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A run of the text being tokenized (`llm_symbol`); `len == 0` once merged into its left
/// neighbour.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of two adjacent symbols (`llm_bigram_spm`).
#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

/// Max-heap order: higher score first, then the leftmost pair (llama.cpp's comparator; scores
/// are never NaN, and -0.0 equals 0.0 as there).
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        match self.score.partial_cmp(&other.score) {
            Some(Ordering::Equal) | None => other.left.cmp(&self.left),
            Some(order) => order,
        }
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}
