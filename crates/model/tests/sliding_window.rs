//! The correctness property of the context shift (K-shift): right after a sliding-window
//! cache discards tokens and re-rotates the rest, its first layer holds exactly the keys and
//! values a fresh prefill of the kept tokens (kept prefix plus the rest of the window) would
//! have cached. For a one-layer model that makes the logits equal too.
//!
//! Deeper layers cannot match a fresh prefill: their keys and values were computed while the
//! discarded tokens were still in view, and no re-rotation removes that (llama.cpp's context
//! shift has the same property: it is an approximation of a fresh run, not a replay).

mod common;

use burn::prelude::*;
use common::{max_diff, real_model};
use kindle_model::{KvStore, KvType, Llama, LlamaConfig, LogitsFor, SlidingWindowCache};

/// What to compare after a shift.
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    /// The last position's logits (exact for a one-layer model only).
    Logits,
    /// The first layer's cached keys and values.
    FirstLayer,
}

/// Feed `stream` one token at a time through a sliding window of `capacity` keeping `keep`,
/// mirroring which tokens it holds; after every step that shifted, compare with a fresh
/// prefill of the held tokens. Returns the number of shifts checked.
fn check_shifts(
    model: &Llama,
    kv_type: KvType,
    capacity: usize,
    keep: usize,
    stream: &[u32],
    compare: Compare,
) -> usize {
    let mut cache: SlidingWindowCache = model.new_sliding_cache(capacity, kv_type, keep).unwrap();
    let mut held: Vec<u32> = Vec::new();
    let mut shifts = 0;
    for &token in stream {
        let before = cache.discarded();
        let logits = model
            .forward(&[token], &mut cache, LogitsFor::Last)
            .unwrap();
        let discarded = cache.discarded() - before;
        let start = keep.min(held.len());
        held.drain(start..start + discarded);
        held.push(token);
        assert_eq!(cache.len(), held.len());
        assert!(cache.len() <= capacity);
        if discarded > 0 {
            shifts += 1;
            let mut fresh = model.new_cache_typed(capacity, kv_type);
            let expected = model.forward(&held, &mut fresh, LogitsFor::Last).unwrap();
            assert!(logits.iter().all(|x| x.is_finite()));
            let diff = match compare {
                Compare::Logits => max_diff(&logits, &expected),
                Compare::FirstLayer => {
                    let host = |t: Tensor<4>| t.into_data().try_into_vec::<f32>().unwrap();
                    let (k, v) = cache.read(0).unwrap();
                    let (fk, fv) = fresh.read(0).unwrap();
                    max_diff(&host(k), &host(fk)).max(max_diff(&host(v), &host(fv)))
                }
            };
            assert!(
                diff < 1e-3,
                "after shift {shifts} ({discarded} discarded, {} held): logits differ by {diff}",
                held.len()
            );
        }
    }
    shifts
}

#[test]
fn one_layer_logits_after_a_shift_equal_a_fresh_prefill_of_the_kept_tokens() {
    let device = Device::flex();
    let model = LlamaConfig::new(64, 32, 1, 4, 2, 48).init_random(11, &device);
    let stream: Vec<u32> = (0..60).map(|i| (i * 7 + 3) % 64).collect();
    for keep in [0, 4] {
        let shifts = check_shifts(&model, KvType::F32, 16, keep, &stream, Compare::Logits);
        assert!(shifts >= 3, "keep {keep}: only {shifts} shifts");
    }
}

#[test]
fn first_layer_after_a_shift_equals_a_fresh_prefill() {
    let device = Device::flex();
    let model = LlamaConfig::new(64, 32, 3, 4, 2, 48).init_random(5, &device);
    let stream: Vec<u32> = (0..60).map(|i| (i * 11 + 1) % 64).collect();
    for keep in [0, 3] {
        let shifts = check_shifts(&model, KvType::F32, 16, keep, &stream, Compare::FirstLayer);
        assert!(shifts >= 3, "keep {keep}: only {shifts} shifts");
    }
}

#[test]
fn shift_matches_a_fresh_prefill_on_the_real_model() {
    let Some(file) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let model = Llama::from_gguf(&file, &Device::flex()).unwrap();
    let stream: Vec<u32> = (0..48u32).map(|i| 200 + (i * 37) % 3000).collect();
    let shifts = check_shifts(&model, KvType::F32, 24, 4, &stream, Compare::FirstLayer);
    assert!(shifts >= 2, "only {shifts} shifts");
}
