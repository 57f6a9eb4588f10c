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
