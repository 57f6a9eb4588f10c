//! Software prefetch for the packed group kernels (`x86.rs`, `x86_q5.rs`) and the dense ones
//! (`x86_dense.rs`): a leaf module.

use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};

/// How many block columns ahead of the one being multiplied [`prefetch_ahead`] asks for.
const PREFETCH_COLUMNS: usize = 12;

/// Ask for the block column [`PREFETCH_COLUMNS`] past `col` (each `bytes` long) to be brought
/// into L2. The hardware prefetchers alone were measured to leave the packed kernels waiting
/// on their weight loads on an Intel Xeon (Sapphire Rapids) VM: one-thread decode went from
/// about 53 to 80 tok/s with a prefetch 8 columns ahead into L1. Into L2 (`prefetcht1`, which
/// does not hold one of L1's few fill buffers per line) and 12 columns ahead, alternating with
/// that on the same VM (`kindle bench -p 0 -n 128 -r 3`, tok/s at 1 / 2 threads): Gemma-3
/// (its 178 MB `Q8_0` head streams from DRAM) 32.9-33.4 / 59.2-61.4 -> 37.9-38.6 / 72.2-75.6,
/// SmolLM2 `Q4_1` 94.6-98.8 / 185.6-188.7 -> 102.5-108.7 / 190.8-210.3, an F16 SmolLM2 the
/// same within noise; 4 columns was slower, 10 and 16 between. A prefetch past the end of the
/// weights does nothing (it never faults).
#[inline(always)]
pub(crate) fn prefetch_ahead(col: *const u8, bytes: usize) {
    let ahead = col.wrapping_add(PREFETCH_COLUMNS * bytes);
    let mut offset = 0;
    while offset < bytes {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(offset).cast::<i8>()) };
        offset += 64;
    }
}

/// Whether the kernels that stream their weights fastest ask for block columns ahead with
/// [`prefetch_ahead`]: every 8-bit group kernel, and `Q8_0`'s `f32` ones (the other `f32`
/// group kernels always do). Not on AMD's Zen 4 (family 0x19 with AVX-512): there the
/// hardware prefetchers alone streamed them faster, at every distance tried (4 to 64 columns
/// for `Q8_0`) and in the AVX2 forms too, while the slower `f32` kernels of the other formats
/// stream best with the prefetch 12 columns ahead. `kindle bench -p 0 -n 64 --profile`,
/// alternating, three rounds: SmolLM2 `Q4_1` 8-bit 211 -> 269 / 272 -> 332 tok/s at one / two
/// threads (the AVX2 forms 186 -> 241 / 240 -> 304); Gemma-3-270M's 178 MB `Q8_0` head at two
/// threads 5.51 -> 4.64 ms a token (`f32`), 5.12 -> 4.48 (8-bit), and in the AVX2 form of the
/// `f32` kernel (`KINDLE_SIMD=avx2`) 10.6 -> 8.2 / 6.0 -> 4.7 ms at one / two threads; a
/// SmolLM2 file quantized to `Q8_0`, one thread, 8-bit 137 -> 195 tok/s. Without the prefetch
/// the `f32` `Q5_0`, `Q4_K` and `Q6_K` products of a Gemma-3 step took 6.2 ms a token at one
/// thread against 4.8 with it. Intel's Sapphire Rapids gained from the prefetch on the `Q8_0`
/// head ([`prefetch_ahead`]); a Zen 3 (the same family, AVX2 only) is unmeasured and keeps it.
pub(crate) fn fast_kernels() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static ZEN4: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        !*ZEN4.get_or_init(|| {
            crate::simd::avx512_in_halves() && std::arch::is_x86_feature_detected!("avx512f")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// Ask for `bytes` from `at` to be brought into L2 (see [`prefetch_ahead`]; a prefetch past
/// the end of the weights does nothing).
#[inline(always)]
pub(crate) fn prefetch_range(at: *const u8, bytes: usize) {
    let mut offset = 0;
    while offset < bytes {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(offset).cast::<i8>()) };
        offset += 64;
    }
}

/// For a 16-lane kernel on two groups (`w1` the second, `group_bytes` on from the first): asks
/// for block column `b` (`column_bytes`) of the next pair's second group. That group's stream
/// starts cold at each pair (its own prefetch runs ahead within it, the first group's into it
/// only later). Nothing when `group_bytes` is zero (a group run alone).
#[inline(always)]
pub(crate) fn prefetch_next_pair(w1: *const u8, group_bytes: usize, column_bytes: usize, b: usize) {
    if group_bytes != 0 {
        prefetch_range(
            w1.wrapping_add(2 * group_bytes + b * column_bytes),
            column_bytes,
        );
    }
}
