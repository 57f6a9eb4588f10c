//! The distribution tests' common part (`speculative.rs`, `draft_min.rs`): a fake target with
//! known distributions, the exact probability of each 3-token start under a sampler, and
//! Pearson's chi-square p-value of observed starts against it. The including test crate
//! declares `hash_model` and `gamma` at its root.

use std::collections::HashMap;

use kindle_sampling::{PenaltyScope, SamplerConfig};

use crate::gamma::upper_gamma_q;
use crate::hash_model::HashModel;

/// Sampler settings covered by the distribution test: several temperatures, top-k, top-p,
/// min-p and penalties in the chain.
pub fn sampling_configs() -> Vec<SamplerConfig> {
    vec![
        SamplerConfig {
            temperature: 0.7,
            top_k: 5,
            repetition_penalty: 1.5,
            ..SamplerConfig::neutral()
        },
        SamplerConfig {
            temperature: 1.3,
            top_p: 0.8,
            presence_penalty: 0.8,
            frequency_penalty: 0.3,
            penalty_scope: PenaltyScope::PromptAndOutput,
            ..SamplerConfig::neutral()
        },
        SamplerConfig {
            temperature: 1.0,
            min_p: 0.1,
            ..SamplerConfig::neutral()
        },
    ]
}

pub const VOCAB: usize = 6;
pub const PROMPT: [u32; 6] = [0, 1, 2, 0, 1, 3];

/// The exact probability of each 3-token start under `config`, from the processed
/// distributions of the plain sampler.
pub fn exact(config: &SamplerConfig) -> HashMap<[u32; 3], f64> {
    exact_until(config, None)
}

/// What a start holds past an end token (which ends the generation there).
pub const PAST_END: u32 = VOCAB as u32;

/// [`exact`] where `end` (if any) ends the generation: a start holds [`PAST_END`] after it.
pub fn exact_until(config: &SamplerConfig, end: Option<u32>) -> HashMap<[u32; 3], f64> {
    let target = HashModel::target(VOCAB);
    let mut sampler = config.clone().build().unwrap();
    sampler.set_prompt_len(PROMPT.len());
    let mut out = HashMap::new();
    let mut p = Vec::new();
    let mut dist = |ctx: &[u32], p: &mut Vec<f64>| {
        let mut row = target.row(ctx);
        sampler.processed_distribution(&mut row, ctx, p).unwrap();
        p.clone()
    };
    let mut ctx = PROMPT.to_vec();
    let p1 = dist(&ctx, &mut p);
    for a in 0..VOCAB as u32 {
        if Some(a) == end {
            if p1[a as usize] > 0.0 {
                out.insert([a, PAST_END, PAST_END], p1[a as usize]);
            }
            continue;
        }
        ctx.push(a);
        let p2 = dist(&ctx, &mut p);
        for b in 0..VOCAB as u32 {
            if Some(b) == end {
                let prob = p1[a as usize] * p2[b as usize];
                if prob > 0.0 {
                    out.insert([a, b, PAST_END], prob);
                }
                continue;
            }
            ctx.push(b);
            let p3 = dist(&ctx, &mut p);
            for c in 0..VOCAB as u32 {
                let prob = p1[a as usize] * p2[b as usize] * p3[c as usize];
                if prob > 0.0 {
                    out.insert([a, b, c], prob);
                }
            }
            ctx.pop();
        }
        ctx.pop();
    }
    let total: f64 = out.values().sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    out
}

/// Pearson's chi-square p-value of `counts` against `expected` probabilities (cells expected
/// fewer than 5 times pooled).
pub fn chi_square_p(counts: &HashMap<[u32; 3], u64>, expected: &HashMap<[u32; 3], f64>) -> f64 {
    let n: u64 = counts.values().sum();
    for key in counts.keys() {
        assert!(expected.contains_key(key), "{key:?} drawn but impossible");
    }
    let (mut stat, mut cells) = (0.0, 0usize);
    let (mut pool_obs, mut pool_exp) = (0.0, 0.0);
    for (key, &p) in expected {
        let e = p * n as f64;
        let o = *counts.get(key).unwrap_or(&0) as f64;
        if e < 5.0 {
            pool_obs += o;
            pool_exp += e;
        } else {
            stat += (o - e).powi(2) / e;
            cells += 1;
        }
    }
    if pool_exp > 0.0 {
        stat += (pool_obs - pool_exp).powi(2) / pool_exp;
        cells += 1;
    }
    upper_gamma_q((cells - 1) as f64 / 2.0, stat / 2.0)
}
