//! Opt-in timing of every weight product, by shape: where a decode step's time goes between
//! the kernels and everything around them (`kindle bench --profile`).
//!
//! A profile says what a sampling profiler cannot on a machine without hardware counters: each
//! product's wall time as its caller waits for it (all its threads, the pool's meeting
//! included), and that of the operations a caller names ([`record_operation`]: the model's
//! attention), so their sum set against a step's time leaves exactly the time spent outside
//! them (norms, activations, the threads' hand-offs). Off by default: a product then pays one
//! relaxed atomic load. The record is process-wide (every model and thread count in the
//! process adds to it).
//!
//! ```
//! use kindle_gguf::quant::GgmlType;
//! use kindle_kernels::{Kernels, KernelOptions, QuantMatrix, WeightBytes, profile};
//!
//! let bytes = vec![0u8; 96 * 34]; // 96 rows of one `Q8_0` block (zero scales)
//! let w = QuantMatrix::new(GgmlType::Q8_0, 96, 32, WeightBytes::owned(bytes)).unwrap();
//! let kernels = Kernels::new(KernelOptions::threads(1));
//! profile::set_profiling(true);
//! let mut out = vec![0f32; 96];
//! w.matmul(&[1.0; 32], 1, &mut out, &kernels);
//! profile::set_profiling(false);
//! let stats = profile::take_profile();
//! let mine = stats.iter().find(|s| s.matrices == [(GgmlType::Q8_0, 96, 32)]).unwrap();
//! assert_eq!((mine.activation_rows, mine.calls), (1, 1));
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kindle_gguf::quant::GgmlType;

/// What one kind of product (or another timed operation) cost while profiling was on.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductStat {
    /// The matrices multiplied in one job of the pool, as (type, rows, columns): one for a
    /// plain product, several for products of one input run together (a layer's query, key
    /// and value projections). Empty for another operation ([`ProductStat::operation`]).
    pub matrices: Vec<(GgmlType, usize, usize)>,
    /// The name of an operation other than a weight product that its caller timed
    /// ([`record_operation`]: the model's host attention, `"attention"`); `None` for a
    /// product.
    pub operation: Option<&'static str>,
    /// Activation rows of each call (1 for a decode step).
    pub activation_rows: usize,
    /// Whether the activations were 8-bit (`--activations int8`).
    pub int8: bool,
    /// Calls made.
    pub calls: u64,
    /// Their wall time in all, as the caller waited for them.
    pub time: Duration,
    /// Weight bytes one call reads (the matrices' bytes).
    pub weight_bytes: u64,
}

/// (matrices, operation, activation rows, int8).
type Key = (
    Vec<(GgmlType, usize, usize)>,
    Option<&'static str>,
    usize,
    bool,
);
/// (calls, time, weight bytes a call) of each key.
type Record = HashMap<Key, (u64, Duration, u64)>;

static ON: AtomicBool = AtomicBool::new(false);
static RECORD: Mutex<Option<Record>> = Mutex::new(None);

/// Turn the timing of products on or off (off by default). What was recorded stays until
/// [`take_profile`].
pub fn set_profiling(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Everything recorded since the last call, the costliest products first; the record is
/// emptied.
pub fn take_profile() -> Vec<ProductStat> {
    let record = RECORD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    let mut stats: Vec<ProductStat> = record
        .into_iter()
        .map(
            |((matrices, operation, activation_rows, int8), (calls, time, weight_bytes))| {
                ProductStat {
                    matrices,
                    operation,
                    activation_rows,
                    int8,
                    calls,
                    time,
                    weight_bytes,
                }
            },
        )
        .collect();
    stats.sort_by_key(|s| std::cmp::Reverse(s.time));
    stats
}

/// The start of a product (or another operation) when profiling is on, else `None`.
#[inline]
pub fn start() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

/// Record an operation other than a weight product, begun at `start` ([`start`]; nothing
/// when it was `None`), under `name`, for `rows` rows of the pass (the model's host
/// attention records itself as `"attention"`).
pub fn record_operation(start: Option<Instant>, name: &'static str, rows: usize) {
    if let Some(start) = start {
        add((Vec::new(), Some(name), rows, false), start.elapsed(), 0);
    }
}

/// Count one call of `key` that took `time`.
fn add(key: Key, time: Duration, bytes: u64) {
    let mut record = RECORD.lock().unwrap_or_else(|e| e.into_inner());
    let entry = record
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_insert((0, Duration::ZERO, bytes));
    entry.0 += 1;
    entry.1 += time;
}

/// Record a product begun at `start` ([`start`]; nothing when it was `None`): `matrices` as
/// (type, rows, columns, bytes), `m` activation rows.
pub(crate) fn record(
    start: Option<Instant>,
    matrices: impl Iterator<Item = (GgmlType, usize, usize, usize)>,
    m: usize,
    int8: bool,
) {
    let Some(start) = start else {
        return;
    };
    let time = start.elapsed();
    let mut bytes = 0u64;
    let shapes: Vec<(GgmlType, usize, usize)> = matrices
        .map(|(ty, rows, cols, n)| {
            bytes += n as u64;
            (ty, rows, cols)
        })
        .collect();
    add((shapes, None, m, int8), time, bytes);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Rng, random_matrix, threads};
    use super::super::*;
    use super::*;

    /// Products are recorded only while profiling is on, by shape and activation rows, with
    /// their calls and bytes; products run together are one entry.
    #[test]
    fn products_are_recorded_by_shape_while_on() {
        let mut rng = Rng(0x9f0f);
        // Shapes no other test uses (tests run in parallel in this process).
        let a = random_matrix(GgmlType::Q4_1, 72, 96, &mut rng);
        let b = random_matrix(GgmlType::Q8_0, 40, 96, &mut rng);
        let kernels = threads();
        let x: Vec<f32> = (0..3 * 96).map(|_| rng.float()).collect();
        let mut out_a = vec![0f32; 3 * 72];
        let mut out_b = vec![0f32; 3 * 40];
        a.matmul(&x[..96], 1, &mut out_a[..72], &kernels); // off: not recorded
        record_operation(start(), "profile-test", 5); // off: not recorded
        set_profiling(true);
        record_operation(start(), "profile-test", 3);
        for _ in 0..3 {
            a.matmul(&x[..96], 1, &mut out_a[..72], &kernels);
        }
        a.matmul(&x, 3, &mut out_a, &kernels);
        QuantMatrix::matmul_many(
            &mut [(&a, &mut out_a[..]), (&b, &mut out_b[..])],
            &x,
            3,
            &kernels,
        );
        set_profiling(false);
        b.matmul(&x, 3, &mut out_b, &kernels); // off again
        let stats = take_profile();
        let find = |matrices: &[(GgmlType, usize, usize)], m: usize| {
            stats
                .iter()
                .find(|s| s.matrices == matrices && s.activation_rows == m)
                .unwrap_or_else(|| panic!("{matrices:?} x {m} in {stats:?}"))
        };
        let (qa, qb) = ((GgmlType::Q4_1, 72, 96), (GgmlType::Q8_0, 40, 96));
        let one = find(&[qa], 1);
        assert_eq!((one.calls, one.weight_bytes), (3, a.n_bytes() as u64));
        assert!(one.time > Duration::ZERO);
        assert_eq!(find(&[qa], 3).calls, 1);
        let both = find(&[qa, qb], 3);
        assert_eq!(both.calls, 1);
        assert_eq!(both.weight_bytes, (a.n_bytes() + b.n_bytes()) as u64);
        assert!(
            !stats.iter().any(|s| s.matrices == [qb]),
            "a product with profiling off was recorded: {stats:?}"
        );
        let ops: Vec<&ProductStat> = stats
            .iter()
            .filter(|s| s.operation == Some("profile-test"))
            .collect();
        assert_eq!(ops.len(), 1, "{ops:?}");
        assert_eq!((ops[0].activation_rows, ops[0].calls), (3, 1));
        assert!(ops[0].matrices.is_empty() && ops[0].weight_bytes == 0);
        let products = stats.iter().filter(|s| !s.matrices.is_empty());
        assert!(products.clone().all(|s| s.operation.is_none()));
        assert!(
            take_profile().iter().all(|s| s.matrices != [qa]),
            "taken twice"
        );
    }
}
