//! A copy of a product's `f32` activations that starts on a cache line.
//!
//! The `f32` kernels load their activations in 32-byte (AVX2) or 64-byte (AVX-512) vectors.
//! A caller's `Vec<f32>` starts wherever the allocator put it, often 16 bytes into a line,
//! and then every other vector load spans two lines: measured on the Zen 3 VM (AVX2),
//! alternating in one process, the nine-row dense `F16` loop of a speculative verification
//! ran 0.33-0.35 ns an FMA on such activations against 0.25-0.27 from a line. Copying them costs one pass over `m * cols` values that stay in cache, a
//! small fraction of a product that multiplies each of them by every weight row. The copy
//! changes only addresses, never the arithmetic: a row keeps its bits.

/// The alignment every copy starts at: a cache line, one 512-bit vector.
pub(crate) const ALIGN: usize = 64;

/// `f32` values in a line.
const LINE: usize = ALIGN / size_of::<f32>();

/// A reusable buffer whose values start on a cache line: the allocation holds a line more
/// than the values, which start at its first line boundary.
#[derive(Default)]
pub(crate) struct LineBuf {
    buf: Vec<f32>,
    start: usize,
    len: usize,
}

impl LineBuf {
    /// Room for `len` values on a line, to be written by the caller (the allocation reused:
    /// only what it did not hold yet is zeroed).
    pub(crate) fn resize(&mut self, len: usize) -> &mut [f32] {
        self.buf.resize(len + LINE - 1, 0.0);
        self.start = self.buf.as_ptr().align_offset(ALIGN);
        self.len = len;
        &mut self.buf[self.start..self.start + len]
    }

    /// The values of the last [`resize`](LineBuf::resize).
    pub(crate) fn values(&self) -> &[f32] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The allocation's size in values.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

/// `x` copied to a [`ALIGN`]-byte boundary, or nothing where `x` already starts on one.
#[derive(Default)]
pub(crate) struct Aligned(Option<LineBuf>);

impl Aligned {
    /// A copy of `x` if it does not start on an [`ALIGN`]-byte boundary (else an empty one:
    /// read `x` itself, [`get`](Aligned::get)).
    pub(crate) fn of(x: &[f32]) -> Aligned {
        if (x.as_ptr() as usize).is_multiple_of(ALIGN) {
            return Aligned(None);
        }
        let mut copy = LineBuf::default();
        copy.resize(x.len()).copy_from_slice(x);
        Aligned(Some(copy))
    }

    /// The aligned copy, or `x` where none was needed.
    pub(crate) fn get<'a>(&'a self, x: &'a [f32]) -> &'a [f32] {
        self.0.as_ref().map_or(x, LineBuf::values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misaligned_input_is_copied_to_a_line_and_an_aligned_one_is_read_in_place() {
        let mut lines = LineBuf::default();
        lines
            .resize(64)
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as f32);
        let all = lines.values();
        assert!((all.as_ptr() as usize).is_multiple_of(ALIGN));
        for offset in [0, 1, 4, 15, 16] {
            let x = &all[offset..offset + 40];
            let copy = Aligned::of(x);
            let got = copy.get(x);
            assert_eq!(got, x, "offset {offset}: the same values");
            assert!(
                (got.as_ptr() as usize).is_multiple_of(ALIGN),
                "offset {offset}"
            );
            let in_place = offset % 16 == 0;
            assert_eq!(got.as_ptr() == x.as_ptr(), in_place, "offset {offset}");
        }
    }
}
