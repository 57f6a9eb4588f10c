//! A draft model proposing from part of the vocabulary (`ModelDrafter::with_vocab`): what it
//! proposes and the distributions it reports. That the target's output is unchanged is
//! `speculative.rs`'s (greedy and sampled, with every drafter).

mod common;
#[path = "common/hash_model.rs"]
mod hash_model;

use hash_model::HashModel;
use kindle_generate::{Draft, Drafter, ModelDrafter};
use kindle_sampling::SamplerConfig;

/// A draft with part of the vocabulary proposes only ids below the bound or seen in the
/// context, sampled or greedy, while the whole draft proposes others.
#[test]
fn a_draft_with_part_of_the_vocabulary_proposes_from_that_part() {
    let vocab = 40;
    let context: Vec<u32> = vec![1, 30, 2, 31, 3];
    let allowed = |t: u32| t < 4 || context.contains(&t);
    for temperature in [0.0, 1.0] {
        let sampler = || {
            SamplerConfig {
                temperature,
                seed: Some(7),
                ..SamplerConfig::neutral()
            }
            .build()
            .unwrap()
        };
        let mut whole = ModelDrafter::new(HashModel::draft(vocab, 5), 64, sampler()).unwrap();
        let mut part = ModelDrafter::new(HashModel::draft(vocab, 5), 64, sampler())
            .unwrap()
            .with_vocab(4)
            .unwrap();
        let (mut outside, mut proposed, mut from_context) = (0, 0, 0);
        for round in 0..20u32 {
            let mut ctx = context.clone();
            ctx.push(round % 4);
            let mut draft = Draft::default();
            part.propose(&ctx, 6, &mut draft).unwrap();
            assert_eq!(draft.tokens.len(), 6);
            assert_eq!(draft.probs.is_empty(), temperature == 0.0);
            for (i, &t) in draft.tokens.iter().enumerate() {
                assert!(allowed(t), "t={temperature}: proposed {t}");
                from_context += usize::from(t >= 4);
                if let Some(q) = draft.probs.get(i) {
                    let mass: f64 = (0..vocab as u32)
                        .filter(|&u| !allowed(u))
                        .map(|u| q[u as usize])
                        .sum();
                    assert_eq!(mass, 0.0, "t={temperature}: q outside the part");
                }
            }
            let mut draft = Draft::default();
            whole.propose(&ctx, 6, &mut draft).unwrap();
            outside += draft.tokens.iter().filter(|&&t| !allowed(t)).count();
            proposed += draft.tokens.len();
        }
        // The context's ids past the bound are in the part (a quarter of the ids it has).
        assert!(
            from_context * 8 > proposed,
            "t={temperature}: {from_context} of {proposed} proposals from the context"
        );
        assert!(
            outside * 4 > proposed,
            "t={temperature}: the whole draft proposed {outside} of {proposed} outside"
        );
    }
}
