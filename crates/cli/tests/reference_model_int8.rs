//! The reference checks of `reference_model.rs` with the CPU kernels' 8-bit activations
//! (llama.cpp's scheme), in a test binary of its own because the format is process-wide.

mod common;

use common::reference::{check_free_running, check_teacher_forced, model};
use kindle_kernels::{ActivationFormat, set_activation_format};

#[test]
fn int8_activations_match_llama_cpp_teacher_forced_and_free_running() {
    set_activation_format(ActivationFormat::Int8);
    let model = model();
    check_teacher_forced(model);
    check_free_running(model);
}
