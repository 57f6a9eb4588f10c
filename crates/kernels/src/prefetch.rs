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

/// Whether the AVX-512 `Q8_0` group kernels (`x86_512`'s `f32` tiles, `x86_q8_512::q8_0_q8`)
/// prefetch their block columns with [`prefetch_ahead`]: not where the CPU is an AMD Zen 4
/// (the only AVX-512 CPU of family 0x19, [`crate::simd::avx512_in_halves`]). There the
/// hardware prefetchers alone streamed a `Q8_0` matrix faster than with the prefetch 12
/// columns (3.2 KiB) ahead, at every distance tried from 4 to 64 columns and with either
/// activation format (`kindle bench -p 0 -n 64 --profile`, alternating, three rounds, ms a
/// token for Gemma-3-270M's 178 MB `Q8_0` head at two threads: `f32` 5.51 -> 4.64, 8-bit 5.12
/// -> 4.48; a SmolLM2 file quantized to `Q8_0` one thread, 8-bit, 137 -> 195 tok/s); the
/// other formats' kernels stream best with it there too (12 columns: a Gemma-3 step's `Q5_0`,
/// `Q4_K` and `Q6_K` products 4.8 ms a token at one thread against 6.2 without). Intel's
/// Sapphire Rapids gained from the prefetch on the same head ([`prefetch_ahead`]).
#[inline]
pub(crate) fn q8_0_columns() -> bool {
    !crate::simd::avx512_in_halves()
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
