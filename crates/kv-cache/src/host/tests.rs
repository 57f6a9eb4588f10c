//! The host views against the tensor path, their borrowing, and their errors.

use super::*;
use crate::{KvCache, KvType};

const HEADS: usize = 2;
const DIM: usize = 4;

fn config() -> KvCacheConfig {
    KvCacheConfig {
        n_layers: 2,
        n_kv_heads: HEADS,
        head_dim: DIM,
        capacity: 5,
    }
}

/// One token's keys (`sign` 1) or values (`sign` -1): `[head][dim]`.
fn token(t: usize, sign: f32) -> Vec<f32> {
    (0..HEADS * DIM)
        .map(|i| sign * ((t * 31 + i * 7) as f32 * 0.37).sin() * (1.0 + i as f32))
        .collect()
}

/// The same tokens as a `[1, heads, T, dim]` tensor.
fn tensor(tokens: &[Vec<f32>], device: &Device) -> Tensor<4> {
    let t = tokens.len();
    let mut data = vec![0f32; HEADS * t * DIM];
    for (pos, tok) in tokens.iter().enumerate() {
        for h in 0..HEADS {
            let dst = (h * t + pos) * DIM;
            data[dst..dst + DIM].copy_from_slice(&tok[h * DIM..(h + 1) * DIM]);
        }
    }
    Tensor::from_data(TensorData::new(data, [1, HEADS, t, DIM]), device)
}

fn host(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_into_vec::<f32>().unwrap()
}

/// Each CPU device with the storage types it supports (Burn's ndarray has no f16).
#[allow(deprecated)] // ndarray is still a CPU backend kindle can run on.
fn devices() -> [(Device, &'static [KvType]); 2] {
    [
        (Device::flex(), &[KvType::F32, KvType::F16, KvType::Int8]),
        (Device::ndarray(), &[KvType::F32, KvType::Int8]),
    ]
}

/// Writing through the host view stores what `update` stores, and the view reads back what
/// `read` returns, for every storage type.
#[test]
fn host_writes_and_reads_match_the_tensor_path() {
    for (device, types) in devices() {
        for &kv_type in types {
            let mut by_host = KvCache::with_type(config(), kv_type, &device);
            let mut by_tensor = KvCache::with_type(config(), kv_type, &device);
            assert!(by_host.host_resident());
            // A pass of 2 tokens, then one of 1.
            for pass in [0..2, 2..3] {
                let keys: Vec<_> = pass.clone().map(|t| token(t, 1.0)).collect();
                let values: Vec<_> = pass.clone().map(|t| token(t, -1.0)).collect();
                for layer in 0..2 {
                    let mut view = by_host.host_layer(layer).unwrap().unwrap();
                    assert_eq!(view.len(), pass.start);
                    for (i, (k, v)) in keys.iter().zip(&values).enumerate() {
                        view.write(i, k, v).unwrap();
                    }
                    drop(view);
                    by_tensor
                        .update(layer, tensor(&keys, &device), tensor(&values, &device))
                        .unwrap();
                }
                by_host.advance(pass.len()).unwrap();
                by_tensor.advance(pass.len()).unwrap();
            }
            for layer in 0..2 {
                let (hk, hv) = by_host.read(layer).unwrap();
                let (tk, tv) = by_tensor.read(layer).unwrap();
                let (hk, hv, tk, tv) = (host(hk), host(hv), host(tk), host(tv));
                // int8 rounding may differ by one step where a value sits on a tie.
                let tol = if kv_type == KvType::Int8 { 0.05 } else { 1e-6 };
                for (a, b) in hk.iter().chain(&hv).zip(tk.iter().chain(&tv)) {
                    assert!((a - b).abs() <= tol, "{kv_type}: {a} vs {b}");
                }
                let view = by_host.host_layer(layer).unwrap().unwrap();
                let mut scratch = Vec::new();
                for h in 0..HEADS {
                    let k = view.keys(h, 3, &mut scratch).to_vec();
                    assert_eq!(k, tk[h * 3 * DIM..(h + 1) * 3 * DIM], "{kv_type}");
                    let v = view.values(h, 3, &mut scratch).to_vec();
                    assert_eq!(v, tv[h * 3 * DIM..(h + 1) * 3 * DIM], "{kv_type}");
                    // A range from position 1 is the same values.
                    let k1 = view.keys_at(h, 1, 2, &mut scratch).to_vec();
                    assert_eq!(k1, tk[(h * 3 + 1) * DIM..(h + 1) * 3 * DIM], "{kv_type}");
                    let v1 = view.values_at(h, 1, 2, &mut scratch).to_vec();
                    assert_eq!(v1, tv[(h * 3 + 1) * DIM..(h + 1) * 3 * DIM], "{kv_type}");
                    // f16 runs, widened, are what the f32 reads decode.
                    let widened = |runs: Option<Vec<&[f16]>>| -> Option<Vec<f32>> {
                        runs.map(|r| r.concat().iter().map(|v| v.to_f32()).collect())
                    };
                    let f16 = kv_type == KvType::F16;
                    assert_eq!(view.stores_f16(), f16, "{kv_type}");
                    let want = |v: Vec<f32>| f16.then_some(v);
                    assert_eq!(widened(view.key_runs_f16(h, 1, 2)), want(k1), "{kv_type}");
                    assert_eq!(widened(view.value_runs_f16(h, 1, 2)), want(v1), "{kv_type}");
                    // int8 runs times their scales are what the f32 reads decode.
                    let scaled = |runs: Option<Int8Runs<'_>>| -> Option<Vec<f32>> {
                        let runs = runs?;
                        let mut out = Vec::new();
                        for (q, s) in runs.quants.iter().zip(&runs.scales) {
                            for (row, &scale) in q.chunks_exact(DIM).zip(s.iter()) {
                                out.extend(row.iter().map(|&v| f32::from(v) * scale));
                            }
                        }
                        Some(out)
                    };
                    let int8 = kv_type == KvType::Int8;
                    assert_eq!(view.stores_int8(), int8, "{kv_type}");
                    let want = |v: Vec<f32>| int8.then_some(v);
                    let (k1, v1) = (view.keys_at(h, 1, 2, &mut scratch).to_vec(), {
                        let mut other = Vec::new();
                        view.values_at(h, 1, 2, &mut other).to_vec()
                    });
                    assert_eq!(scaled(view.key_runs_int8(h, 1, 2)), want(k1), "{kv_type}");
                    assert_eq!(scaled(view.value_runs_int8(h, 1, 2)), want(v1), "{kv_type}");
                }
            }
        }
    }
}

fn key_ptr(view: &HostKvLayer<'_>) -> *const u8 {
    match view.buffer(0) {
        HostBuffer::Float(data) => data.as_bytes().as_ptr(),
        HostBuffer::Int8 { data, .. } => data.as_bytes().as_ptr(),
    }
}

/// The view is the cache's own memory: two views in a row see the same bytes (no copy in
/// either direction), until a fork shares them; then the first view copies and the fork
/// keeps its contents.
#[test]
fn views_do_not_copy_and_forks_stay_independent() {
    for (device, types) in devices() {
        for &kv_type in types {
            let mut cache = KvCache::with_type(config(), kv_type, &device);
            let first = key_ptr(&cache.host_layer(1).unwrap().unwrap());
            let mut view = cache.host_layer(1).unwrap().unwrap();
            assert_eq!(key_ptr(&view), first, "{kv_type} on {device:?}");
            view.write(0, &token(0, 1.0), &token(0, -1.0)).unwrap();
            drop(view);
            cache.advance(1).unwrap();

            let mut fork = cache.fork();
            let mut view = cache.host_layer(1).unwrap().unwrap();
            assert_ne!(key_ptr(&view), first, "a shared buffer is copied");
            view.write(0, &token(9, 1.0), &token(9, -1.0)).unwrap();
            drop(view);
            cache.advance(1).unwrap();
            fork.advance(1).unwrap();
            let (forked, _) = fork.read(1).unwrap();
            let (changed, _) = cache.read(1).unwrap();
            assert_ne!(host(forked), host(changed));
        }
    }
}

#[test]
fn bad_writes_are_errors() {
    let mut cache = KvCache::new(config(), &Device::flex());
    assert!(matches!(
        cache.host_layer(2),
        Err(KvCacheError::NoSuchLayer { layer: 2, .. })
    ));
    let mut view = cache.host_layer(0).unwrap().unwrap();
    let (k, v) = (token(0, 1.0), token(0, -1.0));
    assert!(matches!(
        view.write(5, &k, &v),
        Err(KvCacheError::Full { .. })
    ));
    assert!(matches!(
        view.write(0, &k[1..], &v),
        Err(KvCacheError::BadShape { layer: 0, .. })
    ));
}
