//! A draft model that stops where it is unsure (`ModelDrafter::with_p_min`, llama.cpp's
//! `--draft-p-min`): where its drafts end, and that the target's output is unchanged (greedy
//! here; sampled in `speculative.rs`'s chi-square test, which takes such a draft too).

mod common;
#[path = "common/hash_model.rs"]
mod hash_model;

use common::ByteVocab;
use hash_model::HashModel;
use kindle_generate::{
    Draft, Drafter, GenerationConfig, LanguageModel, ModelDrafter, Session, Speculator, generate,
};
use kindle_sampling::{Sampler, SamplerConfig};

/// The softmax probability of the most likely token of `model` after `context`.
fn top(model: &HashModel, context: &[u32]) -> f64 {
    let row = model.row(context);
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
    1.0 / sum
}

/// Each draft runs while the draft's most likely token has at least the minimum probability
/// and ends at the first position where it has less (or at the most asked for), greedy and
/// sampled; some drafts end early and some run whole, so the minimum is tested both ways.
#[test]
fn a_draft_ends_where_its_most_likely_token_is_below_the_minimum() {
    let vocab = 12;
    let p_min = 0.17;
    let model = HashModel::draft(vocab, 3);
    for temperature in [0.0, 1.0] {
        let sampler = SamplerConfig {
            temperature,
            seed: Some(11),
            ..SamplerConfig::neutral()
        }
        .build()
        .unwrap();
        let mut drafter = ModelDrafter::new(model.clone(), 128, sampler)
            .unwrap()
            .with_p_min(p_min)
            .unwrap();
        let (mut cut, mut whole, mut empty) = (0, 0, 0);
        for round in 0..60u32 {
            let context: Vec<u32> = vec![1, 2, (round / 12) % 12, round % 12];
            let mut draft = Draft::default();
            drafter.propose(&context, 4, &mut draft).unwrap();
            let mut ctx = context.clone();
            for (i, &t) in draft.tokens.iter().enumerate() {
                let p = top(&model, &ctx);
                assert!(
                    p >= f64::from(p_min) - 1e-6,
                    "t={temperature} round {round}: token {i} drafted at p {p}"
                );
                ctx.push(t);
            }
            assert_eq!(
                draft.probs.len(),
                if temperature == 0.0 {
                    0
                } else {
                    draft.tokens.len()
                }
            );
            if draft.tokens.len() < 4 {
                let p = top(&model, &ctx);
                assert!(
                    p < f64::from(p_min) + 1e-6,
                    "t={temperature} round {round}: stopped after {} tokens at p {p}",
                    draft.tokens.len()
                );
                cut += 1;
                empty += usize::from(draft.tokens.is_empty());
            } else {
                whole += 1;
            }
        }
        assert!(
            cut > 5 && whole > 5,
            "t={temperature}: {cut} cut, {whole} whole"
        );
        assert!(
            empty > 0 && empty < cut,
            "t={temperature}: {empty} empty of {cut} cut"
        );
    }
}

/// Greedy output with a stopping draft is the plain output, with fewer tokens drafted a pass
/// than the same draft without the minimum.
#[test]
fn greedy_output_is_unchanged_and_drafts_are_shorter() {
    let vocab = 12;
    let target = HashModel::target(vocab);
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2];
    let pieces: Vec<String> = (0..vocab).map(|i| format!("{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let text = ByteVocab::from_strs(&refs);
    let config = GenerationConfig::default().with_max_new_tokens(60);
    let run = |spec: Option<&mut Speculator>| {
        let mut session = Session::new(&target, 128).unwrap();
        let mut sampler = Sampler::greedy();
        let mut generator =
            generate(&target, &mut session, &prompt, &mut sampler, &text, &config).unwrap();
        if let Some(spec) = spec {
            generator = generator.with_speculator(spec).unwrap();
        }
        generator.for_each(|event| {
            event.unwrap();
        });
        session.tokens().to_vec()
    };
    let plain = run(None);
    let spec = |p_min: f32| {
        let draft = ModelDrafter::new(HashModel::draft(vocab, 3), 128, Sampler::greedy())
            .unwrap()
            .with_p_min(p_min)
            .unwrap();
        Speculator::new(Box::new(draft), 6).unwrap()
    };
    let (mut always, mut sure) = (spec(0.0), spec(0.2));
    assert_eq!(plain, run(Some(&mut always)));
    assert_eq!(plain, run(Some(&mut sure)));
    let (a, s) = (always.stats(), sure.stats());
    assert!(
        s.passes > 0 && s.plain_steps > a.plain_steps,
        "{s:?} against {a:?}"
    );
    let per_pass = |d: usize, p: usize| d as f64 / p as f64;
    assert!(
        per_pass(s.drafted, s.passes) < per_pass(a.drafted, a.passes),
        "with the minimum {s:?}, without {a:?}"
    );
    assert!(
        per_pass(s.accepted, s.drafted) > per_pass(a.accepted, a.drafted),
        "the confident drafts are accepted more often: {s:?} against {a:?}"
    );
}

#[test]
fn a_minimum_outside_0_to_1_is_a_clear_error() {
    for bad in [-0.1, 1.5, f32::NAN] {
        let err = ModelDrafter::new(HashModel::target(6), 64, Sampler::greedy())
            .unwrap()
            .with_p_min(bad)
            .err()
            .unwrap();
        assert!(err.to_string().contains("between 0 and 1"), "{bad}: {err}");
    }
    for fine in [0.0, 0.75, 1.0] {
        let drafter = ModelDrafter::new(HashModel::target(6), 64, Sampler::greedy()).unwrap();
        assert!(drafter.with_p_min(fine).is_ok(), "{fine}");
    }
    // The model is used through the trait, as the generation loop does.
    assert_eq!(HashModel::target(6).vocab_size(), 6);
}
