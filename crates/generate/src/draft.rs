//! Drafters for speculative decoding: what proposes the tokens the target model then verifies
//! in one pass ([`Speculator`](crate::Speculator)). Two here: [`PromptLookup`] (n-gram match
//! over the prompt and output) and [`ModelDrafter`] (any model sharing the target's
//! vocabulary: a smaller or more quantized one, or the target's first layers).

use kindle_sampling::Sampler;

use crate::error::GenerateError;
use crate::model::LanguageModel;
use crate::session::Session;

/// The tokens a drafter proposes, and the distribution each was drawn from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    /// The proposed continuation, at most the `max` asked for.
    pub tokens: Vec<u32>,
    /// For a drafter that samples: for each proposed token, the distribution it was drawn
    /// from (one probability per vocabulary entry). Empty for a deterministic drafter: each
    /// token then counts as drawn with probability 1 (a one-hot distribution).
    pub probs: Vec<Vec<f64>>,
}

impl Draft {
    /// Empty the draft for reuse.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.probs.clear();
    }
}

/// Proposes tokens to follow a context; the generation loop verifies them with the target
/// model, keeping the output distribution the target's own (see [`Speculator`](crate::Speculator)).
pub trait Drafter {
    /// Fill `out` (cleared by the caller) with up to `max` tokens likely to follow `context`
    /// (the prompt and every token generated so far). Proposing nothing is allowed: the loop
    /// then takes one plain step.
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError>;

    /// Bring the drafter up to date with `context` (the prompt) before its first proposal: a
    /// draft model runs it through its own cache here. The generator calls this right after
    /// the target's prefill and counts it in the prefill's time, as the prompt's cost it is
    /// (drafting then starts with one token to feed). The default does nothing.
    fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        let _ = context;
        Ok(())
    }

    /// How many of the last proposal's `proposed` tokens the target accepted. The default
    /// ignores it.
    fn accepted(&mut self, proposed: usize, accepted: usize) {
        let _ = (proposed, accepted);
    }
}

/// Prompt lookup: find the last `n` tokens of the context earlier in the context (prompt and
/// output), longest `n` first (from `ngram` down to `min`, 1 unless [`with_min`] says
/// otherwise), most recent match first, and propose the tokens that followed it.
/// Deterministic; pays off on output that copies its input (editing, summarising with
/// quotes, refactoring code).
///
/// [`with_min`]: PromptLookup::with_min
#[derive(Debug, Clone)]
pub struct PromptLookup {
    ngram: usize,
    min: usize,
}

impl PromptLookup {
    /// Match n-grams of at most `ngram` tokens (at least 1), down to single tokens.
    pub fn new(ngram: usize) -> Result<Self, GenerateError> {
        if ngram == 0 {
            return Err(GenerateError::InvalidDraft(
                "the lookup n-gram size must be at least 1".into(),
            ));
        }
        Ok(PromptLookup { ngram, min: 1 })
    }

    /// Propose nothing (a plain step) unless at least the last `min` tokens match (1 to
    /// `ngram`): a single matching token predicts its continuation poorly, and a wrong draft
    /// costs a verification pass of its length.
    pub fn with_min(self, min: usize) -> Result<Self, GenerateError> {
        if min == 0 || min > self.ngram {
            return Err(GenerateError::InvalidDraft(format!(
                "the shortest lookup n-gram ({min}) must be between 1 and the longest ({})",
                self.ngram
            )));
        }
        Ok(PromptLookup { min, ..self })
    }
}

impl Drafter for PromptLookup {
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        let len = context.len();
        for n in (self.min..=self.ngram.min(len.saturating_sub(1))).rev() {
            let pattern = &context[len - n..];
            // Most recent earlier occurrence that has at least one token after it.
            let found = (0..len - n).rev().find(|&i| &context[i..i + n] == pattern);
            if let Some(i) = found {
                let from = i + n;
                let to = (from + max).min(len);
                out.tokens.extend_from_slice(&context[from..to]);
                return Ok(());
            }
        }
        Ok(())
    }
}

/// A draft model: a second [`LanguageModel`] with the target's vocabulary (checking that is
/// the caller's job: same size, same token texts), with its own cache and sampler. With a
/// greedy sampler it proposes its own greedy continuation; otherwise it draws each token from
/// its sampler's processed distribution and reports that distribution, which the acceptance
/// rule needs.
pub struct ModelDrafter<M: LanguageModel> {
    model: M,
    session: Session<M>,
    sampler: Sampler,
    row: Vec<f64>,
}

impl<M: LanguageModel> ModelDrafter<M> {
    /// A drafter over `model` with a cache of `capacity` tokens, drawing with `sampler` (give
    /// it the target's configuration, another seed, and the prompt length).
    pub fn new(model: M, capacity: usize, sampler: Sampler) -> Result<Self, GenerateError> {
        let session = Session::new(&model, capacity)?;
        Ok(ModelDrafter {
            model,
            session,
            sampler,
            row: Vec::new(),
        })
    }

    /// The draft model.
    pub fn model(&self) -> &M {
        &self.model
    }
}

impl<M: LanguageModel> Drafter for ModelDrafter<M> {
    fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        if context.is_empty() || context.len() > self.session.context_length(&self.model) {
            // Nothing to run, or more than the draft's context: `propose` declines then.
            return Ok(());
        }
        let reuse = self.session.common_prefix_len(context);
        self.session.truncate(reuse);
        let reuse = self.session.len();
        if reuse < context.len() {
            self.session.forward_last(&self.model, &context[reuse..])?;
        }
        Ok(())
    }

    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        let room = self
            .session
            .context_length(&self.model)
            .saturating_sub(context.len());
        let max = max.min(room);
        if max == 0 || context.is_empty() || self.session.slides() {
            return Ok(());
        }
        // Keep what the cache holds of the context (at least one token is fed, for logits).
        let reuse = self
            .session
            .common_prefix_len(context)
            .min(context.len() - 1);
        self.session.truncate(reuse);
        let reuse = self.session.len();
        let mut logits = self.session.forward_last(&self.model, &context[reuse..])?;
        let greedy = self.sampler.config().temperature == 0.0;
        for i in 0..max {
            let step = i;
            let history = self.session.tokens();
            let token = if greedy {
                self.sampler.sample(&mut logits, history)
            } else {
                self.sampler
                    .processed_distribution(&mut logits, history, &mut self.row)
                    .and_then(|()| self.sampler.draw_from(&self.row))
            }
            .map_err(|source| GenerateError::Sampling { step, source })?;
            out.tokens.push(token);
            if !greedy {
                out.probs.push(self.row.clone());
            }
            if i + 1 < max {
                logits = self.session.forward_last(&self.model, &[token])?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_with_a_minimum_skips_shorter_matches() {
        let mut out = Draft::default();
        let mut lookup = PromptLookup::new(3).unwrap().with_min(2).unwrap();
        // Only the single token 5 matches earlier (followed by 6): no draft with min 2.
        lookup.propose(&[5, 6, 7, 8, 5], 4, &mut out).unwrap();
        assert!(out.tokens.is_empty(), "{:?}", out.tokens);
        // `8 5` matches: propose what followed it.
        lookup.propose(&[8, 5, 6, 7, 8, 5], 4, &mut out).unwrap();
        assert_eq!(out.tokens, [6, 7, 8, 5]);
        assert!(PromptLookup::new(3).unwrap().with_min(4).is_err());
        assert!(PromptLookup::new(3).unwrap().with_min(0).is_err());
    }

    fn lookup(context: &[u32], n: usize, max: usize) -> Vec<u32> {
        let mut out = Draft::default();
        PromptLookup::new(n)
            .unwrap()
            .propose(context, max, &mut out)
            .unwrap();
        out.tokens
    }

    #[test]
    fn lookup_takes_the_longest_then_most_recent_match() {
        // "3 4" occurs at 2 (followed by 5 6) and the bigram "9 3 4" at 6 (followed by 7).
        let ctx = [1, 2, 3, 4, 5, 6, 9, 3, 4, 7, 8, 9, 3, 4];
        assert_eq!(lookup(&ctx, 3, 2), [7, 8]);
        assert_eq!(lookup(&ctx, 2, 3), [7, 8, 9]);
        assert_eq!(lookup(&ctx, 1, 1), [7]);
        // Up to the end of the context, never past it.
        assert_eq!(lookup(&[5, 6, 5], 2, 8), [6, 5]);
        assert_eq!(lookup(&[1, 2, 3], 3, 4), Vec::<u32>::new());
        assert!(PromptLookup::new(0).is_err());
    }
}
