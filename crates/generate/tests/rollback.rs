//! A cache that cannot roll back far (one whose local layers keep only a ring of their window)
//! empties instead, and the session computes the kept tokens again: a new prompt sharing an
//! old prefix still ends with the cache holding exactly its tokens.

use kindle_generate::{LanguageModel, ModelCache, Session};

/// Keeps its history; a rollback more than `SLACK` tokens behind its furthest write empties it.
#[derive(Debug, Clone)]
struct RingCache {
    tokens: Vec<u32>,
    high: usize,
}

const SLACK: usize = 3;

impl ModelCache for RingCache {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn capacity(&self) -> usize {
        64
    }
    fn truncate(&mut self, len: usize) {
        if len + SLACK < self.high {
            self.tokens.clear();
            self.high = 0;
        } else {
            self.tokens.truncate(len);
        }
    }
    fn fork(&self) -> Self {
        self.clone()
    }
    fn max_pass(&self) -> usize {
        SLACK + 1
    }
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// Logits: the history's length, one-hot (what matters here is what the cache holds).
struct Model;

impl LanguageModel for Model {
    type Cache = RingCache;
    type Error = Never;
    fn vocab_size(&self) -> usize {
        16
    }
    fn context_length(&self) -> usize {
        64
    }
    fn new_cache(&self, _: usize) -> Result<RingCache, Never> {
        Ok(RingCache {
            tokens: Vec::new(),
            high: 0,
        })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut RingCache) -> Result<Vec<f32>, Never> {
        cache.tokens.extend_from_slice(tokens);
        cache.high = cache.high.max(cache.tokens.len());
        let mut row = vec![0.0; 16];
        row[cache.tokens.len() % 16] = 1.0;
        Ok(row)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut RingCache) -> Result<Vec<f32>, Never> {
        self.forward_last(tokens, cache)
    }
}

#[test]
fn a_rollback_past_the_slack_recomputes_the_shared_prefix() {
    let model = Model;
    let mut session = Session::new(&model, 64).unwrap();
    let first: Vec<u32> = (0..12).collect();
    session.prefill(&model, &first).unwrap();
    assert_eq!(session.cache().tokens, first);
    // Shares 10 tokens: a rollback of 2, within the slack: only the rest is fed.
    let mut second = first[..10].to_vec();
    second.extend([7, 7]);
    assert_eq!(session.prefill(&model, &second).unwrap(), 2);
    assert_eq!(session.cache().tokens, second);
    // Shares 4: a rollback of 8, past the slack: the cache empties, everything is fed again.
    let mut third = first[..4].to_vec();
    third.extend([5, 5, 5]);
    assert_eq!(session.prefill(&model, &third).unwrap(), third.len());
    assert_eq!(session.cache().tokens, third);
    assert_eq!(session.tokens(), &third[..]);
}
