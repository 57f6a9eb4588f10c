//! Software prefetch for the packed group kernels (`x86.rs`, `x86_q5.rs`) and the dense ones
//! (`x86_dense.rs`): a leaf module.

use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};

/// How many block columns ahead of the one being multiplied [`prefetch_ahead`] asks for.
const PREFETCH_COLUMNS: usize = 8;

/// Ask for the block column [`PREFETCH_COLUMNS`] past `col` (each `bytes` long) to be brought
/// into L1. The hardware prefetchers alone were measured to leave the packed kernels waiting
/// on their weight loads on an Intel Xeon (Sapphire Rapids) VM: one-thread decode went from
/// about 53 to 80 tok/s with this. A prefetch past the end of the weights does nothing (it
/// never faults).
#[inline(always)]
pub(crate) fn prefetch_ahead(col: *const u8, bytes: usize) {
    let ahead = col.wrapping_add(PREFETCH_COLUMNS * bytes);
    let mut offset = 0;
    while offset < bytes {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(offset).cast::<i8>()) };
        offset += 64;
    }
}
