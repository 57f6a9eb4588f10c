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
    // Default: the default model in the cache folder ($KINDLE_CACHE_DIR,
    // $XDG_CACHE_HOME/kindle/models or ~/.cache/kindle/models), as the CLI finds it.
    let path = args
        .next()
        .map_or_else(kindle_fetch::default_model_path, Into::into);
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
    kindle_sampling::logprobs::argmax(row).expect("a logits row is not empty")
}
