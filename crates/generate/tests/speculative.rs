//! Speculative decoding against fake models with known distributions: greedy output is token
//! for token the plain output, and sampled output has the plain sampler's distribution (a
//! chi-square test against the exact distribution), which a wrong acceptance rule fails.

mod common;
#[path = "common/gamma.rs"]
mod gamma;
#[path = "common/hash_model.rs"]
mod hash_model;
#[path = "common/three_tokens.rs"]
mod three_tokens;

use std::collections::HashMap;
use std::convert::Infallible;

use common::{ByteVocab, HistoryCache};
use gamma::{ln_gamma, upper_gamma_q};
use hash_model::HashModel;
use kindle_generate::{
    AcceptRule, Event, GenerateError, GenerationConfig, LanguageModel, ModelDrafter, PromptLookup,
    Sequence, Session, Speculator, Step, Summary, generate,
};
use kindle_generate::{FinishReason, StopMatch};
use kindle_sampling::{
    ConstraintError, ConstraintStats, LogitsConstraint, Mirostat, Sampler, SamplerConfig,
};
use three_tokens::{PAST_END, PROMPT, VOCAB, chi_square_p, exact, exact_until, sampling_configs};

fn letters(vocab: usize) -> ByteVocab {
    let pieces: Vec<String> = (0..vocab).map(|i| format!("{} ", i)).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    ByteVocab::from_strs(&refs)
}

/// Events as plain data, and the summary.
fn run(
    model: &HashModel,
    prompt: &[u32],
    sampler: &mut Sampler,
    config: &GenerationConfig,
    spec: Option<&mut Speculator>,
) -> (Vec<Event>, Summary, Vec<u32>) {
    let vocab = letters(model.vocab_size());
    let mut session = Session::new(model, 128).unwrap();
    let mut generator = generate(model, &mut session, prompt, sampler, &vocab, config).unwrap();
    if let Some(spec) = spec {
        generator = generator.with_speculator(spec).unwrap();
    }
    let mut events = Vec::new();
    let mut summary = None;
    for event in generator {
        match event.unwrap() {
            Event::Done(s) => summary = Some(s),
            e => events.push(e),
        }
    }
    let tokens = session.tokens().to_vec();
    (events, summary.unwrap(), tokens)
}

fn greedy_with_penalties() -> Sampler {
    SamplerConfig {
        temperature: 0.0,
        repetition_penalty: 1.3,
        presence_penalty: 0.2,
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap()
}

/// The generation settings the greedy identity tests run: logprobs, a stop string, an
/// end-of-generation token, a short limit.
fn greedy_configs() -> Vec<GenerationConfig> {
    vec![
        GenerationConfig::default()
            .with_max_new_tokens(40)
            .with_top_logprobs(3),
        GenerationConfig::default()
            .with_max_new_tokens(40)
            .with_stop_strings(["3 4 "]),
        GenerationConfig::default()
            .with_max_new_tokens(40)
            .with_eog_token_ids([9]),
        GenerationConfig::default().with_max_new_tokens(7),
    ]
}

#[test]
fn greedy_output_is_the_plain_output_with_every_drafter() {
    let vocab = 12;
    let target = HashModel::target(vocab);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let configs = greedy_configs();
    for config in &configs {
        for penalties in [false, true] {
            let sampler = || {
                if penalties {
                    greedy_with_penalties()
                } else {
                    Sampler::greedy()
                }
            };
            let plain = run(&target, &prompt, &mut sampler(), config, None);
            let drafters: Vec<(&str, Speculator)> = vec![
                (
                    "lookup",
                    Speculator::new(Box::new(PromptLookup::new(3).unwrap()), 4).unwrap(),
                ),
                (
                    "same model",
                    Speculator::new(
                        Box::new(ModelDrafter::new(target.clone(), 128, sampler()).unwrap()),
                        5,
                    )
                    .unwrap(),
                ),
                (
                    "far model",
                    Speculator::new(
                        Box::new(
                            ModelDrafter::new(HashModel::draft(vocab, 3), 128, sampler()).unwrap(),
                        ),
                        3,
                    )
                    .unwrap(),
                ),
                (
                    "far model, stopping below p 0.2",
                    Speculator::new(
                        Box::new(
                            ModelDrafter::new(HashModel::draft(vocab, 3), 128, sampler())
                                .unwrap()
                                .with_p_min(0.2)
                                .unwrap(),
                        ),
                        4,
                    )
                    .unwrap(),
                ),
                (
                    "same model, part of the vocabulary",
                    Speculator::new(
                        Box::new(
                            ModelDrafter::new(target.clone(), 128, sampler())
                                .unwrap()
                                .with_vocab(3)
                                .unwrap(),
                        ),
                        4,
                    )
                    .unwrap(),
                ),
            ];
            for (name, mut spec) in drafters {
                let fast = run(&target, &prompt, &mut sampler(), config, Some(&mut spec));
                assert_eq!(plain.0, fast.0, "{name}: events");
                assert_eq!(plain.1.tokens, fast.1.tokens, "{name}");
                assert_eq!(plain.1.text, fast.1.text, "{name}");
                assert_eq!(plain.1.finish_reason, fast.1.finish_reason, "{name}");
                assert_eq!(plain.1.stop, fast.1.stop, "{name}");
                assert_eq!(plain.2, fast.2, "{name}: the session holds the same tokens");
                let stats = spec.stats();
                if plain.1.tokens.len() >= 10 {
                    assert!(stats.passes > 0, "{name}: {stats:?}");
                }
                if name == "same model" {
                    assert_eq!(stats.accepted, stats.drafted, "{name}");
                }
            }
        }
    }
}

/// A toy grammar: a token `t` may not follow `p` when `p + t` is a multiple of 3, every sixth
/// token is forced to be 5, and the output is complete after 20 tokens. `advance` rejects any
/// token the mask did not allow, so a run that appends one fails.
struct NoThrees {
    last: u32,
    steps: usize,
    masks: usize,
    forced: usize,
}

impl NoThrees {
    fn new(last: u32) -> Box<Self> {
        Box::new(NoThrees {
            last,
            steps: 0,
            masks: 0,
            forced: 0,
        })
    }
    fn forcing(&self) -> bool {
        self.steps % 6 == 5
    }
}

impl LogitsConstraint for NoThrees {
    fn mask(&mut self, logits: &mut [f32]) -> Result<Option<u32>, ConstraintError> {
        self.masks += 1;
        for (t, logit) in logits.iter_mut().enumerate() {
            let allowed = if self.forcing() {
                t == 5
            } else {
                !(self.last + t as u32).is_multiple_of(3)
            };
            if !allowed {
                *logit = f32::NEG_INFINITY;
            }
        }
        if self.forcing() {
            self.forced += 1;
            return Ok(Some(5));
        }
        Ok(None)
    }
    fn advance(&mut self, t: u32) -> Result<(), ConstraintError> {
        let allowed = if self.forcing() {
            t == 5
        } else {
            !(self.last + t).is_multiple_of(3)
        };
        if !allowed {
            return Err(format!("token {t} after {} at step {}", self.last, self.steps).into());
        }
        self.last = t;
        self.steps += 1;
        Ok(())
    }
    fn is_complete(&self) -> bool {
        self.steps >= 20
    }
    fn stats(&self) -> ConstraintStats {
        ConstraintStats {
            masks: self.masks,
            forced: self.forced,
            ..ConstraintStats::default()
        }
    }
}

/// A constrained run: tokens, summary, and the session's tokens.
fn run_constrained(
    model: &HashModel,
    prompt: &[u32],
    sampler: &mut Sampler,
    spec: Option<&mut Speculator>,
) -> Result<(Vec<Event>, Summary), GenerateError> {
    let vocab = letters(model.vocab_size());
    let config = GenerationConfig::default().with_max_new_tokens(40);
    let mut session = Session::new(model, 128).unwrap();
    let mut generator = generate(model, &mut session, prompt, sampler, &vocab, &config)?
        .with_constraint(NoThrees::new(*prompt.last().unwrap()));
    if let Some(spec) = spec {
        generator = generator.with_speculator(spec)?;
    }
    let mut events = Vec::new();
    for event in generator {
        match event? {
            Event::Done(s) => return Ok((events, s)),
            e => events.push(e),
        }
    }
    unreachable!("a generation ends with Done")
}

#[test]
fn drafts_are_checked_against_the_constraint() {
    let vocab = 12;
    let target = HashModel::target(vocab);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    for penalties in [false, true] {
        let sampler = || {
            if penalties {
                greedy_with_penalties()
            } else {
                Sampler::greedy()
            }
        };
        let plain = run_constrained(&target, &prompt, &mut sampler(), None).unwrap();
        assert_eq!(plain.1.finish_reason, FinishReason::Stop);
        assert_eq!(plain.1.stop, Some(StopMatch::Constraint));
        assert_eq!(plain.1.tokens.len(), 20);
        let drafters: Vec<(&str, Speculator)> = vec![
            (
                "lookup",
                Speculator::new(Box::new(PromptLookup::new(2).unwrap()), 4).unwrap(),
            ),
            (
                "unconstrained same model",
                Speculator::new(
                    Box::new(ModelDrafter::new(target.clone(), 128, sampler()).unwrap()),
                    5,
                )
                .unwrap(),
            ),
            (
                "far model",
                Speculator::new(
                    Box::new(
                        ModelDrafter::new(HashModel::draft(vocab, 3), 128, sampler()).unwrap(),
                    ),
                    3,
                )
                .unwrap(),
            ),
        ];
        for (name, mut spec) in drafters {
            let fast = run_constrained(&target, &prompt, &mut sampler(), Some(&mut spec))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(plain.0, fast.0, "{name}: events");
            assert_eq!(plain.1.tokens, fast.1.tokens, "{name}");
            assert_eq!(plain.1.stop, fast.1.stop, "{name}");
            let stats = spec.stats();
            assert!(stats.passes > 0, "{name}: {stats:?}");
            // The unconstrained drafter proposes tokens the grammar forbids: some are rejected.
            if name == "unconstrained same model" {
                assert!(stats.accepted < stats.drafted, "{name}: {stats:?}");
            }
        }
    }
    // Sampled: every token still obeys the grammar (advance would fail the run otherwise).
    for seed in 0..20 {
        let config = SamplerConfig {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplerConfig::neutral()
        };
        let mut spec = Speculator::new(
            Box::new(
                ModelDrafter::new(
                    HashModel::draft(vocab, 3),
                    128,
                    config.clone().build().unwrap(),
                )
                .unwrap(),
            ),
            4,
        )
        .unwrap();
        let (_, summary) = run_constrained(
            &target,
            &prompt,
            &mut config.build().unwrap(),
            Some(&mut spec),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(summary.stop, Some(StopMatch::Constraint), "seed {seed}");
    }
}

#[derive(Clone, Copy, Debug)]
enum Drafting {
    Plain,
    Lookup,
    FarModel(AcceptRule),
    /// The far model proposing from ids 0 and 1 and the context's tokens only.
    FarModelPart,
    /// The far model stopping where its most likely token is below 0.35 (some drafts end
    /// early, some before their first token).
    FarModelPMin,
}

/// Counts of the first 3 tokens over `n` seeded runs.
fn empirical(config: &SamplerConfig, drafting: Drafting, n: u64) -> HashMap<[u32; 3], u64> {
    empirical_until(config, drafting, n, None)
}

/// [`empirical`] where `end` (if any) ends each generation: the start holds [`PAST_END`]
/// after it.
fn empirical_until(
    config: &SamplerConfig,
    drafting: Drafting,
    n: u64,
    end: Option<u32>,
) -> HashMap<[u32; 3], u64> {
    let target = HashModel::target(VOCAB);
    let gen_config = GenerationConfig::default()
        .with_max_new_tokens(5)
        .with_eog_token_ids(end);
    let mut counts = HashMap::new();
    let (mut passes, mut drafted, mut plain) = (0, 0, 0);
    for i in 0..n {
        let seeded = |seed: u64| {
            let mut s = SamplerConfig {
                seed: Some(seed),
                ..config.clone()
            }
            .build()
            .unwrap();
            s.set_prompt_len(PROMPT.len());
            s
        };
        let mut sampler = seeded(i);
        let mut spec = match drafting {
            Drafting::Plain => None,
            Drafting::Lookup => {
                Some(Speculator::new(Box::new(PromptLookup::new(2).unwrap()), 3).unwrap())
            }
            Drafting::FarModel(rule) => Some(
                Speculator::new(
                    Box::new(
                        ModelDrafter::new(HashModel::draft(VOCAB, 2), 64, seeded((i + 1) << 32))
                            .unwrap(),
                    ),
                    3,
                )
                .unwrap()
                .with_rule(rule),
            ),
            Drafting::FarModelPart => Some(
                Speculator::new(
                    Box::new(
                        ModelDrafter::new(HashModel::draft(VOCAB, 2), 64, seeded((i + 1) << 32))
                            .unwrap()
                            .with_vocab(2)
                            .unwrap(),
                    ),
                    3,
                )
                .unwrap(),
            ),
            Drafting::FarModelPMin => Some(
                Speculator::new(
                    Box::new(
                        ModelDrafter::new(HashModel::draft(VOCAB, 2), 64, seeded((i + 1) << 32))
                            .unwrap()
                            .with_p_min(0.35)
                            .unwrap(),
                    ),
                    3,
                )
                .unwrap(),
            ),
        };
        let (_, summary, _) = run(&target, &PROMPT, &mut sampler, &gen_config, spec.as_mut());
        let t = |i: usize| summary.tokens.get(i).copied().unwrap_or(PAST_END);
        *counts.entry([t(0), t(1), t(2)]).or_insert(0) += 1;
        if let Some(stats) = spec.as_ref().map(Speculator::stats) {
            (passes, drafted, plain) = (
                passes + stats.passes,
                drafted + stats.drafted,
                plain + stats.plain_steps,
            );
        }
    }
    if matches!(drafting, Drafting::FarModelPMin) && end.is_none() {
        // Some drafts end early (fewer than three tokens a pass), some before their first
        // token (a plain step past each run's first), and many are verified.
        assert!(
            drafted < 3 * passes && plain as u64 > n && passes as u64 > n / 2,
            "{drafting:?}: {passes} passes, {drafted} drafted, {plain} plain steps in {n} runs"
        );
    } else if !matches!(drafting, Drafting::Plain) && end.is_none() {
        // Tokens 2 and 3 (and on) come from verification passes.
        assert!(
            passes as u64 >= n,
            "{drafting:?}: {passes} passes in {n} runs"
        );
    }
    counts
}

#[test]
fn chi_square_helper_is_calibrated() {
    // Q(1, x) = exp(-x); Q(k/2, x/2) for df 2: exp(-x/2).
    assert!((upper_gamma_q(1.0, 2.0) - (-2.0f64).exp()).abs() < 1e-10);
    assert!((upper_gamma_q(2.5, 0.5) - 0.96257).abs() < 1e-4);
    assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-10);
}

const RUNS: u64 = 12_000;

#[test]
fn sampled_output_keeps_the_distribution_with_every_drafter() {
    for config in sampling_configs() {
        let expected = exact(&config);
        for drafting in [
            Drafting::Plain,
            Drafting::Lookup,
            Drafting::FarModel(AcceptRule::Exact),
            Drafting::FarModelPart,
            Drafting::FarModelPMin,
        ] {
            let counts = empirical(&config, drafting, RUNS);
            let p = chi_square_p(&counts, &expected);
            println!("{drafting:?} t={}: p = {p:.4}", config.temperature);
            assert!(
                p > 0.001,
                "{drafting:?} with {config:?}: chi-square p = {p}"
            );
        }
    }
}

/// A draft ends at the generation's end token (`Drafter::propose_until`): a sampled draft's
/// length then follows what it drew, which keeps the distribution (no draft is dropped for
/// its length: `draft_min` is 0 here). Token 3 ends 13-20% of the generations by their
/// third token (by the sampler settings).
#[test]
fn sampled_output_keeps_the_distribution_when_drafts_end_at_an_end_token() {
    let end = 3;
    for config in sampling_configs() {
        let expected = exact_until(&config, Some(end));
        let ended: f64 = expected
            .iter()
            .filter(|(k, _)| k.contains(&PAST_END))
            .map(|(_, p)| p)
            .sum();
        println!(
            "t={}: ended by the third token: {ended:.3}",
            config.temperature
        );
        assert!((0.05..0.95).contains(&ended), "ended early: {ended}");
        for drafting in [
            Drafting::Lookup,
            Drafting::FarModel(AcceptRule::Exact),
            Drafting::FarModelPMin,
        ] {
            let counts = empirical_until(&config, drafting, RUNS, Some(end));
            let p = chi_square_p(&counts, &expected);
            println!(
                "{drafting:?} t={} ending at {end}: p = {p:.4}",
                config.temperature
            );
            assert!(
                p > 0.001,
                "{drafting:?} with {config:?}, ending at {end}: chi-square p = {p}"
            );
        }
    }
}

#[test]
fn a_wrong_acceptance_rule_fails_the_same_test() {
    let config = &sampling_configs()[0];
    let expected = exact(config);
    let counts = empirical(
        config,
        Drafting::FarModel(AcceptRule::ResampleFromTarget),
        RUNS,
    );
    let p = chi_square_p(&counts, &expected);
    println!("wrong rule: p = {p:e}");
    assert!(p < 0.001, "the wrong rule passed: p = {p}");
}

#[test]
fn bad_settings_are_clear_errors() {
    let err = Speculator::new(Box::new(PromptLookup::new(2).unwrap()), 0)
        .err()
        .unwrap();
    assert!(matches!(err, GenerateError::InvalidDraft(_)), "{err}");
    assert!(err.to_string().contains("at least 1"), "{err}");
    let target = HashModel::target(VOCAB);
    let mut sampler = SamplerConfig {
        temperature: 1.0,
        mirostat: Mirostat::V2 { tau: 5.0, eta: 0.1 },
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap();
    let vocab = letters(VOCAB);
    let mut session = Session::new(&target, 64).unwrap();
    let mut spec = Speculator::new(Box::new(PromptLookup::new(2).unwrap()), 2).unwrap();
    let generator = generate(
        &target,
        &mut session,
        &PROMPT,
        &mut sampler,
        &vocab,
        &GenerationConfig::default(),
    )
    .unwrap();
    let err = generator.with_speculator(&mut spec).err().unwrap();
    assert!(err.to_string().contains("mirostat"), "{err}");
    let err = ModelDrafter::new(target, 64, Sampler::greedy())
        .unwrap()
        .with_vocab(0)
        .err()
        .unwrap();
    assert!(err.to_string().contains("at least one token id"), "{err}");
}

/// A [`HashModel`] that records how many tokens each forward pass was fed.
#[derive(Clone)]
struct Recording {
    inner: HashModel,
    feeds: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
}

impl LanguageModel for Recording {
    type Cache = HistoryCache;
    type Error = Infallible;
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn context_length(&self) -> usize {
        self.inner.context_length()
    }
    fn new_cache(&self, capacity: usize) -> Result<HistoryCache, Infallible> {
        self.inner.new_cache(capacity)
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        self.feeds.lock().unwrap().push(tokens.len());
        self.inner.forward_last(tokens, cache)
    }
    fn forward_all(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        self.feeds.lock().unwrap().push(tokens.len());
        self.inner.forward_all(tokens, cache)
    }
}

/// The greedy tokens of the 12-token test prompt on a 12-token target, drafted by `spec`.
fn greedy_tokens(config: &GenerationConfig, spec: Option<&mut Speculator>) -> Vec<u32> {
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let target = HashModel::target(12);
    run(&target, &prompt, &mut Sampler::greedy(), config, spec)
        .1
        .tokens
}

#[test]
fn a_draft_model_takes_the_prompt_in_the_prefill() {
    // The draft runs the prompt once, during the target's prefill (and its time is counted
    // there); each proposal then feeds one or two tokens (the last one, and the last drafted
    // token when a whole draft was accepted), and the output stays the plain output.
    let vocab = 12;
    let draft = Recording {
        inner: HashModel::draft(vocab, 3),
        feeds: Default::default(),
    };
    let feeds = std::sync::Arc::clone(&draft.feeds);
    let config = GenerationConfig::default().with_max_new_tokens(30);
    let drafter = ModelDrafter::new(draft, 128, Sampler::greedy()).unwrap();
    let mut spec = Speculator::new(Box::new(drafter), 4).unwrap();
    assert_eq!(
        greedy_tokens(&config, None),
        greedy_tokens(&config, Some(&mut spec))
    );
    let feeds = feeds.lock().unwrap().clone();
    assert_eq!(
        feeds.first(),
        Some(&12),
        "the prompt in one pass: {feeds:?}"
    );
    assert!(feeds[1..].iter().all(|&n| n <= 2), "{feeds:?}");
    assert!(spec.stats().passes > 0, "{:?}", spec.stats());
    assert!(spec.stats().prefill_time > std::time::Duration::ZERO);
}

#[test]
fn adaptive_draft_length_shrinks_after_rejections_and_keeps_the_output() {
    // A draft that is often wrong: with a fixed length every pass verifies `draft_max`
    // tokens; adaptive, the length falls after rejections, so fewer tokens are drafted for
    // the same output.
    let config = GenerationConfig::default().with_max_new_tokens(40);
    let plain = greedy_tokens(&config, None);
    let spec = |adaptive: bool| {
        let draft = ModelDrafter::new(HashModel::draft(12, 2), 128, Sampler::greedy()).unwrap();
        let spec = Speculator::new(Box::new(draft), 6).unwrap();
        if adaptive { spec.with_adaptive() } else { spec }
    };
    let (mut fixed, mut adaptive) = (spec(false), spec(true));
    assert_eq!(plain, greedy_tokens(&config, Some(&mut fixed)));
    assert_eq!(plain, greedy_tokens(&config, Some(&mut adaptive)));
    let (f, s) = (fixed.stats(), adaptive.stats());
    assert!(
        f.accepted < f.drafted,
        "the draft should be wrong at times: {f:?}"
    );
    assert!(
        (s.drafted as f64 / s.passes as f64) < (f.drafted as f64 / f.passes as f64),
        "adaptive {s:?} against fixed {f:?}"
    );
}

#[test]
fn a_sequence_stepped_from_outside_drafts_with_the_same_output() {
    // As a server steps it: the prompt in batches, each decode step alone.
    let target = HashModel::target(12);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let vocab = letters(12);
    for config in greedy_configs().into_iter().take(2) {
        let plain = run(
            &target,
            &prompt,
            &mut greedy_with_penalties(),
            &config,
            None,
        );
        let session = Session::new(&target, 128).unwrap();
        let lookup = Speculator::new(Box::new(PromptLookup::new(3).unwrap()), 4).unwrap();
        let mut seq = Sequence::new(
            &target,
            session,
            &prompt,
            greedy_with_penalties(),
            &vocab,
            &config,
        )
        .unwrap()
        .with_speculator(lookup)
        .unwrap();
        let mut events = Vec::new();
        loop {
            let event = match seq.speculative_step(&target) {
                Some(event) => event.unwrap(),
                None => match seq.plan() {
                    Step::Feed(tokens) => {
                        let rows = Sequence::forward_batch(&target, &mut [(&tokens[..], &mut seq)]);
                        seq.complete(rows.unwrap().remove(0)).unwrap()
                    }
                    Step::Emit(event) => event,
                    Step::End => break,
                },
            };
            events.extend((!matches!(event, Event::Done(_))).then_some(event));
        }
        assert_eq!(plain.0, events);
        assert_eq!(
            plain.2,
            seq.session().tokens(),
            "the session holds the same tokens"
        );
        let stats = seq.spec_stats().unwrap();
        assert!(stats.passes > 0 && stats.accepted > 0, "{stats:?}");
    }
}
