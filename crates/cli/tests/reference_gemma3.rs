//! Gemma-3 270M (Q4_K_M) against llama.cpp's reference outputs on the same file
//! (`testdata/reference/gemma3-270m-q4_k_m.json`), under SmolLM2's rules: teacher-forced, the
//! argmax matches wherever llama.cpp's margin is >= 0.5 and every top-5 logprob is within 0.6;
//! free-running greedy output matches up to the first step whose margin is below 0.5.
//!
//! The prompts' token ids come from the reference, so these tests need no tokenizer. The
//! model is `gemma-3-270m-q4_k_m.gguf` in the cache folder, fetched if missing
//! (`common::gemma3_model`). On flex (the default device), ndarray and wgpu (lavapipe in
//! CI).

mod common;

use common::RealModel;
use common::reference::{
    LOGPROB_TOLERANCE, Passes, all_logits, check_free_running_on, model_of, teacher_forced_on,
};
use kindle_gguf::GgufFile;
use kindle_model::{DeviceKind, Dtype, Llama, OpenDevice};

/// The prompt and llama.cpp's continuation in one pass per prompt (a prefill), and in passes
/// of 8 rows, each attending to what the ones before it cached. (Decode-sized passes take
/// the host path once every weight has a CPU kernel; this file's Q5_0 weights have none yet,
/// so they load dense and both ways run the Burn path.)
#[test]
fn gemma3_teacher_forced_distributions_match_llama_cpp() {
    let Some(model) = model_of(RealModel::Gemma3) else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_eq!(model.arch().name, "gemma3");
    assert_eq!(model.config().vocab_size, 262_144);
    for passes in [Passes::One, Passes::Slices(8)] {
        let found = teacher_forced_on(model, RealModel::Gemma3, passes);
        eprintln!("{passes:?}:");
        found.report();
        if let Err(message) = found.result(LOGPROB_TOLERANCE) {
            panic!("{passes:?}: {message}");
        }
    }
}

#[test]
fn gemma3_free_running_greedy_matches_llama_cpp_until_a_close_call() {
    let Some(model) = model_of(RealModel::Gemma3) else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let checked = check_free_running_on(model, RealModel::Gemma3, Passes::One);
    // "water" has 7 decisive steps before its first close call; "recipe" none.
    assert!(checked >= 7, "only {checked} decisive steps checked");
}

/// Gemma-3 on `kind` (f32), teacher-forced against llama.cpp under the same rules, and its
/// free-running greedy output up to the first close call. A device that does not open is a
/// failure, but for wgpu where `KINDLE_REQUIRE_WGPU` is not `1` (as in `tests/devices.rs`: CI
/// sets it and installs lavapipe; a machine without a Vulkan driver says it skipped).
/// Returns the model, or `None` where it skipped.
fn gemma3_matches_llama_cpp_on(kind: DeviceKind) -> Option<Llama> {
    let required =
        kind != DeviceKind::Wgpu || std::env::var("KINDLE_REQUIRE_WGPU").is_ok_and(|v| v == "1");
    let device = match OpenDevice::open(kind, Dtype::F32) {
        Ok(device) => device,
        Err(error) if !required => {
            eprintln!(
                "skipped on {kind}: {error:#} (set KINDLE_REQUIRE_WGPU=1 to make this an error)"
            );
            return None;
        }
        Err(error) => panic!("{kind} does not open: {error:#}"),
    };
    let path = RealModel::Gemma3.path()?; // None: KINDLE_SKIP_REAL_MODEL=1
    let file = GgufFile::open(path).expect("opening the model");
    let model = Llama::load(&file, &device).expect("loading the model");
    let found = teacher_forced_on(&model, RealModel::Gemma3, Passes::One);
    eprintln!("{}:", kind.name());
    found.report();
    if let Err(message) = found.result(LOGPROB_TOLERANCE) {
        panic!("{}: {message}", kind.name());
    }
    let checked = check_free_running_on(&model, RealModel::Gemma3, Passes::One);
    assert!(
        checked >= 7,
        "{}: only {checked} decisive steps checked",
        kind.name()
    );
    Some(model)
}

#[test]
fn gemma3_matches_llama_cpp_on_ndarray() {
    let _ = gemma3_matches_llama_cpp_on(DeviceKind::Ndarray);
}

/// On a GPU the 262,144 x 640 `f32` embedding (the tied head, 671 MB) is held as blocks of
/// rows (`kindle_model::linear::DENSE_BLOCK_BYTES`): one buffer that size is past what wgpu allocates
/// (lavapipe: "can't allocate buffer of size: 671088640"), and so is a pass's logits for more
/// than 64 rows, which `Llama::forward_batch` then computes in several passes.
#[test]
fn gemma3_matches_llama_cpp_on_wgpu() {
    let Some(model) = gemma3_matches_llama_cpp_on(DeviceKind::Wgpu) else {
        return;
    };
    // Both reference sequences as one, 110 rows: past the 64 rows whose logits fit one
    // buffer, so wgpu computes them in two passes; every row against flex's one pass.
    let tokens: Vec<u32> = RealModel::Gemma3
        .prompts()
        .iter()
        .flat_map(|(_, prompt)| {
            let mut ids = common::ids(&prompt["prompt_ids"]);
            ids.extend(common::ids(&prompt["greedy_ids"]));
            ids
        })
        .collect();
    assert!(tokens.len() > 64, "{} rows", tokens.len());
    let flex = model_of(RealModel::Gemma3).expect("the model, loaded on flex");
    let expected = all_logits(flex, &tokens, Passes::One);
    let found = all_logits(&model, &tokens, Passes::One);
    assert_eq!(found.len(), expected.len());
    let largest = found
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "wgpu against flex, {} rows: largest logit difference {largest:.2e}",
        tokens.len()
    );
    assert!(
        largest < 1e-3,
        "wgpu's logits differ from flex's by {largest}"
    );
}
