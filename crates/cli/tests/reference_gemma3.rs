//! Gemma-3 270M (Q4_K_M) against llama.cpp's reference outputs on the same file
//! (`testdata/reference/gemma3-270m-q4_k_m.json`), under SmolLM2's rules: teacher-forced, the
//! argmax matches wherever llama.cpp's margin is >= 0.5 and every top-5 logprob is within 0.6;
//! free-running greedy output matches up to the first step whose margin is below 0.5.
//!
//! The prompts' token ids come from the reference, so these tests need no tokenizer. The
//! model is `gemma-3-270m-q4_k_m.gguf` in the cache folder, fetched if missing
//! (`common::gemma3_model`). On flex (the default device) and ndarray; the wgpu test is
//! ignored until the embedding fits wgpu's buffers (see it).

mod common;

use common::RealModel;
use common::reference::{
    LOGPROB_TOLERANCE, Passes, check_free_running_on, model_of, teacher_forced_on,
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

/// Gemma-3 on `kind` (f32), teacher-forced against llama.cpp under the same rules. A device
/// that does not open is a failure (no skip).
fn gemma3_teacher_forced_on(kind: DeviceKind) {
    let device = OpenDevice::open(kind, Dtype::F32)
        .unwrap_or_else(|error| panic!("{} does not open: {error:#}", kind.name()));
    let Some(path) = RealModel::Gemma3.path() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let file = GgufFile::open(path).expect("opening the model");
    let model = Llama::load(&file, &device).expect("loading the model");
    let found = teacher_forced_on(&model, RealModel::Gemma3, Passes::One);
    eprintln!("{}:", kind.name());
    found.report();
    if let Err(message) = found.result(LOGPROB_TOLERANCE) {
        panic!("{}: {message}", kind.name());
    }
}

#[test]
fn gemma3_matches_llama_cpp_on_ndarray() {
    gemma3_teacher_forced_on(DeviceKind::Ndarray);
}

/// Fails today: the dense `f32` embedding (and tied head) is one 671 MB buffer, past what
/// wgpu allocates (lavapipe: "can't allocate buffer of size: 671088640"); the head needs to
/// be split into row blocks on GPU devices.
#[test]
#[ignore = "the 262,144 x 640 f32 embedding is one 671 MB buffer, past wgpu's buffer limit"]
fn gemma3_matches_llama_cpp_on_wgpu() {
    gemma3_teacher_forced_on(DeviceKind::Wgpu);
}
