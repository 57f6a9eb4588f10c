//! Property tests: each cache variant against a plain `Vec` model of its contents.

use burn::prelude::*;
use kindle_kv_cache::shift::k_shift_host;
use kindle_kv_cache::{
    KvCache, KvCacheConfig, KvCacheError, KvStore, KvType, PagedCache, PagedPool,
    SlidingWindowCache, WINDOW_SLACK,
};
use proptest::prelude::*;

const LAYERS: usize = 2;
const HEADS: usize = 2;
const DIM: usize = 4;
const THETA: f64 = 100.0;
/// Elements of one token in one layer: `[head][dim]`.
const TOKEN: usize = HEADS * DIM;

fn config(capacity: usize) -> KvCacheConfig {
    KvCacheConfig {
        n_layers: LAYERS,
        n_kv_heads: HEADS,
        head_dim: DIM,
        capacity,
    }
}

/// One token's keys or values: `[head][dim]`.
type Tok = Vec<f32>;

/// What a single-sequence cache should hold: per layer, keys and values per token.
#[derive(Debug, Clone, Default)]
struct Model {
    keys: [Vec<Tok>; LAYERS],
    values: [Vec<Tok>; LAYERS],
}

impl Model {
    fn len(&self) -> usize {
        self.keys[0].len()
    }
    fn truncate(&mut self, len: usize) {
        for l in 0..LAYERS {
            self.keys[l].truncate(len);
            self.values[l].truncate(len);
        }
    }
    /// llama.cpp's context shift: drop `n` after `keep`, rotate the following keys by `-n`.
    fn evict(&mut self, keep: usize, n: usize) {
        let start = keep.min(self.len());
        let n = n.min(self.len() - start);
        for l in 0..LAYERS {
            self.keys[l].drain(start..start + n);
            self.values[l].drain(start..start + n);
            for k in &mut self.keys[l][start..] {
                k_shift_host(k, DIM, -(n as i64), THETA);
            }
        }
    }
}

/// Deterministic values in `[-4, 4)` for `t` tokens of all layers: `[layer][token]`.
fn tokens(seed: u64, t: usize) -> Vec<Vec<(Tok, Tok)>> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
    };
    (0..LAYERS)
        .map(|_| {
            (0..t)
                .map(|_| {
                    let k = (0..TOKEN).map(|_| next()).collect();
                    let v = (0..TOKEN).map(|_| next()).collect();
                    (k, v)
                })
                .collect()
        })
        .collect()
}

/// `[1, HEADS, T, DIM]` from tokens laid out `[head][dim]`.
fn to_tensor(toks: &[Tok], device: &Device) -> Tensor<4> {
    let t = toks.len();
    let mut data = Vec::with_capacity(t * TOKEN);
    for h in 0..HEADS {
        for tok in toks {
            data.extend_from_slice(&tok[h * DIM..(h + 1) * DIM]);
        }
    }
    Tensor::from_data(TensorData::new(data, [1, HEADS, t, DIM]), device)
}

/// Tokens laid out `[head][dim]` from `[1, HEADS, T, DIM]`.
fn from_tensor(x: Tensor<4>) -> Vec<Tok> {
    let [_, h, t, d] = x.dims();
    assert_eq!((h, d), (HEADS, DIM));
    let data: Vec<f32> = x.into_data().convert::<f32>().try_into_vec().unwrap();
    (0..t)
        .map(|i| {
            (0..HEADS)
                .flat_map(|h| data[(h * t + i) * DIM..(h * t + i + 1) * DIM].to_vec())
                .collect()
        })
        .collect()
}

/// How far a stored element may be from the model's.
#[derive(Debug, Clone, Copy)]
enum Tol {
    /// Absolute tolerance.
    Abs(f32),
    /// Int8: `absmax / 254` of each `[token, head]` vector (plus rounding slack).
    Int8,
    /// F16: relative `2^-11` (plus a subnormal floor).
    F16,
}

fn check_tokens(got: &[Tok], want: &[Tok], tol: Tol, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{}: length", what);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for h in 0..HEADS {
            let gh = &g[h * DIM..(h + 1) * DIM];
            let wh = &w[h * DIM..(h + 1) * DIM];
            let absmax = wh.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (a, b) in gh.iter().zip(wh) {
                let bound = match tol {
                    Tol::Abs(e) => e,
                    Tol::Int8 => absmax / 254.0 + absmax * 1e-6 + 1e-7,
                    Tol::F16 => b.abs() / 2048.0 + 1e-7,
                };
                prop_assert!(
                    (a - b).abs() <= bound,
                    "{}: token {} head {}: got {:?}, want {:?}",
                    what,
                    i,
                    h,
                    gh,
                    wh
                );
            }
        }
    }
    Ok(())
}

fn check_store<C: KvStore>(cache: &C, model: &Model, tol: Tol) -> Result<(), TestCaseError> {
    prop_assert_eq!(cache.len(), model.len());
    prop_assert_eq!(cache.next_position(), model.len());
    for l in 0..LAYERS {
        let (k, v) = cache.read(l).unwrap();
        check_tokens(&from_tensor(k), &model.keys[l], tol, "keys")?;
        check_tokens(&from_tensor(v), &model.values[l], tol, "values")?;
    }
    Ok(())
}

/// One forward pass of `t` tokens through `cache`, mirrored in `model` (if it fits).
fn append<C: KvStore>(
    cache: &mut C,
    model: &mut Model,
    seed: u64,
    t: usize,
    tol: Tol,
    on_prepare: impl FnOnce(&mut Model, usize),
    device: &Device,
) -> Result<(), TestCaseError> {
    let before = cache.len();
    if let Err(e) = cache.prepare(t) {
        let is_full = matches!(e, KvCacheError::Full { .. });
        prop_assert!(is_full);
        prop_assert_eq!(cache.len(), before);
        return Ok(());
    }
    on_prepare(model, before - cache.len());
    let toks = tokens(seed, t);
    for (l, layer) in toks.iter().enumerate() {
        let ks: Vec<Tok> = layer.iter().map(|(k, _)| k.clone()).collect();
        let vs: Vec<Tok> = layer.iter().map(|(_, v)| v.clone()).collect();
        let (k_all, v_all) = cache
            .update(l, to_tensor(&ks, device), to_tensor(&vs, device))
            .unwrap();
        model.keys[l].extend(ks);
        model.values[l].extend(vs);
        check_tokens(&from_tensor(k_all), &model.keys[l], tol, "update keys")?;
        check_tokens(&from_tensor(v_all), &model.values[l], tol, "update values")?;
    }
    cache.advance(t).unwrap();
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        t: usize,
        seed: u64,
    },
    Truncate(usize),
    /// Fork, write into the original, check the fork is untouched, go on with the fork.
    Fork(u64),
    Evict(usize),
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..=5, any::<u64>()).prop_map(|(t, seed)| Op::Append { t, seed }),
        2 => (0usize..40).prop_map(Op::Truncate),
        1 => any::<u64>().prop_map(Op::Fork),
        1 => (0usize..8).prop_map(Op::Evict),
        1 => Just(Op::Reset),
    ]
}

/// Drive a cache that does not evict on its own through `ops`.
fn run_fixed(kv_type: KvType, ops: Vec<Op>, tol: Tol) -> Result<(), TestCaseError> {
    let device = Device::flex();
    let mut cache = KvCache::with_type(config(24), kv_type, &device);
    let mut model = Model::default();
    prop_assert_eq!(cache.bytes(), config(24).bytes_as(kv_type));
    for op in ops {
        match op {
            Op::Append { t, seed } => {
                append(&mut cache, &mut model, seed, t, tol, |_, _| {}, &device)?
            }
            Op::Truncate(n) => {
                let len = n % (model.len() + 2);
                KvStore::truncate(&mut cache, len);
                model.truncate(len);
            }
            Op::Fork(seed) => {
                let fork = KvStore::fork(&cache);
                let saved = model.clone();
                let mut scratch = model.clone();
                append(&mut cache, &mut scratch, seed, 1, tol, |_, _| {}, &device)?;
                check_store(&fork, &saved, tol)?;
                cache = fork;
            }
            Op::Evict(_) => {}
            Op::Reset => {
                KvStore::reset(&mut cache);
                model = Model::default();
            }
        }
        check_store(&cache, &model, tol)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn contiguous_f32_matches_model(ops in prop::collection::vec(op(), 1..30)) {
        run_fixed(KvType::F32, ops, Tol::Abs(0.0))?;
    }

    #[test]
    fn contiguous_int8_within_bound(ops in prop::collection::vec(op(), 1..30)) {
        run_fixed(KvType::Int8, ops, Tol::Int8)?;
    }

    #[test]
    fn contiguous_f16_within_bound(ops in prop::collection::vec(op(), 1..30)) {
        run_fixed(KvType::F16, ops, Tol::F16)?;
    }

    #[test]
    fn sliding_window_matches_shifted_model(
        keep in 0usize..5,
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let device = Device::flex();
        let capacity = 12;
        let mut cache = SlidingWindowCache::new(config(capacity), keep, THETA, &device).unwrap();
        let mut model = Model::default();
        let tol = Tol::Abs(1e-4);
        let mut discarded = 0;
        for op in ops {
            match op {
                Op::Append { t, seed } => {
                    let len = model.len();
                    let mut evicted = 0;
                    append(&mut cache, &mut model, seed, t, tol, |m, n| {
                        evicted = n;
                        m.evict(keep, n);
                    }, &device)?;
                    if evicted > 0 {
                        // llama.cpp's rule: half of the unkept tokens, or what the pass needs.
                        let unkept = len - keep.min(len);
                        let needed = t - (capacity - len);
                        prop_assert_eq!(evicted, needed.max(unkept / 2));
                    }
                    discarded += evicted;
                    prop_assert!(cache.len() <= capacity);
                }
                Op::Truncate(n) => {
                    let len = n % (model.len() + 2);
                    cache.truncate(len);
                    model.truncate(len);
                }
                Op::Fork(seed) => {
                    let fork = cache.fork();
                    let saved = model.clone();
                    let mut scratch = model.clone();
                    append(&mut cache, &mut scratch, seed, 1, tol, |m, n| m.evict(keep, n), &device)?;
                    check_store(&fork, &saved, tol)?;
                    cache = fork;
                    discarded = cache.discarded();
                }
                Op::Evict(n) => {
                    let done = cache.evict(n);
                    let start = keep.min(model.len());
                    prop_assert_eq!(done, n.min(model.len() - start));
                    model.evict(keep, n);
                    discarded += done;
                }
                Op::Reset => {
                    cache.reset();
                    model = Model::default();
                    discarded = 0;
                }
            }
            prop_assert_eq!(cache.discarded(), discarded);
            check_store(&cache, &model, tol)?;
        }
    }
}

#[derive(Debug, Clone)]
enum PagedOp {
    /// A sequence starts with this prompt and room for `extra` more tokens.
    New {
        prompt: Vec<u32>,
        extra: usize,
    },
    Append {
        seq: usize,
        ids: Vec<u32>,
    },
    Truncate {
        seq: usize,
        len: usize,
    },
    Fork(usize),
    Free(usize),
    Publish(usize),
}

fn ids(max: usize) -> impl Strategy<Value = Vec<u32>> {
    // Three token ids: prompts share prefixes often.
    prop::collection::vec(0u32..3, 1..max)
}

fn paged_op() -> impl Strategy<Value = PagedOp> {
    prop_oneof![
        2 => (ids(10), 0usize..6).prop_map(|(prompt, extra)| PagedOp::New { prompt, extra }),
        4 => (any::<usize>(), ids(4)).prop_map(|(seq, ids)| PagedOp::Append { seq, ids }),
        1 => (any::<usize>(), 0usize..12).prop_map(|(seq, len)| PagedOp::Truncate { seq, len }),
        1 => any::<usize>().prop_map(PagedOp::Fork),
        1 => any::<usize>().prop_map(PagedOp::Free),
        2 => any::<usize>().prop_map(PagedOp::Publish),
    ]
}

/// What a model would store for the last token of `prefix`: it depends on every token before
/// it, as real keys and values do, so a block reused after the wrong prefix shows.
fn kv_of(prefix: &[u32]) -> Vec<(Tok, Tok)> {
    let seed = prefix.iter().fold(17u64, |h, &t| {
        h.wrapping_mul(1_000_003).wrapping_add(u64::from(t) + 1)
    });
    tokens(seed, 1)
        .into_iter()
        .map(|mut l| l.remove(0))
        .collect()
}

/// Run `ids` after what `cache` holds (`held` are its tokens), as a model's pass would.
fn feed(
    cache: &mut PagedCache,
    held: &mut Vec<u32>,
    ids: &[u32],
    device: &Device,
) -> Result<(), KvCacheError> {
    cache.prepare(ids.len())?;
    let mut rows: Vec<Vec<(Tok, Tok)>> = Vec::new();
    for i in 0..ids.len() {
        let mut prefix = held.clone();
        prefix.extend(&ids[..=i]);
        rows.push(kv_of(&prefix));
    }
    for l in 0..LAYERS {
        let ks: Vec<Tok> = rows.iter().map(|r| r[l].0.clone()).collect();
        let vs: Vec<Tok> = rows.iter().map(|r| r[l].1.clone()).collect();
        cache.update(l, to_tensor(&ks, device), to_tensor(&vs, device))?;
    }
    cache.advance(ids.len())?;
    held.extend(ids);
    Ok(())
}

fn check_paged(pool: &PagedPool, seqs: &mut [(PagedCache, Vec<u32>)]) -> Result<(), TestCaseError> {
    let stats = pool.stats();
    prop_assert_eq!(stats.used + stats.cached + stats.free, stats.total);
    for (cache, held) in seqs.iter_mut() {
        prop_assert_eq!(cache.len(), held.len());
        let want: Vec<Vec<(Tok, Tok)>> = (0..held.len()).map(|p| kv_of(&held[..=p])).collect();
        for l in 0..LAYERS {
            let keys: Vec<Tok> = want.iter().map(|w| w[l].0.clone()).collect();
            let values: Vec<Tok> = want.iter().map(|w| w[l].1.clone()).collect();
            let (k, v) = cache.read(l).unwrap();
            check_tokens(&from_tensor(k), &keys, Tol::Abs(0.0), "paged keys")?;
            check_tokens(&from_tensor(v), &values, Tol::Abs(0.0), "paged values")?;
            // The host view: runs of the pool's memory, one per block at most.
            let view = cache.host_layer(l).unwrap().unwrap();
            for head in 0..HEADS {
                let mut scratch = Vec::new();
                let runs = view.key_runs(head, 0, held.len(), &mut scratch);
                prop_assert!(runs.len() <= held.len().div_ceil(pool.block_size()).max(1));
                let got: Vec<f32> = runs.concat();
                let want: Vec<f32> = keys
                    .iter()
                    .flat_map(|k| k[head * DIM..(head + 1) * DIM].to_vec())
                    .collect();
                prop_assert_eq!(got, want, "host key runs, layer {} head {}", l, head);
            }
        }
    }
    Ok(())
}

/// A paged pool's host view lends f16 and int8 keys and values as stored, one run per block
/// at most, and widened (times their scales) they are what the f32 reads decode; a pool of
/// another type lends none of that type.
#[test]
fn paged_stored_runs_are_the_pools_memory() {
    let device = Device::flex();
    for kv_type in [KvType::F16, KvType::Int8, KvType::F32] {
        let pool = PagedPool::new(config(0), kv_type, 6, 3, &device).unwrap();
        let ids: Vec<u32> = (0..8).collect();
        let (mut cache, _) = pool.cache_for(&ids, 12).unwrap();
        let mut held = Vec::new();
        feed(&mut cache, &mut held, &ids, &device).unwrap();
        for l in 0..LAYERS {
            let view = cache.host_layer(l).unwrap().unwrap();
            assert_eq!(view.stores_f16(), kv_type == KvType::F16);
            assert_eq!(view.stores_int8(), kv_type == KvType::Int8);
            for head in 0..HEADS {
                let mut scratch = Vec::new();
                let keys = view.keys_at(head, 1, 7, &mut scratch).to_vec();
                let values = view.values_at(head, 1, 7, &mut scratch).to_vec();
                let widen = |runs: Vec<&[half::f16]>| -> (Vec<usize>, Vec<f32>) {
                    let lens = runs.iter().map(|r| r.len() / DIM).collect();
                    (lens, runs.concat().iter().map(|x| x.to_f32()).collect())
                };
                let scale = |runs: kindle_kv_cache::Int8Runs<'_>| -> (Vec<usize>, Vec<f32>) {
                    let lens = runs.quants.iter().map(|r| r.len() / DIM).collect();
                    let mut out = Vec::new();
                    for (q, s) in runs.quants.iter().zip(&runs.scales) {
                        assert_eq!(q.len(), s.len() * DIM, "a scale per vector");
                        for (row, &scale) in q.chunks_exact(DIM).zip(s.iter()) {
                            out.extend(row.iter().map(|&v| f32::from(v) * scale));
                        }
                    }
                    (lens, out)
                };
                let (k, v) = match kv_type {
                    KvType::F16 => (
                        widen(view.key_runs_f16(head, 1, 7).expect("f16 runs")),
                        widen(view.value_runs_f16(head, 1, 7).expect("f16 runs")),
                    ),
                    KvType::Int8 => (
                        scale(view.key_runs_int8(head, 1, 7).expect("int8 runs")),
                        scale(view.value_runs_int8(head, 1, 7).expect("int8 runs")),
                    ),
                    _ => {
                        assert!(view.key_runs_f16(head, 1, 7).is_none());
                        assert!(view.value_runs_int8(head, 1, 7).is_none());
                        continue;
                    }
                };
                // Positions 1..8 over blocks of 3: 1..3, 3..6, 6..8.
                assert_eq!(k.0, [2, 3, 2], "{kv_type}");
                assert_eq!(v.0, [2, 3, 2], "{kv_type}");
                assert_eq!(k.1, keys, "{kv_type}: layer {l} head {head}");
                assert_eq!(v.1, values, "{kv_type}: layer {l} head {head}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn paged_pool_matches_model(
        block_size in 1usize..5,
        n_blocks in 4usize..14,
        ops in prop::collection::vec(paged_op(), 1..40),
    ) {
        let device = Device::flex();
        let pool = PagedPool::new(config(0), KvType::F32, n_blocks, block_size, &device).unwrap();
        let mut seqs: Vec<(PagedCache, Vec<u32>)> = Vec::new();
        for op in ops {
            let before = pool.stats();
            match op {
                PagedOp::New { prompt, extra } => {
                    match pool.cache_for(&prompt, prompt.len() + extra) {
                        Ok((mut cache, reused)) => {
                            prop_assert_eq!(reused % block_size, 0);
                            prop_assert!(reused < prompt.len());
                            let mut held = prompt[..reused].to_vec();
                            // Its blocks are reserved: feeding the prompt cannot run out.
                            feed(&mut cache, &mut held, &prompt[reused..], &device).unwrap();
                            seqs.push((cache, held));
                        }
                        Err(e) => {
                            let out = matches!(e, KvCacheError::OutOfBlocks { .. });
                            prop_assert!(out, "{}", e);
                            prop_assert_eq!(pool.stats(), before);
                        }
                    }
                }
                PagedOp::Append { seq, ids } if !seqs.is_empty() => {
                    let i = seq % seqs.len();
                    let (cache, held) = &mut seqs[i];
                    let before_len = held.len();
                    match feed(cache, held, &ids, &device) {
                        Ok(()) => {}
                        Err(KvCacheError::Full { .. }) => {
                            prop_assert!(before_len + ids.len() > cache.capacity());
                        }
                        // Copying shared blocks (after a fork) needs free ones.
                        Err(KvCacheError::OutOfBlocks { .. }) => {
                            prop_assert_eq!(pool.stats(), before);
                        }
                        Err(e) => prop_assert!(false, "{}", e),
                    }
                    prop_assert_eq!(cache.len(), held.len());
                }
                PagedOp::Truncate { seq, len } if !seqs.is_empty() => {
                    let i = seq % seqs.len();
                    seqs[i].0.truncate(len);
                    seqs[i].1.truncate(len);
                }
                PagedOp::Fork(seq) if !seqs.is_empty() => {
                    let i = seq % seqs.len();
                    let fork = (seqs[i].0.fork(), seqs[i].1.clone());
                    prop_assert_eq!(pool.stats().used, before.used);
                    seqs.push(fork);
                }
                PagedOp::Free(seq) if !seqs.is_empty() => {
                    let i = seq % seqs.len();
                    seqs.remove(i);
                }
                PagedOp::Publish(seq) if !seqs.is_empty() => {
                    let i = seq % seqs.len();
                    pool.publish(&seqs[i].0, &seqs[i].1);
                }
                _ => {}
            }
            check_paged(&pool, &mut seqs)?;
        }
        seqs.clear();
        prop_assert_eq!(pool.stats().used, 0);
    }
}

#[derive(Debug, Clone)]
enum RingOp {
    /// A pass of this many tokens (at most the cache's `max_pass`).
    Pass(usize, u64),
    /// A rollback by this many tokens.
    Back(usize),
}

fn ring_op() -> impl Strategy<Value = RingOp> {
    prop_oneof![
        4 => (1usize..=WINDOW_SLACK + 1, any::<u64>()).prop_map(|(t, s)| RingOp::Pass(t, s)),
        1 => (0usize..WINDOW_SLACK + 40).prop_map(RingOp::Back),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A cache whose layer 0 keeps a ring of its window (5 positions plus the slack) and layer
    /// 1 the whole capacity: the ring holds every position a query sees, passes longer than
    /// `max_pass` are refused, and a rollback past the slack empties the cache.
    #[test]
    fn ring_layers_hold_every_window(ops in prop::collection::vec(ring_op(), 1..12)) {
        let device = Device::flex();
        let window = 5;
        let capacity = 3 * WINDOW_SLACK;
        let mut cache = KvCache::with_windows(config(capacity), KvType::F32, &[Some(window)], &device);
        prop_assert_eq!(cache.layer_slots(), vec![window + WINDOW_SLACK, capacity]);
        prop_assert_eq!(cache.max_pass(), WINDOW_SLACK + 1);
        prop_assert!(cache.prepare(WINDOW_SLACK + 2).is_err());
        let mut model = Model::default();
        // The furthest position written since the cache was empty.
        let mut high = 0;
        for op in ops {
            match op {
                RingOp::Pass(t, seed) => {
                    let t = t.min(cache.remaining());
                    if t == 0 {
                        continue;
                    }
                    cache.prepare(t).unwrap();
                    for (l, layer) in tokens(seed, t).iter().enumerate() {
                        let ks: Vec<Tok> = layer.iter().map(|(k, _)| k.clone()).collect();
                        let vs: Vec<Tok> = layer.iter().map(|(_, v)| v.clone()).collect();
                        let (k, v) = cache
                            .update(l, to_tensor(&ks, &device), to_tensor(&vs, &device))
                            .unwrap();
                        model.keys[l].extend(ks);
                        model.values[l].extend(vs);
                        // Layer 0 returns what its ring holds: at least the first new
                        // query's window, in position order.
                        let end = model.keys[l].len();
                        let furthest = high.max(end);
                        let from = if l == 0 { furthest.saturating_sub(window + WINDOW_SLACK) } else { 0 };
                        check_tokens(&from_tensor(k), &model.keys[l][from..], Tol::Abs(0.0), "ring keys")?;
                        check_tokens(&from_tensor(v), &model.values[l][from..], Tol::Abs(0.0), "ring values")?;
                    }
                    cache.advance(t).unwrap();
                    high = high.max(cache.len());
                }
                RingOp::Back(n) => {
                    let len = cache.len().saturating_sub(n);
                    cache.truncate(len);
                    if len + WINDOW_SLACK >= high {
                        prop_assert_eq!(cache.len(), len);
                        model.truncate(len);
                    } else {
                        prop_assert_eq!(cache.len(), 0, "a rollback past the slack empties");
                        model.truncate(0);
                        high = 0;
                    }
                }
            }
            // The host view reads the window behind the next position from the ring.
            let len = cache.len();
            let view = cache.host_layer(0).unwrap().unwrap();
            let first = len.saturating_sub(window - 1);
            for head in 0..HEADS {
                let mut scratch = Vec::new();
                let got: Vec<f32> = view.key_runs(head, first, len - first, &mut scratch).concat();
                let want: Vec<f32> = model.keys[0][first..len]
                    .iter()
                    .flat_map(|k| k[head * DIM..(head + 1) * DIM].to_vec())
                    .collect();
                prop_assert_eq!(got, want, "window of head {} at {}", head, len);
            }
        }
    }
}
