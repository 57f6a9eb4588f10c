//! Products of dense (`F32`, `F16`, `BF16`, or dequantised) weight rows with `f32` activation rows:
//! rows read in place where they can be, in tiles of several weight rows by several
//! activation rows for the AVX2 kernels (`x86_dense.rs`), one row by up to twelve for the
//! AVX-512 ones, a plain dot product without SIMD. A row has the same bits alone and in a
//! batch within a SIMD level.

use super::scalar;
use super::simd::Simd;
use kindle_gguf::quant::GgmlType;

/// Dense weight rows read in place (or dequantised), one or several one after another.
#[derive(Clone, Copy)]
pub(crate) enum Dense<'a> {
    /// `f32` values.
    F32(&'a [f32]),
    /// `f16` values (their bits).
    F16(&'a [u16]),
    /// `bf16` values (their bits: the top half of an `f32`'s).
    Bf16(&'a [u16]),
}

impl<'a> Dense<'a> {
    fn len(self) -> usize {
        match self {
            Dense::F32(a) => a.len(),
            Dense::F16(a) | Dense::Bf16(a) => a.len(),
        }
    }

    /// Row `w` of rows of `cols` values.
    fn row(self, w: usize, cols: usize) -> Dense<'a> {
        match self {
            Dense::F32(a) => Dense::F32(&a[w * cols..(w + 1) * cols]),
            Dense::F16(a) => Dense::F16(&a[w * cols..(w + 1) * cols]),
            Dense::Bf16(a) => Dense::Bf16(&a[w * cols..(w + 1) * cols]),
        }
    }
}

/// An `F32`, `F16` or `BF16` row read in place (little-endian bytes, aligned for the element
/// type), or `None` (another type, a misaligned row, or `F16`/`BF16` without the SIMD kernels
/// that widen it in registers: then it is dequantised into the caller's reused buffer).
pub(crate) fn in_place(ty: GgmlType, simd: Simd, row: &[u8]) -> Option<Dense<'_>> {
    if cfg!(target_endian = "big") {
        return None;
    }
    match ty {
        GgmlType::F32 => {
            // SAFETY: every bit pattern is a valid `f32`; `align_to` keeps the alignment.
            let (head, values, tail) = unsafe { row.align_to::<f32>() };
            (head.is_empty() && tail.is_empty()).then_some(Dense::F32(values))
        }
        GgmlType::F16 if cfg!(target_arch = "x86_64") && simd.any() => {
            // SAFETY: every bit pattern is a valid `u16`; `align_to` keeps the alignment.
            let (head, values, tail) = unsafe { row.align_to::<u16>() };
            (head.is_empty() && tail.is_empty()).then_some(Dense::F16(values))
        }
        GgmlType::BF16 if cfg!(target_arch = "x86_64") && simd.any() => {
            // SAFETY: as for `F16`.
            let (head, values, tail) = unsafe { row.align_to::<u16>() };
            (head.is_empty() && tail.is_empty()).then_some(Dense::Bf16(values))
        }
        _ => None,
    }
}

/// How many weight rows of a dense matrix one tile takes for `m` activation rows at `simd`.
/// The AVX2 kernels keep an accumulator per weight row and activation row of a call, and
/// take the activation rows in threes (twos where three would leave one), so four weight
/// rows for one, two or four activation rows, three otherwise: at most nine accumulators,
/// three activation vectors and a weight vector in the 16 registers (four rows by three
/// spilled: 16.7 against 12.5 ms in the measurement of `x86_dense.rs`'s prefetch comment,
/// `docs/performance.md` 2026-11-29 (8); eight rows for one activation row, to hide the
/// FMA's latency better, was no faster from memory). The AVX-512 `f16` one takes the
/// activation rows in even shares of at most nine ([`share_512`]) and as many weight rows
/// as leave the `W * J` accumulators, `W` weight vectors and an activation vector within 32
/// registers, at most four ([`tile_512`]); the AVX-512 `f32` and `bf16` ones run a row at a
/// time whatever the tile. One row a tile elsewhere.
pub(crate) fn dense_tile(simd: Simd, m: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx512 {
        return tile_512(share_512(m));
    }
    #[cfg(target_arch = "x86_64")]
    if simd.any() {
        return match m {
            1 | 2 | 4 => 4,
            _ => 3,
        };
    }
    let _ = (simd, m);
    1
}

/// The most activation rows an AVX-512 dense call takes.
const J_MAX_512: usize = 9;

/// The largest share of `m` activation rows split evenly into calls of at most
/// [`J_MAX_512`] (the others are one smaller).
fn share_512(m: usize) -> usize {
    m.div_ceil(m.div_ceil(J_MAX_512))
}

/// Weight rows of an AVX-512 dense tile whose calls take at most `j` activation rows: `W`
/// with `W * j + W + 1 <= 32` registers, at most four (eight for one activation row was
/// 2-8% slower from memory at one thread, see `x86_dense.rs`'s prefetch comment; at most
/// four cost 1-5% on products within the caches, criterion `rows_f16_*_m2` to `m5`).
fn tile_512(j: usize) -> usize {
    (31 / (j + 1)).min(4)
}

/// `out[w * m + j] = a_w . x_j` for `f32` or `bf16` weight rows at AVX-512: a row and up to
/// twelve activation rows a call (`x86_dense::dot_f32_rows_avx512`), whatever the tile.
#[cfg(target_arch = "x86_64")]
fn rows_512(a: Dense<'_>, cols: usize, xs: &[f32], out: &mut [f32]) {
    use super::x86_dense as x86;
    let m = xs.len() / cols;
    for w in 0..a.len() / cols {
        let a = a.row(w, cols);
        let out = &mut out[w * m..(w + 1) * m];
        let mut j = 0;
        while j < m {
            let jn = (m - j).min(12);
            let o = &mut out[j..j + jn];
            let x = |jj: usize| &xs[(j + jj) * cols..(j + jj + 1) * cols];
            macro_rules! call {
                ($n:literal) => {{
                    let bs: [&[f32]; $n] = std::array::from_fn(x);
                    // SAFETY: `Avx512` is only chosen when AVX2, FMA, F16C and AVX-512F, BW
                    // and VL were detected; every activation row holds `cols` values and `o`
                    // holds `$n`.
                    unsafe {
                        match a {
                            Dense::F32(a) => x86::dot_f32_rows_avx512::<$n>(a, bs, o),
                            // (`dot_rows` gives `f16` rows to the tiles; this keeps it total.)
                            Dense::F16(a) => {
                                let mut t = [[0f32; $n]; 1];
                                x86::dot_f16_tile_avx512::<1, $n>(a, cols, bs, &mut t, false);
                                o.copy_from_slice(&t[0]);
                            }
                            Dense::Bf16(a) => x86::dot_bf16_rows_avx512::<$n>(a, bs, o),
                        }
                    }
                }};
            }
            match jn {
                1 => call!(1),
                2 => call!(2),
                3 => call!(3),
                4 => call!(4),
                5 => call!(5),
                6 => call!(6),
                7 => call!(7),
                8 => call!(8),
                9 => call!(9),
                10 => call!(10),
                11 => call!(11),
                _ => call!(12),
            }
            j += jn;
        }
    }
}

/// `out[w * m + j] = a_w . x_j` for the weight rows `a_w` of a tile (`a`, rows of `cols`
/// values one after another) and the `m` activation rows `x_j` of `xs`, each output with
/// the same arithmetic whatever the tile and `m` (so a row has the same bits alone and in a
/// batch). The kernels read each weight vector once for the activation rows of a call
/// (and widen `f16` in registers) and each activation vector once for the tile's weight
/// rows; a tile cut short by the end of a range runs a row at a time.
pub(crate) fn dot_rows(simd: Simd, a: Dense<'_>, cols: usize, xs: &[f32], out: &mut [f32]) {
    let tile = a.len() / cols;
    let m = xs.len() / cols;
    debug_assert_eq!(out.len(), tile * m);
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx512 {
        use super::x86_dense as x86;
        let Dense::F16(a) = a else {
            rows_512(a, cols, xs, out);
            return;
        };
        let share = share_512(m);
        let mut j = 0;
        while j < m {
            // Even shares: the first `m % calls` calls take `share`, the rest one fewer.
            let calls = (m - j).div_ceil(share);
            let jn = (m - j).div_ceil(calls);
            let x = |jj: usize| &xs[(j + jj) * cols..(j + jj + 1) * cols];
            // The first call of a tile prefetches ahead.
            let ahead = j == 0;
            macro_rules! call {
                ($w:literal, $n:literal, $w0:expr) => {{
                    let bs: [&[f32]; $n] = std::array::from_fn(x);
                    let mut o = [[0f32; $n]; $w];
                    let a = &a[$w0 * cols..($w0 + $w) * cols];
                    // SAFETY: `Avx512` is only chosen when AVX2, FMA, F16C and AVX-512F, BW
                    // and VL were detected; `a` holds `$w` rows of `cols` values and every
                    // activation row `cols` values.
                    unsafe { x86::dot_f16_tile_avx512::<$w, $n>(a, cols, bs, &mut o, ahead) };
                    for (w, o) in o.iter().enumerate() {
                        let at = ($w0 + w) * m + j;
                        out[at..at + $n].copy_from_slice(o);
                    }
                }};
            }
            // `(tile_512(share), share)` and the `(tile_512(share), share - 1)` that even
            // shares give.
            match (tile, jn) {
                (4, 1) => call!(4, 1, 0),
                (4, 2) => call!(4, 2, 0),
                (4, 3) => call!(4, 3, 0),
                (4, 4) => call!(4, 4, 0),
                (4, 5) => call!(4, 5, 0),
                (4, 6) => call!(4, 6, 0),
                (3, 6) => call!(3, 6, 0),
                (3, 7) => call!(3, 7, 0),
                (3, 8) => call!(3, 8, 0),
                (3, 9) => call!(3, 9, 0),
                // A tile cut short by the end of the range: a row at a time.
                _ => {
                    for w in 0..tile {
                        match jn {
                            1 => call!(1, 1, w),
                            2 => call!(1, 2, w),
                            3 => call!(1, 3, w),
                            4 => call!(1, 4, w),
                            5 => call!(1, 5, w),
                            6 => call!(1, 6, w),
                            7 => call!(1, 7, w),
                            8 => call!(1, 8, w),
                            _ => call!(1, 9, w),
                        }
                    }
                }
            }
            j += jn;
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if simd.any() {
        use super::x86_dense as x86;
        let mut j = 0;
        while j < m {
            // Threes, and twos where three would leave one (four rows: two and two).
            let jn = match m - j {
                1 => 1,
                2 | 4 => 2,
                _ => 3,
            };
            let x = |jj: usize| &xs[(j + jj) * cols..(j + jj + 1) * cols];
            // The first call of a tile prefetches the next one.
            let ahead = j == 0;
            macro_rules! call {
                ($w:literal, $n:literal, $a:expr, $w0:expr) => {{
                    let bs: [&[f32]; $n] = std::array::from_fn(x);
                    let mut o = [[0f32; $n]; $w];
                    // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were
                    // detected; `$a` holds `$w` rows of `cols` values and every activation
                    // row `cols` values.
                    unsafe {
                        match $a {
                            Dense::F32(a) => {
                                x86::dot_f32_tile::<$w, $n>(a, cols, bs, &mut o, ahead)
                            }
                            Dense::F16(a) => {
                                x86::dot_f16_tile::<$w, $n>(a, cols, bs, &mut o, ahead)
                            }
                            Dense::Bf16(a) => {
                                x86::dot_bf16_tile::<$w, $n>(a, cols, bs, &mut o, ahead)
                            }
                        }
                    }
                    for (w, o) in o.iter().enumerate() {
                        let at = ($w0 + w) * m + j;
                        out[at..at + $n].copy_from_slice(o);
                    }
                }};
            }
            match (tile, jn) {
                (4, 1) => call!(4, 1, a, 0),
                (4, 2) => call!(4, 2, a, 0),
                (3, 2) => call!(3, 2, a, 0),
                (3, 3) => call!(3, 3, a, 0),
                // A tile cut short by the end of the range: a row at a time.
                _ => {
                    for w in 0..tile {
                        let row = a.row(w, cols);
                        match jn {
                            1 => call!(1, 1, row, w),
                            2 => call!(1, 2, row, w),
                            _ => call!(1, 3, row, w),
                        }
                    }
                }
            }
            j += jn;
        }
        return;
    }
    // (`in_place` gives `F16` rows only with SIMD; widening here keeps this path total.)
    for w in 0..tile {
        let widened: Vec<f32>;
        let a = match a.row(w, cols) {
            Dense::F32(a) => a,
            Dense::F16(a) => {
                widened = a
                    .iter()
                    .map(|&h| half::f16::from_bits(h).to_f32())
                    .collect();
                &widened
            }
            Dense::Bf16(a) => {
                widened = a
                    .iter()
                    .map(|&h| f32::from_bits(u32::from(h) << 16))
                    .collect();
                &widened
            }
        };
        for j in 0..m {
            out[w * m + j] = dot_f32(simd, a, &xs[j * cols..(j + 1) * cols]);
        }
    }
}

/// `a . b` in `f32`.
#[inline]
fn dot_f32(simd: Simd, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd.any() {
        // SAFETY: a SIMD level is only chosen when AVX2, FMA and F16C were detected.
        unsafe {
            return super::x86::dot_f32(a, b);
        }
    }
    let _ = simd;
    scalar::dot_f32(a, b)
}
