//! The prefill product ([`super::gemm`]): its bits against an FMA chain over the dequantised
//! weights, for every type, SIMD level, shape and thread count.

use super::tests::{Rng, TYPES, random_matrix, threads};
use super::*;

/// `out[j, r] = fma(x[j, k], w[r, k], acc)` over `k` in order from zero: the arithmetic the
/// prefill product promises (`fused`), or with a rounded product then a rounded sum (not
/// `fused`: the planted error the check must catch).
fn chain_reference(w: &QuantMatrix, x: &[f32], m: usize, fused: bool) -> Vec<f32> {
    let (rows, cols) = (w.rows(), w.cols());
    let mut row = vec![0f32; cols];
    let mut out = vec![0f32; m * rows];
    for r in 0..rows {
        w.dequantize_row(r, &mut row);
        for j in 0..m {
            let xs = &x[j * cols..(j + 1) * cols];
            out[j * rows + r] = xs.iter().zip(&row).fold(0f32, |acc, (&a, &b)| {
                if fused {
                    a.mul_add(b, acc)
                } else {
                    acc + a * b
                }
            });
        }
    }
    out
}

/// Where two outputs first differ in their bits.
fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, (&a, &b))| (i, a, b))
}

fn require_simd() {
    assert!(
        gemm_tile().is_some(),
        "this CPU has no AVX2 + FMA: the prefill product does not run here"
    );
}

/// From 32 rows on, every `f32` product is an FMA chain in `k` order: the same bits for every
/// weight type, any number of rows (whole register tiles and partial ones, weight rows not a
/// multiple of a tile) and any thread count.
#[test]
fn prefill_products_are_fma_chains_over_the_dequantised_weights() {
    require_simd();
    let mut rng = Rng(0x5eed);
    for ty in TYPES {
        let (rows, cols) = (45, 512);
        let w = random_matrix(ty, rows, cols, &mut rng);
        for m in [PREFILL_ROWS, PREFILL_ROWS + 1, 45, 70] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
            let want = chain_reference(&w, &x, m, true);
            for kernels in [Kernels::new(KernelOptions::threads(1)), threads()] {
                let mut got = vec![f32::NAN; m * rows];
                w.matmul_with(&x, m, &mut got, ActivationFormat::F32, &kernels);
                assert_eq!(first_difference(&got, &want), None, "{ty:?} m={m}");
            }
        }
    }
}

/// The bit-exact comparison above is not vacuous: the same chain with a rounded product
/// before each sum (what the decode kernels' block sums come closer to) differs from it.
#[test]
fn an_unfused_chain_is_caught() {
    require_simd();
    let mut rng = Rng(0xfeed);
    let (rows, cols, m) = (20, 256, PREFILL_ROWS);
    let w = random_matrix(GgmlType::Q4_K, rows, cols, &mut rng);
    let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
    let mut got = vec![f32::NAN; m * rows];
    w.matmul_with(&x, m, &mut got, ActivationFormat::F32, &threads());
    assert!(first_difference(&got, &chain_reference(&w, &x, m, false)).is_some());
    // And one flipped weight bit shows up too.
    let mut planted = chain_reference(&w, &x, m, true);
    planted[7] = f32::from_bits(planted[7].to_bits() ^ 1);
    assert_eq!(first_difference(&got, &planted).map(|d| d.0), Some(7));
}

/// Both micro-kernels (AVX2's 6-row tiles, AVX-512's 12-row ones where the CPU has it) give
/// the chain's bits, over a range of rows that starts inside the matrix and ends in a
/// partial tile, into a wider output.
#[test]
fn both_tile_heights_give_the_chain_bits() {
    require_simd();
    let mut rng = Rng(0xbeef);
    let (rows, cols, m) = (40, 96, 19);
    let w = random_matrix(GgmlType::Q8_0, rows, cols, &mut rng);
    let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
    let want = chain_reference(&w, &x, m, true);
    let mut heights = vec![gemm::WR256];
    if dot::Simd::detect() == dot::Simd::Avx512 {
        heights.push(gemm::WR512);
    }
    let (start, end) = (3, 37);
    let panels = gemm::pack_activations(&x, m, cols);
    for wr in heights {
        let mut out = vec![f32::NAN; m * rows];
        // SAFETY: the CPU runs `wr`'s kernel; `out` has `m` rows of `rows >= end - start`.
        unsafe {
            let ptr = out.as_mut_ptr().add(start);
            let dequantize = |r: usize, out: &mut [f32], _: &mut Vec<u8>| w.dequantize_row(r, out);
            gemm::rows_in_tiles(wr, &dequantize, &panels, m, cols, start, end, ptr, rows);
        }
        for j in 0..m {
            for r in 0..rows {
                let (got, want) = (out[j * rows + r], want[j * rows + r]);
                if (start..end).contains(&r) {
                    assert_eq!(got.to_bits(), want.to_bits(), "wr {wr}, [{j}, {r}]");
                } else {
                    assert!(got.is_nan(), "wr {wr} wrote [{j}, {r}] outside its rows");
                }
            }
        }
    }
}

/// Below 32 rows (a speculative verification, a decode batch) a row keeps the decode
/// kernels' bits: a 15-row product's rows are the rows computed alone.
#[test]
fn fifteen_rows_keep_the_decode_bits() {
    let mut rng = Rng(0xcafe);
    for ty in [GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::F16] {
        let (rows, cols, m) = (21, 256, gemm::GEMM_MIN_ROWS - 1);
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
        let mut all = vec![f32::NAN; m * rows];
        w.matmul_with(&x, m, &mut all, ActivationFormat::F32, &threads());
        for j in 0..m {
            let mut one = vec![f32::NAN; rows];
            let xj = &x[j * cols..(j + 1) * cols];
            w.matmul_with(xj, 1, &mut one, ActivationFormat::F32, &threads());
            assert_eq!(&all[j * rows..(j + 1) * rows], &one[..], "{ty:?} row {j}");
        }
    }
}

#[test]
fn verification_batches_keep_the_decode_bits_over_long_rows() {
    // Below the prefill product's 32 rows, a batch (a speculative verification) must give
    // each row the bits of a one-row pass, for every batch size up to 15, on rows of 100
    // blocks (the group kernels' activation rows then no longer fit in L1 together).
    let mut rng = Rng(77);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_1,
    ] {
        let (rows, cols) = (17, 32 * 100);
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..15 * cols).map(|_| rng.float()).collect();
        let mut single = vec![0f32; 15 * rows];
        for j in 0..15 {
            let out = &mut single[j * rows..(j + 1) * rows];
            w.matmul_with(
                &x[j * cols..(j + 1) * cols],
                1,
                out,
                ActivationFormat::F32,
                &threads(),
            );
        }
        for m in 2..=15 {
            let mut all = vec![f32::NAN; m * rows];
            w.matmul_with(
                &x[..m * cols],
                m,
                &mut all,
                ActivationFormat::F32,
                &threads(),
            );
            assert_eq!(
                first_difference(&all, &single[..m * rows]),
                None,
                "{ty:?}, {m} rows"
            );
        }
    }
}

/// A caller that knows what its rows are picks the arithmetic whatever their number: a
/// prompt's rows the prefill product's FMA chain (one row, three, fifteen), decode rows the
/// decode kernels' bits (forty rows of a batch of decode steps, each as a product alone).
#[test]
fn the_arithmetic_asked_for_holds_at_any_row_count() {
    require_simd();
    let mut rng = Rng(0xa11);
    let prefill = threads().with_arithmetic(RowArithmetic::Prefill);
    let decode = threads().with_arithmetic(RowArithmetic::Decode);
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_0,
    ] {
        let (rows, cols) = (24, 256);
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..40 * cols).map(|_| rng.float()).collect();
        for m in [1, 3, 15] {
            let mut got = vec![f32::NAN; m * rows];
            w.matmul(&x[..m * cols], m, &mut got, &prefill);
            let want = chain_reference(&w, &x[..m * cols], m, true);
            assert_eq!(first_difference(&got, &want), None, "{ty:?} prefill, m={m}");
        }
        let mut batch = vec![f32::NAN; 40 * rows];
        w.matmul(&x, 40, &mut batch, &decode);
        for j in 0..40 {
            let mut one = vec![f32::NAN; rows];
            w.matmul(&x[j * cols..(j + 1) * cols], 1, &mut one, &threads());
            let row = &batch[j * rows..(j + 1) * rows];
            assert_eq!(first_difference(row, &one), None, "{ty:?} decode, row {j}");
        }
        // The default picks by count: forty rows take the prefill product.
        let mut by_rows = vec![f32::NAN; 40 * rows];
        w.matmul(&x, 40, &mut by_rows, &threads());
        let chain = chain_reference(&w, &x, 40, true);
        assert_eq!(first_difference(&by_rows, &chain), None, "{ty:?} by rows");
    }
}
