//! Prefill and decode speed of the real model with quantized weights (both activation
//! formats) and dense weights.
//!
//! `cargo run --release -p kindle-model --example decode_speed [-- MODEL.gguf [TOKENS]]`
//! (threads: `KINDLE_THREADS`).

use std::time::Instant;

use burn::prelude::*;
use kindle_gguf::GgufFile;
use kindle_model::{ActivationFormat, KernelOptions, Llama, LoadOptions, LogitsFor, WeightFormat};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        format!(
            "{}/.cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let file = GgufFile::open(&path).expect("opening the model");
    let device = Device::flex();
    let runs = [
        (WeightFormat::Quantized, ActivationFormat::F32),
        (WeightFormat::Quantized, ActivationFormat::Int8),
        (WeightFormat::DenseF32, ActivationFormat::F32),
    ];
    for (weights, activations) in runs {
        let kernels = KernelOptions::default().with_activations(activations);
        let options = LoadOptions::new(weights).with_kernels(kernels);
        let model = Llama::from_gguf_with(&file, &device, options).unwrap();
        println!("kernel threads: {}", model.kernels().threads());
        for prompt_len in [5usize, 64] {
            let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| 100 + i * 7).collect();
            let mut cache = model.new_cache(prompt_len + n + 1);
            let start = Instant::now();
            let logits = model.forward(&prompt, &mut cache, LogitsFor::Last).unwrap();
            let prefill = start.elapsed().as_secs_f64();
            let mut next = argmax(&logits);
            let start = Instant::now();
            if prompt_len == 5 {
                for _ in 0..n {
                    let logits = model.forward(&[next], &mut cache, LogitsFor::Last).unwrap();
                    next = argmax(&logits);
                }
            }
            let decode = start.elapsed().as_secs_f64();
            print!(
                "{weights:?} ({activations:?} activations): prefill {prompt_len} tokens {:.1} tok/s",
                prompt_len as f64 / prefill
            );
            if prompt_len == 5 {
                print!("; decode {n} tokens {:.1} tok/s", n as f64 / decode);
            }
            println!();
        }
    }
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}
