//! Library side of the `kindle` binary: the command-line argument groups, the glue between
//! the crates (the device is chosen here, as a flag, and opened by `kindle_model::device`),
//! and the chat-template helpers the commands share.
//!
//! ```
//! use clap::Parser;
//! use kindle_cli::engine::DeviceArgs;
//! use kindle_model::{ActivationFormat, DeviceKind};
//!
//! #[derive(Parser)]
//! struct Flags {
//!     #[command(flatten)]
//!     device: DeviceArgs,
//! }
//!
//! let flags = Flags::parse_from(["kindle", "--device", "ndarray", "--activations", "int8"]);
//! let options = flags.device.options();
//! assert_eq!(options.device, DeviceKind::Ndarray);
//! assert_eq!(options.activations, ActivationFormat::Int8);
//! ```

pub mod chat;
pub mod engine;
pub mod sampling_args;
