//! Drafters for speculative decoding: what proposes the tokens the target model then verifies
//! in one pass ([`Speculator`](crate::Speculator)). Two here: [`PromptLookup`] (n-gram match
//! over the prompt and output) and [`ModelDrafter`] (any model sharing the target's
//! vocabulary: a smaller or more quantized one, or the target's first layers).

use std::ops::Range;

use kindle_sampling::Sampler;
use kindle_sampling::logprobs::{argmax, log_sum_exp};

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

    /// Cut the draft after its first token in `ends` (with its distribution, if any).
    pub fn end_at(&mut self, ends: &[u32]) {
        if let Some(i) = self.tokens.iter().position(|t| ends.contains(t)) {
            self.tokens.truncate(i + 1);
            self.probs.truncate(i + 1);
        }
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

    /// [`propose`](Self::propose), ending the draft after its first token in `ends` (the
    /// generation's end tokens: a draft past one proposes tokens that are never emitted, and
    /// the target verifies each of them). The default proposes, then cuts the draft there; a
    /// drafter whose proposals cost work a token (a draft model) stops drafting there
    /// instead. A draft ended so has a length that follows what it drew, which keeps the
    /// output distribution unless short drafts are dropped: the generation loop passes its end
    /// tokens to a greedy draft, or where no minimum length is set
    /// ([`Speculator::with_draft_min`](crate::Speculator::with_draft_min)), and none
    /// otherwise.
    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.propose(context, max, out)?;
        out.end_at(ends);
        Ok(())
    }

    /// Bring the drafter up to date with `context` (the prompt) before its first proposal: a
    /// draft model runs it through its own cache here. The generator calls this right after
    /// the target's prefill and counts it in the prefill's time, as the prompt's cost it is
    /// (drafting then starts with one token to feed). The default does nothing.
    fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        let _ = context;
        Ok(())
    }

    /// Whether a proposal's length can depend on the tokens it draws (a sampled draft that
    /// ends where it is unsure, [`ModelDrafter::with_p_min`]), not on the context alone:
    /// then drafts may not be dropped by their length
    /// ([`Speculator::with_draft_min`](crate::Speculator::with_draft_min)), which would
    /// change the output distribution. No default: a wrapper must pass its drafter's answer
    /// on.
    fn length_follows_draws(&self) -> bool;

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
/// While the output follows a source (a draft from there was accepted), the lookup keeps its
/// place there: the next draft continues from where the last token sits in the source near
/// the expected position (within two tokens of it, closest first, never before the place),
/// before any n-gram search. An edit breaks the n-grams for up to `n` tokens (a comma added,
/// a word replaced), and meanwhile the n-gram search finds whichever earlier copy of a short
/// phrase is most recent; the place finds the source again at the first token that matches
/// there. A place is dropped after eight tokens without a draft from it, and moves when a
/// draft from elsewhere is accepted.
///
/// [`with_min`]: PromptLookup::with_min
#[derive(Debug, Clone)]
pub struct PromptLookup {
    ngram: usize,
    min: usize,
    /// Where the output is in the source it copies, once a draft from there was accepted.
    place: Option<Place>,
    /// The last proposal: source index of its first token, context length then, and whether
    /// it came from the place.
    pending: Option<(usize, usize, bool)>,
}

/// Tokens either side of the expected position in the source that a copy's place searches
/// for the last token (a few tokens added, dropped or replaced by an edit).
const RESYNC: usize = 2;

/// Tokens after which a place no token was found at is dropped (the output left the source).
const PLACE_EXPIRES: usize = 8;

/// Where a copy is: context index `anchor` corresponds to source index `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    source: usize,
    anchor: usize,
}

impl PromptLookup {
    /// Match n-grams of at most `ngram` tokens (at least 1), down to single tokens.
    pub fn new(ngram: usize) -> Result<Self, GenerateError> {
        if ngram == 0 {
            return Err(GenerateError::InvalidDraft(
                "the lookup n-gram size must be at least 1".into(),
            ));
        }
        Ok(PromptLookup {
            ngram,
            min: 1,
            place: None,
            pending: None,
        })
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

    /// The source index after the last token of `context` at the copy's place: the last token
    /// found within [`RESYNC`] of where the place expects it (the expected index, then one
    /// before, one after, two before, two after), never before the place's source index.
    fn at_place(&mut self, context: &[u32]) -> Option<usize> {
        let place = self.place?;
        let len = context.len();
        // Tokens since the anchor, the anchor's included (the token emitted after a draft).
        let since = len.checked_sub(place.anchor).filter(|&t| t > 0)?;
        if since > PLACE_EXPIRES {
            self.place = None;
            return None;
        }
        let expected = place.source + since - 1;
        let last = context[len - 1];
        let candidates = std::iter::once(expected).chain((1..=RESYNC).flat_map(|d| {
            [expected.checked_sub(d), Some(expected + d)]
                .into_iter()
                .flatten()
        }));
        candidates
            .filter(|&p| p >= place.source && p + 1 < len)
            .find(|&p| context[p] == last)
            .map(|p| p + 1)
    }

    /// The source index after the longest (then most recent) earlier match of the context's
    /// last `min..=ngram` tokens.
    fn by_ngram(&self, context: &[u32]) -> Option<usize> {
        let len = context.len();
        for n in (self.min..=self.ngram.min(len.saturating_sub(1))).rev() {
            let pattern = &context[len - n..];
            // Most recent earlier occurrence that has at least one token after it.
            let found = (0..len - n).rev().find(|&i| &context[i..i + n] == pattern);
            if let Some(i) = found {
                return Some(i + n);
            }
        }
        None
    }
}

impl Drafter for PromptLookup {
    /// No: a lookup draft follows from the context.
    fn length_follows_draws(&self) -> bool {
        false
    }

    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        let len = context.len();
        self.pending = None;
        let placed = self.at_place(context);
        let Some(from) = placed.or_else(|| self.by_ngram(context)) else {
            return Ok(());
        };
        let to = (from + max).min(len);
        out.tokens.extend_from_slice(&context[from..to]);
        self.pending = Some((from, len, placed.is_some()));
        Ok(())
    }

    fn accepted(&mut self, proposed: usize, accepted: usize) {
        // A place is kept until a draft from elsewhere is at least partly accepted.
        if let Some((from, len, placed)) = self.pending.take()
            && proposed > 0
            && (placed || accepted > 0)
        {
            // The token emitted after the accepted ones stands where the next source token
            // does (the bonus token of a full acceptance, or the correction of a rejection).
            self.place = Some(Place {
                source: from + accepted,
                anchor: len + accepted,
            });
        }
    }
}

/// A draft model: a second [`LanguageModel`] with the target's vocabulary (checking that is
/// the caller's job: same size, same token texts), with its own cache and sampler. With a
/// greedy sampler it proposes its own greedy continuation; otherwise it draws each token from
/// its sampler's processed distribution and reports that distribution, which the acceptance
/// rule needs. With [`with_p_min`](Self::with_p_min) it stops drafting where it is unsure.
pub struct ModelDrafter<M: LanguageModel> {
    model: M,
    session: Session<M>,
    sampler: Sampler,
    row: Vec<f64>,
    /// The part of the vocabulary proposed from, when not all of it.
    vocab: Option<VocabPart>,
    /// Stop drafting where the draft's most likely token has a smaller probability (0: never).
    p_min: f32,
}

/// A draft's part of the vocabulary ([`ModelDrafter::with_vocab`]): the ids below `first`
/// and every token seen in the context.
struct VocabPart {
    first: usize,
    /// Whether each id at or past `first` has been seen in a context.
    seen: Vec<bool>,
    /// Those ids, in order.
    extra: Vec<usize>,
    /// The ids as ranges: `0..first`, then the extra ids'.
    ranges: Vec<Range<usize>>,
}

impl VocabPart {
    fn new(first: usize, vocab: usize) -> Self {
        let first = first.min(vocab);
        VocabPart {
            first,
            seen: vec![false; vocab - first],
            extra: Vec::new(),
            ranges: std::iter::once(0..first).collect(),
        }
    }

    /// Take in the tokens of `context` (ids past the vocabulary are the model's to refuse).
    fn see(&mut self, context: &[u32]) {
        let before = self.extra.len();
        for &t in context {
            let t = t as usize;
            if let Some(seen) = t.checked_sub(self.first).and_then(|i| self.seen.get_mut(i))
                && !*seen
            {
                *seen = true;
                let at = self.extra.partition_point(|&e| e < t);
                self.extra.insert(at, t);
            }
        }
        if self.extra.len() > before {
            self.ranges.truncate(1);
            for &id in &self.extra {
                match self.ranges.last_mut() {
                    Some(last) if last.end == id => last.end = id + 1,
                    _ => self.ranges.push(id..id + 1),
                }
            }
        }
    }
}

impl<M: LanguageModel> ModelDrafter<M> {
    /// A drafter over `model` with a cache of `capacity` tokens, drawing with `sampler` (give
    /// it the target's configuration, another seed, and the prompt length).
    pub fn new(model: M, capacity: usize, sampler: Sampler) -> Result<Self, GenerateError> {
        let session = Session::new(&model, capacity)?;
        Ok(Self::with_session(model, session, sampler))
    }

    /// A drafter over `model` continuing `session`, whose cache may already hold the start of
    /// the contexts it will be given (a paged pool's cached prefix,
    /// [`PagedModel::pooled_cache`](crate::PagedModel::pooled_cache)): only the rest is run.
    pub fn with_session(model: M, session: Session<M>, sampler: Sampler) -> Self {
        ModelDrafter {
            model,
            session,
            sampler,
            row: Vec::new(),
            vocab: None,
            p_min: 0.0,
        }
    }

    /// The draft's session: the tokens its cache holds (the context so far and the last
    /// draft's tokens).
    pub fn session(&self) -> &Session<M> {
        &self.session
    }

    /// Propose from part of the vocabulary only: the `first` lowest token ids (a byte-level
    /// BPE vocabulary numbers its tokens in the order their merges were learnt, so the low
    /// ids are the frequent ones) and every token of the context (the prompt and the output,
    /// which a continuation often repeats). The draft's head then computes those logits only
    /// ([`LanguageModel::forward_last_in`]), a fraction of its work where the vocabulary is
    /// large (FR-Spec, Zhao et al. 2025). The output is the target's whatever the draft
    /// proposes (its proposals are verified; a sampled draft reports the distribution it drew
    /// from, zero outside the part); a proposal the part leaves out is a rejection. `first`
    /// is at least 1.
    pub fn with_vocab(mut self, first: usize) -> Result<Self, GenerateError> {
        if first == 0 {
            return Err(GenerateError::InvalidDraft(
                "a draft vocabulary needs at least one token id".into(),
            ));
        }
        self.vocab = Some(VocabPart::new(first, self.model.vocab_size()));
        Ok(self)
    }

    /// Stop a draft at the first position where the draft model's most likely token has a
    /// probability below `p_min` (the softmax of its logits there, before its sampler's
    /// processors; over its [vocabulary part](Self::with_vocab) if it has one), proposing the
    /// tokens before it: llama.cpp's `--draft-p-min`. A draft step the target would likely
    /// reject is then not run, and the pass verifies the confident prefix. The decision is
    /// made from the logits alone, before a token is drawn, so a sampled draft's proposals
    /// keep the distribution they report and the output is the target's either way. `0`
    /// (the default) never stops early; `p_min` is at most 1.
    pub fn with_p_min(mut self, p_min: f32) -> Result<Self, GenerateError> {
        if !(0.0..=1.0).contains(&p_min) {
            return Err(GenerateError::InvalidDraft(format!(
                "a draft's minimum probability must be between 0 and 1, not {p_min}"
            )));
        }
        self.p_min = p_min;
        Ok(self)
    }

    /// The draft model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The last position's logits after `tokens`, over the vocabulary part if there is one.
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, GenerateError> {
        match &self.vocab {
            Some(part) => self
                .session
                .forward_last_in(&self.model, tokens, &part.ranges),
            None => self.session.forward_last(&self.model, tokens),
        }
    }
}

impl<M: LanguageModel> Drafter for ModelDrafter<M> {
    /// Where it samples and ends where it is unsure ([`ModelDrafter::with_p_min`]).
    fn length_follows_draws(&self) -> bool {
        self.p_min > 0.0 && self.sampler.config().temperature != 0.0
    }

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
        self.propose_until(context, max, &[], out)
    }

    /// Stops drafting at an end token: the draft's steps past it would be wasted (at the end of
    /// an answer, up to `max - 1` of them and as many rows of the target's pass).
    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
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
        if let Some(part) = &mut self.vocab {
            part.see(context);
        }
        let mut logits = self.forward(&context[reuse..])?;
        let greedy = self.sampler.config().temperature == 0.0;
        for i in 0..max {
            if self.p_min > 0.0 && top_probability(&logits) < self.p_min {
                break;
            }
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
            if ends.contains(&token) {
                break;
            }
            if i + 1 < max {
                logits = self.forward(&[token])?;
            }
        }
        Ok(())
    }
}

/// The probability of the most likely entry of `logits` under their softmax: 0 for an empty
/// row or one whose entries are all `-inf`, NaN for a row with a NaN or `+inf` (which no
/// minimum stops: the sampler then reports the row).
fn top_probability(logits: &[f32]) -> f32 {
    let Some(top) = argmax(logits) else {
        return 0.0;
    };
    let lse = log_sum_exp(logits);
    if lse == f64::NEG_INFINITY {
        return 0.0;
    }
    (f64::from(logits[top as usize]) - lse).exp() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_probability_is_the_softmax_of_the_largest_logit() {
        let p = top_probability(&[0.0, 2.0_f32.ln(), f32::NEG_INFINITY, 0.0]);
        assert!((p - 0.5).abs() < 1e-7, "{p}");
        assert_eq!(top_probability(&[7.0]), 1.0);
        assert_eq!(top_probability(&[]), 0.0);
        assert_eq!(top_probability(&[f32::NEG_INFINITY; 3]), 0.0);
        assert!(top_probability(&[0.0, f32::NAN]).is_nan());
        assert!(top_probability(&[0.0, f32::INFINITY]).is_nan());
    }

    #[test]
    fn a_vocabulary_part_grows_by_the_context_s_tokens() {
        let ends = |part: &VocabPart| -> Vec<(usize, usize)> {
            part.ranges.iter().map(|r| (r.start, r.end)).collect()
        };
        let mut part = VocabPart::new(4, 20);
        assert_eq!(ends(&part), [(0, 4)]);
        // Ids below the bound, repeats and ids past the vocabulary change nothing.
        part.see(&[1, 9, 7, 8, 30, 9, 2]);
        assert_eq!(ends(&part), [(0, 4), (7, 10)]);
        part.see(&[19, 4, 5]);
        assert_eq!(ends(&part), [(0, 6), (7, 10), (19, 20)]);
        assert_eq!(ends(&VocabPart::new(50, 20)), [(0, 20)]);
    }

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

    /// One proposal of `lookup` after `context`, and what the target then accepted of it.
    fn step(lookup: &mut PromptLookup, context: &[u32], accepted: usize) -> Vec<u32> {
        let mut out = Draft::default();
        lookup.propose(context, 3, &mut out).unwrap();
        if !out.tokens.is_empty() {
            lookup.accepted(out.tokens.len(), accepted.min(out.tokens.len()));
        }
        out.tokens
    }

    #[test]
    fn lookup_keeps_its_place_in_the_source_across_edits() {
        // The source 1..=8, then an unrelated line with a later copy of 5 and of 4 (the
        // n-gram search's most recent single-token matches), then the output.
        let prompt = [1, 2, 3, 4, 5, 6, 7, 8, 50, 5, 60, 4, 61, 99];
        let mut ctx = prompt.to_vec();
        ctx.extend([1, 2]);
        let mut lookup = PromptLookup::new(2).unwrap();
        // `1 2` found: 3 4 5 proposed; the target keeps 3 and replaces 4 by 40.
        assert_eq!(step(&mut lookup, &ctx, 1), [3, 4, 5]);
        ctx.extend([3, 40]);
        // 40 is nowhere: nothing proposed, a plain step gives 5.
        assert_eq!(step(&mut lookup, &ctx, 0), Vec::<u32>::new());
        ctx.push(5);
        // 5 stands where the place expects it (after the replaced 4): 6 7 8, not the 60 99 that
        // followed the most recent 5.
        assert_eq!(step(&mut lookup, &ctx, 3), [6, 7, 8]);
        let mut plain = PromptLookup::new(2).unwrap();
        assert_eq!(step(&mut plain, &ctx, 0), [60, 4, 61]);

        // An insertion: the copy 1 2 3 proposed 4 5 6, the target added 70 before 4.
        let mut ctx = prompt.to_vec();
        ctx.extend([1, 2]);
        let mut lookup = PromptLookup::new(2).unwrap();
        assert_eq!(step(&mut lookup, &ctx, 3), [3, 4, 5]);
        ctx.extend([3, 4, 5, 6]);
        assert_eq!(step(&mut lookup, &ctx, 0), [7, 8, 50]);
        ctx.push(70);
        assert_eq!(step(&mut lookup, &ctx, 0), Vec::<u32>::new());
        ctx.push(7);
        // One token later than expected, found one before: 8 follows.
        assert_eq!(step(&mut lookup, &ctx, 1), [8, 50, 5]);
    }

    #[test]
    fn a_place_expires_and_gives_way_to_an_accepted_match_elsewhere() {
        let prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 99];
        let mut ctx = prompt.to_vec();
        ctx.extend([1, 2]);
        let mut lookup = PromptLookup::new(2).unwrap().with_min(2).unwrap();
        assert_eq!(step(&mut lookup, &ctx, 0), [3, 4, 5]);
        // The target went its own way for nine tokens (nothing proposed meanwhile), then
        // wrote 4: past the place's expiry, and a single token is below the n-gram minimum.
        ctx.extend([80, 81, 82, 83, 84, 85, 86, 87, 88]);
        assert_eq!(step(&mut lookup, &ctx, 0), Vec::<u32>::new());
        ctx.push(4);
        assert_eq!(step(&mut lookup, &ctx, 0), Vec::<u32>::new());

        // A rejected match elsewhere leaves the place; an accepted one moves it.
        let mut ctx = prompt.to_vec();
        ctx.extend([1, 2]);
        let mut lookup = PromptLookup::new(2).unwrap();
        assert_eq!(step(&mut lookup, &ctx, 3), [3, 4, 5]);
        ctx.extend([3, 4, 5, 90]);
        // 90 is not at the place; `5 90` nowhere, `90` neither: nothing.
        assert_eq!(step(&mut lookup, &ctx, 0), Vec::<u32>::new());
        ctx.extend([10, 11]);
        // 11 is beyond the place's reach (expected 8): the n-gram `10 11` from the source.
        assert_eq!(step(&mut lookup, &ctx, 1), [12, 99, 1]);
        ctx.extend([12, 7]);
        // The place moved to after 12: 7 is not within reach there, and `12 7` nowhere: the
        // single 7 of the source.
        assert_eq!(step(&mut lookup, &ctx, 0), [8, 9, 10]);
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
