//! Any bytes: the GGUF reader returns a file or an error, never panics; a file it accepts can
//! have every tensor dequantised (or refused with an error).
#![no_main]

use kindle_gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = GgufFile::from_bytes(data.to_vec()) {
        let _ = file.architecture();
        for (key, _) in file.metadata() {
            let _ = file.opt_u64(key);
            let _ = file.opt_f64(key);
            let _ = file.opt_str(key);
        }
        let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
        for name in names {
            let info = file.tensor(&name).expect("listed tensor");
            // Keep the dequantised size bounded: the fuzzer must not spend its memory here.
            if info.n_elements() <= 1 << 20 {
                let _ = file.dequantize(&name);
            }
        }
    }
});
