//! A paged pool whose layer 0 attends to a sliding window (a local layer, as Gemma-3's) and
//! layer 1 to every position: the local layer's blocks hold each sequence's window (and no
//! more than the window, a pass and a rollback), what every query sees reads back exactly, a
//! reused prefix brings the window before its end (and is shortened where that window is no
//! longer cached), and a rollback past the slack empties the cache, as a ring does.

use burn::prelude::*;
use kindle_kv_cache::{
    KvCacheConfig, KvCacheError, KvStore, KvType, PagedCache, PagedPool, WINDOW_SLACK,
};

const HEADS: usize = 2;
const DIM: usize = 4;
const WINDOW: usize = 5;
const BLOCK: usize = 4;

fn config() -> KvCacheConfig {
    KvCacheConfig {
        n_layers: 2,
        n_kv_heads: HEADS,
        head_dim: DIM,
        capacity: 0,
    }
}

fn pool(n_blocks: usize, local_blocks: usize) -> std::sync::Arc<PagedPool> {
    let windows = [Some(WINDOW), None];
    PagedPool::with_windows(
        config(),
        KvType::F32,
        (n_blocks, BLOCK),
        &windows,
        local_blocks,
        &Device::flex(),
    )
    .unwrap()
}

/// The keys of layer `layer` at the last token of `prefix` (`[head][dim]`): they depend on
/// every token before it, as a model's do, so a block reused after another prefix shows.
/// Values are the keys negated.
fn key_of(layer: usize, prefix: &[u32]) -> Vec<f32> {
    let mut h = prefix.iter().fold(17u64 + layer as u64, |h, &t| {
        h.wrapping_mul(1_000_003).wrapping_add(u64::from(t) + 1)
    });
    (0..HEADS * DIM)
        .map(|_| {
            h = h
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

/// `[1, HEADS, T, DIM]` from tokens laid out `[head][dim]`.
fn tensor(toks: &[Vec<f32>]) -> Tensor<4> {
    let t = toks.len();
    let mut data = Vec::with_capacity(t * HEADS * DIM);
    for h in 0..HEADS {
        for tok in toks {
            data.extend_from_slice(&tok[h * DIM..(h + 1) * DIM]);
        }
    }
    Tensor::from_data(TensorData::new(data, [1, HEADS, t, DIM]), &Device::flex())
}

/// Run `ids` after `held` (what `cache` holds), as a model's pass: prepare, write both
/// layers, advance.
fn feed(cache: &mut PagedCache, held: &mut Vec<u32>, ids: &[u32]) -> Result<(), KvCacheError> {
    cache.prepare(ids.len())?;
    for layer in 0..2 {
        let keys: Vec<Vec<f32>> = (0..ids.len())
            .map(|i| {
                let mut prefix = held.clone();
                prefix.extend(&ids[..=i]);
                key_of(layer, &prefix)
            })
            .collect();
        let values: Vec<Vec<f32>> = keys
            .iter()
            .map(|k| k.iter().map(|x| -x).collect())
            .collect();
        cache.update(layer, tensor(&keys), tensor(&values))?;
    }
    cache.advance(ids.len())?;
    held.extend(ids);
    Ok(())
}

/// Every position a query at `held.len()` or later sees, read through the host view as the
/// attention reads it: layer 1 all of them, layer 0 its window (and `from` on, where a reused
/// prefix starts the local layer's blocks).
fn check(cache: &mut PagedCache, held: &[u32], what: &str) {
    assert_eq!(cache.len(), held.len(), "{what}: length");
    for layer in 0..2 {
        let from = if layer == 0 {
            held.len().saturating_sub(WINDOW)
        } else {
            0
        };
        let view = cache.host_layer(layer).unwrap().unwrap();
        for head in 0..HEADS {
            let mut scratch = Vec::new();
            let n = held.len() - from;
            let keys = view.key_runs(head, from, n, &mut scratch).concat();
            let mut scratch = Vec::new();
            let values = view.value_runs(head, from, n, &mut scratch).concat();
            for (i, p) in (from..held.len()).enumerate() {
                let want = &key_of(layer, &held[..=p])[head * DIM..(head + 1) * DIM];
                let got = &keys[i * DIM..(i + 1) * DIM];
                assert_eq!(got, want, "{what}: layer {layer} head {head} key {p}");
                let got: Vec<f32> = values[i * DIM..(i + 1) * DIM].iter().map(|x| -x).collect();
                assert_eq!(got, want, "{what}: layer {layer} head {head} value {p}");
            }
        }
    }
}

/// A pseudo-random token sequence.
fn ids(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) % 7)
        .collect()
}

/// Local blocks one sequence may hold: its window, a pass and a rollback.
const PER_SEQUENCE: usize = (WINDOW + 2 * WINDOW_SLACK + 1).div_ceil(BLOCK) + 2;

#[test]
fn a_local_layer_holds_its_window_and_no_more() {
    let pool = pool(400, 200);
    assert_eq!(
        PagedPool::local_blocks_for(&[Some(WINDOW), None], BLOCK, 1, 400),
        2 * PER_SEQUENCE
    );
    let mut cache = pool.cache(1500).unwrap();
    assert_eq!(cache.max_pass(), WINDOW_SLACK + 1);
    assert!(matches!(
        cache.prepare(WINDOW_SLACK + 2),
        Err(KvCacheError::PassTooLong { .. })
    ));
    let all = ids(1, 1400);
    let mut held = Vec::new();
    let mut at = 0;
    // Passes of 1 to 257 tokens.
    for (step, size) in [257, 1, 100, 3, 257, 257, 64, 1, 1, 200, 250]
        .iter()
        .enumerate()
    {
        feed(&mut cache, &mut held, &all[at..at + size]).unwrap();
        at += size;
        check(&mut cache, &held, &format!("pass {step}"));
        let local = pool.local_stats().unwrap();
        assert!(
            local.used <= PER_SEQUENCE,
            "pass {step}: {} local blocks",
            local.used
        );
        assert_eq!(local.used + local.cached + local.free, local.total);
        let (global, per_local) = pool.bytes_per_block();
        assert_eq!(cache.bytes(), 375 * global + local.used * per_local);
    }
    // The global layer held every position.
    assert_eq!(pool.stats().used, 1500usize.div_ceil(BLOCK));
    drop(cache);
    assert_eq!(pool.local_stats().unwrap().used, 0);
    assert_eq!(pool.stats().used, 0);
}

#[test]
fn a_rollback_keeps_the_window_within_the_slack_and_empties_past_it() {
    let pool = pool(200, PER_SEQUENCE);
    let mut cache = pool.cache(700).unwrap();
    let all = ids(2, 700);
    let mut held = Vec::new();
    for chunk in all[..600].chunks(200) {
        feed(&mut cache, &mut held, chunk).unwrap();
    }
    // Back by the slack: the window before the new end is still there.
    cache.truncate(600 - WINDOW_SLACK);
    held.truncate(600 - WINDOW_SLACK);
    check(&mut cache, &held, "after a rollback by the slack");
    // Other tokens from there on, then back past the slack: the cache empties.
    feed(&mut cache, &mut held, &[6, 6, 6]).unwrap();
    check(&mut cache, &held, "rewritten after the rollback");
    cache.truncate(held.len() - WINDOW_SLACK - 2 * BLOCK);
    assert_eq!(cache.len(), 0);
    held.clear();
    feed(&mut cache, &mut held, &all[..50]).unwrap();
    check(&mut cache, &held, "written again from the start");
}

#[test]
fn a_reused_prefix_brings_its_window_or_is_shortened() {
    let pool = pool(600, 2 * PER_SEQUENCE);
    let first = ids(3, 700);
    let (mut a, reused) = pool.cache_for(&first, 800).unwrap();
    assert_eq!(reused, 0);
    let mut held = Vec::new();
    for chunk in first.chunks(250) {
        feed(&mut a, &mut held, chunk).unwrap();
    }
    // Published at the end only: the local blocks it gave back before are not cached.
    pool.publish(&a, &held);
    drop(a);
    let local = pool.local_stats().unwrap();
    // Those of the window before the last pass (which started at 500) and after it.
    let window_blocks = 700 / BLOCK - (500 - WINDOW - WINDOW_SLACK) / BLOCK;
    assert_eq!((local.used, local.cached), (0, window_blocks), "{local:?}");
    assert_eq!(pool.stats().cached, 700 / BLOCK);

    // The same 700 tokens and more: all 700 are reused,
    // with the local window before it.
    let mut second = first.clone();
    second.extend(ids(4, 20));
    let (mut b, reused) = pool.cache_for(&second, 800).unwrap();
    assert_eq!(reused, 700);
    let mut held = second[..reused].to_vec();
    check(&mut b, &held, "the reused prefix");
    feed(&mut b, &mut held, &second[reused..]).unwrap();
    check(&mut b, &held, "after the reused prefix");
    drop(b);

    // Prompts that leave the first one in its middle: at 300 the local window before it
    // is cached (published with the rest); at 200 it is not (given back before), and so
    // nothing is reused, although the global blocks are cached.
    for (at, want) in [(300, 300), (200, 0)] {
        let mut third = first[..at].to_vec();
        third.extend(ids(5, 30));
        let (mut c, reused) = pool.cache_for(&third, 400).unwrap();
        assert_eq!(reused, want, "leaving at {at}");
        let mut held = third[..reused].to_vec();
        check(&mut c, &held, "a prefix left in its middle");
        feed(&mut c, &mut held, &third[reused..]).unwrap();
        check(&mut c, &held, "after a prefix left in its middle");
    }

    // Two sequences that take all but four local blocks evict the cached windows, the
    // last positions' first (blocks go back tail first): the prompt is reused less, and
    // what is reused has its window.
    let mut others = Vec::new();
    for seed in 10..12 {
        let mut cache = pool.cache(900).unwrap();
        let mut held = Vec::new();
        for chunk in ids(seed, 3 * 257).chunks(257) {
            feed(&mut cache, &mut held, chunk).unwrap();
        }
        others.push(cache);
    }
    let local = pool.local_stats().unwrap();
    assert!(local.cached + local.free <= 4, "{local:?}");
    drop(others);
    let (mut d, reused) = pool.cache_for(&second, 800).unwrap();
    assert!(
        reused < 700,
        "the cached windows were evicted, yet {reused} reused"
    );
    let mut held = second[..reused].to_vec();
    check(&mut d, &held, "what is left of the prefix");
    feed(&mut d, &mut held, &second[reused..reused + 200]).unwrap();
    check(&mut d, &held, "computed again");
}

#[test]
fn a_fork_shares_the_window_and_copies_it_before_writing() {
    let pool = pool(300, 2 * PER_SEQUENCE);
    let mut a = pool.cache(600).unwrap();
    let all = ids(6, 500);
    let mut held = Vec::new();
    for chunk in all.chunks(250) {
        feed(&mut a, &mut held, chunk).unwrap();
    }
    let used = pool.local_stats().unwrap().used;
    let mut b = a.fork();
    assert_eq!(pool.local_stats().unwrap().used, used, "shared, not copied");
    let mut held_b = held.clone();
    feed(&mut b, &mut held_b, &[1, 2, 3]).unwrap();
    feed(&mut a, &mut held, &[4, 5]).unwrap();
    check(&mut a, &held, "the original");
    check(&mut b, &held_b, "the fork");
}

#[test]
fn local_layers_need_local_blocks() {
    let made = PagedPool::with_windows(
        config(),
        KvType::F32,
        (16, BLOCK),
        &[Some(WINDOW), None],
        0,
        &Device::flex(),
    );
    assert!(matches!(made, Err(KvCacheError::BadPool { .. })));
    // Without local layers nothing changes: passes are unlimited, no local group.
    let plain = PagedPool::new(config(), KvType::F32, 16, BLOCK, &Device::flex()).unwrap();
    assert_eq!(plain.local_stats(), None);
    assert_eq!(plain.cache(16).unwrap().max_pass(), usize::MAX);
    assert_eq!(PagedPool::local_blocks_for(&[None, None], BLOCK, 4, 16), 0);
}

#[test]
fn a_pass_the_local_group_cannot_hold_changes_nothing() {
    // 11 local blocks; a sequence of 38 tokens holds 10, and its fork shares them.
    let pool = pool(100, 11);
    let mut a = pool.cache(48).unwrap();
    let mut held = Vec::new();
    feed(&mut a, &mut held, &ids(7, 38)).unwrap();
    let mut b = a.fork();
    let (global, local) = (pool.stats(), pool.local_stats().unwrap());
    assert_eq!(local.used, 10);
    // Writing positions 38..44 copies two shared global blocks and needs two local ones
    // (a copy of the shared one and a new one): one is free, so nothing is taken.
    let mut held_b = held.clone();
    let err = feed(&mut b, &mut held_b, &[1, 2, 3, 4, 5, 6]).unwrap_err();
    assert!(matches!(err, KvCacheError::OutOfBlocks { .. }), "{err}");
    assert_eq!((pool.stats(), pool.local_stats().unwrap()), (global, local));
    check(&mut b, &held, "the fork, unchanged");
    // With its original gone, the fork has room.
    drop(a);
    let mut held_b = held.clone();
    feed(&mut b, &mut held_b, &[1, 2, 3, 4, 5, 6]).unwrap();
    check(&mut b, &held_b, "the fork, written");
}
