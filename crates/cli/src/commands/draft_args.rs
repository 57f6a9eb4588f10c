//! The speculative decoding flags of `kindle generate` and `kindle chat`, and the draft model's
//! (`kindle serve` takes those too).

use std::path::PathBuf;

use clap::Args;
use kindle_cli::draft::DraftSettings;
use kindle_cli::engine::activations;
use kindle_model::{ActivationFormat, KvType};

#[derive(Args, Debug, Clone, Default)]
pub struct DraftArgs {
    /// Speculative decoding by prompt lookup: draft the tokens that followed the last N-gram
    /// (N down to 1) where it occurs earlier in the prompt or output
    #[arg(long, value_name = "N")]
    pub lookup_ngram: Option<usize>,
    /// The shortest n-gram prompt lookup drafts from: shorter matches give a plain step
    /// [default: 2, or N when --lookup-ngram N is 1]
    #[arg(long, value_name = "M")]
    pub lookup_min: Option<usize>,
    #[command(flatten)]
    pub model: DraftModelArgs,
    /// Most tokens drafted per step [default: 4 with --lookup-ngram, 8 with a draft model]
    #[arg(long, value_name = "K")]
    pub draft_max: Option<usize>,
    /// Verify only drafts of at least N tokens (llama.cpp's --draft-min): a shorter draft is
    /// dropped for a plain step, where a verification pass costs more than it would win,
    /// unless it ends the answer [default: 0, every draft]
    #[arg(long, value_name = "N")]
    pub draft_min: Option<usize>,
    /// Adapt the draft length: two more tokens after a draft accepted whole (up to
    /// --draft-max), one fewer after a rejection (down to 1)
    #[arg(long)]
    pub draft_adaptive: bool,
}

/// The draft model's flags.
#[derive(Args, Debug, Clone, Default)]
pub struct DraftModelArgs {
    /// Speculative decoding with a draft model sharing the target's vocabulary
    #[arg(long, value_name = "FILE.gguf")]
    pub draft_model: Option<PathBuf>,
    /// Speculative decoding with the target's first L layers (then its norm and head) as draft
    #[arg(long, value_name = "L")]
    pub self_speculative: Option<usize>,
    /// Activations in the draft model's CPU kernels [default: int8: a draft only proposes,
    /// the target verifies every token with its own activations]
    #[arg(long, value_name = "FORMAT", value_parser = activations())]
    pub draft_activations: Option<ActivationFormat>,
    /// How the draft model's KV cache stores keys and values: f32, f16 or int8 [default: int8
    /// on a CPU device (a draft only proposes: its cache is read every step, a quarter of the
    /// bytes), the target's --kv-type on a GPU]
    #[arg(long, value_name = "TYPE")]
    pub draft_kv_type: Option<KvType>,
    /// A draft model proposes from the N lowest token ids and the context's tokens only, and
    /// computes only those logits (a fraction of its head: for a large vocabulary, much of
    /// a small draft's time); the output is unchanged, the acceptance may fall
    #[arg(long, value_name = "N")]
    pub draft_vocab: Option<usize>,
    /// A draft model stops drafting where its most likely next token has a probability below
    /// P (llama.cpp's --draft-p-min): steps the target would likely reject are not run; the
    /// output is unchanged [default: 0, never]
    #[arg(long, value_name = "P")]
    pub draft_p_min: Option<f32>,
}

impl DraftModelArgs {
    /// The flags as plain settings, drafting `draft_max` tokens a step (no prompt lookup).
    pub fn settings(&self, draft_max: Option<usize>) -> DraftSettings {
        DraftSettings {
            draft_max,
            draft_model: self.draft_model.clone(),
            self_speculative: self.self_speculative,
            draft_activations: self.draft_activations,
            draft_kv_type: self.draft_kv_type,
            draft_vocab: self.draft_vocab,
            draft_p_min: self.draft_p_min,
            ..DraftSettings::default()
        }
    }
}

impl DraftArgs {
    /// The flags as plain settings.
    pub fn settings(&self) -> DraftSettings {
        DraftSettings {
            lookup_ngram: self.lookup_ngram,
            lookup_min: self.lookup_min,
            draft_adaptive: self.draft_adaptive,
            draft_min: self.draft_min,
            ..self.model.settings(self.draft_max)
        }
    }
}
