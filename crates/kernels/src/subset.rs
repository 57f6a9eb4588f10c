//! Products over some of a matrix's rows: [`QuantMatrix::matmul_rows`], for a model head whose
//! caller wants the logits of part of the vocabulary only (a speculative draft that proposes
//! from the most frequent tokens and those of its context reads a third of its head).

use std::ops::Range;

use crate::product::{Product, task_rows, with_permuted};
use crate::{Kernels, Prepared, QuantMatrix, dot, packed, profile};

impl QuantMatrix {
    /// `out[r] = x . row r` for one activation row `x` (`cols` values) and the rows `r` of
    /// `ranges`, each written with the bits [`matmul`](Self::matmul) gives it for that one
    /// row; `out` holds all `rows` entries. The ranges are rounded out to whole row groups
    /// (the kernels compute a packed group's eight rows at once), so some rows next to them
    /// are written too, each with its own product; every other entry is left as it was.
    /// Ranges may overlap and come in any order.
    ///
    /// # Panics
    /// If `x.len() != cols`, `out.len() != rows` or a range ends past `rows`.
    pub fn matmul_rows(
        &self,
        x: &[f32],
        ranges: &[Range<usize>],
        out: &mut [f32],
        kernels: &Kernels,
    ) {
        assert_eq!(x.len(), self.cols, "one activation row");
        assert_eq!(out.len(), self.rows, "output length");
        let spans = group_spans(ranges, self.rows);
        let total: usize = spans.iter().map(|s| s.len()).sum();
        if total == 0 {
            return;
        }
        let t0 = profile::start();
        let pool = kernels.pool();
        let kernel = dot::Kernel::select(self.ty, kernels.activations());
        let prepared = Prepared::new(
            kernel,
            self.packing.is_some(),
            x,
            self.cols,
            kernels.arithmetic(),
        );
        let product = Product::new(self, &prepared, x, 1, kernel, out, pool);
        let tasks = tasks(&spans, self.cols, pool.threads());
        pool.run(tasks.len(), &|task| {
            with_permuted(product.kernel, product.permute, &product.acts, |acts| {
                for span in &tasks[task] {
                    product.run_rows(span.start, span.end, acts);
                }
            })
        });
        let bytes = self.n_bytes() * total / self.rows;
        profile::record(
            t0,
            std::iter::once((self.ty, total, self.cols, bytes)),
            1,
            kernel.int8(),
        );
    }
}

/// `ranges` rounded out to whole groups of [`packed::GROUP`] rows (the last one ending at
/// `rows`), sorted and merged where they overlap or touch; empty ranges dropped.
fn group_spans(ranges: &[Range<usize>], rows: usize) -> Vec<Range<usize>> {
    let mut spans: Vec<Range<usize>> = ranges
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| {
            assert!(r.end <= rows, "rows {r:?} past the matrix's {rows}");
            let start = r.start / packed::GROUP * packed::GROUP;
            start..r.end.next_multiple_of(packed::GROUP).min(rows)
        })
        .collect();
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// The tasks of a product over `spans` (rows of `cols` values) on `threads` threads: a task
/// for each thread, as for a whole product of that many rows ([`task_rows`]), each a list
/// of spans.
fn tasks(spans: &[Range<usize>], cols: usize, threads: usize) -> Vec<Vec<Range<usize>>> {
    let total = spans.iter().map(|s| s.len()).sum();
    split(spans, task_rows(total, cols, threads))
}

/// `spans` (starting on groups) cut into tasks of about `per_task` rows (a multiple of the
/// group size): a long span is split at group boundaries, short ones are gathered.
fn split(spans: &[Range<usize>], per_task: usize) -> Vec<Vec<Range<usize>>> {
    let mut tasks = Vec::new();
    let mut current: Vec<Range<usize>> = Vec::new();
    let mut rows = 0;
    for span in spans {
        let mut start = span.start;
        while start < span.end {
            let end = span.end.min(start + (per_task - rows));
            current.push(start..end);
            rows += end - start;
            start = end;
            if rows >= per_task {
                tasks.push(std::mem::take(&mut current));
                rows = 0;
            }
        }
    }
    if !current.is_empty() {
        tasks.push(current);
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Rng, random_matrix, threads};
    use super::*;
    use kindle_gguf::quant::GgmlType;

    #[test]
    fn spans_round_out_to_groups_and_merge() {
        assert_eq!(
            group_spans(&[3..5, 25..26, 0..2, 9..9], 28),
            vec![0..8, 24..28]
        );
        assert_eq!(group_spans(&[10..12, 15..17], 100), vec![8..24]);
        assert!(group_spans(&[], 10).is_empty());
    }

    #[test]
    fn tasks_cover_the_spans_once_in_pieces_of_the_task_size() {
        let spans = [0..40, 48..56, 64..72, 200..208];
        let tasks = split(&spans, 16);
        let rows: Vec<usize> = tasks.iter().flatten().flat_map(|s| s.clone()).collect();
        let want: Vec<usize> = spans.iter().flat_map(|s| s.clone()).collect();
        assert_eq!(rows, want);
        assert!(
            tasks
                .iter()
                .all(|t| t.iter().map(|s| s.len()).sum::<usize>() <= 16)
        );
        assert!(tasks.iter().flatten().all(|s| s.start % packed::GROUP == 0));
        // A third of a 49152-row head and a few other rows: a task for each of two threads.
        let spans = group_spans(&[0..16384, 20000..20001, 30000..30001], 49152);
        assert_eq!(super::tasks(&spans, 576, 2).len(), 2);
    }

    /// The rows asked for get the bits of the whole product with one activation row, in every
    /// type and activation format; rows outside the groups asked for are not written.
    #[test]
    fn the_rows_asked_for_have_the_whole_product_s_bits() {
        let mut rng = Rng(0x5eb5);
        let (rows, cols) = (203, 256);
        let ranges = [0..37, 100..101, 150..151, 151..152, 190..203];
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::F32,
        ] {
            let w = random_matrix(ty, rows, cols, &mut rng);
            let x: Vec<f32> = (0..cols).map(|_| rng.float()).collect();
            for format in [crate::ActivationFormat::F32, crate::ActivationFormat::Int8] {
                let kernels = threads().with_activations(format);
                let mut whole = vec![0f32; rows];
                w.matmul(&x, 1, &mut whole, &kernels);
                let mut some = vec![f32::NAN; rows];
                w.matmul_rows(&x, &ranges, &mut some, &kernels);
                for r in 0..rows {
                    let asked = ranges.iter().any(|g| g.contains(&r));
                    let group = group_spans(&ranges, rows).iter().any(|g| g.contains(&r));
                    if group {
                        assert_eq!(
                            some[r].to_bits(),
                            whole[r].to_bits(),
                            "{ty:?} {format:?} row {r}"
                        );
                    } else {
                        assert!(some[r].is_nan(), "{ty:?} {format:?}: row {r} written");
                    }
                    assert!(!asked || group);
                }
            }
        }
    }
}
