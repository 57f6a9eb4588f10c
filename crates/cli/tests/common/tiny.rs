//! Tiny llama GGUF files for the tests that need a model file but not the real one: the
//! metadata and tensor list, with the weights left to the caller.

use kindle_gguf::{GgufWriter, MetadataValue};

/// The shape of a tiny llama model (context 64, a vocabulary of one printable character per
/// token from `!` on, GPT-2 style tokenizer without merges).
#[derive(Clone, Copy, Debug)]
pub struct TinyLlama {
    pub vocab: u64,
    pub d_model: u64,
    pub ff: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub layers: u64,
}

impl TinyLlama {
    /// One layer over a vocabulary of 40 tokens: a model file whose vocabulary no real model
    /// shares.
    pub const SMALL: TinyLlama = TinyLlama {
        vocab: 40,
        d_model: 32,
        ff: 64,
        heads: 2,
        kv_heads: 2,
        layers: 1,
    };

    pub fn head_dim(&self) -> u64 {
        self.d_model / self.heads
    }

    /// A writer holding the model's metadata, and no tensor yet.
    pub fn writer(&self) -> GgufWriter {
        let tokens: Vec<MetadataValue> = (0..self.vocab)
            .map(|i| MetadataValue::String(char::from(b'!' + i as u8).to_string()))
            .collect();
        self.writer_without_vocab()
            .metadata("tokenizer.ggml.model", "gpt2")
            .metadata("tokenizer.ggml.pre", "gpt2")
            .metadata("tokenizer.ggml.tokens", MetadataValue::Array(tokens.into()))
    }

    /// A writer holding the model's hyperparameters only: the caller adds a vocabulary of
    /// `vocab` tokens (`tokenizer.*`) and the tensors.
    pub fn writer_without_vocab(&self) -> GgufWriter {
        let u32 = |v: u64| MetadataValue::U32(v as u32);
        GgufWriter::new()
            .metadata("general.architecture", "llama")
            .metadata("llama.block_count", u32(self.layers))
            .metadata("llama.context_length", u32(64))
            .metadata("llama.embedding_length", u32(self.d_model))
            .metadata("llama.feed_forward_length", u32(self.ff))
            .metadata("llama.attention.head_count", u32(self.heads))
            .metadata("llama.attention.head_count_kv", u32(self.kv_heads))
            .metadata("llama.rope.dimension_count", u32(self.head_dim()))
    }

    /// Write the model to `path` with every weight `value` (a file that loads, for the tests
    /// that need one but not its outputs).
    pub fn write_constant(&self, path: &std::path::Path, value: f32) {
        let mut writer = self.writer();
        for (name, dims) in self.tensors() {
            let n: u64 = dims.iter().product();
            writer = writer.tensor_f32(name, &dims, &vec![value; n as usize]);
        }
        writer.write(path).expect("writing a tiny model");
    }

    /// Every tensor the model needs, as (name, GGUF dimensions `[d_in, d_out]`): the token
    /// embedding (tied to the output), the output norm, then per block its two norms and its
    /// seven matrices (`attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_gate`, `ffn_up`,
    /// `ffn_down`).
    pub fn tensors(&self) -> Vec<(String, Vec<u64>)> {
        let (d, ff) = (self.d_model, self.ff);
        let kv = self.kv_heads * self.head_dim();
        let mut tensors = vec![
            ("token_embd.weight".to_string(), vec![d, self.vocab]),
            ("output_norm.weight".to_string(), vec![d]),
        ];
        for l in 0..self.layers {
            let p = format!("blk.{l}.");
            tensors.extend([
                (format!("{p}attn_norm.weight"), vec![d]),
                (format!("{p}ffn_norm.weight"), vec![d]),
                (format!("{p}attn_q.weight"), vec![d, d]),
                (format!("{p}attn_k.weight"), vec![d, kv]),
                (format!("{p}attn_v.weight"), vec![d, kv]),
                (format!("{p}attn_output.weight"), vec![d, d]),
                (format!("{p}ffn_gate.weight"), vec![d, ff]),
                (format!("{p}ffn_up.weight"), vec![d, ff]),
                (format!("{p}ffn_down.weight"), vec![ff, d]),
            ]);
        }
        tensors
    }
}
