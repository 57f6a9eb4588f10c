//! GGUF reader, tokenizer and Llama-family transformer in Burn for kindle.

pub mod gguf;
pub mod quant;
pub mod tokenizer;
