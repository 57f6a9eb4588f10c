//! Helpers shared by the CLI's test binaries: the real model (found the way the fetcher finds
//! it), the llama.cpp reference outputs ([`reference`] checks a model against them) and tiny
//! model files ([`tiny`]).

#![allow(dead_code)]

pub mod reference;
pub mod tiny;

use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The real model ([`kindle_fetch::real_model_for_tests`]): `$KINDLE_MODEL`, else the default
/// model in the cache folder (`$KINDLE_CACHE_DIR`, `$XDG_CACHE_HOME/kindle/models`,
/// `~/.cache/kindle/models`), fetched if missing. Panics naming where it looked when it cannot
/// be found. `None` only with `KINDLE_SKIP_REAL_MODEL=1`: a test that needs the model begins
/// with `let Some(..) = real_model() else { return };`.
pub fn real_model() -> Option<PathBuf> {
    kindle_fetch::real_model_for_tests()
}

/// [`real_model`]'s path, for the helpers of a test that began by checking [`real_model`].
///
/// # Panics
///
/// As [`real_model`], and when `KINDLE_SKIP_REAL_MODEL=1` is set (the test did not check).
pub fn model_path() -> PathBuf {
    real_model().expect(
        "KINDLE_SKIP_REAL_MODEL=1 is set, but this test needs the real model and did not return \
         when `common::real_model()` gave None",
    )
}

/// The llama.cpp reference outputs shipped in `testdata/reference`.
pub fn reference() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/reference/smollm2-135m-instruct-q4_1.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).expect("reading the reference JSON"))
            .expect("parsing the reference JSON")
    })
}

/// Ids of a JSON array.
pub fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an array of ids")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

/// The reference prompts, by name.
pub fn prompts() -> Vec<(String, &'static Value)> {
    reference()["prompts"]
        .as_object()
        .expect("prompts")
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect()
}
