//! A minimum draft length (`Speculator::with_draft_min`, llama.cpp's `--draft-min`): shorter
//! drafts are dropped for plain steps, the output is the target's (greedy token for token,
//! sampled in distribution), and the one combination that would bias it (a sampled draft
//! whose length follows its draws) is refused: a drafter hiding that fails the chi-square test.

mod common;
#[path = "common/gamma.rs"]
mod gamma;
#[path = "common/hash_model.rs"]
mod hash_model;
#[path = "common/three_tokens.rs"]
mod three_tokens;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use common::ByteVocab;
use hash_model::HashModel;
use kindle_generate::{
    Draft, Drafter, GenerateError, GenerationConfig, ModelDrafter, PromptLookup, Session,
    Speculator, generate,
};
use kindle_sampling::{Sampler, SamplerConfig};
use three_tokens::{PROMPT, VOCAB, chi_square_p, exact, sampling_configs};

/// What a drafter proposed and what was verified of it.
#[derive(Default, Debug)]
struct Record {
    /// The length of every proposal.
    proposed: Vec<usize>,
    /// The length of every draft the target verified.
    verified: Vec<usize>,
}

/// A drafter that records its proposals and verifications, optionally hiding that its
/// length follows its draws (the planted error of the companion test).
struct Recording<D> {
    inner: D,
    record: Rc<RefCell<Record>>,
    hide_draws: bool,
}

impl<D: Drafter> Drafter for Recording<D> {
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.inner.propose(context, max, out)?;
        self.record.borrow_mut().proposed.push(out.tokens.len());
        Ok(())
    }

    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.inner.propose_until(context, max, ends, out)?;
        self.record.borrow_mut().proposed.push(out.tokens.len());
        Ok(())
    }

    fn prefill(&mut self, context: &[u32]) -> Result<(), GenerateError> {
        self.inner.prefill(context)
    }

    fn length_follows_draws(&self) -> bool {
        !self.hide_draws && self.inner.length_follows_draws()
    }

    fn accepted(&mut self, proposed: usize, accepted: usize) {
        self.record.borrow_mut().verified.push(proposed);
        self.inner.accepted(proposed, accepted);
    }
}

fn recording<D: Drafter + 'static>(
    inner: D,
    hide_draws: bool,
) -> (Box<dyn Drafter>, Rc<RefCell<Record>>) {
    let record = Rc::new(RefCell::new(Record::default()));
    let drafter = Recording {
        inner,
        record: Rc::clone(&record),
        hide_draws,
    };
    (Box::new(drafter), record)
}

fn text(vocab: usize) -> ByteVocab {
    let pieces: Vec<String> = (0..vocab).map(|i| format!("{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    ByteVocab::from_strs(&refs)
}

/// The tokens of one generation of `target` after `prompt`, drafting with `spec` if given.
fn tokens(
    target: &HashModel,
    prompt: &[u32],
    sampler: &mut Sampler,
    max_new: usize,
    spec: Option<&mut Speculator>,
) -> Result<Vec<u32>, GenerateError> {
    let vocab = text(VOCAB.max(12));
    let config = GenerationConfig::default().with_max_new_tokens(max_new);
    let mut session = Session::new(target, 128)?;
    let mut generator = generate(target, &mut session, prompt, sampler, &vocab, &config)?;
    if let Some(spec) = spec {
        generator = generator.with_speculator(spec)?;
    }
    for event in generator {
        event?;
    }
    Ok(session.tokens().to_vec())
}

/// Greedy: a draft model that stops where it is unsure and prompt lookup both make drafts of
/// every length; with a minimum, every verified draft has at least that many tokens, every
/// shorter proposal gave a plain step, and the output is the plain output.
#[test]
fn shorter_drafts_give_plain_steps_and_greedy_output_is_unchanged() {
    let vocab = 12;
    let target = HashModel::target(vocab);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2, 3, 4, 8, 1, 2];
    let plain = tokens(&target, &prompt, &mut Sampler::greedy(), 60, None).unwrap();
    for min in [2, 3] {
        let model = ModelDrafter::new(HashModel::draft(vocab, 3), 128, Sampler::greedy())
            .unwrap()
            .with_p_min(0.2)
            .unwrap();
        let lookup = PromptLookup::new(3).unwrap().with_min(1).unwrap();
        let drafters = [recording(model, false), recording(lookup, false)];
        for (i, (drafter, record)) in drafters.into_iter().enumerate() {
            let mut spec = Speculator::new(drafter, 6)
                .unwrap()
                .with_draft_min(min)
                .unwrap();
            let drafted = tokens(
                &target,
                &prompt,
                &mut Sampler::greedy(),
                60,
                Some(&mut spec),
            );
            assert_eq!(drafted.unwrap(), plain, "drafter {i}, min {min}");
            let record = record.borrow();
            let stats = spec.stats();
            let short = record
                .proposed
                .iter()
                .filter(|&&n| n > 0 && n < min)
                .count();
            assert!(
                short > 0 && !record.verified.is_empty(),
                "drafter {i}, min {min}: {record:?}"
            );
            assert!(
                record.verified.iter().all(|&n| n >= min),
                "drafter {i}, min {min}: a shorter draft was verified: {record:?}"
            );
            assert_eq!(stats.short_drafts, short, "drafter {i}, min {min}");
            assert_eq!(
                stats.passes,
                record.verified.len(),
                "drafter {i}, min {min}"
            );
            assert_eq!(
                stats.drafted,
                record.verified.iter().sum::<usize>(),
                "drafter {i}, min {min}: the dropped drafts are not counted as drafted"
            );
            assert!(
                stats.plain_steps >= short,
                "drafter {i}, min {min}: {stats:?}"
            );
        }
    }
}

/// How a distribution run drafts.
#[derive(Clone, Copy, Debug)]
enum Drafting {
    /// Prompt lookup (its drafts follow from the context), minimum 2.
    Lookup,
    /// A greedy draft model stopping where it is unsure (its drafts follow from the context),
    /// minimum 2.
    GreedyDraftPMin,
    /// A sampled draft model stopping where it is unsure, minimum 2, with the drafter hiding
    /// that its length follows its draws: the wrong combination the speculator refuses.
    SampledDraftPMinHidden,
}

/// Counts of the first 3 tokens over `n` seeded runs under `config`, with the number of
/// proposals dropped and of drafts verified.
fn empirical(
    config: &SamplerConfig,
    drafting: Drafting,
    n: u64,
) -> (HashMap<[u32; 3], u64>, usize, usize) {
    let target = HashModel::target(VOCAB);
    let mut counts = HashMap::new();
    let (mut short, mut passes) = (0, 0);
    for i in 0..n {
        let seeded = |seed: u64, temperature: Option<f32>| {
            let mut s = SamplerConfig {
                seed: Some(seed),
                temperature: temperature.unwrap_or(config.temperature),
                ..config.clone()
            }
            .build()
            .unwrap();
            s.set_prompt_len(PROMPT.len());
            s
        };
        let draft_model = |temperature| {
            ModelDrafter::new(
                HashModel::draft(VOCAB, 2),
                64,
                seeded((i + 1) << 32, temperature),
            )
            .unwrap()
            .with_p_min(0.35)
            .unwrap()
        };
        let (drafter, _) = match drafting {
            Drafting::Lookup => {
                recording(PromptLookup::new(2).unwrap().with_min(1).unwrap(), false)
            }
            Drafting::GreedyDraftPMin => recording(draft_model(Some(0.0)), false),
            Drafting::SampledDraftPMinHidden => recording(draft_model(None), true),
        };
        let mut spec = Speculator::new(drafter, 3)
            .unwrap()
            .with_draft_min(2)
            .unwrap();
        let t = tokens(&target, &PROMPT, &mut seeded(i, None), 5, Some(&mut spec)).unwrap();
        let t = &t[PROMPT.len()..];
        *counts.entry([t[0], t[1], t[2]]).or_insert(0) += 1;
        short += spec.stats().short_drafts;
        passes += spec.stats().passes;
    }
    (counts, short, passes)
}

const RUNS: u64 = 12_000;

/// Sampled: with drafters whose length follows from the context, dropping the short drafts
/// keeps the plain sampler's distribution over the first three tokens (the chi-square test of
/// `speculative.rs`), at three sampler settings, with drafts both dropped and verified.
#[test]
fn sampled_output_keeps_the_distribution_with_a_minimum() {
    for config in sampling_configs() {
        let expected = exact(&config);
        for drafting in [Drafting::Lookup, Drafting::GreedyDraftPMin] {
            let (counts, short, passes) = empirical(&config, drafting, RUNS);
            let p = chi_square_p(&counts, &expected);
            println!(
                "{drafting:?} t={}: p = {p:.4}, {short} dropped, {passes} verified",
                config.temperature
            );
            assert!(
                short as u64 > RUNS / 10 && passes as u64 > RUNS / 10,
                "{drafting:?}: {short} dropped, {passes} verified in {RUNS} runs"
            );
            assert!(
                p > 0.001,
                "{drafting:?} with {config:?}: chi-square p = {p}"
            );
        }
    }
}

/// The companion: a sampled draft that ends where it is unsure, its short drafts dropped,
/// verifies first tokens after which the draft is confident more often than the draft's own
/// distribution says, and the same test catches the bias. This is why the speculator refuses
/// the combination (next test).
#[test]
fn dropping_a_sampled_drafts_short_drafts_fails_the_same_test() {
    let config = &sampling_configs()[2];
    let expected = exact(config);
    let (counts, short, passes) = empirical(config, Drafting::SampledDraftPMinHidden, RUNS);
    let p = chi_square_p(&counts, &expected);
    println!("hidden draws: p = {p:e}, {short} dropped, {passes} verified");
    assert!(p < 0.001, "the biased combination passed: p = {p}");
}

#[test]
fn bad_settings_are_clear_errors() {
    let lookup = || Box::new(PromptLookup::new(2).unwrap());
    let err = Speculator::new(lookup(), 4)
        .unwrap()
        .with_draft_min(5)
        .err()
        .unwrap();
    assert!(matches!(err, GenerateError::InvalidDraft(_)), "{err}");
    assert!(
        err.to_string().contains("more than the longest draft (4)"),
        "{err}"
    );
    for fine in [0, 1, 4] {
        let spec = Speculator::new(lookup(), 4).unwrap().with_draft_min(fine);
        assert_eq!(spec.unwrap().draft_min(), fine);
    }
    // A sampled target with a sampled draft that ends where it is unsure: refused when the
    // speculator drops short drafts, taken with a minimum of 1 or a greedy target.
    let target = HashModel::target(VOCAB);
    let sampled = || {
        SamplerConfig {
            temperature: 1.0,
            seed: Some(3),
            ..SamplerConfig::neutral()
        }
        .build()
        .unwrap()
    };
    let speculator = |min: usize| {
        let draft = ModelDrafter::new(HashModel::draft(VOCAB, 2), 64, sampled())
            .unwrap()
            .with_p_min(0.35)
            .unwrap();
        Speculator::new(Box::new(draft), 3)
            .unwrap()
            .with_draft_min(min)
            .unwrap()
    };
    let err = tokens(
        &target,
        &PROMPT,
        &mut sampled(),
        5,
        Some(&mut speculator(2)),
    )
    .err()
    .unwrap();
    assert!(matches!(err, GenerateError::InvalidDraft(_)), "{err}");
    assert!(
        err.to_string()
            .contains("would change the output distribution"),
        "{err}"
    );
    assert!(
        tokens(
            &target,
            &PROMPT,
            &mut sampled(),
            5,
            Some(&mut speculator(1))
        )
        .is_ok()
    );
    assert!(
        tokens(
            &target,
            &PROMPT,
            &mut Sampler::greedy(),
            5,
            Some(&mut speculator(2))
        )
        .is_ok()
    );
}
