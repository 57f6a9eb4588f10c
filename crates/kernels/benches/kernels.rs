//! Throughput of the quantized matrix kernels, in GB/s of weight bytes read, next to a plain
//! memory-read baseline.
//!
//! `cargo bench -p kindle-kernels --bench kernels`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kindle_gguf::quant::GgmlType;
use kindle_kernels::{ActivationFormat, Kernels, QuantMatrix, RowArithmetic, WeightBytes};

/// A matrix of pseudo-random blocks with finite scales.
fn matrix(ty: GgmlType, rows: usize, cols: usize) -> QuantMatrix {
    let (block, size) = (ty.block_size(), ty.type_size());
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        // Dense weights: finite values in (-0.05, 0.05).
        let mut bytes = Vec::with_capacity(rows * cols * size);
        for _ in 0..rows * cols {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            match ty {
                GgmlType::F16 => bytes.extend(half::f16::from_f32(v).to_le_bytes()),
                GgmlType::BF16 => bytes.extend(half::bf16::from_f32(v).to_le_bytes()),
                _ => bytes.extend(v.to_le_bytes()),
            }
        }
        return QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).expect("dense");
    }
    let mut bytes = Vec::with_capacity(rows * cols / block * size);
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for _ in 0..rows * cols / block {
        let start = bytes.len();
        bytes.extend((0..size).map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        }));
        let b = &mut bytes[start..];
        match ty {
            GgmlType::Q6_K => b[208..210].copy_from_slice(&scale),
            GgmlType::Q3_K => b[108..110].copy_from_slice(&scale),
            GgmlType::Q2_K => {
                b[80..82].copy_from_slice(&scale);
                b[82..84].copy_from_slice(&scale);
            }
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                b[0..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&scale);
            }
            // The `f16` over the top nibbles of the four scale words.
            GgmlType::IQ1_M => {
                let d = u16::from_le_bytes(scale);
                kindle_gguf::quant::set_iq1_m_scale(b, d);
            }
            _ => b[0..2].copy_from_slice(&scale),
        }
    }
    QuantMatrix::new(ty, rows, cols, WeightBytes::owned(bytes)).expect("whole blocks")
}

fn bench_product(
    c: &mut Criterion,
    name: &str,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    m: usize,
    formats: &[ActivationFormat],
) {
    let w = matrix(ty, rows, cols);
    let x: Vec<f32> = (0..m * cols)
        .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
        .collect();
    let mut y = vec![0f32; m * rows];
    // `KINDLE_THREADS`, else the physical cores.
    let kernels = Kernels::default();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(w.n_bytes() as u64));
    for &format in formats {
        group.bench_function(format!("{format:?}"), |b| {
            b.iter(|| w.matmul_with(black_box(&x), m, &mut y, format, &kernels))
        });
    }
    group.finish();
}

fn kernels(c: &mut Criterion) {
    use ActivationFormat::{F32, Int8};
    let both = [Int8, F32];
    // Decode shapes of SmolLM2-135M: attention (q/o, k/v), FFN (gate/up, down) and the tied
    // Q8_0 head. Named rows x cols.
    bench_product(c, "q4_1_576x576_m1", GgmlType::Q4_1, 576, 576, 1, &both);
    bench_product(c, "q4_1_192x576_m1", GgmlType::Q4_1, 192, 576, 1, &both);
    bench_product(c, "q4_1_1536x576_m1", GgmlType::Q4_1, 1536, 576, 1, &both);
    bench_product(c, "q4_1_576x1536_m1", GgmlType::Q4_1, 576, 1536, 1, &both);
    bench_product(c, "q8_0_49152x576_m1", GgmlType::Q8_0, 49152, 576, 1, &both);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let name = format!("{}_1536x576_m1", ty.name().to_lowercase());
        bench_product(c, &name, ty, 1536, 768, 1, &both);
    }
    // Prefill: 64 activation rows per weight pass.
    bench_product(c, "q4_1_1536x576_m64", GgmlType::Q4_1, 1536, 576, 64, &both);
    bench_product(
        c,
        "q4_k_1536x768_m64",
        GgmlType::Q4_K,
        1536,
        768,
        64,
        &[F32],
    );
}

/// Every fast type on the same shapes, both activation formats: the per-byte comparison with
/// `Q4_1` (`cargo bench -p kindle-kernels --bench kernels -- same_shape`). SmolLM2's and
/// Gemma-3-270M's FFN down take every type (rows of whole K-quant super-blocks); Gemma's FFN
/// gate/up (640 columns, not whole super-blocks: the file stores them `Q5_0`) the 32-value
/// block types.
fn same_shape(c: &mut Criterion) {
    use ActivationFormat::{F32, Int8};
    let legacy = [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
    ];
    let k = [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
        // The grid quants: decoded a tile at a time, then the dense `f32` kernels.
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ];
    for (rows, cols) in [(576, 1536), (640, 2048), (2048, 640)] {
        let types = if cols % 256 == 0 {
            legacy.iter().chain(&k).copied().collect::<Vec<_>>()
        } else {
            legacy.to_vec()
        };
        for ty in types {
            let name = format!("same_shape_{rows}x{cols}_{}", ty.name().to_lowercase());
            bench_product(c, &name, ty, rows, cols, 1, &[Int8, F32]);
        }
    }
}

/// Several activation rows in the decode kernels' arithmetic (`RowArithmetic::Decode`):
/// speculative verification (a draft of k tokens is k + 1 rows), batched decode and
/// `kindle serve`'s steps (`cargo bench -p kindle-kernels --bench kernels -- rows_`). Time
/// per call against `m = 1` is what a verification costs in one-row steps.
fn rows(c: &mut Criterion) {
    for m in [1, 2, 3, 4, 5, 6, 9, 15, 16, 64] {
        // SmolLM2's FFN gate/up and down, a slice of its `Q8_0` head, and Gemma-3's FFN
        // gate/up (`Q5_0`) and down (`Q6_K` in half of its layers).
        let shapes = [
            (GgmlType::Q4_1, 1536, 576),
            (GgmlType::Q4_1, 576, 1536),
            (GgmlType::Q8_0, 4096, 576),
            (GgmlType::Q5_0, 2048, 640),
            (GgmlType::Q6_K, 640, 2048),
            // Dense targets of a speculative pair (`kindle quantize --type f16|f32`).
            (GgmlType::F16, 1536, 576),
            (GgmlType::BF16, 1536, 576),
            (GgmlType::F32, 1536, 576),
            (GgmlType::F16, 576, 1536),
        ];
        for (ty, rows, cols) in shapes {
            let name = format!("rows_{}_{rows}x{cols}_m{m}", ty.name().to_lowercase());
            let w = matrix(ty, rows, cols);
            let x: Vec<f32> = (0..m * cols)
                .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
                .collect();
            let mut y = vec![0f32; m * rows];
            let kernels = Kernels::default().with_arithmetic(RowArithmetic::Decode);
            let mut group = c.benchmark_group(name);
            group.throughput(Throughput::Bytes(w.n_bytes() as u64));
            for format in [ActivationFormat::Int8, ActivationFormat::F32] {
                group.bench_function(format!("{format:?}"), |b| {
                    b.iter(|| w.matmul_with(black_box(&x), m, &mut y, format, &kernels))
                });
            }
            group.finish();
        }
    }
}

fn memory_baseline(c: &mut Criterion) {
    let buffer: Vec<u64> = (0..(256usize << 20) / 8).map(|i| i as u64).collect();
    let mut group = c.benchmark_group("memory_read_256MB");
    group.throughput(Throughput::Bytes((buffer.len() * 8) as u64));
    group.sample_size(10);
    group.bench_function("sum_u64", |b| {
        b.iter(|| {
            // Eight independent sums so the loop is bound by loads, not by an add chain.
            let mut acc = [0u64; 8];
            for chunk in black_box(&buffer).chunks_exact(8) {
                for k in 0..8 {
                    acc[k] = acc[k].wrapping_add(chunk[k]);
                }
            }
            acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
        })
    });
    group.finish();
}

/// Gemma-3-270M's prefill shapes (one 512-row slice of a prompt, as the host executor runs
/// it), in multiply-adds per second: `cargo bench -p kindle-kernels --bench kernels -- prefill`.
/// `F32` runs the prefill product; `Int8` the integer group kernels on packed types, the
/// prefill product on the others.
fn prefill(c: &mut Criterion) {
    use ActivationFormat::{F32, Int8};
    let m = 512;
    for (ty, rows, cols) in [
        (GgmlType::Q5_0, 2048, 640),
        (GgmlType::Q5_0, 1024, 640),
        (GgmlType::Q4_K, 640, 1024),
        (GgmlType::Q6_K, 640, 2048),
        (GgmlType::Q8_0, 256, 640),
        (GgmlType::Q4_1, 1536, 576),
    ] {
        let w = matrix(ty, rows, cols);
        let x: Vec<f32> = (0..m * cols)
            .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
            .collect();
        let mut y = vec![0f32; m * rows];
        let kernels = Kernels::default();
        let name = format!("prefill_{}_{rows}x{cols}_m{m}", ty.name().to_lowercase());
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements((rows * cols * m) as u64));
        group.sample_size(20);
        for format in [F32, Int8] {
            group.bench_function(format!("{format:?}"), |b| {
                b.iter(|| w.matmul_with(black_box(&x), m, &mut y, format, &kernels))
            });
        }
        group.finish();
    }
}

/// The machine's ceiling for the AVX2 `f32` `Q4` group kernel's inner step, with no weights
/// to fetch: `cargo bench -p kindle-kernels --bench kernels -- step_ceiling`. A step is what
/// `x86::avx2::q4_1_f32` does for one nibble position of one quant word: isolate the nibble
/// (a shift and an `and`), convert it, and for each of `R` activation rows one FMA reading a
/// vector of copies, eight chains in flight. Rows of `cols` values in eight copies, as the
/// kernel reads them: 256 (8 KiB a row) and SmolLM2's 576 (18 KiB: two rows outgrow a 32 KiB
/// L1). Elements are weights times rows, to compare with `rows_q4_1_*`'s weights a second
/// times `m`; the kernel adds its transposes, block-end sums and weight loads.
#[cfg(target_arch = "x86_64")]
fn step_ceiling(c: &mut Criterion) {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        return;
    }
    let mut group = c.benchmark_group("step_ceiling");
    for cols in [256usize, 576] {
        // Eight values of each row a quant word.
        let words = cols / 8;
        let quants: Vec<u32> = (0..8 * words as u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9))
            .collect();
        let x: Vec<f32> = (0..2 * 64 * words)
            .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
            .collect();
        let rounds = 8192 / words;
        for rows in [1usize, 2] {
            group.throughput(Throughput::Elements((rounds * words * 64 * rows) as u64));
            group.bench_function(format!("rows{rows}_cols{cols}"), |b| {
                // SAFETY: AVX2 and FMA were detected above; `x` holds two rows of 64 values a
                // word.
                b.iter(|| unsafe {
                    if rows == 1 {
                        ceiling::steps::<1>(black_box(&quants), black_box(&x), rounds)
                    } else {
                        ceiling::steps::<2>(black_box(&quants), black_box(&x), rounds)
                    }
                })
            });
        }
    }
    group.finish();
}

#[cfg(not(target_arch = "x86_64"))]
fn step_ceiling(_: &mut Criterion) {}

#[cfg(target_arch = "x86_64")]
mod ceiling {
    use std::arch::x86_64::*;

    /// `rounds` passes of eight steps over each of `words.len() / 8` quant words (eight
    /// lanes each) for `R` activation rows of 64 values a word (`x`, row after row).
    ///
    /// # Safety
    /// AVX2 and FMA must be available and `x` hold `R * 64 * words.len() / 8` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn steps<const R: usize>(words: &[u32], x: &[f32], rounds: usize) -> f32 {
        let n = words.len() / 8;
        let mask = _mm256_set1_epi32(0xF);
        let mut acc = [_mm256_setzero_ps(); 8];
        for _ in 0..rounds {
            for w in 0..n {
                // SAFETY: word `w` and its `R` rows of 64 values lie within the slices.
                unsafe {
                    let mut part = _mm256_loadu_si256(words.as_ptr().add(8 * w) as *const __m256i);
                    for p in 0..8 {
                        let q = _mm256_cvtepi32_ps(_mm256_and_si256(part, mask));
                        part = _mm256_srli_epi32::<4>(part);
                        for j in 0..R {
                            let v = _mm256_loadu_ps(x.as_ptr().add(64 * (n * j + w) + 8 * p));
                            let k = (p + 4 * j) % 8;
                            acc[k] = _mm256_fmadd_ps(q, v, acc[k]);
                        }
                    }
                }
            }
        }
        let mut sum = [0f32; 8];
        let total = acc
            .iter()
            .fold(_mm256_setzero_ps(), |a, &b| _mm256_add_ps(a, b));
        // SAFETY: `sum` holds eight floats.
        unsafe { _mm256_storeu_ps(sum.as_mut_ptr(), total) };
        sum.iter().sum()
    }
}

criterion_group!(
    benches,
    kernels,
    same_shape,
    rows,
    prefill,
    memory_baseline,
    step_ceiling
);
criterion_main!(benches);
