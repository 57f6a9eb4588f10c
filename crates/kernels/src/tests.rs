use super::dot::{Kernel, Simd};
use super::product::{transpose_rows, with_permuted};
use super::*;

/// Three threads (more than this machine's cores, so that tasks are split and stolen).
pub(super) fn threads() -> Kernels {
    Kernels::new(KernelOptions::threads(3))
}

pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub(super) fn float(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
}

pub(super) fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random blocks with finite, modest scales.
pub(super) fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> QuantMatrix {
    let bytes = random_bytes(ty, rows, cols, rng);
    QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).unwrap()
}

/// The GGUF bytes of [`random_matrix`].
pub(super) fn random_bytes(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n = rows * cols;
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| rng.float().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|_| f16_bytes(rng.float())).collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| ((rng.float().to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        _ => {
            let (block, size) = (ty.block_size(), ty.type_size());
            let mut bytes = Vec::new();
            for _ in 0..n / block {
                let mut b: Vec<u8> = (0..size).map(|_| rng.byte()).collect();
                let mut put = |at: usize, v: f32| b[at..at + 2].copy_from_slice(&f16_bytes(v));
                match ty {
                    GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q5_0 => put(0, rng.float() * 0.1),
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                        put(0, rng.float() * 0.1);
                        put(2, rng.float() * 0.1);
                    }
                    GgmlType::Q6_K => put(208, rng.float() * 0.01),
                    GgmlType::Q2_K => {
                        put(80, rng.float() * 0.01);
                        put(82, rng.float() * 0.01);
                    }
                    GgmlType::Q3_K => put(108, rng.float() * 0.01),
                    GgmlType::IQ4_NL | GgmlType::IQ4_XS => put(0, rng.float() * 0.01),
                    // The `f16` over the top nibbles of the four scale words.
                    GgmlType::IQ1_M => {
                        let d = half::f16::from_f32(rng.float().abs() * 0.01 + 1e-3).to_bits();
                        kindle_gguf::quant::set_iq1_m_scale(&mut b, d);
                    }
                    ty if crate::grid::grid(ty) => put(0, rng.float() * 0.01),
                    _ => unreachable!(),
                }
                bytes.extend(b);
            }
            bytes
        }
    }
}

pub(super) const TYPES: [GgmlType; 22] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// `sum |w| |x|` per output: the scale rounding errors are relative to.
pub(super) fn magnitudes(w: &QuantMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let abs_x: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    let mut row = vec![0f32; w.cols()];
    let mut out = vec![0f32; m * w.rows()];
    for r in 0..w.rows() {
        w.dequantize_row(r, &mut row);
        for j in 0..m {
            let xs = &abs_x[j * w.cols()..(j + 1) * w.cols()];
            out[j * w.rows() + r] = row.iter().zip(xs).map(|(a, b)| a.abs() * b).sum();
        }
    }
    out
}

fn check(ty: GgmlType, kernel: Kernel, rel_tol: f32) {
    let shapes = [(1, 256), (5, 512), (13, 256), (16, 256), (67, 768)];
    check_on(ty, kernel, rel_tol, &shapes, &[1, 2, 4, 5, 7]);
}

/// [`check`] on the given `(rows, cols)` shapes and activation row counts.
fn check_on(ty: GgmlType, kernel: Kernel, rel_tol: f32, shapes: &[(usize, usize)], ms: &[usize]) {
    let mut rng = Rng(0x1234_5678 ^ ty.id() as u64);
    for &(rows, cols) in shapes {
        let w = random_matrix(ty, rows, cols, &mut rng);
        for &m in ms {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
            let mut want = vec![0f32; m * rows];
            w.matmul_reference(&x, m, &mut want);
            let scale = magnitudes(&w, &x, m);
            let mut got = vec![f32::NAN; m * rows];
            w.matmul_kernel(&x, m, &mut got, kernel, &threads());
            for i in 0..m * rows {
                let err = (got[i] - want[i]).abs();
                assert!(
                    err <= rel_tol * scale[i] + 1e-6,
                    "{ty:?} {kernel:?} {rows}x{cols} m={m} [{i}]: got {} want {} (scale {})",
                    got[i],
                    want[i],
                    scale[i]
                );
            }
        }
    }
}

#[test]
fn f32_kernels_match_the_reference() {
    for ty in TYPES {
        for simd in Simd::available() {
            check(
                ty,
                Kernel::select_simd(ty, ActivationFormat::F32, simd),
                1e-5,
            );
        }
    }
}

/// Dense rows whose length is no multiple of the SIMD width end in a tail (a masked load at
/// AVX-512, scalar steps at AVX2): rows of 15, 17, 235 and 593 values against the
/// reference, alone and in every tile shape of the multi-row kernels (the AVX-512 `f16`
/// tiles' shares of six, nine, eleven and thirteen rows among them).
#[test]
fn dense_rows_with_a_tail_match_the_reference() {
    let shapes = [(13, 15), (13, 17), (29, 235), (7, 593)];
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for simd in Simd::available() {
            let kernel = Kernel::select_simd(ty, ActivationFormat::F32, simd);
            check_on(ty, kernel, 1e-5, &shapes, &[1, 2, 3, 6, 9, 11, 13]);
        }
    }
}

#[test]
fn int8_kernels_match_the_reference_within_activation_rounding() {
    // 8-bit activations round each value by up to half a step, 1/254 of the block maximum.
    for ty in TYPES {
        for simd in Simd::available() {
            check(
                ty,
                Kernel::select_simd(ty, ActivationFormat::Int8, simd),
                0.01,
            );
        }
    }
}

/// A `bf16` value widens exactly (it is an `f32`'s top half), and the dense kernels sum every
/// output in one order: a `BF16` matrix gives the bits of the `F32` matrix of its widened
/// values, at every SIMD level, alone and in batches, in either activation format (8-bit
/// activations fall back to `f32` on dense rows).
#[test]
fn bf16_rows_give_the_bits_of_their_f32_widening() {
    let mut rng = Rng(0xbf16);
    for (rows, cols) in [(29, 235), (16, 576), (3, 40)] {
        let bytes = random_bytes(GgmlType::BF16, rows, cols, &mut rng);
        let widened: Vec<u8> = bytes
            .chunks_exact(2)
            .flat_map(|b| (u32::from(u16::from_le_bytes([b[0], b[1]])) << 16).to_le_bytes())
            .collect();
        let bf16 = QuantMatrix::new(GgmlType::BF16, rows, cols, WeightBytes::owned(bytes)).unwrap();
        let f32s =
            QuantMatrix::new(GgmlType::F32, rows, cols, WeightBytes::owned(widened)).unwrap();
        for m in [1, 2, 3, 4, 5, 9, 12] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
            for simd in Simd::available() {
                for format in [ActivationFormat::F32, ActivationFormat::Int8] {
                    let mut want = vec![f32::NAN; m * rows];
                    let kernel = Kernel::select_simd(GgmlType::F32, format, simd);
                    f32s.matmul_kernel(&x, m, &mut want, kernel, &threads());
                    let mut got = vec![f32::NAN; m * rows];
                    let kernel = Kernel::select_simd(GgmlType::BF16, format, simd);
                    bf16.matmul_kernel(&x, m, &mut got, kernel, &threads());
                    for i in 0..got.len() {
                        assert_eq!(
                            got[i].to_bits(),
                            want[i].to_bits(),
                            "{simd:?} {format:?} {rows}x{cols} m={m} [{i}]: {} vs {}",
                            got[i],
                            want[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn simd_kernels_match_scalar_kernels() {
    // Every instruction set against the portable kernels, on shapes that leave rows outside
    // the packed groups and activation batches that are not a multiple of the kernels' four.
    // `Q4_K` and `Q5_K` (packed, their last group padded) in `f32` only: they have no
    // portable 8-bit kernel.
    let mut rng = Rng(99);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
    ] {
        let k = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K);
        let shapes = if k {
            [(37, 1536), (8, 256), (24, 512), (3, 256)]
        } else {
            [(37, 1536), (8, 32), (24, 96), (3, 64)]
        };
        let formats = if k {
            &[ActivationFormat::F32][..]
        } else {
            &[ActivationFormat::Int8, ActivationFormat::F32][..]
        };
        for (rows, cols) in shapes {
            let w = random_matrix(ty, rows, cols, &mut rng);
            for m in 1..=17 {
                let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
                let scale = magnitudes(&w, &x, m);
                for &format in formats {
                    let mut want = vec![f32::NAN; m * rows];
                    let scalar = Kernel::select_simd(ty, format, Simd::Scalar);
                    w.matmul_kernel(&x, m, &mut want, scalar, &threads());
                    for simd in Simd::available() {
                        let mut got = vec![f32::NAN; m * rows];
                        let kernel = Kernel::select_simd(ty, format, simd);
                        w.matmul_kernel(&x, m, &mut got, kernel, &threads());
                        for i in 0..got.len() {
                            assert!(
                                (got[i] - want[i]).abs() <= 1e-5 * scale[i] + 1e-7,
                                "{ty:?} {kernel:?} {rows}x{cols} m={m} [{i}]: {} vs {}",
                                got[i],
                                want[i]
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn vnni_and_avx2_agree_exactly() {
    // The integer dot products are exact either way, so the two give the same bits.
    if !Simd::available().contains(&Simd::Vnni) {
        return;
    }
    let mut rng = Rng(5);
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_1,
        GgmlType::Q5_K,
    ] {
        let cols = if ty.block_size() == 256 { 768 } else { 576 };
        let w = random_matrix(ty, 40, cols, &mut rng);
        for m in [1, 3, 6] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float() * 4.0).collect();
            for format in [ActivationFormat::Int8, ActivationFormat::F32] {
                let mut a = vec![0f32; m * 40];
                let mut b = vec![0f32; m * 40];
                w.matmul_kernel(
                    &x,
                    m,
                    &mut a,
                    Kernel::select_simd(ty, format, Simd::Avx2),
                    &threads(),
                );
                w.matmul_kernel(
                    &x,
                    m,
                    &mut b,
                    Kernel::select_simd(ty, format, Simd::Vnni),
                    &threads(),
                );
                assert_eq!(a, b, "{ty:?} {format:?} m={m}");
            }
        }
    }
}

#[test]
fn packed_rows_dequantize_to_the_file_rows() {
    let mut rng = Rng(11);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q3_K,
        GgmlType::Q2_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ] {
        for rows in [1, 8, 13, 24, 31] {
            let cols = 3 * ty.block_size();
            let (block, size) = (ty.block_size(), ty.type_size());
            // Finite scales: the first four bytes, or a K-quant's last two or four.
            let scale = |at: usize| match ty {
                GgmlType::Q6_K | GgmlType::Q3_K => at >= size - 2,
                GgmlType::Q2_K => at >= size - 4,
                _ => at < 4,
            };
            let bytes: Vec<u8> = (0..rows * cols / block * size)
                .map(|i| if scale(i % size) { 0x30 } else { rng.byte() })
                .collect();
            let w = QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes.clone())).unwrap();
            let row_bytes = cols / block * size;
            let mut got = vec![0f32; cols];
            let mut want = vec![0f32; cols];
            for r in 0..rows {
                w.dequantize_row(r, &mut got);
                kindle_gguf::quant::dequantize(
                    ty,
                    &bytes[r * row_bytes..(r + 1) * row_bytes],
                    &mut want,
                )
                .unwrap();
                assert_eq!(got, want, "{ty:?} {rows} rows, row {r}");
            }
        }
    }
}

#[test]
fn batched_products_give_the_bits_of_single_rows() {
    // Decode (m = 1) and prefill (m > 1) run the same arithmetic per output, in either
    // activation format, so a cached prefix sees exactly what a fresh prefill computed.
    let mut rng = Rng(21);
    // Dense rows of 235 values (SIMD loops and tails); 576 or 768 values (18, 24 blocks):
    // two chunks of the AVX-512 kernels' eight block columns and a partial one.
    for (ty, cols) in [
        (GgmlType::Q4_0, 576),
        (GgmlType::Q4_1, 576),
        (GgmlType::Q8_0, 576),
        (GgmlType::Q5_0, 576),
        (GgmlType::Q5_1, 576),
        (GgmlType::Q4_K, 768),
        (GgmlType::F32, 235),
        (GgmlType::F16, 235),
        (GgmlType::BF16, 235),
    ] {
        let w = random_matrix(ty, 29, cols, &mut rng);
        // Up to 23 rows: one and several calls of every multi-row kernel, partial ones, and
        // both loop orders of the AVX-512 `f32` kernels (`x86_512.rs`), split 12 + 11; five
        // and seven: the AVX2 dense tiles' groups of three and two (3 + 2, 3 + 2 + 2); every
        // AVX-512 dense tile's shares (6 + 5 for eleven, 7 + 6 for thirteen, 8 + 8 + 7).
        for m in [2, 3, 4, 5, 6, 7, 9, 11, 13, 16, 23] {
            batch_bits(&w, m, cols, &mut rng);
        }
        if ty.block_size() == 32 {
            // Rows too long for the AVX-512 tiles' activations to stay in L1: block columns
            // in chunks (24 + 24 + 16 for five rows).
            let w = random_matrix(ty, 13, 2048, &mut rng);
            batch_bits(&w, 9, 2048, &mut rng);
        }
    }
}

/// Asserts that `m` rows multiplied together give the bits of each row multiplied alone.
pub(super) fn batch_bits(w: &QuantMatrix, m: usize, cols: usize, rng: &mut Rng) {
    let (ty, rows) = (w.ty(), w.rows());
    let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
    for format in [ActivationFormat::Int8, ActivationFormat::F32] {
        let mut all = vec![f32::NAN; m * rows];
        w.matmul_with(&x, m, &mut all, format, &threads());
        for j in 0..m {
            let mut one = vec![f32::NAN; rows];
            let row = &x[j * cols..(j + 1) * cols];
            w.matmul_with(row, 1, &mut one, format, &threads());
            assert_eq!(
                &all[j * rows..(j + 1) * rows],
                &one[..],
                "{ty:?} {format:?} row {j} of {m}"
            );
        }
    }
}

#[test]
fn a_task_longer_than_a_transpose_chunk_fills_every_output_once() {
    // One thread, so one task takes every row: its sums go to the output a chunk of
    // `transpose_rows(m)` rows at a time, the last chunk partial (and, for 13 extra rows, a
    // partial group). Each output has the bits of its row computed alone.
    let mut rng = Rng(33);
    let one_thread = Kernels::new(KernelOptions::threads(1));
    for (ty, m) in [
        (GgmlType::Q4_1, 9),
        (GgmlType::Q8_0, 3),
        (GgmlType::Q5_0, 2),
    ] {
        let rows = 2 * transpose_rows(m) + 13;
        let cols = 64;
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
        for format in [ActivationFormat::Int8, ActivationFormat::F32] {
            let mut all = vec![f32::NAN; m * rows];
            w.matmul_with(&x, m, &mut all, format, &one_thread);
            for j in 0..m {
                let mut one = vec![f32::NAN; rows];
                w.matmul_with(
                    &x[j * cols..(j + 1) * cols],
                    1,
                    &mut one,
                    format,
                    &one_thread,
                );
                let batch = &all[j * rows..(j + 1) * rows];
                for (r, (a, b)) in batch.iter().zip(&one).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{ty:?} {format:?} row {j}, output {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn threaded_products_match_single_rows() {
    // Odd row counts split over tasks must fill every output exactly once. With int8
    // activations each row's arithmetic is the same whatever the batch, so the match is exact;
    // the f32 path runs several rows per weight pass, which reorders the sums slightly.
    let mut rng = Rng(7);
    let w = random_matrix(GgmlType::Q4_1, 1001, 64, &mut rng);
    let x: Vec<f32> = (0..5 * 64).map(|_| rng.float()).collect();
    for format in [ActivationFormat::Int8, ActivationFormat::F32] {
        let mut all = vec![f32::NAN; 5 * 1001];
        w.matmul_with(&x, 5, &mut all, format, &threads());
        for j in 0..5 {
            let mut one = vec![0f32; 1001];
            w.matmul_with(&x[j * 64..(j + 1) * 64], 1, &mut one, format, &threads());
            let batch = &all[j * 1001..(j + 1) * 1001];
            for (i, (a, b)) in batch.iter().zip(&one).enumerate() {
                let tolerance = if format == ActivationFormat::Int8 {
                    0.0
                } else {
                    1e-5 * (1.0 + b.abs())
                };
                assert!(
                    (a - b).abs() <= tolerance,
                    "{format:?} row {j} [{i}]: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn construction_checks_the_shape() {
    let bytes = WeightBytes::owned(vec![0; 20]);
    assert!(matches!(
        QuantMatrix::new(GgmlType::Q4_1, 2, 32, bytes.clone()),
        Err(KernelError::SizeMismatch { .. })
    ));
    assert!(matches!(
        QuantMatrix::new(GgmlType::Q4_1, 1, 16, bytes.clone()),
        Err(KernelError::PartialBlock { .. })
    ));
    assert!(matches!(
        QuantMatrix::new(GgmlType::Q8_K, 1, 256, bytes),
        Err(KernelError::UnsupportedType(GgmlType::Q8_K))
    ));
    assert!(QuantMatrix::new(GgmlType::Q4_1, 1, 32, WeightBytes::owned(vec![0; 20])).is_ok());
}

#[test]
#[cfg(target_arch = "x86_64")]
fn simd_activation_quantizer_matches_the_scalar_one() {
    if Simd::detect() == Simd::Scalar {
        return;
    }
    let mut rng = Rng(3);
    for case in 0..200 {
        let mut x: Vec<f32> = (0..32).map(|_| rng.float() * 3.0).collect();
        match case % 4 {
            // Exact halves after scaling: amax 127 makes the scale 1.
            0 => {
                x[0] = 127.0;
                for (i, v) in x.iter_mut().enumerate().skip(1) {
                    *v = (i as f32 - 16.0) + 0.5;
                }
            }
            1 => x.iter_mut().for_each(|v| *v = 0.0),
            2 => x[5] = -x.iter().fold(0f32, |a, v| a.max(v.abs())) * 2.0,
            _ => {}
        }
        // SAFETY: SIMD was detected; 32 values.
        let got = unsafe { super::x86::quantize_block_q8(&x) };
        let want = super::q8::quantize_block_scalar(&x);
        assert_eq!(got.qs, want.qs, "case {case}");
        assert_eq!(got.d.to_bits(), want.d.to_bits(), "case {case}");
        assert_eq!(got.s.to_bits(), want.s.to_bits(), "case {case}");
    }
}

#[test]
fn the_pool_runs_every_task_once_across_many_jobs() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pool = pool::shared(3);
    for n in [0, 1, 2, 5, 64] {
        for _ in 0..200 {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{n} tasks"
            );
        }
    }
}

/// Jobs of changing task counts one after another (the attention's 9 or 72 tasks between a
/// product's 2): every task runs once per job and every job returns; a watchdog turns a hang
/// into a failure. A stress test: the race it guards against (a worker still looping over a
/// finished job claimed a task of the next, larger one between the caller's two stores, ran
/// it and left the done count past the total: `kindle serve` hung in CI) has a window of a
/// few nanoseconds, and this loop did not reproduce it before the fix.
#[test]
fn the_pool_survives_jobs_of_changing_task_counts() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pool = pool::shared(3);
        let mut bad = None;
        'jobs: for round in 0..4000 {
            for n in [2, 9, 3, 17, 2, 64, 5] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                if !hits.iter().all(|h| h.load(Ordering::Relaxed) == 1) {
                    bad = Some(format!(
                        "round {round}, {n} tasks: a task ran twice or never"
                    ));
                    break 'jobs;
                }
            }
        }
        let _ = sender.send(bad);
    });
    match receiver.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(None) => {}
        Ok(Some(message)) => panic!("{message}"),
        Err(_) => panic!("a job did not return within 120 s: the pool hangs"),
    }
}

#[test]
fn handles_with_the_same_thread_count_share_a_pool() {
    let (a, b) = (
        threads(),
        threads().with_activations(ActivationFormat::Int8),
    );
    assert!(std::ptr::eq(a.pool(), b.pool()));
    assert_eq!((a.threads(), b.threads()), (3, 3));
    assert_eq!(b.activations(), ActivationFormat::Int8);
    let one = a.with_threads(1);
    assert_eq!(one.threads(), 1);
    assert!(!std::ptr::eq(a.pool(), one.pool()));
    assert_eq!(Kernels::new(KernelOptions::threads(0)).threads(), 1);
}

#[test]
fn products_run_together_give_the_bits_of_products_run_alone() {
    // `matmul_many` shares one pool job (and each activation form) among matrices of one
    // input, of different types and row counts; every output keeps `matmul`'s bits.
    let mut rng = Rng(77);
    let cols = 512;
    let types = [
        (GgmlType::Q5_0, 72),
        (GgmlType::Q8_0, 16),
        (GgmlType::Q5_0, 40),
        (GgmlType::Q4_K, 24),
        (GgmlType::Q4_1, 9),
        (GgmlType::F16, 5),
        (GgmlType::BF16, 7),
    ];
    let ws: Vec<QuantMatrix> = types
        .iter()
        .map(|&(ty, rows)| random_matrix(ty, rows, cols, &mut rng))
        .collect();
    for format in [ActivationFormat::F32, ActivationFormat::Int8] {
        let kernels = Kernels::new(KernelOptions {
            activations: format,
            ..KernelOptions::threads(2)
        });
        for m in [1, 3, 9] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
            let alone: Vec<Vec<f32>> = ws
                .iter()
                .map(|w| {
                    let mut out = vec![f32::NAN; m * w.rows()];
                    w.matmul(&x, m, &mut out, &kernels);
                    out
                })
                .collect();
            let mut together: Vec<Vec<f32>> =
                ws.iter().map(|w| vec![f32::NAN; m * w.rows()]).collect();
            let mut products: Vec<(&QuantMatrix, &mut [f32])> = ws
                .iter()
                .zip(together.iter_mut())
                .map(|(w, out)| (w, &mut out[..]))
                .collect();
            QuantMatrix::matmul_many(&mut products, &x, m, &kernels);
            for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
                assert_eq!(a, t, "{:?} {format:?} m={m}", types[i].0);
            }
        }
    }
}

/// Rows `start..` of packed matrix `w` times the `m` activation rows `x`, by the `f32`
/// decode kernel of level `simd` (`[rows - start, m]`).
fn f32_rows_at(w: &QuantMatrix, simd: Simd, x: &[f32], m: usize, start: usize) -> Vec<f32> {
    let (rows, cols) = (w.rows(), x.len() / m);
    let kernel = Kernel::select_simd(w.ty(), ActivationFormat::F32, simd);
    let prepared = Prepared::new(kernel, true, x, cols, RowArithmetic::Decode);
    let acts = prepared.activations(x, cols, m);
    let mut out = vec![f32::NAN; (rows - start) * m];
    with_permuted(kernel, prepared.permute, &acts, |acts| {
        kernel.rows(&w.weights(), acts, start, rows, &mut out)
    });
    out
}

#[test]
fn sixteen_lane_pairs_of_groups_give_the_bits_of_single_groups() {
    // AVX-512 `f32` products of `Q4`, `Q5` and `Q6_K` run two groups at a time in 16-lane
    // vectors and a group left over alone: a row's bits must not depend on which. Here the
    // same rows are computed from group 0 (pairs 0+1, 2+3, group 4 alone) and from group 1
    // (pairs 1+2, 3+4), so that every group runs in both places.
    let mut rng = Rng(1616);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q4_K,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let (rows, cols, m) = (40, 512, 3);
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
        for simd in Simd::available() {
            let from = |start: usize| f32_rows_at(&w, simd, &x, m, start);
            let (all, shifted) = (from(0), from(8));
            assert_eq!(&all[8 * m..], &shifted[..], "{ty:?} {simd:?}");
            assert!(all.iter().all(|v| v.is_finite()), "{ty:?} {simd:?}");
        }
    }
}

#[test]
fn the_avx512_q4_kernel_gives_the_bits_of_the_avx2_one() {
    // `x86::q4_512::q4_f32_x16` runs the AVX2 `f32` `Q4` kernel's operations in each lane, so
    // a row has the same bits at either level (checked where the CPU runs it: AVX-512 in
    // 256-bit halves; elsewhere the AVX-512 level looks the weights up, `x86_512.rs`).
    if !Simd::available().contains(&Simd::Avx512) || !crate::simd::avx512_in_halves() {
        eprintln!("this CPU does not run the 16-lane `Q4` kernel");
        return;
    }
    let mut rng = Rng(4512);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K] {
        let (rows, cols) = (40, 512);
        let w = random_matrix(ty, rows, cols, &mut rng);
        for m in [1, 2, 3, 5, 9] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.float()).collect();
            let run = |simd: Simd| f32_rows_at(&w, simd, &x, m, 0);
            let (avx2, avx512) = (run(Simd::Avx2), run(Simd::Avx512));
            assert!(avx2.iter().all(|v| v.is_finite()), "{ty:?} m={m}");
            assert_eq!(
                avx2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                avx512.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{ty:?} m={m}"
            );
        }
    }
}
