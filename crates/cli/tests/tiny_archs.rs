//! Tiny random models of each architecture, written by this test in both forms — a Hugging
//! Face directory (config.json + a safetensors file written by hand here, HF tensor names,
//! rotate-half RoPE) and a GGUF file (llama.cpp's names; Llama's q/k rows permuted as
//! llama.cpp's converter does) — give the same logits from either form, on the host executor
//! (quantized-format kernels) and on the Burn executor (dense `f32` weights), and those logits
//! match an independent forward pass written below as plain loops over the HF tensors, within
//! 1e-4, for a prompt read in one pass and for the same tokens decoded one at a time.

use std::collections::BTreeMap;
use std::path::Path;

use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_hf::{HfDir, ToGgufOptions};
use kindle_model::{Llama, LoadOptions, LogitsFor, OpenDevice, WeightFormat};

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Llama,
    Qwen2,
}

impl Tiny {
    fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}

/// A deterministic generator of weights in [-scale, scale).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn values(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

/// The model's tensors by HF name: row-major, `[out, in]` for matrices.
type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

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
    }
    w
}

// ---------------------------------------------------------------------------------------------
// The two forms.

fn config_json(t: &Tiny) -> serde_json::Value {
    let (architecture, model_type) = match t.arch {
        Arch::Llama => ("LlamaForCausalLM", "llama"),
        Arch::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
    };
    serde_json::json!({
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
    })
}

/// A safetensors file, written as the format says: an 8-byte little-endian header length, the
/// JSON header (dtype, shape, data offsets), the data.
fn write_safetensors(path: &Path, tensors: &Tensors) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, (shape, values)) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.clone(),
            serde_json::json!({ "dtype": "F32", "shape": shape, "data_offsets": [start, data.len()] }),
        );
    }
    let mut header = serde_json::Value::Object(header).to_string().into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
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
    let arch = match t.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
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
    GgufFile::from_bytes(writer.to_bytes()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The reference: the HF model's forward pass, as plain loops.

fn matvec(w: &(Vec<usize>, Vec<f32>), x: &[f32]) -> Vec<f32> {
    let (rows, cols) = (w.0[0], w.0[1]);
    assert_eq!(x.len(), cols);
    (0..rows)
        .map(|r| {
            let row = &w.1[r * cols..(r + 1) * cols];
            row.iter()
                .zip(x)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum::<f64>() as f32
        })
        .collect()
}

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

/// Logits of every position: one pass over the whole prompt, and the same tokens fed one at
/// a time.
fn run(model: &Llama, tokens: &[u32]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let vocab = model.config().vocab_size;
    let mut cache = model.new_cache(tokens.len());
    let all = model.forward(tokens, &mut cache, LogitsFor::All).unwrap();
    let mut cache = model.new_cache(tokens.len());
    let steps = tokens
        .iter()
        .map(|&t| model.forward(&[t], &mut cache, LogitsFor::Last).unwrap())
        .collect();
    (all.chunks(vocab).map(<[f32]>::to_vec).collect(), steps)
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

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
    // A prompt longer than 16 rows takes the prefill path; the steps the decode path.
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

// ---------------------------------------------------------------------------------------------
// GPT-2: learned positions, LayerNorms with biases, a fused q/k/v (HF's Conv1D weights are
// stored `[in, out]`), biases everywhere, a plain GELU feed-forward network.

struct Gpt2 {
    vocab: usize,
    d: usize,
    heads: usize,
    layers: usize,
    positions: usize,
    eps: f32,
}

impl Gpt2 {
    fn ff(&self) -> usize {
        4 * self.d
    }
}

fn gpt2_weights(t: &Gpt2, seed: u64) -> Tensors {
    let mut rng = Rng(seed);
    let (d, ff) = (t.d, t.ff());
    let mut w = Tensors::new();
    let mut put = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        w.insert(name, (shape, rng.values(n, scale, offset)));
    };
    put("transformer.wte.weight".into(), vec![t.vocab, d], 1.0, 0.0);
    put(
        "transformer.wpe.weight".into(),
        vec![t.positions, d],
        0.5,
        0.0,
    );
    put("transformer.ln_f.weight".into(), vec![d], 0.2, 1.0);
    put("transformer.ln_f.bias".into(), vec![d], 0.2, 0.0);
    for l in 0..t.layers {
        let p = format!("transformer.h.{l}.");
        for ln in ["ln_1", "ln_2"] {
            put(format!("{p}{ln}.weight"), vec![d], 0.2, 1.0);
            put(format!("{p}{ln}.bias"), vec![d], 0.2, 0.0);
        }
        // Conv1D: `[in, out]`.
        put(format!("{p}attn.c_attn.weight"), vec![d, 3 * d], 0.4, 0.0);
        put(format!("{p}attn.c_attn.bias"), vec![3 * d], 0.5, 0.0);
        put(format!("{p}attn.c_proj.weight"), vec![d, d], 0.4, 0.0);
        put(format!("{p}attn.c_proj.bias"), vec![d], 0.3, 0.0);
        put(format!("{p}mlp.c_fc.weight"), vec![d, ff], 0.4, 0.0);
        put(format!("{p}mlp.c_fc.bias"), vec![ff], 0.3, 0.0);
        put(format!("{p}mlp.c_proj.weight"), vec![ff, d], 0.3, 0.0);
        put(format!("{p}mlp.c_proj.bias"), vec![d], 0.3, 0.0);
    }
    w
}

fn gpt2_hf_dir(dir: &Path, t: &Gpt2, w: &Tensors) {
    let config = serde_json::json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": t.vocab,
        "n_embd": t.d,
        "n_layer": t.layers,
        "n_head": t.heads,
        "n_positions": t.positions,
        "n_ctx": t.positions,
        "n_inner": null,
        "layer_norm_epsilon": t.eps,
        "activation_function": "gelu_new",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), w);
}

/// `[rows, cols]` row-major transposed.
fn transposed(shape: &[usize], values: &[f32]) -> Vec<f32> {
    let (rows, cols) = (shape[0], shape[1]);
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// The GGUF file llama.cpp's converter writes: Conv1D weights transposed to `[out, in]` rows,
/// the head tied to the token embedding.
fn gpt2_gguf(t: &Gpt2, w: &Tensors) -> GgufFile {
    gpt2_gguf_without(t, w, "")
}

/// [`gpt2_gguf`] without the tensor named `skip`.
fn gpt2_gguf_without(t: &Gpt2, w: &Tensors, skip: &str) -> GgufFile {
    let u32 = |v: usize| MetadataValue::U32(v as u32);
    let mut writer = GgufWriter::new()
        .metadata("general.architecture", "gpt2")
        .metadata("gpt2.block_count", u32(t.layers))
        .metadata("gpt2.context_length", u32(t.positions))
        .metadata("gpt2.embedding_length", u32(t.d))
        .metadata("gpt2.feed_forward_length", u32(t.ff()))
        .metadata("gpt2.attention.head_count", u32(t.heads))
        .metadata(
            "gpt2.attention.layer_norm_epsilon",
            MetadataValue::F32(t.eps),
        )
        .metadata("gpt2.vocab_size", u32(t.vocab));
    let mut put = |name: &str, hf: &str, conv1d: bool| {
        if name == skip {
            return;
        }
        let (shape, values) = &w[hf];
        let (dims, values): (Vec<u64>, Vec<f32>) = if conv1d {
            // `[in, out]` → rows of `in` values: GGUF dims `[in, out]`.
            (
                vec![shape[0] as u64, shape[1] as u64],
                transposed(shape, values),
            )
        } else {
            (
                shape.iter().rev().map(|&n| n as u64).collect(),
                values.clone(),
            )
        };
        writer = std::mem::take(&mut writer).tensor_f32(name, &dims, &values);
    };
    put("token_embd.weight", "transformer.wte.weight", false);
    put("position_embd.weight", "transformer.wpe.weight", false);
    put("output_norm.weight", "transformer.ln_f.weight", false);
    put("output_norm.bias", "transformer.ln_f.bias", false);
    for l in 0..t.layers {
        let (b, p) = (format!("blk.{l}."), format!("transformer.h.{l}."));
        let names = [
            ("attn_norm", "ln_1", false),
            ("ffn_norm", "ln_2", false),
            ("attn_qkv", "attn.c_attn", true),
            ("attn_output", "attn.c_proj", true),
            ("ffn_up", "mlp.c_fc", true),
            ("ffn_down", "mlp.c_proj", true),
        ];
        for (g, h, conv1d) in names {
            put(&format!("{b}{g}.weight"), &format!("{p}{h}.weight"), conv1d);
            put(&format!("{b}{g}.bias"), &format!("{p}{h}.bias"), false);
        }
    }
    GgufFile::from_bytes(writer.to_bytes()).unwrap()
}

/// `x W + b` for a Conv1D weight `W` (`[in, out]`).
fn conv1d(w: &Tensors, name: &str, x: &[f32]) -> Vec<f32> {
    let (shape, weight) = &w[&format!("{name}.weight")];
    let bias = &w[&format!("{name}.bias")].1;
    let (n_in, n_out) = (shape[0], shape[1]);
    (0..n_out)
        .map(|o| {
            let sum: f64 = (0..n_in)
                .map(|i| x[i] as f64 * weight[i * n_out + o] as f64)
                .sum();
            (sum + bias[o] as f64) as f32
        })
        .collect()
}

fn layer_norm(w: &Tensors, name: &str, x: &[f32], eps: f32) -> Vec<f32> {
    let (gamma, beta) = (
        &w[&format!("{name}.weight")].1,
        &w[&format!("{name}.bias")].1,
    );
    let n = x.len() as f64;
    let mean = x.iter().map(|v| *v as f64).sum::<f64>() / n;
    let var = x.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n;
    let inv = 1.0 / (var + eps as f64).sqrt();
    x.iter()
        .zip(gamma.iter().zip(beta))
        .map(|(v, (g, b))| ((*v as f64 - mean) * inv) as f32 * g + b)
        .collect()
}

/// HF's `gelu_new`: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
fn gelu_new(x: f32) -> f32 {
    let x = x as f64;
    let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
    (0.5 * x * (1.0 + inner.tanh())) as f32
}

fn gpt2_reference(t: &Gpt2, w: &Tensors, tokens: &[u32]) -> Vec<Vec<f32>> {
    let (d, hd) = (t.d, t.d / t.heads);
    let (wte, wpe) = (
        &w["transformer.wte.weight"].1,
        &w["transformer.wpe.weight"].1,
    );
    let mut keys: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut values: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut out = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let tok = tok as usize;
        let mut x: Vec<f32> = (0..d)
            .map(|i| wte[tok * d + i] + wpe[pos * d + i])
            .collect();
        for l in 0..t.layers {
            let p = format!("transformer.h.{l}.");
            let h = layer_norm(w, &format!("{p}ln_1"), &x, t.eps);
            let qkv = conv1d(w, &format!("{p}attn.c_attn"), &h);
            let (q, k, v) = (&qkv[..d], qkv[d..2 * d].to_vec(), qkv[2 * d..].to_vec());
            keys[l].push(k);
            values[l].push(v);
            let mut context = vec![0.0f32; d];
            for head in 0..t.heads {
                let r = head * hd..(head + 1) * hd;
                let scores: Vec<f64> = keys[l]
                    .iter()
                    .map(|k| {
                        let dot: f64 = q[r.clone()]
                            .iter()
                            .zip(&k[r.clone()])
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum();
                        dot / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for (e, v) in exps.iter().zip(&values[l]) {
                    for i in r.clone() {
                        context[i] += (e / sum * v[i] as f64) as f32;
                    }
                }
            }
            let o = conv1d(w, &format!("{p}attn.c_proj"), &context);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = layer_norm(w, &format!("{p}ln_2"), &x, t.eps);
            let up: Vec<f32> = conv1d(w, &format!("{p}mlp.c_fc"), &h)
                .into_iter()
                .map(gelu_new)
                .collect();
            let down = conv1d(w, &format!("{p}mlp.c_proj"), &up);
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
        let h = layer_norm(w, "transformer.ln_f", &x, t.eps);
        out.push(matvec(&w["transformer.wte.weight"], &h));
    }
    out
}

#[test]
fn tiny_gpt2_from_hf_and_gguf_matches_the_reference() {
    let t = Gpt2 {
        vocab: 40,
        d: 32,
        heads: 4,
        layers: 2,
        positions: 24,
        eps: 1e-5,
    };
    let w = gpt2_weights(&t, 0x5151_a5a5_0f0f_3c3c);
    let dir = tempfile::tempdir().unwrap();
    gpt2_hf_dir(dir.path(), &t, &w);
    let from_hf = HfDir::open(dir.path())
        .and_then(|d| {
            d.to_gguf_file(&ToGgufOptions {
                tensor_type: None,
                tokenizer: false,
            })
        })
        .expect("reading the GPT-2 HF directory");
    let from_gguf = gpt2_gguf(&t, &w);
    let tokens: Vec<u32> = (0..20).map(|i| (i * 11 + 5) % t.vocab as u32).collect();
    let expected = gpt2_reference(&t, &w, &tokens);
    let device = OpenDevice::flex();
    for (form, file) in [("HF", &from_hf), ("GGUF", &from_gguf)] {
        for weights in [WeightFormat::Quantized, WeightFormat::DenseF32] {
            let model = Llama::from_gguf_with(file, &device.device, LoadOptions::new(weights))
                .unwrap_or_else(|e| panic!("GPT-2 {form}: {e}"));
            let (all, steps) = run(&model, &tokens);
            let (a, s) = (worst(&all, &expected), worst(&steps, &expected));
            eprintln!("GPT-2 from {form}, {weights:?}: prefill {a:.1e}, decode {s:.1e}");
            assert!(
                a < 1e-4,
                "GPT-2 from {form}, {weights:?}: prefill off by {a}"
            );
            assert!(
                s < 1e-4,
                "GPT-2 from {form}, {weights:?}: decode off by {s}"
            );
            // Past the learned positions: a named error, not a panic.
            let mut cache = model.new_cache(t.positions + 4);
            let long: Vec<u32> = (0..t.positions as u32 + 1).map(|i| i % 7).collect();
            let error = model
                .forward(&long, &mut cache, LogitsFor::Last)
                .expect_err("a position past the learned ones");
            assert!(
                error
                    .to_string()
                    .contains("past the model's 24 learned positions"),
                "{error}"
            );
        }
    }
    // Quantized to Q8_0: the kernels read the fused q/k/v as row ranges of its blocks in
    // place; the same file dequantised (whole matrix, then split) gives the same logits.
    let q8 = HfDir::open(dir.path())
        .and_then(|d| {
            d.to_gguf_file(&ToGgufOptions {
                tensor_type: Some(kindle_gguf::GgmlType::Q8_0),
                tokenizer: false,
            })
        })
        .unwrap();
    let load = |weights| Llama::from_gguf_with(&q8, &device.device, LoadOptions::new(weights));
    let (quantized, dense) = (
        load(WeightFormat::Quantized).unwrap(),
        load(WeightFormat::DenseF32).unwrap(),
    );
    let (q_all, q_steps) = run(&quantized, &tokens);
    let (d_all, d_steps) = run(&dense, &tokens);
    let (a, s) = (worst(&q_all, &d_all), worst(&q_steps, &d_steps));
    eprintln!("GPT-2 Q8_0, in-place row ranges vs dequantised: prefill {a:.1e}, decode {s:.1e}");
    assert!(a < 1e-4 && s < 1e-4, "Q8_0 GPT-2: {a}, {s}");
}

#[test]
fn gpt2_files_missing_a_tensor_or_of_a_wrong_shape_are_named_errors() {
    let t = Gpt2 {
        vocab: 16,
        d: 16,
        heads: 2,
        layers: 1,
        positions: 8,
        eps: 1e-5,
    };
    let w = gpt2_weights(&t, 3);
    let device = OpenDevice::flex();
    for missing in [
        "position_embd.weight",
        "output_norm.bias",
        "blk.0.attn_qkv.bias",
        "blk.0.ffn_down.bias",
        "blk.0.attn_norm.bias",
    ] {
        let file = gpt2_gguf_without(&t, &w, missing);
        let error = Llama::load(&file, &device).expect_err(missing);
        assert!(error.to_string().contains(missing), "{missing}: {error}");
    }
    // A fused q/k/v two thirds as wide as it must be.
    let mut narrow = w.clone();
    let (shape, values) = narrow
        .get_mut("transformer.h.0.attn.c_attn.weight")
        .unwrap();
    *shape = vec![t.d, 2 * t.d];
    values.truncate(2 * t.d * t.d);
    let error = Llama::load(&gpt2_gguf(&t, &narrow), &device).expect_err("narrow qkv");
    let message = error.to_string();
    assert!(
        message.contains("blk.0.attn_qkv.weight") && message.contains("[16, 48]"),
        "{message}"
    );
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
    let model = Llama::from_gguf_with(
        &gguf(&t, &w),
        &OpenDevice::flex().device,
        LoadOptions::new(WeightFormat::Quantized),
    )
    .unwrap();
    let (all, _) = run(&model, &tokens);
    let wrong = Tiny {
        theta: 1.0 / t.theta,
        ..t
    };
    assert!(worst(&all, &reference(&wrong, &w, &tokens)) > 1e-2);
}
