//! The host path of a forward pass (all weights quantized, cache in host memory, fewer than
//! 16 new rows) gives the logits of the Burn path (`forward_batch_tensor`, always tensor ops):
//! prefill then decode, with grouped-query attention, every KV storage type, a sliding window
//! that shifts, and a ragged batch; on a tiny random model, and on the real one.

mod common;

use burn::prelude::*;
use common::max_diff;
use common::paths::{
    TinyShape, check_paths, encode, tiny_quantized, tiny_quantized_shaped, tokens, values,
};
use common::real_model;
use kindle_gguf::quant::GgmlType;
use kindle_kernels::{QuantMatrix, WeightBytes};
use kindle_model::linear::QLinear;
use kindle_model::llama::{ArchSpec, Block, EmbeddingScale, LayerPattern, Norm};
use kindle_model::{
    BatchSequence, KernelOptions, Kernels, KvType, Llama, LlamaConfig, LoadOptions, LogitsFor,
    RowArithmetic, WeightFormat,
};

/// A tiny GQA model (4 query heads over 2 KV heads) whose matrices are quantized in a mix of
/// types; norm scales are not all ones.
fn tiny_model(tied: bool) -> Llama {
    tiny_model_with(tied, GgmlType::F16)
}

/// [`tiny_model`] with `w_up` of type `up` (`Q8_0`, packed, lets a long prefill take the host
/// path where the batched kernels win).
fn tiny_model_with(tied: bool, up: GgmlType) -> Llama {
    tiny_quantized(tied, up, 96)
}

#[test]
fn host_and_burn_paths_agree_for_every_kv_type() {
    for tied in [true, false] {
        let model = tiny_model(tied);
        for kv_type in [KvType::F32, KvType::F16, KvType::Int8] {
            let label = format!("tied {tied}, {kv_type}");
            // A short prompt takes the host path; a long one (16+ rows) the Burn path on both
            // sides, and the host path then decodes from the cache the Burn path wrote.
            for prompt_len in [5, 20] {
                let prompt = tokens(prompt_len as u64, prompt_len, 96);
                check_paths(
                    &model,
                    &prompt,
                    12,
                    2e-3,
                    || model.new_cache_typed(40, kv_type),
                    &label,
                );
            }
        }
    }
}

#[test]
fn low_bit_weights_give_the_logits_of_their_decoded_values() {
    // `Q2_K`, `Q3_K`, `IQ4_NL`, `IQ4_XS` and the grid quants' feed-forward up projections
    // (rows of one 256-value super-block): the host path's kernels and the Burn path agree,
    // and both give the logits of the same model with the matrix stored as the `f32` values
    // ggml's decoder gives (the dense kernels): the same products, summed in another order.
    for up in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ] {
        let shape = |dense_up| TinyShape {
            d: 256,
            dense_up,
            ..TinyShape::default()
        };
        let model = tiny_quantized_shaped(false, up, 96, shape(false));
        let dense = tiny_quantized_shaped(false, up, 96, shape(true));
        for prompt_len in [5, 20] {
            let prompt = tokens(prompt_len as u64, prompt_len, 96);
            let label = format!("{up:?}, {prompt_len}-token prompt");
            check_paths(&model, &prompt, 12, 2e-3, || model.new_cache(40), &label);
            let (mut a, mut b) = (model.new_cache(40), dense.new_cache(40));
            let mut next = prompt.clone();
            for step in 0..8 {
                let got = model.forward(&next, &mut a, LogitsFor::All).unwrap();
                let want = dense.forward(&next, &mut b, LogitsFor::All).unwrap();
                let diff = max_diff(&got, &want);
                assert!(
                    diff < 1e-4,
                    "{label}, step {step}: {diff} from the decoded weights"
                );
                next = vec![kindle_sampling::logprobs::argmax(&want[want.len() - 96..]).unwrap()];
            }
        }
    }
}

#[test]
fn host_and_burn_paths_agree_through_sliding_window_shifts() {
    let model = tiny_model(true);
    for kv_type in [KvType::F32, KvType::F16, KvType::Int8] {
        let prompt = tokens(3, 6, 96);
        // Capacity 10, keep 3: 26 tokens make the window shift several times.
        let cache = check_paths(
            &model,
            &prompt,
            20,
            2e-3,
            || model.new_sliding_cache(10, kv_type, 3).unwrap(),
            &format!("sliding {kv_type}"),
        );
        assert!(
            cache.discarded() >= 12,
            "{kv_type}: {} discarded",
            cache.discarded()
        );
    }
}

#[test]
fn host_and_burn_paths_agree_on_a_ragged_batch() {
    let model = tiny_model(false);
    let (a, b) = (tokens(7, 3, 96), tokens(8, 1, 96));
    let mut host_caches = [model.new_cache(16), model.new_cache(16)];
    let mut burn_caches = [model.new_cache(16), model.new_cache(16)];
    // Give the second sequence a history first, so the two sit at different positions.
    for caches in [&mut host_caches, &mut burn_caches] {
        model
            .forward(&tokens(9, 4, 96), &mut caches[1], LogitsFor::Last)
            .unwrap();
    }
    for which in [LogitsFor::All, LogitsFor::Last] {
        let [h0, h1] = &mut host_caches;
        let host = model
            .forward_batch(
                &mut [
                    BatchSequence {
                        tokens: &a,
                        cache: h0,
                    },
                    BatchSequence {
                        tokens: &b,
                        cache: h1,
                    },
                ],
                which,
            )
            .unwrap();
        let [b0, b1] = &mut burn_caches;
        let burn: Vec<f32> = model
            .forward_batch_tensor(
                &mut [
                    BatchSequence {
                        tokens: &a,
                        cache: b0,
                    },
                    BatchSequence {
                        tokens: &b,
                        cache: b1,
                    },
                ],
                which,
            )
            .unwrap()
            .into_data()
            .try_into_vec()
            .unwrap();
        let rows = if which == LogitsFor::All { 3 } else { 1 };
        assert_eq!(host[0].len(), rows * 96);
        assert_eq!(host[1].len(), 96);
        let diff = max_diff(&host.concat(), &burn);
        assert!(diff < 2e-3, "{which:?}: batch logits differ by {diff}");
    }
}

#[test]
fn host_and_burn_paths_agree_on_the_real_model() {
    let Some(file) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let device = Device::flex();
    let options = LoadOptions::new(WeightFormat::Quantized);
    let model = Llama::from_gguf_with(&file, &device, options).unwrap();
    let prompt = [1, 504, 3575, 282, 4649, 314, 253, 30];
    // On this model a stored element that rounds the other way (the paths' inputs differ in
    // the last bits) moves logits by up to ~0.01 with f16 and ~0.3 with int8, while int8 is
    // itself ~0.9 from f32 here: int8 is checked on the tiny model only.
    for (kv_type, tol) in [(KvType::F32, 2e-3), (KvType::F16, 2e-2)] {
        check_paths(
            &model,
            &prompt,
            8,
            tol,
            || model.new_cache_typed(32, kv_type),
            &format!("SmolLM2 {kv_type}"),
        );
    }
}

/// A prompt longer than the host path's micro-batch (512 rows) runs in slices, each attending
/// to what the slices before it wrote to the cache: its logits (every row) match the Burn
/// path's single pass, for each cache type, and decoding goes on from that cache. (The host
/// path takes a long prefill of packed weights with any SIMD level; without SIMD both sides
/// run the Burn path.)
#[test]
fn host_path_slices_a_long_prompt_like_one_pass() {
    let model = tiny_model_with(true, GgmlType::Q8_0);
    for kv_type in [KvType::F32, KvType::Int8] {
        let prompt = tokens(11, 600, 96);
        let cache = check_paths(
            &model,
            &prompt,
            4,
            2e-3,
            || model.new_cache_typed(620, kv_type),
            &format!("long prompt, {kv_type}"),
        );
        assert_eq!(cache.len(), 604);
    }
}

/// Every optional step of the recipe (q/k/v biases, q/k head norms, post norms, a scaled
/// embedding, rotary bases that change between layers), which Llama does not use, is
/// executed alike by both paths.
#[test]
fn host_and_burn_paths_agree_on_the_recipe_steps_llama_does_not_use() {
    // A window of 7 positions in the local layers: the 20-token prompt and the decoding
    // after the 5-token one both pass it.
    let config = LlamaConfig::new(96, 64, 2, 4, 2, 96).with_sliding_window(Some(7));
    let (d, hd, ff) = (64, config.head_dim(), 96);
    let device = Device::flex();
    let mut seed = 500;
    let mut next = || {
        seed += 1;
        seed
    };
    let mut linear = |rows: usize, cols: usize, bias: bool| {
        let w = values(next(), rows * cols, 1.5 / (cols as f32).sqrt());
        let m = QuantMatrix::new(
            GgmlType::Q8_0,
            rows,
            cols,
            WeightBytes::owned(encode(GgmlType::Q8_0, &w)),
        )
        .unwrap();
        let layer = QLinear::quantized(m);
        if !bias {
            return layer;
        }
        let b = values(next(), rows, 0.2);
        layer.with_bias(Tensor::from_data(TensorData::new(b, [rows]), &device))
    };
    let norm = |seed: u64, width: usize| {
        let g: Vec<f32> = values(seed, width, 0.3).iter().map(|v| 1.0 + v).collect();
        Norm::new(
            Tensor::from_data(TensorData::new(g, [width]), &device),
            1e-5,
        )
    };
    let layers = (0..2)
        .map(|l| {
            Block::new(
                norm(600 + l, d),
                linear(4 * hd, d, true),
                linear(2 * hd, d, true),
                linear(2 * hd, d, true),
                linear(d, 4 * hd, false),
                norm(610 + l, d),
                linear(ff, d, false),
                linear(ff, d, false),
                linear(d, ff, false),
            )
            .with_qk_norms(norm(620 + l, hd), norm(630 + l, hd))
            .with_post_norms(norm(640 + l, d), norm(650 + l, d))
        })
        .collect();
    let embedding = linear(96, d, false);
    let arch = ArchSpec {
        embedding_scale: EmbeddingScale::SqrtWidth,
        layers: LayerPattern::LocalGlobal {
            period: 2,
            local_rope_theta: 100.0,
        },
        qkv_bias: true,
        qk_norm: true,
        post_norms: true,
        ..ArchSpec::LLAMA
    };
    let model = Llama::from_parts(config, embedding, layers, norm(660, d), None).with_arch(arch);
    for prompt_len in [5, 20] {
        let prompt = tokens(prompt_len as u64, prompt_len, 96);
        check_paths(
            &model,
            &prompt,
            8,
            2e-3,
            || model.new_cache(40),
            &format!("optional steps, prompt {prompt_len}"),
        );
    }
}

/// Feeds `tokens` one decode step at a time into `cache`, asserting that step `i`'s logits
/// have the bits of row `i` of `rows` (the same tokens' logits from one pass, 96 a row).
fn assert_steps_match(
    model: &Llama,
    cache: &mut kindle_model::KvCache,
    tokens: &[u32],
    rows: &[f32],
    label: &str,
) {
    for (i, &token) in tokens.iter().enumerate() {
        let logits = model.forward(&[token], cache, LogitsFor::Last).unwrap();
        assert_eq!(logits, rows[i * 96..(i + 1) * 96], "{label} {i}");
    }
}

/// A decode step over a long context (256 positions or more), or over an f16 or int8 cache at
/// any length, splits attention over positions and columns instead of heads: its logits have
/// the same bits as the same rows of a short multi-row pass (attention by head), on one thread
/// and on two, for every KV type, after a short context and a long one.
#[test]
fn long_context_decode_has_the_bits_of_a_multi_row_pass_on_any_thread_count() {
    let model = tiny_model(true);
    let kv_types = [KvType::F32, KvType::F16, KvType::Int8];
    for (kv_type, held) in kv_types.into_iter().flat_map(|t| [(t, 20), (t, 300)]) {
        let mut context = model.new_cache_typed(400, kv_type);
        model
            .forward(&tokens(21, held, 96), &mut context, LogitsFor::Last)
            .unwrap();
        let next = tokens(22, 3, 96);
        let mut cache = context.fork();
        let rows = model.forward(&next, &mut cache, LogitsFor::All).unwrap();
        for threads in [1, 2] {
            let model = model
                .clone()
                .with_kernels(Kernels::new(KernelOptions::threads(threads)));
            let label = format!("{kv_type}, context {held}, {threads} threads, step");
            assert_steps_match(&model, &mut context.fork(), &next, &rows, &label);
        }
    }
}

/// With 64-wide heads (the width the AVX-512 tiles of a prefill task's weighted sums take),
/// every row of a long one-pass prefill has the bits of the same row decoded token by token
/// (one row arithmetic for the products, `RowArithmetic::Decode`, so that only the attention
/// differs between the two), with and without a sliding window (whose start the tiles' rows
/// reach at different places), for f32, f16 and int8 caches (the last two read in place by
/// the decode's AVX-512 form), on one and two threads.
#[test]
fn wide_heads_keep_their_bits_between_prefill_tiles_and_decode() {
    for window in [None, Some(37)] {
        let shape = TinyShape {
            d: 128,
            heads: 2,
            kv_heads: 1,
            window,
            dense_up: false,
        };
        let kernels = |threads| {
            Kernels::new(KernelOptions {
                threads: Some(threads),
                arithmetic: RowArithmetic::Decode,
                ..KernelOptions::default()
            })
        };
        // Layer 0 local (the window), layer 1 global.
        let arch = ArchSpec {
            layers: LayerPattern::LocalGlobal {
                period: 2,
                local_rope_theta: 10_000.0,
            },
            ..ArchSpec::LLAMA
        };
        let model = tiny_quantized_shaped(false, GgmlType::Q8_0, 400, shape)
            .with_arch(arch)
            .with_kernels(kernels(2));
        let prompt = tokens(31, 300, 96);
        for kv_type in [KvType::F32, KvType::F16, KvType::Int8] {
            let mut cache = model.new_cache_typed(400, kv_type);
            let rows = model.forward(&prompt, &mut cache, LogitsFor::All).unwrap();
            for threads in [1, 2] {
                let model = model.clone().with_kernels(kernels(threads));
                let mut cache = model.new_cache_typed(400, kv_type);
                let label = format!("window {window:?}, {kv_type}, {threads} threads, row");
                assert_steps_match(&model, &mut cache, &prompt, &rows, &label);
            }
        }
    }
}
