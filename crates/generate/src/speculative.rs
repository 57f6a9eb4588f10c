//! Speculative decoding: a [`Drafter`] proposes up to `k` tokens, the target model scores them
//! all in one `forward_all` pass, and the acceptance rule keeps the output distribution exactly
//! the target sampler's.
//!
//! The rule (Leviathan et al. 2023, Chen et al. 2023), applied to the *processed*
//! distributions (after the whole processor chain, penalties included, with the history each
//! position would have): for drafted token `d` drawn from `q`, with the target's `p` at that
//! position, accept with probability `min(1, p(d) / q(d))`; on rejection draw from
//! `norm(max(0, p - q))` and stop; when every drafted token is accepted draw one more from the
//! distribution after the last one. Each emitted token is then distributed as `p`. A
//! deterministic drafter (prompt lookup) has `q` one-hot. A greedy sampler needs no rule: the
//! target's choice at each position is computed exactly as without drafting, and drafting
//! stops at the first position where it differs from the draft.

use std::time::Duration;

use kindle_sampling::{ConstraintError, LogitsConstraint, Sampler, SamplingError};

use crate::draft::{Draft, Drafter};
use crate::error::GenerateError;

/// Counters of a speculative generation, for `-v`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecStats {
    /// Verification passes of the target (each scoring the last token and a draft).
    pub passes: usize,
    /// Tokens proposed by the drafter.
    pub drafted: usize,
    /// Proposed tokens accepted.
    pub accepted: usize,
    /// Tokens emitted by verification passes (accepted plus one per pass).
    pub emitted: usize,
    /// One-token target passes taken without a draft (the first decode step, or nothing
    /// proposed, or no room left, or a draft shorter than the minimum).
    pub plain_steps: usize,
    /// Drafts dropped for being shorter than the minimum
    /// ([`Speculator::with_draft_min`]): each gave a plain step instead of a verification
    /// pass (their tokens are not counted as drafted).
    pub short_drafts: usize,
    /// Time in the drafter's proposals.
    pub draft_time: Duration,
    /// Time the drafter took to take in the prompt (part of the prefill's time).
    pub prefill_time: Duration,
    /// Time in verification passes (target forward pass and acceptance rule).
    pub verify_time: Duration,
    /// Time in plain one-token steps (forward pass and sampling).
    pub plain_time: Duration,
}

impl SpecStats {
    /// Accepted / drafted (0 when nothing was drafted).
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// Tokens per target pass over the whole decode (verification and plain passes).
    pub fn tokens_per_pass(&self) -> f64 {
        ratio(
            self.emitted + self.plain_steps,
            self.passes + self.plain_steps,
        )
    }

    /// Estimated speedup over plain decoding: the time plain one-token steps would have taken
    /// for the tokens emitted (at the measured plain step time) over the time taken. `None`
    /// without a plain step to measure or without a verification pass.
    pub fn speedup_estimate(&self) -> Option<f64> {
        if self.plain_steps == 0 || self.passes == 0 {
            return None;
        }
        let step = self.plain_time.as_secs_f64() / self.plain_steps as f64;
        let spent = (self.draft_time + self.verify_time + self.plain_time).as_secs_f64();
        let tokens = (self.emitted + self.plain_steps) as f64;
        (spent > 0.0).then(|| tokens * step / spent)
    }

    /// One line for people: acceptance, tokens per pass, where the time went (drafting and
    /// verification, each also per verification pass), speedup estimate.
    pub fn line(&self) -> String {
        let ms = |t: std::time::Duration| t.as_secs_f64() * 1e3;
        let per_pass = |t| ms(t) / self.passes.max(1) as f64;
        let short = match self.short_drafts {
            0 => String::new(),
            n => format!(" ({n} after a draft under the minimum)"),
        };
        format!(
            "speculative: {} drafted, {} accepted ({:.1}%), {} verification passes + {} plain steps{short}, {:.2} tokens per target pass, draft {:.1} ms ({:.1} a pass; the prompt's {:.1} ms in the prefill), verify {:.1} ms ({:.1} a pass), speedup estimate {}",
            self.drafted,
            self.accepted,
            100.0 * self.acceptance_rate(),
            self.passes,
            self.plain_steps,
            self.tokens_per_pass(),
            ms(self.draft_time),
            per_pass(self.draft_time),
            ms(self.prefill_time),
            ms(self.verify_time),
            per_pass(self.verify_time),
            match self.speedup_estimate() {
                Some(x) => format!("{x:.2}x"),
                None => "n/a".into(),
            }
        )
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Which acceptance rule verification applies. Only [`Exact`](AcceptRule::Exact) keeps the
/// output distribution; the other exists to show that the distribution test can fail.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptRule {
    /// `min(1, p/q)`, then the residual `norm(max(0, p - q))`.
    Exact,
    /// Wrong on purpose: on rejection draw from `p` instead of the residual.
    ResampleFromTarget,
}

/// Tokens drafted per step when a caller does not say (`kindle generate --draft-max`, the
/// server's `kindle_draft_max`).
pub const DEFAULT_DRAFT_MAX: usize = 8;

/// Tokens prompt lookup drafts per step when a caller does not say (`kindle generate
/// --lookup-ngram` without `--draft-max`, the server's `kindle_lookup_ngram` without
/// `kindle_draft_max`). A lookup draft costs nothing to make but a row of the verification
/// pass each, and a copy breaks at every edit: four were faster than eight on seven of the
/// eight measured cases (SmolLM2 Q4_1, the three prompts of `testdata/speculative` and a
/// verbatim copy, `f32` and `int8`, two threads; docs/performance.md, 2026-11-27 (2)).
pub const DEFAULT_LOOKUP_DRAFT_MAX: usize = 4;

/// The longest draft the callers take. A verification pass runs the last token and the draft,
/// and from 16 rows on (`kindle_model`'s `DENSE_PREFILL_ROWS`) a pass can take a prefill path
/// (a dense `f32` matmul without SIMD; with SIMD the CPU kernels' prefill product, `f32` FMA
/// chains over dequantised weights, from `PREFILL_ROWS` = 32 rows), whose rows can differ in
/// their last bits from a one-token pass. Up to 15 rows every row is computed by the same
/// kernels, in the same order, as a one-token pass, so greedy output cannot change.
pub const MAX_DRAFT: usize = 14;

/// A drafter and how far it may draft: hand it to
/// [`Generator::with_speculator`](crate::Generator::with_speculator). Keeps the
/// [`SpecStats`] of the generations it served.
pub struct Speculator {
    drafter: Box<dyn Drafter>,
    pub(crate) draft_max: usize,
    /// The shortest draft verified ([`Speculator::with_draft_min`]; 0 or 1: every draft).
    pub(crate) draft_min: usize,
    /// The draft length of the next step when adaptive ([`Speculator::with_adaptive`]).
    adaptive: Option<usize>,
    rule: AcceptRule,
    pub(crate) timing_step: bool,
    pub(crate) stats: SpecStats,
    pub(crate) draft: Draft,
    p: Vec<f64>,
    residual: Vec<f64>,
    /// For each token the last [`verify`](Self::verify) returned: whether the constraint was
    /// complete after it (the generator checks completion token by token as it emits).
    pub(crate) complete_after: Vec<bool>,
}

impl Speculator {
    /// Draft up to `draft_max` tokens per step (at least 1) with `drafter`.
    pub fn new(drafter: Box<dyn Drafter>, draft_max: usize) -> Result<Self, GenerateError> {
        if draft_max == 0 {
            return Err(GenerateError::InvalidDraft(
                "the draft length must be at least 1 token".into(),
            ));
        }
        Ok(Speculator {
            drafter,
            draft_max,
            draft_min: 0,
            adaptive: None,
            rule: AcceptRule::Exact,
            timing_step: false,
            stats: SpecStats::default(),
            draft: Draft::default(),
            p: Vec::new(),
            residual: Vec::new(),
            complete_after: Vec::new(),
        })
    }

    /// Most tokens drafted per step.
    pub fn draft_max(&self) -> usize {
        self.draft_max
    }

    /// Adapt the draft length as the target accepts or rejects drafts (Hugging Face's
    /// assisted generation schedule): start at `draft_max`, two more tokens after a draft
    /// accepted whole (up to `draft_max`), one fewer after a rejection (down to one, or to
    /// the [minimum](Self::with_draft_min)). Off by
    /// default. A drafter that is often wrong then costs short verification passes instead
    /// of long ones; the output does not depend on it (each draft is verified the same way).
    pub fn with_adaptive(mut self) -> Self {
        self.adaptive = Some(self.draft_max);
        self
    }

    /// Verify only drafts of at least `min` tokens (llama.cpp's `--draft-min`): a shorter
    /// draft is dropped and the step is a plain one-token pass, unless it ends at a token
    /// that ends the generation (a greedy draft, or one whose length follows the context
    /// alone: at the end of an answer there is no longer one to be had), and a step that may
    /// draft fewer than `min` tokens (near the end of the output or the cache) drafts nothing.
    /// Where a verification pass costs much more than a plain step, a one- or two-token draft
    /// is not worth it. `0` and `1` verify every draft; `min` is at most
    /// [`draft_max`](Self::draft_max).
    ///
    /// The output stays the target's: a greedy run's tokens are the target's choices
    /// whatever is verified, and a drafter whose draft length follows from the context alone
    /// (prompt lookup; a draft model that drafts greedily or never stops early) is dropped or
    /// kept before anything random is drawn. A sampled draft that ends where it is unsure
    /// ([`ModelDrafter::with_p_min`](crate::ModelDrafter::with_p_min)) is refused with a
    /// sampled target ([`Generator::with_speculator`](crate::Generator::with_speculator)):
    /// its length depends on the tokens it drew, so dropping the short ones would verify
    /// first tokens after which the draft is confident more often than the draft's own
    /// distribution says, and the acceptance rule would no longer give the target's.
    pub fn with_draft_min(mut self, min: usize) -> Result<Self, GenerateError> {
        if min > self.draft_max {
            return Err(GenerateError::InvalidDraft(format!(
                "the minimum draft length ({min}) is more than the longest draft ({})",
                self.draft_max
            )));
        }
        self.draft_min = min;
        Ok(self)
    }

    /// The shortest draft verified ([`with_draft_min`](Self::with_draft_min)).
    pub fn draft_min(&self) -> usize {
        self.draft_min
    }

    /// Refuse a target sampler the drafts could not be verified for exactly: a sampled one
    /// with a minimum draft length over a drafter whose draft length depends on its draws
    /// ([`with_draft_min`](Self::with_draft_min)).
    pub(crate) fn check_target(&self, sampler: &Sampler) -> Result<(), GenerateError> {
        if self.draft_min > 1
            && sampler.config().temperature != 0.0
            && self.drafter.length_follows_draws()
        {
            return Err(GenerateError::InvalidDraft(
                "a minimum draft length cannot be combined with a sampled draft that ends where it is unsure (a draft minimum probability): the draft's length depends on the tokens it drew, so dropping the short ones would change the output distribution".into(),
            ));
        }
        Ok(())
    }

    /// How many tokens the next step may draft: `draft_max`, or the adaptive length.
    pub(crate) fn draft_len(&self) -> usize {
        self.adaptive.unwrap_or(self.draft_max)
    }

    /// The counters so far.
    pub fn stats(&self) -> &SpecStats {
        &self.stats
    }

    /// Take the first decode step of each generation plain (no draft), to time a one-token
    /// pass for [`SpecStats::speedup_estimate`] (off by default: an extra plain step changes
    /// which random numbers a sampled run draws, not its distribution).
    pub fn with_timing_step(mut self) -> Self {
        self.timing_step = true;
        self
    }

    /// Replace the acceptance rule (tests only: anything but `Exact` is wrong).
    #[doc(hidden)]
    pub fn with_rule(mut self, rule: AcceptRule) -> Self {
        self.rule = rule;
        self
    }

    /// The drafter's [`Drafter::prefill`] with the prompt (timed as drafting too).
    pub(crate) fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        let t0 = std::time::Instant::now();
        let result = self.drafter.prefill(context);
        self.stats.prefill_time += t0.elapsed();
        result
    }

    /// Ask the drafter for up to `max` tokens after `context` into `self.draft`, ending it
    /// after a token of `ends` ([`Drafter::propose_until`]).
    pub(crate) fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
    ) -> Result<(), GenerateError> {
        self.draft.clear();
        self.drafter
            .propose_until(context, max, ends, &mut self.draft)?;
        self.draft.tokens.truncate(max);
        self.draft.end_at(ends);
        if !self.draft.probs.is_empty() && self.draft.probs.len() != self.draft.tokens.len() {
            return Err(GenerateError::InvalidDraft(format!(
                "the drafter gave {} distributions for {} tokens",
                self.draft.probs.len(),
                self.draft.tokens.len()
            )));
        }
        Ok(())
    }

    /// Verify `self.draft` against the target's `rows` (`k + 1` rows of `vocab` logits: after
    /// the last token, then after each drafted token). `history` is the context the rows were
    /// computed with: it ends with the `k` drafted tokens, and row `i` is sampled with the
    /// history up to drafted token `i` (excluded). Returns the tokens to emit: the accepted
    /// drafted tokens and one more (the target's correction or the token after a fully
    /// accepted draft). The drafter hears how many were accepted. A `constraint` masks each
    /// row before the rule and advances with each token returned; `step` (the index of the
    /// first token returned) names the step in errors.
    pub(crate) fn verify(
        &mut self,
        sampler: &mut Sampler,
        rows: &[f32],
        vocab: usize,
        history: &[u32],
        mut constraint: Option<&mut (dyn LogitsConstraint + '_)>,
        step: usize,
    ) -> Result<Vec<u32>, GenerateError> {
        let sampling = |source: SamplingError| GenerateError::Sampling { step, source };
        let constrained = |source: ConstraintError| GenerateError::Constraint { step, source };
        let k = self.draft.tokens.len();
        let base = history.len() - k;
        let greedy = sampler.config().temperature == 0.0;
        let mut out = Vec::with_capacity(k + 1);
        self.complete_after.clear();
        let mut row = Vec::with_capacity(vocab);
        for i in 0..=k {
            row.clear();
            row.extend_from_slice(&rows[i * vocab..(i + 1) * vocab]);
            let hist = &history[..base + i];
            // A constraint masks the row at the state after the tokens accepted so far (a
            // drafted token it forbids has p = 0 and is rejected) and hears each token kept.
            let forced = match constraint.as_deref_mut() {
                Some(c) => c.mask(&mut row).map_err(constrained)?,
                None => None,
            };
            // Keep `t`; true when the constraint is complete after it (nothing may follow).
            let complete_after = &mut self.complete_after;
            let mut keep = |t: u32, out: &mut Vec<u32>| -> Result<bool, GenerateError> {
                let mut complete = false;
                if let Some(c) = constraint.as_deref_mut() {
                    c.advance(t).map_err(constrained)?;
                    complete = c.is_complete();
                }
                complete_after.push(complete);
                out.push(t);
                Ok(complete)
            };
            if greedy || forced.is_some() {
                let t = match forced {
                    Some(t) => t,
                    None => sampler.sample(&mut row, hist).map_err(sampling)?,
                };
                if keep(t, &mut out)? || i == k || t != self.draft.tokens[i] {
                    break;
                }
                continue;
            }
            sampler
                .processed_distribution(&mut row, hist, &mut self.p)
                .map_err(sampling)?;
            if i == k {
                let t = sampler.draw_from(&self.p).map_err(sampling)?;
                keep(t, &mut out)?;
                break;
            }
            let d = self.draft.tokens[i];
            let q = self.draft.probs.get(i);
            let qd = q.map_or(1.0, |q| q[d as usize]);
            let pd = self.p[d as usize];
            // Accept with probability min(1, p/q): u * q < p, u in [0, 1).
            if sampler.uniform() * qd < pd {
                if keep(d, &mut out)? {
                    break;
                }
                continue;
            }
            if self.rule == AcceptRule::ResampleFromTarget {
                let t = sampler.draw_from(&self.p).map_err(sampling)?;
                keep(t, &mut out)?;
                break;
            }
            self.residual.clear();
            match q {
                Some(q) => self
                    .residual
                    .extend(self.p.iter().zip(q).map(|(p, q)| (p - q).max(0.0))),
                None => {
                    self.residual.extend_from_slice(&self.p);
                    self.residual[d as usize] = 0.0;
                }
            }
            // All zero only by rounding (a rejection means p(d) < q(d), so p > q somewhere
            // else): then p itself.
            let from = if self.residual.iter().any(|&r| r > 0.0) {
                &self.residual
            } else {
                &self.p
            };
            let t = sampler.draw_from(from).map_err(sampling)?;
            keep(t, &mut out)?;
            break;
        }
        let accepted = out.len() - 1;
        self.drafter.accepted(k, accepted);
        if let Some(len) = self.adaptive.as_mut() {
            *len = if accepted == k {
                (*len + 2).min(self.draft_max)
            } else {
                len.saturating_sub(1).max(self.draft_min.max(1))
            };
        }
        let stats = &mut self.stats;
        stats.passes += 1;
        stats.drafted += k;
        stats.accepted += accepted;
        stats.emitted += out.len();
        Ok(out)
    }
}

/// A [`Speculator`] borrowed (a [`Generator`](crate::Generator)'s) or owned (a [`Sequence`](crate::Sequence)'s).
pub(crate) enum SpecRef<'a> {
    Borrowed(&'a mut Speculator),
    Owned(Box<Speculator>),
}

impl std::ops::Deref for SpecRef<'_> {
    type Target = Speculator;

    fn deref(&self) -> &Speculator {
        match self {
            SpecRef::Borrowed(s) => s,
            SpecRef::Owned(s) => s,
        }
    }
}

impl std::ops::DerefMut for SpecRef<'_> {
    fn deref_mut(&mut self) -> &mut Speculator {
        match self {
            SpecRef::Borrowed(s) => s,
            SpecRef::Owned(s) => s,
        }
    }
}
