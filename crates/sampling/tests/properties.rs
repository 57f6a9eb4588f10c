//! Property tests. Each property is a checking function; the proptest runs it on the real
//! sampler, and a companion unit test (`*_catches_*`) feeds it the output of a deliberately
//! broken implementation to show the check fails when the property is violated.

mod common;

use common::softmax;
use kindle_sampling::{DryConfig, Mirostat, Sampled, Sampler, SamplerConfig, SamplingError};
use proptest::prelude::*;

const NEG_INF: f32 = f32::NEG_INFINITY;

// ---------------------------------------------------------------- references and strategies

/// Reference argmax: first index of the maximum.
fn reference_argmax(logits: &[f32]) -> u32 {
    let max = logits.iter().copied().fold(NEG_INF, f32::max);
    logits.iter().position(|&l| l == max).unwrap() as u32
}

fn logits(max_len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(prop_oneof![8 => -20.0f32..20.0, 1 => Just(NEG_INF), 1 => (-3i32..3).prop_map(|i| i as f32)], 2..max_len)
        .prop_filter("at least one unmasked logit", |v| v.iter().any(|&l| l > NEG_INF))
}

fn extreme_logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![4 => -20.0f32..20.0, 1 => Just(NEG_INF), 1 => Just(f32::MAX), 1 => Just(-f32::MAX), 1 => -1e30f32..1e30],
        2..48,
    )
    .prop_filter("at least one unmasked logit", |v| v.iter().any(|&l| l > NEG_INF))
}

fn history(vocab: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..vocab as u32, 0..40)
}

/// Any valid configuration, every processor possibly on.
fn any_config() -> impl Strategy<Value = SamplerConfig> {
    let trunc = (
        0.0f32..2.0,
        0i64..12,
        0.05f32..=1.0,
        0.0f32..0.6,
        0.05f32..=1.0,
        -1.0f32..3.0,
    );
    let other = (
        0.0f32..=1.0,
        0.0f32..0.6,
        0u8..3,
        0.0f32..2.0,
        0.5f32..2.0,
        -1.0f32..1.0,
        -1.0f32..1.0,
        0usize..4,
    );
    (trunc, other, any::<u64>(), any::<bool>()).prop_map(
        |((t, k, p, mp, typ, ns), (xp, xt, miro, dry, rep, freq, pres, ngram), seed, hf)| {
            SamplerConfig {
                temperature: if t < 0.1 { 0.0 } else { t },
                top_k: k,
                top_p: p,
                min_p: mp,
                typical_p: typ,
                top_n_sigma: ns,
                xtc_probability: xp,
                xtc_threshold: xt,
                mirostat: match miro {
                    0 => Mirostat::Off,
                    1 => Mirostat::V1 { tau: 3.0, eta: 0.1 },
                    _ => Mirostat::V2 { tau: 3.0, eta: 0.1 },
                },
                dry: DryConfig {
                    multiplier: dry,
                    sequence_breakers: vec![0],
                    ..DryConfig::default()
                },
                repetition_penalty: rep,
                frequency_penalty: freq,
                presence_penalty: pres,
                no_repeat_ngram_size: ngram,
                seed: Some(seed),
                order: if hf {
                    kindle_sampling::HF_ORDER.to_vec()
                } else {
                    kindle_sampling::LLAMA_CPP_ORDER.to_vec()
                },
                ..SamplerConfig::neutral()
            }
        },
    )
}

fn seeded(config: SamplerConfig, seed: u64) -> Sampler {
    SamplerConfig {
        seed: Some(seed),
        ..config
    }
    .build()
    .unwrap()
}

/// The kept set (the processed distribution) of one sampling step.
fn kept(config: SamplerConfig, logits: &[f32], seed: u64) -> Sampled {
    let mut sampler = seeded(config, seed);
    sampler
        .sample_with_logprobs(&mut logits.to_vec(), &[], logits.len())
        .unwrap()
}

// ---------------------------------------------------------------- checking functions

fn check_valid_id(
    logits: &[f32],
    result: &Result<u32, SamplingError>,
    may_mask_all: bool,
) -> Result<(), String> {
    match result {
        Ok(t) if (*t as usize) < logits.len() && logits[*t as usize] > NEG_INF => Ok(()),
        Ok(t) => Err(format!("token {t} is out of range or masked")),
        Err(SamplingError::AllMasked) if may_mask_all => Ok(()),
        Err(e) => Err(format!("unexpected error {e}")),
    }
}

fn check_top_k(logits: &[f32], k: usize, kept: &[u32], token: u32) -> Result<(), String> {
    let mut finite: Vec<f32> = logits.iter().copied().filter(|&l| l > NEG_INF).collect();
    finite.sort_by(|a, b| b.total_cmp(a));
    let want = k.min(finite.len());
    if kept.len() != want {
        return Err(format!("kept {} tokens, expected {want}", kept.len()));
    }
    let kth = finite[want - 1];
    if let Some(bad) = kept.iter().find(|&&id| logits[id as usize] < kth) {
        return Err(format!("token {bad} is not among the {k} largest"));
    }
    if !kept.contains(&token) {
        return Err(format!("picked {token} outside the kept set"));
    }
    Ok(())
}

fn check_top_p(logits: &[f32], p: f32, kept: &[u32]) -> Result<(), String> {
    let probs = softmax(logits);
    let tol = 1e-6;
    let mass: f64 = kept.iter().map(|&i| probs[i as usize]).sum();
    if mass < p as f64 - tol {
        return Err(format!("kept mass {mass} does not reach {p}"));
    }
    let min_kept = kept
        .iter()
        .map(|&i| probs[i as usize])
        .fold(f64::INFINITY, f64::min);
    if kept.len() > 1 && mass - min_kept >= p as f64 + tol {
        return Err(format!(
            "not minimal: mass without the least likely kept token is {}",
            mass - min_kept
        ));
    }
    let max_dropped = (0..logits.len() as u32)
        .filter(|i| !kept.contains(i))
        .map(|i| probs[i as usize])
        .fold(0.0, f64::max);
    if max_dropped > min_kept + tol {
        return Err("a dropped token is more likely than a kept one".into());
    }
    Ok(())
}

fn check_greedy(logits: &[f32], token: u32) -> Result<(), String> {
    let want = reference_argmax(logits);
    if token == want {
        Ok(())
    } else {
        Err(format!("greedy picked {token}, argmax is {want}"))
    }
}

/// `p_argmax` over decreasing temperatures: non-decreasing, and close to 1 at the end.
fn check_converges(p_argmax: &[f64]) -> Result<(), String> {
    if p_argmax.windows(2).any(|w| w[1] < w[0] - 1e-9) {
        return Err(format!("p(argmax) decreased as T decreased: {p_argmax:?}"));
    }
    if *p_argmax.last().unwrap() < 0.999 {
        return Err(format!("p(argmax) did not converge to 1: {p_argmax:?}"));
    }
    Ok(())
}

fn check_no_nan(values: impl IntoIterator<Item = f32>) -> Result<(), String> {
    if values.into_iter().any(f32::is_nan) {
        Err("NaN produced".into())
    } else {
        Ok(())
    }
}

fn sampled_values(s: &Sampled) -> Vec<f32> {
    let mut v = vec![s.raw_logprob, s.processed_logprob];
    v.extend(s.top_raw.iter().map(|x| x.1));
    v.extend(s.top_processed.iter().map(|x| x.1));
    v
}

fn check_same<T: PartialEq + std::fmt::Debug>(a: &[T], b: &[T]) -> Result<(), String> {
    if a == b {
        Ok(())
    } else {
        Err(format!("runs differ: {a:?} vs {b:?}"))
    }
}

fn check_penalties(before: &[f32], after: &[f32], penalised: &[u32]) -> Result<(), String> {
    for (i, (&b, &a)) in before.iter().zip(after).enumerate() {
        if penalised.contains(&(i as u32)) {
            if a > b {
                return Err(format!("penalised token {i} went up from {b} to {a}"));
            }
        } else if a != b {
            return Err(format!("unpenalised token {i} changed from {b} to {a}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn result_is_a_valid_id(logits in logits(64), config in any_config(), hist in history(64)) {
        let hist: Vec<u32> = hist.into_iter().map(|t| t % logits.len() as u32).collect();
        let may_mask_all = config.no_repeat_ngram_size > 0;
        let mut sampler = config.build().unwrap();
        let result = sampler.sample(&mut logits.clone(), &hist);
        prop_assert!(check_valid_id(&logits, &result, may_mask_all).is_ok(), "{:?}", check_valid_id(&logits, &result, may_mask_all));
    }

    #[test]
    fn top_k_picks_inside_the_k_largest(logits in logits(64), k in 1i64..20, seed: u64) {
        let out = kept(SamplerConfig { top_k: k, ..SamplerConfig::neutral() }, &logits, seed);
        let ids: Vec<u32> = out.top_processed.iter().map(|x| x.0).collect();
        let r = check_top_k(&logits, k as usize, &ids, out.token);
        prop_assert!(r.is_ok(), "{:?}", r);
    }

    #[test]
    fn top_p_set_is_minimal_and_reaches_p(logits in logits(64), p in 0.01f32..=1.0, seed: u64) {
        let out = kept(SamplerConfig { top_p: p, ..SamplerConfig::neutral() }, &logits, seed);
        let ids: Vec<u32> = out.top_processed.iter().map(|x| x.0).collect();
        let r = check_top_p(&logits, p, &ids);
        prop_assert!(r.is_ok(), "{:?}", r);
        prop_assert!(ids.contains(&reference_argmax(&logits)), "top token not kept");
    }

    #[test]
    fn greedy_equals_argmax(logits in logits(64), hist in history(64)) {
        let token = Sampler::greedy().sample(&mut logits.clone(), &hist).unwrap();
        prop_assert!(check_greedy(&logits, token).is_ok());
        let token = SamplerConfig::greedy().build().unwrap().sample(&mut logits.clone(), &hist).unwrap();
        prop_assert!(check_greedy(&logits, token).is_ok());
        prop_assert_eq!(kindle_sampling::logprobs::try_argmax(&logits).unwrap(), reference_argmax(&logits));
    }

    #[test]
    fn temperature_towards_zero_converges_to_argmax(
        base in prop::collection::vec(-5.0f32..5.0, 2..32), gap in 0.5f32..3.0, seed: u64,
    ) {
        let mut logits = base.clone();
        let top = reference_argmax(&logits) as usize;
        logits[top] += gap;
        let p: Vec<f64> = [1.0f32, 0.3, 0.1, 0.03, 0.01]
            .iter()
            .map(|&t| {
                let out = kept(SamplerConfig { temperature: t, ..SamplerConfig::neutral() }, &logits, seed);
                out.top_processed.iter().find(|x| x.0 == top as u32).map_or(0.0, |x| (x.1 as f64).exp())
            })
            .collect();
        let r = check_converges(&p);
        prop_assert!(r.is_ok(), "{:?}", r);
        let greedy = kept(SamplerConfig::greedy(), &logits, seed);
        prop_assert_eq!(greedy.token, top as u32);
    }

    #[test]
    fn no_processor_ever_produces_nan(logits in extreme_logits(), config in any_config(), hist in history(48)) {
        let hist: Vec<u32> = hist.into_iter().map(|t| t % logits.len() as u32).collect();
        let mut sampler = config.build().unwrap();
        let mut row = logits.clone();
        match sampler.sample_with_logprobs(&mut row, &hist, 8) {
            Ok(out) => {
                prop_assert!(check_no_nan(sampled_values(&out)).is_ok(), "{:?}", out);
                prop_assert!(check_no_nan(row.iter().copied()).is_ok());
            }
            Err(SamplingError::AllMasked) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn same_seed_gives_same_result(logits in logits(64), config in any_config(), hist in history(64)) {
        let hist: Vec<u32> = hist.into_iter().map(|t| t % logits.len() as u32).collect();
        let run = |config: &SamplerConfig| {
            let mut s = config.clone().build().unwrap();
            (0..6).map(|_| s.sample_with_logprobs(&mut logits.clone(), &hist, 4).ok()).collect::<Vec<_>>()
        };
        let r = check_same(&run(&config), &run(&config));
        prop_assert!(r.is_ok(), "{:?}", r);
    }

    #[test]
    fn penalties_never_raise_a_penalised_token(
        logits in prop::collection::vec(-20.0f32..20.0, 2..64), hist in history(64),
        rep in 1.0f32..3.0, freq in 0.0f32..2.0, pres in 0.0f32..2.0, dry in 0.0f32..2.0, last_n in -1i64..40,
    ) {
        let hist: Vec<u32> = hist.into_iter().map(|t| t % logits.len() as u32).collect();
        let config = SamplerConfig {
            repetition_penalty: rep, frequency_penalty: freq, presence_penalty: pres, penalty_last_n: last_n,
            dry: DryConfig { multiplier: dry, ..DryConfig::default() }, seed: Some(1),
            ..SamplerConfig::neutral()
        };
        let mut row = logits.clone();
        config.build().unwrap().sample(&mut row, &hist).unwrap();
        let r = check_penalties(&logits, &row, &hist);
        prop_assert!(r.is_ok(), "{:?}", r);
    }
}

// ---------------------------------------------------------------- companions: broken code is caught

#[test]
fn valid_id_check_catches_out_of_range_and_masked_picks() {
    let logits = [1.0, NEG_INF, 0.5];
    let broken_out_of_range: Result<u32, SamplingError> = Ok(logits.len() as u32);
    assert!(check_valid_id(&logits, &broken_out_of_range, false).is_err());
    let broken_masked: Result<u32, SamplingError> = Ok(1);
    assert!(check_valid_id(&logits, &broken_masked, false).is_err());
    assert!(check_valid_id(&logits, &Err(SamplingError::AllMasked), false).is_err());
}

#[test]
fn top_k_check_catches_a_top_k_keeping_k_plus_one() {
    let logits = [3.0f32, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0];
    let broken_top_k = |k: usize| {
        let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
        ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        ids.truncate(k + 1); // the bug
        ids
    };
    let ids = broken_top_k(3);
    assert!(check_top_k(&logits, 3, &ids, ids[0]).is_err());
    // ... and a pick outside the kept set.
    assert!(check_top_k(&logits, 3, &ids[..3], ids[3]).is_err());
}

#[test]
fn top_p_check_catches_non_minimal_and_short_sets() {
    let logits = [2.0, 1.0, 0.5, 0.0, -1.0];
    let probs = softmax(&logits);
    let p = 0.8;
    let mut order: Vec<u32> = (0..5).collect();
    order.sort_by(|&a, &b| probs[b as usize].total_cmp(&probs[a as usize]));
    let n = (1..=5)
        .find(|&n| order[..n].iter().map(|&i| probs[i as usize]).sum::<f64>() >= p)
        .unwrap();
    assert!(check_top_p(&logits, p as f32, &order[..n]).is_ok());
    assert!(
        check_top_p(&logits, p as f32, &order[..n + 1]).is_err(),
        "one token too many"
    );
    assert!(
        check_top_p(&logits, p as f32, &order[..n - 1]).is_err(),
        "one token too few"
    );
}

#[test]
fn greedy_check_catches_wrong_tie_break() {
    let logits = [1.0, 3.0, 3.0, 0.0];
    let broken_argmax = |l: &[f32]| l.iter().rposition(|&x| x == 3.0).unwrap() as u32; // last max
    assert!(check_greedy(&logits, broken_argmax(&logits)).is_err());
}

#[test]
fn convergence_check_catches_a_temperature_that_multiplies() {
    let logits = [2.0f32, 1.0, 0.5, -1.0];
    let broken = |t: f32| softmax(&logits.iter().map(|l| l * t).collect::<Vec<_>>())[0];
    let p: Vec<f64> = [1.0f32, 0.3, 0.1, 0.03, 0.01]
        .iter()
        .map(|&t| broken(t))
        .collect();
    assert!(check_converges(&p).is_err());
}

#[test]
fn nan_check_catches_a_naive_softmax() {
    let logits = [f32::MAX, 1e30, 0.0];
    let naive: Vec<f32> = {
        let e: Vec<f32> = logits.iter().map(|l| l.exp()).collect();
        let s: f32 = e.iter().sum();
        e.iter().map(|x| (x / s).ln()).collect()
    };
    assert!(check_no_nan(naive).is_err());
    // The sampler on the same row is fine.
    let out = kept(SamplerConfig::neutral(), &logits, 0);
    assert!(check_no_nan(sampled_values(&out)).is_ok());
}

#[test]
fn same_seed_check_catches_a_differently_seeded_stream() {
    let logits = vec![0.0f32; 16];
    let run = |seed| {
        let mut s = seeded(SamplerConfig::neutral(), seed);
        (0..20)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(check_same(&run(5), &run(5)).is_ok());
    assert!(check_same(&run(5), &run(6)).is_err());
}

#[test]
fn penalty_check_catches_an_inverted_ctrl_rule() {
    let before = [2.0f32, -2.0, 1.0];
    let history = [0u32, 1];
    // Broken: divides every logit, so a negative logit goes *up*.
    let broken: Vec<f32> = before
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            if history.contains(&(i as u32)) {
                l / 1.5
            } else {
                l
            }
        })
        .collect();
    assert!(check_penalties(&before, &broken, &history).is_err());
    // Broken: touches a token that is not in the history.
    let broken2 = [1.0f32, -3.0, 0.5];
    assert!(check_penalties(&before, &broken2, &history).is_err());
}
