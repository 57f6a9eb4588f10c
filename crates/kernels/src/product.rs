//! Running products on the kernels' pool: [`QuantMatrix::matmul_many`] and the one-matrix
//! product behind `matmul`, each split into tasks of whole row groups ([`Product`]).

use super::pool::SyncPtr;
use super::{
    Kernels, Prepared, QuantMatrix, copies, dequantize_weights_row, dot, gemm, gemm_tile, packed,
    pool, profile,
};

impl QuantMatrix {
    /// `out[m, rows] = x[m, cols] W^T` with `kernel`, on `kernels`' pool: what
    /// [`matmul_with`](Self::matmul_with) runs once it has chosen the kernel.
    pub(crate) fn matmul_kernel(
        &self,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        kernel: dot::Kernel,
        kernels: &Kernels,
    ) {
        assert_eq!(x.len(), m * self.cols, "activation length");
        assert_eq!(out.len(), m * self.rows, "output length");
        if m == 0 || self.rows == 0 {
            return;
        }
        let t0 = profile::start();
        let pool = kernels.pool();
        let prepared = Prepared::new(
            kernel,
            self.packing.is_some(),
            x,
            self.cols,
            kernels.arithmetic(),
        );
        let product = Product::new(self, &prepared, x, m, kernel, out, pool);
        pool.run(product.tasks, &|task| product.run(task));
        let shape = (self.ty, self.rows, self.cols, self.n_bytes());
        profile::record(t0, std::iter::once(shape), m, kernel.int8());
    }

    /// `outs[i][m, rows_i] = x[m, cols] W_i^T` for every `(W_i, outs[i])` of `products` (all
    /// with `cols` columns), with `kernels`' activation format: the products' tasks run as
    /// one job of the pool, so the threads meet once for all of them (a layer's query, key
    /// and value projections, or its gate and up ones), and each kind of activations is
    /// prepared once. Every output has the bits [`matmul`](Self::matmul) gives it.
    ///
    /// # Panics
    /// If the matrices' `cols` differ, `x.len() != m * cols` or an output's length is not
    /// `m * rows` of its matrix.
    pub fn matmul_many(
        products: &mut [(&QuantMatrix, &mut [f32])],
        x: &[f32],
        m: usize,
        kernels: &Kernels,
    ) {
        let Some(cols) = products.first().map(|(w, _)| w.cols) else {
            return;
        };
        assert!(
            products.iter().all(|(w, _)| w.cols == cols),
            "matrices of one input"
        );
        assert_eq!(x.len(), m * cols, "activation length");
        for (w, out) in products.iter() {
            assert_eq!(out.len(), m * w.rows, "output length");
        }
        if m == 0 {
            return;
        }
        let t0 = profile::start();
        let pool = kernels.pool();
        let kernel_of = |w: &QuantMatrix| dot::Kernel::select(w.ty, kernels.activations());
        // One preparation per distinct (kernel, packed) pair.
        let mut prepared: Vec<(dot::Kernel, bool, Prepared)> = Vec::new();
        for (w, _) in products.iter() {
            let key = (kernel_of(w), w.packing.is_some());
            if !prepared.iter().any(|(k, p, _)| (*k, *p) == key) {
                let arithmetic = kernels.arithmetic();
                prepared.push((
                    key.0,
                    key.1,
                    Prepared::new(key.0, key.1, x, cols, arithmetic),
                ));
            }
        }
        let jobs: Vec<Product<'_>> = products
            .iter_mut()
            .filter(|(w, _)| w.rows > 0)
            .map(|(w, out)| {
                let key = (kernel_of(w), w.packing.is_some());
                let (_, _, p) = prepared
                    .iter()
                    .find(|(k, p, _)| (*k, *p) == key)
                    .expect("prepared above");
                Product::new(w, p, x, m, key.0, out, pool)
            })
            .collect();
        let starts: Vec<usize> = jobs
            .iter()
            .scan(0, |next, job| {
                let start = *next;
                *next += job.tasks;
                Some(start)
            })
            .collect();
        let total = jobs.iter().map(|job| job.tasks).sum();
        pool.run(total, &|task| {
            let i = starts.partition_point(|&start| start <= task) - 1;
            jobs[i].run(task - starts[i]);
        });
        let shapes = products
            .iter()
            .map(|(w, _)| (w.ty, w.rows, w.cols, w.n_bytes()));
        // As `matmul` records it: 8-bit when a kernel of the job reads 8-bit activations (a
        // dense `F16`/`BF16`/`F32` matrix multiplies `f32` ones whatever the format).
        let int8 = products.iter().any(|(w, _)| kernel_of(w).int8());
        profile::record(t0, shapes, m, int8);
    }
}

/// One product split into tasks of whole row groups for the pool.
pub(crate) struct Product<'a> {
    pub(crate) weights: dot::Weights<'a>,
    /// The preparation whose permuted activations each thread makes for itself, if any.
    pub(crate) permute: Option<u64>,
    /// Whether the tasks run the prefill product ([`gemm`]) rather than the decode kernels.
    pub(crate) gemm: bool,
    pub(crate) acts: dot::Activations<'a>,
    pub(crate) kernel: dot::Kernel,
    pub(crate) rows: usize,
    pub(crate) per_task: usize,
    pub(crate) tasks: usize,
    pub(crate) out: SyncPtr,
}

impl<'a> Product<'a> {
    pub(crate) fn new(
        w: &'a QuantMatrix,
        prepared: &'a Prepared,
        x: &'a [f32],
        m: usize,
        kernel: dot::Kernel,
        out: &'a mut [f32],
        pool: &pool::Pool,
    ) -> Product<'a> {
        let acts = prepared.activations(x, w.cols, m);
        let per_task = task_rows(w.rows, w.cols * m, pool.threads());
        Product {
            weights: w.weights(),
            permute: prepared.permute,
            // Prepared in panels exactly where the prefill product runs (`runs_gemm`).
            gemm: !acts.panels.is_empty(),
            acts,
            kernel,
            rows: w.rows,
            per_task,
            tasks: w.rows.div_ceil(per_task),
            out: SyncPtr(out.as_mut_ptr()),
        }
    }

    /// Task `task`: its rows of every activation row.
    pub(crate) fn run(&self, task: usize) {
        with_permuted(self.kernel, self.permute, &self.acts, |acts| {
            self.run_with(task, acts)
        });
    }

    /// [`run`](Self::run) with `acts` in every form the kernel reads.
    fn run_with(&self, task: usize, acts: &dot::Activations) {
        let start = task * self.per_task;
        if start < self.rows {
            self.run_rows(start, (start + self.per_task).min(self.rows), acts);
        }
    }

    /// Rows `start..end` (`start` beginning a row group) of every activation row.
    pub(crate) fn run_rows(&self, start: usize, end: usize, acts: &dot::Activations) {
        let (m, rows) = (acts.m, self.rows);
        if m == 1 && !self.gemm {
            // SAFETY: tasks cover disjoint ranges of the output, which outlives the job.
            let chunk =
                unsafe { std::slice::from_raw_parts_mut(self.out.get().add(start), end - start) };
            self.kernel.rows(&self.weights, acts, start, end, chunk);
            return;
        }
        if self.gemm {
            let (panels, cols) = (acts.panels, acts.cols);
            let dequantize = |r: usize, out: &mut [f32], scratch: &mut Vec<u8>| {
                dequantize_weights_row(&self.weights, r, out, scratch)
            };
            let wr = gemm_tile().expect("`gemm` is set only where a micro-kernel runs");
            // SAFETY: `wr` is this CPU's tile, and the activations were prepared in panels
            // (`gemm` is set); tasks cover disjoint column ranges `start..end` of the
            // `[m, rows]` output, which outlives the job.
            unsafe {
                let out = self.out.get().add(start);
                gemm::rows_in_tiles(wr, &dequantize, panels, m, cols, start, end, out, rows);
            }
            return;
        }
        // The kernels write `[rows, m]`; each task turns its own rows into columns of the
        // `[m, rows]` output, a chunk of rows at a time so that the chunk's sums are read
        // back from L1 (a whole task's at once, 4 MiB for eight rows of Gemma-3's head, were
        // zeroed, written and read back in `m` strided passes).
        let chunk = transpose_rows(m);
        let mut sums = vec![0f32; chunk.min(end - start) * m];
        let mut from = start;
        while from < end {
            let to = (from + chunk).min(end);
            let sums = &mut sums[..(to - from) * m];
            self.kernel.rows(&self.weights, acts, from, to, sums);
            for j in 0..m {
                // SAFETY: tasks cover disjoint row ranges, so disjoint parts of each output
                // row `j`, and the output outlives the job.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(self.out.get().add(j * rows + from), to - from)
                };
                for (r, d) in dst.iter_mut().enumerate() {
                    *d = sums[r * m + j];
                }
            }
            from = to;
        }
    }
}

/// Weight rows whose sums for `m` activation rows a task computes before it transposes them
/// into the output ([`Product::run_rows`]): about 32 KiB of sums, whole row groups.
pub(crate) fn transpose_rows(m: usize) -> usize {
    (8192 / m.max(1)).next_multiple_of(packed::GROUP)
}

/// Rows a task of a product over `rows` rows takes, each row `macs` multiply-adds: one
/// contiguous range per thread (each keeping at least a few thousand multiply-adds, and whole
/// row groups). The pool hands tasks to whichever thread gets there first, so a worker the OS
/// has descheduled costs at most the task it holds: smaller tasks were measured slower (the
/// cross-core claims, and each thread's stream of weights broken into pieces).
pub(crate) fn task_rows(rows: usize, macs: usize, threads: usize) -> usize {
    let min_rows = (16_384 / macs.max(1)).max(packed::GROUP);
    rows.div_ceil(threads)
        .max(min_rows)
        .next_multiple_of(packed::GROUP)
}

/// `f` of `acts` with [`dot::Activations::permuted`] this thread's copy for preparation
/// `permute` (`copies.rs`, made by `kernel` if this thread has not made it yet), or of `acts`
/// as they are where the kernel reads no permuted form.
pub(crate) fn with_permuted<R>(
    kernel: dot::Kernel,
    permute: Option<u64>,
    acts: &dot::Activations,
    f: impl FnOnce(&dot::Activations) -> R,
) -> R {
    let Some(id) = permute else {
        return f(acts);
    };
    let make = |values: &mut [f32]| kernel.permute_into(acts.f32, values);
    let len = acts.f32.len() * kernel.copies();
    copies::with_local(id, len, make, |permuted| {
        f(&dot::Activations { permuted, ..*acts })
    })
}
