//! An `f16` or int8 cache's keys and values decoded to `f32` once for every task of a
//! multi-row attention (a leaf of `host_attend.rs`).
//!
//! A prompt's attention runs a task per query head and block of rows, and each task reads all
//! the positions its rows see: over an `f32` cache it borrows them, over an `f16` or int8 one
//! it decoded them into its own scratch, once per task, so every position was decoded once
//! per query head of its KV head and once per block of rows after it. Decoded once per pass
//! here instead, by the same decode (so every output keeps its bits).

use std::sync::Mutex;

use kindle_kernels::Kernels;
use kindle_kv_cache::HostKvLayer;

use super::recipe::Attention;

/// The most bytes one job's decoded keys and values take (allocated at every layer): past it
/// (a long context over many KV heads: 4096 positions of eight 128-wide heads take 32 MiB)
/// its tasks decode what they read into their own scratch as before, which holds one KV
/// head's span a thread.
const MAX_BYTES: usize = 32 << 20;

/// Each KV head's keys and values at the positions a job's rows see, decoded to `f32`.
pub(super) struct Decoded {
    /// The first position decoded (the first the job's first row sees).
    base: usize,
    head_dim: usize,
    /// `[n_kv_heads]` runs of keys, then of values, each `[positions, head_dim]`.
    runs: Vec<Vec<f32>>,
}

impl Decoded {
    /// For a job of `rows` new rows over `view` (their keys and values written), on
    /// `kernels`' threads: `None` for an `f32` cache (whose runs are borrowed), a single row
    /// (a decode step reads an `f16` or int8 cache in place), or more than [`MAX_BYTES`].
    pub(super) fn of(
        view: &HostKvLayer<'_>,
        rows: usize,
        attention: Attention,
        kernels: &Kernels,
    ) -> Option<Decoded> {
        if rows < 2 || !(view.stores_f16() || view.stores_int8()) {
            return None;
        }
        let held = view.len();
        let base = attention.first_seen(held);
        let n = held + rows - base;
        let hkv = view.n_kv_heads();
        if 2 * hkv * n * view.head_dim() * size_of::<f32>() > MAX_BYTES {
            return None;
        }
        let runs: Vec<Mutex<Vec<f32>>> = (0..2 * hkv).map(|_| Mutex::default()).collect();
        kernels.parallel_for(2 * hkv, &|task| {
            let mut run = runs[task].lock().unwrap_or_else(|e| e.into_inner());
            let (g, mut scratch) = (task % hkv, Vec::new());
            let decoded = if task < hkv {
                view.keys_at(g, base, n, &mut scratch)
            } else {
                view.values_at(g, base, n, &mut scratch)
            };
            run.extend_from_slice(decoded);
        });
        Some(Decoded {
            base,
            head_dim: view.head_dim(),
            runs: runs
                .into_iter()
                .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
                .collect(),
        })
    }

    /// KV head `g`'s keys and values at positions `from..from + n` (which the job's rows
    /// see), each as one run.
    pub(super) fn runs(&self, g: usize, from: usize, n: usize) -> (Vec<&[f32]>, Vec<&[f32]>) {
        let hkv = self.runs.len() / 2;
        let at = (from - self.base) * self.head_dim..(from - self.base + n) * self.head_dim;
        (
            vec![&self.runs[g][at.clone()]],
            vec![&self.runs[hkv + g][at]],
        )
    }
}
