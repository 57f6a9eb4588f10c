//! 8-bit quantization of activations, 32 values per block (like ggml's `Q8_1`, with `f32`
//! scales).

pub use super::block::BlockQ8;

/// Quantize a row (a multiple of 32 values) into blocks, rounding to nearest as ggml does.
///
/// # Panics
/// If the row length is not a multiple of 32.
pub fn quantize_row_q8(row: &[f32]) -> Vec<BlockQ8> {
    assert!(row.len().is_multiple_of(32), "row length multiple of 32");
    #[cfg(target_arch = "x86_64")]
    if super::simd::Simd::detect() != super::simd::Simd::Scalar {
        return row
            .chunks_exact(32)
            // SAFETY: AVX2, FMA and F16C were detected; each chunk holds 32 values.
            .map(|x| unsafe { super::x86::quantize_block_q8(x) })
            .collect();
    }
    row.chunks_exact(32).map(quantize_block_scalar).collect()
}

/// One block of 32 values: the portable reference for the SIMD quantizer.
pub(crate) fn quantize_block_scalar(x: &[f32]) -> BlockQ8 {
    let amax = x.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
        sum += i32::from(*q);
    }
    BlockQ8 {
        d,
        s: d * sum as f32,
        qs,
    }
}

/// `32 *` the sum of each 16 quants of `blocks` (two a block, in order): what the 8-bit
/// `Q6_K` kernels (`x86_q6`) subtract for its `-32` offset before scaling each half.
pub(crate) fn half_sums_x32(blocks: &[BlockQ8]) -> Vec<i32> {
    blocks
        .iter()
        .flat_map(|b| {
            [0, 16].map(|at| 32 * b.qs[at..at + 16].iter().map(|&q| i32::from(q)).sum::<i32>())
        })
        .collect()
}
