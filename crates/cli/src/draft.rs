//! Speculative decoding for a run plan: which drafter the flags ask for, loaded and checked
//! against the target (a draft model must share its vocabulary).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use kindle_generate::{ModelDrafter, PromptLookup, Speculator};
use kindle_model::{ActivationFormat, EngineOptions, KvType};
use kindle_tokenizer::Tokenizer;

use crate::engine;
use crate::plan::RunPlan;

/// Tokens drafted per step when `--draft-max` is not given, and the longest draft (see
/// `kindle_generate`: the server takes the same).
pub use kindle_generate::{DEFAULT_DRAFT_MAX, DEFAULT_LOOKUP_DRAFT_MAX, MAX_DRAFT};

/// The drafting flags as plain values (at most one drafter).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraftSettings {
    /// Most tokens drafted per step (`--draft-max`); `None`: [`DEFAULT_LOOKUP_DRAFT_MAX`] for
    /// prompt lookup, [`DEFAULT_DRAFT_MAX`] for a draft model.
    pub draft_max: Option<usize>,
    /// Prompt lookup with n-grams of up to this many tokens (`--lookup-ngram`).
    pub lookup_ngram: Option<usize>,
    /// The shortest n-gram prompt lookup drafts from (`--lookup-min`); `None`:
    /// [`DEFAULT_LOOKUP_MIN`] (or `--lookup-ngram` when that is smaller).
    pub lookup_min: Option<usize>,
    /// A draft model file (`--draft-model`).
    pub draft_model: Option<PathBuf>,
    /// Draft with the target's first this many layers (`--self-speculative`).
    pub self_speculative: Option<usize>,
    /// Activations of a draft model's kernels (`--draft-activations`); `None`:
    /// [`DEFAULT_DRAFT_ACTIVATIONS`].
    pub draft_activations: Option<ActivationFormat>,
    /// How a draft model's KV cache stores keys and values (`--draft-kv-type`); `None`:
    /// [`DEFAULT_DRAFT_KV_TYPE`] on a CPU device, the target's on a GPU.
    pub draft_kv_type: Option<KvType>,
    /// Adapt the draft length to what the target accepts (`--draft-adaptive`).
    pub draft_adaptive: bool,
    /// Verify only drafts of at least this many tokens (`--draft-min`,
    /// [`Speculator::with_draft_min`]); `None`: every draft.
    pub draft_min: Option<usize>,
    /// A draft model proposes from this many lowest token ids and the context's tokens
    /// (`--draft-vocab`, [`ModelDrafter::with_vocab`]); `None`: from the whole vocabulary.
    pub draft_vocab: Option<usize>,
    /// A draft model stops drafting where its most likely token's probability is below this
    /// (`--draft-p-min`, [`ModelDrafter::with_p_min`]); `None`: it never stops early.
    pub draft_p_min: Option<f32>,
}

/// The shortest n-gram prompt lookup drafts from when `--lookup-min` is not given. Single-token
/// matches were measured to cost more than they win (SmolLM2 Q4_1, the three prompts of
/// `testdata/speculative`, `--lookup-ngram 3 --draft-max 8`, see docs/performance.md).
pub const DEFAULT_LOOKUP_MIN: usize = 2;

/// A draft model's kernel activations when `--draft-activations` is not given: 8-bit, whatever
/// the target's. A draft only proposes tokens; the target verifies each with its own (exact)
/// arithmetic and the speculative rule keeps the output distribution the target's, so the
/// draft may take the faster, approximate kernels (as llama.cpp's drafts always do). Measured
/// on SmolLM2 pairs: a Q4_1 draft token took 7.4 ms with them inside a pair, 10.9 without.
pub const DEFAULT_DRAFT_ACTIVATIONS: ActivationFormat = ActivationFormat::Int8;

/// How a draft model's KV cache stores keys and values on a CPU device when `--draft-kv-type`
/// is not given: int8 (per-token, per-head scales), whatever the target's, for the same reason
/// as [`DEFAULT_DRAFT_ACTIVATIONS`]. A draft step reads its whole cache, a quarter of the
/// bytes as int8, read in place: SmolLM2 Q4_1 as a draft (8-bit activations, two threads, a
/// Zen 4) steps at the same speed either way at depth 128, 3-5% faster at 400 and 9-14% at
/// 700 (docs/performance.md, 2026-11-30 (8)). (On a GPU the draft keeps the target's type,
/// which the device is known to hold.)
pub const DEFAULT_DRAFT_KV_TYPE: KvType = KvType::Int8;

impl DraftSettings {
    /// The most tokens drafted per step: `--draft-max`, else [`DEFAULT_LOOKUP_DRAFT_MAX`] for
    /// prompt lookup and [`DEFAULT_DRAFT_MAX`] for a draft model.
    pub fn draft_max(&self) -> usize {
        let default = if self.lookup_ngram.is_some() {
            DEFAULT_LOOKUP_DRAFT_MAX
        } else {
            DEFAULT_DRAFT_MAX
        };
        self.draft_max.unwrap_or(default)
    }

    /// Whether a drafter is asked for.
    pub fn enabled(&self) -> bool {
        self.lookup_ngram.is_some() || self.draft_model.is_some() || self.self_speculative.is_some()
    }

    /// Check the flags go together (before anything loads).
    pub fn check(&self) -> Result<()> {
        let drafters = [
            self.lookup_ngram.is_some(),
            self.draft_model.is_some(),
            self.self_speculative.is_some(),
        ];
        if drafters.iter().filter(|d| **d).count() > 1 {
            bail!(
                "--lookup-ngram, --draft-model and --self-speculative pick one drafter each: give one"
            );
        }
        match self.draft_max {
            Some(0) => bail!(
                "--draft-max must be at least 1 (a draft of 0 tokens is plain decoding: drop the drafting flags)"
            ),
            Some(k) if k > MAX_DRAFT => bail!(
                "--draft-max {k}: at most {MAX_DRAFT} (a verification pass of 16 rows or more can take a prefill path, whose rows can differ in their last bits from one-token passes)"
            ),
            Some(_) if !self.enabled() => bail!(
                "--draft-max needs a drafter: --lookup-ngram N, --draft-model FILE or --self-speculative L"
            ),
            _ => {}
        }
        match self.draft_min {
            Some(_) if !self.enabled() => bail!(
                "--draft-min needs a drafter: --lookup-ngram N, --draft-model FILE or --self-speculative L"
            ),
            Some(min) if min > self.draft_max() => bail!(
                "--draft-min {min} is more than the longest draft (--draft-max {}): no draft would be verified",
                self.draft_max()
            ),
            _ => {}
        }
        if self.draft_adaptive && !self.enabled() {
            bail!(
                "--draft-adaptive needs a drafter: --lookup-ngram N, --draft-model FILE or --self-speculative L"
            );
        }
        if self.lookup_ngram == Some(0) {
            bail!("--lookup-ngram must be at least 1");
        }
        match (self.lookup_min, self.lookup_ngram) {
            (Some(_), None) => bail!("--lookup-min needs --lookup-ngram N"),
            (Some(min), Some(n)) if min == 0 || min > n => {
                bail!("--lookup-min {min}: between 1 and --lookup-ngram ({n})")
            }
            _ => {}
        }
        if self.self_speculative == Some(0) {
            bail!("--self-speculative must be at least 1 layer");
        }
        let model = self.draft_model.is_some() || self.self_speculative.is_some();
        if self.draft_activations.is_some() && !model {
            bail!(
                "--draft-activations sets a draft model's kernels: it needs --draft-model FILE or --self-speculative L"
            );
        }
        if self.draft_kv_type.is_some() && !model {
            bail!(
                "--draft-kv-type sets a draft model's cache: it needs --draft-model FILE or --self-speculative L"
            );
        }
        match self.draft_vocab {
            Some(_) if !model => bail!(
                "--draft-vocab sets what a draft model proposes from: it needs --draft-model FILE or --self-speculative L"
            ),
            Some(0) => bail!("--draft-vocab must be at least 1 token id"),
            _ => {}
        }
        match self.draft_p_min {
            Some(_) if !model => bail!(
                "--draft-p-min stops a draft model where it is unsure: it needs --draft-model FILE or --self-speculative L"
            ),
            Some(p) if !(0.0..=1.0).contains(&p) => {
                bail!("--draft-p-min {p}: a probability, between 0 and 1")
            }
            _ => {}
        }
        Ok(())
    }

    /// The speculator for one sequence of `plan` (a prompt of `prompt_len` tokens), loading a
    /// draft model with `options` when one is asked for, its cache holding `capacity` tokens
    /// (the target's: `plan.capacity` for one generation, `plan.context` for a conversation);
    /// `None` without a drafter.
    pub fn speculator(
        &self,
        plan: &RunPlan,
        options: &EngineOptions,
        prompt_len: usize,
        capacity: usize,
    ) -> Result<Option<Speculator>> {
        let engine = self.draft_engine(plan, options)?.map(Arc::new);
        self.speculator_with(plan, engine, prompt_len, capacity)
    }

    /// As [`speculator`](Self::speculator), drafting with `engine` (the one
    /// [`draft_engine`](Self::draft_engine) loaded, shared: `kindle bench` makes a speculator
    /// a generation from one load) when the flags ask for a draft model.
    pub fn speculator_with(
        &self,
        plan: &RunPlan,
        engine: Option<Arc<kindle_model::Engine>>,
        prompt_len: usize,
        capacity: usize,
    ) -> Result<Option<Speculator>> {
        self.check()?;
        let draft_max = self.draft_max();
        let drafter: Box<dyn kindle_generate::Drafter> = if let Some(n) = self.lookup_ngram {
            let min = self.lookup_min.unwrap_or(DEFAULT_LOOKUP_MIN.min(n));
            Box::new(PromptLookup::new(n)?.with_min(min)?)
        } else if let Some(engine) = engine {
            let drafter =
                ModelDrafter::new(engine, capacity, self.draft_sampler(plan, prompt_len)?)?;
            let drafter = match self.draft_vocab {
                Some(first) => drafter.with_vocab(first)?,
                None => drafter,
            };
            Box::new(drafter.with_p_min(self.draft_p_min.unwrap_or(0.0))?)
        } else if self.draft_model.is_some() || self.self_speculative.is_some() {
            bail!("the flags ask for a draft model: load it with draft_engine first");
        } else {
            return Ok(None);
        };
        let min = self.draft_min.unwrap_or(0);
        if min > 1 && self.draft_p_min.is_some_and(|p| p > 0.0) && plan.sampler.temperature != 0.0 {
            bail!(
                "--draft-min with --draft-p-min and a sampled run (--temperature {}): the draft's length then depends on the tokens it drew, and dropping the short drafts would change the output distribution; drop one of them, or decode greedily",
                plan.sampler.temperature
            );
        }
        let speculator = Speculator::new(drafter, draft_max)?.with_draft_min(min)?;
        Ok(Some(if self.draft_adaptive {
            speculator.with_adaptive()
        } else {
            speculator
        }))
    }

    /// The draft model the flags ask for (`--draft-model`, checked against `plan`'s target,
    /// or `--self-speculative`: the target's first layers), loaded with `options` but the
    /// draft's activations; `None` without one.
    pub fn draft_engine(
        &self,
        plan: &RunPlan,
        options: &EngineOptions,
    ) -> Result<Option<kindle_model::Engine>> {
        self.check()?;
        let (activations, kv_type) = self.draft_formats(options);
        let options = &EngineOptions {
            activations,
            kv_type,
            ..*options
        };
        if let Some(path) = &self.draft_model {
            let loaded = engine::open(path)
                .with_context(|| format!("loading the draft model {}", path.display()))?;
            check_same_vocab(&plan.loaded.tokenizer, &loaded.tokenizer, path)?;
            let engine = engine::load_model_with(&loaded, options)
                .with_context(|| format!("loading the draft model {}", path.display()))?;
            if engine.llama.config().vocab_size != plan.engine.llama.config().vocab_size {
                bail!(
                    "the draft model {} has {} logits per token, the target {}: they must share a vocabulary",
                    path.display(),
                    engine.llama.config().vocab_size,
                    plan.engine.llama.config().vocab_size
                );
            }
            Ok(Some(engine))
        } else if let Some(layers) = self.self_speculative {
            let mut engine = engine::load_model_with(&plan.loaded, options)?;
            let total = engine.llama.config().n_layers;
            if layers >= total || !engine.llama.truncate_layers(layers) {
                bail!(
                    "--self-speculative {layers}: the draft must use fewer layers than the model's {total}"
                );
            }
            Ok(Some(engine))
        } else {
            Ok(None)
        }
    }

    /// A draft model's kernel activations and KV cache type beside a target loaded with
    /// `options`: the flags', else [`DEFAULT_DRAFT_ACTIVATIONS`] and, on a CPU device,
    /// [`DEFAULT_DRAFT_KV_TYPE`] (on a GPU, the target's KV type).
    pub fn draft_formats(&self, options: &EngineOptions) -> (ActivationFormat, KvType) {
        let kv_type = match self.draft_kv_type {
            Some(kv_type) => kv_type,
            None if options.device.is_host() => DEFAULT_DRAFT_KV_TYPE,
            None => options.kv_type,
        };
        (
            self.draft_activations.unwrap_or(DEFAULT_DRAFT_ACTIVATIONS),
            kv_type,
        )
    }

    /// The draft's sampler: the target's configuration with its own seed.
    fn draft_sampler(&self, plan: &RunPlan, prompt_len: usize) -> Result<kindle_sampling::Sampler> {
        plan.sampler(0x5eed_d4af, prompt_len)
    }
}

/// A draft model must have the target's vocabulary: the same size and the same token texts.
pub fn check_same_vocab(
    target: &Tokenizer,
    draft: &Tokenizer,
    path: &std::path::Path,
) -> Result<()> {
    if target.vocab_size() != draft.vocab_size() {
        bail!(
            "the draft model {} has a vocabulary of {} tokens, the target {}: a draft must share the target's vocabulary",
            path.display(),
            draft.vocab_size(),
            target.vocab_size()
        );
    }
    for id in 0..target.vocab_size() as u32 {
        let (t, d) = (target.id_to_piece(id), draft.id_to_piece(id));
        if t != d {
            bail!(
                "the draft model {} has another vocabulary: token {id} is {:?} in the draft, {:?} in the target",
                path.display(),
                d.unwrap_or(""),
                t.unwrap_or("")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_drafts_four_by_default_a_draft_model_eight_and_the_flag_wins() {
        let lookup = DraftSettings {
            lookup_ngram: Some(3),
            ..DraftSettings::default()
        };
        assert_eq!(lookup.draft_max(), DEFAULT_LOOKUP_DRAFT_MAX);
        assert_eq!(DEFAULT_LOOKUP_DRAFT_MAX, 4);
        let model = DraftSettings {
            draft_model: Some("draft.gguf".into()),
            ..DraftSettings::default()
        };
        assert_eq!(model.draft_max(), DEFAULT_DRAFT_MAX);
        let asked = DraftSettings {
            draft_max: Some(6),
            ..lookup
        };
        assert_eq!(asked.draft_max(), 6);
    }

    /// A draft model takes 8-bit activations and, on a CPU, an int8 cache unless told
    /// otherwise; on a GPU the target's cache type.
    #[test]
    fn a_draft_model_defaults_to_int8_activations_and_cache_on_a_cpu() {
        let cpu = EngineOptions {
            kv_type: KvType::F32,
            ..EngineOptions::default()
        };
        assert!(cpu.device.is_host());
        let default = DraftSettings::default();
        assert_eq!(
            default.draft_formats(&cpu),
            (ActivationFormat::Int8, KvType::Int8)
        );
        let gpu = EngineOptions {
            device: kindle_model::DeviceKind::Wgpu,
            kv_type: KvType::F16,
            ..cpu
        };
        assert_eq!(default.draft_formats(&gpu).1, KvType::F16);
        let asked = DraftSettings {
            draft_activations: Some(ActivationFormat::F32),
            draft_kv_type: Some(KvType::F16),
            ..default
        };
        assert_eq!(
            asked.draft_formats(&cpu),
            (ActivationFormat::F32, KvType::F16)
        );
    }
}
