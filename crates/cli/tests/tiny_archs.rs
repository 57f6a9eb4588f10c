//! Tiny random Llama, Qwen2 and Qwen3 models (GPT-2: `tests/tiny_gpt2.rs`), written by this test in
//! both forms — a Hugging Face directory (config.json + a safetensors file written by hand
//! here, HF tensor names, rotate-half RoPE) and a GGUF file (llama.cpp's names; Llama's q/k rows permuted as
//! llama.cpp's converter does) — give the same logits from either form, on the host executor
//! (quantized-format kernels) and on the Burn executor (dense `f32` weights), and those logits
//! match an independent forward pass written below as plain loops over the HF tensors, within
//! 1e-4, for a prompt read in one pass and for the same tokens decoded one at a time.

use std::path::Path;

use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_hf::{HfDir, ToGgufOptions};
use kindle_model::{Llama, LoadOptions, OpenDevice, WeightFormat};

mod common;

use common::tiny_hf::{Rng, Tensors, matvec, run, worst, write_safetensors};

/// The hyperparameters of a tiny model.
#[derive(Clone, Copy, Debug)]
struct Tiny {
    arch: Arch,
    vocab: usize,
    d: usize,
    ff: usize,
    heads: usize,
    kv_heads: usize,
    layers: usize,
    theta: f32,
    eps: f32,
    tied: bool,
    /// The head width when it is not `d / heads` (Qwen3 states it), else 0.
    hd: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Tiny {
    fn head_dim(&self) -> usize {
        if self.hd > 0 {
            self.hd
        } else {
            self.d / self.heads
        }
    }
}

fn random_weights(t: &Tiny, seed: u64) -> Tensors {
    let mut rng = Rng(seed);
    let (d, ff, hd) = (t.d, t.ff, t.head_dim());
    let (q, kv) = (t.heads * hd, t.kv_heads * hd);
    let mut w = Tensors::new();
    let mut put = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        w.insert(name, (shape, rng.values(n, scale, offset)));
    };
    put(
        "model.embed_tokens.weight".into(),
        vec![t.vocab, d],
        1.0,
        0.0,
    );
    put("model.norm.weight".into(), vec![d], 0.2, 1.0);
    if !t.tied {
        put("lm_head.weight".into(), vec![t.vocab, d], 0.3, 0.0);
    }
    for l in 0..t.layers {
        let p = format!("model.layers.{l}.");
        put(format!("{p}input_layernorm.weight"), vec![d], 0.2, 1.0);
        put(
            format!("{p}post_attention_layernorm.weight"),
            vec![d],
            0.2,
            1.0,
        );
        put(format!("{p}self_attn.q_proj.weight"), vec![q, d], 0.4, 0.0);
        put(format!("{p}self_attn.k_proj.weight"), vec![kv, d], 0.4, 0.0);
        put(format!("{p}self_attn.v_proj.weight"), vec![kv, d], 0.4, 0.0);
        put(format!("{p}self_attn.o_proj.weight"), vec![d, q], 0.4, 0.0);
        put(format!("{p}mlp.gate_proj.weight"), vec![ff, d], 0.4, 0.0);
        put(format!("{p}mlp.up_proj.weight"), vec![ff, d], 0.4, 0.0);
        put(format!("{p}mlp.down_proj.weight"), vec![d, ff], 0.4, 0.0);
        if t.arch == Arch::Qwen2 {
            put(format!("{p}self_attn.q_proj.bias"), vec![q], 0.5, 0.0);
            put(format!("{p}self_attn.k_proj.bias"), vec![kv], 0.5, 0.0);
            put(format!("{p}self_attn.v_proj.bias"), vec![kv], 0.5, 0.0);
        }
        if t.arch == Arch::Qwen3 {
            put(format!("{p}self_attn.q_norm.weight"), vec![hd], 0.3, 1.0);
            put(format!("{p}self_attn.k_norm.weight"), vec![hd], 0.3, 1.0);
        }
    }
    w
}

// ---------------------------------------------------------------------------------------------
// The two forms.

fn config_json(t: &Tiny) -> serde_json::Value {
    let (architecture, model_type) = match t.arch {
        Arch::Llama => ("LlamaForCausalLM", "llama"),
        Arch::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        Arch::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
    };
    let mut config = serde_json::json!({
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": t.vocab,
        "hidden_size": t.d,
        "intermediate_size": t.ff,
        "num_hidden_layers": t.layers,
        "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads,
        "max_position_embeddings": 64,
        "rope_theta": t.theta,
        "rms_norm_eps": t.eps,
        "tie_word_embeddings": t.tied,
        "torch_dtype": "float32",
    });
    if t.hd > 0 {
        config["head_dim"] = t.hd.into();
    }
    config
}

fn write_hf_dir(dir: &Path, t: &Tiny, w: &Tensors) {
    std::fs::write(dir.join("config.json"), config_json(t).to_string()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), w);
}

/// llama.cpp's `LlamaModel.permute`: HF's rotate-half rows of each head reordered so that
/// adjacent pairs rotate together (`reshape(heads, 2, rows / heads / 2, cols)`, swap axes 1
/// and 2).
fn permute(values: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    let half = rows / heads / 2;
    let mut out = vec![0.0; values.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let from = h * 2 * half + j * half + i;
                let to = h * 2 * half + i * 2 + j;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&values[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

/// The GGUF file llama.cpp's converter writes for these weights.
fn gguf(t: &Tiny, w: &Tensors) -> GgufFile {
    GgufFile::from_bytes(gguf_writer(t, w).to_bytes()).unwrap()
}

/// The writer of [`gguf`]'s file.
fn gguf_writer(t: &Tiny, w: &Tensors) -> GgufWriter {
    let arch = match t.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    };
    let u32 = |v: usize| MetadataValue::U32(v as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let mut writer = GgufWriter::new()
        .metadata("general.architecture", arch)
        .metadata(key("block_count"), u32(t.layers))
        .metadata(key("context_length"), u32(64))
        .metadata(key("embedding_length"), u32(t.d))
        .metadata(key("feed_forward_length"), u32(t.ff))
        .metadata(key("attention.head_count"), u32(t.heads))
        .metadata(key("attention.head_count_kv"), u32(t.kv_heads))
        .metadata(key("rope.freq_base"), MetadataValue::F32(t.theta))
        .metadata(
            key("attention.layer_norm_rms_epsilon"),
            MetadataValue::F32(t.eps),
        )
        .metadata(key("vocab_size"), u32(t.vocab));
    if t.hd > 0 {
        writer = writer
            .metadata(key("attention.key_length"), u32(t.hd))
            .metadata(key("attention.value_length"), u32(t.hd));
    }
    let mut put = |name: &str, hf: &str, permute_heads: Option<usize>| {
        let (shape, values) = &w[hf];
        let dims: Vec<u64> = shape.iter().rev().map(|&n| n as u64).collect();
        let values = match (permute_heads, t.arch) {
            (Some(heads), Arch::Llama) => permute(values, shape[0], shape[1], heads),
            _ => values.clone(),
        };
        writer = std::mem::take(&mut writer).tensor_f32(name, &dims, &values);
    };
    put("token_embd.weight", "model.embed_tokens.weight", None);
    put("output_norm.weight", "model.norm.weight", None);
    if !t.tied {
        put("output.weight", "lm_head.weight", None);
    }
    for l in 0..t.layers {
        let (b, p) = (format!("blk.{l}."), format!("model.layers.{l}."));
        let names = [
            ("attn_norm.weight", "input_layernorm.weight", None),
            ("ffn_norm.weight", "post_attention_layernorm.weight", None),
            ("attn_q.weight", "self_attn.q_proj.weight", Some(t.heads)),
            ("attn_k.weight", "self_attn.k_proj.weight", Some(t.kv_heads)),
            ("attn_v.weight", "self_attn.v_proj.weight", None),
            ("attn_output.weight", "self_attn.o_proj.weight", None),
            ("ffn_gate.weight", "mlp.gate_proj.weight", None),
            ("ffn_up.weight", "mlp.up_proj.weight", None),
            ("ffn_down.weight", "mlp.down_proj.weight", None),
        ];
        for (g, h, heads) in names {
            put(&format!("{b}{g}"), &format!("{p}{h}"), heads);
        }
        if t.arch == Arch::Qwen3 {
            for x in ["q", "k"] {
                put(
                    &format!("{b}attn_{x}_norm.weight"),
                    &format!("{p}self_attn.{x}_norm.weight"),
                    None,
                );
            }
        }
        if t.arch == Arch::Qwen2 {
            for x in ["q", "k", "v"] {
                put(
                    &format!("{b}attn_{x}.bias"),
                    &format!("{p}self_attn.{x}_proj.bias"),
                    None,
                );
            }
        }
    }
    writer
}

// ---------------------------------------------------------------------------------------------
// The reference: the HF model's forward pass, as plain loops.

fn rms_norm(x: &[f32], gamma: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(gamma)
        .map(|(v, g)| (*v as f64 * inv) as f32 * g)
        .collect()
}

/// HF's rotate-half RoPE on each head of `x` at position `pos`.
fn rope(x: &mut [f32], head_dim: usize, pos: usize, theta: f32) {
    let half = head_dim / 2;
    for head in x.chunks_mut(head_dim) {
        for i in 0..half {
            let freq = 1.0 / (theta as f64).powf(2.0 * i as f64 / head_dim as f64);
            let (sin, cos) = (pos as f64 * freq).sin_cos();
            let (a, b) = (head[i] as f64, head[i + half] as f64);
            head[i] = (a * cos - b * sin) as f32;
            head[i + half] = (b * cos + a * sin) as f32;
        }
    }
}

/// The logits of every position of `tokens`.
fn reference(t: &Tiny, w: &Tensors, tokens: &[u32]) -> Vec<Vec<f32>> {
    let (d, hd) = (t.d, t.head_dim());
    let group = t.heads / t.kv_heads;
    let get = |name: &str| &w[name];
    let bias = |name: &str, x: Vec<f32>| match w.get(name) {
        Some((_, b)) => x.iter().zip(b).map(|(v, b)| v + b).collect(),
        None => x,
    };
    let embed = get("model.embed_tokens.weight");
    let mut keys: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut values: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut out = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let mut x = embed.1[tok as usize * d..(tok as usize + 1) * d].to_vec();
        for l in 0..t.layers {
            let p = format!("model.layers.{l}.");
            let h = rms_norm(&x, &get(&format!("{p}input_layernorm.weight")).1, t.eps);
            let proj = |n: &str| {
                let name = format!("{p}self_attn.{n}_proj");
                bias(
                    &format!("{name}.bias"),
                    matvec(get(&format!("{name}.weight")), &h),
                )
            };
            let (mut q, mut k, v) = (proj("q"), proj("k"), proj("v"));
            // Qwen3: each head RMS-normed before RoPE.
            for (x, name) in [(&mut q, "q"), (&mut k, "k")] {
                if let Some((_, gamma)) = w.get(&format!("{p}self_attn.{name}_norm.weight")) {
                    let normed: Vec<f32> = x
                        .chunks(hd)
                        .flat_map(|h| rms_norm(h, gamma, t.eps))
                        .collect();
                    *x = normed;
                }
            }
            rope(&mut q, hd, pos, t.theta);
            rope(&mut k, hd, pos, t.theta);
            keys[l].push(k);
            values[l].push(v);
            let mut context = vec![0.0f32; t.heads * hd];
            for head in 0..t.heads {
                let kvh = head / group;
                let qh = &q[head * hd..(head + 1) * hd];
                let scores: Vec<f64> = keys[l]
                    .iter()
                    .map(|k| {
                        let kh = &k[kvh * hd..(kvh + 1) * hd];
                        qh.iter()
                            .zip(kh)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for (e, v) in exps.iter().zip(&values[l]) {
                    for i in 0..hd {
                        context[head * hd + i] += (e / sum * v[kvh * hd + i] as f64) as f32;
                    }
                }
            }
            let o = matvec(get(&format!("{p}self_attn.o_proj.weight")), &context);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rms_norm(
                &x,
                &get(&format!("{p}post_attention_layernorm.weight")).1,
                t.eps,
            );
            let gate = matvec(get(&format!("{p}mlp.gate_proj.weight")), &h);
            let up = matvec(get(&format!("{p}mlp.up_proj.weight")), &h);
            let act: Vec<f32> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| (*g as f64 / (1.0 + (-*g as f64).exp())) as f32 * u)
                .collect();
            let down = matvec(get(&format!("{p}mlp.down_proj.weight")), &act);
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
        let h = rms_norm(&x, &get("model.norm.weight").1, t.eps);
        let head = w.get("lm_head.weight").unwrap_or(embed);
        out.push(matvec(head, &h));
    }
    out
}

// ---------------------------------------------------------------------------------------------

fn check(t: Tiny) {
    let w = random_weights(&t, 0x9e37_79b9_7f4a_7c15);
    let dir = tempfile::tempdir().unwrap();
    write_hf_dir(dir.path(), &t, &w);
    let from_hf = HfDir::open(dir.path())
        .and_then(|d| {
            d.to_gguf_file(&ToGgufOptions {
                tensor_type: None,
                tokenizer: false,
            })
        })
        .expect("reading the HF directory");
    let from_gguf = gguf(&t, &w);
    // A prompt of 16 rows or more takes a prefill path (Burn's dense matmul without SIMD; the
    // kernels' prefill product from 32 rows); the steps the decode path.
    let tokens: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % t.vocab as u32).collect();
    let expected = reference(&t, &w, &tokens);
    let device = OpenDevice::flex();
    for (form, file) in [("HF", &from_hf), ("GGUF", &from_gguf)] {
        for weights in [WeightFormat::Quantized, WeightFormat::DenseF32] {
            let model = Llama::from_gguf_with(file, &device.device, LoadOptions::new(weights))
                .unwrap_or_else(|e| panic!("{:?} {form}: {e}", t.arch));
            let (all, steps) = run(&model, &tokens);
            let (a, s) = (worst(&all, &expected), worst(&steps, &expected));
            eprintln!(
                "{:?} from {form}, {weights:?}: prefill {a:.1e}, decode {s:.1e}",
                t.arch
            );
            assert!(
                a < 1e-4,
                "{:?} from {form}, {weights:?}: prefill off by {a}",
                t.arch
            );
            assert!(
                s < 1e-4,
                "{:?} from {form}, {weights:?}: decode off by {s}",
                t.arch
            );
        }
    }
}

const LLAMA: Tiny = Tiny {
    arch: Arch::Llama,
    vocab: 40,
    d: 32,
    ff: 48,
    heads: 4,
    kv_heads: 2,
    layers: 2,
    theta: 10000.0,
    eps: 1e-5,
    tied: false,
    hd: 0,
};

#[test]
fn tiny_llama_from_hf_and_gguf_matches_the_reference() {
    check(LLAMA);
    check(Tiny {
        tied: true,
        kv_heads: 4,
        ..LLAMA
    });
}

#[test]
fn tiny_qwen2_from_hf_and_gguf_matches_the_reference() {
    let qwen = Tiny {
        arch: Arch::Qwen2,
        theta: 1e6,
        eps: 1e-6,
        ..LLAMA
    };
    check(qwen);
    check(Tiny {
        tied: true,
        kv_heads: 1,
        ..qwen
    });
}

#[test]
fn tiny_qwen3_from_hf_and_gguf_matches_the_reference() {
    // Heads twice as wide as `d / heads`, as Qwen3's (128 against 1024 / 16 in 0.6B).
    let qwen = Tiny {
        arch: Arch::Qwen3,
        theta: 1e6,
        eps: 1e-6,
        hd: 16,
        ..LLAMA
    };
    check(qwen);
    check(Tiny {
        tied: true,
        kv_heads: 1,
        ..qwen
    });
}

/// The tiny models llama.cpp's logits were taken on, by name.
fn llama_cpp_cases() -> Vec<(&'static str, Tiny)> {
    let qwen2 = Tiny {
        arch: Arch::Qwen2,
        theta: 1e6,
        eps: 1e-6,
        ..LLAMA
    };
    let qwen3 = Tiny {
        arch: Arch::Qwen3,
        hd: 16,
        ..qwen2
    };
    let tied = |t: Tiny, kv_heads| Tiny {
        tied: true,
        kv_heads,
        ..t
    };
    vec![
        ("llama", LLAMA),
        ("llama_tied_mha", tied(LLAMA, 4)),
        ("qwen2", qwen2),
        ("qwen2_tied_mqa", tied(qwen2, 1)),
        ("qwen3", qwen3),
        ("qwen3_tied_mqa", tied(qwen3, 1)),
    ]
}

/// The architectures as llama.cpp runs them (not only as this file's reference does): each
/// tiny model's logits, prefilled and decoded, on both executors, against llama.cpp's on the
/// same GGUF file (`f32` weights and cache, no flash attention; see
/// [`LLAMA_CPP_TOLERANCE`]).
#[test]
fn tiny_models_match_llama_cpp() {
    let device = OpenDevice::flex();
    for (name, t) in llama_cpp_cases() {
        let w = random_weights(&t, 0x9e37_79b9_7f4a_7c15);
        let bytes = common::tiny_hf::for_llama_cpp(gguf_writer(&t, &w));
        let (tokens, expected) = common::tiny_hf::llama_cpp_case(name, &bytes);
        let file = GgufFile::from_bytes(bytes).unwrap();
        for weights in [WeightFormat::Quantized, WeightFormat::DenseF32] {
            let model =
                Llama::from_gguf_with(&file, &device.device, LoadOptions::new(weights)).unwrap();
            let (all, steps) = run(&model, &tokens);
            let (a, s) = (worst(&all, &expected), worst(&steps, &expected));
            eprintln!("{name}, {weights:?}: prefill {a:.1e}, decode {s:.1e}");
            assert!(
                a <= LLAMA_CPP_TOLERANCE && s <= LLAMA_CPP_TOLERANCE,
                "{name}, {weights:?}: {a}, {s} from llama.cpp"
            );
        }
    }
}

/// How far a tiny model's logits may be from llama.cpp's: measured 1.3e-5 at most (the tied
/// multi-head Llama on the Burn executor, logits up to 10.6), `f32` sums in other orders.
const LLAMA_CPP_TOLERANCE: f32 = 2e-5;

/// The comparison catches a model that is slightly wrong: Qwen2 with its rotary base read as
/// 10,000 instead of 1,000,000 is far past the tolerance.
#[test]
fn a_wrong_rotary_base_is_caught_against_llama_cpp() {
    let t = llama_cpp_cases()[2].1;
    let w = random_weights(&t, 0x9e37_79b9_7f4a_7c15);
    let bytes = common::tiny_hf::for_llama_cpp(gguf_writer(&t, &w));
    let (tokens, expected) = common::tiny_hf::llama_cpp_case("qwen2", &bytes);
    let wrong = Tiny { theta: 1e4, ..t };
    let file =
        GgufFile::from_bytes(common::tiny_hf::for_llama_cpp(gguf_writer(&wrong, &w))).unwrap();
    let model = Llama::from_gguf_with(
        &file,
        &OpenDevice::flex().device,
        LoadOptions::new(WeightFormat::Quantized),
    )
    .unwrap();
    let off = worst(&run(&model, &tokens).0, &expected);
    assert!(off > 100.0 * LLAMA_CPP_TOLERANCE, "only {off}");
}

/// Writes the tiny models llama.cpp ran to `$KINDLE_TINY_ARCHS_DIR`.
#[test]
#[ignore = "writes the reference's input files"]
fn write_the_tiny_models_for_llama_cpp() {
    for (name, t) in llama_cpp_cases() {
        let w = random_weights(&t, 0x9e37_79b9_7f4a_7c15);
        common::tiny_hf::write_for_llama_cpp(
            name,
            &common::tiny_hf::for_llama_cpp(gguf_writer(&t, &w)),
        );
    }
}

/// Every position's logits of `tokens` from the GGUF form of `t` with weights `w` (host
/// kernels).
fn gguf_logits(t: &Tiny, w: &Tensors, tokens: &[u32]) -> Vec<Vec<f32>> {
    let model = Llama::from_gguf_with(
        &gguf(t, w),
        &OpenDevice::flex().device,
        LoadOptions::new(WeightFormat::Quantized),
    )
    .unwrap();
    run(&model, tokens).0
}

#[test]
fn a_planted_error_in_the_reference_is_caught() {
    // The comparison can fail: a reference whose RoPE turns the other way is far off.
    let t = Tiny {
        arch: Arch::Qwen2,
        ..LLAMA
    };
    let w = random_weights(&t, 7);
    let tokens: Vec<u32> = (0..6).collect();
    let all = gguf_logits(&t, &w, &tokens);
    let wrong = Tiny {
        theta: 1.0 / t.theta,
        ..t
    };
    assert!(worst(&all, &reference(&wrong, &w, &tokens)) > 1e-2);
}

#[test]
fn a_qwen3_reference_without_its_head_norms_is_caught() {
    // The head norms matter: the reference without them is far from the model with them.
    let t = Tiny {
        arch: Arch::Qwen3,
        hd: 16,
        ..LLAMA
    };
    let w = random_weights(&t, 11);
    let tokens: Vec<u32> = (0..6).collect();
    let all = gguf_logits(&t, &w, &tokens);
    assert!(worst(&all, &reference(&t, &w, &tokens)) < 1e-4);
    let mut without = w.clone();
    without.retain(|name, _| !name.ends_with("_norm.weight") || !name.contains("self_attn"));
    assert!(worst(&all, &reference(&t, &without, &tokens)) > 1e-2);
}
