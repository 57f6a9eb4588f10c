//! Teacher-forced scoring against a model with known logits.

mod common;

use std::cell::Cell;

use common::{TableModel, naive_log_softmax};
use kindle_generate::{GenerateError, Session, score};

fn model() -> TableModel {
    TableModel {
        table: vec![
            vec![0.0, 2.0, -1.0, 0.5],
            vec![1.0, 1.0, 3.0, 0.0],
            vec![-2.0, 0.0, 0.0, 4.0],
            vec![0.25, 0.5, 0.75, 1.0],
        ],
        context_length: 16,
        forward_all_calls: Cell::new(0),
    }
}

#[test]
fn score_gives_logprobs_argmax_top_and_perplexity() {
    let model = model();
    let mut session = Session::new(&model, 16).unwrap();
    let ids = [0u32, 1, 2, 3, 0];
    let scored = score(&model, &mut session, &ids, 2).unwrap();
    assert_eq!(model.forward_all_calls.get(), 1);
    assert_eq!(session.tokens(), ids);
    assert_eq!(scored.positions.len(), 4);

    let expected_argmax = [1, 2, 3, 3];
    let mut total = 0.0;
    for (i, p) in scored.positions.iter().enumerate() {
        let ls = naive_log_softmax(&model.table[ids[i] as usize]);
        assert_eq!(p.pos, i);
        assert_eq!(p.next_token, ids[i + 1]);
        let want = ls[ids[i + 1] as usize];
        assert!((f64::from(p.logprob) - want).abs() < 1e-6, "pos {i}");
        assert_eq!(p.argmax, expected_argmax[i]);
        assert_eq!(p.top.len(), 2);
        assert_eq!(p.top[0].0, p.argmax);
        assert!((f64::from(p.top[0].1) - ls[p.argmax as usize]).abs() < 1e-6);
        assert!(p.top[0].1 >= p.top[1].1);
        total += want;
    }
    // Row 1 has a tie between ids 0 and 1 for second place: the lower id wins.
    assert_eq!(scored.positions[1].top[1].0, 0);
    assert!((scored.total_logprob - total).abs() < 1e-6);
    let ppl = (-total / 4.0).exp();
    assert!((scored.perplexity - ppl).abs() < 1e-6 * ppl);
    assert!((scored.mean_logprob() - total / 4.0).abs() < 1e-6);
    assert_eq!(scored.argmax_hits(), 3); // the last prediction (3) misses the actual 0
}

#[test]
fn score_clears_the_session_and_checks_inputs() {
    let model = model();
    let mut session = Session::new(&model, 8).unwrap();
    score(&model, &mut session, &[0, 1, 2], 0).unwrap();
    let scored = score(&model, &mut session, &[3, 3], 0).unwrap();
    assert_eq!(session.tokens(), [3, 3]);
    assert_eq!(session.cache().len, 2);
    assert!(scored.positions[0].top.is_empty());

    assert!(matches!(
        score(&model, &mut session, &[1], 1),
        Err(GenerateError::TooFewTokens { tokens: 1 })
    ));
    assert!(matches!(
        score(&model, &mut session, &[0; 9], 1),
        Err(GenerateError::PromptTooLong {
            prompt_tokens: 9,
            context_length: 8
        })
    ));
    assert!(matches!(
        score(&model, &mut session, &[0, 4], 1),
        Err(GenerateError::TokenOutOfVocab {
            token: 4,
            vocab_size: 4
        })
    ));
}

#[test]
fn a_nan_logit_is_an_error_naming_it_not_a_nan_perplexity() {
    let mut model = model();
    model.table[2][1] = f32::NAN;
    let mut session = Session::new(&model, 16).unwrap();
    // Rows of tokens 0 and 1 are fine; token 2's row (position 2) has the NaN.
    let err = score(&model, &mut session, &[0, 1, 2, 3], 1).unwrap_err();
    assert!(
        matches!(err, GenerateError::Sampling { step: 2, .. }),
        "{err:?}"
    );
    assert!(format!("{:?}", err).contains("NonFiniteLogit"), "{err:?}");
    // `-inf` masks a token: still scored.
    model.table[2][1] = f32::NEG_INFINITY;
    assert!(score(&model, &mut session, &[0, 1, 2, 3], 1).is_ok());
}
