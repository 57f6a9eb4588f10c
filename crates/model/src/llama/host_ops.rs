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

use kindle_kernels::{ActivationFormat, Kernels, QuantMatrix};
use kindle_kv_cache::HostKvLayer;

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
fn matrix(layer: &QLinear) -> &QuantMatrix {
    match layer.weight() {
        LinearWeight::Quantized(q) => q,
        LinearWeight::Dense(_) => unreachable!("the host path runs only quantized models"),
    }
}

/// Runs the recipe on host buffers; the products are the quantized kernels'.
pub(super) struct HostOps<'m> {
    kernels: &'m Kernels,
    /// Attention's scratch: scores, and keys and values decoded from an f16/int8 cache.
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl<'m> HostOps<'m> {
    fn new(kernels: &'m Kernels) -> Self {
        HostOps {
            kernels,
            scores: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
        }
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

    /// A prefill (`m >= DENSE_PREFILL_ROWS`) keeps `f32` activations whatever the kernels'
    /// format, as the Burn executor does (8-bit ones there moved logprobs past the reference
    /// tolerance).
    fn linear(&mut self, layer: &QLinear, x: &Vec<f32>, out: &mut Vec<f32>) {
        let q = matrix(layer);
        let m = x.len() / q.cols();
        out.resize(m * q.rows(), 0.0);
        if m >= DENSE_PREFILL_ROWS {
            q.matmul_with(x, m, out, ActivationFormat::F32, self.kernels);
        } else {
            q.matmul(x, m, out, self.kernels);
        }
        if let Some(bias) = layer.host_bias() {
            for row in out.chunks_exact_mut(bias.len()) {
                add(row, bias);
            }
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
        for (seq, &(start, len)) in pass.seqs.iter_mut().zip(pass.spans) {
            let mut view = seq
                .cache
                .host_layer(layer)?
                .ok_or(ModelError::HostCache { layer })?;
            for i in 0..len {
                let row = (start + i) * kvw..(start + i + 1) * kvw;
                view.write(i, &k[row.clone()], &v[row])?;
            }
            let held = view.len();
            let rows = start * qw..(start + len) * qw;
            attend(
                &view,
                &q[rows.clone()],
                &mut out[rows],
                held,
                attention,
                (&mut self.scores, &mut self.keys, &mut self.values),
            );
        }
        Ok(())
    }

    fn gated(&mut self, activation: FfnActivation, gate: &mut Vec<f32>, up: &Vec<f32>) {
        self.activate(activation, gate);
        for (g, &u) in gate.iter_mut().zip(up) {
            *g *= u;
        }
    }

    fn activate(&mut self, activation: FfnActivation, x: &mut Vec<f32>) {
        match activation {
            FfnActivation::Silu => {
                for g in x.iter_mut() {
                    *g = *g / (1.0 + (-*g).exp());
                }
            }
            FfnActivation::GeluTanh => {
                // sqrt(2 / pi), as Burn's `gelu_approximate` computes it.
                const SQRT_2_OVER_PI: f32 =
                    (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
                for g in x.iter_mut() {
                    let v = *g;
                    let inner = (v + v * v * v * 0.044715) * SQRT_2_OVER_PI;
                    *g = v * (inner.tanh() + 1.0) * 0.5;
                }
            }
        }
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

/// The caller's scratch buffers for [`attend`]: scores, decoded keys, decoded values.
type AttendScratch<'s> = (&'s mut Vec<f32>, &'s mut Vec<f32>, &'s mut Vec<f32>);

/// Causal grouped-query attention of one sequence's new rows `q` (`[T, h * hd]`, already
/// written to `view` at positions `held..held + T`) over the cache, into `context`
/// (`[T, h * hd]`). Query head `head` reads KV head `head / (h / hkv)`; row `i` sees positions
/// `0..=held + i`, or of a local layer only the last `window` of them.
fn attend(
    view: &HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    attention: Attention,
    scratch: AttendScratch<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { attend_avx2(view, q, context, held, attention, scratch) };
    }
    attend_body(view, q, context, held, attention, scratch)
}

/// [`attend`] compiled for AVX2 and FMA: the loops of [`attend_body`] (inlined) vectorize
/// twice as wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(
    view: &HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    attention: Attention,
    scratch: AttendScratch<'_>,
) {
    attend_body(view, q, context, held, attention, scratch)
}

#[inline(always)]
fn attend_body(
    view: &HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    attention: Attention,
    (scores, key_scratch, value_scratch): AttendScratch<'_>,
) {
    let (h, hkv, hd) = (attention.shape.heads, view.n_kv_heads(), view.head_dim());
    let rep = h / hkv;
    let t = q.len() / (h * hd);
    let total = held + t;
    let scale = attention.scale;
    for g in 0..hkv {
        let keys = view.keys(g, total, key_scratch);
        let values = view.values(g, total, value_scratch);
        for head in g * rep..(g + 1) * rep {
            for i in 0..t {
                let seen = held + i + 1;
                let first = attention.first_seen(held + i);
                let qv = &q[(i * h + head) * hd..][..hd];
                scores.clear();
                scores.extend(
                    keys[first * hd..seen * hd]
                        .chunks_exact(hd)
                        .map(|k| dot(qv, k) * scale),
                );
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
                let values = &values[first * hd..];
                weighted_sum(scores, values, &mut context[(i * h + head) * hd..][..hd]);
            }
        }
    }
}

/// `out = sum_j weights[j] * rows[j]` for the `out.len()`-wide rows of `rows`, 16 columns at a
/// time so that the partial sums stay in registers.
#[inline(always)]
fn weighted_sum(weights: &[f32], rows: &[f32], out: &mut [f32]) {
    const LANES: usize = 16;
    let width = out.len();
    let mut col = 0;
    while col < width {
        let n = LANES.min(width - col);
        let mut acc = [0f32; LANES];
        for (&w, row) in weights.iter().zip(rows.chunks_exact(width)) {
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
        out[col..col + n].copy_from_slice(&acc[..n]);
        col += n;
    }
}
