//! Library side of the `kindle` binary: model fetching and command-line argument groups.

pub mod fetch;
