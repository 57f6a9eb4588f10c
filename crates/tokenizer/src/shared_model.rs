//! One `tokenizers` model behind both of a vocabulary's pipelines (`parse_special` on and
//! off), instead of a copy in each: a byte-level BPE model of 49,152 tokens is about 6.6 MB
//! of hash maps (its vocabulary both ways and its merges), a tenth of a small model's
//! resident memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::{
    DecoderWrapper, Model, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, Token, TokenizerImpl,
};

/// A `tokenizers` pipeline whose model is shared by its clones (see [`SharedModel`]): what
/// [`Tokenizer::inner`](crate::Tokenizer::inner) returns.
pub type HfTokenizer = TokenizerImpl<
    SharedModel,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// A `tokenizers` model (BPE, Unigram, WordPiece, ...) behind an [`Arc`]: cloning a pipeline
/// clones the pointer, not the vocabulary. Every call is the wrapped model's.
#[derive(Clone, Debug)]
pub struct SharedModel(Arc<ModelWrapper>);

impl SharedModel {
    /// Share `model`.
    pub fn new(model: impl Into<ModelWrapper>) -> Self {
        SharedModel(Arc::new(model.into()))
    }

    /// The wrapped model.
    pub fn get(&self) -> &ModelWrapper {
        &self.0
    }
}

impl Model for SharedModel {
    type Trainer = <ModelWrapper as Model>::Trainer;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        self.0.tokenize(sequence)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.0.token_to_id(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.0.id_to_token(id)
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        self.0.get_vocab()
    }

    fn get_vocab_size(&self) -> usize {
        self.0.get_vocab_size()
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        self.0.save(folder, prefix)
    }

    fn get_trainer(&self) -> Self::Trainer {
        self.0.get_trainer()
    }
}

impl serde::Serialize for SharedModel {
    /// As the wrapped model (a `tokenizer.json` written from a shared pipeline reads back as
    /// a plain one).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// `tokenizer`'s pipeline with its model moved behind a [`SharedModel`]: the normalizer,
/// pre-tokenizer, post-processor, decoder and added tokens kept, truncation and padding
/// dropped (kindle never cuts or pads a prompt behind the caller's back: an over-long prompt
/// is an error naming the context length).
pub(crate) fn share(tokenizer: tokenizers::Tokenizer) -> HfTokenizer {
    let t = tokenizer.into_inner();
    let mut shared = HfTokenizer::new(SharedModel::new(t.get_model().clone()));
    shared
        .with_normalizer(t.get_normalizer().cloned())
        .with_pre_tokenizer(t.get_pre_tokenizer().cloned())
        .with_post_processor(t.get_post_processor().cloned())
        .with_decoder(t.get_decoder().cloned())
        .with_added_vocabulary(t.get_added_vocabulary().clone());
    shared
}
