//! The two executors side by side: deterministic weights and tokens, and the check that the
//! host path and the Burn path give the same logits through a prefill and greedy decoding.

use burn::prelude::*;
use half::f16;
use kindle_gguf::quant::GgmlType;
use kindle_kernels::{QuantMatrix, WeightBytes};
use kindle_model::linear::QLinear;
use kindle_model::llama::{Block, Norm};
use kindle_model::{KvStore, Llama, LlamaConfig, LogitsFor};
use kindle_sampling::logprobs::argmax;

use super::max_diff;

/// Deterministic values in `[-scale, scale)`.
pub fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// `w` (`[rows, cols]`) encoded as GGUF `ty` blocks (F32, F16 or Q8_0; for Q2_K and Q3_K,
/// blocks of about `w`'s size but not its values).
pub fn encode(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => w
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => w
            .chunks_exact(32)
            .flat_map(|block| {
                let absmax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = absmax / 127.0;
                let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
                let mut bytes = f16::from_f32(d).to_bits().to_le_bytes().to_vec();
                bytes.extend(block.iter().map(|&v| (v * inv).round() as i8 as u8));
                bytes
            })
            .collect(),
        // No quantizer here: whole super-blocks of bytes drawn from `w`'s bits, with factors
        // that keep the values about `w`'s size (`Q3_K`: `d * (scale - 32) * q` reaches
        // `128 d`; `Q2_K`: `d * scale * q - dmin * min` spans `45 d + 15 dmin`).
        GgmlType::Q2_K | GgmlType::Q3_K => {
            let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let size = ty.type_size();
            let mut bytes: Vec<u8> = (0..w.len() / 256 * size)
                .map(|i| (w[(i * 7) % w.len()].to_bits() >> 7) as u8)
                .collect();
            for block in bytes.chunks_exact_mut(size) {
                let (at, d) = if ty == GgmlType::Q3_K {
                    (108, amax / 128.0)
                } else {
                    (80, amax / 60.0)
                };
                block[at..at + 2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
                if ty == GgmlType::Q2_K {
                    block[82..84].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
                }
            }
            bytes
        }
        // The grid quants (kindle has no encoder for them): bytes drawn from `w`'s bits, with
        // the `f16` scale set so that the largest values are about `w`'s (`IQ2`: `d * 15.5 / 4
        // * 43`; `IQ3_XXS`: `d * 15.5 / 2 * 62`; `IQ3_S`: `d * 31 * 15`; `IQ1`: `d * 15 *
        // 1.125`). `IQ1_M` spreads it over the top nibbles of its scale words.
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M => {
            let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let size = ty.type_size();
            let mut bytes: Vec<u8> = (0..w.len() / 256 * size)
                .map(|i| (w[(i * 7) % w.len()].to_bits() >> 7) as u8)
                .collect();
            let reach = match ty {
                GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S => 167.0,
                GgmlType::IQ3_XXS | GgmlType::IQ3_S => 480.0,
                _ => 17.0,
            };
            let d = f16::from_f32(amax / reach).to_bits();
            for block in bytes.chunks_exact_mut(size) {
                if ty == GgmlType::IQ1_M {
                    kindle_gguf::quant::set_iq1_m_scale(block, d);
                } else {
                    block[..2].copy_from_slice(&d.to_le_bytes());
                }
            }
            bytes
        }
        // ggml's own encoders (`kindle quantize`'s).
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            kindle_gguf::quant::quantize(ty, w).expect("whole blocks")
        }
        other => panic!("no encoder for {other:?}"),
    }
}

/// The Burn path's logits, as `forward` returns them.
pub fn burn_logits(
    model: &Llama,
    tokens: &[u32],
    cache: &mut dyn KvStore,
    which: LogitsFor,
) -> Vec<f32> {
    model
        .forward_tensor(tokens, cache, which)
        .unwrap()
        .into_data()
        .try_into_vec::<f32>()
        .unwrap()
}

pub fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    values(seed, n, 0.5)
        .iter()
        .map(|v| ((v + 0.5) * vocab as f32) as u32 % vocab as u32)
        .collect()
}

/// Prefill `prompt` then decode `steps` tokens greedily on both paths, each with its own
/// cache from `new_cache`; every step's logits agree within `tol`. Returns the host side's
/// cache.
pub fn check_paths<C: KvStore>(
    model: &Llama,
    prompt: &[u32],
    steps: usize,
    tol: f32,
    new_cache: impl Fn() -> C,
    label: &str,
) -> C {
    let (mut host_cache, mut burn_cache) = (new_cache(), new_cache());
    let host = model
        .forward(prompt, &mut host_cache, LogitsFor::All)
        .unwrap();
    let burn = burn_logits(model, prompt, &mut burn_cache, LogitsFor::All);
    let diff = max_diff(&host, &burn);
    assert!(diff < tol, "{label}: prefill logits differ by {diff}");
    let vocab = model.config().vocab_size;
    let greedy = |row: &[f32]| argmax(row).expect("a logits row is not empty");
    let mut next = greedy(&host[host.len() - vocab..]);
    for step in 0..steps {
        let host = model
            .forward(&[next], &mut host_cache, LogitsFor::Last)
            .unwrap();
        let burn = burn_logits(model, &[next], &mut burn_cache, LogitsFor::Last);
        let diff = max_diff(&host, &burn);
        assert!(diff < tol, "{label}: step {step} logits differ by {diff}");
        assert_eq!(host_cache.len(), burn_cache.len());
        next = greedy(&host);
    }
    host_cache
}

/// A tiny GQA model (4 query heads over 2 KV heads, 2 layers, vocabulary 96) whose matrices
/// are quantized in a mix of types, `w_up` of type `up`, for contexts of `context` tokens;
/// norm scales are not all ones.
pub fn tiny_quantized(tied: bool, up: GgmlType, context: usize) -> Llama {
    tiny_quantized_shaped(tied, up, context, TinyShape::default())
}

/// The width and heads of a [`tiny_quantized_shaped`] model, and its local layers' window.
#[derive(Debug, Clone, Copy)]
pub struct TinyShape {
    /// Embedding width.
    pub d: usize,
    /// Query heads (each `d / heads` wide).
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// The sliding window of the local layers, if any.
    pub window: Option<usize>,
    /// Whether a `Q2_K` or `Q3_K` `w_up` is stored as the `f32` values its blocks decode to
    /// (by `kindle_gguf::quant::dequantize`, ggml's decoder): the same model for the dense
    /// kernels.
    pub dense_up: bool,
}

impl Default for TinyShape {
    fn default() -> Self {
        TinyShape {
            d: 64,
            heads: 4,
            kv_heads: 2,
            window: None,
            dense_up: false,
        }
    }
}

/// [`tiny_quantized`] of another width, head count or window.
pub fn tiny_quantized_shaped(tied: bool, up: GgmlType, context: usize, shape: TinyShape) -> Llama {
    let TinyShape {
        d,
        heads,
        kv_heads,
        window,
        dense_up,
    } = shape;
    let config = LlamaConfig::new(96, d, 2, heads, kv_heads, 96)
        .with_tied_embeddings(tied)
        .with_context_length(context)
        .with_sliding_window(window);
    tiny_quantized_config(config, up, dense_up)
}

/// [`tiny_quantized_shaped`] of hyperparameters `config` (vocabulary and feed-forward width
/// 96; untied unless `config` ties the embeddings).
pub fn tiny_quantized_config(config: LlamaConfig, up: GgmlType, dense_up: bool) -> Llama {
    let (d, heads, kv_heads, tied) = (
        config.d_model,
        config.n_heads,
        config.n_kv_heads,
        config.tied_embeddings,
    );
    let (hd, ff, vocab) = (config.head_dim(), 96, 96);
    let device = Device::flex();
    let mut seed = 1;
    let mut linear = |rows: usize, cols: usize, ty: GgmlType| {
        seed += 1;
        let w = values(seed, rows * cols, 1.0 / (cols as f32).sqrt() * 1.5);
        let bytes = encode(ty, &w);
        let m = if dense_up && matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K) {
            let mut decoded = vec![0f32; rows * cols];
            kindle_gguf::quant::dequantize(ty, &bytes, &mut decoded).unwrap();
            let dense = WeightBytes::owned(encode(GgmlType::F32, &decoded));
            QuantMatrix::new(GgmlType::F32, rows, cols, dense).unwrap()
        } else {
            QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).unwrap()
        };
        QLinear::quantized(m)
    };
    let norm = |seed: u64| {
        let g: Vec<f32> = values(seed, d, 0.3).iter().map(|v| 1.0 + v).collect();
        Norm::new(Tensor::from_data(TensorData::new(g, [d]), &device), 1e-5)
    };
    let layers = (0..2)
        .map(|l| {
            Block::new(
                norm(100 + l),
                linear(heads * hd, d, GgmlType::Q8_0),
                linear(kv_heads * hd, d, GgmlType::F16),
                linear(kv_heads * hd, d, GgmlType::Q8_0),
                linear(d, heads * hd, GgmlType::F32),
                norm(200 + l),
                linear(ff, d, GgmlType::Q8_0),
                linear(ff, d, up),
                linear(d, ff, GgmlType::Q8_0),
            )
        })
        .collect();
    let embedding = linear(vocab, d, GgmlType::Q8_0);
    let output = (!tied).then(|| linear(vocab, d, GgmlType::F16));
    Llama::from_parts(config, embedding, layers, norm(300), output)
}
