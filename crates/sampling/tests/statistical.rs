//! Statistical tests: with a fixed seed, draw 20,000 tokens per strategy over a small vocabulary
//! and check the empirical frequencies against the distribution the strategy should sample from
//! (computed here by straightforward sort-based reference implementations), with a chi-square
//! goodness-of-fit test at p > 0.001. Tokens the strategy removes must never be drawn.

mod common;

use common::softmax;
use kindle_sampling::{Mirostat, SamplerConfig};

const DRAWS: usize = 20_000;
const LOGITS: [f32; 10] = [2.0, 1.6, 1.6, 1.0, 0.4, 0.0, -0.3, -1.0, -1.7, -3.0];

// ---------------------------------------------------------------- chi-square machinery

/// ln Γ(x) (Lanczos, g = 7).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularised upper incomplete gamma Q(a, x) (series for x < a + 1, else continued fraction).
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let ln_pre = -x + a * x.ln() - ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..1000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * ln_pre.exp()
    } else {
        // Lentz's method.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        ln_pre.exp() * h
    }
}

/// p-value of a chi-square statistic with `dof` degrees of freedom.
fn chi_square_p(stat: f64, dof: usize) -> f64 {
    gamma_q(dof as f64 / 2.0, stat / 2.0)
}

/// Chi-square goodness of fit of `counts` against `expected` probabilities. Tokens with expected
/// probability 0 must have count 0; bins expecting fewer than 5 draws are pooled. Returns the
/// p-value.
fn goodness_of_fit(counts: &[usize], expected: &[f64]) -> Result<f64, String> {
    let n: usize = counts.iter().sum();
    let mut bins: Vec<(f64, f64)> = Vec::new(); // (observed, expected)
    let mut pool = (0.0, 0.0);
    for (i, (&c, &p)) in counts.iter().zip(expected).enumerate() {
        if p == 0.0 {
            if c > 0 {
                return Err(format!(
                    "token {i} has probability 0 but was drawn {c} times"
                ));
            }
            continue;
        }
        let e = p * n as f64;
        if e < 5.0 {
            pool = (pool.0 + c as f64, pool.1 + e);
        } else {
            bins.push((c as f64, e));
        }
    }
    if pool.1 >= 5.0 || bins.is_empty() {
        bins.push(pool);
    } else if pool.1 > 0.0 || pool.0 > 0.0 {
        let smallest = bins.iter_mut().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        smallest.0 += pool.0;
        smallest.1 += pool.1;
    }
    if bins.len() < 2 {
        return Ok(1.0);
    }
    let stat: f64 = bins.iter().map(|(o, e)| (o - e).powi(2) / e).sum();
    Ok(chi_square_p(stat, bins.len() - 1))
}

fn assert_fits(counts: &[usize], expected: &[f64]) {
    let p = goodness_of_fit(counts, expected).unwrap();
    assert!(
        p > 0.001,
        "chi-square p = {p}: counts {counts:?} vs expected {expected:?}"
    );
}

// ---------------------------------------------------------------- reference distributions

/// Ids by (logit desc, id asc).
fn ranked(logits: &[f32]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    ids
}

fn keep_only(logits: &[f32], keep: &[usize]) -> Vec<f32> {
    logits
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            if keep.contains(&i) {
                l
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect()
}

fn ref_top_k(logits: &[f32], k: usize) -> Vec<f32> {
    keep_only(logits, &ranked(logits)[..k])
}

fn ref_top_p(logits: &[f32], p: f64) -> Vec<f32> {
    let probs = softmax(logits);
    let (mut acc, mut keep) = (0.0, Vec::new());
    for i in ranked(logits) {
        keep.push(i);
        acc += probs[i];
        if acc >= p {
            break;
        }
    }
    keep_only(logits, &keep)
}

fn ref_min_p(logits: &[f32], min_p: f64) -> Vec<f32> {
    let probs = softmax(logits);
    let max = probs.iter().copied().fold(0.0, f64::max);
    let keep: Vec<usize> = (0..logits.len())
        .filter(|&i| probs[i] >= min_p * max)
        .collect();
    keep_only(logits, &keep)
}

fn ref_typical(logits: &[f32], mass: f64) -> Vec<f32> {
    let probs = softmax(logits);
    let h: f64 = probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|&p| -p * p.ln())
        .sum();
    let mut ids: Vec<usize> = (0..logits.len()).filter(|&i| probs[i] > 0.0).collect();
    ids.sort_by(|&a, &b| {
        (-probs[a].ln() - h)
            .abs()
            .total_cmp(&(-probs[b].ln() - h).abs())
    });
    let (mut acc, mut keep) = (0.0, Vec::new());
    for i in ids {
        keep.push(i);
        acc += probs[i];
        if acc >= mass {
            break;
        }
    }
    keep_only(logits, &keep)
}

fn ref_top_n_sigma(logits: &[f32], n: f64) -> Vec<f32> {
    let finite: Vec<f64> = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| l as f64)
        .collect();
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let sd = (finite.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / finite.len() as f64).sqrt();
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let keep: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i] as f64 >= max - n * sd)
        .collect();
    keep_only(logits, &keep)
}

fn ref_temperature(logits: &[f32], t: f32) -> Vec<f32> {
    logits.iter().map(|l| l / t).collect()
}

fn draw_counts(config: SamplerConfig, logits: &[f32]) -> Vec<usize> {
    let mut sampler = SamplerConfig {
        seed: Some(0x5eed),
        ..config
    }
    .build()
    .unwrap();
    let mut counts = vec![0; logits.len()];
    for _ in 0..DRAWS {
        counts[sampler.sample(&mut logits.to_vec(), &[]).unwrap() as usize] += 1;
    }
    counts
}

fn neutral() -> SamplerConfig {
    SamplerConfig::neutral()
}

// ---------------------------------------------------------------- tests

#[test]
fn chi_square_p_values_are_right() {
    // Known critical values: chi2(1) 3.841 -> 0.05, chi2(5) 20.515 -> 0.001, chi2(9) 16.919 -> 0.05.
    assert!((chi_square_p(3.841, 1) - 0.05).abs() < 1e-3);
    assert!((chi_square_p(20.515, 5) - 0.001).abs() < 1e-4);
    assert!((chi_square_p(16.919, 9) - 0.05).abs() < 1e-3);
    assert!((chi_square_p(2.0, 2) - (-1.0f64).exp()).abs() < 1e-12);
}

#[test]
fn goodness_of_fit_catches_the_wrong_distribution() {
    // Companion: samples from top-k 3 do not fit the untruncated distribution, nor do plain
    // samples fit a temperature-0.7 distribution.
    let counts = draw_counts(
        SamplerConfig {
            top_k: 3,
            ..neutral()
        },
        &LOGITS,
    );
    assert!(goodness_of_fit(&counts, &softmax(&LOGITS)).map_or(true, |p| p < 0.001));
    let counts = draw_counts(neutral(), &LOGITS);
    let wrong = softmax(&ref_temperature(&LOGITS, 0.7));
    assert!(goodness_of_fit(&counts, &wrong).unwrap() < 0.001);
}

#[test]
fn plain_sampling_matches_softmax() {
    assert_fits(&draw_counts(neutral(), &LOGITS), &softmax(&LOGITS));
}

#[test]
fn temperature_matches() {
    for t in [0.5f32, 0.8, 1.7] {
        let counts = draw_counts(
            SamplerConfig {
                temperature: t,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_temperature(&LOGITS, t)));
    }
}

#[test]
fn top_k_matches() {
    for k in [1usize, 3, 5] {
        let counts = draw_counts(
            SamplerConfig {
                top_k: k as i64,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_top_k(&LOGITS, k)));
    }
}

#[test]
fn top_p_matches() {
    for p in [0.5f32, 0.8, 0.95] {
        let counts = draw_counts(
            SamplerConfig {
                top_p: p,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_top_p(&LOGITS, p as f64)));
    }
}

#[test]
fn min_p_matches() {
    for m in [0.1f32, 0.3] {
        let counts = draw_counts(
            SamplerConfig {
                min_p: m,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_min_p(&LOGITS, m as f64)));
    }
}

#[test]
fn typical_matches() {
    for m in [0.4f32, 0.9] {
        let counts = draw_counts(
            SamplerConfig {
                typical_p: m,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_typical(&LOGITS, m as f64)));
    }
}

#[test]
fn top_n_sigma_matches() {
    for n in [0.5f32, 1.0] {
        let counts = draw_counts(
            SamplerConfig {
                top_n_sigma: n,
                ..neutral()
            },
            &LOGITS,
        );
        assert_fits(&counts, &softmax(&ref_top_n_sigma(&LOGITS, n as f64)));
    }
}

#[test]
fn xtc_matches_its_mixture() {
    // Fires half the time; when it fires, every token with p >= 0.1 but the least likely of them
    // is removed.
    let probs = softmax(&LOGITS);
    let above: Vec<usize> = ranked(&LOGITS)
        .into_iter()
        .filter(|&i| probs[i] >= 0.1)
        .collect();
    assert!(above.len() >= 2);
    let removed = &above[..above.len() - 1];
    let fired = softmax(
        &LOGITS
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                if removed.contains(&i) {
                    f32::NEG_INFINITY
                } else {
                    l
                }
            })
            .collect::<Vec<_>>(),
    );
    let expected: Vec<f64> = probs
        .iter()
        .zip(&fired)
        .map(|(a, b)| 0.5 * a + 0.5 * b)
        .collect();
    let counts = draw_counts(
        SamplerConfig {
            xtc_probability: 0.5,
            xtc_threshold: 0.1,
            ..neutral()
        },
        &LOGITS,
    );
    assert_fits(&counts, &expected);
}

#[test]
fn llama_cpp_chain_matches() {
    // top_k -> top_p -> min_p -> temperature (llama.cpp order).
    let config = SamplerConfig {
        top_k: 6,
        top_p: 0.9,
        min_p: 0.1,
        temperature: 0.8,
        ..neutral()
    };
    let expected = {
        let l = ref_top_k(&LOGITS, 6);
        let l = ref_top_p(&l, 0.9f32 as f64);
        let l = ref_min_p(&l, 0.1f32 as f64);
        softmax(&ref_temperature(&l, 0.8))
    };
    assert_fits(&draw_counts(config, &LOGITS), &expected);
}

#[test]
fn hf_chain_matches() {
    // temperature -> top_k -> top_p (Hugging Face order): temperature first changes top-p's set.
    let config = SamplerConfig {
        top_k: 6,
        top_p: 0.7,
        temperature: 1.5,
        order: kindle_sampling::HF_ORDER.to_vec(),
        ..neutral()
    };
    let expected = {
        let l = ref_temperature(&LOGITS, 1.5);
        let l = ref_top_k(&l, 6);
        softmax(&ref_top_p(&l, 0.7f32 as f64))
    };
    assert_fits(&draw_counts(config, &LOGITS), &expected);
}

#[test]
fn penalties_then_sampling_matches() {
    // History [0, 0, 1]: token 0 seen twice, token 1 once.
    let config = SamplerConfig {
        repetition_penalty: 1.3,
        frequency_penalty: 0.2,
        presence_penalty: 0.1,
        seed: Some(3),
        ..neutral()
    };
    let mut penalised = LOGITS;
    penalised[0] = 2.0 / 1.3 - 2.0 * 0.2 - 0.1;
    penalised[1] = 1.6 / 1.3 - 0.2 - 0.1;
    let mut sampler = config.build().unwrap();
    let mut counts = vec![0; LOGITS.len()];
    for _ in 0..DRAWS {
        counts[sampler.sample(&mut LOGITS.to_vec(), &[0, 0, 1]).unwrap() as usize] += 1;
    }
    assert_fits(&counts, &softmax(&penalised));
}

#[test]
fn large_vocabulary_untruncated_and_top_p_paths_match() {
    // 3,000 tokens, most of them negligible: exercises the whole-row draw and top-p's growing
    // partial selection. Only the 12 likely tokens are binned; the rest form one bin.
    let mut logits = vec![-12.0f32; 3000];
    for i in 0..12 {
        logits[i * 250 + 7] = 1.0 - i as f32 * 0.25;
    }
    let bins = |logits: &[f32], counts: &[usize]| -> (Vec<usize>, Vec<f64>) {
        let probs = softmax(logits);
        let hot: Vec<usize> = (0..12).map(|i| i * 250 + 7).collect();
        let mut c: Vec<usize> = hot.iter().map(|&i| counts[i]).collect();
        let mut p: Vec<f64> = hot.iter().map(|&i| probs[i]).collect();
        c.push(counts.iter().sum::<usize>() - c.iter().sum::<usize>());
        p.push(1.0 - p.iter().sum::<f64>());
        (c, p)
    };
    let counts = draw_counts(neutral(), &logits);
    let (c, p) = bins(&logits, &counts);
    assert_fits(&c, &p);
    let counts = draw_counts(
        SamplerConfig {
            top_p: 0.99,
            ..neutral()
        },
        &logits,
    );
    let reference = ref_top_p(&logits, 0.99f32 as f64);
    let expected = softmax(&reference);
    let kept: Vec<usize> = (0..logits.len()).filter(|&i| expected[i] > 0.0).collect();
    let c: Vec<usize> = kept.iter().map(|&i| counts[i]).collect();
    assert_eq!(c.iter().sum::<usize>(), DRAWS, "a dropped token was drawn");
    // Bin the kept tail together.
    let (c, p) = bins(&reference, &counts);
    assert_fits(&c, &p);
}

#[test]
fn mirostat_v2_tracks_its_target_surprise() {
    // Not a fixed distribution (mu adapts); check the average surprise approaches tau.
    let logits: Vec<f32> = (0..200).map(|i| -(i as f32).sqrt()).collect();
    let tau = 4.0;
    let mut sampler = SamplerConfig {
        mirostat: Mirostat::V2 { tau, eta: 0.1 },
        seed: Some(9),
        ..neutral()
    }
    .build()
    .unwrap();
    let raw = softmax(&logits);
    let mut surprise = 0.0;
    let n = 4000;
    for step in 0..n + 500 {
        let t = sampler.sample(&mut logits.clone(), &[]).unwrap() as usize;
        if step >= 500 {
            surprise += -raw[t].log2();
        }
    }
    let mean = surprise / n as f64;
    assert!(
        (mean - tau as f64).abs() < 0.6,
        "mean surprise {mean} vs tau {tau}"
    );
}
