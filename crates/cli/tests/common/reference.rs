//! Checks of a model against llama.cpp's reference outputs, shared by the test binaries.

use super::*;
use kindle_gguf::GgufFile;
use kindle_model::{Llama, LogitsFor, OpenDevice};
use std::sync::OnceLock;

pub const MARGIN: f64 = 0.5;
pub const LOGPROB_TOLERANCE: f64 = 0.6;

pub fn model() -> &'static Llama {
    static MODEL: OnceLock<Llama> = OnceLock::new();
    MODEL.get_or_init(|| {
        let file = GgufFile::open(model_path()).expect("opening the model");
        Llama::load(&file, &OpenDevice::flex()).expect("loading the model")
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
