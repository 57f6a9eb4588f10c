//! Gemma-3 on tiny random models: both executors give the same logits (MQA, head width from
//! `key_length`, q/k norms, post norms, GeGLU, RoPE on halves, local layers with a sliding
//! window and their own rotary base); a local layer's window is the window (a one-layer model
//! gives the last token the logits of the window alone: RoPE scores depend only on relative
//! positions); and the loader reads a gemma3 file, refusing one without its window.

mod common;

use burn::prelude::*;
use common::max_diff;
use common::paths::{burn_logits, check_paths, encode, tokens, values};
use common::shifts::{Compare, check_shifts, shift_errors};
use kindle_gguf::quant::GgmlType;
use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_kernels::{QuantMatrix, WeightBytes};
use kindle_kv_cache::shift::{KeyRotation, RotaryPairs};
use kindle_kv_cache::{KvCache, SlidingWindowCache, WINDOW_SLACK};
use kindle_model::linear::QLinear;
use kindle_model::llama::{ArchSpec, Block, LayerPattern, Norm};
use kindle_model::{KvType, Llama, LlamaConfig, LogitsFor, ModelError};
use kindle_sampling::logprobs::argmax;

const VOCAB: usize = 96;
const D: usize = 64;
/// Head width: 4 heads of 32 make queries 128 wide, not `D`.
const HEAD_DIM: usize = 32;
const HEADS: usize = 4;
const FF: usize = 96;

/// A tiny Gemma-3-shaped model: `layers` layers, one KV head, heads `HEAD_DIM` wide, local
/// layers seeing `window` positions, one global layer every `period`; Q8_0 matrices.
fn tiny_gemma3(layers: usize, window: Option<usize>, period: usize) -> Llama {
    let config = LlamaConfig::new(VOCAB, D, layers, HEADS, 1, FF)
        .with_key_length(Some(HEAD_DIM))
        .with_sliding_window(window)
        .with_rope_theta(1e6)
        .with_rms_eps(1e-6);
    let device = Device::flex();
    let mut seed = 900;
    let mut linear = |rows: usize, cols: usize| {
        seed += 1;
        let w = values(seed, rows * cols, 1.5 / (cols as f32).sqrt());
        let bytes = WeightBytes::owned(encode(GgmlType::Q8_0, &w));
        QLinear::quantized(QuantMatrix::new(GgmlType::Q8_0, rows, cols, bytes).unwrap())
    };
    let norm = |seed: u64, width: usize| {
        let g: Vec<f32> = values(seed, width, 0.3).iter().map(|v| 1.0 + v).collect();
        Norm::new(
            Tensor::from_data(TensorData::new(g, [width]), &device),
            1e-6,
        )
    };
    let (q, kv) = (HEADS * HEAD_DIM, HEAD_DIM);
    let blocks = (0..layers as u64)
        .map(|l| {
            Block::new(
                norm(700 + l, D),
                linear(q, D),
                linear(kv, D),
                linear(kv, D),
                linear(D, q),
                norm(710 + l, D),
                linear(FF, D),
                linear(FF, D),
                linear(D, FF),
            )
            .with_qk_norms(norm(720 + l, HEAD_DIM), norm(730 + l, HEAD_DIM))
            .with_post_norms(norm(740 + l, D), norm(750 + l, D))
        })
        .collect();
    let embedding = linear(VOCAB, D);
    let arch = ArchSpec {
        layers: LayerPattern::LocalGlobal {
            period,
            local_rope_theta: 1e4,
        },
        ..ArchSpec::GEMMA3
    };
    Llama::from_parts(config, embedding, blocks, norm(760, D), None).with_arch(arch)
}

#[test]
fn host_and_burn_paths_agree_on_a_tiny_gemma3() {
    // Layers 0, 1, 3, 4 local (window 6), 2 and 5 global.
    let model = tiny_gemma3(6, Some(6), 3);
    for kv_type in [KvType::F32, KvType::F16, KvType::Int8] {
        // A short prompt takes the host path and decodes past the window; a long one (16+
        // rows) runs the Burn path's masked prefill on both sides.
        for prompt_len in [5, 20] {
            let prompt = tokens(prompt_len as u64, prompt_len, VOCAB);
            check_paths(
                &model,
                &prompt,
                12,
                2e-3,
                || model.new_cache_typed(40, kv_type),
                &format!("gemma3, prompt {prompt_len}, {kv_type}"),
            );
        }
    }
}

#[test]
fn local_layers_keep_a_ring_of_their_window() {
    // Layers 0, 1, 3, 4 local (window 6): their caches keep 6 + WINDOW_SLACK positions, the
    // global ones the capacity. A prompt longer than one pass of such a cache takes (split
    // by the model), then decoding far past the ring's size: the same logits as a cache
    // holding every position, bit for bit on the host path.
    let model = tiny_gemma3(6, Some(6), 3);
    let capacity = 3 * WINDOW_SLACK;
    let prompt = tokens(41, WINDOW_SLACK + 40, VOCAB);
    for kv_type in [KvType::F32, KvType::Int8] {
        let full_config = model.config().kv_cache_config(capacity);
        let mut full = KvCache::with_type(full_config, kv_type, &model.device());
        let mut ring = model.new_cache_typed(capacity, kv_type);
        let slots = 6 + WINDOW_SLACK;
        assert_eq!(
            ring.layer_slots(),
            [slots, slots, capacity, slots, slots, capacity]
        );
        assert_eq!(
            ring.bytes() * 6,
            full.bytes() * (4 * slots + 2 * capacity) / capacity
        );
        let a = model.forward(&prompt, &mut full, LogitsFor::Last).unwrap();
        let b = model.forward(&prompt, &mut ring, LogitsFor::Last).unwrap();
        assert_eq!(a, b, "{kv_type}: prompt");
        let mut next = argmax(&a).unwrap();
        for step in 0..capacity - prompt.len() - 8 {
            let a = model.forward(&[next], &mut full, LogitsFor::Last).unwrap();
            let b = model.forward(&[next], &mut ring, LogitsFor::Last).unwrap();
            assert_eq!(a, b, "{kv_type}: step {step}");
            next = argmax(&a).unwrap();
        }
        // A rollback within the slack keeps the window; the next tokens agree again.
        let back = full.len() - 20;
        full.truncate(back);
        ring.truncate(back);
        assert_eq!(ring.len(), back);
        let a = model
            .forward(&[1, 2, 3], &mut full, LogitsFor::Last)
            .unwrap();
        let b = model
            .forward(&[1, 2, 3], &mut ring, LogitsFor::Last)
            .unwrap();
        assert_eq!(a, b, "{kv_type}: after a rollback");
        // Further back than the slack, the ring has lost the window: the cache empties.
        ring.truncate(ring.len() - WINDOW_SLACK - 10);
        assert_eq!(ring.len(), 0);
    }
}

#[test]
fn the_burn_path_reads_a_ring_as_the_host_path_does() {
    let model = tiny_gemma3(6, Some(6), 3);
    let capacity = 3 * WINDOW_SLACK;
    let mut full = KvCache::new(model.config().kv_cache_config(capacity), &model.device());
    let mut ring = model.new_cache(capacity);
    // Passes of at most `max_pass` tokens (the Burn entry point does not split them).
    assert!(burn_logits_checked(&model, &tokens(3, WINDOW_SLACK + 2, VOCAB), &mut ring).is_err());
    let mut worst = 0f32;
    for chunk in tokens(43, 2 * WINDOW_SLACK + 100, VOCAB).chunks(97) {
        let a = burn_logits(&model, chunk, &mut full, LogitsFor::Last);
        let b = burn_logits(&model, chunk, &mut ring, LogitsFor::Last);
        worst = worst.max(max_diff(&a, &b));
    }
    assert!(worst < 1e-4, "Burn path, ring against full cache: {worst}");
}

fn burn_logits_checked(
    model: &Llama,
    tokens: &[u32],
    cache: &mut KvCache,
) -> Result<(), ModelError> {
    model
        .forward_tensor(tokens, cache, LogitsFor::Last)
        .map(|_| ())
}

/// The host path's and the Burn path's logits of the last of `tokens`, from a fresh cache:
/// in one pass, prefilling all but the last then decoding it, and in passes of 3 tokens
/// (queries whose window starts inside the cache).
fn last_logits(model: &Llama, tokens: &[u32]) -> [Vec<f32>; 6] {
    let one_pass = |host: bool| {
        let mut cache = model.new_cache(tokens.len());
        if host {
            model.forward(tokens, &mut cache, LogitsFor::Last).unwrap()
        } else {
            burn_logits(model, tokens, &mut cache, LogitsFor::Last)
        }
    };
    let decoded = |host: bool| {
        let (head, last) = tokens.split_at(tokens.len() - 1);
        let mut cache = model.new_cache(tokens.len());
        if !head.is_empty() {
            model.forward(head, &mut cache, LogitsFor::Last).unwrap();
        }
        if host {
            model.forward(last, &mut cache, LogitsFor::Last).unwrap()
        } else {
            burn_logits(model, last, &mut cache, LogitsFor::Last)
        }
    };
    let in_threes = |host: bool| {
        let mut cache = model.new_cache(tokens.len());
        let mut logits = Vec::new();
        for chunk in tokens.chunks(3) {
            logits = if host {
                model.forward(chunk, &mut cache, LogitsFor::Last).unwrap()
            } else {
                burn_logits(model, chunk, &mut cache, LogitsFor::Last)
            };
        }
        logits
    };
    [
        one_pass(true),
        one_pass(false),
        decoded(true),
        decoded(false),
        in_threes(true),
        in_threes(false),
    ]
}

#[test]
fn a_local_layer_sees_only_its_window() {
    // One local layer (no global one within 1000 layers), window 4.
    let windowed = tiny_gemma3(1, Some(4), 1000);
    let global = tiny_gemma3(1, None, 1000);
    for len in [10, 24] {
        let sequence = tokens(40 + len as u64, len, VOCAB);
        let window = &sequence[len - 4..];
        let [alone, ..] = last_logits(&windowed, window);
        for (i, logits) in last_logits(&windowed, &sequence).iter().enumerate() {
            let diff = max_diff(logits, &alone);
            assert!(
                diff < 2e-3,
                "{len} tokens, way {i}: {diff} from the window alone"
            );
        }
        // Without the window the earlier tokens count.
        let [whole, ..] = last_logits(&global, &sequence);
        assert!(
            max_diff(&whole, &alone) > 1e-2,
            "{len} tokens: the window changed nothing"
        );
    }
}

/// The context shift turns each layer's keys as that layer turned them (halves, and a local
/// layer's base 10,000 or a global one's 1,000,000): right after a shift the first layer holds
/// what a fresh prefill of the kept tokens caches, local or global, and a one-layer model
/// with a window of 4 gives a fresh prefill's logits.
#[test]
fn a_context_shift_turns_each_layer_with_its_own_base() {
    let stream = tokens(77, 60, VOCAB);
    // Period 1000: layer 0 local; period 1: every layer global.
    for period in [1000, 1] {
        let model = tiny_gemma3(2, Some(512), period);
        for keep in [0, 3] {
            check_shifts(
                &model,
                KvType::F32,
                (16, keep),
                &stream,
                Compare::FirstLayer,
                3,
            );
        }
    }
    let windowed = tiny_gemma3(1, Some(4), 1000);
    for keep in [0, 2] {
        check_shifts(
            &windowed,
            KvType::F32,
            (16, keep),
            &stream,
            Compare::Logits,
            3,
        );
    }
}

/// The check above catches a shift that turns the keys wrongly: adjacent pairs instead of
/// halves, or the global base on a local layer.
#[test]
fn a_context_shift_with_the_wrong_rotation_is_caught() {
    let stream = tokens(77, 60, VOCAB);
    let model = tiny_gemma3(2, Some(512), 1000);
    let right = KeyRotation::new(RotaryPairs::Halves, 10000.0);
    for (what, wrong) in [
        ("adjacent pairs", KeyRotation::adjacent(10000.0)),
        (
            "the global base",
            KeyRotation {
                theta: 1e6,
                ..right.clone()
            },
        ),
        ("the right rotation", right.clone()),
    ] {
        let config = model.config().kv_cache_config(16);
        let rotations = vec![Some(wrong.clone()); 2];
        let cache =
            SlidingWindowCache::with_rotations(config, KvType::F32, 3, rotations, &Device::flex())
                .unwrap();
        let (shifts, worst) =
            shift_errors(&model, cache, KvType::F32, &stream, Compare::FirstLayer);
        assert!(shifts >= 3);
        if wrong == right {
            assert!(worst < 1e-3, "{what}: {worst}");
        } else {
            assert!(worst > 0.05, "{what}: only {worst} from a fresh prefill");
        }
    }
}

/// A tiny gemma3 GGUF file (f32 tensors) with its metadata edited by `edit`.
fn gemma3_file(edit: impl FnOnce(&mut Vec<(&'static str, MetadataValue)>)) -> GgufFile {
    let u32v = |v: usize| MetadataValue::U32(v as u32);
    let mut meta: Vec<(&'static str, MetadataValue)> = vec![
        ("general.architecture", "gemma3".into()),
        ("gemma3.block_count", u32v(2)),
        ("gemma3.context_length", u32v(128)),
        ("gemma3.embedding_length", u32v(D)),
        ("gemma3.feed_forward_length", u32v(FF)),
        ("gemma3.attention.head_count", u32v(HEADS)),
        ("gemma3.attention.head_count_kv", u32v(1)),
        ("gemma3.attention.key_length", u32v(HEAD_DIM)),
        ("gemma3.attention.value_length", u32v(HEAD_DIM)),
        ("gemma3.attention.sliding_window", u32v(512)),
        (
            "gemma3.attention.layer_norm_rms_epsilon",
            MetadataValue::F32(1e-6),
        ),
        ("gemma3.rope.freq_base", MetadataValue::F32(1e6)),
        ("gemma3.vocab_size", u32v(VOCAB)),
    ];
    edit(&mut meta);
    let config = LlamaConfig::new(VOCAB, D, 2, HEADS, 1, FF).with_key_length(Some(HEAD_DIM));
    let mut writer = GgufWriter::new();
    for (key, value) in meta {
        writer = writer.metadata(key, value);
    }
    for (i, (name, dims)) in config.tensors_of(&ArchSpec::GEMMA3).into_iter().enumerate() {
        let n = dims.iter().product::<u64>() as usize;
        writer = writer.tensor_f32(name, &dims, &values(i as u64 + 1, n, 0.1));
    }
    GgufFile::from_bytes(writer.to_bytes()).expect("a valid GGUF file")
}

#[test]
fn the_loader_reads_gemma3_and_refuses_a_file_without_its_window() {
    let file = gemma3_file(|_| {});
    let model = Llama::from_gguf(&file, &Device::flex()).expect("the tiny gemma3 loads");
    let config = model.config();
    assert_eq!(model.arch().name, "gemma3");
    assert_eq!(
        (config.head_dim(), config.sliding_window),
        (HEAD_DIM, Some(512))
    );
    assert_eq!(config.attention_scale(), 1.0 / (HEAD_DIM as f32).sqrt());
    assert!(config.tied_embeddings);
    let mut cache = model.new_cache(8);
    let logits = model
        .forward(&[1, 2, 3], &mut cache, LogitsFor::Last)
        .unwrap();
    assert!(logits.len() == VOCAB && logits.iter().all(|v| v.is_finite()));
    // The context shift turns each layer's keys with the layer's own base and pairs.
    let cache = model.new_sliding_cache(8, KvType::F32, 2).unwrap();
    assert_eq!(
        cache.inner().bytes(),
        model.sliding_cache_bytes(8, KvType::F32)
    );

    // A file's pattern overrides the architecture's period.
    let file = gemma3_file(|meta| {
        meta.push((
            "gemma3.attention.sliding_window_pattern",
            MetadataValue::U32(2),
        ))
    });
    let model = Llama::from_gguf(&file, &Device::flex()).unwrap();
    let local: Vec<bool> = (0..2)
        .map(|l| model.arch().is_local(model.config(), l))
        .collect();
    assert_eq!(local, [true, false]);

    let file = gemma3_file(|meta| meta.retain(|(k, _)| *k != "gemma3.attention.sliding_window"));
    let message = match Llama::from_gguf(&file, &Device::flex()) {
        Ok(_) => panic!("a gemma3 file without its window loaded"),
        Err(error) => error.to_string(),
    };
    assert!(
        message.contains("gemma3.attention.sliding_window") && message.contains("missing"),
        "{message}"
    );
}

/// A paged pool (`kindle serve`'s) whose local layers keep only their window: a prompt longer
/// than a pass, decoding past the window and the slack, and a second prompt reusing the first
/// one's published blocks give the logits of a cache holding every position, bit for bit; the
/// local layers hold no more than a window, a pass and a rollback.
#[test]
fn a_paged_pool_keeps_only_the_local_layers_windows() {
    use kindle_kernels::{KernelOptions, Kernels, RowArithmetic};
    use kindle_kv_cache::PagedPool;
    // One arithmetic for every row, as `kindle serve` loads its model.
    let model = tiny_gemma3(6, Some(6), 3).with_kernels(Kernels::new(KernelOptions {
        arithmetic: RowArithmetic::Decode,
        ..KernelOptions::default()
    }));
    let windows = model.layer_windows();
    assert_eq!(windows.iter().flatten().count(), 4);
    let block_size = 16;
    let capacity = 3 * WINDOW_SLACK;
    let n_blocks = 4 * capacity / block_size;
    let local_blocks = PagedPool::local_blocks_for(&windows, block_size, 2, n_blocks);
    let per_sequence = (6 + 2 * WINDOW_SLACK + 1).div_ceil(block_size) + 2;
    assert_eq!(local_blocks, 4 * per_sequence);
    for kv_type in [KvType::F32, KvType::Int8] {
        let config = model.config().kv_cache_config(0);
        let pool = PagedPool::with_windows(
            config,
            kv_type,
            (n_blocks, block_size),
            &windows,
            local_blocks,
            &model.device(),
        )
        .unwrap();
        let full = || {
            KvCache::with_type(
                model.config().kv_cache_config(capacity),
                kv_type,
                &model.device(),
            )
        };
        let prompt = tokens(51, WINDOW_SLACK + 40, VOCAB);
        let (mut paged, reused) = pool.cache_for(&prompt, capacity).unwrap();
        assert_eq!(reused, 0);
        let mut whole = full();
        let a = model.forward(&prompt, &mut whole, LogitsFor::Last).unwrap();
        let b = model.forward(&prompt, &mut paged, LogitsFor::Last).unwrap();
        assert_eq!(a, b, "{kv_type}: prompt");
        let mut held = prompt.clone();
        let mut next = argmax(&a).unwrap();
        for step in 0..WINDOW_SLACK + 100 {
            let a = model.forward(&[next], &mut whole, LogitsFor::Last).unwrap();
            let b = model.forward(&[next], &mut paged, LogitsFor::Last).unwrap();
            assert_eq!(a, b, "{kv_type}: step {step}");
            held.push(next);
            next = argmax(&a).unwrap();
            let local = pool.local_stats().unwrap();
            assert!(local.used <= per_sequence, "{kv_type}: {local:?}");
        }
        pool.publish(&paged, &held);
        drop(paged);

        // The conversation goes on: its whole history reused, the local windows with it.
        let mut second = held.clone();
        second.extend(tokens(52, 30, VOCAB));
        let (mut paged, reused) = pool.cache_for(&second, capacity).unwrap();
        assert_eq!(reused, held.len() / block_size * block_size);
        let mut whole = full();
        let a = model.forward(&second, &mut whole, LogitsFor::Last).unwrap();
        let b = model
            .forward(&second[reused..], &mut paged, LogitsFor::Last)
            .unwrap();
        assert_eq!(a, b, "{kv_type}: after a reused history");
    }

    // The Burn path (a GPU's) reads the same pool: the positions no window reaches are zeros
    // that its masks leave out.
    let config = model.config().kv_cache_config(0);
    let pool = PagedPool::with_windows(
        config,
        KvType::F32,
        (n_blocks, block_size),
        &windows,
        local_blocks,
        &model.device(),
    )
    .unwrap();
    let mut paged = pool.cache(capacity).unwrap();
    let mut whole = KvCache::new(model.config().kv_cache_config(capacity), &model.device());
    let mut worst = 0f32;
    for chunk in tokens(53, 2 * WINDOW_SLACK + 100, VOCAB).chunks(97) {
        let a = burn_logits(&model, chunk, &mut whole, LogitsFor::Last);
        let b = burn_logits(&model, chunk, &mut paged, LogitsFor::Last);
        worst = worst.max(max_diff(&a, &b));
    }
    assert!(
        worst < 1e-4,
        "Burn path, paged against whole cache: {worst}"
    );
    assert!(pool.local_stats().unwrap().used <= per_sequence);
}
