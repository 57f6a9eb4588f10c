//! The block of 8-bit activations the int8 kernels read (a leaf module: the portable and SIMD
//! kernels name it without naming the quantizer that makes it).

/// 32 activations quantized to 8 bits: `x[i] ~= d * qs[i]`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(8))]
pub struct BlockQ8 {
    /// The scale: the block's largest magnitude over 127.
    pub d: f32,
    /// `d * sum(qs)`: what a weight block's offset (`Q4_1`'s min) multiplies.
    pub s: f32,
    /// The quants, in `-127..=127`.
    pub qs: [i8; 32],
}

#[cfg(target_arch = "x86_64")]
impl super::x86_shared::Q8Block for BlockQ8 {
    #[inline(always)]
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}
