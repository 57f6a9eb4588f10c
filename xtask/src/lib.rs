//! Project tasks for kindle, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`):
//!
//! - `fetch-model [--force]`: fetch the default model into the cache folder unless it is there
//!   with the right sha256 ([`kindle_fetch`]).
//! - `model-path`: print where the default model is cached.
//! - `tidy`: check the repository's rules ([`tidy`]), printing each violation as
//!   `path:line: rule: message`.
//! - `ci`: what CI runs once the system packages are installed: `fetch-model`, `tidy`, then
//!   `cargo test --release --workspace`.
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
