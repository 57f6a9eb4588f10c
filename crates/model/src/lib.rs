//! GGUF reader, tokenizer and Llama-family transformer in Burn for kindle.
//!
//! ```
//! use burn::prelude::*;
//! use kindle_model::{LlamaConfig, LogitsFor};
//!
//! let device = Device::flex();
//! let config = LlamaConfig::new(32, 16, 2, 4, 2, 24);
//! let model = config.init_random(7, &device);
//! let mut cache = model.new_cache(8);
//! let logits = model.forward(&[1, 2, 3], &mut cache, LogitsFor::Last).unwrap();
//! assert_eq!(logits.len(), 32);
//! assert_eq!(cache.len(), 3);
//! ```

pub mod error;
pub mod gguf;
pub mod kernels;
pub mod linear;
pub mod llama;
pub mod loader;
pub mod quant;
pub mod tokenizer;

pub use error::ModelError;
pub use kindle_kv_cache::{KvCache, KvCacheConfig, KvStore, KvType, SlidingWindowCache};
pub use llama::{BatchSequence, Llama, LlamaConfig, LogitsFor};
pub use loader::{LoadOptions, WeightFormat};
