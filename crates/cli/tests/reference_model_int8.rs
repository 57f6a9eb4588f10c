//! The reference checks of `reference_model.rs` with the CPU kernels' 8-bit activations
//! (llama.cpp's scheme): the model is loaded with them as a load option.

mod common;

use common::model_path;
use common::reference::{check_free_running, check_teacher_forced};
use kindle_gguf::GgufFile;
use kindle_model::{ActivationFormat, KernelOptions, Llama, OpenDevice};

#[test]
fn int8_activations_match_llama_cpp_teacher_forced_and_free_running() {
    let file = GgufFile::open(model_path()).expect("opening the model");
    let device = OpenDevice::flex();
    let options = device
        .load_options()
        .with_kernels(KernelOptions::default().with_activations(ActivationFormat::Int8));
    let model = Llama::from_gguf_with(&file, &device.device, options).expect("loading the model");
    assert_eq!(model.kernels().activations(), ActivationFormat::Int8);
    check_teacher_forced(&model);
    check_free_running(&model);
}
