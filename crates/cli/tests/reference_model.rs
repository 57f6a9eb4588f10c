//! The real model against llama.cpp's reference outputs on the same file, under the rules in
//! `testdata/reference` (llama.cpp quantises activations to 8 bits, so single logits differ by up
//! to about 1.0): teacher-forced, the argmax matches wherever the reference margin is >= 0.5 and
//! the top-5 logprobs are within 0.6; free-running greedy output matches up to the first step
//! whose margin is below 0.5.

mod common;

use burn::prelude::*;
use common::*;
use kindle_model::gguf::GgufFile;
use kindle_model::{Llama, LogitsFor};
use std::sync::OnceLock;

const MARGIN: f64 = 0.5;
const LOGPROB_TOLERANCE: f64 = 0.6;

pub fn model() -> &'static Llama {
    static MODEL: OnceLock<Llama> = OnceLock::new();
    MODEL.get_or_init(|| {
        let file = GgufFile::open(model_path()).expect("opening the model");
        Llama::from_gguf(&file, &Device::flex()).expect("loading the model")
    })
}

/// Teacher-forced: every step's distribution against llama.cpp's.
pub fn check_teacher_forced(model: &Llama) {
    let vocab = model.config().vocab_size;
    for (name, prompt) in prompts() {
        let prompt_ids = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        let steps = prompt["steps"].as_array().unwrap();
        let mut all = prompt_ids.clone();
        all.extend_from_slice(&greedy[..greedy.len() - 1]);
        let mut cache = model.new_cache(all.len());
        let logits = model.forward(&all, &mut cache, LogitsFor::All).unwrap();
        let mut worst: f64 = 0.0;
        for (i, step) in steps.iter().enumerate() {
            let pos = prompt_ids.len() - 1 + i;
            let row = &logits[pos * vocab..(pos + 1) * vocab];
            let logprobs = log_softmax(row);
            let margin = step["margin"].as_f64().unwrap();
            let want = step["argmax"].as_u64().unwrap() as u32;
            if margin >= MARGIN {
                assert_eq!(
                    argmax(row),
                    want,
                    "{name}: argmax at step {i} (reference margin {margin})"
                );
            }
            for pair in step["top5"].as_array().unwrap() {
                let id = pair[0].as_u64().unwrap() as usize;
                let reference = pair[1].as_f64().unwrap();
                let diff = (logprobs[id] - reference).abs();
                worst = worst.max(diff);
                assert!(
                    diff <= LOGPROB_TOLERANCE,
                    "{name}: step {i}, token {id}: logprob {} vs llama.cpp {reference}",
                    logprobs[id]
                );
            }
        }
        eprintln!(
            "{name}: {} steps, largest top-5 logprob difference {worst:.3}",
            steps.len()
        );
    }
}

/// Free-running greedy decoding against llama.cpp's, up to the first close call.
pub fn check_free_running(model: &Llama) {
    for (name, prompt) in prompts() {
        let prompt_ids = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        let steps = prompt["steps"].as_array().unwrap();
        let checked = steps
            .iter()
            .position(|s| s["margin"].as_f64().unwrap() < MARGIN)
            .unwrap_or(steps.len());
        let mut cache = model.new_cache(prompt_ids.len() + checked + 1);
        let mut logits = model
            .forward(&prompt_ids, &mut cache, LogitsFor::Last)
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..checked {
            let next = argmax(&logits);
            out.push(next);
            logits = model.forward(&[next], &mut cache, LogitsFor::Last).unwrap();
        }
        assert_eq!(
            out,
            greedy[..checked],
            "{name}: greedy continuation (first {checked} steps are decisive)"
        );
        eprintln!("{name}: {checked} decisive greedy steps match");
    }
}

#[test]
fn teacher_forced_distributions_match_llama_cpp() {
    check_teacher_forced(model());
}

#[test]
fn free_running_greedy_matches_llama_cpp_until_a_close_call() {
    check_free_running(model());
}

/// The KV cache stored as int8 (per-token, per-head scales) and f16, against the f32 cache:
/// next-token distributions teacher-forced over the reference prompts (KL divergence), and
/// the reference's margin rule for the argmax.
#[test]
fn quantized_kv_caches_stay_close_to_f32() {
    use kindle_model::KvType;
    let model = model();
    let vocab = model.config().vocab_size;
    for kv_type in [KvType::F16, KvType::Int8] {
        let (mut sum, mut count, mut worst) = (0.0f64, 0usize, 0.0f64);
        for (name, prompt) in prompts() {
            let mut all = ids(&prompt["prompt_ids"]);
            let greedy = ids(&prompt["greedy_ids"]);
            all.extend_from_slice(&greedy[..greedy.len() - 1]);
            // Prefill the prompt, then feed the continuation one token at a time, so that
            // attention reads keys and values back from the (quantized) cache.
            let run = |kv: KvType| -> Vec<Vec<f32>> {
                let mut cache = model.new_cache_typed(all.len(), kv);
                let n_prompt = prompt["prompt_ids"].as_array().unwrap().len();
                let mut rows = vec![
                    model
                        .forward(&all[..n_prompt], &mut cache, LogitsFor::Last)
                        .unwrap(),
                ];
                for &t in &all[n_prompt..] {
                    rows.push(model.forward(&[t], &mut cache, LogitsFor::Last).unwrap());
                }
                rows
            };
            let exact = run(KvType::F32);
            let quantized = run(kv_type);
            let steps = prompt["steps"].as_array().unwrap();
            for (i, (p, q)) in exact.iter().zip(&quantized).enumerate() {
                assert_eq!(p.len(), vocab);
                let (lp, lq) = (log_softmax(p), log_softmax(q));
                let kl: f64 = lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum();
                sum += kl;
                count += 1;
                worst = worst.max(kl);
                if steps[i]["margin"].as_f64().unwrap() >= MARGIN {
                    assert_eq!(
                        argmax(q),
                        steps[i]["argmax"].as_u64().unwrap() as u32,
                        "{name} step {i} ({kv_type})"
                    );
                }
            }
        }
        eprintln!(
            "{kv_type} KV cache vs f32: mean KL {:.2e}, max KL {worst:.2e} over {count} positions",
            sum / count as f64
        );
        assert!(worst < 0.05, "{kv_type}: max KL {worst}");
    }
}
