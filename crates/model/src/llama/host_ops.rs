//! The host executor of the recipe: a few tokens through a model whose weights are all
//! [quantized](crate::linear::LinearWeight::Quantized), on a CPU device.
//!
//! The Burn executor moves the activations to the host and back around every quantized
//! product (`into_data`/`from_data`) and runs norms, RoPE, attention and SwiGLU as dozens of
//! small Burn ops, each allocating its output; for a decode step, where the products
//! themselves take ~10-100 µs, that glue was ~16% of the time on one thread (see
//! ARCHITECTURE.md). Here the activations are `Vec<f32>` buffers reused by every layer of the
//! pass: RMSNorm, RoPE, grouped-query attention and SwiGLU are plain loops, the products are
//! [`QuantMatrix::matmul`] calls on them, and the KV cache is read and written in place
//! through [`KvStore::host_layer`](kindle_kv_cache::KvStore::host_layer). The order of
//! operations is the recipe's, the same as the Burn executor's, so both give the same logits
//! up to float rounding (`tests/host_path.rs`).

use kindle_kernels::{Kernels, QuantMatrix};
use kindle_kv_cache::HostKvLayer;

use super::activation::activate;
use super::recipe::{self, Attention, BatchSequence, LayerOps, LogitsFor, Model, Pass};
use super::{Block, FfnActivation, Norm, RopeTable};
use crate::error::ModelError;
use crate::linear::{DENSE_PREFILL_ROWS, LinearWeight, QLinear};

/// Most rows of one sequence that [`forward_batch_host`] runs through at once.
pub(super) const HOST_UBATCH: usize = 128;

/// Whether the host executor can run a model of these weights: every matrix (and the
/// embeddings, `extra`: the output head and learned positions when there are) quantized,
/// every norm scale and bias with a host copy (a CPU device).
pub(super) fn host_ready(
    embedding: &QLinear,
    layers: &[Block],
    norm: &Norm,
    extra: [Option<&QLinear>; 2],
) -> bool {
    let linear_ok =
        |l: &QLinear| matches!(l.weight(), LinearWeight::Quantized(_)) && l.bias_on_host_if_any();
    linear_ok(embedding)
        && extra.into_iter().flatten().all(linear_ok)
        && norm.on_host()
        && layers
            .iter()
            .all(|b| b.linears().all(linear_ok) && b.norms().all(Norm::on_host))
}

/// The quantized matrix of a layer [`host_ready`] checked.
/// `layer`'s bias, if it has one, added to every row of `out`.
fn add_bias(layer: &QLinear, out: &mut [f32]) {
    if let Some(bias) = layer.host_bias() {
        for row in out.chunks_exact_mut(bias.len()) {
            add(row, bias);
        }
    }
}

fn matrix(layer: &QLinear) -> &QuantMatrix {
    match layer.weight() {
        LinearWeight::Quantized(q) => q,
        LinearWeight::Dense(_) => unreachable!("the host path runs only quantized models"),
    }
}

/// Runs the recipe on host buffers; the products are the quantized kernels'.
pub(super) struct HostOps<'m> {
    kernels: &'m Kernels,
}

impl<'m> HostOps<'m> {
    fn new(kernels: &'m Kernels) -> Self {
        HostOps { kernels }
    }
}

impl LayerOps for HostOps<'_> {
    type Act = Vec<f32>;
    type Rope = RopeTable;

    fn embed(&mut self, table: &QLinear, ids: &[u32]) -> Vec<f32> {
        let table = matrix(table);
        let d = table.cols();
        let mut x = vec![0f32; ids.len() * d];
        for (row, &id) in x.chunks_exact_mut(d).zip(ids) {
            table.dequantize_row(id as usize, row);
        }
        x
    }

    fn scale(&mut self, x: &mut Vec<f32>, factor: f32) {
        x.iter_mut().for_each(|v| *v *= factor);
    }

    fn rope_table(&mut self, table: RopeTable) -> RopeTable {
        table
    }

    /// `x / sqrt(mean(x^2) + eps) * gamma` for each `gamma.len()`-wide group of `x`, or for a
    /// LayerNorm `(x - mean) / sqrt(var + eps) * gamma + beta`.
    fn norm(&mut self, x: &Vec<f32>, norm: &Norm, out: &mut Vec<f32>) {
        let gamma = norm
            .host_gamma()
            .expect("host_ready checked the norms' host copies");
        let (d, eps) = (gamma.len(), norm.eps as f32);
        out.resize(x.len(), 0.0);
        for (row, out) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            if norm.centered {
                let mean = row.iter().sum::<f32>() / d as f32;
                out.iter_mut().zip(row).for_each(|(o, &v)| *o = v - mean);
                let inv_std = 1.0 / (dot(out, out) / d as f32 + eps).sqrt();
                out.iter_mut()
                    .zip(gamma)
                    .for_each(|(o, &g)| *o = *o * inv_std * g);
            } else {
                let mean_square = dot(row, row) / d as f32;
                let inv_rms = 1.0 / (mean_square + eps).sqrt();
                for ((o, &v), &g) in out.iter_mut().zip(row).zip(gamma) {
                    *o = v * inv_rms * g;
                }
            }
            if let Some(beta) = norm.host_beta() {
                add(out, beta);
            }
        }
    }

    /// In the kernels' activation format, prefill included: with `--activations int8` a
    /// prefill runs llama.cpp's scheme too (measured 1.9x the `f32` prefill), and a
    /// row's result has the same bits in a prefill as in a decode step.
    fn linear(&mut self, layer: &QLinear, x: &Vec<f32>, out: &mut Vec<f32>) {
        let q = matrix(layer);
        let m = x.len() / q.cols();
        out.resize(m * q.rows(), 0.0);
        q.matmul(x, m, out, self.kernels);
        add_bias(layer, out);
    }

    /// The products as one job of the kernels' pool (the threads meet once for all), each
    /// with [`linear`](LayerOps::linear)'s bits.
    fn linear_many(&mut self, layers: &[&QLinear], x: &Vec<f32>, outs: &mut [&mut Vec<f32>]) {
        let Some(first) = layers.first() else {
            return;
        };
        let m = x.len() / matrix(first).cols();
        let mut products: Vec<(&QuantMatrix, &mut [f32])> = layers
            .iter()
            .zip(outs.iter_mut())
            .map(|(layer, out)| {
                let q = matrix(layer);
                out.resize(m * q.rows(), 0.0);
                (q, &mut out[..])
            })
            .collect();
        QuantMatrix::matmul_many(&mut products, x, m, self.kernels);
        for (layer, out) in layers.iter().zip(outs.iter_mut()) {
            add_bias(layer, out);
        }
    }

    fn rope(&mut self, x: &mut Vec<f32>, rope: &RopeTable) {
        let width = x.len() / rope.rows().max(1);
        for (r, row) in x.chunks_exact_mut(width).enumerate() {
            rope.rotate(r, row);
        }
    }

    fn attend_with_cache(
        &mut self,
        pass: &mut Pass<'_, '_>,
        layer: usize,
        attention: Attention,
        [q, k, v]: [&Vec<f32>; 3],
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let shape = attention.shape;
        let (qw, kvw) = (shape.q_width(), shape.kv_width());
        out.resize(pass.ids.len() * qw, 0.0);
        // Every sequence's new keys and values written first, then one parallel job over
        // (sequence, query head, block of rows), so that attention obeys the thread count as
        // the products do. Each output row of each head is computed by one task with the same
        // arithmetic whatever the split: the logits do not depend on the thread count.
        let mut views = Vec::with_capacity(pass.seqs.len());
        for (seq, &(start, len)) in pass.seqs.iter_mut().zip(pass.spans) {
            let mut view = seq
                .cache
                .host_layer(layer)?
                .ok_or(ModelError::HostCache { layer })?;
            for i in 0..len {
                let row = (start + i) * kvw..(start + i + 1) * kvw;
                view.write(i, &k[row.clone()], &v[row])?;
            }
            views.push((view, start, len));
        }
        let jobs: Vec<AttendJob<'_, '_>> = views
            .iter()
            .map(|(view, start, len)| AttendJob {
                view,
                q: &q[start * qw..(start + len) * qw],
                out_row: *start,
                rows: *len,
            })
            .collect();
        attend_all(&jobs, out, qw, attention, self.kernels);
        Ok(())
    }

    fn gated(&mut self, activation: FfnActivation, gate: &mut Vec<f32>, up: &Vec<f32>) {
        assert_eq!(gate.len(), up.len(), "gate and up widths");
        elementwise(self.kernels, gate, &|chunk, at| {
            activate(activation, chunk);
            for (g, &u) in chunk.iter_mut().zip(&up[at..]) {
                *g *= u;
            }
        });
    }

    fn activate(&mut self, activation: FfnActivation, x: &mut Vec<f32>) {
        elementwise(self.kernels, x, &|chunk, _| activate(activation, chunk));
    }

    fn add(&mut self, x: &mut Vec<f32>, y: &Vec<f32>) {
        add(x, y);
    }

    fn select_rows(&mut self, x: Vec<f32>, rows: &[usize], width: usize) -> Vec<f32> {
        let mut picked = Vec::with_capacity(rows.len() * width);
        for &r in rows {
            picked.extend_from_slice(&x[r * width..(r + 1) * width]);
        }
        picked
    }
}

/// Whether a pass of `rows` new tokens over `batch` takes the host path: every weight
/// quantized, every cache in host memory, and either fewer rows than a prefill that the
/// Burn path runs as one dense matmul per weight ([`DENSE_PREFILL_ROWS`]) or a prefill the
/// batched kernels run faster than that ([`QuantMatrix::prefers_batched_kernel`]): then
/// the host's causal attention also replaces Burn's single-threaded naive one.
pub(super) fn host_path_applies(
    host_ready: bool,
    model: &Model<'_>,
    batch: &[BatchSequence<'_>],
    rows: usize,
) -> bool {
    host_ready
        && (rows < DENSE_PREFILL_ROWS
            || model
                .layers
                .iter()
                .all(|b| matrix(&b.w_up).prefers_batched_kernel()))
        && batch.iter().all(|seq| seq.cache.host_resident())
}

/// The forward pass on the host: the recipe with [`HostOps`]. The caches have been
/// [prepared](kindle_kv_cache::KvStore::prepare) and are advanced here.
///
/// A long prompt of one sequence runs in slices of [`HOST_UBATCH`] rows (llama.cpp's
/// micro-batches), each attending to the cache the slices before it wrote: the same
/// arithmetic row by row (the kernels give a row the same bits in any batch), with
/// buffers a quarter the size for a 512-token prompt (about 10 MB less resident).
pub(super) fn forward_batch_host(
    model: &Model<'_>,
    kernels: &Kernels,
    pass: &mut Pass<'_, '_>,
) -> Result<Vec<Vec<f32>>, ModelError> {
    if pass.seqs.len() != 1 || pass.ids.len() <= HOST_UBATCH {
        return forward_host_slice(model, kernels, pass);
    }
    let mut logits = Vec::new();
    let slices = pass
        .ids
        .chunks(HOST_UBATCH)
        .zip(pass.positions.chunks(HOST_UBATCH));
    for (ids, positions) in slices {
        let spans = [(0, ids.len())];
        let mut slice = Pass {
            seqs: &mut *pass.seqs,
            spans: &spans,
            positions,
            ids,
            which: pass.which,
        };
        let mut out = forward_host_slice(model, kernels, &mut slice)?;
        match pass.which {
            LogitsFor::All => logits.append(&mut out[0]),
            LogitsFor::Last => logits = std::mem::take(&mut out[0]),
        }
    }
    Ok(vec![logits])
}

/// [`forward_batch_host`] in one slice: each sequence's logits.
fn forward_host_slice(
    model: &Model<'_>,
    kernels: &Kernels,
    pass: &mut Pass<'_, '_>,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let logits = recipe::forward(model, &mut HostOps::new(kernels), pass)?;
    if pass.seqs.len() == 1 {
        return Ok(vec![logits]);
    }
    let mut chunks = logits.chunks_exact(model.config.vocab_size);
    Ok(pass
        .spans
        .iter()
        .map(|&(_, len)| {
            let n = match pass.which {
                LogitsFor::Last => 1,
                LogitsFor::All => len,
            };
            chunks.by_ref().take(n).flatten().copied().collect()
        })
        .collect())
}

/// Values per task of [`elementwise`]: a few microseconds of `exp` or `tanh`.
const ELEMENTWISE_CHUNK: usize = 8192;

/// `f(chunk, offset)` over `x` in chunks on the kernels' threads (a prefill's activations are
/// millions of `exp`/`tanh`); each value is computed alone, so the bits do not depend on the
/// split.
fn elementwise(kernels: &Kernels, x: &mut [f32], f: &(dyn Fn(&mut [f32], usize) + Sync)) {
    let n = x.len();
    let tasks = n.div_ceil(ELEMENTWISE_CHUNK);
    if tasks <= 1 {
        f(x, 0);
        return;
    }
    let ptr = SyncPtr(x.as_mut_ptr());
    kernels.parallel_for(tasks, &|task| {
        let at = task * ELEMENTWISE_CHUNK;
        let len = ELEMENTWISE_CHUNK.min(n - at);
        // SAFETY: tasks cover disjoint chunks of `x`, which outlives the call.
        let chunk = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(at), len) };
        f(chunk, at);
    });
}

/// `x += y`.
fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `a . b`, with eight partial sums so that it vectorizes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// One sequence's part of a pass's attention: its cache view (the pass's keys and values
/// already written) and its new rows' queries.
struct AttendJob<'v, 'c> {
    view: &'v HostKvLayer<'c>,
    /// `[rows, h * hd]` queries.
    q: &'v [f32],
    /// The pass row of this sequence's first new token (where its output rows start).
    out_row: usize,
    /// New tokens of this sequence.
    rows: usize,
}

/// Rows of one sequence, of one head, that one attention task computes.
const ATTEND_ROWS: usize = 16;

/// Causal grouped-query attention of every job's new rows into `out` (`[pass rows, q_width]`),
/// split over `kernels`' threads by (sequence, query head, block of [`ATTEND_ROWS`] rows),
/// the longest blocks (the last rows, which see the most positions) handed out first.
fn attend_all(
    jobs: &[AttendJob<'_, '_>],
    out: &mut [f32],
    q_width: usize,
    attention: Attention,
    kernels: &Kernels,
) {
    let heads = attention.shape.heads;
    if let [job] = jobs
        && job.rows == 1
        && job.view.len() + 1 - attention.first_seen(job.view.len()) >= SPLIT_ROW_FROM
    {
        let at = job.out_row * q_width;
        return attend_long_row(job, &mut out[at..at + q_width], attention, kernels);
    }
    // (job, head, first row, rows) for every task, in the order they are handed out.
    let mut tasks: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let blocks = job.rows.div_ceil(ATTEND_ROWS);
        for b in (0..blocks).rev() {
            let first = b * ATTEND_ROWS;
            let n = ATTEND_ROWS.min(job.rows - first);
            tasks.extend((0..heads).map(|head| (j, head, first, n)));
        }
    }
    // Longest first: a task's cost grows with the positions its rows see.
    tasks.sort_by_key(|&(j, _, first, n)| std::cmp::Reverse(jobs[j].view.len() + first + n));
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let run = |task: usize| {
        let (j, head, first, n) = tasks[task];
        let job = &jobs[j];
        let hd = job.view.head_dim();
        // SAFETY: each (row, head) slot of `out` is written by exactly one task, and `out`
        // outlives the job.
        let mut contexts: Vec<&mut [f32]> = (first..first + n)
            .map(|i| unsafe {
                std::slice::from_raw_parts_mut(
                    out_ptr.get().add((job.out_row + i) * q_width + head * hd),
                    hd,
                )
            })
            .collect();
        SCRATCH.with_borrow_mut(|scratch| {
            attend(job, head, first, &mut contexts, attention, scratch);
        });
    };
    kernels.parallel_for(tasks.len(), &run);
}

/// Positions from which the attention of a pass's only row (a decode step) is split over
/// positions and columns instead of query heads: a long context read once per KV head, by
/// every thread.
const SPLIT_ROW_FROM: usize = 256;

/// Positions of one score task of [`attend_long_row`].
const POSITION_BLOCK: usize = 256;

/// Columns of one weighted-sum task ([`weighted_sum_cols`]'s width).
const LANES: usize = 16;

/// One row's attention over a long context, in three parallel stages with the arithmetic of
/// [`attend_body`] for every output (the same bits whatever the split or thread count):
/// scores by (KV head, block of positions), decoding an f16/int8 cache's values on the way;
/// the softmax by query head; the weighted sum by (KV head, 16 columns). Every key and value
/// is read once per KV head, not once per query head.
fn attend_long_row(
    job: &AttendJob<'_, '_>,
    out: &mut [f32],
    attention: Attention,
    kernels: &Kernels,
) {
    let view = job.view;
    let (h, hkv, hd) = (attention.shape.heads, view.n_kv_heads(), view.head_dim());
    let held = view.len();
    let first = attention.first_seen(held);
    let n = held + 1 - first;
    LONG_ROW.with_borrow_mut(|LongRowScratch { scores, values }| {
        scores.resize(h * n, 0.0);
        let borrowed = view.stores_f32();
        if !borrowed {
            values.resize(hkv * n * hd, 0.0);
        }
        let row = LongRow {
            view,
            q: &job.q[..h * hd],
            first,
            n,
            scale: attention.scale,
            rep: h / hkv,
            borrowed,
            scores: SyncPtr(scores.as_mut_ptr()),
            values: SyncPtr(values.as_mut_ptr()),
            out: SyncPtr(out.as_mut_ptr()),
        };
        let blocks = n.div_ceil(POSITION_BLOCK);
        kernels.parallel_for(hkv * blocks, &|task| row.run(Stage::Scores, task));
        kernels.parallel_for(h, &|task| row.run(Stage::Softmax, task));
        kernels.parallel_for(hkv * hd.div_ceil(LANES), &|task| row.run(Stage::Sum, task));
    });
}

/// The stages of [`attend_long_row`].
#[derive(Clone, Copy)]
enum Stage {
    Scores,
    Softmax,
    Sum,
}

/// What the tasks of [`attend_long_row`] share.
struct LongRow<'v, 'c> {
    view: &'v HostKvLayer<'c>,
    /// `[h * hd]` queries.
    q: &'v [f32],
    /// First position seen, and how many.
    first: usize,
    n: usize,
    scale: f32,
    /// Query heads per KV head.
    rep: usize,
    /// Whether the cache's values are read in place (f32), else decoded into `values`.
    borrowed: bool,
    /// `[h, n]` scores, then probabilities.
    scores: SyncPtr,
    /// `[hkv, n, hd]` decoded values (unused when `borrowed`).
    values: SyncPtr,
    /// `[h * hd]` context.
    out: SyncPtr,
}

impl LongRow<'_, '_> {
    fn run(&self, stage: Stage, task: usize) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { self.run_avx2(stage, task) };
        }
        self.run_body(stage, task)
    }

    /// [`Self::run_body`] compiled for AVX2 and FMA (the same arithmetic: Rust does not fuse
    /// multiplies and adds).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn run_avx2(&self, stage: Stage, task: usize) {
        self.run_body(stage, task)
    }

    #[inline(always)]
    fn run_body(&self, stage: Stage, task: usize) {
        let (view, n) = (self.view, self.n);
        let hd = view.head_dim();
        match stage {
            Stage::Scores => {
                let blocks = n.div_ceil(POSITION_BLOCK);
                let (g, b) = (task / blocks, task % blocks);
                let start = b * POSITION_BLOCK;
                let len = POSITION_BLOCK.min(n - start);
                SCRATCH.with_borrow_mut(|scratch| {
                    let keys = view.key_runs(g, self.first + start, len, &mut scratch.keys);
                    for head in g * self.rep..(g + 1) * self.rep {
                        let qv = &self.q[head * hd..(head + 1) * hd];
                        // SAFETY: task (g, b) alone writes these scores of g's heads.
                        let scores = unsafe {
                            std::slice::from_raw_parts_mut(
                                self.scores.get().add(head * n + start),
                                len,
                            )
                        };
                        let keys = keys.iter().flat_map(|run| run.chunks_exact(hd));
                        for (s, k) in scores.iter_mut().zip(keys) {
                            *s = dot(qv, k) * self.scale;
                        }
                    }
                    if !self.borrowed {
                        let values =
                            view.values_at(g, self.first + start, len, &mut scratch.values);
                        // SAFETY: task (g, b) alone writes these decoded values.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                self.values.get().add((g * n + start) * hd),
                                len * hd,
                            )
                        };
                        dst.copy_from_slice(values);
                    }
                });
            }
            Stage::Softmax => {
                // SAFETY: task `head` alone owns this head's scores now.
                let scores =
                    unsafe { std::slice::from_raw_parts_mut(self.scores.get().add(task * n), n) };
                softmax(scores);
            }
            Stage::Sum => {
                // Each value line is read once per KV head: the query heads that share it
                // run one after another while its columns are in the cache.
                let per_group = hd.div_ceil(LANES);
                let (g, c) = (task / per_group, task % per_group);
                let col = c * LANES;
                let mut unused = Vec::new();
                let rows = if self.borrowed {
                    view.value_runs(g, self.first, n, &mut unused)
                } else {
                    // SAFETY: the decoded values are final (the score stage has returned).
                    vec![unsafe {
                        std::slice::from_raw_parts(self.values.get().add(g * n * hd), n * hd)
                    }]
                };
                for head in g * self.rep..(g + 1) * self.rep {
                    // SAFETY: the scores are final (the previous stage has returned).
                    let weights =
                        unsafe { std::slice::from_raw_parts(self.scores.get().add(head * n), n) };
                    // SAFETY: task (g, c) alone writes these columns of g's heads.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(
                            self.out.get().add(head * hd + col),
                            LANES.min(hd - col),
                        )
                    };
                    weighted_sum_cols(weights, &rows, hd, col, out);
                }
            }
        }
    }
}

/// The calling thread's buffers for [`attend_long_row`].
#[derive(Default)]
struct LongRowScratch {
    scores: Vec<f32>,
    values: Vec<f32>,
}

thread_local! {
    static LONG_ROW: std::cell::RefCell<LongRowScratch> = std::cell::RefCell::default();
}

/// A raw pointer to the attention output, written at disjoint places by the tasks.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);

impl SyncPtr {
    /// The pointer (a method, so that closures capture the whole `Sync` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}
// SAFETY: only used to write disjoint slots from the pool's threads while the owner waits.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

/// A thread's attention scratch: scores, and keys and values decoded from an f16/int8 cache.
#[derive(Default)]
struct AttendScratch {
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<AttendScratch> = std::cell::RefCell::default();
}

/// Attention of new rows `first..first + contexts.len()` of `job`, query head `head`, over the
/// cache, into `contexts` (one `head_dim`-wide slot per row). The head reads KV head
/// `head / (h / hkv)`; row `i` sees positions `0..=held + i`, or of a local layer only the
/// last `window` of them.
fn attend(
    job: &AttendJob<'_, '_>,
    head: usize,
    first: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    scratch: &mut AttendScratch,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { attend_avx2(job, head, first, contexts, attention, scratch) };
    }
    attend_body(job, head, first, contexts, attention, scratch)
}

/// [`attend`] compiled for AVX2 and FMA: the loops of [`attend_body`] (inlined) vectorize
/// twice as wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(
    job: &AttendJob<'_, '_>,
    head: usize,
    first: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    scratch: &mut AttendScratch,
) {
    attend_body(job, head, first, contexts, attention, scratch)
}

#[inline(always)]
fn attend_body(
    job: &AttendJob<'_, '_>,
    head: usize,
    first_row: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    scratch: &mut AttendScratch,
) {
    let view = job.view;
    let (h, hkv, hd) = (attention.shape.heads, view.n_kv_heads(), view.head_dim());
    let g = head / (h / hkv);
    let held = view.len();
    let AttendScratch {
        scores,
        keys,
        values,
    } = scratch;
    // Every position the rows see, decoded once for the task's rows (borrowed from an f32
    // cache: one run, or one per block of a paged pool).
    let from = attention.first_seen(held + first_row);
    let most = held + first_row + contexts.len();
    let keys = view.key_runs(g, from, most - from, keys);
    let values = view.value_runs(g, from, most - from, values);
    let mut parts = Vec::with_capacity(values.len());
    for (offset, context) in contexts.iter_mut().enumerate() {
        let i = first_row + offset;
        let seen = held + i + 1;
        let first = attention.first_seen(held + i);
        let qv = &job.q[(i * h + head) * hd..][..hd];
        scores.clear();
        span(&keys, hd, first - from, seen - from, &mut parts);
        for part in &parts {
            scores.extend(part.chunks_exact(hd).map(|k| dot(qv, k) * attention.scale));
        }
        softmax(scores);
        span(&values, hd, first - from, seen - from, &mut parts);
        weighted_sum(scores, &parts, context);
    }
}

/// The vectors `from..to` (counted from the first vector of `runs`) of runs of `width`-wide
/// vectors, as sub-slices of the runs, into `out`.
#[inline(always)]
fn span<'a>(runs: &[&'a [f32]], width: usize, from: usize, to: usize, out: &mut Vec<&'a [f32]>) {
    out.clear();
    let mut at = 0;
    for run in runs {
        let n = run.len() / width;
        let (lo, hi) = (from.max(at), to.min(at + n));
        if lo < hi {
            out.push(&run[(lo - at) * width..(hi - at) * width]);
        }
        at += n;
        if at >= to {
            break;
        }
    }
}

/// Scores into probabilities, in place: `exp(s - max)`, summed in order, times `1 / sum`.
#[inline(always)]
fn softmax(scores: &mut [f32]) {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv_sum = 1.0 / sum;
    for p in scores.iter_mut() {
        *p *= inv_sum;
    }
}

/// `out = sum_j weights[j] * rows[j]` for the `out.len()`-wide rows of `runs` (in order, over
/// the runs one after another), [`LANES`] columns at a time so that the partial sums stay in
/// registers.
#[inline(always)]
fn weighted_sum(weights: &[f32], rows: &[&[f32]], out: &mut [f32]) {
    let width = out.len();
    for (c, out) in out.chunks_mut(LANES).enumerate() {
        weighted_sum_cols(weights, rows, width, c * LANES, out);
    }
}

/// Columns `col..col + out.len()` (at most [`LANES`]) of `sum_j weights[j] * rows[j]`, the
/// rows `width` wide and given as runs of rows, one after another: each column summed over
/// `j` in order, whatever else is computed and however the rows are split into runs.
#[inline(always)]
fn weighted_sum_cols(weights: &[f32], runs: &[&[f32]], width: usize, col: usize, out: &mut [f32]) {
    let n = out.len();
    let mut acc = [0f32; LANES];
    let mut weights = weights.iter();
    for run in runs {
        // The run first: `zip` stops on it without taking a weight that belongs to the next.
        for (row, &w) in run.chunks_exact(width).zip(weights.by_ref()) {
            let row = &row[col..col + n];
            if n == LANES {
                for l in 0..LANES {
                    acc[l] += w * row[l];
                }
            } else {
                for (a, &x) in acc.iter_mut().zip(row) {
                    *a += w * x;
                }
            }
        }
    }
    out.copy_from_slice(&acc[..n]);
}
