//! Choosing a kernel for a weight type and applying it to a range of rows.

use super::q8::BlockQ8;
use crate::quant::{self, GgmlType};

/// The activations of one product, in the forms the kernels read.
pub(crate) struct Activations<'a> {
    /// `[m, cols]` row-major.
    pub f32: &'a [f32],
    /// `[m, cols / 32]` blocks (empty for an `f32` kernel).
    pub q8: &'a [BlockQ8],
    /// Values per activation row.
    pub cols: usize,
    /// Activation rows.
    pub m: usize,
}

/// How one weight row meets one activation row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Integer dot products against 8-bit activations (`Q4_0`, `Q4_1`, `Q8_0`).
    Int8 { ty: GgmlType, simd: bool },
    /// `f32` dot products, weights dequantised on the fly.
    F32 { ty: GgmlType, simd: bool },
}

/// Whether the AVX2 kernels can run on this CPU.
pub(crate) fn has_simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static DETECTED: OnceLock<bool> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Kernel {
    /// The kernel for `ty` with activations in `format`, SIMD where the CPU has it.
    pub fn select(ty: GgmlType, format: super::ActivationFormat) -> Self {
        Self::select_simd(ty, format, has_simd())
    }

    /// As [`Kernel::select`], with SIMD on or off (tests compare both).
    pub fn select_simd(ty: GgmlType, format: super::ActivationFormat, simd: bool) -> Self {
        let int8_type = matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0);
        if format == super::ActivationFormat::Int8 && int8_type {
            Kernel::Int8 { ty, simd }
        } else {
            Kernel::F32 { ty, simd }
        }
    }

    /// Whether the kernel reads 8-bit activations.
    pub fn int8(self) -> bool {
        matches!(self, Kernel::Int8 { .. })
    }

    /// `out[r * m + j] = row r of data . activation row j` for every row of `data`.
    pub fn rows(self, data: &[u8], row_bytes: usize, acts: &Activations, out: &mut [f32]) {
        let (m, cols) = (acts.m, acts.cols);
        let nb = cols / 32;
        match self {
            Kernel::Int8 { ty, simd } => {
                // Tiles of rows small enough to stay in L1 while every activation row passes.
                for (tile_index, tile) in data.chunks(row_bytes * 8).enumerate() {
                    for j in 0..m {
                        let y = &acts.q8[j * nb..(j + 1) * nb];
                        for (r, row) in tile.chunks_exact(row_bytes).enumerate() {
                            out[(tile_index * 8 + r) * m + j] = dot_q8(ty, simd, row, y);
                        }
                    }
                }
            }
            Kernel::F32 { ty, simd } => {
                let mut buf = Vec::new();
                for (r, row) in data.chunks_exact(row_bytes).enumerate() {
                    if m == 1 && fused_f32(ty) {
                        out[r] = dot_fused_f32(ty, simd, row, acts.f32);
                        continue;
                    }
                    // Dequantise the row once and reuse it for every activation row.
                    buf.resize(cols, 0.0);
                    quant::dequantize(ty, row, &mut buf).expect("shape checked at construction");
                    for j in 0..m {
                        out[r * m + j] = dot_f32(simd, &buf, &acts.f32[j * cols..(j + 1) * cols]);
                    }
                }
            }
        }
    }
}

/// Whether `ty` has a fused dequantise-and-multiply `f32` kernel.
fn fused_f32(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// One weight row (whole blocks of `ty`) times one quantized activation row.
#[inline]
fn dot_q8(ty: GgmlType, simd: bool, row: &[u8], y: &[BlockQ8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C were detected.
        unsafe {
            return match ty {
                GgmlType::Q4_0 => super::x86::dot_q4_0_q8(row, y),
                GgmlType::Q4_1 => super::x86::dot_q4_1_q8(row, y),
                _ => super::x86::dot_q8_0_q8(row, y),
            };
        }
    }
    let _ = simd;
    match ty {
        GgmlType::Q4_0 => scalar::dot_q4_0_q8(row, y),
        GgmlType::Q4_1 => scalar::dot_q4_1_q8(row, y),
        _ => scalar::dot_q8_0_q8(row, y),
    }
}

/// One weight row of a [`fused_f32`] type times an `f32` activation row.
#[inline]
fn dot_fused_f32(ty: GgmlType, simd: bool, row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C were detected.
        unsafe {
            return match ty {
                GgmlType::Q4_0 => super::x86::dot_q4_0_f32(row, x),
                GgmlType::Q4_1 => super::x86::dot_q4_1_f32(row, x),
                _ => super::x86::dot_q8_0_f32(row, x),
            };
        }
    }
    let _ = simd;
    scalar::dot_blocks_f32(ty, row, x)
}

/// `a . b` in `f32`.
#[inline]
fn dot_f32(simd: bool, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when AVX2, FMA and F16C were detected.
        unsafe {
            return super::x86::dot_f32(a, b);
        }
    }
    let _ = simd;
    scalar::dot_f32(a, b)
}

/// Portable kernels: the fallback on CPUs without AVX2 and the reference for the SIMD ones.
pub(crate) mod scalar {
    use super::BlockQ8;
    use crate::quant::{self, GgmlType};

    fn f16(lo: u8, hi: u8) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
    }

    /// `Q4_0` row times 8-bit activations.
    pub fn dot_q4_0_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
        let mut sum = 0f32;
        for (b, y) in row.chunks_exact(18).zip(y) {
            let d = f16(b[0], b[1]);
            let mut isum = 0i32;
            for j in 0..16 {
                let q = b[2 + j];
                isum += (i32::from(q & 0x0F) - 8) * i32::from(y.qs[j]);
                isum += (i32::from(q >> 4) - 8) * i32::from(y.qs[j + 16]);
            }
            sum += d * y.d * isum as f32;
        }
        sum
    }

    /// `Q4_1` row times 8-bit activations.
    pub fn dot_q4_1_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
        let mut sum = 0f32;
        for (b, y) in row.chunks_exact(20).zip(y) {
            let (d, m) = (f16(b[0], b[1]), f16(b[2], b[3]));
            let mut isum = 0i32;
            for j in 0..16 {
                let q = b[4 + j];
                isum += i32::from(q & 0x0F) * i32::from(y.qs[j]);
                isum += i32::from(q >> 4) * i32::from(y.qs[j + 16]);
            }
            sum += d * y.d * isum as f32 + m * y.s;
        }
        sum
    }

    /// `Q8_0` row times 8-bit activations.
    pub fn dot_q8_0_q8(row: &[u8], y: &[BlockQ8]) -> f32 {
        let mut sum = 0f32;
        for (b, y) in row.chunks_exact(34).zip(y) {
            let d = f16(b[0], b[1]);
            let isum: i32 = b[2..]
                .iter()
                .zip(&y.qs)
                .map(|(&w, &v)| i32::from(w as i8) * i32::from(v))
                .sum();
            sum += d * y.d * isum as f32;
        }
        sum
    }

    /// Any dequantisable row times `f32` activations, one block at a time.
    pub fn dot_blocks_f32(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
        let (block, bytes) = (ty.block_size(), ty.type_size());
        let mut buf = [0f32; 256];
        let mut sum = 0f32;
        for (b, xs) in row.chunks_exact(bytes).zip(x.chunks_exact(block)) {
            quant::dequantize(ty, b, &mut buf[..block]).expect("whole block");
            sum += dot_f32(&buf[..block], xs);
        }
        sum
    }

    /// `a . b`, eight partial sums so the compiler can vectorise it.
    pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        let (ac, ar) = a.as_chunks::<8>();
        let (bc, br) = b.as_chunks::<8>();
        for (x, y) in ac.iter().zip(bc) {
            for k in 0..8 {
                acc[k] += x[k] * y[k];
            }
        }
        let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
        acc.iter().sum::<f32>() + tail
    }
}
