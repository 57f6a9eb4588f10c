//! What the KV cache buys, on the real model:
//!
//! 1. the time of one decode step with the cache at positions 128, 1024 and 4096 (the cache is
//!    filled in 512-token chunks first, then 16 steps are timed; the median is reported);
//! 2. generating N tokens (default 512) greedily with the cache, against recomputing the whole
//!    prefix every step (a fresh cache and a full forward of the prefix each step), and the
//!    ratio. Both runs produce the same tokens (checked).
//!
//! `cargo run --release -p kindle-model --example kv_bench [-- MODEL.gguf [N [KV_TYPE]]]`
//! (threads: `KINDLE_THREADS`; KV_TYPE f32, f16 or int8).

use std::time::{Duration, Instant};

use burn::prelude::*;
use kindle_gguf::GgufFile;
use kindle_model::{KvType, Llama, LogitsFor};

fn main() {
    let mut args = std::env::args().skip(1);
    // Default: the default model in the cache folder ($KINDLE_CACHE_DIR,
    // $XDG_CACHE_HOME/kindle/models or ~/.cache/kindle/models), as the CLI finds it.
    let path = args
        .next()
        .map_or_else(kindle_fetch::default_model_path, Into::into);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    let kv_type: KvType = args
        .next()
        .map(|s| s.parse().expect("KV type: f32, f16 or int8"))
        .unwrap_or(KvType::F32);
    let file = GgufFile::open(&path).expect("opening the model");
    let model = Llama::from_gguf(&file, &Device::flex()).expect("loading the model");
    println!(
        "kernel threads: {}, KV cache {kv_type}",
        model.kernels().threads()
    );

    for position in [128usize, 1024, 4096] {
        let steps = 16;
        let mut cache = model.new_cache_typed(position + steps, kv_type);
        let filler = tokens(position);
        for chunk in filler.chunks(512) {
            model.forward(chunk, &mut cache, LogitsFor::Last).unwrap();
        }
        let mut next = 1000;
        let mut times = Vec::with_capacity(steps);
        for _ in 0..steps {
            let start = Instant::now();
            let logits = model.forward(&[next], &mut cache, LogitsFor::Last).unwrap();
            times.push(start.elapsed());
            next = argmax(&logits);
        }
        times.sort();
        println!(
            "decode step at position {position:>4}: median {:.2} ms (min {:.2}, max {:.2})",
            ms(times[steps / 2]),
            ms(times[0]),
            ms(times[steps - 1])
        );
    }

    let prompt = tokens(8);
    let start = Instant::now();
    let mut cache = model.new_cache_typed(prompt.len() + n, kv_type);
    let mut logits = model.forward(&prompt, &mut cache, LogitsFor::Last).unwrap();
    let mut cached = Vec::with_capacity(n);
    for i in 0..n {
        let next = argmax(&logits);
        cached.push(next);
        if i + 1 < n {
            logits = model.forward(&[next], &mut cache, LogitsFor::Last).unwrap();
        }
    }
    let with_cache = start.elapsed();
    println!(
        "{n} tokens with the cache: {:.2} s ({:.1} tok/s)",
        with_cache.as_secs_f64(),
        n as f64 / with_cache.as_secs_f64()
    );

    let start = Instant::now();
    let mut prefix = prompt.clone();
    let mut recomputed = Vec::with_capacity(n);
    for _ in 0..n {
        let mut fresh = model.new_cache_typed(prefix.len(), kv_type);
        let logits = model.forward(&prefix, &mut fresh, LogitsFor::Last).unwrap();
        let next = argmax(&logits);
        recomputed.push(next);
        prefix.push(next);
    }
    let without = start.elapsed();
    println!(
        "{n} tokens recomputing the prefix every step: {:.2} s ({:.1} tok/s)",
        without.as_secs_f64(),
        n as f64 / without.as_secs_f64()
    );
    let same = cached
        .iter()
        .zip(&recomputed)
        .take_while(|(a, b)| a == b)
        .count();
    println!(
        "speed-up of the cache: {:.1}x; the two runs agree on the first {same} of {n} tokens",
        without.as_secs_f64() / with_cache.as_secs_f64()
    );
}

/// `n` plain-text token ids (no special tokens), varied so attention is not degenerate.
fn tokens(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| 200 + (i * 37) % 20000).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn argmax(row: &[f32]) -> u32 {
    kindle_sampling::logprobs::argmax(row).expect("a logits row is not empty")
}
