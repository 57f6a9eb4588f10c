//! Library side of the `kindle` binary: the glue between the crates (the only place a device
//! is chosen), the run plan every command that runs a model shares (and a server can use), the
//! runners of each mode of generation, the output sinks, and command-line argument groups.
//!
//! ```no_run
//! use kindle_cli::plan::{
//!     ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
//!     PromptSettings, RunPlan, RunSettings, SamplingSettings,
//! };
//! use kindle_cli::run::{self, Mode};
//! use kindle_cli::sink::JsonSink;
//!
//! let settings = RunSettings {
//!     model: ModelSettings {
//!         path: "model.gguf".into(),
//!         quantize: None,
//!         engine: Default::default(),
//!     },
//!     prompts: PromptSettings {
//!         inputs: vec![PromptInput::Text("The capital of France is".into())],
//!         encoding: PromptEncoding::Plain { special: false },
//!     },
//!     context: ContextSettings::default(),
//!     sampling: SamplingSettings::default(),
//!     generation: GenerationSettings {
//!         max_tokens: 16,
//!         ..GenerationSettings::default()
//!     },
//! };
//! let plan = RunPlan::build(&settings)?;
//! let mut sink = JsonSink::new(std::io::stdout(), false);
//! let report = run::run(&plan, &Mode::Single, &mut sink)?;
//! assert_eq!(report.sequences.len(), 1);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod chat;
pub mod constrain_args;
pub mod draft;
pub mod engine;
pub mod plan;
pub mod run;
pub mod sampling_args;
pub mod sink;
