//! Behaviour of the public API: validation, errors, fixed processors, logprobs, determinism.

use kindle_sampling::logprobs::try_argmax;
use kindle_sampling::*;

const NEG_INF: f32 = f32::NEG_INFINITY;

fn build(config: SamplerConfig) -> Sampler {
    SamplerConfig {
        seed: config.seed.or(Some(1)),
        ..config
    }
    .build()
    .unwrap()
}

fn param_error(config: SamplerConfig) -> (&'static str, String) {
    match config.build().unwrap_err() {
        SamplingError::InvalidParameter { name, value, .. } => (name, value),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn validation_names_parameter_and_value() {
    let n = SamplerConfig::neutral;
    assert_eq!(
        param_error(SamplerConfig {
            temperature: -0.5,
            ..n()
        }),
        ("temperature", "-0.5".into())
    );
    assert_eq!(
        param_error(SamplerConfig {
            temperature: f32::NAN,
            ..n()
        })
        .0,
        "temperature"
    );
    assert_eq!(
        param_error(SamplerConfig { top_k: -1, ..n() }),
        ("top_k", "-1".into())
    );
    assert_eq!(
        param_error(SamplerConfig { top_p: 0.0, ..n() }),
        ("top_p", "0".into())
    );
    assert_eq!(param_error(SamplerConfig { top_p: 1.5, ..n() }).0, "top_p");
    assert_eq!(param_error(SamplerConfig { min_p: -0.1, ..n() }).0, "min_p");
    assert_eq!(param_error(SamplerConfig { min_p: 1.1, ..n() }).0, "min_p");
    assert_eq!(
        param_error(SamplerConfig {
            typical_p: 0.0,
            ..n()
        })
        .0,
        "typical_p"
    );
    assert_eq!(
        param_error(SamplerConfig {
            top_n_sigma: f32::NAN,
            ..n()
        })
        .0,
        "top_n_sigma"
    );
    assert_eq!(
        param_error(SamplerConfig {
            xtc_probability: 1.2,
            ..n()
        })
        .0,
        "xtc_probability"
    );
    assert_eq!(
        param_error(SamplerConfig {
            xtc_threshold: -0.1,
            ..n()
        })
        .0,
        "xtc_threshold"
    );
    assert_eq!(
        param_error(SamplerConfig {
            mirostat: Mirostat::V2 { tau: 0.0, eta: 0.1 },
            ..n()
        })
        .0,
        "mirostat_tau"
    );
    assert_eq!(
        param_error(SamplerConfig {
            mirostat: Mirostat::V1 {
                tau: 5.0,
                eta: f32::NAN
            },
            ..n()
        })
        .0,
        "mirostat_eta"
    );
    assert_eq!(
        param_error(SamplerConfig {
            repetition_penalty: 0.0,
            ..n()
        }),
        ("repetition_penalty", "0".into())
    );
    assert_eq!(
        param_error(SamplerConfig {
            frequency_penalty: f32::INFINITY,
            ..n()
        })
        .0,
        "frequency_penalty"
    );
    assert_eq!(
        param_error(SamplerConfig {
            penalty_last_n: -2,
            ..n()
        })
        .0,
        "penalty_last_n"
    );
    assert_eq!(
        param_error(SamplerConfig {
            dry: DryConfig {
                base: 0.5,
                ..DryConfig::default()
            },
            ..n()
        })
        .0,
        "dry_base"
    );
    assert_eq!(
        param_error(SamplerConfig {
            dry: DryConfig {
                multiplier: -1.0,
                ..DryConfig::default()
            },
            ..n()
        })
        .0,
        "dry_multiplier"
    );
    assert_eq!(
        param_error(SamplerConfig {
            logit_bias: vec![(3, f32::INFINITY)],
            ..n()
        }),
        ("logit_bias", "3=inf".into())
    );
    assert_eq!(
        param_error(SamplerConfig {
            min_tokens: 3,
            ..n()
        })
        .0,
        "min_tokens"
    );
    let err = SamplerConfig { top_p: 1.5, ..n() }.build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid top_p = 1.5: must be in (0, 1] (1 = off)"
    );
    assert!(matches!(
        SamplerConfig {
            order: vec![Stage::TopK, Stage::TopK],
            ..n()
        }
        .build(),
        Err(SamplingError::DuplicateStage { name: "top_k" })
    ));
    assert!(SamplerConfig::neutral().build().is_ok());
    assert!(SamplerConfig::llama_cpp_defaults().build().is_ok());
}

#[test]
fn bad_logits_are_errors_naming_the_index() {
    let mut s = build(SamplerConfig::llama_cpp_defaults());
    let err = s.sample(&mut [0.0, f32::NAN, 1.0], &[]).unwrap_err();
    assert!(matches!(err, SamplingError::NonFiniteLogit { index: 1, value } if value.is_nan()));
    assert_eq!(err.to_string(), "logit 1 is NaN (not finite)");
    assert!(matches!(
        s.sample(&mut [0.0, 1.0, f32::INFINITY], &[]),
        Err(SamplingError::NonFiniteLogit { index: 2, .. })
    ));
    assert_eq!(
        s.sample(&mut [NEG_INF, NEG_INF], &[]),
        Err(SamplingError::AllMasked)
    );
    assert_eq!(s.sample(&mut [], &[]), Err(SamplingError::EmptyLogits));
    // -inf is a mask, not an error.
    assert_eq!(s.sample(&mut [NEG_INF, 1.0, NEG_INF], &[]), Ok(1));
    assert_eq!(
        try_argmax(&[NEG_INF, NEG_INF]),
        Err(SamplingError::AllMasked)
    );
    assert!(try_argmax(&[1.0, f32::NAN]).is_err());
    assert_eq!(try_argmax(&[1.0, 3.0, 3.0]), Ok(1));
}

#[test]
fn every_token_masked_by_processing_is_all_masked() {
    let mut s = build(SamplerConfig {
        logit_bias: vec![(0, NEG_INF), (1, NEG_INF)],
        temperature: 0.7,
        ..SamplerConfig::neutral()
    });
    assert_eq!(
        s.sample(&mut [1.0, 2.0], &[]),
        Err(SamplingError::AllMasked)
    );
    let mut s = build(SamplerConfig {
        no_repeat_ngram_size: 1,
        ..SamplerConfig::neutral()
    });
    assert_eq!(
        s.sample(&mut [1.0, 2.0], &[0, 1]),
        Err(SamplingError::AllMasked)
    );
    let e = s
        .sample(&mut [1.0, 2.0], &[0, 1])
        .map_err(|e| e.at_step(3))
        .unwrap_err();
    assert_eq!(e.step(), Some(3));
    assert_eq!(e.inner(), &SamplingError::AllMasked);
}

#[test]
fn out_of_range_ids_are_errors() {
    let mut s = build(SamplerConfig {
        logit_bias: vec![(5, 1.0)],
        ..SamplerConfig::neutral()
    });
    assert_eq!(
        s.sample(&mut [0.0; 3], &[]),
        Err(SamplingError::TokenOutOfRange {
            what: "logit_bias",
            id: 5,
            vocab: 3
        })
    );
    let mut s = build(SamplerConfig {
        repetition_penalty: 1.2,
        ..SamplerConfig::neutral()
    });
    assert!(matches!(
        s.sample(&mut [0.0; 3], &[9]),
        Err(SamplingError::TokenOutOfRange {
            what: "history",
            ..
        })
    ));
}

#[test]
fn logit_bias_min_tokens_and_ngram_come_first() {
    let eog = 3;
    let config = SamplerConfig {
        logit_bias: vec![(1, 10.0)],
        min_tokens: 2,
        eog_ids: vec![eog],
        ..SamplerConfig::greedy()
    };
    let mut s = config.build().unwrap();
    s.set_prompt_len(4);
    let row = [0.0, 0.0, 0.0, 50.0];
    // Only the prompt so far: the eog id is suppressed, the biased token wins.
    assert_eq!(s.sample(&mut row.to_vec(), &[7, 7, 7, 7]).unwrap(), 1);
    assert_eq!(
        s.sample_history(&mut row.to_vec(), History::new(&[7, 7, 7, 7, 1], 4))
            .unwrap(),
        1
    );
    // Two generated tokens: eog allowed again.
    assert_eq!(
        s.sample_history(&mut row.to_vec(), History::new(&[7, 7, 7, 7, 1, 1], 4))
            .unwrap(),
        eog
    );
    // No-repeat-ngram: "2 0 ... 2" bans 0 under a 2-gram ban.
    let mut s = build(SamplerConfig {
        no_repeat_ngram_size: 2,
        ..SamplerConfig::greedy()
    });
    assert_eq!(s.sample(&mut [5.0, 1.0, 0.0], &[2, 0, 1, 2]).unwrap(), 1);
}

#[test]
fn penalty_scope_output_only_ignores_the_prompt() {
    let row = [2.0f32, 1.9];
    let config = |scope| SamplerConfig {
        repetition_penalty: 2.0,
        penalty_scope: scope,
        penalty_last_n: -1,
        ..SamplerConfig::greedy()
    };
    // Token 0 only appears in the prompt.
    let mut all = config(PenaltyScope::PromptAndOutput).build().unwrap();
    assert_eq!(
        all.sample_history(&mut row.to_vec(), History::new(&[0], 1))
            .unwrap(),
        1
    );
    let mut out = config(PenaltyScope::OutputOnly).build().unwrap();
    assert_eq!(
        out.sample_history(&mut row.to_vec(), History::new(&[0], 1))
            .unwrap(),
        0
    );
    // The same through set_prompt_len + sample().
    out.set_prompt_len(1);
    assert_eq!(out.prompt_len(), 1);
    assert_eq!(out.sample(&mut row.to_vec(), &[0]).unwrap(), 0);
    // Default prompt_len 0: whole history is output.
    let mut out = config(PenaltyScope::OutputOnly).build().unwrap();
    assert_eq!(out.sample(&mut row.to_vec(), &[0]).unwrap(), 1);
}

#[test]
fn penalty_window() {
    let row = [2.0f32, 1.9, 0.0];
    let config = |n| SamplerConfig {
        repetition_penalty: 2.0,
        penalty_last_n: n,
        ..SamplerConfig::greedy()
    };
    let history = [0, 2, 2];
    assert_eq!(
        build(config(2))
            .sample(&mut row.to_vec(), &history)
            .unwrap(),
        0
    );
    assert_eq!(
        build(config(3))
            .sample(&mut row.to_vec(), &history)
            .unwrap(),
        1
    );
    assert_eq!(
        build(config(-1))
            .sample(&mut row.to_vec(), &history)
            .unwrap(),
        1
    );
    assert_eq!(
        build(config(0))
            .sample(&mut row.to_vec(), &history)
            .unwrap(),
        0
    );
}

#[test]
fn dry_in_the_sampler_penalises_the_continuation() {
    let config = SamplerConfig {
        dry: DryConfig {
            multiplier: 5.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: -1,
            sequence_breakers: vec![],
        },
        ..SamplerConfig::greedy()
    };
    // "1 2 3 4 ... 1 2 3": 4 would continue the repeat and is pushed below 5.
    let mut row = vec![0.0f32; 6];
    row[4] = 3.0;
    row[5] = 2.0;
    assert_eq!(
        build(config)
            .sample(&mut row, &[1, 2, 3, 4, 0, 1, 2, 3])
            .unwrap(),
        5
    );
}

#[test]
fn top_k_above_vocab_is_clamped_and_ties_go_to_lowest_id() {
    let mut s = build(SamplerConfig {
        top_k: 1_000,
        ..SamplerConfig::neutral()
    });
    assert!(s.sample(&mut [0.0, 1.0], &[]).unwrap() < 2);
    let out = build(SamplerConfig {
        top_k: 2,
        ..SamplerConfig::neutral()
    })
    .sample_with_logprobs(&mut [1.0, 3.0, 3.0, 3.0], &[], 4)
    .unwrap();
    assert_eq!(
        out.top_processed.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn xtc_always_firing_removes_the_top_choices() {
    let mut s = build(SamplerConfig {
        xtc_probability: 1.0,
        xtc_threshold: 0.1,
        ..SamplerConfig::neutral()
    });
    let logits = [3.0, 2.9, 2.8, -5.0, -5.0];
    for _ in 0..50 {
        let out = s
            .sample_with_logprobs(&mut logits.to_vec(), &[], 5)
            .unwrap();
        // 0 and 1 removed; 2 (least likely above 10%) stays with the tail.
        assert!(out.token >= 2, "{out:?}");
        assert!(out.top_processed.iter().all(|x| x.0 >= 2));
    }
}

#[test]
fn logprobs_raw_and_processed() {
    let logits = [1.0f32, 2.0, 3.0, NEG_INF];
    let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    let mut s = build(SamplerConfig {
        top_k: 2,
        temperature: 0.5,
        ..SamplerConfig::neutral()
    });
    let out = s
        .sample_with_logprobs(&mut logits.to_vec(), &[], 3)
        .unwrap();
    let raw = |i: usize| (logits[i] as f64 - lse) as f32;
    assert_eq!(out.top_raw, vec![(2, raw(2)), (1, raw(1)), (0, raw(0))]);
    assert!((out.raw_logprob - raw(out.token as usize)).abs() < 1e-6);
    // Processed: softmax of [2, 3] / 0.5.
    let z = (4f64.exp() + 6f64.exp()).ln();
    assert_eq!(out.top_processed.len(), 2);
    assert!((out.top_processed[0].1 as f64 - (6.0 - z)).abs() < 1e-6);
    assert!((out.top_processed[1].1 as f64 - (4.0 - z)).abs() < 1e-6);
    // Greedy: the chosen token has processed logprob 0.
    let out = Sampler::greedy()
        .sample_with_logprobs(&mut logits.to_vec(), &[], 2)
        .unwrap();
    assert_eq!((out.token, out.processed_logprob), (2, 0.0));
    assert_eq!(out.top_processed, vec![(2, 0.0)]);
    assert_eq!(out.top_raw.len(), 2);
    // n = 0: no lists, logprobs still there.
    let out = Sampler::greedy()
        .sample_with_logprobs(&mut logits.to_vec(), &[], 0)
        .unwrap();
    assert!(out.top_raw.is_empty() && out.top_processed.is_empty());
    assert!((out.raw_logprob - raw(2)).abs() < 1e-6);
}

#[test]
fn unseeded_sampler_reports_a_replayable_seed() {
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.2).collect();
    let config = SamplerConfig {
        temperature: 1.3,
        ..SamplerConfig::neutral()
    };
    let mut a = config.clone().build().unwrap();
    let run = |s: &mut Sampler| {
        (0..30)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
            .collect::<Vec<_>>()
    };
    let first = run(&mut a);
    let mut replay = SamplerConfig {
        seed: Some(a.seed()),
        ..config
    }
    .build()
    .unwrap();
    assert_eq!(run(&mut replay), first);
    a.reset();
    assert_eq!(run(&mut a), first);
}

#[test]
fn golden_sequence_is_stable() {
    // Pins the exact stream: ChaCha8Rng::seed_from_u64(42), 53-bit uniforms, f64 cumulative draw.
    // A change here breaks replay of recorded runs on every platform.
    let logits: Vec<f32> = (0..32).map(|i| ((i * 7) % 13) as f32 * 0.25).collect();
    let mut s = SamplerConfig {
        seed: Some(42),
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap();
    let seq: Vec<u32> = (0..12)
        .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
        .collect();
    let mut s = SamplerConfig {
        seed: Some(42),
        top_k: 8,
        temperature: 0.7,
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap();
    let seq2: Vec<u32> = (0..12)
        .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
        .collect();
    assert_eq!((seq, seq2), (GOLDEN_PLAIN.to_vec(), GOLDEN_TOPK.to_vec()));
}
const GOLDEN_PLAIN: [u32; 12] = [22, 30, 12, 20, 9, 7, 10, 24, 24, 9, 16, 28];
const GOLDEN_TOPK: [u32; 12] = [7, 18, 9, 22, 24, 11, 24, 20, 20, 24, 9, 5];

#[test]
fn mirostat_updates_mu_and_stays_valid() {
    let logits: Vec<f32> = (0..300).map(|i| -(i as f32) * 0.05).collect();
    for m in [
        Mirostat::V1 { tau: 5.0, eta: 0.1 },
        Mirostat::V2 { tau: 5.0, eta: 0.1 },
    ] {
        let mut s = build(SamplerConfig {
            mirostat: m,
            ..SamplerConfig::neutral()
        });
        assert_eq!(s.mirostat_mu(), Some(10.0));
        for _ in 0..100 {
            assert!(s.sample(&mut logits.clone(), &[]).unwrap() < 300);
        }
        assert_ne!(s.mirostat_mu(), Some(10.0));
        s.reset();
        assert_eq!(s.mirostat_mu(), Some(10.0));
    }
    assert_eq!(Sampler::greedy().mirostat_mu(), None);
}

#[test]
fn orders_and_presets() {
    assert_eq!(
        parse_order("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature").unwrap(),
        LLAMA_CPP_ORDER.to_vec()
    );
    assert_eq!(parse_order("edskypmxt").unwrap(), LLAMA_CPP_ORDER.to_vec());
    assert_eq!(
        parse_order("temp, top-k ,typical").unwrap(),
        vec![Stage::Temperature, Stage::TopK, Stage::TypicalP]
    );
    assert_eq!(
        format_order(&HF_ORDER),
        "penalties;dry;temperature;top_k;top_p;min_p;typ_p;top_n_sigma;xtc"
    );
    assert!(matches!(
        parse_order("top_k;bogus"),
        Err(SamplingError::UnknownStage { .. })
    ));
    assert_eq!(
        "hf".parse::<OrderPreset>().unwrap().stages(),
        HF_ORDER.to_vec()
    );
    assert_eq!(
        "llama.cpp".parse::<OrderPreset>().unwrap().stages(),
        LLAMA_CPP_ORDER.to_vec()
    );
    assert_eq!(SamplerConfig::default().order, LLAMA_CPP_ORDER.to_vec());
    // Order matters: temperature before top-p widens the nucleus.
    let logits = [2.0f32, 1.0, 0.0, -1.0];
    let kept = |order: &str| {
        let config = SamplerConfig {
            top_p: 0.8,
            temperature: 3.0,
            order: parse_order(order).unwrap(),
            ..SamplerConfig::neutral()
        };
        build(config)
            .sample_with_logprobs(&mut logits.to_vec(), &[], 4)
            .unwrap()
            .top_processed
            .len()
    };
    assert!(kept("temperature;top_p") > kept("top_p;temperature"));
    // A stage missing from the order is not applied.
    assert_eq!(kept("temperature"), 4);
}

#[test]
fn penalty_processors_are_usable_directly() {
    let mut row = [1.0f32, -1.0, 2.0];
    processors::apply_penalties(&mut row, &[0, 1, 1], 2.0, 0.0, 0.0).unwrap();
    assert_eq!(row, [0.5, -2.0, 2.0]);
}

#[test]
fn a_temperature_too_small_to_divide_by_is_greedy() {
    // `l / t` passes `f32::MAX` for these: the sampler must not tie every positive logit
    // (each would be clamped to the largest `f32` and drawn uniformly).
    let logits = [3.0f32, 9.5, -2.0, 9.25, 0.5, 7.0];
    for t in [1e-39f32, 1e-38, 1e-37, f32::MIN_POSITIVE] {
        for seed in 0..20 {
            let mut s = build(SamplerConfig {
                temperature: t,
                seed: Some(seed),
                ..SamplerConfig::neutral()
            });
            let token = s.sample(&mut logits.clone(), &[]).unwrap();
            assert_eq!(token, 1, "t = {t:e}, seed {seed}");
        }
    }
    // A small temperature that divides still samples from the quotients (here: the best).
    let mut s = build(SamplerConfig {
        temperature: 1e-30,
        ..SamplerConfig::neutral()
    });
    assert_eq!(s.sample(&mut logits.clone(), &[]).unwrap(), 1);
}
