//! The generation loop of kindle: forward pass, logits, sampling, append, repeat until a stop.
//!
//! It sees the model only through [`LanguageModel`] (tokens in, last-position logits out, cache
//! state behind an associated type), so it never touches a tensor and is tested with fake models.

pub mod model;

pub use model::{LanguageModel, ModelCache};
