//! The K-quant (`Q2_K` to `Q6_K`) and `Q5` kernels against the scalar reference on odd
//! shapes, in both activation formats, and the planted errors (a wrong sub-block scale, a
//! wrong fifth bit) those checks catch.

#![cfg(test)]

use super::dot::{Kernel, Simd};
use super::tests::{Rng, batch_bits, f16_bytes, magnitudes, random_bytes, random_matrix, threads};
use super::*;

/// The first output of `kernel` on `w` that is further than `rel_tol` (relative to
/// `sum |w| |x|`) from the scalar reference computed on `reference`.
fn first_mismatch(
    w: &QuantMatrix,
    reference: &QuantMatrix,
    kernel: Kernel,
    x: &[f32],
    m: usize,
    rel_tol: f32,
) -> Option<String> {
    let rows = w.rows();
    let mut want = vec![0f32; m * rows];
    reference.matmul_reference(x, m, &mut want);
    let scale = magnitudes(reference, x, m);
    let mut got = vec![f32::NAN; m * rows];
    w.matmul_kernel(x, m, &mut got, kernel, &threads());
    (0..m * rows).find_map(|i| {
        let err = (got[i] - want[i]).abs();
        // A NaN error fails too (`partial_cmp` answers `None` for it).
        let within = err.partial_cmp(&(rel_tol * scale[i] + 1e-6));
        (!matches!(
            within,
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        ))
        .then(|| {
            format!(
                "{kernel:?} {rows}x{} m={m} [{i}]: got {} want {} (scale {})",
                w.cols(),
                got[i],
                want[i],
                scale[i]
            )
        })
    })
}

/// The K-quants.
const K_TYPES: [GgmlType; 5] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

#[test]
fn k_quant_kernels_match_the_reference_on_odd_shapes() {
    // Odd row counts, activation batches of 1, 3 and 17 (the kernels take four at a time),
    // rows of one to six super-blocks; f32 activations to 1e-5 of sum |w| |x| (the products
    // are exact, only the order of the f32 sums differs), 8-bit ones to their rounding bound.
    let mut rng = Rng(0x6b71);
    for ty in K_TYPES {
        for (rows, cols) in [(1, 256), (7, 768), (33, 1536), (3, 512)] {
            let w = random_matrix(ty, rows, cols, &mut rng);
            for m in [1, 3, 17] {
                let x: Vec<f32> = (0..m * cols).map(|_| rng.float() * 2.0).collect();
                for simd in Simd::available() {
                    for (format, tol) in [
                        (ActivationFormat::F32, 1e-5),
                        (ActivationFormat::Int8, 0.01),
                    ] {
                        let kernel = Kernel::select_simd(ty, format, simd);
                        if let Some(e) = first_mismatch(&w, &w, kernel, &x, m, tol) {
                            panic!("{ty:?}: {e}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn k_quant_int8_kernels_run_on_8_bit_activations() {
    // The 8-bit kernels are chosen wherever SIMD runs, and their error is that of 8-bit
    // activations (not zero): they really read the quantized rows.
    if Simd::detect() == Simd::Scalar {
        return;
    }
    let mut rng = Rng(77);
    for ty in K_TYPES {
        let kernel = Kernel::select(ty, ActivationFormat::Int8);
        assert!(kernel.int8(), "{ty:?}");
        let w = random_matrix(ty, 9, 512, &mut rng);
        let x: Vec<f32> = (0..512).map(|_| rng.float()).collect();
        assert!(first_mismatch(&w, &w, kernel, &x, 1, 0.01).is_none());
        assert!(
            first_mismatch(&w, &w, kernel, &x, 1, 1e-7).is_some(),
            "{ty:?}"
        );
    }
}

#[test]
fn a_wrong_sub_block_scale_is_caught() {
    // Planted error: the kernels run on a copy of the matrix with one sub-block scale changed
    // (Q4_K/Q5_K: the 6-bit scale of sub-block 5, packed in two places; Q3_K, Q6_K: the
    // scale of the 16 values 176..192; Q2_K: the mins of values 160..192), checked against the reference of the original. The check
    // must fail for every kernel, and pass on the original.
    let mut rng = Rng(4242);
    for ty in K_TYPES {
        let (rows, cols) = (5, 512);
        // The file's bytes (`Q4_K` is repacked at load).
        let mut bytes = random_bytes(ty, rows, cols, &mut rng);
        let w = QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes.clone())).unwrap();
        let row_bytes = cols / 256 * ty.type_size();
        let block = &mut bytes[2 * row_bytes + ty.type_size()..];
        match ty {
            GgmlType::Q6_K => block[192 + 11] = block[192 + 11].wrapping_add(40),
            // `Q2_K`: the mins of sub-blocks 10 and 11 (values 160..192; the high nibbles of
            // bytes 10 and 11: this block's `dmin` is its larger factor). `Q3_K`: sub-block
            // 11's scale's low four bits, in the high nibble of scales byte 3.
            GgmlType::Q2_K => {
                block[10] ^= 0x80;
                block[11] ^= 0x80;
            }
            GgmlType::Q3_K => block[96 + 3] ^= 0x80,
            // Sub-block 5's scale: low four bits in byte 4 + 9, top two in byte 4 + 1.
            _ => block[4 + 1] ^= 0x80,
        }
        let bad = QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).unwrap();
        // Activations mostly on the changed sub-block (values 256 + 160..256 + 192), so that
        // the change is well above the 8-bit activations' rounding.
        let x: Vec<f32> = (0..cols)
            .map(|i| rng.float() * if (416..448).contains(&i) { 1.0 } else { 0.01 })
            .collect();
        for simd in Simd::available() {
            for (format, tol) in [
                (ActivationFormat::F32, 1e-5),
                (ActivationFormat::Int8, 0.01),
            ] {
                let kernel = Kernel::select_simd(ty, format, simd);
                // Without SIMD `Q2_K` and `Q3_K` have no 8-bit kernels: they run `f32` ones.
                let tol = if kernel.int8() { tol } else { 1e-5 };
                assert!(first_mismatch(&w, &w, kernel, &x, 1, tol).is_none());
                assert!(
                    first_mismatch(&bad, &w, kernel, &x, 1, tol).is_some(),
                    "{ty:?} {kernel:?}: a wrong scale went unnoticed"
                );
            }
        }
    }
}

#[test]
fn k_quant_batches_give_the_bits_of_single_rows() {
    let mut rng = Rng(31);
    for ty in K_TYPES {
        // Three super-blocks: 24 block columns, three chunks of the AVX-512 `f32` kernels.
        let (rows, cols) = (11, 768);
        let w = random_matrix(ty, rows, cols, &mut rng);
        for m in [3, 7, 20] {
            batch_bits(&w, m, cols, &mut rng);
        }
    }
}

const Q5_TYPES: [GgmlType; 2] = [GgmlType::Q5_0, GgmlType::Q5_1];

#[test]
fn q5_kernels_match_the_reference_on_odd_shapes() {
    // Packed groups with and without the `rows % 8` plain rows, activation batches of 1, 3 and
    // 17 (the group kernels take eight at a time); f32 activations to 1e-5 of sum |w| |x|,
    // 8-bit ones to their rounding bound.
    let mut rng = Rng(0x5150);
    for ty in Q5_TYPES {
        for (rows, cols) in [(1, 32), (7, 96), (8, 32), (17, 64), (33, 1536)] {
            let w = random_matrix(ty, rows, cols, &mut rng);
            for m in [1, 3, 17] {
                let x: Vec<f32> = (0..m * cols).map(|_| rng.float() * 2.0).collect();
                for simd in Simd::available() {
                    for (format, tol) in [
                        (ActivationFormat::F32, 1e-5),
                        (ActivationFormat::Int8, 0.01),
                    ] {
                        let kernel = Kernel::select_simd(ty, format, simd);
                        assert_eq!(kernel.int8(), format == ActivationFormat::Int8);
                        if let Some(e) = first_mismatch(&w, &w, kernel, &x, m, tol) {
                            panic!("{ty:?}: {e}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_wrong_fifth_bit_is_caught() {
    // Planted error: the kernels run on a copy of the matrix with one fifth bit flipped (bit
    // 21 of block 2's qh: value 21, a high nibble) in a packed row (10) and in a plain row
    // left over (17), checked against the reference of the original. The check must fail
    // for every kernel, and pass on the original.
    let mut rng = Rng(0xb17);
    let (rows, cols) = (19, 128);
    for ty in Q5_TYPES {
        for bad_row in [10, 17] {
            let mut bytes = random_bytes(ty, rows, cols, &mut rng);
            let size = ty.type_size();
            let at = bad_row * cols / 32 * size + 2 * size;
            bytes[at..at + 2].copy_from_slice(&f16_bytes(0.1));
            let w = QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes.clone())).unwrap();
            let qh = at + if ty == GgmlType::Q5_1 { 4 } else { 2 };
            bytes[qh + 2] ^= 1 << 5;
            let bad = QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).unwrap();
            // Activations mostly on block 2, the flipped value's at 1.
            let mut x: Vec<f32> = (0..cols)
                .map(|i| rng.float() * if (64..96).contains(&i) { 1.0 } else { 0.01 })
                .collect();
            x[64 + 21] = 1.0;
            for simd in Simd::available() {
                for (format, tol) in [
                    (ActivationFormat::F32, 1e-5),
                    (ActivationFormat::Int8, 0.01),
                ] {
                    let kernel = Kernel::select_simd(ty, format, simd);
                    assert!(first_mismatch(&w, &w, kernel, &x, 1, tol).is_none());
                    assert!(
                        first_mismatch(&bad, &w, kernel, &x, 1, tol).is_some(),
                        "{ty:?} {kernel:?} row {bad_row}: a wrong fifth bit went unnoticed"
                    );
                }
            }
        }
    }
}
