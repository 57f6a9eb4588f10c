//! The loop that records every decision, and what it records.

use kindle_generate::{LanguageModel, TokenDecoder};
use kindle_sampling::{History, Sampler, StageSummary, Trace};
use serde_json::{Value, json};

use crate::ExplainError;

/// What to explain.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainOptions {
    /// Most tokens to generate (and explain).
    pub max_tokens: usize,
    /// Candidates listed per step: the most likely raw ones, plus the most likely after the
    /// chain, plus the chosen token.
    pub top: usize,
    /// End-of-generation ids: generation stops after one is chosen.
    pub eog_ids: Vec<u32>,
}

/// One candidate token of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Its text.
    pub text: String,
    /// Its probability in the raw distribution (softmax of the logits).
    pub raw_probability: f64,
    /// Its probability after each stage of the chain, aligned with [`Step::stages`] (0 once
    /// a stage dropped it).
    pub after: Vec<f64>,
}

/// One decoding decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The token chosen (or, in a comparison, the token the first setting chose).
    pub token: u32,
    /// Its text.
    pub text: String,
    /// Its raw probability.
    pub probability: f64,
    /// Its rank in the raw distribution (1: the most likely).
    pub rank: usize,
    /// Its probability after the whole chain (the distribution the selection drew from).
    pub selected_probability: f64,
    /// Entropy of the raw distribution, in nats.
    pub entropy: f64,
    /// Tokens in the vocabulary.
    pub vocab: usize,
    /// Every stage after `raw`, in the order they ran.
    pub stages: Vec<StageSummary>,
    /// The candidates, most likely raw first.
    pub candidates: Vec<Candidate>,
    /// Whether the token was imposed (a comparison's second setting) rather than sampled.
    pub forced: bool,
}

/// A whole explained run.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The sampler settings, as the user wrote them (for titles).
    pub settings: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Explanation {
    /// The text generated.
    pub fn text(&self) -> String {
        self.steps.iter().map(|s| s.text.as_str()).collect()
    }

    /// The tokens generated.
    pub fn tokens(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.token).collect()
    }

    /// The names of the stages that changed something at some step, in chain order (the
    /// columns worth showing), always with the last stage.
    pub fn effective_stages(&self) -> Vec<&'static str> {
        let Some(first) = self.steps.first() else {
            return Vec::new();
        };
        let last = first.stages.len().saturating_sub(1);
        first
            .stages
            .iter()
            .enumerate()
            .filter(|(i, stage)| {
                *i == last
                    || self
                        .steps
                        .iter()
                        .any(|s| s.stages.get(*i).is_some_and(|x| x.changed > 0))
                    || stage.name == "greedy"
            })
            .map(|(_, s)| s.name)
            .collect()
    }

    /// The explanation as JSON: `settings`, `prompt_tokens`, `chain` (the stage names) and
    /// `steps`, each with `token`, `text`, `probability`, `rank`, `selected_probability`,
    /// `entropy`, `stages` (`name`, `kept`, `changed`, `entropy`) and `candidates` (`id`,
    /// `text`, `raw_probability`, `after`: the probability after each stage of `chain`).
    pub fn to_json(&self) -> Value {
        let chain: Vec<&str> = self
            .steps
            .first()
            .map(|s| s.stages.iter().map(|x| x.name).collect())
            .unwrap_or_default();
        json!({
            "settings": self.settings,
            "prompt_tokens": self.prompt_tokens,
            "chain": chain,
            "text": self.text(),
            "steps": self.steps.iter().map(|s| json!({
                "token": s.token,
                "text": s.text,
                "probability": s.probability,
                "rank": s.rank,
                "selected_probability": s.selected_probability,
                "entropy": s.entropy,
                "forced": s.forced,
                "stages": s.stages.iter().map(|x| json!({
                    "name": x.name, "kept": x.kept, "changed": x.changed, "entropy": x.entropy,
                })).collect::<Vec<_>>(),
                "candidates": s.candidates.iter().map(|c| json!({
                    "id": c.id,
                    "text": c.text,
                    "raw_probability": c.raw_probability,
                    "after": c.after,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Generate up to `options.max_tokens` tokens after `prompt`, recording at each step what
/// every stage of `sampler`'s chain did. With `forced`, feed those tokens instead of the
/// sampled ones (to see another setting's distributions along the same text).
///
/// The sampler is called exactly as the generation loop calls it (the raw row, the prompt plus
/// the tokens so far as history, the prompt boundary at `prompt.len()`), so with the same seed
/// the tokens are `kindle generate`'s.
pub fn explain<M: LanguageModel, D: TokenDecoder>(
    model: &M,
    decoder: &D,
    prompt: &[u32],
    sampler: &mut Sampler,
    settings: &str,
    options: &ExplainOptions,
    forced: Option<&[u32]>,
) -> Result<Explanation, ExplainError> {
    if prompt.is_empty() {
        return Err(ExplainError::EmptyPrompt);
    }
    let steps_wanted = forced.map_or(options.max_tokens, |f| f.len().min(options.max_tokens));
    let capacity = prompt.len() + steps_wanted;
    if capacity > model.context_length() {
        return Err(ExplainError::TooLong {
            prompt: prompt.len(),
            max_tokens: steps_wanted,
            context: model.context_length(),
        });
    }
    let model_error = |e: M::Error| ExplainError::Model(Box::new(e));
    let mut cache = model.new_cache(capacity).map_err(model_error)?;
    let mut logits = model
        .forward_last(prompt, &mut cache)
        .map_err(model_error)?;
    let mut history = prompt.to_vec();
    let mut steps = Vec::new();
    for step in 0..steps_wanted {
        let mut row = logits.clone();
        let (sampled, trace) = sampler
            .sample_traced(&mut row, History::new(&history, prompt.len()), options.top)
            .map_err(|source| ExplainError::Sampling { step, source })?;
        let token = forced.map_or(sampled.token, |f| f[step]);
        steps.push(describe(
            &trace,
            token,
            forced.is_some(),
            options.top,
            decoder,
        )?);
        if options.eog_ids.contains(&token) {
            break;
        }
        history.push(token);
        if step + 1 < steps_wanted {
            logits = model
                .forward_last(&[token], &mut cache)
                .map_err(model_error)?;
        }
    }
    Ok(Explanation {
        settings: settings.to_string(),
        prompt_tokens: prompt.len(),
        steps,
    })
}

/// One step's record from its trace (the sampler's [`Trace::summary`], with texts).
fn describe<D: TokenDecoder>(
    trace: &Trace,
    token: u32,
    forced: bool,
    top: usize,
    decoder: &D,
) -> Result<Step, ExplainError> {
    let summary = trace
        .summary(token, top)
        .expect("a trace starts with the raw stage");
    let text = |id: u32| {
        decoder
            .decode(&[id])
            .map_err(|e| ExplainError::Decode(Box::new(e)))
    };
    let candidates = summary
        .candidates
        .into_iter()
        .map(|c| {
            Ok(Candidate {
                id: c.id,
                text: text(c.id)?,
                raw_probability: c.raw_probability,
                after: c.after,
            })
        })
        .collect::<Result<Vec<_>, ExplainError>>()?;
    Ok(Step {
        token,
        text: text(token)?,
        probability: summary.probability,
        // Only a masked token (fed in a comparison) is out of the raw distribution.
        rank: summary.rank.unwrap_or(summary.vocab + 1),
        selected_probability: summary.selected_probability,
        entropy: summary.entropy,
        vocab: summary.vocab,
        stages: summary.stages,
        candidates,
        forced,
    })
}
