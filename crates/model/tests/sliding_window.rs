//! The correctness property of the context shift (K-shift): right after a sliding-window
//! cache discards tokens and re-rotates the rest, its first layer holds exactly the keys and
//! values a fresh prefill of the kept tokens (kept prefix plus the rest of the window) would
//! have cached. For a one-layer model that makes the logits equal too (`common::shifts`;
//! Gemma-3's layers, each with its own base, in `tests/gemma3.rs`).
//!
//! Deeper layers cannot match a fresh prefill: their keys and values were computed while the
//! discarded tokens were still in view, and no re-rotation removes that (llama.cpp's context
//! shift has the same property: it is an approximation of a fresh run, not a replay).

mod common;

use burn::prelude::*;
use common::real_model;
use common::shifts::{Compare, check_shifts};
use kindle_model::{KvType, Llama, LlamaConfig};

#[test]
fn one_layer_logits_after_a_shift_equal_a_fresh_prefill_of_the_kept_tokens() {
    let device = Device::flex();
    let model = LlamaConfig::new(64, 32, 1, 4, 2, 48).init_random(11, &device);
    let stream: Vec<u32> = (0..60).map(|i| (i * 7 + 3) % 64).collect();
    for keep in [0, 4] {
        check_shifts(&model, KvType::F32, (16, keep), &stream, Compare::Logits, 3);
    }
}

#[test]
fn first_layer_after_a_shift_equals_a_fresh_prefill() {
    let device = Device::flex();
    let model = LlamaConfig::new(64, 32, 3, 4, 2, 48).init_random(5, &device);
    let stream: Vec<u32> = (0..60).map(|i| (i * 11 + 1) % 64).collect();
    for keep in [0, 3] {
        check_shifts(
            &model,
            KvType::F32,
            (16, keep),
            &stream,
            Compare::FirstLayer,
            3,
        );
    }
}

#[test]
fn shift_matches_a_fresh_prefill_on_the_real_model() {
    let Some(file) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let model = Llama::from_gguf(&file, &Device::flex()).unwrap();
    let stream: Vec<u32> = (0..48u32).map(|i| 200 + (i * 37) % 3000).collect();
    check_shifts(
        &model,
        KvType::F32,
        (24, 4),
        &stream,
        Compare::FirstLayer,
        2,
    );
}
