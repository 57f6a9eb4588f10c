//! Feature unification for kindle's workspace (no code).
//!
//! This crate exists for its `Cargo.toml`: it depends on the crates whose features differ
//! between `cargo run --release` and `cargo test --release --workspace`, with the union of
//! those features, so that both commands share one build. See the manifest for the list and
//! `cargo xtask tidy` for the check that keeps it complete.
//!
//! ```
//! // Nothing to call: depending on the crate is what it is for.
//! ```
