//! `kindle serve`: an OpenAI-compatible HTTP server with continuous batching.
//!
//! The server is generic over the model ([`kindle_generate::PagedModel`]: a language model
//! whose caches are blocks of one shared pool with a prefix index) and the tokenizer
//! ([`TextCodec`]); `kindle serve` passes the loaded engine and the model's tokenizer, tests
//! pass fakes. One engine thread owns the model and every running sequence and runs steps
//! (one batched forward pass over every running sequence each, sequences joining and leaving
//! between steps; see [`engine`]); axum handlers validate requests, submit jobs through a
//! channel and turn the engine's updates into OpenAI's JSON bodies or server-sent events.
//!
//! Endpoints: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /v1/models/{model}`, `GET /health`, `GET /metrics` (Prometheus), `POST /tokenize`,
//! `POST /detokenize`. Errors have OpenAI's shape (see [`ApiError`]).
//!
//! ```no_run
//! use kindle_generate::PagedModel;
//! use kindle_server::{ServerConfig, ServerError, TextCodec};
//!
//! fn start<M, C>(model: M, codec: C) -> Result<(), ServerError>
//! where
//!     M: PagedModel + Send + 'static,
//!     C: TextCodec,
//! {
//!     let mut config = ServerConfig::new("SmolLM2-135M-Instruct", 4096);
//!     config.parallel = 8;
//!     config.api_key = Some("secret".into());
//!     let addr = "127.0.0.1:8080".parse().expect("an address");
//!     // Blocks until ctrl-c or SIGTERM, then drains.
//!     kindle_server::run(addr, model, None, codec, config, |addr| {
//!         eprintln!("listening on http://{addr}")
//!     })
//! }
//! ```

mod app;
mod codec;
mod config;
pub mod draft;
pub mod engine;
mod error;
mod fields;
pub mod guided;
pub mod inputs;
mod metrics;
mod pool;
mod prompts;
pub mod reasoning;
pub mod request;
mod request_draft;
pub mod response;
mod routes;
mod server;
pub mod tool_stream;
pub mod tools;
mod utility;

pub use codec::{Encoding, TextCodec};
pub use config::ServerConfig;
pub use error::{ApiError, ServerError};
pub use guided::Guided;
pub use metrics::Metrics;
pub use server::{run, serve, shutdown_signal};
