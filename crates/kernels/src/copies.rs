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

use super::aligned::LineBuf;

/// The next preparation's name (never 0, which names none).
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One thread's values (on a cache line), and the preparation they were made for.
struct Local {
    id: u64,
    values: LineBuf,
}

/// The most values a thread keeps between products (1 MiB): a decode step's rows take far
/// less (48 KiB for 1536 values in eight copies); the buffer of a pass of many rows is freed
/// after its task, as the caller's was.
const KEEP: usize = 1 << 18;

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local { id: 0, values: LineBuf::default() });
}

/// `f` of this thread's `len` values for preparation `id`, which `make` writes (every one of
/// them) into the thread's buffer (its allocation reused) if this thread has not made them
/// yet. The values start on a cache line: the kernels load each as a whole 32-byte vector of
/// copies, and from an allocation 16 bytes into a line (as glibc often gives) every other
/// load spans two lines. Measured on the Zen 3 VM in one process, alternating a start on a
/// line with one 16 bytes past it over SmolLM2's 90 `Q4_1` FFN matrices (`f32` activations):
/// one row 5.4-6.0 against 6.0-6.5 ms (mean of 20, one thread), 3.5 against 3.7-3.9 (two);
/// six rows 29-36 against 31-36 (one thread).
pub(crate) fn with_local<R>(
    id: u64,
    len: usize,
    make: impl FnOnce(&mut [f32]),
    f: impl FnOnce(&[f32]) -> R,
) -> R {
    LOCAL.with_borrow_mut(|local| {
        if local.id != id {
            make(local.values.resize(len));
            local.id = id;
        }
        let result = f(local.values.values());
        if local.values.capacity() > KEEP {
            *local = Local {
                id: 0,
                values: LineBuf::default(),
            };
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Rng, random_matrix, threads};
    use super::super::*;

    #[test]
    fn a_thread_s_values_start_on_a_cache_line_and_are_made_once() {
        for (id, len) in [
            (super::next_id(), 5),
            (super::next_id(), 4608),
            (super::next_id(), 17),
            (super::next_id(), 12288),
        ] {
            let fill = |values: &mut [f32]| {
                assert_eq!(values.len(), len);
                values
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = (i + len) as f32);
            };
            for round in 0..2 {
                let made = std::cell::Cell::new(false);
                let make = |values: &mut [f32]| {
                    made.set(true);
                    fill(values);
                };
                super::with_local(id, len, make, |values| {
                    assert!(
                        values.as_ptr().cast::<u8>().align_offset(64) == 0,
                        "{len} values"
                    );
                    assert!(
                        values
                            .iter()
                            .enumerate()
                            .all(|(i, &v)| v == (i + len) as f32)
                    );
                });
                assert_eq!(made.get(), round == 0, "{len} values, round {round}");
            }
        }
    }

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

    /// Each kernel's permuted activations are, value for value, its permutation's order and
    /// scale applied to each 32-value block, each value as many times as it has copies (the
    /// AVX2 kernels' eight, the others' one): the forms written with the copies a constant.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn permuted_values_follow_the_permutation_for_every_kernel() {
        use crate::dot::Kernel;
        use crate::simd::Simd;
        let mut rng = Rng(0x5eed_0001);
        let x: Vec<f32> = (0..3 * 32).map(|_| rng.float()).collect();
        let mut checked = 0;
        for simd in [Simd::Avx2, Simd::Avx512] {
            for ty in [
                GgmlType::Q4_1,
                GgmlType::Q4_K,
                GgmlType::Q5_0,
                GgmlType::Q6_K,
            ] {
                let kernel = Kernel::F32 { ty, simd };
                let (order, scale, _) = kernel.permutation();
                let copies = kernel.copies();
                let mut dst = vec![f32::NAN; x.len() * copies];
                kernel.permute_into(&x, &mut dst);
                for (i, &v) in dst.iter().enumerate() {
                    let (block, k) = (i / (32 * copies), i % (32 * copies) / copies);
                    let want = x[32 * block + order[k]] * scale[k];
                    assert_eq!(v.to_bits(), want.to_bits(), "{ty:?} {simd:?}: value {i}");
                }
                checked |= 1 << copies.min(8);
            }
        }
        assert_eq!(
            checked,
            (1 << 1) | (1 << 8),
            "one and eight copies both checked"
        );
    }
}
