//! A sequence whose cache is blocks of a shared `PagedPool` gets the logits of a contiguous
//! cache, bit for bit: for every storage type and block size, through a prefill longer than a
//! micro-batch and decode steps past the length where one row's attention is split over
//! positions, with a prefix reused from another sequence's published blocks, after a fork
//! (copy-on-write), and in a batched pass beside other sequences.

mod common;

use common::paths::{tiny_quantized, tokens};
use kindle_gguf::quant::GgmlType;
use kindle_kv_cache::{PagedCache, PagedPool};
use kindle_model::{
    BatchSequence, KernelOptions, Kernels, KvStore, KvType, Llama, LogitsFor, RowArithmetic,
};
use kindle_sampling::logprobs::argmax;

const VOCAB: usize = 96;

fn model() -> Llama {
    // `Q8_0` up-projection: long prefills take the host path too. One arithmetic for every
    // row, as `kindle serve` (the paged caches' user) loads its model: by row count a
    // batch, or the rest of a prompt after a reused prefix, could take the other one.
    tiny_quantized(false, GgmlType::Q8_0, 512).with_kernels(Kernels::new(KernelOptions {
        arithmetic: RowArithmetic::Decode,
        ..KernelOptions::default()
    }))
}

/// A pool of 64 blocks.
fn pool(model: &Llama, kv_type: KvType, block_size: usize) -> std::sync::Arc<PagedPool> {
    let config = model.config().kv_cache_config(0);
    PagedPool::new(config, kv_type, 64, block_size, &model.device()).unwrap()
}

/// Logits of `prompt` (last row), then of `steps` greedy decode steps.
fn run(model: &Llama, cache: &mut dyn KvStore, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    let mut rows = vec![model.forward(prompt, cache, LogitsFor::Last).unwrap()];
    for _ in 0..steps {
        let next = argmax(rows.last().unwrap()).unwrap();
        rows.push(model.forward(&[next], cache, LogitsFor::Last).unwrap());
    }
    rows
}

fn assert_bits(got: &[Vec<f32>], want: &[Vec<f32>], label: &str) {
    assert_eq!(got.len(), want.len(), "{label}: rows");
    for (step, (g, w)) in got.iter().zip(want).enumerate() {
        let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{label}: step {step} logits differ");
    }
}

#[test]
fn paged_caches_give_contiguous_logits_bit_for_bit() {
    let model = model();
    // 250 prompt tokens, then past 256 held: the split single-row attention reads blocks too.
    let prompt = tokens(3, 250, VOCAB);
    let steps = 12;
    for kv_type in [KvType::F32, KvType::F16, KvType::Int8] {
        let mut contiguous = model.new_cache_typed(prompt.len() + steps + 1, kv_type);
        let want = run(&model, &mut contiguous, &prompt, steps);
        for block_size in [1, 7, 16] {
            let config = model.config().kv_cache_config(0);
            let blocks = 300usize.div_ceil(block_size);
            let pool =
                PagedPool::new(config, kv_type, blocks, block_size, &model.device()).unwrap();
            let mut cache = pool.cache(prompt.len() + steps + 1).unwrap();
            let got = run(&model, &mut cache, &prompt, steps);
            assert_bits(&got, &want, &format!("{kv_type}, blocks of {block_size}"));
        }
    }
}

#[test]
fn a_reused_prefix_gives_the_logits_of_computing_it() {
    let model = model();
    let system = tokens(5, 40, VOCAB);
    let mut first = system.clone();
    first.extend(tokens(6, 9, VOCAB));
    let mut second = system.clone();
    second.extend(tokens(7, 11, VOCAB));
    for kv_type in [KvType::F32, KvType::Int8] {
        let pool = pool(&model, kv_type, 16);
        let (mut a, reused) = pool.cache_for(&first, first.len() + 8).unwrap();
        assert_eq!(reused, 0);
        run(&model, &mut a, &first, 0);
        assert_eq!(pool.publish(&a, &first), 3, "49 tokens fill 3 blocks of 16");
        drop(a);

        let (mut b, reused) = pool.cache_for(&second, second.len() + 8).unwrap();
        assert_eq!(reused, 32, "the 40 shared tokens cover two whole blocks");
        let got = run(&model, &mut b, &second[reused..], 6);
        let mut contiguous = model.new_cache_typed(second.len() + 8, kv_type);
        let want = run(&model, &mut contiguous, &second, 6);
        assert_bits(&got, &want, &format!("{kv_type}: reused prefix"));
    }
}

#[test]
fn forks_copy_a_shared_block_before_writing_it() {
    let model = model();
    let prompt = tokens(9, 21, VOCAB);
    let pool = pool(&model, KvType::F32, 8);
    let mut a = pool.cache(40).unwrap();
    run(&model, &mut a, &prompt, 0);
    let mut b: PagedCache = a.fork();
    let used = pool.stats().used;
    // Different continuations: each writes into the block the prompt left half full.
    let ra = run(&model, &mut a, &[1, 2, 3], 2);
    let rb = run(&model, &mut b, &[4, 5], 3);
    assert!(
        pool.stats().used > used,
        "the shared partial block was copied"
    );
    for (tail, got) in [(&[1u32, 2, 3][..], ra), (&[4, 5][..], rb)] {
        let mut c = model.new_cache(40);
        run(&model, &mut c, &prompt, 0);
        let want = run(&model, &mut c, tail, got.len() - 1);
        assert_bits(&got, &want, "fork");
    }
}

#[test]
fn a_batched_pass_over_paged_caches_gives_each_its_own_logits() {
    let model = model();
    let pool = pool(&model, KvType::F32, 16);
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| tokens(20 + i, 18 + 5 * i as usize, VOCAB))
        .collect();
    let mut caches: Vec<PagedCache> = prompts.iter().map(|_| pool.cache(64).unwrap()).collect();
    let mut batch: Vec<BatchSequence<'_>> = caches
        .iter_mut()
        .zip(&prompts)
        .map(|(cache, p)| BatchSequence { tokens: p, cache })
        .collect();
    let rows = model.forward_batch(&mut batch, LogitsFor::Last).unwrap();
    for (p, row) in prompts.iter().zip(rows) {
        let mut alone = model.new_cache(64);
        let want = model.forward(p, &mut alone, LogitsFor::Last).unwrap();
        assert_bits(&[row], &[want], "batched");
    }
}
