//! A draft ends at a token that ends the generation (`Drafter::propose_until`): a draft
//! model stops drafting there (its steps past it would be wasted, and so would the target's
//! rows for them), other drafters are cut there, and the generation loop passes its end
//! tokens only where a draft's length may follow what it drew.

mod common;
#[path = "common/hash_model.rs"]
mod hash_model;

use std::cell::RefCell;
use std::rc::Rc;

use common::ByteVocab;
use hash_model::HashModel;
use kindle_generate::{
    Draft, Drafter, GenerateError, GenerationConfig, ModelDrafter, PromptLookup, Session,
    Speculator, generate,
};
use kindle_sampling::{Sampler, SamplerConfig};

const VOCAB: usize = 12;
/// The generations' end-of-generation token and stop token.
const EOG: u32 = 11;
const STOP: u32 = 10;

fn sampler(temperature: f32) -> Sampler {
    SamplerConfig {
        temperature,
        seed: Some(5),
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap()
}

/// The first token of `tokens` (past the first) that does not occur before it, and where.
fn fresh_token(tokens: &[u32]) -> (usize, u32) {
    (1..tokens.len())
        .find(|&i| !tokens[..i].contains(&tokens[i]))
        .map(|i| (i, tokens[i]))
        .expect("a draft with two distinct tokens")
}

#[test]
fn a_draft_model_stops_drafting_at_an_end_token() {
    let context = [1, 2, 3, 4, 5, 1, 2];
    for temperature in [0.0, 1.0] {
        let drafter = || ModelDrafter::new(HashModel::draft(VOCAB, 3), 64, sampler(temperature));
        let mut whole = drafter().unwrap();
        let mut full = Draft::default();
        whole.propose(&context, 8, &mut full).unwrap();
        assert_eq!(full.tokens.len(), 8, "t={temperature}");
        // The draft feeds each token but the last through its model.
        assert_eq!(whole.session().len(), context.len() + 7, "t={temperature}");

        let (at, end) = fresh_token(&full.tokens);
        let mut ending = drafter().unwrap();
        let mut cut = Draft::default();
        ending.propose_until(&context, 8, &[end], &mut cut).unwrap();
        assert_eq!(cut.tokens, full.tokens[..=at], "t={temperature}");
        let probs = if temperature == 0.0 { 0 } else { at + 1 };
        assert_eq!(cut.probs.len(), probs, "t={temperature}");
        assert_eq!(cut.probs[..], full.probs[..probs], "t={temperature}");
        // No step past the end token: its model ran `at` drafted tokens, not 7.
        assert_eq!(
            ending.session().len(),
            context.len() + at,
            "t={temperature}"
        );

        // An end token the draft does not propose changes nothing.
        let absent: Vec<u32> = (0..VOCAB as u32)
            .filter(|t| !full.tokens.contains(t))
            .collect();
        let mut other = drafter().unwrap();
        let mut same = Draft::default();
        other
            .propose_until(&context, 8, &absent, &mut same)
            .unwrap();
        assert_eq!(same, full, "t={temperature}");
    }
}

#[test]
fn other_drafters_are_cut_after_the_end_token() {
    // Prompt lookup proposes what followed the last match: 7 8 9 10 11, here cut after 9.
    let context = [1, 2, 3, 7, 8, 9, 10, 11, 5, 1, 2, 3];
    let mut lookup = PromptLookup::new(3).unwrap();
    let mut draft = Draft::default();
    lookup
        .propose_until(&context, 5, &[9, 11], &mut draft)
        .unwrap();
    assert_eq!(draft.tokens, [7, 8, 9]);
    let mut whole = Draft::default();
    lookup.propose_until(&context, 5, &[], &mut whole).unwrap();
    assert_eq!(whole.tokens, [7, 8, 9, 10, 11]);
}

/// Passes the end tokens each proposal was given on to the recording.
struct Ends<D> {
    inner: D,
    seen: Rc<RefCell<Vec<Vec<u32>>>>,
}

impl<D: Drafter> Drafter for Ends<D> {
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.propose_until(context, max, &[], out)
    }

    fn propose_until(
        &mut self,
        context: &[u32],
        max: usize,
        ends: &[u32],
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        self.seen.borrow_mut().push(ends.to_vec());
        self.inner.propose_until(context, max, ends, out)
    }

    fn length_follows_draws(&self) -> bool {
        self.inner.length_follows_draws()
    }
}

/// The end tokens the loop gave each proposal of a generation (with an end-of-generation
/// token [`EOG`] and a stop token [`STOP`]), and its tokens.
fn ends_given(temperature: f32, draft_min: usize) -> (Vec<Vec<u32>>, Vec<u32>) {
    let target = HashModel::target(VOCAB);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let pieces: Vec<String> = (0..VOCAB).map(|i| format!("{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let text = ByteVocab::from_strs(&refs);
    let config = GenerationConfig::default()
        .with_max_new_tokens(40)
        .with_eog_token_ids([EOG])
        .with_stop_token_ids([STOP]);
    let seen = Rc::new(RefCell::new(Vec::new()));
    let drafter = Ends {
        inner: ModelDrafter::new(HashModel::draft(VOCAB, 3), 128, sampler(temperature)).unwrap(),
        seen: Rc::clone(&seen),
    };
    let mut spec = Speculator::new(Box::new(drafter), 4)
        .unwrap()
        .with_draft_min(draft_min)
        .unwrap();
    let mut session = Session::new(&target, 128).unwrap();
    let mut target_sampler = sampler(temperature);
    generate(
        &target,
        &mut session,
        &prompt,
        &mut target_sampler,
        &text,
        &config,
    )
    .unwrap()
    .with_speculator(&mut spec)
    .unwrap()
    .for_each(|event| {
        event.unwrap();
    });
    let tokens = session.tokens()[prompt.len()..].to_vec();
    let seen = seen.borrow().clone();
    (seen, tokens)
}

#[test]
fn the_loop_passes_its_end_tokens_where_a_draft_may_end_early() {
    // Greedy drafts follow the context alone; sampled ones are dropped for their length only
    // below a minimum, so there they are given no end tokens.
    for (temperature, draft_min, given) in [
        (0.0, 0, true),
        (0.0, 3, true),
        (1.0, 0, true),
        (1.0, 1, true),
        (1.0, 3, false),
    ] {
        let (seen, tokens) = ends_given(temperature, draft_min);
        assert!(
            !seen.is_empty(),
            "t={temperature} min {draft_min}: no proposal"
        );
        let want: Vec<u32> = if given { vec![EOG, STOP] } else { Vec::new() };
        assert!(
            seen.iter().all(|ends| *ends == want),
            "t={temperature} min {draft_min}: {seen:?}"
        );
        assert!(!tokens.is_empty(), "t={temperature} min {draft_min}");
    }
}

/// Proposes what a plain generation made after the context: the target's own greedy
/// continuation (the loop cuts it at an end token through the trait's default).
struct Oracle(Vec<u32>);

impl Drafter for Oracle {
    fn propose(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Draft,
    ) -> Result<(), GenerateError> {
        let rest = self.0.get(context.len()..).unwrap_or(&[]);
        out.tokens.extend_from_slice(&rest[..max.min(rest.len())]);
        Ok(())
    }

    fn length_follows_draws(&self) -> bool {
        false
    }
}

/// The whole token sequence of a greedy generation after `prompt` (ending at `eog` if
/// given), drafting with `spec` if given.
fn greedy_run(prompt: &[u32], eog: Option<u32>, spec: Option<&mut Speculator>) -> Vec<u32> {
    let target = HashModel::target(VOCAB);
    let pieces: Vec<String> = (0..VOCAB).map(|i| format!("{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let text = ByteVocab::from_strs(&refs);
    let mut config = GenerationConfig::default().with_max_new_tokens(40);
    if let Some(eog) = eog {
        config = config.with_eog_token_ids([eog]);
    }
    let mut session = Session::new(&target, 128).unwrap();
    let mut greedy = sampler(0.0);
    let mut generator =
        generate(&target, &mut session, prompt, &mut greedy, &text, &config).unwrap();
    if let Some(spec) = spec {
        generator = generator.with_speculator(spec).unwrap();
    }
    generator.for_each(|event| {
        event.unwrap();
    });
    session.tokens().to_vec()
}

/// With a minimum draft length, a greedy draft shorter than it that ends at the answer's end
/// token is verified, not dropped for plain steps one token at a time: the drafter proposes
/// the target's own continuation, four tokens a pass, and the end token is the second or
/// third token of a pass's draft.
#[test]
fn a_short_draft_that_ends_the_answer_is_verified_under_a_minimum() {
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let whole = greedy_run(&prompt, None, None);
    let free = &whole[prompt.len()..];
    // The first token is the prompt pass's; then each pass drafts four and emits five, so the
    // drafts start at 1, 6, 11, ...: an end token one or two past a start leaves a draft of
    // two or three.
    let at = (1..free.len())
        .find(|&i| (1..=2).contains(&((i - 1) % 5)) && !free[..i].contains(&free[i]))
        .expect("a fresh token early in a draft");
    let eog = free[at];
    // (The session does not take the end token in.)
    let plain = greedy_run(&prompt, Some(eog), None);
    assert_eq!(
        plain[prompt.len()..],
        free[..at],
        "the plain answer ends at {eog}"
    );
    let mut spec = Speculator::new(Box::new(Oracle(whole.clone())), 4)
        .unwrap()
        .with_draft_min(4)
        .unwrap();
    let drafted = greedy_run(&prompt, Some(eog), Some(&mut spec));
    assert_eq!(drafted, plain);
    let stats = spec.stats();
    assert_eq!(stats.short_drafts, 0, "{stats:?}");
    assert_eq!(stats.plain_steps, 0, "{stats:?}");
    assert_eq!(
        stats.drafted, at,
        "every token after the first drafted: {stats:?}"
    );
    assert_eq!(stats.accepted, at, "{stats:?}");
}
