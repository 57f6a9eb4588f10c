//! Turning token ids into text, all at once ([`TokenDecoder`]) or as a UTF-8-safe stream of
//! deltas ([`StreamDecoder`]).

/// Decodes a whole sequence of token ids to text: the seam to the tokenizer.
///
/// Whether special tokens are skipped is the implementor's choice. Invalid or incomplete UTF-8
/// (a character split over byte-fallback tokens) must decode to U+FFFD, as
/// [`String::from_utf8_lossy`] does; [`StreamDecoder`] relies on that to hold such text back.
pub trait TokenDecoder {
    /// What can go wrong while decoding.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The text of `ids`.
    fn decode(&self, ids: &[u32]) -> Result<String, Self::Error>;
}

impl<T: TokenDecoder + ?Sized> TokenDecoder for &T {
    type Error = T::Error;

    fn decode(&self, ids: &[u32]) -> Result<String, Self::Error> {
        (**self).decode(ids)
    }
}

impl<T: TokenDecoder + ?Sized> TokenDecoder for std::sync::Arc<T> {
    type Error = T::Error;

    fn decode(&self, ids: &[u32]) -> Result<String, Self::Error> {
        (**self).decode(ids)
    }
}

const REPLACEMENT: char = '\u{FFFD}';

/// Incremental detokeniser: feed ids one at a time, get the new text (a delta) for each.
///
/// The approach of Hugging Face `tokenizers`' `DecodeStream`: keep a small window of ids,
/// `ids[..read_offset]` already emitted (the prefix) and `ids[read_offset..]` not yet. Each step
/// decodes the window and emits what it adds to the decode of the emitted window
/// (the window gives decoders that strip or add a leading space the context they need). The new
/// text is held back while it ends in U+FFFD, the mark of an incomplete byte sequence, so a
/// character split over byte-fallback tokens is emitted whole once its last byte arrives.
///
/// For decoders that decode text piecewise at character boundaries (byte-level BPE, byte
/// fallback) the concatenation of all deltas plus [`flush`](Self::flush) equals the decode of
/// all ids, and no delta contains U+FFFD unless that full decode does.
///
/// ```
/// use kindle_generate::{StreamDecoder, TokenDecoder};
/// # #[derive(Debug)] struct Never;
/// # impl std::fmt::Display for Never { fn fmt(&self, _: &mut std::fmt::Formatter) -> std::fmt::Result { Ok(()) } }
/// # impl std::error::Error for Never {}
/// /// Every id is one byte.
/// struct Bytes;
/// impl TokenDecoder for Bytes {
///     type Error = Never;
///     fn decode(&self, ids: &[u32]) -> Result<String, Never> {
///         let bytes: Vec<u8> = ids.iter().map(|&i| i as u8).collect();
///         Ok(String::from_utf8_lossy(&bytes).into_owned())
///     }
/// }
/// let mut stream = StreamDecoder::new(&Bytes);
/// let deltas: Vec<String> =
///     "é!".bytes().map(|b| stream.step(u32::from(b)).unwrap()).collect();
/// assert_eq!(deltas, ["", "é", "!"]); // the first byte of 'é' is held back
/// assert_eq!(stream.flush().unwrap(), "");
/// ```
#[derive(Debug, Clone)]
pub struct StreamDecoder<D> {
    decoder: D,
    /// The window: the prefix (`..read_offset`, emitted) then the ids not emitted yet.
    ids: Vec<u32>,
    read_offset: usize,
    /// Decode of `ids[..read_offset]`.
    prefix_text: String,
}

impl<D: TokenDecoder> StreamDecoder<D> {
    /// A stream starting with no context.
    pub fn new(decoder: D) -> Self {
        StreamDecoder {
            decoder,
            ids: Vec::new(),
            read_offset: 0,
            prefix_text: String::new(),
        }
    }

    /// A stream whose first deltas are decoded after `context` (typically the last few prompt
    /// tokens), which is never emitted itself. With decoders that drop the leading space of a
    /// sequence (SentencePiece) this keeps the space before the first generated word.
    ///
    /// If the context's own decode ends in U+FFFD (it stops mid-character) it is not usable as
    /// a prefix and the stream starts without context.
    pub fn with_context(decoder: D, context: &[u32]) -> Result<Self, D::Error> {
        let mut stream = StreamDecoder::new(decoder);
        if context.is_empty() {
            return Ok(stream);
        }
        let text = stream.decoder.decode(context)?;
        if !text.ends_with(REPLACEMENT) {
            stream.ids = context.to_vec();
            stream.read_offset = context.len();
            stream.prefix_text = text;
        }
        Ok(stream)
    }

    /// The decoder.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// Add `id`; return the text it completes (empty while held back).
    pub fn step(&mut self, id: u32) -> Result<String, D::Error> {
        self.ids.push(id);
        let text = self.decoder.decode(&self.ids)?;
        if text.ends_with(REPLACEMENT) {
            return Ok(String::new());
        }
        self.emit(text, false)
    }

    /// Emit whatever is held back (an incomplete character comes out as U+FFFD): call once at
    /// the end of the stream.
    pub fn flush(&mut self) -> Result<String, D::Error> {
        if self.read_offset == self.ids.len() {
            return Ok(String::new());
        }
        let text = self.decoder.decode(&self.ids)?;
        self.emit(text, true)
    }

    /// Emit the part of `text` (the decode of the window) after the prefix text and slide the
    /// window.
    fn emit(&mut self, text: String, force: bool) -> Result<String, D::Error> {
        let cut = self.prefix_text.len();
        if text.len() <= cut {
            return Ok(String::new());
        }
        let delta = if text.starts_with(&self.prefix_text) {
            text[cut..].to_string()
        } else if text.is_char_boundary(cut) {
            // A decoder that rewrites earlier text (clean-up rules): keep the length convention.
            text[cut..].to_string()
        } else if force {
            let start = (cut..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            text[start..].to_string()
        } else {
            return Ok(String::new());
        };
        // Slide: the just-read ids become the prefix window.
        self.ids.drain(..self.read_offset);
        self.read_offset = self.ids.len();
        self.prefix_text = self.decoder.decode(&self.ids)?;
        Ok(delta)
    }
}
