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

/// 8-bit activation rows laid out for the AVX-512 8-bit `Q6_K` kernel (`x86_k`), made from
/// their blocks once per product: the quants of a row contiguous (one 64-byte load takes two
/// blocks), each block's scale repeated over eight lanes (the 16 multipliers of 64 values'
/// lanes in one load), and the sums of each 16 quants (what `Q6_K`'s `-32` offset multiplies,
/// scaled by its 16-value scales).
#[derive(Debug, Default)]
pub(crate) struct WideQ8 {
    /// The quants in order, 64 a line (two blocks).
    pub qs: Vec<Line<i8, 64>>,
    /// Each block's `d` eight times, 16 a line (two blocks).
    pub d8: Vec<Line<f32, 16>>,
    /// The sum of each 16 quants (at most `16 * 127`).
    pub s16: Vec<i16>,
}

/// `N` values on a 64-byte line of their own: loads of a line never cross a cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line<T, const N: usize>(pub [T; N]);

impl WideQ8 {
    /// The wide form of `blocks` (rows of whole blocks one after another; an even number of
    /// blocks a row).
    pub(crate) fn new(blocks: &[BlockQ8]) -> WideQ8 {
        let mut wide = WideQ8 {
            qs: Vec::with_capacity(blocks.len() / 2),
            d8: Vec::with_capacity(blocks.len() / 2),
            s16: Vec::with_capacity(2 * blocks.len()),
        };
        debug_assert!(blocks.len().is_multiple_of(2), "an even number of blocks");
        for pair in blocks.chunks_exact(2) {
            let (a, b) = (&pair[0], &pair[1]);
            wide.qs.push(Line(std::array::from_fn(|i| {
                if i < 32 { a.qs[i] } else { b.qs[i - 32] }
            })));
            wide.d8
                .push(Line(std::array::from_fn(|i| if i < 8 { a.d } else { b.d })));
        }
        for b in blocks {
            for half in b.qs.chunks_exact(16) {
                wide.s16.push(half.iter().map(|&q| i16::from(q)).sum());
            }
        }
        wide
    }
}
