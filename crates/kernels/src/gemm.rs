//! The prefill product: a register-blocked `f32` matrix multiply over weights dequantised a few
//! rows at a time (a leaf module).
//!
//! For many activation rows (a prompt), decoding each weight block once per few activation
//! rows, as the group and row kernels do, leaves the vector pipes mostly converting and
//! shuffling: they ran at about a fifth of this CPU's `f32` FMA peak. Here the activations are
//! transposed once per product (once for several products of one input) into panels of [`MB`]
//! rows (`[cols][MB]`: the rows in the lanes, [`pack_activations`]); each task
//! dequantises a few weight rows at a time (each row's values exactly those of
//! `kindle_gguf`'s dequantisation, the reference the kernels are tested against), and a
//! micro-kernel keeps a tile of `weight rows x MB` outputs in registers over the whole inner
//! dimension: one broadcast weight feeds two FMAs of 16 (or 8) activation rows, and one load
//! of activations feeds one FMA per weight row of the tile. A weight is dequantised once per
//! [`MB`] rows instead of once per few, so this pays from [`GEMM_MIN_ROWS`] rows on.
//!
//! Every output is `fma(x[k], w[k], acc)` over `k = 0, 1, ..., cols - 1` in order from zero,
//! whatever the SIMD level, tile, thread split or number of rows: a row has the same bits in
//! any prefill. They are not the bits of the decode kernels (which sum a block at a time and
//! reduce across lanes); a prefill of fewer than [`GEMM_MIN_ROWS`] rows (a speculative
//! verification, a decode batch) keeps the decode kernels' bits.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Activation rows from which an `f32` product runs here instead of the decode kernels (the
/// crate root decides, with the CPU's SIMD level and the activation format). Below 32 rows a
/// panel is more than half empty. Measured on an Intel Sapphire Rapids VM, alternating
/// `kindle bench -p 16,24,31,32,64` with this at 16 and at 32 (tok/s, 1 / 2 threads): SmolLM2
/// Q4_1 pp16 144 / 271 -> 241 / 425, pp24 219 / 390 -> 245 / 427, pp31 281 / 511 -> 249 /
/// 438; Gemma-3 Q4_K_M pp16 101 / 202 -> 185 / 338, pp24 149 / 284 -> 230 / 349, pp31 193 /
/// 337 -> 215 / 317: the decode kernels win up to about 28 rows.
pub const GEMM_MIN_ROWS: usize = 32;

/// Activation rows of a panel: two 512-bit vectors (the AVX2 micro-kernel takes them as four
/// 256-bit ones, in two passes of two).
const MB: usize = 32;

/// Weight rows of a register tile with AVX-512 (24 of the 32 registers accumulate).
pub(crate) const WR512: usize = 12;

/// Weight rows of a register tile with AVX2 (12 of the 16 registers accumulate).
pub(crate) const WR256: usize = 6;

/// `dequantize(r, out, scratch)`: row `r` of a weight (`out.len()` values) into `out`, with
/// `scratch` for whatever bytes it needs on the way.
pub(crate) type RowDequantizer<'a> = dyn Fn(usize, &mut [f32], &mut Vec<u8>) + 'a;

/// `out[j * ld + (r - start)] = x[j] . W[r]` for the weight rows `r` in `start..end` and the
/// `m` activation rows `x[j]`, given as the `panels` [`pack_activations`] makes of them, with
/// register tiles of `wr` weight rows: [`WR512`] (AVX-512) or [`WR256`] (AVX2).
/// `dequantize(r, out, scratch)` writes row `r` of `W` (`cols` values) to `out`. `out` is
/// written through a pointer so that threads can fill disjoint column ranges of one `[m, ld]`
/// output.
///
/// # Safety
/// The CPU runs `wr`'s micro-kernel (AVX-512F for [`WR512`], AVX2 + FMA for [`WR256`]),
/// `panels` is [`pack_activations`] of `m` rows of `cols`, `dequantize` writes rows
/// `start..end`, and `out` points to `m` rows of `ld >= end - start` values whose columns
/// `0..end - start` nothing else accesses during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rows_in_tiles(
    wr: usize,
    dequantize: &RowDequantizer<'_>,
    panels: &[f32],
    m: usize,
    cols: usize,
    start: usize,
    end: usize,
    out: *mut f32,
    ld: usize,
) {
    debug_assert_eq!(panels.len(), m.div_ceil(MB) * cols * MB);
    // Weight rows `stride` apart, a cache line more than a row, so that a tile's rows do not
    // all map to one set of the L1 cache (rows of 2048 values are 8 KiB apart).
    let stride = cols + 16;
    let mut tile = vec![0f32; wr * stride];
    let mut scratch = Vec::new();
    let mut acc = [0f32; WR512 * MB];
    let mut n0 = start;
    while n0 < end {
        let nr = wr.min(end - n0);
        for (i, row) in tile.chunks_exact_mut(stride).enumerate() {
            if i < nr {
                dequantize(n0 + i, &mut row[..cols], &mut scratch);
            } else {
                row.fill(0.0);
            }
        }
        for (p, panel) in panels.chunks_exact(cols * MB).enumerate() {
            let j0 = p * MB;
            let mb = MB.min(m - j0);
            // SAFETY: `tile` holds `wr` rows of `stride >= cols`, `panel` `cols * MB` values,
            // `acc` `wr * MB`.
            unsafe { tile_kernel(wr, cols, &tile, stride, panel, &mut acc) };
            for j in 0..mb {
                // SAFETY: row `j0 + j < m` of `out`, columns `n0 - start ..+ nr` of the
                // caller's `0..end - start`.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(out.add((j0 + j) * ld + n0 - start), nr)
                };
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = acc[i * MB + j];
                }
            }
        }
        n0 += nr;
    }
}

/// `x` (`m` rows of `cols`) as panels of [`MB`] rows, each `[cols][MB]` (rows past `m` zero):
/// the micro-kernel loads the panel's rows at one inner index as vectors.
pub(crate) fn pack_activations(x: &[f32], m: usize, cols: usize) -> Vec<f32> {
    let panels = m.div_ceil(MB);
    let mut a = vec![0f32; panels * cols * MB];
    for (p, dst) in a.chunks_exact_mut(cols * MB).enumerate() {
        let rows = &x[p * MB * cols..(m * cols).min((p + 1) * MB * cols)];
        // Eight rows at a time, so that each pass writes whole lines of the panel.
        for (g, group) in rows.chunks(8 * cols).enumerate() {
            for k in 0..cols {
                for (i, row) in group.chunks_exact(cols).enumerate() {
                    dst[k * MB + g * 8 + i] = row[k];
                }
            }
        }
    }
    a
}

/// One register tile: `acc[i * MB + j] = sum over k < cols of w[i * stride + k] * a[k * MB + j]`
/// for `i < wr`, `j < MB`, each an FMA chain from zero in `k` order.
///
/// # Safety
/// The CPU runs `wr`'s micro-kernel; `w` holds `wr` rows `stride >= cols` apart, `a` holds `cols * MB` values
/// and `acc` `wr * MB`; `wr` is this CPU's tile height.
#[cfg(target_arch = "x86_64")]
unsafe fn tile_kernel(
    wr: usize,
    cols: usize,
    w: &[f32],
    stride: usize,
    a: &[f32],
    acc: &mut [f32],
) {
    debug_assert!(w.len() >= (wr - 1) * stride + cols && a.len() >= cols * MB);
    debug_assert!(acc.len() >= wr * MB);
    // SAFETY: the caller's guarantees; `wr` selects the kernel of this CPU's level.
    unsafe {
        if wr == WR512 {
            tile_avx512(cols, w.as_ptr(), stride, a.as_ptr(), acc.as_mut_ptr());
        } else {
            for half in [0, 16] {
                tile_avx2(cols, w.as_ptr(), stride, a.as_ptr(), acc.as_mut_ptr(), half);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_kernel(_: usize, _: usize, _: &[f32], _: usize, _: &[f32], _: &mut [f32]) {
    unreachable!("no micro-kernel without x86-64 SIMD (the crate root never asks)")
}

/// [`tile_kernel`] with AVX-512: 12 weight rows by 32 activation rows in 24 registers.
///
/// # Safety
/// AVX-512F, and [`tile_kernel`]'s buffers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(cols: usize, w: *const f32, stride: usize, a: *const f32, acc: *mut f32) {
    // SAFETY: every access is inside the caller's buffers.
    unsafe {
        let mut c = [[_mm512_setzero_ps(); 2]; WR512];
        for k in 0..cols {
            let a0 = _mm512_loadu_ps(a.add(k * MB));
            let a1 = _mm512_loadu_ps(a.add(k * MB + 16));
            for (i, c) in c.iter_mut().enumerate() {
                let v = _mm512_set1_ps(*w.add(i * stride + k));
                c[0] = _mm512_fmadd_ps(v, a0, c[0]);
                c[1] = _mm512_fmadd_ps(v, a1, c[1]);
            }
        }
        for (i, c) in c.iter().enumerate() {
            _mm512_storeu_ps(acc.add(i * MB), c[0]);
            _mm512_storeu_ps(acc.add(i * MB + 16), c[1]);
        }
    }
}

/// Activation rows `half..half + 16` of [`tile_kernel`] with AVX2 + FMA: 6 weight rows by 16
/// activation rows in 12 registers.
///
/// # Safety
/// AVX2 and FMA, and [`tile_kernel`]'s buffers; `half` is 0 or 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    cols: usize,
    w: *const f32,
    stride: usize,
    a: *const f32,
    acc: *mut f32,
    half: usize,
) {
    // SAFETY: every access is inside the caller's buffers.
    unsafe {
        let mut c = [[_mm256_setzero_ps(); 2]; WR256];
        let a = a.add(half);
        for k in 0..cols {
            let a0 = _mm256_loadu_ps(a.add(k * MB));
            let a1 = _mm256_loadu_ps(a.add(k * MB + 8));
            for (i, c) in c.iter_mut().enumerate() {
                let v = _mm256_set1_ps(*w.add(i * stride + k));
                c[0] = _mm256_fmadd_ps(v, a0, c[0]);
                c[1] = _mm256_fmadd_ps(v, a1, c[1]);
            }
        }
        let acc = acc.add(half);
        for (i, c) in c.iter().enumerate() {
            _mm256_storeu_ps(acc.add(i * MB), c[0]);
            _mm256_storeu_ps(acc.add(i * MB + 8), c[1]);
        }
    }
}
