//! The machine's read bandwidth, measured the way the kernels stream weights: on a
//! [`Kernels`] handle's threads, each reading its own contiguous share of a buffer larger
//! than the caches, with and without a software prefetch into L2 ahead of the loads (passes
//! alternate; the best counts).
//!
//! Decode reads every weight once per token, so this is its bound: `kindle bench
//! --bandwidth` sets a decode's weight bytes per second beside it. Which loop reads faster
//! depends on the CPU's hardware prefetchers, so both run: on an Intel Sapphire Rapids VM one
//! thread read 13.1 GB/s without software prefetch and 14.2-15.6 GB/s with it (2 KiB ahead
//! into L2), and kindle's `Q8_0` head streamed faster than the plain loop; on an AMD Zen 4
//! VM one thread read 26-29 GB/s without it and about 20 with it (two threads about the
//! same either way), as the kernels that stream fastest there do best without it
//! (`prefetch::fast_kernels`).

use std::hint::black_box;
use std::time::Instant;

use crate::Kernels;

/// Bytes each thread reads ahead of its loads (`prefetcht1`): 2 KiB measured best of
/// 1, 2 and 3 KiB (and better than `prefetcht0` or `prefetchnta`) on the machine above.
const PREFETCH_BYTES: usize = 2048;

/// The read bandwidth of `kernels`' threads, in bytes per second: the best of `passes`
/// passes (at least two: they alternate with and without the software prefetch) over a
/// buffer of `bytes` (rounded up to 4 KiB; make it several times the last level cache, 256
/// MiB or more), split in one contiguous share per thread. The buffer is written once before
/// the first pass (its pages are then resident) and freed on return.
///
/// ```
/// use kindle_kernels::{KernelOptions, Kernels, read_bandwidth};
///
/// let gbps = read_bandwidth(&Kernels::new(KernelOptions::threads(1)), 1 << 20, 2) / 1e9;
/// assert!(gbps > 0.1, "{gbps} GB/s");
/// ```
pub fn read_bandwidth(kernels: &Kernels, bytes: usize, passes: usize) -> f64 {
    let words = bytes.next_multiple_of(4096) / 8;
    // Memory as the packed weights get it: huge pages where the system grants them.
    let mut memory = crate::arena::zeroed(words * 8);
    // SAFETY: any bytes are valid `u64`s; the buffer is 64-byte aligned and a whole number of
    // words long (checked below), so the whole of it is the middle slice.
    let (head, buffer, tail) = unsafe { memory.as_mut_slice().align_to_mut::<u64>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "an aligned buffer of whole words"
    );
    for (i, w) in buffer.iter_mut().enumerate() {
        *w = i as u64;
    }
    let buffer = &*buffer;
    let threads = kernels.threads();
    let share = words.div_ceil(threads).next_multiple_of(32);
    let mut best = 0f64;
    for pass in 0..passes.max(2) {
        // Passes alternate: with the software prefetch, then without.
        let ahead = pass % 2 == 0;
        let start = Instant::now();
        kernels.parallel_for(threads, &|t| {
            let from = (t * share).min(words);
            let to = ((t + 1) * share).min(words);
            black_box(read(&buffer[from..to], ahead));
        });
        let seconds = start.elapsed().as_secs_f64();
        best = best.max((words * 8) as f64 / seconds);
    }
    best
}

/// The wrapping sum of `words`, read 256 bytes a step into eight independent sums (bound by
/// the loads, not by an add chain), prefetching [`PREFETCH_BYTES`] ahead if `ahead`.
fn read(words: &[u64], ahead: bool) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(32);
    let rest: u64 = chunks.remainder().iter().fold(0, |a, &w| a.wrapping_add(w));
    for chunk in chunks {
        if ahead {
            prefetch(chunk.as_ptr().cast::<u8>().wrapping_add(PREFETCH_BYTES));
        }
        for (k, a) in acc.iter_mut().enumerate() {
            let s = chunk[k]
                .wrapping_add(chunk[8 + k])
                .wrapping_add(chunk[16 + k])
                .wrapping_add(chunk[24 + k]);
            *a = a.wrapping_add(s);
        }
    }
    acc.iter().fold(rest, |a, &b| a.wrapping_add(b))
}

/// Ask for the four cache lines from `at` into L2 (nothing off x86-64).
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    for line in 0..4 {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(64 * line).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KernelOptions;

    /// The sum covers every word once, whatever the length (whole steps and a remainder).
    #[test]
    fn read_sums_every_word() {
        for n in [0usize, 1, 31, 32, 33, 1000] {
            let words: Vec<u64> = (0..n as u64).collect();
            for ahead in [true, false] {
                assert_eq!(read(&words, ahead), (0..n as u64).sum::<u64>(), "{n} words");
            }
        }
    }

    /// One and two threads each give a positive, finite rate.
    #[test]
    fn bandwidth_is_a_rate() {
        for t in [1, 2] {
            let b = read_bandwidth(&Kernels::new(KernelOptions::threads(t)), 4 << 20, 2);
            assert!(b.is_finite() && b > 1e8, "{t} threads: {b} B/s");
        }
    }
}
