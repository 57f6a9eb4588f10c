//! Project tasks for kindle, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`):
//!
//! - `fetch-model [NAME] [--force]`: fetch a model (by name: `smollm2-135m-instruct`, the
//!   default, or `gemma3-270m`) into the cache folder unless it is there with the right sha256
//!   ([`kindle_fetch`]).
//! - `model-path [NAME]`: print where a model (the default one) is cached.
//! - `tidy`: check the repository's rules ([`tidy`]), printing each violation as
//!   `path:line: rule: message`.
//! - `ci`: what CI runs once the system packages are installed: `fetch-model` for every
//!   fetchable model, `tidy`, then `cargo test --release --workspace`.
//!
//! ```no_run
//! use std::path::Path;
//! use xtask::tidy::{Options, check};
//!
//! for violation in check(Path::new("."), &Options::files_only())? {
//!     println!("{violation}");
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

#![warn(missing_docs)]

pub mod tidy;
