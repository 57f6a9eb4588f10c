//! The quantized CPU kernels and dense `f32` weights give the same model on the real model file:
//! the same dequantised values, multiplied in another order, so with `f32` activations the
//! logits agree to rounding.

mod common;

use burn::prelude::*;
use common::{max_diff, real_model};
use kindle_model::{Llama, LoadOptions, LogitsFor, WeightFormat};
use kindle_sampling::logprobs::{argmax, log_sum_exp, logprob, top_n};

fn logits(model: &Llama, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(64);
    model.forward(tokens, &mut cache, LogitsFor::All).unwrap()
}

#[test]
fn quantized_and_dense_weights_agree_on_the_real_model() {
    let Some(file) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let device = Device::flex();
    let load = |weights| Llama::from_gguf_with(&file, &device, LoadOptions::new(weights)).unwrap();
    let quantized = load(WeightFormat::Quantized);
    let dense = load(WeightFormat::DenseF32);
    let tokens = [1, 504, 3575, 282, 4649, 314, 253, 30];
    let (q, d) = (logits(&quantized, &tokens), logits(&dense, &tokens));
    let vocab = quantized.config().vocab_size;
    let (mut worst_logit, mut worst_logprob) = (0f32, 0f32);
    for (pos, (qr, dr)) in q.chunks(vocab).zip(d.chunks(vocab)).enumerate() {
        worst_logit = worst_logit.max(max_diff(qr, dr));
        let (q_lse, d_lse) = (log_sum_exp(qr), log_sum_exp(dr));
        for (id, _) in top_n(dr, 5) {
            let (ql, dl) = (logprob(qr, q_lse, id), logprob(dr, d_lse, id));
            worst_logprob = worst_logprob.max((ql - dl).abs());
            assert!(
                (ql - dl).abs() < 1e-3,
                "position {pos}, token {id}: logprob {ql} quantized vs {dl} dense"
            );
        }
        let top = top_n(dr, 2);
        if top[0].1 - top[1].1 > 0.5 {
            assert_eq!(argmax(qr), argmax(dr), "position {pos}");
        }
    }
    eprintln!(
        "quantized vs dense f32 weights: largest logit difference {worst_logit:.2e}, \
         largest top-5 logprob difference {worst_logprob:.2e}"
    );
    assert!(worst_logit < 1e-3, "logits differ by {worst_logit}");
}
