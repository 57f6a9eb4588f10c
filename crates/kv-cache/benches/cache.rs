//! One decode step's cache work at growing lengths, SmolLM2-135M's shape (30 layers, 3 KV
//! heads, head_dim 64): every layer writes one token's keys and values in place and gets back
//! views of all positions (`append`); `append_read` also reads every returned key and value
//! once (a sum), as attention would. In-place writes should cost the same at any length; only
//! the read grows with it.

use std::hint::black_box;
use std::time::Duration;

use burn::prelude::*;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kindle_kv_cache::{KvCache, KvCacheConfig, KvType};

const LAYERS: usize = 30;
const HEADS: usize = 3;
const DIM: usize = 64;
const POSITIONS: [usize; 3] = [128, 1024, 4096];

fn filled(kv_type: KvType, len: usize, device: &Device) -> KvCache {
    let config = KvCacheConfig {
        n_layers: LAYERS,
        n_kv_heads: HEADS,
        head_dim: DIM,
        capacity: 4096 + 1,
    };
    let mut cache = KvCache::with_type(config, kv_type, device);
    let x = Tensor::<4>::random(
        [1, HEADS, len, DIM],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        device,
    );
    for layer in 0..LAYERS {
        cache.update(layer, x.clone(), x.clone()).unwrap();
    }
    cache.advance(len).unwrap();
    cache
}

fn step(cache: &mut KvCache, k: &Tensor<4>, v: &Tensor<4>, read: bool) -> f32 {
    let len = cache.len();
    let mut total = 0.0;
    for layer in 0..LAYERS {
        let (keys, values) = cache.update(layer, k.clone(), v.clone()).unwrap();
        if read {
            total += (keys.sum() + values.sum()).into_scalar::<f32>();
        } else {
            black_box((keys, values));
        }
    }
    cache.advance(1).unwrap();
    // Stay at the same length for the next iteration.
    cache.truncate(len);
    total
}

fn bench(c: &mut Criterion) {
    let device = Device::flex();
    let k = Tensor::<4>::ones([1, HEADS, 1, DIM], &device);
    let v = Tensor::<4>::ones([1, HEADS, 1, DIM], &device);
    for (name, kv_type, read) in [
        ("append_f32", KvType::F32, false),
        ("append_read_f32", KvType::F32, true),
        ("append_int8", KvType::Int8, false),
    ] {
        let mut group = c.benchmark_group(name);
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500));
        for pos in POSITIONS {
            let mut cache = filled(kv_type, pos, &device);
            group.bench_with_input(BenchmarkId::from_parameter(pos), &pos, |b, _| {
                b.iter(|| black_box(step(&mut cache, &k, &v, read)))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
