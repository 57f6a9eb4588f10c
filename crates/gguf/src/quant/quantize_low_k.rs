//! `Q3_K` and `Q2_K` quantisation, following ggml's `quantize_row_q3_K_ref` and
//! `quantize_row_q2_K_ref` (with `make_q3_quants` and `make_qkx2_quants`) operation by
//! operation. ggml compiles these in `libggml-base`, for the baseline x86-64 (SSE2, no fused
//! multiply-adds: its disassembly has none), so each product is rounded before its sum, as
//! plain Rust arithmetic does; the bytes are the ones `llama-quantize` writes
//! (`tests/ggml_low_k.rs` checks them against that library).

use super::f16_le;
use super::kquants::QK_K;

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below it quantises to zeros.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even through the `1.5 * 2^23` trick (`|x| < 2^22`).
pub(super) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

pub(super) fn f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// The value of largest magnitude in `x` (the first of equals), with its sign; `None` when
/// every magnitude is below [`GROUP_MAX_EPS`] (ggml quantizes such a group to zeros).
pub(super) fn signed_max(x: &[f32]) -> Option<f32> {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax >= GROUP_MAX_EPS).then_some(max)
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: the levels `L` (offset by `nmax`) and the
/// group's scale.
fn make_q3_quants(x: &[f32], nmax: i32, levels: &mut [i8]) -> f32 {
    let Some(max) = signed_max(x) else {
        levels.fill(0);
        return 0.0;
    };
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (l, &v) in levels.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (l, &v) in levels.iter_mut().zip(x) {
            let w = v * v;
            let old = f32::from(*l);
            let slx = sumlx - w * v * old;
            if slx > 0.0 {
                let sl2 = suml2 - w * old * old;
                let new = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new != i32::from(*l) {
                    let slx = slx + w * v * new as f32;
                    let sl2 = sl2 + w * new as f32 * new as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l = new as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for l in levels.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// One `Q3_K` super-block of `x` (256 values) appended to `out` (110 bytes).
pub(super) fn q3_k(x: &[f32], out: &mut Vec<u8>) {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for (j, scale) in scales.iter_mut().enumerate() {
        *scale = make_q3_quants(&x[16 * j..16 * j + 16], 4, &mut levels[16 * j..16 * j + 16]);
        if scale.abs() > amax {
            amax = scale.abs();
            max_scale = *scale;
        }
    }
    let mut packed = [0u8; 12];
    let d = if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &scale) in scales.iter().enumerate() {
            let l = (nearest_int(iscale * scale) as i8).clamp(-32, 31) + 32;
            let l = l as u8;
            if j < 8 {
                packed[j] = l & 0x0F;
            } else {
                packed[j - 8] |= (l & 0x0F) << 4;
            }
            packed[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        f16(1.0 / iscale)
    } else {
        f16(0.0)
    };
    let d_all = f16_le(d[0], d[1]);
    let scales6 = super::low_k::unpack_scales_q3_k(&packed);
    for (j, &sc) in scales6.iter().enumerate() {
        let dl = d_all * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            levels[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as i8;
        }
    }
    let mut hmask = [0u8; QK_K / 8];
    for (j, level) in levels.iter_mut().enumerate() {
        if *level > 3 {
            hmask[j % 32] |= 1 << (j / 32);
            *level -= 4;
        }
    }
    out.extend_from_slice(&hmask);
    push_two_bit_quants(&levels, out);
    out.extend_from_slice(&packed);
    out.extend_from_slice(&d);
}

/// The 2-bit levels of a super-block as ggml packs them: byte `l` of each half's 32 holds
/// values `l`, `l + 32`, `l + 64`, `l + 96` in bits 0-1, 2-3, 4-5, 6-7.
fn push_two_bit_quants(levels: &[i8; QK_K], out: &mut Vec<u8>) {
    for half in levels.chunks_exact(128) {
        for l in 0..32 {
            let q = |k: usize| (half[l + 32 * k] as u8) << (2 * k);
            out.push(q(0) | q(1) | q(2) | q(3));
        }
    }
}

/// How [`make_qkx2_quants`] searches: `nstep + 1` scales from `(nmax + rmin) / range` in steps
/// of `rdelta / range`, each one's error the weighted absolute (`use_mad`) or squared
/// difference.
#[derive(Clone, Copy)]
pub(super) struct Search {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// `make_qkx2_quants(n, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, use_mad)`:
/// the levels `L` and `(scale, -min)` of an affine group (at most 32 values), searched over
/// `nstep + 1` scales around the range's.
pub(super) fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    search: Search,
    levels: &mut [u8],
) -> (f32, f32) {
    let Search {
        rmin,
        rdelta,
        nstep,
        use_mad,
    } = search;
    debug_assert!(nstep >= 1 && x.len() <= 32);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let error = |scale: f32, min: f32, levels: &[u8]| {
        levels
            .iter()
            .zip(x.iter().zip(weights))
            .fold(0f32, |sum, (&l, (&v, &w))| {
                let diff = scale * f32::from(l) + min - v;
                let diff = if use_mad { diff.abs() } else { diff * diff };
                sum + w * diff
            })
    };
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    }
    let mut best_error = error(scale, min, levels);
    let mut aux = [0u8; 32];
    let aux = &mut aux[..x.len()];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((a, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *a = l as u8;
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = error(this_scale, this_min, aux);
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// One `Q2_K` super-block of `x` (256 values) appended to `out` (84 bytes).
pub(super) fn q2_k(x: &[f32], out: &mut Vec<u8>) {
    const Q4SCALE: f32 = 15.0;
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..16 {
        let group = &x[16 * j..16 * j + 16];
        let weights: [f32; 16] = std::array::from_fn(|l| group[l].abs());
        let search = Search {
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let found = make_qkx2_quants(group, &weights, 3, search, &mut levels[16 * j..16 * j + 16]);
        (scales[j], mins[j]) = found;
        max_scale = max_scale.max(scales[j]);
        max_min = max_min.max(mins[j]);
    }
    let mut packed = [0u8; 16];
    let d = if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (p, &scale) in packed.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * scale) as u8;
        }
        f16(max_scale / Q4SCALE)
    } else {
        f16(0.0)
    };
    let dmin = if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (p, &min) in packed.iter_mut().zip(&mins) {
            *p |= (nearest_int(iscale * min) << 4) as u8;
        }
        f16(max_min / Q4SCALE)
    } else {
        f16(0.0)
    };
    let (d_all, dmin_all) = (f16_le(d[0], d[1]), f16_le(dmin[0], dmin[1]));
    for (j, &p) in packed.iter().enumerate() {
        let dl = d_all * f32::from(p & 0x0F);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(p >> 4);
        for i in 16 * j..16 * j + 16 {
            levels[i] = nearest_int((x[i] + dm) / dl).clamp(0, 3) as u8;
        }
    }
    out.extend_from_slice(&packed);
    let signed: [i8; QK_K] = std::array::from_fn(|i| levels[i] as i8);
    push_two_bit_quants(&signed, out);
    out.extend_from_slice(&d);
    out.extend_from_slice(&dmin);
}
