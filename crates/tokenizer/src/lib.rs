//! Tokenizer: a Hugging Face [`tokenizers::Tokenizer`] built from GGUF tokenizer metadata (or
//! loaded from a `tokenizer.json`), wrapped so that it tokenizes exactly like llama.cpp.
//!
//! # Example
//!
//! ```
//! use kindle_tokenizer::{GgufVocab, Tokenizer};
//!
//! // A tiny byte-level BPE vocabulary: "Ġ" is the byte-level spelling of a space.
//! let vocab = GgufVocab {
//!     model: "gpt2".into(),
//!     pre: Some("gpt2".into()),
//!     tokens: ["<|end|>", "h", "i", "Ġ", "hi", "Ġhi"].map(String::from).to_vec(),
//!     merges: vec!["h i".into(), "Ġ hi".into()],
//!     token_types: vec![3, 1, 1, 1, 1, 1], // 3 = control, 1 = normal
//!     eos: Some(0),
//!     ..GgufVocab::default()
//! };
//! let tokenizer = Tokenizer::from_vocab(vocab)?;
//!
//! // With `parse_special`, control tokens written in the text become their ids.
//! assert_eq!(tokenizer.encode("hi hi<|end|>", true)?, [4, 5, 0]);
//! assert_eq!(tokenizer.id_to_piece(5), Some("Ġhi"));
//! assert_eq!(tokenizer.decode(&[4, 5, 0], true)?, "hi hi");
//! assert_eq!(tokenizer.eog_ids(), [0]);
//! # Ok::<(), kindle_tokenizer::TokenizerError>(())
//! ```
//!
//! # How llama.cpp's behaviour is reproduced
//!
//! * **Pre-tokenization.** llama.cpp splits text with a list of regexes per `tokenizer.ggml.pre`
//!   type (`regex_exprs` in `llama-vocab.cpp`); every regex splits every fragment left by the
//!   previous one, and the text between matches is kept as fragments of its own. That is
//!   exactly a [`Sequence`](tokenizers::pre_tokenizers::sequence::Sequence) of
//!   [`Split`](tokenizers::pre_tokenizers::split::Split) pre-tokenizers with
//!   [`SplitDelimiterBehavior::Isolated`](tokenizers::SplitDelimiterBehavior::Isolated),
//!   followed by a byte-level mapping
//!   (`ByteLevel { use_regex: false }`). The same regexes are used here.
//! * **BPE.** Merges are applied by rank within each fragment, as in both implementations. For
//!   `llama-bpe` (Llama 3) a fragment that is itself a token is taken whole (`ignore_merges`).
//! * **Special tokens.** Control and unknown tokens are registered as *special* added tokens and
//!   user-defined tokens as plain added tokens. With `parse_special == false` a second copy of
//!   the pipeline (sharing the first one's model: [`SharedModel`])
//!   with [`encode_special_tokens`](tokenizers::TokenizerImpl::set_encode_special_tokens)
//!   set tokenizes control tokens as plain text but still splits out user-defined tokens,
//!   which is what llama.cpp does.
//! * **BOS/EOS** are added only if `add_bos` / `add_eos` say so; nothing else is added.
//! * **End of generation.** [`Tokenizer::eog_ids`] follows llama.cpp: EOS, EOT, EOM, the FIM
//!   pad/repo/separator tokens and every token whose text is one of llama.cpp's end-of-turn
//!   spellings (such tokens are forced to control type, as llama.cpp does).
//!
//! * **SentencePiece** (`tokenizer.ggml.model == "llama"`) is llama.cpp's own algorithm, written
//!   here (`spm.rs`) because neither `tokenizers`' Unigram (Viterbi) nor its BPE (a ranked
//!   merge table; unknown characters become bytes before merging) reproduces it: user-defined
//!   (and, with `parse_special`, control and unknown) tokens are split out of the text longest
//!   first; each remaining fragment gets a space prefix if `add_space_prefix` says so and it
//!   starts the text or follows a split-out token, spaces become `▁`, adjacent symbols are
//!   merged highest score first while their concatenation is a token, and characters left
//!   unmerged and not in the vocabulary become their bytes' `<0xXX>` tokens. Decoding turns
//!   `▁` back into spaces and byte tokens into bytes; a character split over byte tokens is
//!   U+FFFD until its last byte is there, which is what a streaming decoder holds back on.
//!
//! Other `tokenizer.ggml.model` values are rejected with [`TokenizerError::UnsupportedModel`].

mod bpe;
mod eog;
mod error;
mod piece_index;
mod pre_tokenizer;
mod shared_model;
mod spm;
#[cfg(test)]
mod tests;
mod tokenizer_json;
mod vocab;

use std::collections::HashMap;
use std::sync::Arc;

use tokenizers::AddedToken;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};

use kindle_gguf::{GgufFile, StringArray};

use bpe::{missing_byte_tokens, parse_merges};
use eog::end_of_generation;
use error::malformed;
use pre_tokenizer::PreTokenizer;
use spm::Spm;
use vocab::KEY_TOKEN_TYPE;

pub use error::{Result, TokenizerError};
pub use shared_model::{HfTokenizer, SharedModel};
pub use vocab::{GgufVocab, TokenType};

/// kindle's tokenizer: byte-level BPE or SentencePiece, tokenizing and detokenizing as
/// llama.cpp does.
///
/// Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Clone)]
pub struct Tokenizer {
    backend: Backend,
    /// Token texts by id (shared with a SentencePiece model).
    pieces: Arc<StringArray>,
    types: Vec<TokenType>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    chat_template: Option<String>,
}

/// What turns text into ids and back.
#[derive(Clone)]
enum Backend {
    /// A `tokenizers` pipeline: byte-level BPE from GGUF metadata, or a `tokenizer.json`.
    Hf(Box<HfBackend>),
    /// llama.cpp's SentencePiece tokenizer (`spm.rs`).
    Spm(Arc<Spm>),
}

/// Two copies of one `tokenizers` pipeline (one model between them), and the bytes its vocabulary cannot spell.
#[derive(Clone)]
struct HfBackend {
    /// Splits control tokens out of the text (`parse_special == true`).
    special: HfTokenizer,
    /// Tokenizes control tokens as plain text (`parse_special == false`); shares `special`'s
    /// model.
    plain: HfTokenizer,
    /// Bytes that no token of a byte-level vocabulary can represent (empty: not checked).
    missing_bytes: Vec<u8>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.pieces.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.*` metadata (read with
    /// [`GgufVocab::from_gguf`]).
    ///
    /// ```
    /// use kindle_gguf::{GgufFile, GgufWriter};
    /// use kindle_tokenizer::Tokenizer;
    ///
    /// // A byte-level BPE vocabulary as a GGUF file stores it ("Ġ" spells a space).
    /// let bytes = GgufWriter::new()
    ///     .metadata("tokenizer.ggml.model", "gpt2")
    ///     .metadata("tokenizer.ggml.pre", "gpt2")
    ///     .metadata("tokenizer.ggml.tokens", vec!["h", "i", "Ġ", "hi", "Ġhi"])
    ///     .metadata("tokenizer.ggml.merges", vec!["h i", "Ġ hi"])
    ///     .to_bytes();
    /// let tokenizer = Tokenizer::from_gguf(&GgufFile::from_bytes(bytes)?)?;
    /// assert_eq!(tokenizer.encode("hi hi", false)?, [3, 4]);
    /// assert_eq!(tokenizer.decode(&[3, 4], false)?, "hi hi");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        Self::from_vocab(GgufVocab::from_gguf(file)?)
    }

    /// Builds a tokenizer from GGUF-style vocabulary metadata.
    ///
    /// `vocab.model` picks the kind: `"gpt2"` (byte-level BPE: tokens, merges, pre-tokenizer)
    /// or `"llama"` (SentencePiece: tokens, scores, byte-fallback tokens); anything else is
    /// [`TokenizerError::UnsupportedModel`].
    pub fn from_vocab(mut vocab: GgufVocab) -> Result<Self> {
        let spm = match vocab.model.as_str() {
            "gpt2" => false,
            "llama" => true,
            _ => return Err(TokenizerError::UnsupportedModel(vocab.model)),
        };
        let n = vocab.tokens.len();
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::Build(format!(
                "vocabulary of {n} tokens does not fit 32-bit token ids"
            )));
        }

        let mut types = if vocab.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else if vocab.token_types.len() != n {
            return Err(TokenizerError::TokenTypeCountMismatch {
                tokens: n,
                types: vocab.token_types.len(),
            });
        } else {
            vocab
                .token_types
                .iter()
                .map(|&code| {
                    TokenType::from_gguf(code).ok_or_else(|| {
                        malformed(KEY_TOKEN_TYPE, format!("unknown token type code {code}"))
                    })
                })
                .collect::<Result<Vec<_>>>()?
        };

        for (which, id) in [
            ("bos", vocab.bos),
            ("eos", vocab.eos),
            ("unk", vocab.unk),
            ("pad", vocab.pad),
            ("eot", vocab.eot),
            ("eom", vocab.eom),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::SpecialIdOutOfRange {
                    which,
                    id: u64::from(id),
                    vocab_size: n,
                });
            }
        }
        if vocab.add_bos && vocab.bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("bos"));
        }
        if vocab.add_eos && vocab.eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken("eos"));
        }

        // llama.cpp: later duplicates win in the text -> id map.
        let (backend, pieces, (eot, eom, eog)) = if spm {
            let (pieces, index) = spm::index_pieces(std::mem::take(&mut vocab.tokens));
            let eog = end_of_generation(&vocab, &|t| index.get(&pieces, t), &mut types);
            let model = Spm::new(
                Arc::clone(&pieces),
                index,
                std::mem::take(&mut vocab.scores),
                types.clone(),
                vocab.add_space_prefix.unwrap_or(true),
            )?;
            (Backend::Spm(Arc::new(model)), pieces, eog)
        } else {
            let token_to_id: HashMap<String, u32> = vocab
                .tokens
                .iter()
                .enumerate()
                .map(|(id, text)| (text.clone(), id as u32))
                .collect();
            let eog = end_of_generation(&vocab, &|t| token_to_id.get(t).copied(), &mut types);
            let hf = bpe_backend(&vocab, token_to_id, &types)?;
            let mut pieces: StringArray = vocab.tokens.iter().collect();
            pieces.shrink_to_fit();
            let pieces = Arc::new(pieces);
            (Backend::Hf(Box::new(hf)), pieces, eog)
        };
        Ok(Self {
            backend,
            pieces,
            types,
            bos: vocab.bos,
            eos: vocab.eos,
            unk: vocab.unk,
            pad: vocab.pad,
            eot,
            eom,
            eog,
            add_bos: vocab.add_bos,
            add_eos: vocab.add_eos,
            chat_template: vocab.chat_template,
        })
    }

    /// Tokenizes `text`.
    ///
    /// With `parse_special`, control tokens written in the text (`"<|im_start|>"`) become their
    /// ids; without it they are tokenized as ordinary text. User-defined tokens are recognised
    /// either way (as in llama.cpp). BOS/EOS are added only if the vocabulary asks for them.
    ///
    /// A character whose bytes the vocabulary cannot represent is an error naming it (llama.cpp
    /// drops such bytes silently).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        ids.extend(self.bos.filter(|_| self.add_bos));
        ids.extend(self.encode_segments(&[(text, parse_special)])?);
        ids.extend(self.eos.filter(|_| self.add_eos));
        Ok(ids)
    }

    /// Tokenizes a text made of `segments`, each with its own special-token parsing (a chat
    /// prompt: template text parsed, message contents not), without BOS or EOS.
    ///
    /// SentencePiece vocabularies tokenize the segments as one text, as llama.cpp tokenizes a
    /// whole rendered prompt: text on both sides of a boundary is one fragment, and only the
    /// text's start and text after a split-out token get the space prefix. Byte-level BPE
    /// vocabularies tokenize each segment on its own and concatenate the ids.
    pub fn encode_segments(&self, segments: &[(&str, bool)]) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        match &self.backend {
            Backend::Spm(model) => model.encode_segments(segments, &mut ids),
            Backend::Hf(hf) => {
                for &(text, parse_special) in segments {
                    let tokenizer = if parse_special {
                        &hf.special
                    } else {
                        &hf.plain
                    };
                    self.check_representable(&hf.missing_bytes, text, parse_special)?;
                    let encoding = tokenizer
                        .encode_fast(text, false)
                        .map_err(|e| TokenizerError::Encode(e.to_string()))?;
                    ids.extend_from_slice(encoding.get_ids());
                }
            }
        }
        Ok(ids)
    }

    /// An error for the first character whose bytes have no token, unless it lies inside the
    /// text of an added token the encoding splits out (control and unknown tokens with
    /// `parse_special`, user-defined tokens always). The scan for added tokens runs only when
    /// the text holds such a byte at all.
    fn check_representable(
        &self,
        missing_bytes: &[u8],
        text: &str,
        parse_special: bool,
    ) -> Result<()> {
        let missing = |ch: &char| {
            ch.encode_utf8(&mut [0; 4])
                .bytes()
                .any(|b| missing_bytes.contains(&b))
        };
        if missing_bytes.is_empty() || !text.chars().any(|ch| missing(&ch)) {
            return Ok(());
        }
        let mut covered = Vec::new();
        for (piece, &ty) in self.pieces.iter().zip(&self.types) {
            let split_out = ty == TokenType::UserDefined || (parse_special && ty.is_special());
            if split_out && !piece.is_empty() {
                covered.extend(text.match_indices(piece).map(|(at, p)| at..at + p.len()));
            }
        }
        match text
            .char_indices()
            .find(|(offset, ch)| missing(ch) && !covered.iter().any(|r| r.contains(offset)))
        {
            Some((offset, ch)) => Err(TokenizerError::Unencodable { ch, offset }),
            None => Ok(()),
        }
    }

    /// Turns token ids back into text. With `skip_special`, control and unknown tokens are
    /// dropped. Byte sequences that are not valid UTF-8 become U+FFFD (so a character split
    /// over byte-fallback tokens decodes to U+FFFD until its last byte is there).
    ///
    /// SentencePiece vocabularies decode as llama.cpp's `llama_detokenize(.., remove_special =
    /// false, unparse_special = !skip_special)`: `▁` becomes a space, byte tokens their byte,
    /// unused tokens nothing, and when the vocabulary adds a space prefix the first token's
    /// leading space is dropped.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.pieces.len()) {
            return Err(TokenizerError::TokenIdOutOfRange {
                id,
                vocab_size: self.pieces.len(),
            });
        }
        match &self.backend {
            Backend::Spm(model) => Ok(model.decode(ids, !skip_special)),
            Backend::Hf(hf) => hf
                .special
                .decode(ids, skip_special)
                .map_err(|e| TokenizerError::Decode(e.to_string())),
        }
    }

    /// The bytes token `id` decodes to alone, special tokens rendered (as `decode(&[id],
    /// false)`), before they are read as UTF-8: a token that is part of a multi-byte character
    /// (a byte-fallback piece `<0xF0>`, a byte-level piece of half an emoji) gives its bytes,
    /// where [`decode`](Self::decode) gives U+FFFD.
    pub fn token_bytes(&self, id: u32) -> Result<Vec<u8>> {
        let text = self.decode(&[id], false)?;
        if !text.contains('\u{FFFD}') {
            return Ok(text.into_bytes());
        }
        Ok(match &self.backend {
            Backend::Spm(model) => model.decode_bytes(&[id], true),
            Backend::Hf(_) => {
                let piece = self.id_to_piece(id).unwrap_or_default();
                spm::byte_value(piece)
                    .map(|b| vec![b])
                    .or_else(|| byte_level_piece(piece))
                    .unwrap_or_else(|| text.into_bytes())
            }
        })
    }

    /// The raw vocabulary entry of `id` (byte-level spelling, e.g. `"Ġworld"`, or
    /// SentencePiece's, e.g. `"▁world"`).
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize)
    }

    /// The id of the vocabulary entry spelled exactly `piece`.
    pub fn piece_to_id(&self, piece: &str) -> Option<u32> {
        match &self.backend {
            Backend::Spm(model) => model.piece_to_id(piece),
            Backend::Hf(hf) => hf.special.token_to_id(piece),
        }
    }

    /// The texts of the tokens that special-token parsing splits out of a text and plain
    /// encoding does not (control and unknown tokens; not empty ones): what a chat prompt must
    /// keep out of its template text when they come from a message.
    pub fn special_pieces(&self) -> Vec<&str> {
        (0..self.pieces.len())
            .filter(|&id| self.types.get(id).is_some_and(|t| t.is_special()))
            .filter_map(|id| self.pieces.get(id))
            .filter(|piece| !piece.is_empty())
            .collect()
    }

    /// The type of token `id` (after llama.cpp's end-of-generation fix-ups).
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// Beginning-of-sequence token id.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token id.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Unknown token id.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }

    /// Padding token id.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// End-of-turn token id (from metadata, or auto-detected by text as llama.cpp does).
    pub fn eot_id(&self) -> Option<u32> {
        self.eot
    }

    /// End-of-message token id (from metadata, or `<|eom_id|>`).
    pub fn eom_id(&self) -> Option<u32> {
        self.eom
    }

    /// Ids that end generation, sorted ascending (llama.cpp's EOG set).
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The Jinja chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Whether [`encode`](Self::encode) prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether [`encode`](Self::encode) appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether this is a SentencePiece (`llama`) vocabulary.
    pub fn is_sentencepiece(&self) -> bool {
        matches!(self.backend, Backend::Spm(_))
    }

    /// Whether [`encode`](Self::encode) puts a space before the text (SentencePiece
    /// vocabularies with `tokenizer.ggml.add_space_prefix`, true unless the file says false).
    pub fn add_space_prefix(&self) -> bool {
        matches!(&self.backend, Backend::Spm(model) if model.add_space_prefix())
    }

    /// The underlying Hugging Face tokenizer (the one that parses special tokens), e.g. for
    /// [`decode_stream`](tokenizers::TokenizerImpl::decode_stream); `None` for SentencePiece
    /// vocabularies, which kindle tokenizes itself.
    pub fn inner(&self) -> Option<&HfTokenizer> {
        match &self.backend {
            Backend::Hf(hf) => Some(&hf.special),
            Backend::Spm(_) => None,
        }
    }
}

/// The `tokenizers` pipeline of a byte-level BPE vocabulary: llama.cpp's pre-tokenizer regexes
/// for `tokenizer.ggml.pre`, the merges, and control, unknown and user-defined tokens as added
/// tokens.
fn bpe_backend(
    vocab: &GgufVocab,
    token_to_id: HashMap<String, u32>,
    types: &[TokenType],
) -> Result<HfBackend> {
    let pre_name = vocab.pre.as_deref().unwrap_or("default");
    let pre = PreTokenizer::from_name(pre_name)
        .ok_or_else(|| TokenizerError::UnknownPreTokenizer(pre_name.to_owned()))?;
    let merges = parse_merges(&vocab.merges, &token_to_id)?;
    let bpe_vocab: BpeVocab = token_to_id.into_iter().collect();
    let bpe = BPE::builder()
        .vocab_and_merges(bpe_vocab, merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| TokenizerError::Build(e.to_string()))?;

    let mut special = HfTokenizer::new(SharedModel::new(bpe));
    special.with_pre_tokenizer(Some(pre.build()?));
    special.with_decoder(Some(ByteLevelDecoder::default()));
    let added: Vec<AddedToken> = vocab
        .tokens
        .iter()
        .zip(types)
        .filter(|(text, ty)| {
            !text.is_empty() && (ty.is_special() || **ty == TokenType::UserDefined)
        })
        .map(|(text, ty)| AddedToken::from(text.clone(), ty.is_special()).normalized(false))
        .collect();
    special.add_tokens(&added);

    let mut plain = special.clone();
    plain.set_encode_special_tokens(true);
    Ok(HfBackend {
        special,
        plain,
        missing_bytes: missing_byte_tokens(&vocab.tokens),
    })
}

/// The bytes of a byte-level BPE piece (GPT-2's spelling: each byte one printable character,
/// `Ġ` for a space), if every character of `piece` spells a byte.
fn byte_level_piece(piece: &str) -> Option<Vec<u8>> {
    piece.chars().map(bpe::char_byte).collect()
}
