//! Any bytes as a safetensors file: kindle-hf's reader returns a file or an error, never
//! panics; a file it accepts can have every tensor decoded (or refused with an error).
#![no_main]

use kindle_hf::SafetensorsFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = SafetensorsFile::from_bytes("fuzz.safetensors", data.to_vec()) {
        let _ = file.metadata();
        for tensor in file.tensors() {
            // The decoded size is bounded by the input (checked against the data section).
            assert!(file.data(tensor).len() <= data.len());
            let _ = file.to_f32(&tensor.name);
        }
    }
});
