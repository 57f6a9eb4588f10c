//! Tokenizer (placeholder, being written).
