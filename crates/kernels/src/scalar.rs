//! Portable kernels: the fallback on CPUs without AVX2 and the reference for the SIMD ones.

use crate::block::BlockQ8;
use kindle_gguf::quant::{self, GgmlType};

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

/// `Q5_0` (`ONE` false: `m = -16 d`) or `Q5_1` row times 8-bit activations.
pub fn dot_q5_q8<const ONE: bool>(row: &[u8], y: &[BlockQ8]) -> f32 {
    let bytes = if ONE { 24 } else { 22 };
    let mut sum = 0f32;
    for (b, y) in row.chunks_exact(bytes).zip(y) {
        let d = f16(b[0], b[1]);
        let (m, f) = if ONE {
            (f16(b[2], b[3]), 4)
        } else {
            (-16.0 * d, 2)
        };
        let qh = u32::from_le_bytes([b[f], b[f + 1], b[f + 2], b[f + 3]]);
        let mut isum = 0i32;
        for j in 0..16 {
            let q = b[f + 4 + j];
            let lo = i32::from(q & 0x0F) | (((qh >> j) & 1) << 4) as i32;
            let hi = i32::from(q >> 4) | (((qh >> (j + 16)) & 1) << 4) as i32;
            isum += lo * i32::from(y.qs[j]) + hi * i32::from(y.qs[j + 16]);
        }
        sum += d * y.d * isum as f32 + m * y.s;
    }
    sum
}

/// `IQ4_NL` or `IQ4_XS` row (GGUF layout) times 8-bit activations: per 32 values, the
/// integer sum of levels times quants, scaled by the block's scale (`IQ4_XS`: `d * (ls - 32)`)
/// and the activations'.
pub fn dot_iq4_q8(ty: GgmlType, row: &[u8], y: &[BlockQ8]) -> f32 {
    let mut sum = 0f32;
    let mut ys = y.iter();
    for b in row.chunks_exact(ty.type_size()) {
        let d = f16(b[0], b[1]);
        for k in 0..ty.block_size() / 32 {
            let (scale, qs) = if ty == GgmlType::IQ4_XS {
                let block: &[u8; 136] = b.try_into().expect("an IQ4_XS block");
                let ls = quant::iq4_xs_factor(block, k);
                (d * (ls - 32) as f32, &b[8 + 16 * k..8 + 16 * (k + 1)])
            } else {
                (d, &b[2..18])
            };
            let Some(y) = ys.next() else {
                return sum;
            };
            let level = |q: u8| i32::from(quant::KVALUES_IQ4NL[usize::from(q)]);
            let mut isum = 0i32;
            for (j, &q) in qs.iter().enumerate() {
                isum += level(q & 0x0F) * i32::from(y.qs[j]);
                isum += level(q >> 4) * i32::from(y.qs[j + 16]);
            }
            sum += scale * y.d * isum as f32;
        }
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
