//! The default chain on a realistic row: penalties over a 64-token history, top-k 40, top-p 0.95,
//! min-p 0.05, temperature 0.8, over 49,152 logits; and a draw from the whole row, 49,152 and
//! 262,144 logits (Gemma-3's vocabulary). Copying the row is part of each iteration
//! (the sampler edits it in place), and is also measured on its own for reference.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kindle_sampling::{Sampler, SamplerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOCAB: usize = 49_152;
const GEMMA_VOCAB: usize = 262_144;

/// Roughly normal logits (sum of 4 uniforms, sd ~2.3) plus a few strong candidates, like a real
/// LM head.
fn realistic_row(seed: u64, vocab: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut u = || (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
    let mut row: Vec<f32> = (0..vocab)
        .map(|_| (u() + u() + u() + u() - 2.0) * 4.0)
        .collect();
    for i in 0..20 {
        row[(i * 2_459) % vocab] = 12.0 - i as f32 * 0.4;
    }
    row
}

fn bench(c: &mut Criterion) {
    let row = realistic_row(1, VOCAB);
    let history: Vec<u32> = (0..64u32).map(|i| (i * 769) % VOCAB as u32).collect();
    let config = SamplerConfig {
        repetition_penalty: 1.1,
        frequency_penalty: 0.1,
        presence_penalty: 0.1,
        penalty_last_n: 64,
        ..SamplerConfig::llama_cpp_defaults()
    };
    let mut sampler = SamplerConfig {
        seed: Some(7),
        ..config.clone()
    }
    .build()
    .unwrap();
    let mut scratch = row.clone();
    c.bench_function("copy row 49152", |b| {
        b.iter(|| {
            scratch.copy_from_slice(black_box(&row));
            black_box(&scratch);
        })
    });
    c.bench_function("default chain 49152 (incl. row copy)", |b| {
        b.iter(|| {
            scratch.copy_from_slice(black_box(&row));
            black_box(sampler.sample(&mut scratch, black_box(&history)).unwrap())
        })
    });
    let mut greedy = Sampler::greedy();
    c.bench_function("greedy 49152 (incl. row copy)", |b| {
        b.iter(|| {
            scratch.copy_from_slice(black_box(&row));
            black_box(greedy.sample(&mut scratch, &history).unwrap())
        })
    });
    let mut plain = SamplerConfig {
        seed: Some(7),
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap();
    c.bench_function("untruncated draw 49152 (incl. row copy)", |b| {
        b.iter(|| {
            scratch.copy_from_slice(black_box(&row));
            black_box(plain.sample(&mut scratch, &history).unwrap())
        })
    });
    // Gemma-3's vocabulary: the draw's weights, sum and walk over the whole row.
    let big = realistic_row(1, GEMMA_VOCAB);
    let mut scratch = big.clone();
    c.bench_function("untruncated draw 262144 (incl. row copy)", |b| {
        b.iter(|| {
            scratch.copy_from_slice(black_box(&big));
            black_box(plain.sample(&mut scratch, &history).unwrap())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
