//! The grid quants of ggml (`IQ2_XXS`, `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`, `IQ1_S`,
//! `IQ1_M`): each group of four or eight values is one point of a fixed grid
//! ([`iq_grids`](super::iq_grids), [`iq1_grid`](super::iq1_grid)), picked by an 8- to 11-bit
//! index, with a sign bit a value (`IQ2`, `IQ3`) or a shift of the whole group (`IQ1`), and a
//! scale per 16 or 32 values under an `f16` per 256. They are what `llama-quantize` writes
//! for its 1- to 3-bit file types (`IQ2_M`, `IQ3_M`, ...), always from an importance matrix
//! for the 1- and 2-bit ones.
//!
//! Decoding follows ggml's `dequantize_row_iq*` operation by operation (the same products
//! in the same order, so the same bits: `tests/ggml_quantizers.rs` checks every type against
//! `libggml-base`). kindle does not write these types: their encoders search the grid under
//! an importance matrix, which kindle does not compute.

use super::GgmlType;
use super::f16_le;
use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::iq1_grid::IQ1S_GRID;
use super::kquants::QK_K;

/// Bytes in one `IQ2_XXS` super-block: `f16 d`, then per 32 values two `u32`: four 8-bit
/// grid indices, and four 7-bit sign patterns with a 4-bit scale in the top bits.
pub const BLOCK_IQ2_XXS_BYTES: usize = 66;
/// Bytes in one `IQ2_XS` super-block: `f16 d`, 32 `u16` (a 9-bit grid index and a 7-bit sign
/// pattern each), then per 32 values a byte of two 4-bit scales.
pub const BLOCK_IQ2_XS_BYTES: usize = 74;
/// Bytes in one `IQ2_S` super-block: `f16 d`, 32 low bytes of 10-bit grid indices, 32 bytes of
/// signs, 8 bytes of the indices' high bits, 8 bytes of two 4-bit scales.
pub const BLOCK_IQ2_S_BYTES: usize = 82;
/// Bytes in one `IQ3_XXS` super-block: `f16 d`, 64 8-bit grid indices (four values each),
/// then per 32 values a `u32` of four 7-bit sign patterns and a 4-bit scale.
pub const BLOCK_IQ3_XXS_BYTES: usize = 98;
/// Bytes in one `IQ3_S` super-block: `f16 d`, 64 low bytes of 9-bit grid indices, 8 bytes of
/// their high bits, 32 bytes of signs, 4 bytes of two 4-bit scales (one per 32 values).
pub const BLOCK_IQ3_S_BYTES: usize = 110;
/// Bytes in one `IQ1_S` super-block: `f16 d`, 32 low bytes of 11-bit grid indices, then per
/// 32 values a `u16` of the indices' high bits, a 3-bit scale and the shift's sign.
pub const BLOCK_IQ1_S_BYTES: usize = 50;
/// Bytes in one `IQ1_M` super-block: 32 low bytes of 11-bit grid indices, 16 bytes of their
/// high bits and shift signs, 8 bytes of 3-bit scales per 16 values with the `f16` super-block
/// scale spread over their top nibbles.
pub const BLOCK_IQ1_M_BYTES: usize = 56;

/// The shift of an `IQ1_S` or `IQ1_M` group (ggml's `IQ1S_DELTA`).
const IQ1_DELTA: f32 = 0.125;

/// ggml's `ksigns_iq2xs`: each 7-bit sign pattern with an eighth bit making the count of
/// minus signs even (a table: a population count without its instruction is slower).
static KSIGNS: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        table[i] = i as u8 | (((i as u32).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    table
};

/// [`KSIGNS`] of the low seven bits of `i`.
#[inline(always)]
fn ksigns(i: u32) -> u8 {
    KSIGNS[(i & 127) as usize]
}

/// The `b`-th byte value of a grid point (`b` 0 is the lowest byte).
#[inline(always)]
fn byte_of(point: u64, b: usize) -> u8 {
    (point >> (8 * b)) as u8
}

/// `out[j] = db * point[j]`, negated where bit `j` of `signs` is set (ggml's
/// `db * grid[j] * (signs & kmask_iq2xs[j] ? -1.f : 1.f)`: the product, then an exact sign).
#[inline(always)]
fn signed8(db: f32, point: u64, signs: u8, out: &mut [f32]) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        let v = db * f32::from(byte_of(point, j));
        *o = if signs & (1 << j) != 0 { -v } else { v };
    }
}

/// `db * (0.5 + ls) * scale`, in ggml's order.
#[inline(always)]
fn half_step(d: f32, ls: u32, scale: f32) -> f32 {
    d * (0.5 + ls as f32) * scale
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// `out[j] = dl * (point[j] + delta)` for a point of eight `i8` values (ggml's `IQ1` order).
#[inline(always)]
fn shifted8(dl: f32, point: u64, delta: f32, out: &mut [f32]) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        *o = dl * (f32::from(byte_of(point, j) as i8) + delta);
    }
}

/// The shift of an `IQ1` group whose sign bit is `negative`.
#[inline(always)]
fn delta(negative: bool) -> f32 {
    if negative { -IQ1_DELTA } else { IQ1_DELTA }
}

/// Each group of eight values of a sign-bit grid quant's super-block (`IQ2_XXS`, `IQ2_XS`,
/// `IQ2_S`, `IQ3_XXS`, `IQ3_S`), in order: `emit(g, db, point, signs)` for values `8 g..8 g +
/// 8`, which are `db * point[j]` negated where bit `j` of `signs` is set (a four-value grid's
/// two points joined, the first in the low half). [`dequantize`](super::dequantize) and the
/// SIMD decoders of `kindle-kernels` build on this walk.
///
/// # Panics
/// If `ty` is not one of those types or `block` is not one of its super-blocks.
#[inline(always)]
pub fn for_each_signed_group(
    ty: GgmlType,
    block: &[u8],
    mut emit: impl FnMut(usize, f32, u64, u8),
) {
    assert_eq!(block.len(), ty.type_size(), "one {ty} super-block");
    let d = f16_le(block[0], block[1]);
    match ty {
        GgmlType::IQ2_XXS => {
            for ib in 0..8 {
                let at = 2 + 8 * ib;
                let aux = le_u32(block, at + 4);
                let db = half_step(d, aux >> 28, 0.25);
                for l in 0..4 {
                    let point = IQ2XXS_GRID[usize::from(block[at + l])];
                    emit(4 * ib + l, db, point, ksigns(aux >> (7 * l)));
                }
            }
        }
        GgmlType::IQ2_XS => {
            for ib in 0..8 {
                let sc = u32::from(block[66 + ib]);
                let db = [half_step(d, sc & 0xF, 0.25), half_step(d, sc >> 4, 0.25)];
                for l in 0..4 {
                    let q = u32::from(le_u16(block, 2 + 2 * (4 * ib + l)));
                    let point = IQ2XS_GRID[(q & 511) as usize];
                    emit(4 * ib + l, db[l / 2], point, ksigns(q >> 9));
                }
            }
        }
        GgmlType::IQ2_S => {
            let (qs, signs) = (&block[2..34], &block[34..66]);
            let (qh, scales) = (&block[66..74], &block[74..82]);
            for ib in 0..8 {
                let sc = u32::from(scales[ib]);
                let db = [half_step(d, sc & 0xF, 0.25), half_step(d, sc >> 4, 0.25)];
                let high = u32::from(qh[ib]);
                for l in 0..4 {
                    let index = u32::from(qs[4 * ib + l]) | ((high << (8 - 2 * l)) & 0x300);
                    let point = IQ2S_GRID[index as usize];
                    emit(4 * ib + l, db[l / 2], point, signs[4 * ib + l]);
                }
            }
        }
        GgmlType::IQ3_XXS => {
            for ib in 0..8 {
                let aux = le_u32(block, 66 + 4 * ib);
                let db = half_step(d, aux >> 28, 0.5);
                for l in 0..4 {
                    let at = 2 + 8 * ib + 2 * l;
                    let lo = IQ3XXS_GRID[usize::from(block[at])];
                    let hi = IQ3XXS_GRID[usize::from(block[at + 1])];
                    let point = u64::from(lo) | (u64::from(hi) << 32);
                    emit(4 * ib + l, db, point, ksigns(aux >> (7 * l)));
                }
            }
        }
        GgmlType::IQ3_S => {
            let (qs, qh) = (&block[2..66], &block[66..74]);
            let (signs, scales) = (&block[74..106], &block[106..110]);
            for ib in 0..8 {
                let ls = u32::from(scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
                let db = d * (1 + 2 * ls) as f32;
                let high = u32::from(qh[ib]);
                for l in 0..4 {
                    let lo = u32::from(qs[8 * ib + 2 * l]) | ((high << (8 - 2 * l)) & 256);
                    let hi = u32::from(qs[8 * ib + 2 * l + 1]) | ((high << (7 - 2 * l)) & 256);
                    let point = u64::from(IQ3S_GRID[lo as usize])
                        | (u64::from(IQ3S_GRID[hi as usize]) << 32);
                    emit(4 * ib + l, db, point, signs[4 * ib + l]);
                }
            }
        }
        other => panic!("{other} is not a sign-bit grid quant"),
    }
}

/// Each group of eight values of an `IQ1_S` or `IQ1_M` super-block, in order: `emit(g, dl,
/// point, delta)` for values `8 g..8 g + 8`, which are `dl * (point[j] + delta)` with
/// `point[j]` an `i8` of -1, 0 or 1 and `delta` `±1/8`.
///
/// # Panics
/// If `ty` is neither or `block` is not one of its super-blocks.
#[inline(always)]
pub fn for_each_shifted_group(
    ty: GgmlType,
    block: &[u8],
    mut emit: impl FnMut(usize, f32, u64, f32),
) {
    assert_eq!(block.len(), ty.type_size(), "one {ty} super-block");
    match ty {
        GgmlType::IQ1_S => {
            let d = f16_le(block[0], block[1]);
            for ib in 0..8 {
                let qh = u32::from(le_u16(block, 34 + 2 * ib));
                let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
                let delta = delta(qh & 0x8000 != 0);
                for l in 0..4 {
                    let index = u32::from(block[2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8);
                    emit(4 * ib + l, dl, IQ1S_GRID[index as usize], delta);
                }
            }
        }
        GgmlType::IQ1_M => {
            let d = iq1_m_scale(block);
            for ib in 0..8 {
                let sc = u32::from(le_u16(block, 48 + 2 * (ib / 2)));
                let shift = 6 * (ib % 2);
                let dl = [
                    d * (2 * ((sc >> shift) & 7) + 1) as f32,
                    d * (2 * ((sc >> (shift + 3)) & 7) + 1) as f32,
                ];
                for l in 0..4 {
                    let h = u32::from(block[32 + 2 * ib + l / 2]);
                    let (high, bit) = if l % 2 == 0 {
                        ((h << 8) & 0x700, 0x08)
                    } else {
                        ((h << 4) & 0x700, 0x80)
                    };
                    let index = u32::from(block[4 * ib + l]) | high;
                    emit(
                        4 * ib + l,
                        dl[l / 2],
                        IQ1S_GRID[index as usize],
                        delta(h & bit != 0),
                    );
                }
            }
        }
        other => panic!("{other} is not an IQ1 grid quant"),
    }
}

/// The `f16` scale of an `IQ1_M` super-block (`block`: its 56 bytes), spread over the top
/// nibbles of its four scale words.
#[inline]
pub fn iq1_m_scale(block: &[u8]) -> f32 {
    let sc = |i: usize| le_u16(block, 48 + 2 * i);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00F0) | ((sc(2) >> 4) & 0x0F00) | (sc(3) & 0xF000);
    half::f16::from_bits(bits).to_f32()
}

/// Writes `d` (an `f16`'s bits) as the scale of an `IQ1_M` super-block (`block`: its 56
/// bytes): the top nibbles of its four scale words, the rest of each left as it is
/// ([`iq1_m_scale`] reads it back).
pub fn set_iq1_m_scale(block: &mut [u8], d: u16) {
    for i in 0..4 {
        let at = 49 + 2 * i;
        block[at] = (block[at] & 0x0F) | ((((d >> (4 * i)) & 0xF) as u8) << 4);
    }
}

/// A sign-bit grid quant's super-block dequantised (see [`for_each_signed_group`]).
#[inline]
fn signed_block(ty: GgmlType, block: &[u8], out: &mut [f32; QK_K]) {
    for_each_signed_group(ty, block, |g, db, point, signs| {
        signed8(db, point, signs, &mut out[8 * g..8 * g + 8]);
    });
}

/// An `IQ1` super-block dequantised (see [`for_each_shifted_group`]).
#[inline]
fn shifted_block(ty: GgmlType, block: &[u8], out: &mut [f32; QK_K]) {
    for_each_shifted_group(ty, block, |g, dl, point, delta| {
        shifted8(dl, point, delta, &mut out[8 * g..8 * g + 8]);
    });
}

/// Dequantise one `IQ2_XXS` super-block: per 32 values `db = d * (0.5 + ls) / 4`, then four
/// grid points of eight magnitudes with their signs.
pub fn dequantize_block_iq2_xxs(block: &[u8; BLOCK_IQ2_XXS_BYTES], out: &mut [f32; QK_K]) {
    signed_block(GgmlType::IQ2_XXS, block, out);
}

/// Dequantise one `IQ2_XS` super-block: a 9-bit index and a 7-bit sign pattern per eight
/// values, a 4-bit scale per 16.
pub fn dequantize_block_iq2_xs(block: &[u8; BLOCK_IQ2_XS_BYTES], out: &mut [f32; QK_K]) {
    signed_block(GgmlType::IQ2_XS, block, out);
}

/// Dequantise one `IQ2_S` super-block: a 10-bit index and eight sign bits per eight values, a
/// 4-bit scale per 16.
pub fn dequantize_block_iq2_s(block: &[u8; BLOCK_IQ2_S_BYTES], out: &mut [f32; QK_K]) {
    signed_block(GgmlType::IQ2_S, block, out);
}

/// Dequantise one `IQ3_XXS` super-block: per 32 values `db = d * (0.5 + ls) / 2`, eight grid
/// points of four magnitudes, a 7-bit sign pattern per eight values.
pub fn dequantize_block_iq3_xxs(block: &[u8; BLOCK_IQ3_XXS_BYTES], out: &mut [f32; QK_K]) {
    signed_block(GgmlType::IQ3_XXS, block, out);
}

/// Dequantise one `IQ3_S` super-block: per 32 values `db = d * (1 + 2 ls)`, eight grid points
/// of four magnitudes (9-bit indices), eight sign bits per eight values.
pub fn dequantize_block_iq3_s(block: &[u8; BLOCK_IQ3_S_BYTES], out: &mut [f32; QK_K]) {
    signed_block(GgmlType::IQ3_S, block, out);
}

/// Dequantise one `IQ1_S` super-block: per 32 values `dl = d * (2 s + 1)` and a shift of
/// `±1/8`, four grid points of eight values in `{-1, 0, 1}` (11-bit indices).
pub fn dequantize_block_iq1_s(block: &[u8; BLOCK_IQ1_S_BYTES], out: &mut [f32; QK_K]) {
    shifted_block(GgmlType::IQ1_S, block, out);
}

/// Dequantise one `IQ1_M` super-block: per 16 values `dl = d * (2 s + 1)`, per eight a shift
/// of `±1/8` and a grid point of eight values in `{-1, 0, 1}` (11-bit indices).
pub fn dequantize_block_iq1_m(block: &[u8; BLOCK_IQ1_M_BYTES], out: &mut [f32; QK_K]) {
    shifted_block(GgmlType::IQ1_M, block, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `IQ1_M` scale written is the scale read, and the 3-bit scales beside it are kept.
    #[test]
    fn an_iq1_m_scale_written_is_read_back() {
        let mut block = [0xA5u8; BLOCK_IQ1_M_BYTES];
        let d = half::f16::from_f32(0.0123);
        set_iq1_m_scale(&mut block, d.to_bits());
        assert_eq!(iq1_m_scale(&block), d.to_f32());
        let low: Vec<u8> = block[48..].iter().map(|b| b & 0x0F).collect();
        assert_eq!(low, [0x05; 8]);
        assert!(block[..48].iter().all(|&b| b == 0xA5));
    }
}
