//! Scaled rotary tables against ggml's own rotation (`ggml_rope_ext`, the op llama.cpp runs):
//! Llama 3's frequency factors, linear and YaRN scaling (adjacent pairs and halves, with an
//! attention factor, and a local layer under YaRN), on fixed vectors at positions up to 250
//! (`testdata/reference/ggml-rope-scaling.json`); then both executors and the context shift
//! on tiny models with each scaling.

mod common;

use burn::prelude::*;
use common::max_diff;
use common::paths::{check_paths, tiny_quantized_config, tokens};
use common::shifts::{Compare, check_shifts, shift_errors};
use kindle_gguf::quant::GgmlType;
use kindle_kv_cache::shift::KeyRotation;
use kindle_model::llama::{RopeScaling, RopeScalingKind, RopeStyle, RopeTable, Rotary};
use kindle_model::{KvType, LlamaConfig, LogitsFor, SlidingWindowCache};
use serde_json::Value;

/// ggml accumulates each pair's angle per position in `f32` (`theta *= theta_scale`), kindle
/// computes it in `f64` and rounds `cos` and `sin` once. Measured: 1.6e-5 at most (the
/// halves case with its 128-wide heads; the unscaled case 6.7e-6).
const TOLERANCE: f32 = 3e-5;

fn cases() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/reference/ggml-rope-scaling.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The scaling a GGUF file would give for `case`, and whether its layer is global.
fn scaling_of(name: &str, case: &Value) -> (Option<RopeScaling>, bool) {
    let f = |k: &str| case[k].as_f64().unwrap();
    let freq_factors = case["freq_factors"]
        .as_array()
        .map(|_| floats(&case["freq_factors"]));
    let kind = match name {
        "plain" => return (None, true),
        "llama3" => RopeScalingKind::None,
        "linear" => RopeScalingKind::Linear,
        _ => RopeScalingKind::Yarn,
    };
    let global = name != "yarn_local";
    // The local case runs ggml with freq_scale 1, as llama.cpp calls it for a local layer of
    // a model scaled by 4.
    let factor = if global { 1.0 / f("freq_scale") } else { 4.0 };
    let scaling = RopeScaling {
        kind,
        factor,
        original_context: f("original_context") as usize,
        attn_factor: f("attn_factor"),
        freq_factors,
    };
    (Some(scaling), global)
}

/// The largest difference between each case rotated by kindle's table and ggml's output,
/// with the rotary's frequencies or magnitude changed by `plant`.
fn differences(plant: impl Fn(&str, &mut Rotary)) -> Vec<(String, f32)> {
    let cases = cases();
    let mut out = Vec::new();
    for (name, case) in cases["cases"].as_object().unwrap() {
        let d = case["head_dim"].as_u64().unwrap() as usize;
        let positions: Vec<usize> = case["positions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_u64().unwrap() as usize)
            .collect();
        let (scaling, global) = scaling_of(name, case);
        let mut rotary = Rotary::new(d, case["theta"].as_f64().unwrap(), scaling.as_ref(), global);
        plant(name, &mut rotary);
        let style = if case["neox"].as_bool().unwrap() {
            RopeStyle::Halves
        } else {
            RopeStyle::Adjacent
        };
        let table = RopeTable::of(&positions, &rotary).with_style(style);
        let mut x = floats(&case["input"]);
        for (r, row) in x.chunks_exact_mut(d).enumerate() {
            table.rotate(r, row);
        }
        let want = floats(&case["output"]);
        let worst = x
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        out.push((name.clone(), worst));
    }
    out
}

#[test]
fn scaled_tables_rotate_as_ggml() {
    let found = differences(|_, _| {});
    assert_eq!(found.len(), 6);
    for (name, worst) in found {
        eprintln!("{name}: {worst:.2e}");
        assert!(worst <= TOLERANCE, "{name}: {worst} from ggml's rotation");
    }
}

/// The comparison catches each part of the scaling done wrong: YaRN without its magnitude,
/// the ramp's ends swapped, a frequency factor left out, linear scaling by 2 instead of 4.
#[test]
fn a_wrong_scaling_is_caught() {
    type Plant = (&'static str, fn(&mut Rotary));
    let plants: [Plant; 4] = [
        ("yarn", |r| r.magnitude = 1.0),
        ("yarn", |r| r.frequencies.reverse()),
        ("llama3", |r| r.frequencies[20] *= 8.0),
        ("linear", |r| {
            r.frequencies.iter_mut().for_each(|f| *f *= 2.0)
        }),
    ];
    for (target, plant) in plants {
        let found = differences(|name, r| {
            if name == target {
                plant(r)
            }
        });
        let worst = found.iter().find(|(n, _)| n == target).unwrap().1;
        assert!(worst > 100.0 * TOLERANCE, "{target}: only {worst}");
    }
}

/// A linear, a YaRN (with an attention factor) and a Llama 3 (frequency factors) scaling for
/// heads `head_dim` wide, with an original context short enough that YaRN's ramp moves pairs.
fn scalings(head_dim: usize) -> Vec<RopeScaling> {
    let plain = RopeScaling::new(RopeScalingKind::None);
    let factors: Vec<f32> = (0..head_dim / 2).map(|i| 1.0 + i as f32 * 1.5).collect();
    vec![
        RopeScaling {
            kind: RopeScalingKind::Linear,
            factor: 4.0,
            ..plain.clone()
        },
        RopeScaling {
            kind: RopeScalingKind::Yarn,
            factor: 4.0,
            original_context: 16,
            attn_factor: 0.9,
            ..plain.clone()
        },
        RopeScaling {
            freq_factors: Some(factors),
            ..plain
        },
    ]
}

/// Both executors rotate by the scaled table: the host path (CPU kernels, host cache) and
/// the Burn path give the same logits for each scaling, and those differ from the unscaled
/// model's.
#[test]
fn host_and_burn_paths_agree_under_rotary_scaling() {
    let config = || LlamaConfig::new(96, 64, 2, 4, 2, 96).with_context_length(96);
    let plain = tiny_quantized_config(config(), GgmlType::F16, false);
    let prompt = tokens(7, 20, 96);
    let unscaled = plain
        .forward(&prompt[..5], &mut plain.new_cache(40), LogitsFor::All)
        .unwrap();
    for scaling in scalings(16) {
        let label = format!("{:?}", scaling.kind);
        let model = tiny_quantized_config(
            config().with_rope_scaling(Some(scaling)),
            GgmlType::F16,
            false,
        );
        for len in [5, 20] {
            check_paths(
                &model,
                &prompt[..len],
                12,
                2e-3,
                || model.new_cache(40),
                &label,
            );
        }
        let scaled = model
            .forward(&prompt[..5], &mut model.new_cache(40), LogitsFor::All)
            .unwrap();
        assert!(max_diff(&scaled, &unscaled) > 1e-2, "{label}: no effect");
    }
}

/// A context shift re-rotates the kept keys by the scaled angles: a one-layer model's logits
/// right after each shift equal a fresh prefill's; turned by the unscaled angles they do not.
#[test]
fn a_shift_under_rotary_scaling_equals_a_fresh_prefill() {
    let stream: Vec<u32> = (0..60).map(|i| (i * 7 + 3) % 64).collect();
    for scaling in scalings(8) {
        let label = format!("{:?}", scaling.kind);
        let model = LlamaConfig::new(64, 32, 1, 4, 2, 48)
            .with_rope_scaling(Some(scaling))
            .init_random(11, &Device::flex());
        for keep in [0, 4] {
            check_shifts(&model, KvType::F32, (16, keep), &stream, Compare::Logits, 3);
        }
        let unscaled = Some(KeyRotation::adjacent(model.config().rope_theta));
        let config = model.config().kv_cache_config(16);
        let cache = SlidingWindowCache::with_rotations(
            config,
            KvType::F32,
            0,
            vec![unscaled],
            &Device::flex(),
        )
        .unwrap();
        let (shifts, worst) = shift_errors(&model, cache, KvType::F32, &stream, Compare::Logits);
        assert!(
            shifts >= 3 && worst > 1e-2,
            "{label}: the unscaled shift is {worst} off"
        );
    }
}

/// Run-time rotary settings over a file's, as llama.cpp applies its flags.
#[test]
fn rope_overrides_replace_the_file_s_settings() {
    use kindle_model::{ModelError, RopeOverrides};
    let config = || LlamaConfig::new(96, 64, 2, 4, 2, 96).with_context_length(2048);
    let with = |o: RopeOverrides| config().with_rope_overrides(&o);
    // Nothing given: the same hyperparameters.
    assert_eq!(with(RopeOverrides::default()).unwrap(), config());
    // The base only: the context and the scaling stay.
    let c = with(RopeOverrides {
        freq_base: Some(5e5),
        ..RopeOverrides::default()
    })
    .unwrap();
    assert_eq!(
        (c.rope_theta, c.context_length, c.rope_scaling),
        (5e5, 2048, None)
    );
    // Linear x2 doubles the context; YaRN x4 stretches the original (the file's context
    // unless given).
    let c = with(RopeOverrides {
        kind: Some(RopeScalingKind::Linear),
        factor: Some(2.0),
        ..RopeOverrides::default()
    })
    .unwrap();
    assert_eq!(c.context_length, 4096);
    assert_eq!(c.rope_scaling.unwrap().kind, RopeScalingKind::Linear);
    let c = with(RopeOverrides {
        kind: Some(RopeScalingKind::Yarn),
        factor: Some(4.0),
        ..RopeOverrides::default()
    })
    .unwrap();
    let s = c.rope_scaling.clone().unwrap();
    assert_eq!(
        (c.context_length, s.original_context, s.factor),
        (8192, 2048, 4.0)
    );
    let c = with(RopeOverrides {
        kind: Some(RopeScalingKind::Yarn),
        factor: Some(4.0),
        original_context: Some(1024),
        ..RopeOverrides::default()
    })
    .unwrap();
    assert_eq!(c.context_length, 4096);
    // A kind without a factor (the file has none): nothing stretches.
    let c = with(RopeOverrides {
        kind: Some(RopeScalingKind::Yarn),
        ..RopeOverrides::default()
    })
    .unwrap();
    assert_eq!((c.context_length, c.rope_scaling), (2048, None));
    // `none` over a scaled file drops the stretch but keeps frequency factors.
    let scaled = config().with_rope_scaling(Some(RopeScaling {
        kind: RopeScalingKind::Linear,
        factor: 8.0,
        freq_factors: Some(vec![1.0; 8]),
        ..RopeScaling::new(RopeScalingKind::Linear)
    }));
    let none = RopeOverrides {
        kind: Some(RopeScalingKind::None),
        ..RopeOverrides::default()
    };
    let s = scaled
        .with_rope_overrides(&none)
        .unwrap()
        .rope_scaling
        .unwrap();
    assert_eq!(
        (s.kind, s.freq_factors),
        (RopeScalingKind::None, Some(vec![1.0; 8]))
    );
    for (o, flag) in [
        (
            RopeOverrides {
                factor: Some(-1.0),
                ..RopeOverrides::default()
            },
            "--rope-scale",
        ),
        (
            RopeOverrides {
                freq_base: Some(f64::NAN),
                ..RopeOverrides::default()
            },
            "--rope-freq-base",
        ),
        (
            RopeOverrides {
                original_context: Some(0),
                ..RopeOverrides::default()
            },
            "--yarn-orig-ctx",
        ),
    ] {
        let err = with(o).unwrap_err();
        assert!(
            matches!(&err, ModelError::Option(m) if m.contains(flag)),
            "{err}"
        );
    }
}
