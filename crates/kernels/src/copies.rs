//! The permuted activations ([`dot::Activations::permuted`](super::dot::Activations)) that
//! each pool thread makes for itself.
//!
//! The AVX2 `f32` `Q4` kernels read each activation value as a whole vector of it
//! (`Kernel::copies`: eight), 18 KiB for a row of 576 values. Made once by the caller for all
//! threads, that was a serial step of every product (a zeroed allocation, then the fill) that
//! the other threads waited out, and then read from the caller's core. Each thread now makes
//! its own, into a buffer it keeps, once per preparation ([`Prepared`](super::Prepared), named
//! by [`next_id`]): the same values, so the same bits. (This module knows nothing of the
//! kernels: the caller says how to make the values.)

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next preparation's name (never 0, which names none).
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One thread's values, and the preparation they were made for.
struct Local {
    id: u64,
    values: Vec<f32>,
}

/// The most values a thread keeps between products (1 MiB): a decode step's rows take far
/// less (48 KiB for 1536 values in eight copies); the buffer of a pass of many rows is freed
/// after its task, as the caller's was.
const KEEP: usize = 1 << 18;

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local { id: 0, values: Vec::new() }) };
}

/// `f` of this thread's values for preparation `id`, which `make` writes into the thread's
/// buffer (its allocation reused) if this thread has not made them yet.
pub(crate) fn with_local<R>(
    id: u64,
    make: impl FnOnce(&mut Vec<f32>),
    f: impl FnOnce(&[f32]) -> R,
) -> R {
    LOCAL.with_borrow_mut(|local| {
        if local.id != id {
            make(&mut local.values);
            local.id = id;
        }
        let result = f(&local.values);
        if local.values.capacity() > KEEP {
            *local = Local {
                id: 0,
                values: Vec::new(),
            };
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Rng, random_matrix, threads};
    use super::super::*;

    /// Products of several kernels, widths and inputs, one after another on one pool, give
    /// each output the bits it gets alone on a fresh thread: a thread remakes its copy
    /// whenever the preparation changes (a stale one would hold another input's values),
    /// and after a pass of many rows, whose buffer it did not keep ([`KEEP`]).
    #[test]
    fn each_preparation_gets_its_own_copy() {
        let mut rng = Rng(0x00c0_ffee);
        let shapes = [
            (GgmlType::Q4_1, 576),
            (GgmlType::Q4_K, 512),
            (GgmlType::Q4_1, 256),
            (GgmlType::Q5_0, 256),
            (GgmlType::Q4_0, 576),
        ];
        let mut cases = Vec::new();
        for m in [1, 2, 64] {
            for &(ty, cols) in &shapes {
                let w = random_matrix(ty, 40, cols, &mut rng);
                let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
                cases.push((w, x, m));
            }
        }
        let alone: Vec<Vec<f32>> = std::thread::scope(|scope| {
            let fresh = cases.iter().map(|(w, x, m)| {
                scope.spawn(move || {
                    let mut out = vec![0f32; m * w.rows];
                    let one = Kernels::new(KernelOptions::threads(1));
                    w.matmul(x, *m, &mut out, &one.with_arithmetic(RowArithmetic::Decode));
                    out
                })
            });
            fresh
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect()
        });
        let kernels = threads().with_arithmetic(RowArithmetic::Decode);
        for _ in 0..2 {
            for ((w, x, m), alone) in cases.iter().zip(&alone) {
                let mut out = vec![0f32; m * w.rows];
                w.matmul(x, *m, &mut out, &kernels);
                assert_eq!(&out, alone, "{:?} {} x {}", w.ty, m, w.cols);
                let mut reference = vec![0f32; m * w.rows];
                w.matmul_reference(x, *m, &mut reference);
                for (a, r) in out.iter().zip(&reference) {
                    assert!(
                        (a - r).abs() < 1e-3 * (1.0 + r.abs()),
                        "{:?}: {a} {r}",
                        w.ty
                    );
                }
            }
        }
    }
}
