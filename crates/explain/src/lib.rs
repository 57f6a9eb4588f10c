//! `kindle explain`: every decoding decision of a run, shown. At each step the sampler's
//! [`Trace`](kindle_sampling::Trace) gives the distribution after each processor of the chain;
//! this crate turns the traces of a run into an [`Explanation`] (the chosen token, its rank
//! and probability, the entropy, how many tokens each stage kept, and the candidates with
//! their probability after every stage), and shows it as a text table ([`table`]), JSON
//! ([`Explanation::to_json`]), pictures ([`plot`]: SVG or PNG) and one HTML page ([`page`]).
//!
//! It drives the model through [`kindle_generate::LanguageModel`] (no Burn), calling the
//! sampler exactly as the generation loop does, so a seeded explanation chooses the tokens
//! `kindle generate` chooses with the same flags.
//!
//! ```
//! use kindle_explain::{ExplainOptions, explain, table};
//! use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};
//! use kindle_sampling::SamplerConfig;
//! use std::convert::Infallible;
//!
//! /// A cache that only counts; a model whose logits favour the next letter.
//! struct Count(usize);
//! impl ModelCache for Count {
//!     fn len(&self) -> usize { self.0 }
//!     fn capacity(&self) -> usize { 64 }
//!     fn truncate(&mut self, len: usize) { self.0 = self.0.min(len) }
//!     fn fork(&self) -> Self { Count(self.0) }
//! }
//! struct Letters;
//! impl LanguageModel for Letters {
//!     type Cache = Count;
//!     type Error = Infallible;
//!     fn vocab_size(&self) -> usize { 4 }
//!     fn context_length(&self) -> usize { 64 }
//!     fn new_cache(&self, _: usize) -> Result<Count, Infallible> { Ok(Count(0)) }
//!     fn forward_last(&self, t: &[u32], c: &mut Count) -> Result<Vec<f32>, Infallible> {
//!         c.0 += t.len();
//!         let mut row = vec![0.0; 4];
//!         row[(*t.last().unwrap() as usize + 1) % 4] = 2.0;
//!         Ok(row)
//!     }
//!     fn forward_all(&self, _: &[u32], _: &mut Count) -> Result<Vec<f32>, Infallible> {
//!         unimplemented!()
//!     }
//! }
//! impl TokenDecoder for Letters {
//!     type Error = Infallible;
//!     fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
//!         Ok(ids.iter().map(|&i| char::from(b'a' + i as u8)).collect())
//!     }
//! }
//!
//! let mut sampler = SamplerConfig { top_k: 2, temperature: 0.5, seed: Some(1), ..SamplerConfig::neutral() }
//!     .build()
//!     .unwrap();
//! let options = ExplainOptions { max_tokens: 3, top: 4, eog_ids: vec![] };
//! let explained = explain(&Letters, &Letters, &[0], &mut sampler, "--top-k 2 --temp 0.5", &options, None)?;
//! let step = &explained.steps[0];
//! assert_eq!(step.stages.iter().find(|s| s.name == "top_k").unwrap().kept, 2);
//! assert!(step.selected_probability > step.probability); // top-k and temperature sharpened it
//! assert!(table::table(&explained).contains("step 1"));
//! assert_eq!(explained.to_json()["steps"].as_array().unwrap().len(), 3);
//! # Ok::<(), kindle_explain::ExplainError>(())
//! ```

mod error;
mod explain;
pub mod page;
pub mod plot;
pub mod table;

pub use error::ExplainError;
pub use explain::{Candidate, ExplainOptions, Explanation, Step, explain};
pub use kindle_sampling::StageSummary;
