//! Packed weight buffers carved out of large regions backed by transparent huge pages.
//!
//! A decode step streams every weight once, and with 4 KiB pages it takes a TLB miss every
//! 4 KiB and the hardware prefetchers stop at every page boundary. `packed.rs` asks Linux for
//! huge pages (`madvise(MADV_HUGEPAGE)`), but only the 2 MiB-aligned inside of a buffer can
//! get them, and most matrices of a small model are smaller than that (Gemma-3-270M's
//! `Q5_0` FFN gate/up: 0.9 MB each): measured on the Sapphire Rapids VM, its layers' `Q5_0`
//! rows streamed at half the rate of the 178 MB head that had huge pages. Here every packed
//! matrix of up to [`CHUNK`] / 4 bytes is placed in a shared 2 MiB-aligned region of
//! [`CHUNK`] bytes that asks for huge pages as a whole; a larger one gets a region of its own.
//! A region is unmapped when the last buffer in it (and the allocator, for the region it is
//! filling) lets go. Elsewhere than Linux a buffer is a plain zeroed allocation.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Bytes of a shared region (32 huge pages).
pub(crate) const CHUNK: usize = 64 << 20;

/// The alignment of each buffer within a region (a cache line, as every kernel load wants).
const ALIGN: usize = 64;

/// Huge-page size on x86-64 Linux.
#[cfg(target_os = "linux")]
const HUGE: usize = 2 << 20;

/// One mapped region: zeroed pages, asked to be backed by huge pages.
struct Region {
    base: NonNull<u8>,
    len: usize,
    /// Elsewhere than Linux, the allocation itself.
    #[cfg(not(target_os = "linux"))]
    _owned: Vec<u8>,
}

// SAFETY: a `Region` is a block of memory; the buffers that share it own disjoint ranges of
// it (`Buffer`), and the region itself is only unmapped once, on drop.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: `&Region` gives no access to its bytes.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed region of at least `len` bytes (a whole number of huge pages on Linux).
    fn new(len: usize) -> Region {
        #[cfg(target_os = "linux")]
        {
            let len = len.next_multiple_of(HUGE).max(HUGE);
            // Map a huge page more than asked, then trim to a 2 MiB-aligned start.
            let over = len + HUGE;
            // SAFETY: an anonymous private mapping; the result is checked.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    over,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert!(
                at != libc::MAP_FAILED,
                "out of memory mapping {over} bytes for weights"
            );
            let start = (at as usize).next_multiple_of(HUGE);
            let (head, tail) = (start - at as usize, at as usize + over - (start + len));
            // SAFETY: the trimmed ranges lie within the mapping just made and are not used.
            unsafe {
                if head > 0 {
                    libc::munmap(at, head);
                }
                if tail > 0 {
                    libc::munmap((start + len) as *mut libc::c_void, tail);
                }
                // A hint: where it is refused, the region works with 4 KiB pages.
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
            Region {
                base: NonNull::new(start as *mut u8).expect("mmap never returns null"),
                len,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut owned = vec![0u8; len.max(1)];
            Region {
                base: NonNull::new(owned.as_mut_ptr()).expect("a Vec's pointer"),
                len,
                _owned: owned,
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: `base..base + len` is this region's mapping, unmapped only here, and no
        // buffer into it is alive (each holds the region).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// A zeroed buffer in a region, owned alone (no other buffer overlaps it).
pub(crate) struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    _region: Arc<Region>,
}

// SAFETY: a `Buffer` owns its range exclusively (`&mut` for writes, `&` for reads), like a
// `Vec<u8>`; the shared region only keeps the mapping alive.
unsafe impl Send for Buffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies within the live region and belongs to this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// The region being filled and how much of it is handed out.
static FILLING: Mutex<Option<(Arc<Region>, usize)>> = Mutex::new(None);

/// A zeroed buffer of `len` bytes: a range of the shared region being filled (a new one when
/// it has no room), or a region of its own when `len` exceeds [`CHUNK`] / 4.
pub(crate) fn zeroed(len: usize) -> Buffer {
    if len > CHUNK / 4 {
        let region = Arc::new(Region::new(len));
        return Buffer {
            ptr: region.base,
            len,
            _region: region,
        };
    }
    let mut filling = FILLING.lock().unwrap_or_else(|e| e.into_inner());
    let used = match &*filling {
        Some((region, used)) if used + len <= region.len => *used,
        _ => {
            *filling = Some((Arc::new(Region::new(CHUNK)), 0));
            0
        }
    };
    let (region, next) = filling.as_mut().expect("set above");
    *next = (used + len).next_multiple_of(ALIGN);
    // SAFETY: `used + len <= region.len`: the range lies within the region, and no other
    // buffer was given any of it (`next` only grows).
    let ptr = unsafe { NonNull::new_unchecked(region.base.as_ptr().add(used)) };
    Buffer {
        ptr,
        len,
        _region: Arc::clone(region),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers are zeroed, disjoint and aligned; small ones share a region, large ones get
    /// their own; writing one leaves the others untouched.
    #[test]
    fn buffers_are_zeroed_disjoint_and_aligned() {
        let mut bufs: Vec<Buffer> = [1000, 64, 1 << 20, 3, CHUNK / 4 + 1, 4096]
            .into_iter()
            .map(zeroed)
            .collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.as_slice().iter().all(|&v| v == 0), "buffer {i} zeroed");
            assert_eq!(
                b.as_slice().as_ptr() as usize % ALIGN,
                0,
                "buffer {i} aligned"
            );
            b.as_mut_slice().fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.as_slice().iter().all(|&v| v == i as u8 + 1),
                "buffer {i} kept"
            );
        }
        let ranges: Vec<(usize, usize)> = bufs
            .iter()
            .map(|b| (b.as_slice().as_ptr() as usize, b.as_slice().len()))
            .collect();
        for (i, &(a, la)) in ranges.iter().enumerate() {
            for &(c, lc) in &ranges[i + 1..] {
                assert!(a + la <= c || c + lc <= a, "buffers overlap");
            }
        }
        assert!(
            !Arc::ptr_eq(&bufs[4]._region, &bufs[0]._region),
            "a large one alone"
        );
    }
}
