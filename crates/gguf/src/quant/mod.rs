//! GGML tensor types and dequantisation of their blocks to `f32`.
//!
//! Each quantized type stores `block_size()` values in `type_size()` bytes; a row of a tensor is
//! a whole number of blocks. [`dequantize`] turns the bytes of whole blocks into `f32` values.
//!
//! The types live in [`GgmlType`]; the block decoders by family in `legacy` (the 32-value
//! `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0` blocks), `kquants` (the 256-value `Q4_K`, `Q5_K`
//! and `Q6_K` super-blocks), `low_k` (the 256-value `Q2_K` and `Q3_K`), `iq4` (the non-linear
//! `IQ4_NL` and `IQ4_XS`) and `iq_grid` (the grid quants `IQ1_S` ... `IQ3_S`, their grids in
//! `iq_grids` and `iq1_grid`), all re-exported here.

mod ggml_type;
mod iq1_grid;
mod iq4;
mod iq_grid;
mod iq_grids;
mod kquants;
mod legacy;
mod low_k;
mod quantize;
mod quantize_k;
mod quantize_low_k;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use ggml_type::{GgmlType, ggml_type_name};
pub use iq_grid::{
    BLOCK_IQ1_M_BYTES, BLOCK_IQ1_S_BYTES, BLOCK_IQ2_S_BYTES, BLOCK_IQ2_XS_BYTES,
    BLOCK_IQ2_XXS_BYTES, BLOCK_IQ3_S_BYTES, BLOCK_IQ3_XXS_BYTES, dequantize_block_iq1_m,
    dequantize_block_iq1_s, dequantize_block_iq2_s, dequantize_block_iq2_xs,
    dequantize_block_iq2_xxs, dequantize_block_iq3_s, dequantize_block_iq3_xxs,
    for_each_shifted_group, for_each_signed_group, iq1_m_scale, set_iq1_m_scale,
};
pub use iq4::{
    BLOCK_IQ4_NL_BYTES, BLOCK_IQ4_XS_BYTES, KVALUES_IQ4NL, dequantize_block_iq4_nl,
    dequantize_block_iq4_xs, iq4_xs_factor,
};
pub use kquants::{
    BLOCK_Q4_K_BYTES, BLOCK_Q5_K_BYTES, BLOCK_Q6_K_BYTES, QK_K, dequantize_block_q4_k,
    dequantize_block_q5_k, dequantize_block_q6_k, unpack_scale_min_k4,
};
pub use legacy::{
    BLOCK_Q4_0_BYTES, BLOCK_Q4_1_BYTES, BLOCK_Q5_0_BYTES, BLOCK_Q5_1_BYTES, BLOCK_Q8_0_BYTES, QK32,
    dequantize_block_q4_0, dequantize_block_q4_1, dequantize_block_q5_0, dequantize_block_q5_1,
    dequantize_block_q8_0,
};
pub use low_k::{
    BLOCK_Q2_K_BYTES, BLOCK_Q3_K_BYTES, dequantize_block_q2_k, dequantize_block_q3_k,
    unpack_scales_q3_k,
};
pub use quantize::{QUANTIZE_TYPES, quantize};

/// Why a dequantisation could not be done.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantError {
    /// The type has no dequantiser in kindle.
    #[error("dequantising {0} is not supported")]
    Unsupported(GgmlType),
    /// The byte or value counts do not describe whole blocks of the type.
    #[error(
        "{ty}: {bytes} bytes cannot hold {values} values (block of {block} values in {block_bytes} bytes)"
    )]
    SizeMismatch {
        /// The type being dequantised.
        ty: GgmlType,
        /// Bytes of input given.
        bytes: usize,
        /// Values of output asked for.
        values: usize,
        /// Values in one block of `ty`.
        block: usize,
        /// Bytes in one block of `ty`.
        block_bytes: usize,
    },
}

/// Dequantise `data` (whole blocks of `ty`) into `out`; `out.len()` is the number of values.
///
/// `out.len()` must be a multiple of `ty.block_size()` and `data.len()` must be exactly
/// `out.len() / ty.block_size() * ty.type_size()`, else [`QuantError::SizeMismatch`]. Types for
/// which [`GgmlType::can_dequantize`] is false give [`QuantError::Unsupported`] (checked first).
/// Multi-byte fields are little-endian, as in GGUF files. Never panics.
///
/// The arithmetic follows ggml's `dequantize_row_*` reference functions operation by operation
/// (same products in the same order, no fused multiply-add), so the results are bit-identical to
/// a build of ggml that does not contract those expressions into FMAs.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    use GgmlType::*;
    if !ty.can_dequantize() {
        return Err(QuantError::Unsupported(ty));
    }
    let (block, block_bytes) = (ty.block_size(), ty.type_size());
    let whole_blocks = out.len().is_multiple_of(block);
    if !whole_blocks || (out.len() / block).checked_mul(block_bytes) != Some(data.len()) {
        return Err(QuantError::SizeMismatch {
            ty,
            bytes: data.len(),
            values: out.len(),
            block,
            block_bytes,
        });
    }
    match ty {
        F32 => for_each_block(data, out, |b: &[u8; 4], o: &mut [f32; 1]| {
            o[0] = f32::from_le_bytes(*b);
        }),
        F16 => widen_f16(data, out),
        BF16 => for_each_block(data, out, |b: &[u8; 2], o: &mut [f32; 1]| {
            o[0] = bf16_le(b[0], b[1]);
        }),
        Q4_0 => for_each_block(data, out, dequantize_block_q4_0),
        Q4_1 => for_each_block(data, out, dequantize_block_q4_1),
        Q5_0 => for_each_block(data, out, dequantize_block_q5_0),
        Q5_1 => for_each_block(data, out, dequantize_block_q5_1),
        Q8_0 => for_each_block(data, out, dequantize_block_q8_0),
        Q4_K => for_each_block(data, out, dequantize_block_q4_k),
        Q5_K => for_each_block(data, out, dequantize_block_q5_k),
        Q6_K => for_each_block(data, out, dequantize_block_q6_k),
        Q2_K => for_each_block(data, out, dequantize_block_q2_k),
        Q3_K => for_each_block(data, out, dequantize_block_q3_k),
        IQ4_NL => for_each_block(data, out, dequantize_block_iq4_nl),
        IQ4_XS => for_each_block(data, out, dequantize_block_iq4_xs),
        IQ2_XXS => for_each_block(data, out, dequantize_block_iq2_xxs),
        IQ2_XS => for_each_block(data, out, dequantize_block_iq2_xs),
        IQ2_S => for_each_block(data, out, dequantize_block_iq2_s),
        IQ3_XXS => for_each_block(data, out, dequantize_block_iq3_xxs),
        IQ3_S => for_each_block(data, out, dequantize_block_iq3_s),
        IQ1_S => for_each_block(data, out, dequantize_block_iq1_s),
        IQ1_M => for_each_block(data, out, dequantize_block_iq1_m),
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// Same as [`dequantize`]; named after ggml's `dequantize_row_*` for callers that think in rows.
pub fn dequantize_row(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize(ty, data, out)
}

/// Little-endian `f16` values widened to `f32` (exact) a chunk at a time by `half`'s slice
/// conversion, which uses F16C where the CPU has it, detected once a chunk: one value at a
/// time (a detection each) it was a tenth of a dense `F16` model's prefill, whose product
/// widens every weight row it multiplies.
fn widen_f16(data: &[u8], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let mut chunk = [half::f16::ZERO; 256];
    for (bytes, out) in data.chunks(512).zip(out.chunks_mut(256)) {
        let chunk = &mut chunk[..out.len()];
        for (h, b) in chunk.iter_mut().zip(bytes.chunks_exact(2)) {
            *h = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        chunk.convert_to_f32_slice(out);
    }
}

/// Apply `f` to each `B`-byte block of `data` and the matching `N` values of `out`.
///
/// The caller has checked that the sizes agree; any tail that is not a whole block is ignored.
#[inline(always)]
fn for_each_block<const B: usize, const N: usize>(
    data: &[u8],
    out: &mut [f32],
    f: impl Fn(&[u8; B], &mut [f32; N]),
) {
    let (blocks, _) = data.as_chunks::<B>();
    let (outs, _) = out.as_chunks_mut::<N>();
    for (b, o) in blocks.iter().zip(outs) {
        f(b, o);
    }
}

/// A little-endian IEEE half from its two bytes, widened to `f32` (exact).
#[inline(always)]
pub(crate) fn f16_le(lo: u8, hi: u8) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// A little-endian bfloat16 from its two bytes, widened to `f32` (exact).
#[inline(always)]
fn bf16_le(lo: u8, hi: u8) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([lo, hi])) << 16)
}
