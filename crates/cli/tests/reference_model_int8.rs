//! The reference checks of `reference_model.rs` with the CPU kernels' 8-bit activations
//! (llama.cpp's scheme), in a test binary of its own because the format is process-wide.

#[path = "reference_model.rs"]
#[allow(dead_code)]
mod reference;

use kindle_model::kernels::{ActivationFormat, set_activation_format};

#[test]
fn int8_activations_match_llama_cpp_teacher_forced_and_free_running() {
    set_activation_format(ActivationFormat::Int8);
    let model = reference::model();
    reference::check_teacher_forced(model);
    reference::check_free_running(model);
}
