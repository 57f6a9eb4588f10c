//! Helpers shared by this crate's integration tests: the real model, found the way the fetcher
//! finds it, and the comparison of two logits runs.

#![allow(dead_code)]

use kindle_gguf::GgufFile;

pub mod paths;
pub mod shifts;

/// The real model ([`kindle_fetch::real_model_for_tests`]): `$KINDLE_MODEL`, else the default
/// model in the cache folder (`$KINDLE_CACHE_DIR`, `$XDG_CACHE_HOME/kindle/models`,
/// `~/.cache/kindle/models`), fetched if missing. Panics naming where it looked when it cannot
/// be found; `None` only with `KINDLE_SKIP_REAL_MODEL=1`, and the test then returns.
pub fn real_model() -> Option<GgufFile> {
    let path = kindle_fetch::real_model_for_tests()?;
    let file = GgufFile::open(&path)
        .unwrap_or_else(|error| panic!("opening the real model {}: {error}", path.display()));
    Some(file)
}

/// Largest absolute difference between two equally long runs of logits.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
