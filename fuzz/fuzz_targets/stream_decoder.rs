//! A fake byte-level vocabulary and a sequence of ids, both from the fuzz input: the streamed
//! deltas (after an optional context) joined with the flush equal the full decode.
#![no_main]

use std::convert::Infallible;

use kindle_generate::{StreamDecoder, TokenDecoder};
use libfuzzer_sys::fuzz_target;

/// Token `i` is the byte string `pieces[i]`; text is their lossy UTF-8 decode.
struct ByteVocab {
    pieces: Vec<Vec<u8>>,
}

impl TokenDecoder for ByteVocab {
    type Error = Infallible;
    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.pieces[id as usize].iter().copied())
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

fuzz_target!(|data: &[u8]| {
    // Layout: [n_pieces][len, bytes..]*n_pieces [n_context] ids..
    let mut it = data.iter().copied();
    let n_pieces = usize::from(it.next().unwrap_or(0) % 32) + 1;
    let mut pieces = Vec::with_capacity(n_pieces);
    for _ in 0..n_pieces {
        let len = usize::from(it.next().unwrap_or(1) % 4) + 1;
        pieces.push(
            (0..len)
                .map(|_| it.next().unwrap_or(b'a'))
                .collect::<Vec<u8>>(),
        );
    }
    let n_context = usize::from(it.next().unwrap_or(0) % 8);
    let ids: Vec<u32> = it.map(|b| u32::from(b) % n_pieces as u32).collect();
    let (context, ids) = ids.split_at(n_context.min(ids.len()));
    let vocab = ByteVocab { pieces };

    let mut stream = StreamDecoder::with_context(&vocab, context).unwrap();
    let mut joined = String::new();
    for &id in ids {
        joined.push_str(&stream.step(id).unwrap());
    }
    joined.push_str(&stream.flush().unwrap());

    let full = vocab.decode(&[context, ids].concat()).unwrap();
    let context_text = vocab.decode(context).unwrap();
    if context_text.ends_with('\u{FFFD}') {
        // A context ending mid-character is dropped: the stream decodes the ids alone.
        assert_eq!(joined, vocab.decode(ids).unwrap());
    } else if full.starts_with(&context_text) {
        assert_eq!(
            joined,
            full[context_text.len()..],
            "context {context:?} ids {ids:?}"
        );
    }
});
