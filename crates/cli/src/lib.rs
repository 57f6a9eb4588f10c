//! Library side of the `kindle` binary: the glue between the crates (the
//! only place a device is chosen) and command-line argument groups.

pub mod chat;
pub mod engine;
pub mod sampling_args;
