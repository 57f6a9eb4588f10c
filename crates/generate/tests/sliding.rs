//! Generation with a sliding cache (llama.cpp's context shift) against a fake model: it goes
//! on past the capacity, the session's tokens mirror what the cache holds, and only
//! `max_new_tokens`, stops and time end it.

mod common;

use std::convert::Infallible;

use common::{ByteVocab, peaked_row};
use kindle_generate::{
    FinishReason, GenerateError, GenerationConfig, LanguageModel, ModelCache, Session,
    generate_batch, generate_to_end,
};
use kindle_sampling::Sampler;

const VOCAB: usize = 16;

/// A cache that holds the actual tokens and, when full, discards like `SlidingWindowCache`:
/// `max(needed, unkept / 2)` tokens right after the first `keep`.
#[derive(Debug, Clone)]
struct SlidingFake {
    tokens: Vec<u32>,
    capacity: usize,
    keep: Option<usize>,
    discarded: usize,
}

impl ModelCache for SlidingFake {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len)
    }
    fn fork(&self) -> Self {
        self.clone()
    }
    fn sliding_keep(&self) -> Option<usize> {
        self.keep
    }
    fn discarded(&self) -> usize {
        self.discarded
    }
}

/// Predicts `(last token + 1) % VOCAB`; its caches slide when `keep` is `Some`.
struct Counting {
    keep: Option<usize>,
    context_length: usize,
}

impl LanguageModel for Counting {
    type Cache = SlidingFake;
    type Error = Infallible;

    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn context_length(&self) -> usize {
        self.context_length
    }
    fn new_cache(&self, capacity: usize) -> Result<SlidingFake, Infallible> {
        Ok(SlidingFake {
            tokens: Vec::new(),
            capacity,
            keep: self.keep,
            discarded: 0,
        })
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut SlidingFake,
    ) -> Result<Vec<f32>, Infallible> {
        let len = cache.tokens.len();
        if len + tokens.len() > cache.capacity {
            let keep = cache.keep.expect("a fixed cache overflowed").min(len);
            let needed = len + tokens.len() - cache.capacity;
            let n = needed.max((len - keep) / 2);
            cache.tokens.drain(keep..keep + n);
            cache.discarded += n;
        }
        cache.tokens.extend_from_slice(tokens);
        let last = *tokens.last().unwrap();
        Ok(peaked_row(VOCAB, (last + 1) % VOCAB as u32))
    }
    fn forward_all(&self, _: &[u32], _: &mut SlidingFake) -> Result<Vec<f32>, Infallible> {
        unimplemented!("generation only")
    }
}

fn vocab() -> ByteVocab {
    ByteVocab::from_strs(&[
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", ".",
    ])
}

#[test]
fn generation_goes_past_the_capacity_and_tokens_mirror_the_cache() {
    let model = Counting {
        keep: Some(2),
        context_length: 8,
    };
    let mut session = Session::new(&model, 8).unwrap();
    assert!(session.slides());
    let config = GenerationConfig::default().with_max_new_tokens(50);
    let mut sampler = Sampler::greedy();
    let prompt = [0, 1, 2];
    let summary = generate_to_end(
        &model,
        &mut session,
        &prompt,
        &mut sampler,
        &vocab(),
        &config,
    )
    .unwrap();
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.generated_tokens, 50);
    let expected: Vec<u32> = (0..50).map(|i| (3 + i) % VOCAB as u32).collect();
    assert_eq!(summary.tokens, expected);
    let cache = session.cache();
    assert!(cache.discarded > 40, "discarded {}", cache.discarded);
    assert_eq!(session.tokens(), &cache.tokens[..]);
    assert!(session.len() <= 8);
    // The kept prefix survives every shift.
    assert_eq!(&session.tokens()[..2], &[0, 1]);
    // The last token fed is the second to last generated (the last one is never fed).
    assert_eq!(session.tokens().last(), Some(&expected[48]));
}

#[test]
fn a_stop_token_still_ends_a_sliding_run() {
    let model = Counting {
        keep: Some(0),
        context_length: 64,
    };
    let mut session = Session::new(&model, 6).unwrap();
    let config = GenerationConfig::default()
        .with_max_new_tokens(1000)
        .with_eog_token_ids([15]);
    let mut sampler = Sampler::greedy();
    let summary =
        generate_to_end(&model, &mut session, &[3], &mut sampler, &vocab(), &config).unwrap();
    // 4, 5, ..., 15: twelve tokens in a context of six.
    assert_eq!(summary.finish_reason, FinishReason::Stop);
    assert_eq!(summary.generated_tokens, 12);
    assert_eq!(session.tokens(), &session.cache().tokens[..]);
}

#[test]
fn the_next_prompt_reuses_what_the_cache_holds_after_a_shift() {
    let model = Counting {
        keep: Some(1),
        context_length: 64,
    };
    let mut session = Session::new(&model, 6).unwrap();
    let config = GenerationConfig::default().with_max_new_tokens(20);
    let mut sampler = Sampler::greedy();
    let first = generate_to_end(
        &model,
        &mut session,
        &[0, 1],
        &mut sampler,
        &vocab(),
        &config,
    )
    .unwrap();
    // Continue from what is held plus the last generated token: only that token is fed.
    let mut prompt = session.tokens().to_vec();
    prompt.push(*first.tokens.last().unwrap());
    let second = generate_to_end(
        &model,
        &mut session,
        &prompt,
        &mut sampler,
        &vocab(),
        &GenerationConfig::default().with_max_new_tokens(3),
    )
    .unwrap();
    assert_eq!(second.timings.prefill_tokens, 1);
    assert_eq!(session.tokens(), &session.cache().tokens[..]);
}

#[test]
fn a_fixed_cache_still_stops_at_the_context() {
    let model = Counting {
        keep: None,
        context_length: 64,
    };
    let mut session = Session::new(&model, 8).unwrap();
    assert!(!session.slides());
    let config = GenerationConfig::default().with_max_new_tokens(50);
    let mut sampler = Sampler::greedy();
    let summary = generate_to_end(
        &model,
        &mut session,
        &[0, 1, 2],
        &mut sampler,
        &vocab(),
        &config,
    )
    .unwrap();
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.generated_tokens, 5);
}

#[test]
fn a_sliding_prompt_must_still_fit_the_context() {
    let model = Counting {
        keep: Some(0),
        context_length: 64,
    };
    let mut session = Session::new(&model, 4).unwrap();
    let mut sampler = Sampler::greedy();
    let err = generate_to_end(
        &model,
        &mut session,
        &[0, 1, 2, 3, 4],
        &mut sampler,
        &vocab(),
        &GenerationConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(err, GenerateError::PromptTooLong { .. }), "{err}");
}

#[test]
fn batched_sliding_sequences_each_mirror_their_cache() {
    let model = Counting {
        keep: Some(2),
        context_length: 64,
    };
    let mut sessions = vec![
        Session::new(&model, 5).unwrap(),
        Session::new(&model, 7).unwrap(),
    ];
    let prompts = vec![vec![0, 1, 2], vec![9]];
    let mut samplers = vec![Sampler::greedy(), Sampler::greedy()];
    let config = GenerationConfig::default().with_max_new_tokens(30);
    let summaries = generate_batch(
        &model,
        &mut sessions,
        &prompts,
        &mut samplers,
        &vocab(),
        &config,
        |_, _| {},
    )
    .unwrap();
    for (summary, session) in summaries.iter().zip(&sessions) {
        assert_eq!(summary.generated_tokens, 30);
        assert_eq!(session.tokens(), &session.cache().tokens[..]);
        assert!(session.cache().discarded > 0);
    }
}
