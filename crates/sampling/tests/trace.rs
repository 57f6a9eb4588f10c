//! `Sampler::sample_traced`: the same token as the untraced call, and the trace's numbers are
//! the sampler's own: the last stage is the distribution the selection used (its probabilities
//! equal the processed log-probabilities the sampler reports), for every processor.

use kindle_sampling::{
    DryConfig, History, Sampler, SamplerConfig, SamplingError, Stage, Trace, parse_order,
};

const VOCAB: usize = 64;

fn row(seed: u64) -> Vec<f32> {
    // A fixed, spread-out row: a few likely tokens and a long tail.
    (0..VOCAB as u64)
        .map(|i| {
            let h = (i.wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) % 1000;
            (h as f32 / 1000.0) * 6.0 - 3.0
        })
        .collect()
}

const HISTORY: [u32; 10] = [3, 5, 7, 3, 9, 3, 5, 11, 13, 5];

/// Sample once traced and once not, with the same fresh sampler; check agreement and return
/// the trace.
fn traced(config: &SamplerConfig, seed: u64) -> Trace {
    let history = History::new(&HISTORY, 4);
    let mut plain = config.clone().build().unwrap();
    let mut logits = row(seed);
    let expected = plain
        .sample_history_with_logprobs(&mut logits, history, VOCAB)
        .unwrap();
    let mut sampler = config.clone().build().unwrap();
    let mut logits = row(seed);
    let (sampled, trace) = sampler.sample_traced(&mut logits, history, VOCAB).unwrap();
    assert_eq!(sampled, expected, "tracing changed the sample");
    let last = trace.last().unwrap();
    // The selection used the last stage: the chosen token's and every listed token's
    // probability there is the sampler's processed probability.
    let p = last.probability(sampled.token);
    assert!(
        (p - f64::from(sampled.processed_logprob).exp()).abs() < 1e-5,
        "{config:?}: chosen p {p} vs {}",
        sampled.processed_logprob
    );
    assert_eq!(last.kept, sampled.top_processed.len(), "{config:?}");
    for &(id, lp) in &sampled.top_processed {
        let q = last.probability(id);
        assert!(
            (q - f64::from(lp).exp()).abs() < 1e-5,
            "{config:?}: {id}: {q} vs {lp}"
        );
    }
    // The raw stage is the softmax of the row as given.
    let raw = trace.raw().unwrap();
    assert_eq!(raw.name, "raw");
    for &(id, lp) in &sampled.top_raw {
        assert!((raw.probability(id) - f64::from(lp).exp()).abs() < 1e-5);
    }
    trace
}

fn names(trace: &Trace) -> Vec<&'static str> {
    trace.stages.iter().map(|s| s.name).collect()
}

#[test]
fn every_processor_alone_agrees_with_the_sampler() {
    let base = SamplerConfig {
        seed: Some(9),
        ..SamplerConfig::neutral()
    };
    let configs = [
        (
            Stage::TopK,
            SamplerConfig {
                top_k: 5,
                ..base.clone()
            },
        ),
        (
            Stage::TopP,
            SamplerConfig {
                top_p: 0.6,
                ..base.clone()
            },
        ),
        (
            Stage::MinP,
            SamplerConfig {
                min_p: 0.2,
                ..base.clone()
            },
        ),
        (
            Stage::TypicalP,
            SamplerConfig {
                typical_p: 0.5,
                ..base.clone()
            },
        ),
        (
            Stage::TopNSigma,
            SamplerConfig {
                top_n_sigma: 1.0,
                ..base.clone()
            },
        ),
        (
            Stage::Xtc,
            SamplerConfig {
                xtc_probability: 1.0,
                xtc_threshold: 0.05,
                ..base.clone()
            },
        ),
        (
            Stage::Temperature,
            SamplerConfig {
                temperature: 0.5,
                ..base.clone()
            },
        ),
        (
            Stage::Penalties,
            SamplerConfig {
                repetition_penalty: 1.5,
                presence_penalty: 0.5,
                ..base.clone()
            },
        ),
        (
            Stage::Dry,
            SamplerConfig {
                dry: DryConfig {
                    multiplier: 2.0,
                    allowed_length: 1,
                    ..DryConfig::default()
                },
                ..base.clone()
            },
        ),
    ];
    for (stage, config) in configs {
        for seed in 0..5 {
            let trace = traced(&config, seed);
            let after = trace
                .stages
                .iter()
                .find(|s| s.name == stage.name())
                .unwrap_or_else(|| panic!("no {stage} in {:?}", names(&trace)));
            assert!(after.changed > 0, "{stage} changed nothing (seed {seed})");
        }
    }
}

#[test]
fn a_whole_chain_lists_its_stages_in_order_and_truncates_as_configured() {
    let config = SamplerConfig {
        temperature: 0.7,
        top_k: 12,
        top_p: 0.8,
        min_p: 0.05,
        repetition_penalty: 1.3,
        logit_bias: vec![(4, -100.0)],
        seed: Some(1),
        order: parse_order("penalties;top_k;top_p;min_p;temperature").unwrap(),
        ..SamplerConfig::neutral()
    };
    for seed in 0..10 {
        let trace = traced(&config, seed);
        assert_eq!(
            names(&trace),
            [
                "raw",
                "masks",
                "penalties",
                "top_k",
                "top_p",
                "min_p",
                "temperature"
            ]
        );
        let s = &trace.stages;
        assert_eq!(s[0].kept, VOCAB);
        assert_eq!(s[1].changed, 1, "the bias moved one token");
        assert_eq!(s[3].kept, 12);
        // top-p keeps the smallest set reaching 0.8 of top-k's mass.
        let kept_mass: f64 = s[3].top(s[4].kept).iter().map(|x| x.1).sum();
        let one_less: f64 = s[3].top(s[4].kept - 1).iter().map(|x| x.1).sum();
        assert!(
            kept_mass >= 0.8 - 1e-6 && one_less < 0.8,
            "{kept_mass} {one_less}"
        );
        // Temperature rescales the logits it keeps.
        for (id, _) in s[6].top(s[6].kept) {
            let before = s[5].logit(id).unwrap();
            let after = s[6].logit(id).unwrap();
            assert!(
                (after - before / 0.7).abs() < 1e-4,
                "{id}: {before} -> {after}"
            );
        }
        // Entropy falls as the chain narrows the distribution.
        assert!(s[4].entropy() < s[0].entropy());
    }
}

#[test]
fn greedy_ends_with_all_mass_on_the_argmax() {
    let trace = traced(&SamplerConfig::greedy(), 3);
    let last = trace.last().unwrap();
    assert_eq!(last.name, "greedy");
    assert_eq!(last.kept, 1);
    let argmax = trace.raw().unwrap().top(1)[0].0;
    assert_eq!(last.probability(argmax), 1.0);
}

#[test]
fn mirostat_is_not_traced() {
    let config = SamplerConfig {
        mirostat: kindle_sampling::Mirostat::V2 { tau: 5.0, eta: 0.1 },
        ..SamplerConfig::neutral()
    };
    let mut sampler: Sampler = config.build().unwrap();
    let err = sampler
        .sample_traced(&mut row(0), History::new(&[], 0), 5)
        .unwrap_err();
    assert!(matches!(
        err,
        SamplingError::InvalidParameter {
            name: "mirostat",
            ..
        }
    ));
}

/// The check above catches a trace that is not what the selection used: a stage list whose
/// last entry is an earlier stage's distribution disagrees with the processed logprobs.
#[test]
fn a_trace_missing_the_last_stage_would_be_caught() {
    let config = SamplerConfig {
        top_k: 5,
        temperature: 0.5,
        seed: Some(2),
        ..SamplerConfig::neutral()
    };
    let mut sampler = config.build().unwrap();
    let (sampled, mut trace) = sampler
        .sample_traced(&mut row(1), History::new(&HISTORY, 4), VOCAB)
        .unwrap();
    trace.stages.pop(); // planted: drop the temperature stage
    let p = trace.last().unwrap().probability(sampled.token);
    assert!((p - f64::from(sampled.processed_logprob).exp()).abs() > 1e-3);
}
