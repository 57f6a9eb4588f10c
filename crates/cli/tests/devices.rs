//! The per-device suite: one set of checks, written once and run on every device kind
//! (`flex`, `ndarray`, `wgpu`; `cuda` when built with it).
//!
//! - A tiny random model stored in real GGUF blocks (`Q4_1`, `Q8_0`, `F32`): prefill and
//!   per-token decode logits agree with flex's within 1e-4 (f32).
//! - The real model: teacher-forced distributions match llama.cpp's reference under the margin
//!   rule, and greedy generation through the CLI gives llama.cpp's tokens up to its first close
//!   call (and, off flex, flex's tokens as far as flex's choices are decisive).
//! - Half precision (`--dtype f16`/`bf16`) on GPU devices that compute in it: agreement with f32,
//!   reported and bounded.
//!
//! A GPU device that does not open is an error when `KINDLE_REQUIRE_WGPU=1` (CI sets it and
//! installs lavapipe), otherwise the test says it was skipped: a developer's machine without
//! a Vulkan driver still runs the rest of the suite.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::reference::{MARGIN, check_teacher_forced};
use common::tiny::TinyLlama;
use common::{ids, prompts};
use kindle_gguf::GgufFile;
use kindle_gguf::quant::GgmlType;
use kindle_model::{DeviceKind, Dtype, Engine, EngineOptions, KvCache, KvType, OpenDevice};
use kindle_model::{Llama, LogitsFor};
use kindle_sampling::logprobs::top_n;

/// The device `kind`, or `None` (with a note) when it does not open and is not required here.
fn open(kind: DeviceKind, dtype: Dtype) -> Option<OpenDevice> {
    let required = match kind {
        DeviceKind::Flex | DeviceKind::Ndarray => true,
        DeviceKind::Wgpu => std::env::var("KINDLE_REQUIRE_WGPU").is_ok_and(|v| v == "1"),
        DeviceKind::Cuda => std::env::var("KINDLE_REQUIRE_CUDA").is_ok_and(|v| v == "1"),
    };
    match OpenDevice::open(kind, dtype) {
        Ok(device) => Some(device),
        Err(error) if !required => {
            eprintln!(
                "skipped on {}: {error:#} (set KINDLE_REQUIRE_{}=1 to make this an error)",
                kind.name(),
                kind.name().to_uppercase()
            );
            None
        }
        Err(error) => panic!(
            "{} is required here but does not open: {error:#}",
            kind.name()
        ),
    }
}

fn load(file: &GgufFile, device: &OpenDevice) -> Llama {
    Llama::load(file, device).expect("loading the model")
}

// --- The tiny model ---------------------------------------------------------------------------

/// A small deterministic generator (xorshift64*), so the test needs no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// `rows` x `cols` random weights of scale about `scale`, as `ty` blocks.
fn random_blocks(rng: &mut Rng, ty: GgmlType, rows: u64, cols: u64, scale: f32) -> Vec<u8> {
    let blocks = (rows * cols / 32) as usize;
    let mut bytes = Vec::new();
    for _ in 0..blocks {
        match ty {
            GgmlType::Q8_0 => {
                bytes.extend(f16_bytes(scale / 127.0 * (0.5 + rng.unit().abs())));
                bytes.extend((0..32).map(|_| rng.next() as u8));
            }
            GgmlType::Q4_1 => {
                let d = scale / 8.0 * (0.5 + rng.unit().abs());
                bytes.extend(f16_bytes(d));
                bytes.extend(f16_bytes(-8.0 * d + 0.1 * scale * rng.unit()));
                bytes.extend((0..16).map(|_| rng.next() as u8));
            }
            GgmlType::F32 => {
                for _ in 0..32 {
                    bytes.extend((scale * rng.unit()).to_le_bytes());
                }
            }
            other => panic!("no generator for {other:?}"),
        }
    }
    bytes
}

/// A tiny llama GGUF (vocabulary 96, width 64, 2 blocks, 4 heads of 16, 2 KV heads) with
/// `Q4_1` attention and feed-forward weights, a `Q8_0` tied embedding and `F32` norms.
fn tiny_model() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shape = TinyLlama {
            vocab: 96,
            d_model: 64,
            ff: 128,
            heads: 4,
            kv_heads: 2,
            layers: 2,
        };
        let mut w = shape.writer();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (name, dims) in shape.tensors() {
            w = match dims[..] {
                [d] => {
                    let norm: Vec<f32> = (0..d).map(|_| 1.0 + 0.2 * rng.unit()).collect();
                    w.tensor_f32(name, &dims, &norm)
                }
                [d, vocab] if name == "token_embd.weight" => {
                    let embd = random_blocks(&mut rng, GgmlType::Q8_0, vocab, d, 1.0);
                    w.tensor(name, &dims, GgmlType::Q8_0, embd)
                }
                [d_in, d_out] => {
                    // Scaled so that activations stay of order one through the blocks.
                    let scale = 1.5 / (d_in as f32).sqrt();
                    let bytes = random_blocks(&mut rng, GgmlType::Q4_1, d_out, d_in, scale);
                    w.tensor(name, &dims, GgmlType::Q4_1, bytes)
                }
                _ => unreachable!("{name}: {dims:?}"),
            };
        }
        // In the target's test folder, not littering /tmp: written under a name of this
        // process, then renamed (the same bytes every run, so a concurrent run is harmless).
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join("kindle-devices.gguf");
        let partial = dir.join(format!("kindle-devices.{}.part", std::process::id()));
        w.write(&partial).expect("writing the tiny model");
        std::fs::rename(&partial, &path).expect("renaming the model into place");
        path
    })
    .clone()
}

/// Prefill of 9 tokens (every position's logits), then 3 single-token decode steps: the rows
/// one after another.
fn tiny_run(model: &Llama) -> Vec<Vec<f32>> {
    tiny_run_in(model, &mut model.new_cache(32))
}

/// [`tiny_run`] in `cache` (empty, for at least 12 tokens).
fn tiny_run_in(model: &Llama, cache: &mut KvCache) -> Vec<Vec<f32>> {
    let prompt = [1u32, 17, 42, 5, 88, 33, 60, 2, 71];
    let vocab = model.config().vocab_size;
    let logits = model.forward(&prompt, cache, LogitsFor::All).unwrap();
    let mut rows: Vec<Vec<f32>> = logits.chunks(vocab).map(<[f32]>::to_vec).collect();
    for token in [9u32, 95, 40] {
        rows.push(model.forward(&[token], cache, LogitsFor::Last).unwrap());
    }
    rows
}

/// Flex's rows: the reference every device is held to.
fn tiny_reference() -> &'static Vec<Vec<f32>> {
    static ROWS: OnceLock<Vec<Vec<f32>>> = OnceLock::new();
    ROWS.get_or_init(|| {
        let file = GgufFile::open(tiny_model()).unwrap();
        let device = open(DeviceKind::Flex, Dtype::F32).unwrap();
        tiny_run(&load(&file, &device))
    })
}

/// Check `rows` against `reference` (flex's, or `f32`'s) within `bound`, saying how close
/// they came; the logits must carry signal for the comparison to mean anything.
fn check_close(
    kind: DeviceKind,
    what: &str,
    rows: &[Vec<f32>],
    reference: &[Vec<f32>],
    bound: f32,
) {
    let (diff, scale) = max_diff(rows, reference);
    eprintln!(
        "{}: {what}, largest logit difference {diff:.2e} (logits up to {scale:.2})",
        kind.name()
    );
    assert!(scale > 1.0, "logits too small to compare: {scale}");
    assert!(
        diff <= bound,
        "{}: {what}: logits differ by {diff}",
        kind.name()
    );
}

/// Largest absolute difference between two runs, and the largest logit magnitude.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let mut diff = 0f32;
    let mut scale = 0f32;
    for (ra, rb) in a.iter().zip(b) {
        assert_eq!(ra.len(), rb.len());
        for (x, y) in ra.iter().zip(rb) {
            assert!(x.is_finite() && y.is_finite(), "non-finite logit");
            diff = diff.max((x - y).abs());
            scale = scale.max(x.abs());
        }
    }
    (diff, scale)
}

fn tiny_logits_agree_with_flex(kind: DeviceKind) {
    let Some(device) = open(kind, Dtype::F32) else {
        return;
    };
    let file = GgufFile::open(tiny_model()).unwrap();
    let rows = tiny_run(&load(&file, &device));
    check_close(kind, "tiny model, from flex", &rows, tiny_reference(), 1e-4);
}

/// A 4,200-token prompt on the tiny model: its attention scores in one pass would be 282 MB
/// a layer (4 heads x 4,200 x 4,200 `f32`), past what a GPU buffer takes (lavapipe refused
/// 137 MB), so a GPU device prefills it in passes that fit; the last row's logits, and those
/// of a decode step after it, against flex's.
fn long_prompt_prefills_in_passes_that_fit(kind: DeviceKind) {
    let Some(device) = open(kind, Dtype::F32) else {
        return;
    };
    let prompt: Vec<u32> = (0..4200u32).map(|i| (i * 37 + i / 7) % 96).collect();
    let run = |model: &Llama| {
        let mut cache = model.new_cache(prompt.len() + 1);
        let mut rows = vec![model.forward(&prompt, &mut cache, LogitsFor::Last).unwrap()];
        rows.push(model.forward(&[5], &mut cache, LogitsFor::Last).unwrap());
        rows
    };
    let file = GgufFile::open(tiny_model()).unwrap();
    let flex = run(&load(&file, &open(DeviceKind::Flex, Dtype::F32).unwrap()));
    let rows = run(&load(&file, &device));
    check_close(kind, "4,200-token prompt, from flex", &rows, &flex, 1e-4);
}

/// A sliding cache of 8 tokens keeping 2, fed 30 tokens one at a time: each shift turns the
/// kept keys back on the device (`k_shift` in Burn ops), and every step's logits agree with
/// flex's, which turns them the same way.
fn context_shifts_agree_with_flex(kind: DeviceKind) {
    let Some(device) = open(kind, Dtype::F32) else {
        return;
    };
    let run = |model: &Llama| {
        let mut cache = model.new_sliding_cache(8, KvType::F32, 2).unwrap();
        let rows: Vec<Vec<f32>> = (0..30u32)
            .map(|i| {
                let token = (i * 37 + 11) % 96;
                model
                    .forward(&[token], &mut cache, LogitsFor::Last)
                    .unwrap()
            })
            .collect();
        assert!(cache.discarded() >= 20, "{} discarded", cache.discarded());
        rows
    };
    let file = GgufFile::open(tiny_model()).unwrap();
    let flex = run(&load(&file, &open(DeviceKind::Flex, Dtype::F32).unwrap()));
    let rows = run(&load(&file, &device));
    check_close(
        kind,
        "30 steps through context shifts, from flex",
        &rows,
        &flex,
        1e-4,
    );
}

/// Each KV cache type either runs, giving the `f32` cache's logits within its rounding, or is
/// refused at load with an error naming the type (wgpu's WGSL kernels have no 8-bit integers:
/// an `int8` cache once failed at its first kernel instead).
fn kv_types_run_or_are_refused(kind: DeviceKind) {
    let Some(device) = open(kind, Dtype::F32) else {
        return;
    };
    let file = GgufFile::open(tiny_model()).unwrap();
    let reference = tiny_run(&load(&file, &device));
    for (kv_type, bound) in [(KvType::F16, 0.01f32), (KvType::Int8, 0.5)] {
        let options = EngineOptions {
            kv_type,
            ..EngineOptions::on(kind)
        };
        match Engine::load(&file, &options) {
            Ok(engine) => {
                assert!(kind.holds_kv_type(&device.device, kv_type));
                let model = &engine.llama;
                let rows = tiny_run_in(model, &mut model.new_cache_typed(32, kv_type));
                let what = format!("--kv-type {kv_type}, from f32");
                check_close(kind, &what, &rows, &reference, bound);
            }
            Err(error) => {
                let message = format!("{error:#}");
                eprintln!("{}: --kv-type {kv_type} refused: {message}", kind.name());
                assert!(!kind.holds_kv_type(&device.device, kv_type), "{message}");
                assert!(
                    message.contains(&format!("{kv_type} KV cache")),
                    "{message}"
                );
            }
        }
    }
}

fn half_precision_agrees_with_f32(kind: DeviceKind) {
    let Some(f32_device) = open(kind, Dtype::F32) else {
        return;
    };
    let file = GgufFile::open(tiny_model()).unwrap();
    let reference = tiny_run(&load(&file, &f32_device));
    let mut ran = 0;
    for (dtype, bound) in [(Dtype::F16, 0.05f32), (Dtype::Bf16, 0.4)] {
        if !kind.supports(&f32_device.device, dtype) {
            eprintln!(
                "{}: no {} arithmetic on this device",
                kind.name(),
                dtype.name()
            );
            continue;
        }
        let device = open(kind, dtype).expect("the device opened in f32");
        let rows = tiny_run(&load(&file, &device));
        let what = format!("--dtype {}, from f32", dtype.name());
        check_close(kind, &what, &rows, &reference, bound);
        ran += 1;
        // The real model in this precision, against llama.cpp under the margin rule.
        let Some(path) = common::real_model() else {
            continue; // KINDLE_SKIP_REAL_MODEL=1
        };
        let real = GgufFile::open(path).expect("opening the model");
        eprintln!(
            "{} --dtype {} on the real model:",
            kind.name(),
            dtype.name()
        );
        check_teacher_forced(&load(&real, &device));
    }
    assert!(ran > 0, "{} computes in neither f16 nor bf16", kind.name());
}

fn cpu_devices_refuse_half_precision(kind: DeviceKind) {
    let error = format!("{:#}", OpenDevice::open(kind, Dtype::F16).unwrap_err());
    assert!(
        error.contains("--dtype f16") && error.contains("GPU"),
        "{error}"
    );
}

// --- The real model ---------------------------------------------------------------------------

/// The real model on `kind`; `None` when the device does not open (and is not required) or
/// with `KINDLE_SKIP_REAL_MODEL=1`.
fn real_model(kind: DeviceKind) -> Option<Llama> {
    let device = open(kind, Dtype::F32)?;
    let file = GgufFile::open(common::real_model()?).expect("opening the model");
    Some(load(&file, &device))
}

fn real_model_teacher_forced(kind: DeviceKind) {
    if let Some(model) = real_model(kind) {
        check_teacher_forced(&model);
    }
}

/// `kindle generate --device <kind>` greedy on the real model: the prompt tokenized as
/// llama.cpp did, and the same tokens as llama.cpp's greedy continuation up to its first close
/// call (margin < 0.5, the reference's rule); on other devices than flex, also the same tokens
/// as flex wherever flex's own choices were decisive.
fn real_model_greedy_matches_llama_cpp_and_flex(kind: DeviceKind) {
    if open(kind, Dtype::F32).is_none() {
        return;
    }
    let Some(model_path) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let (_, prompt) = prompts()
        .into_iter()
        .find(|(name, _)| name == "france")
        .expect("the france prompt");
    let prompt_ids = ids(&prompt["prompt_ids"]);
    let steps = 6;
    let run = |device: &str| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kindle"))
            .args([
                "generate",
                "--json",
                "--temp",
                "0",
                "-n",
                &steps.to_string(),
            ])
            .args(["--device", device, "-m"])
            .arg(&model_path)
            .arg(prompt["prompt"].as_str().unwrap())
            .output()
            .expect("running kindle");
        assert!(
            out.status.success(),
            "kindle generate --device {device}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON output")
    };
    let other = run(kind.name());
    let other_ids = ids(&other["tokens"]);
    assert_eq!(ids(&other["prompt_tokens"]), prompt_ids, "{}", kind.name());

    // llama.cpp's greedy tokens, as far as its margins were decisive.
    let reference_steps = prompt["steps"].as_array().unwrap();
    let decisive = reference_steps
        .iter()
        .take(steps)
        .take_while(|s| s["margin"].as_f64().unwrap() >= MARGIN)
        .count();
    assert!(
        decisive >= 3,
        "only {decisive} decisive reference steps: pick another prompt"
    );
    let greedy = ids(&prompt["greedy_ids"]);
    assert_eq!(
        other_ids[..decisive],
        greedy[..decisive],
        "{} vs llama.cpp: greedy tokens over the {decisive} decisive steps ({:?} vs {:?})",
        kind.name(),
        other["text"],
        prompt["greedy_text"]
    );
    eprintln!(
        "{}: greedy {:?}, {decisive} decisive steps agree with llama.cpp",
        kind.name(),
        other["text"]
    );
    if kind == DeviceKind::Flex {
        return;
    }

    let flex = run("flex");
    assert_eq!(flex["prompt_tokens"], other["prompt_tokens"]);
    let flex_ids = ids(&flex["tokens"]);
    // Flex's margins along its own greedy path decide how far the texts must agree.
    let model = real_model(DeviceKind::Flex).unwrap();
    let mut all = prompt_ids.clone();
    all.extend(&flex_ids);
    let mut cache = model.new_cache(all.len());
    let logits = model.forward(&all, &mut cache, LogitsFor::All).unwrap();
    let vocab = model.config().vocab_size;
    let mut decisive = 0;
    for i in 0..steps {
        let row = &logits[(prompt_ids.len() - 1 + i) * vocab..][..vocab];
        let top = top_n(row, 2);
        assert_eq!(top[0].0, flex_ids[i], "flex's own greedy path at step {i}");
        if f64::from(top[0].1 - top[1].1) < MARGIN {
            break;
        }
        decisive += 1;
    }
    assert!(
        decisive >= 3,
        "only {decisive} decisive steps: pick another prompt"
    );
    assert_eq!(
        other_ids[..decisive],
        flex_ids[..decisive],
        "{} vs flex: greedy tokens over the {decisive} decisive steps ({:?} vs {:?})",
        kind.name(),
        other["text"],
        flex["text"]
    );
    eprintln!(
        "{}: greedy {:?} (flex {:?}), {decisive} decisive steps agree",
        kind.name(),
        other["text"],
        flex["text"]
    );
}

/// The suite for one device kind.
macro_rules! device_suite {
    ($module:ident, $kind:expr, cpu) => {
        mod $module {
            use super::*;
            #[test]
            fn tiny_model_logits_agree_with_flex() {
                super::tiny_logits_agree_with_flex($kind);
            }
            #[test]
            fn real_model_matches_the_reference() {
                super::real_model_teacher_forced($kind);
            }
            #[test]
            fn real_model_greedy_text_matches_llama_cpp_and_flex() {
                super::real_model_greedy_matches_llama_cpp_and_flex($kind);
            }
            #[test]
            fn refuses_half_precision() {
                super::cpu_devices_refuse_half_precision($kind);
            }
            #[test]
            fn context_shifts_agree_with_flex() {
                super::context_shifts_agree_with_flex($kind);
            }
        }
    };
    ($module:ident, $kind:expr, gpu) => {
        mod $module {
            use super::*;
            #[test]
            fn tiny_model_logits_agree_with_flex() {
                super::tiny_logits_agree_with_flex($kind);
            }
            #[test]
            fn real_model_matches_the_reference() {
                super::real_model_teacher_forced($kind);
            }
            #[test]
            fn real_model_greedy_text_matches_llama_cpp_and_flex() {
                super::real_model_greedy_matches_llama_cpp_and_flex($kind);
            }
            #[test]
            fn half_precision_agrees_with_f32() {
                super::half_precision_agrees_with_f32($kind);
            }
            #[test]
            fn kv_types_run_or_are_refused() {
                super::kv_types_run_or_are_refused($kind);
            }
            #[test]
            fn context_shifts_agree_with_flex() {
                super::context_shifts_agree_with_flex($kind);
            }
            #[test]
            fn long_prompt_prefills_in_passes_that_fit() {
                super::long_prompt_prefills_in_passes_that_fit($kind);
            }
        }
    };
}

device_suite!(flex, DeviceKind::Flex, cpu);
device_suite!(ndarray, DeviceKind::Ndarray, cpu);
device_suite!(wgpu, DeviceKind::Wgpu, gpu);
#[cfg(feature = "cuda")]
device_suite!(cuda, DeviceKind::Cuda, gpu);

#[test]
fn a_device_this_build_lacks_is_a_clear_error() {
    #[cfg(not(feature = "cuda"))]
    {
        let error = format!("{:#}", DeviceKind::Cuda.open().unwrap_err());
        assert!(error.contains("`cuda` feature"), "{error}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["devices", "--json"])
        .output()
        .expect("running kindle devices");
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["flex", "ndarray", "wgpu", "cuda"]);
    assert_eq!(list[0]["available"], true);
}
