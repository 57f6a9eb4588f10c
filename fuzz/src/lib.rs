//! Shared helpers of kindle's cargo-fuzz targets (the crates under test are ordinary
//! dependencies: kindle-gguf and kindle-tokenizer have no Burn, so fuzz builds stay small).
//!
//! ```no_run
//! let path = kindle_fuzz::model_path();
//! println!("{}", path.display());
//! ```

/// Path of the real model: `$KINDLE_MODEL`, else the default cache location.
pub fn model_path() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("KINDLE_MODEL") {
        return path.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}
