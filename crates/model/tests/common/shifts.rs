//! The context shift's correctness property, for any model: right after a sliding-window
//! cache discards tokens and re-rotates the rest, its first layer holds the keys and values a
//! fresh prefill of the kept tokens would have cached (a first layer's keys and values depend
//! only on each token and its position), and a one-layer model gives a fresh prefill's logits.

use burn::prelude::*;
use kindle_model::{KvStore, KvType, Llama, LogitsFor, SlidingWindowCache};

use super::max_diff;

/// What to compare after a shift.
#[derive(Clone, Copy, PartialEq)]
pub enum Compare {
    /// The last position's logits (exact for a one-layer model only).
    Logits,
    /// The first layer's cached keys and values.
    FirstLayer,
}

/// Feed `stream` one token at a time through `cache` (a sliding window keeping `keep`),
/// mirroring which tokens it holds; after every step that shifted, compare with a fresh
/// prefill of the held tokens in a fixed cache of `kv_type`. Returns the number of shifts
/// and the largest difference seen.
pub fn shift_errors(
    model: &Llama,
    mut cache: SlidingWindowCache,
    kv_type: KvType,
    stream: &[u32],
    compare: Compare,
) -> (usize, f32) {
    let (capacity, keep) = (cache.capacity(), cache.keep());
    let mut held: Vec<u32> = Vec::new();
    let (mut shifts, mut worst) = (0, 0f32);
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
            worst = worst.max(diff);
        }
    }
    (shifts, worst)
}

/// [`shift_errors`] through the model's own sliding cache of `capacity` keeping `keep`,
/// asserting at least `min_shifts` shifts, each within 1e-3 of a fresh prefill.
pub fn check_shifts(
    model: &Llama,
    kv_type: KvType,
    (capacity, keep): (usize, usize),
    stream: &[u32],
    compare: Compare,
    min_shifts: usize,
) {
    let cache = model.new_sliding_cache(capacity, kv_type, keep).unwrap();
    let (shifts, worst) = shift_errors(model, cache, kv_type, stream, compare);
    assert!(
        shifts >= min_shifts,
        "capacity {capacity}, keep {keep}: only {shifts} shifts"
    );
    assert!(
        worst < 1e-3,
        "capacity {capacity}, keep {keep}: {worst} from a fresh prefill after a shift"
    );
}
