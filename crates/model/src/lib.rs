//! The Llama-family transformer in Burn for kindle: loading it from GGUF, running it on a
//! device.
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

pub mod device;
pub mod engine;
pub mod error;
pub mod linear;
pub mod llama;
pub mod loader;

pub use device::{DeviceError, DeviceKind, Dtype, OpenDevice};
pub use engine::{Engine, EngineCache, EngineOptions};
pub use error::ModelError;
pub use kindle_kernels::{
    ActivationFormat, KernelOptions, Kernels, MAX_THREADS, RowArithmetic, cpu_summary, gatherings,
    profile, read_bandwidth, set_gathering, simd_cap_name, simd_level,
};
pub use kindle_kv_cache::{
    KvCache, KvCacheConfig, KvStore, KvType, SlidingWindowCache, WINDOW_SLACK, ring_slots,
};
pub use llama::{
    ArchSpec, BatchSequence, Llama, LlamaConfig, LogitsFor, RopeOverrides, RopeScalingKind,
};
pub use loader::{LoadOptions, WeightFormat};
