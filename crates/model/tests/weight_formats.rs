//! The quantized CPU kernels and dense `f32` weights give the same model, on the real model
//! file when it is present (`~/.cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf`) and on a
//! small synthetic file otherwise.

use std::path::PathBuf;

use burn::prelude::*;
use kindle_gguf::GgufFile;
use kindle_model::{Llama, LoadOptions, LogitsFor, WeightFormat};

fn real_model() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("HOME")?)
        .join(".cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    path.exists().then_some(path)
}

fn logits(model: &Llama, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(64);
    model.forward(tokens, &mut cache, LogitsFor::All).unwrap()
}

#[test]
fn quantized_and_dense_weights_agree_on_the_real_model() {
    let Some(path) = real_model() else {
        eprintln!("skipped: the model file is not present");
        return;
    };
    let file = GgufFile::open(path).unwrap();
    let device = Device::flex();
    let load = |weights| Llama::from_gguf_with(&file, &device, LoadOptions::new(weights)).unwrap();
    let quantized = load(WeightFormat::Quantized);
    let dense = load(WeightFormat::DenseF32);
    let tokens = [1, 504, 3575, 282, 4649, 314, 253, 30];
    let (q, d) = (logits(&quantized, &tokens), logits(&dense, &tokens));
    let vocab = quantized.config().vocab_size;
    for (pos, (qr, dr)) in q.chunks(vocab).zip(d.chunks(vocab)).enumerate() {
        let argmax = |r: &[f32]| {
            r.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        // The reference rule of the llama.cpp comparison: top-5 log-probabilities within 0.6
        // (8-bit activations move logits by up to ~1 in the tail of the vocabulary).
        let log_softmax = |r: &[f32]| {
            let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = max + r.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
            r.iter().map(|v| v - lse).collect::<Vec<f32>>()
        };
        let (ql, dl) = (log_softmax(qr), log_softmax(dr));
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| dl[b].total_cmp(&dl[a]));
        for &i in &order[..5] {
            assert!(
                (ql[i] - dl[i]).abs() < 0.6,
                "position {pos}, token {i}: {} vs {}",
                ql[i],
                dl[i]
            );
        }
        let mut sorted = dr.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] > 0.5 {
            assert_eq!(argmax(qr), argmax(dr), "position {pos}");
        }
    }
}
