//! A fake model with known distributions for the speculative decoding tests
//! (`crates/generate/tests/speculative.rs`, `draft_vocab.rs`, through `#[path]`, beside
//! `mod common`): its logits are a hash of the context.
#![allow(dead_code)]

use std::convert::Infallible;

use kindle_generate::LanguageModel;

use crate::common::HistoryCache;

/// A fake model whose logits are a hash of the last two tokens and the position, so every
/// context has its own distribution; `far` changes the hash for some contexts (a draft that
/// is sometimes far from the target).
#[derive(Clone)]
pub struct HashModel {
    vocab: usize,
    salt: u64,
    /// Contexts whose hash is 0 mod `far` use `salt` (the draft's difference); 0: never.
    far: u64,
    scale: f32,
}

pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
    x ^ (x >> 33)
}

impl HashModel {
    /// The target.
    pub fn target(vocab: usize) -> Self {
        HashModel {
            vocab,
            salt: 0,
            far: 0,
            scale: 3.0,
        }
    }

    /// Equal to the target on some contexts, unrelated on the others.
    pub fn draft(vocab: usize, far: u64) -> Self {
        HashModel {
            vocab,
            salt: 77,
            far,
            scale: 3.0,
        }
    }

    /// The logits after `context`.
    pub fn row(&self, context: &[u32]) -> Vec<f32> {
        let n = context.len();
        let a = context.get(n.wrapping_sub(1)).copied().unwrap_or(999) as u64;
        let b = context.get(n.wrapping_sub(2)).copied().unwrap_or(999) as u64;
        let key = mix(a * 1_000_003 + b * 7919 + n as u64);
        let salt = if self.far != 0 && key.is_multiple_of(self.far) {
            self.salt
        } else {
            0
        };
        (0..self.vocab as u64)
            .map(|t| {
                let h = mix(key ^ mix(t + 1) ^ mix(salt + 12345));
                (h % 1000) as f32 / 1000.0 * self.scale
            })
            .collect()
    }
}

impl LanguageModel for HashModel {
    type Cache = HistoryCache;
    type Error = Infallible;
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_length(&self) -> usize {
        256
    }
    fn new_cache(&self, capacity: usize) -> Result<HistoryCache, Infallible> {
        Ok(HistoryCache::new(capacity))
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        cache.tokens.extend_from_slice(tokens);
        Ok(self.row(&cache.tokens))
    }
    fn forward_all(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        let mut out = Vec::new();
        for &t in tokens {
            cache.tokens.push(t);
            out.extend(self.row(&cache.tokens));
        }
        Ok(out)
    }
}
