//! The real model against llama.cpp's reference outputs on the same file, under the rules in
//! `testdata/reference` (llama.cpp quantises activations to 8 bits, so single logits differ by up
//! to about 1.0): teacher-forced, the argmax matches wherever the reference margin is >= 0.5 and
//! the top-5 logprobs are within 0.6; free-running greedy output matches up to the first step
//! whose margin is below 0.5.

mod common;

use common::reference::{MARGIN, Passes, check_free_running, check_teacher_forced, model};
use common::*;
use kindle_model::LogitsFor;
use kindle_sampling::logprobs::{argmax, log_softmax};

#[test]
fn teacher_forced_distributions_match_llama_cpp() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    check_teacher_forced(model);
}

#[test]
fn free_running_greedy_matches_llama_cpp_until_a_close_call() {
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    check_free_running(model, Passes::One);
}

/// The KV cache stored as int8 (per-token, per-head scales) and f16, against the f32 cache:
/// next-token distributions teacher-forced over the reference prompts (KL divergence), and
/// the reference's margin rule for the argmax.
#[test]
fn quantized_kv_caches_stay_close_to_f32() {
    use kindle_model::KvType;
    let Some(model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let kv_types = [KvType::F16, KvType::Int8];
    // Per KV type: sum of KL, positions, largest KL.
    let mut stats = [(0.0f64, 0usize, 0.0f64); 2];
    for (name, prompt) in prompts() {
        let n_prompt = prompt["prompt_ids"].as_array().unwrap().len();
        let mut all = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        all.extend_from_slice(&greedy[..greedy.len() - 1]);
        // Prefill the prompt, then feed the continuation one token at a time, so that
        // attention reads keys and values back from the (quantized) cache. Log-probabilities
        // are `f32` (their rounding, ~1e-7 relative, is far below the KL bound) summed in f64.
        let run = |kv: KvType| -> Vec<Vec<f32>> {
            let mut cache = model.new_cache_typed(all.len(), kv);
            let mut rows = vec![
                model
                    .forward(&all[..n_prompt], &mut cache, LogitsFor::Last)
                    .unwrap(),
            ];
            for &t in &all[n_prompt..] {
                rows.push(model.forward(&[t], &mut cache, LogitsFor::Last).unwrap());
            }
            rows.iter().map(|r| log_softmax(r)).collect()
        };
        let exact = run(KvType::F32);
        let steps = prompt["steps"].as_array().unwrap();
        for (kv_type, (sum, count, worst)) in kv_types.iter().zip(stats.iter_mut()) {
            for (i, (p, q)) in exact.iter().zip(run(*kv_type)).enumerate() {
                let kl: f64 = p
                    .iter()
                    .zip(&q)
                    .map(|(&a, &b)| f64::from(a).exp() * (f64::from(a) - f64::from(b)))
                    .sum();
                *sum += kl;
                *count += 1;
                *worst = worst.max(kl);
                if steps[i]["margin"].as_f64().unwrap() >= MARGIN {
                    assert_eq!(
                        u64::from(argmax(&q).unwrap()),
                        steps[i]["argmax"].as_u64().unwrap(),
                        "{name} step {i} ({kv_type})"
                    );
                }
            }
        }
    }
    for (kv_type, (sum, count, worst)) in kv_types.iter().zip(stats) {
        eprintln!(
            "{kv_type} KV cache vs f32: mean KL {:.2e}, max KL {worst:.2e} over {count} positions",
            sum / count as f64
        );
        assert!(worst < 0.05, "{kv_type}: max KL {worst}");
    }
}
