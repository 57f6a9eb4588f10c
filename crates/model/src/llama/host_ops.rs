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

use std::ops::Range;

use kindle_kernels::{Kernels, QuantMatrix};

use super::activation::activate;
use super::attend_keys::dot;
use super::host_attend::{AttendJob, SyncPtr, attend_all};
use super::recipe::{self, Attention, BatchSequence, LayerOps, LogitsFor, Model, Pass};
use super::{Block, FfnActivation, Norm, RopeTable};
use crate::error::ModelError;
use crate::linear::{DENSE_PREFILL_ROWS, LinearWeight, QLinear};

/// Most rows of one sequence that [`forward_batch_host`] runs through at once.
pub(super) const HOST_UBATCH: usize = 512;

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

    /// Only the groups of rows holding `rows` when `x` is one row (a draft's head over part
    /// of the vocabulary), each with [`linear`](LayerOps::linear)'s bits; the other entries
    /// are zero.
    fn linear_rows(
        &mut self,
        layer: &QLinear,
        x: &Vec<f32>,
        rows: &[Range<usize>],
        out: &mut Vec<f32>,
    ) {
        let q = matrix(layer);
        if x.len() != q.cols() {
            return self.linear(layer, x, out);
        }
        out.clear();
        out.resize(q.rows(), 0.0);
        q.matmul_rows(x, rows, out, self.kernels);
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
        // With `kindle bench --profile`: the cache writes and the attention, one operation.
        let timer = kindle_kernels::profile::start();
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
        kindle_kernels::profile::record_operation(timer, "attention", pass.ids.len());
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
/// A long prompt of one sequence runs in slices of at most [`HOST_UBATCH`] rows (llama.cpp's
/// micro-batches), each attending to the cache the slices before it wrote: the same
/// arithmetic row by row (the kernels give a row the same bits in any prefill of 32 rows or
/// more), with buffers half the size for a 512-token prompt (a few MB less resident).
/// 256 rows: against 128, Gemma-3's pp512 went about 330 -> 370 tok/s at one thread (its
/// weights dequantised half as often), SmolLM2's the same. 512 rows (llama.cpp's default
/// micro-batch), against 256 on a Zen 4: Gemma-3's pp512 369-403 -> 415-425 tok/s at one
/// thread, 738-742 -> 707-787 at two (its dequantisation about 7% of a pass at 256), SmolLM2's
/// 374 -> 381-385 and the same at two; peak RSS 8-15 MB more (docs/performance.md,
/// 2026-11-30 (6)).
pub(super) fn forward_batch_host(
    model: &Model<'_>,
    kernels: &Kernels,
    pass: &mut Pass<'_, '_>,
) -> Result<Vec<Vec<f32>>, ModelError> {
    if pass.seqs.len() != 1 || pass.ids.len() <= HOST_UBATCH {
        return forward_host_slice(model, kernels, pass);
    }
    let mut logits = Vec::new();
    // Slices of equal size (within one row), never a short last one: every slice of a
    // prompt longer than one has at least `HOST_UBATCH / 2` rows, so its products run the
    // kernels' prefill product, whose bits do not depend on the slice (a row left alone would
    // take the decode kernels' arithmetic instead).
    let size = pass
        .ids
        .len()
        .div_ceil(pass.ids.len().div_ceil(HOST_UBATCH));
    let slices = pass.ids.chunks(size).zip(pass.positions.chunks(size));
    for (ids, positions) in slices {
        let spans = [(0, ids.len())];
        let mut slice = Pass {
            seqs: &mut *pass.seqs,
            spans: &spans,
            positions,
            ids,
            which: pass.which,
            head_rows: pass.head_rows,
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
    let vocab = model.config.vocab_size;
    let mut chunks = logits.chunks_exact(vocab);
    Ok(pass
        .spans
        .iter()
        .map(|&(_, len)| {
            let n = match pass.which {
                LogitsFor::Last => 1,
                LogitsFor::All => len,
            };
            chunks
                .by_ref()
                .take(n)
                .fold(Vec::with_capacity(n * vocab), |mut row, chunk| {
                    row.extend_from_slice(chunk);
                    row
                })
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
