//! The host path of a forward pass: a few tokens through a model whose weights are all
//! [quantized](crate::linear::LinearWeight::Quantized), on a CPU device.
//!
//! The Burn path moves the activations to the host and back around every quantized product
//! (`into_data`/`from_data`) and runs norms, RoPE, attention and SwiGLU as dozens of small
//! Burn ops, each allocating its output; for a decode step, where the products themselves
//! take ~10-100 µs, that glue was ~16% of the time on one thread (see ARCHITECTURE.md). Here
//! the hidden state stays a `Vec<f32>` for the whole pass: RMSNorm, RoPE, grouped-query
//! attention and SwiGLU are plain loops over reused buffers, the products are
//! [`QuantMatrix::matmul`] calls on them, and the KV cache is read and written in place
//! through [`KvStore::host_layer`](kindle_kv_cache::KvStore::host_layer). The arithmetic is the Burn path's, so both give the same
//! logits up to float rounding (`tests/host_path.rs`).

use super::{BatchSequence, Llama, LogitsFor};
use crate::error::ModelError;
use crate::linear::{LinearWeight, QLinear};
use kindle_kernels::{ActivationFormat, QuantMatrix};

/// Most rows of one sequence that [`Llama::forward_batch_host`] runs through at once.
pub(crate) const HOST_UBATCH: usize = 128;

/// The quantized matrix of a layer [`HostWeights::new`] checked to be quantized.
fn matrix(layer: &QLinear) -> &QuantMatrix {
    match layer.weight() {
        LinearWeight::Quantized(q) => q,
        LinearWeight::Dense(_) => unreachable!("HostWeights exist only for quantized models"),
    }
}

/// `out[r] = x[r] W^T` for the `m` rows of `x`, into a buffer resized to fit. A prefill
/// (`m >= DENSE_PREFILL_ROWS`) keeps `f32` activations whatever the format, as the Burn
/// path does (8-bit ones there moved logprobs past the reference tolerance).
fn product(layer: &QLinear, x: &[f32], m: usize, out: &mut Vec<f32>) {
    let q = matrix(layer);
    out.resize(m * q.rows(), 0.0);
    if m >= crate::linear::DENSE_PREFILL_ROWS {
        q.matmul_with(x, m, out, ActivationFormat::F32);
    } else {
        q.matmul(x, m, out);
    }
}

/// `x / sqrt(mean(x^2) + eps) * gamma` for each `gamma.len()`-wide row of `x`, into `out`.
fn rms_norm(x: &[f32], gamma: &[f32], eps: f64, out: &mut Vec<f32>) {
    let d = gamma.len();
    out.resize(x.len(), 0.0);
    for (row, out) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean_square = dot(row, row) / d as f32;
        let inv_rms = 1.0 / (mean_square + eps as f32).sqrt();
        for ((o, &v), &g) in out.iter_mut().zip(row).zip(gamma) {
            *o = v * inv_rms * g;
        }
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

/// Rotate adjacent pairs `(2i, 2i+1)` of every `2 * cos.len()`-wide head in `row` (one token)
/// by the token's angles.
fn rope(row: &mut [f32], cos: &[f32], sin: &[f32]) {
    for head in row.chunks_exact_mut(2 * cos.len()) {
        for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
            let (x0, x1) = (pair[0], pair[1]);
            pair[0] = x0 * c - x1 * s;
            pair[1] = x0 * s + x1 * c;
        }
    }
}

/// Buffers reused by every layer of one pass.
#[derive(Default)]
struct Scratch {
    normed: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl Llama {
    /// Whether a pass of `rows` new tokens over `batch` takes the host path: every weight
    /// quantized, every cache in host memory, and either fewer rows than a prefill that the
    /// Burn path runs as one dense matmul per weight ([`crate::linear::DENSE_PREFILL_ROWS`])
    /// or a prefill the batched kernels run faster than that
    /// ([`QuantMatrix::prefers_batched_kernel`]): then the host's causal attention also
    /// replaces Burn's single-threaded naive one.
    pub(super) fn host_path_applies(&self, batch: &[BatchSequence<'_>], rows: usize) -> bool {
        self.host.is_some()
            && (rows < crate::linear::DENSE_PREFILL_ROWS
                || self
                    .layers
                    .iter()
                    .all(|b| matrix(&b.w_up).prefers_batched_kernel()))
            && batch.iter().all(|seq| seq.cache.host_resident())
    }

    /// The forward pass on the host (see the module docs). `spans` are the sequences'
    /// `(first row, tokens)` in `ids`, and `positions` each row's position; the caches have
    /// been [prepared](kindle_kv_cache::KvStore::prepare) and are advanced here.
    ///
    /// A long prompt of one sequence runs in slices of [`HOST_UBATCH`] rows (llama.cpp's
    /// micro-batches), each attending to the cache the slices before it wrote: the same
    /// arithmetic row by row (the kernels give a row the same bits in any batch), with
    /// scratch buffers a quarter the size for a 512-token prompt (about 10 MB less resident).
    pub(super) fn forward_batch_host(
        &self,
        batch: &mut [BatchSequence<'_>],
        spans: &[(usize, usize)],
        positions: &[usize],
        ids: &[u32],
        which: LogitsFor,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        if batch.len() != 1 || ids.len() <= HOST_UBATCH {
            return self.forward_host_slice(batch, spans, positions, ids, which);
        }
        let mut logits = Vec::new();
        for (ids, positions) in ids.chunks(HOST_UBATCH).zip(positions.chunks(HOST_UBATCH)) {
            let mut out =
                self.forward_host_slice(batch, &[(0, ids.len())], positions, ids, which)?;
            match which {
                LogitsFor::All => logits.append(&mut out[0]),
                LogitsFor::Last => logits = std::mem::take(&mut out[0]),
            }
        }
        Ok(vec![logits])
    }

    /// [`Llama::forward_batch_host`] in one slice.
    fn forward_host_slice(
        &self,
        batch: &mut [BatchSequence<'_>],
        spans: &[(usize, usize)],
        positions: &[usize],
        ids: &[u32],
        which: LogitsFor,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let host = self
            .host
            .as_ref()
            .expect("host_path_applies checked the weights");
        let config = self.config();
        let (d, eps) = (config.d_model, config.rms_eps);
        let (h, hkv, hd) = (config.n_heads, config.n_kv_heads, config.head_dim());
        let rows = ids.len();

        let embedding = matrix(&self.embedding);
        let mut x = vec![0f32; rows * d];
        for (row, &id) in x.chunks_exact_mut(d).zip(ids) {
            embedding.dequantize_row(id as usize, row);
        }
        let (cos, sin) = rope_tables(positions, hd, config.rope_theta);
        let half = hd / 2;

        let mut s = Scratch::default();
        for (index, (block, [attn_norm, ffn_norm])) in
            self.layers.iter().zip(&host.norms).enumerate()
        {
            rms_norm(&x, attn_norm, eps, &mut s.normed);
            product(&block.wq, &s.normed, rows, &mut s.q);
            product(&block.wk, &s.normed, rows, &mut s.k);
            product(&block.wv, &s.normed, rows, &mut s.v);
            for r in 0..rows {
                let (c, sn) = (&cos[r * half..][..half], &sin[r * half..][..half]);
                rope(&mut s.q[r * h * hd..][..h * hd], c, sn);
                rope(&mut s.k[r * hkv * hd..][..hkv * hd], c, sn);
            }
            s.context.resize(rows * h * hd, 0.0);
            for (seq, &(start, len)) in batch.iter_mut().zip(spans) {
                let mut view = seq
                    .cache
                    .host_layer(index)?
                    .ok_or(ModelError::HostCache { layer: index })?;
                for i in 0..len {
                    let kv = (start + i) * hkv * hd..(start + i + 1) * hkv * hd;
                    view.write(i, &s.k[kv.clone()], &s.v[kv])?;
                }
                let held = view.len();
                attend(
                    &view,
                    &s.q[start * h * hd..(start + len) * h * hd],
                    &mut s.context[start * h * hd..(start + len) * h * hd],
                    held,
                    h,
                    (&mut s.scores, &mut s.keys, &mut s.values),
                );
            }
            product(&block.wo, &s.context, rows, &mut s.projected);
            add(&mut x, &s.projected);

            rms_norm(&x, ffn_norm, eps, &mut s.normed);
            product(&block.w_gate, &s.normed, rows, &mut s.gate);
            product(&block.w_up, &s.normed, rows, &mut s.up);
            for (g, &u) in s.gate.iter_mut().zip(&s.up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            product(&block.w_down, &s.gate, rows, &mut s.projected);
            add(&mut x, &s.projected);
        }
        for (seq, &(_, len)) in batch.iter_mut().zip(spans) {
            seq.cache.advance(len)?;
        }

        // The rows whose logits are returned: each sequence's last, or all.
        let out_rows: Vec<usize> = match which {
            LogitsFor::All => (0..rows).collect(),
            LogitsFor::Last => spans.iter().map(|&(start, len)| start + len - 1).collect(),
        };
        let mut last = Vec::with_capacity(out_rows.len() * d);
        for &r in &out_rows {
            last.extend_from_slice(&x[r * d..(r + 1) * d]);
        }
        rms_norm(&last, &host.output_norm, eps, &mut s.normed);
        let head = self.output.as_ref().unwrap_or(&self.embedding);
        let vocab = config.vocab_size;
        let mut logits = Vec::new();
        product(head, &s.normed, out_rows.len(), &mut logits);
        if batch.len() == 1 {
            return Ok(vec![logits]);
        }
        let mut chunks = logits.chunks_exact(vocab);
        Ok(spans
            .iter()
            .map(|&(_, len)| {
                let n = match which {
                    LogitsFor::Last => 1,
                    LogitsFor::All => len,
                };
                chunks.by_ref().take(n).flatten().copied().collect()
            })
            .collect())
    }
}

/// `x += y`.
fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `(cos, sin)` of `pos * theta^(-2i/head_dim)` for each row's position and each pair `i`,
/// `[rows, head_dim / 2]`, computed in f64 as the Burn path's table is.
fn rope_tables(positions: &[usize], head_dim: usize, theta: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64))
        .collect();
    let mut cos = Vec::with_capacity(positions.len() * half);
    let mut sin = Vec::with_capacity(positions.len() * half);
    for &pos in positions {
        for &freq in &inv_freq {
            let angle = pos as f64 * freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// The caller's scratch buffers for [`attend`]: scores, decoded keys, decoded values.
type AttendScratch<'s> = (&'s mut Vec<f32>, &'s mut Vec<f32>, &'s mut Vec<f32>);

/// Causal grouped-query attention of one sequence's new rows `q` (`[T, h * hd]`, already
/// written to `view` at positions `held..held + T`) over the cache, into `context`
/// (`[T, h * hd]`). Query head `head` reads KV head `head / (h / hkv)`; row `i` sees positions
/// `0..=held + i`.
fn attend(
    view: &kindle_kv_cache::HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    h: usize,
    scratch: AttendScratch<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { attend_avx2(view, q, context, held, h, scratch) };
    }
    attend_body(view, q, context, held, h, scratch)
}

/// [`attend`] compiled for AVX2 and FMA: the loops of [`attend_body`] (inlined) vectorize
/// twice as wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(
    view: &kindle_kv_cache::HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    h: usize,
    scratch: AttendScratch<'_>,
) {
    attend_body(view, q, context, held, h, scratch)
}

#[inline(always)]
fn attend_body(
    view: &kindle_kv_cache::HostKvLayer<'_>,
    q: &[f32],
    context: &mut [f32],
    held: usize,
    h: usize,
    (scores, key_scratch, value_scratch): AttendScratch<'_>,
) {
    let (hkv, hd) = (view.n_kv_heads(), view.head_dim());
    let rep = h / hkv;
    let t = q.len() / (h * hd);
    let total = held + t;
    let scale = 1.0 / (hd as f32).sqrt();
    for g in 0..hkv {
        let keys = view.keys(g, total, key_scratch);
        let values = view.values(g, total, value_scratch);
        for head in g * rep..(g + 1) * rep {
            for i in 0..t {
                let seen = held + i + 1;
                let qv = &q[(i * h + head) * hd..][..hd];
                scores.clear();
                scores.extend(
                    keys[..seen * hd]
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
