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
    if super::dot::Simd::detect() != super::dot::Simd::Scalar {
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

/// A row quantized to 8 bits per 256-value super-block, as ggml's `Q8_K` (for the K-quant
/// 8-bit kernels): one `f32` scale per 256 values, so that a super-block's integer sums are
/// scaled once, and the sums of each 16 quants, which the K-quants' mins and offsets multiply.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RowsQ8K {
    /// The quants, `-127..=127`, row after row.
    pub qs: Vec<i8>,
    /// One scale per 256 values (`x ~= d * q`).
    pub d: Vec<f32>,
    /// The sum of each 16 quants.
    pub bsums: Vec<i16>,
}

impl RowsQ8K {
    /// `x` (a multiple of 256 values) quantized, appended.
    pub fn push(&mut self, x: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::dot::Simd::detect() != super::dot::Simd::Scalar {
            for sb in x.chunks_exact(256) {
                let (n, m) = (self.qs.len(), self.bsums.len());
                self.qs.resize(n + 256, 0);
                self.bsums.resize(m + 16, 0);
                // SAFETY: AVX2, FMA and F16C were detected; 256 values, 256 quants, 16 sums.
                let d = unsafe {
                    super::x86_k::quantize_q8k(sb, &mut self.qs[n..], &mut self.bsums[m..])
                };
                self.d.push(d);
            }
            return;
        }
        self.push_scalar(x);
    }

    /// [`RowsQ8K::push`] in portable code (the reference for the SIMD quantizer).
    pub fn push_scalar(&mut self, x: &[f32]) {
        for sb in x.chunks_exact(256) {
            let amax = sb.iter().fold(0f32, |a, &v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            self.d.push(d);
            for chunk in sb.chunks_exact(16) {
                let mut sum = 0i16;
                for &v in chunk {
                    let q = (v * id).round() as i8;
                    sum += i16::from(q);
                    self.qs.push(q);
                }
                self.bsums.push(sum);
            }
        }
    }
}
