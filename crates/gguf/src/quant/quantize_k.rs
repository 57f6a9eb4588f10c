//! `Q4_K`, `Q5_K` and `Q6_K` quantisation, following ggml's `quantize_row_q4_K_ref`,
//! `quantize_row_q5_K_ref` and `quantize_row_q6_K_ref` (with `make_qkx2_quants` and
//! `make_qx_quants`) operation by operation: what `llama-quantize` runs for these types when
//! no importance matrix is given. As in `quantize_low_k.rs`, plain arithmetic (ggml builds
//! these without fused multiply-adds), so the bytes are the ones `llama-quantize` writes
//! (`tests/ggml_quantizers.rs` checks them against ggml's library).

use super::f16_le;
use super::kquants::QK_K;
use super::quantize_low_k::{
    GROUP_MAX_EPS, Search, f16, make_qkx2_quants, nearest_int, signed_max,
};

/// One `Q4_K` super-block of `x` (256 values) appended to `out` (144 bytes).
pub(super) fn q4_k(x: &[f32], out: &mut Vec<u8>) {
    let search = Search {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let (head, levels) = affine_super_block(x, 15, search);
    out.extend_from_slice(&head);
    for half in levels.chunks_exact(64) {
        out.extend((0..32).map(|l| half[l] | (half[l + 32] << 4)));
    }
}

/// One `Q5_K` super-block of `x` (256 values) appended to `out` (176 bytes).
pub(super) fn q5_k(x: &[f32], out: &mut Vec<u8>) {
    let search = Search {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let (head, levels) = affine_super_block(x, 31, search);
    out.extend_from_slice(&head);
    // The fifth bits: value `64 n + j` in bit `2 n` of byte `j`, value `64 n + 32 + j` in bit
    // `2 n + 1`.
    let mut qh = [0u8; QK_K / 8];
    for (n, part) in levels.chunks_exact(64).enumerate() {
        for (j, h) in qh.iter_mut().enumerate() {
            *h |= (part[j] >> 4) << (2 * n) | (part[j + 32] >> 4) << (2 * n + 1);
        }
    }
    out.extend_from_slice(&qh);
    for part in levels.chunks_exact(64) {
        out.extend((0..32).map(|j| (part[j] & 0x0F) | ((part[j + 32] & 0x0F) << 4)));
    }
}

/// What `Q4_K` and `Q5_K` share: eight groups of 32 with a scale and a min each (searched by
/// `make_qkx2_quants`, weighted by `sqrt(mean(x^2)) + |x|`), the scales and mins as 6-bit
/// multiples of two `f16` factors, and each value's level recomputed from those. Returns the
/// block's first 16 bytes (`d`, `dmin`, the 12 packed scale and min bytes) and the levels.
fn affine_super_block(x: &[f32], nmax: i32, search: Search) -> ([u8; 16], [u8; QK_K]) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let group = &x[32 * j..32 * j + 32];
        let sum_x2 = group.iter().fold(0f32, |s, &v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + group[l].abs());
        let group_levels = &mut levels[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(group, &weights, nmax, search, group_levels);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        // ggml stores the rounded value in a `uint8_t` (wrapping), then takes at most 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16(max_scale / 63.0);
    let dmin = f16(max_min / 63.0);
    let (d_all, dmin_all) = (f16_le(d[0], d[1]), f16_le(dmin[0], dmin[1]));
    let (sc, m) = super::unpack_scale_min_k4(&packed);
    for j in 0..8 {
        let dl = d_all * f32::from(sc[j]);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m[j]);
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((x[i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    let mut head = [0u8; 16];
    head[..2].copy_from_slice(&d);
    head[2..4].copy_from_slice(&dmin);
    head[4..].copy_from_slice(&packed);
    (head, levels)
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL)`: the levels `L` (offset by
/// `nmax`) and the scale of a symmetric group, weighted by `x^2`, searched over 18 scales
/// around `-nmax / max`.
fn make_qx_quants(x: &[f32], nmax: i32, levels: &mut [i8]) -> f32 {
    let Some(max) = signed_max(x) else {
        levels.fill(0);
        return 0.0;
    };
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // The weighted sums of `x * l` and `l * l` at one inverse scale.
    let sums = |iscale: f32| {
        x.iter().fold((0f32, 0f32), |(sumlx, suml2), &v| {
            let l = level(iscale, v) as f32;
            let w = v * v;
            (sumlx + w * v * l, suml2 + w * l * l)
        })
    };
    let mut iscale = -(nmax as f32) / max;
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &v) in levels.iter_mut().zip(x) {
                *l = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// One `Q6_K` super-block of `x` (256 values) appended to `out` (210 bytes).
pub(super) fn q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for (ib, scale) in scales.iter_mut().enumerate() {
        *scale = make_qx_quants(&x[16 * ib..16 * ib + 16], 32, &mut levels[16 * ib..][..16]);
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = *scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        out.extend_from_slice(&[0u8; 210]);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = f16(1.0 / iscale);
    // ggml stores `MIN(127, nearest_int(...))` in an `int8_t` (wrapping).
    let packed: [i8; 16] =
        std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
    let d_all = f16_le(d[0], d[1]);
    for (j, &sc) in packed.iter().enumerate() {
        let dl = d_all * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            levels[i] = (nearest_int(x[i] / dl).clamp(-32, 31) + 32) as i8;
        }
    }
    let levels = levels.map(|l| l as u8);
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (h, part) in levels.chunks_exact(128).enumerate() {
        for l in 0..32 {
            let q = |k: usize| part[l + 32 * k];
            ql[64 * h + l] = (q(0) & 0x0F) | ((q(2) & 0x0F) << 4);
            ql[64 * h + l + 32] = (q(1) & 0x0F) | ((q(3) & 0x0F) << 4);
            qh[32 * h + l] =
                (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(packed.map(|s| s as u8));
    out.extend_from_slice(&d);
}
