//! What the `Q5` and `Q6_K` group kernels (`x86_q5.rs`, `x86_q6.rs`) and the dense ones
//! (`x86_dense.rs`) share: the view of an 8-bit activation block, rows of them, a lane sum,
//! an activation in every lane, and the scaling of activations for values converted in place
//! at bit `8p`. A leaf module.

use std::arch::x86_64::*;

/// An activation block of 32 values quantized to 8 bits (the crate's `BlockQ8`): its quants,
/// which the 8-bit `Q5` and `Q6_K` kernels read (its scale and sums come as plain rows,
/// [`Q8Rows`]). A trait, so that these kernels stay near the leaves: the dispatcher names
/// them, they name nothing of the crate but the leaves.
pub(crate) trait Q8Block {
    /// The 32 quants.
    fn qs(&self) -> &[i8; 32];
}

/// Sum of the eight lanes (in the order every 8-lane reduction of the crate uses).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Activation `i` of a row in all eight lanes: read from its eight copies (`COPIES`, the
/// layout of `Kernel::copies`: a load folded into the FMA), else broadcast from the one value.
///
/// # Safety
/// `x` holds value `i` (eight times over, with `COPIES`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn activation<const COPIES: bool>(x: *const f32, i: usize) -> __m256 {
    // SAFETY: forwarded from the caller.
    unsafe {
        if COPIES {
            _mm256_loadu_ps(x.add(8 * i))
        } else {
            _mm256_broadcast_ss(&*x.add(i))
        }
    }
}

/// The factor each activation of a block is scaled by for the `Q5` and `Q6_K` `f32` kernels
/// (in the values' own order): value `4c + p` (and `16 + 4c + p`) meets its weight converted
/// in place at bit `8p`, so it needs `x * 2^-8p` (exact).
pub(crate) const BYTE_SCALE: [f32; 32] = {
    let mut scale = [0f32; 32];
    let mut i = 0;
    while i < 32 {
        scale[i] = 1.0 / (1u32 << (8 * (i % 4))) as f32;
        i += 1;
    }
    scale
};

/// `JN` rows of 8-bit activation blocks, with their scales `d` and sums `s` also laid out
/// as plain `f32` rows (one per block), so that eight blocks' come in one load each.
pub(crate) struct Q8Rows<'a, Y, const JN: usize> {
    /// The blocks of each row.
    pub blocks: [&'a [Y]; JN],
    /// Each row's block scales (as many as blocks).
    pub d: [*const f32; JN],
    /// Each row's block sums (as many as blocks).
    pub s: [*const f32; JN],
}
