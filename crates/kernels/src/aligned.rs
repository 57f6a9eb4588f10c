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

/// One cache line of values (the unit of the copy's allocation, for its alignment).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `x` copied to a [`ALIGN`]-byte boundary, or nothing where `x` already starts on one.
#[derive(Default)]
pub(crate) struct Aligned {
    lines: Vec<Line>,
    len: usize,
}

impl Aligned {
    /// A copy of `x` if it does not start on an [`ALIGN`]-byte boundary (else an empty one:
    /// read `x` itself, [`get`](Aligned::get)).
    pub(crate) fn of(x: &[f32]) -> Aligned {
        if (x.as_ptr() as usize).is_multiple_of(ALIGN) {
            return Aligned::default();
        }
        let mut lines = vec![Line([0.0; 16]); x.len().div_ceil(16)];
        for (line, values) in lines.iter_mut().zip(x.chunks(16)) {
            line.0[..values.len()].copy_from_slice(values);
        }
        Aligned {
            lines,
            len: x.len(),
        }
    }

    /// The aligned copy, or `x` where none was needed.
    pub(crate) fn get<'a>(&'a self, x: &'a [f32]) -> &'a [f32] {
        if self.lines.is_empty() {
            return x;
        }
        // SAFETY: `lines` holds `len.div_ceil(16)` lines of 16 initialised `f32`s each,
        // laid out contiguously (`repr(C)`, no padding: 64 bytes of values per line).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misaligned_input_is_copied_to_a_line_and_an_aligned_one_is_read_in_place() {
        let mut lines = vec![Line([0.0; 16]); 4];
        for (i, line) in lines.iter_mut().enumerate() {
            line.0 = std::array::from_fn(|k| (16 * i + k) as f32);
        }
        // SAFETY: four lines of 16 values each.
        let all = unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), 64) };
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
