//! Tiny random models and vocabularies for kindle-hf's tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::{Value, json};

/// A fresh empty directory under the temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kindle-hf-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic pseudo-random values in `[lo, hi)` (xorshift).
pub fn values(seed: u64, n: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// GPT-2's byte-to-unicode character of `b`.
pub fn byte_char(b: u8) -> char {
    let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable {
        char::from(b)
    } else {
        let shifted = (0..b)
            .filter(|x| !matches!(x, 33..=126 | 161..=172 | 174..=255))
            .count() as u32;
        char::from_u32(256 + shifted).unwrap()
    }
}

/// A byte-level vocabulary: 256 byte tokens, merged tokens, control tokens and one
/// user-defined token.
pub struct Vocab {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<(String, String)>,
}

pub const CONTROL: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const USER: &str = "<tool>";

pub fn vocab() -> Vocab {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let pairs = [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
        ("o", "r"),
        ("Ġw", "or"),
        ("l", "d"),
        ("Ġwor", "ld"),
        ("Ġ", "t"),
        ("Ġt", "he"),
        ("1", "2"),
        ("12", "3"),
        ("Ġ", "Ġ"),
        ("Ċ", "Ċ"),
        ("i", "t"),
        ("'", "s"),
        ("H", "e"),
        ("He", "ll"),
        ("Hell", "o"),
        ("u", "s"),
        ("us", "er"),
        ("e", "r"),
        ("Ġ", "h"),
        ("Ġh", "i"),
    ];
    let mut merges = Vec::new();
    for (a, b) in pairs {
        let joined = format!("{a}{b}");
        if !tokens.contains(&joined) {
            tokens.push(joined);
        }
        merges.push((a.to_owned(), b.to_owned()));
    }
    let mut types = vec![1; tokens.len()];
    for c in CONTROL {
        tokens.push(c.to_owned());
        types.push(3);
    }
    tokens.push(USER.to_owned());
    types.push(4);
    Vocab {
        tokens,
        types,
        merges,
    }
}

/// The id of `token` in `vocab()`.
pub fn id_of(v: &Vocab, token: &str) -> u32 {
    v.tokens.iter().position(|t| t == token).unwrap() as u32
}

/// The tokenizer metadata of `vocab()` with GGUF `pre` name `pre`.
pub fn vocab_metadata(pre: &str, add_bos: bool) -> Vec<(String, MetadataValue)> {
    let v = vocab();
    let merges: Vec<String> = v.merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), pre.into()),
        ("tokenizer.ggml.tokens".into(), v.tokens.clone().into()),
        ("tokenizer.ggml.token_type".into(), v.types.clone().into()),
        ("tokenizer.ggml.merges".into(), merges.into()),
        (
            "tokenizer.ggml.bos_token_id".into(),
            MetadataValue::U32(id_of(&v, "<|im_start|>")),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            MetadataValue::U32(id_of(&v, "<|im_end|>")),
        ),
        ("tokenizer.ggml.add_bos_token".into(), add_bos.into()),
        ("tokenizer.ggml.add_eos_token".into(), false.into()),
        ("tokenizer.chat_template".into(), "{{ messages }}".into()),
    ]
}

/// Shapes of a tiny model.
pub const D: u64 = 8;
pub const HEADS: u64 = 2;
pub const KV_HEADS: u64 = 1;
pub const HEAD_DIM: u64 = 4;
pub const FF: u64 = 16;
pub const LAYERS: u64 = 2;
pub const CTX: u64 = 32;

/// A tiny random GGUF model of GGUF architecture `arch` with `vocab()` (pre `pre`).
pub fn tiny_gguf(arch: &str, pre: &str) -> GgufFile {
    let v = vocab().tokens.len() as u64;
    let key = |k: &str| format!("{arch}.{k}");
    let mut w = GgufWriter::new()
        .metadata("general.architecture", arch)
        .metadata(key("block_count"), MetadataValue::U32(LAYERS as u32))
        .metadata(key("context_length"), MetadataValue::U32(CTX as u32))
        .metadata(key("embedding_length"), MetadataValue::U32(D as u32))
        .metadata(key("feed_forward_length"), MetadataValue::U32(FF as u32))
        .metadata(
            key("attention.head_count"),
            MetadataValue::U32(HEADS as u32),
        );
    if arch == "gpt2" {
        w = w.metadata(
            key("attention.layer_norm_epsilon"),
            MetadataValue::F32(1e-5),
        );
    } else {
        w = w
            .metadata(
                key("attention.head_count_kv"),
                MetadataValue::U32(KV_HEADS as u32),
            )
            .metadata(key("rope.freq_base"), MetadataValue::F32(10000.0))
            .metadata(
                key("attention.layer_norm_rms_epsilon"),
                MetadataValue::F32(1e-6),
            );
    }
    // The head width stated, as Qwen3's and Gemma-3's converters write it.
    if arch == "qwen3" || arch == "gemma3" {
        w = w
            .metadata(
                key("attention.key_length"),
                MetadataValue::U32(HEAD_DIM as u32),
            )
            .metadata(
                key("attention.value_length"),
                MetadataValue::U32(HEAD_DIM as u32),
            );
    }
    if arch == "gemma3" {
        w = w
            .metadata(key("attention.sliding_window"), MetadataValue::U32(16))
            .metadata(key("rope.freq_base_swa"), MetadataValue::F32(10000.0))
            .metadata(
                key("attention.sliding_window_pattern"),
                MetadataValue::U32(2),
            );
    }
    for (k, val) in vocab_metadata(pre, arch == "llama") {
        w = w.metadata(k, val);
    }
    let mut seed = 1;
    let mut t = |w: GgufWriter, name: String, dims: &[u64], lo: f32, hi: f32| {
        seed += 1;
        let n = dims.iter().product();
        w.tensor_f32(name, dims, &values(seed, n, lo, hi))
    };
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    // Gemma-3's norms stay in [0.5, 3): there HF's `w - 1` and back are exact.
    let (nlo, nhi) = if arch == "gemma3" {
        (0.5, 3.0)
    } else {
        (-1.0, 1.0)
    };
    w = t(w, "token_embd.weight".into(), &[D, v], -1.0, 1.0);
    if arch == "gpt2" {
        w = t(w, "position_embd.weight".into(), &[D, CTX], -1.0, 1.0);
    }
    for l in 0..LAYERS {
        let p = |n: &str| format!("blk.{l}.{n}");
        w = t(w, p("attn_norm.weight"), &[D], nlo, nhi);
        if arch == "gpt2" {
            w = t(w, p("attn_norm.bias"), &[D], -1.0, 1.0);
            w = t(w, p("attn_qkv.weight"), &[D, 3 * D], -1.0, 1.0);
            w = t(w, p("attn_qkv.bias"), &[3 * D], -1.0, 1.0);
            w = t(w, p("attn_output.weight"), &[D, D], -1.0, 1.0);
            w = t(w, p("attn_output.bias"), &[D], -1.0, 1.0);
            w = t(w, p("ffn_norm.weight"), &[D], -1.0, 1.0);
            w = t(w, p("ffn_norm.bias"), &[D], -1.0, 1.0);
            w = t(w, p("ffn_up.weight"), &[D, FF], -1.0, 1.0);
            w = t(w, p("ffn_up.bias"), &[FF], -1.0, 1.0);
            w = t(w, p("ffn_down.weight"), &[FF, D], -1.0, 1.0);
            w = t(w, p("ffn_down.bias"), &[D], -1.0, 1.0);
            continue;
        }
        w = t(w, p("attn_q.weight"), &[D, q], -1.0, 1.0);
        w = t(w, p("attn_k.weight"), &[D, kv], -1.0, 1.0);
        w = t(w, p("attn_v.weight"), &[D, kv], -1.0, 1.0);
        if arch == "qwen2" {
            w = t(w, p("attn_q.bias"), &[q], -1.0, 1.0);
            w = t(w, p("attn_k.bias"), &[kv], -1.0, 1.0);
            w = t(w, p("attn_v.bias"), &[kv], -1.0, 1.0);
        }
        w = t(w, p("attn_output.weight"), &[q, D], -1.0, 1.0);
        if arch == "qwen3" {
            w = t(w, p("attn_q_norm.weight"), &[HEAD_DIM], nlo, nhi);
            w = t(w, p("attn_k_norm.weight"), &[HEAD_DIM], nlo, nhi);
        }
        if arch == "gemma3" {
            w = t(w, p("attn_q_norm.weight"), &[HEAD_DIM], nlo, nhi);
            w = t(w, p("attn_k_norm.weight"), &[HEAD_DIM], nlo, nhi);
            w = t(w, p("post_attention_norm.weight"), &[D], nlo, nhi);
            w = t(w, p("post_ffw_norm.weight"), &[D], nlo, nhi);
        }
        w = t(w, p("ffn_norm.weight"), &[D], nlo, nhi);
        w = t(w, p("ffn_gate.weight"), &[D, FF], -1.0, 1.0);
        w = t(w, p("ffn_up.weight"), &[D, FF], -1.0, 1.0);
        w = t(w, p("ffn_down.weight"), &[FF, D], -1.0, 1.0);
    }
    w = t(w, "output_norm.weight".into(), &[D], nlo, nhi);
    if arch == "gpt2" {
        w = t(w, "output_norm.bias".into(), &[D], -1.0, 1.0);
    }
    if arch == "llama" {
        w = t(w, "output.weight".into(), &[D, v], -1.0, 1.0);
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

/// A tensor for [`write_safetensors`]: name, dtype, shape, values as f32.
pub type HfTensor = (String, Dtype, Vec<usize>, Vec<f32>);

/// Encodes `values` as `dtype` (F32, F16 or BF16).
pub fn encode(dtype: Dtype, values: &[f32]) -> Vec<u8> {
    match dtype {
        Dtype::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        Dtype::BF16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// The bytes of a safetensors file holding `tensors`.
pub fn safetensors_bytes(tensors: &[HfTensor]) -> Vec<u8> {
    let data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, v)| (n.clone(), *d, s.clone(), encode(*d, v)))
        .collect();
    let views: Vec<(String, TensorView)> = data
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// Writes a Hugging Face directory: config.json and model.safetensors.
pub fn write_hf_dir(dir: &Path, config: &Value, tensors: &[HfTensor]) {
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("model.safetensors"), safetensors_bytes(tensors)).unwrap();
}

/// A Llama config.json for the tiny shapes.
pub fn llama_config(tied: bool) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "vocab_size": 16, "tie_word_embeddings": tied,
    })
}
