//! The 4-bit non-linear formats `IQ4_NL` and `IQ4_XS`: each value is a scale times one of 16
//! fixed levels ([`KVALUES_IQ4NL`], denser near zero, where weights are), picked by a 4-bit
//! index. `IQ4_NL` has one `f16` scale per 32 values; `IQ4_XS` one `f16` scale per 256 and a
//! 6-bit factor per 32 (4.25 bits a value).
//!
//! Decoding follows ggml's `dequantize_row_iq4_nl` / `_iq4_xs`, encoding its
//! `quantize_iq4_nl` / `quantize_iq4_xs` without an importance matrix (what `llama-quantize`
//! runs, with its 15 trial scales a block), operation by operation: ggml compiles them in
//! `libggml-base` for the baseline x86-64, without fused multiply-adds, as plain Rust
//! arithmetic is (`tests/ggml_quantizers.rs` checks the bytes against that library).

use super::f16_le;
use super::kquants::QK_K;
use super::quantize_low_k::{GROUP_MAX_EPS, f16, nearest_int};

/// The 16 levels of `IQ4_NL` and `IQ4_XS` (ggml's `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Bytes in one `IQ4_NL` block: `f16 d`, then 16 bytes of 4-bit indices (value `j` in the low
/// nibble of byte `j`, value `j + 16` in its high nibble).
pub const BLOCK_IQ4_NL_BYTES: usize = 18;
/// Bytes in one `IQ4_XS` super-block: `f16 d`, `u16 scales_h` (the top two bits of each
/// sub-block's 6-bit factor), `scales_l[4]` (their low four bits, two a byte), then 128 bytes
/// of indices, 16 per 32-value sub-block laid out as an `IQ4_NL` block's.
pub const BLOCK_IQ4_XS_BYTES: usize = 136;

/// Dequantise one `IQ4_NL` block: `out[j] = d * KVALUES_IQ4NL[qs[j] & 0xF]` and
/// `out[j + 16] = d * KVALUES_IQ4NL[qs[j] >> 4]`.
#[inline]
pub fn dequantize_block_iq4_nl(block: &[u8; BLOCK_IQ4_NL_BYTES], out: &mut [f32; 32]) {
    let [d0, d1, qs @ ..] = block;
    nl_values(f16_le(*d0, *d1), qs, out);
}

/// Dequantise one `IQ4_XS` super-block: sub-block `ib`'s values are `IQ4_NL` values with the
/// scale `d * (ls - 32)`, `ls` its 6-bit factor ([`iq4_xs_factor`]).
#[inline]
pub fn dequantize_block_iq4_xs(block: &[u8; BLOCK_IQ4_XS_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[0], block[1]);
    let (outs, _) = out.as_chunks_mut::<32>();
    for (ib, (qs, out)) in block[8..].chunks_exact(16).zip(outs).enumerate() {
        let dl = d * (iq4_xs_factor(block, ib) - 32) as f32;
        nl_values(dl, qs, out);
    }
}

/// The 6-bit factor `ls` (`0..64`) of sub-block `ib` (`0..8`) of an `IQ4_XS` super-block.
#[inline]
pub fn iq4_xs_factor(block: &[u8; BLOCK_IQ4_XS_BYTES], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
    let high = (scales_h >> (2 * ib)) & 3;
    i32::from(low) | (i32::from(high) << 4)
}

#[inline(always)]
fn nl_values(d: f32, qs: &[u8], out: &mut [f32; 32]) {
    for j in 0..16 {
        out[j] = d * f32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0xF)]);
        out[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]);
    }
}

/// ggml's `best_index_int8(16, kvalues_iq4nl, x)`: the level nearest `x` (the upper one on a
/// tie).
fn best_index(x: f32) -> u8 {
    let val = |i: usize| f32::from(KVALUES_IQ4NL[i]);
    if x <= val(0) {
        return 0;
    }
    if x >= val(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - val(mu - 1) < val(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// Trial scales on each side of the first guess (ggml's `ntry`, 7 in `quantize_iq4_nl` and
/// `quantize_iq4_xs`).
const NTRY: i32 = 7;

/// The scale `quantize_row_iq4_nl_impl` picks for the 32 values `xb` (weights `x²`): the
/// least-squares scale of the best of 16 trials, or 0 for a group of (near) zeros.
fn block_scale(xb: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for &x in xb {
            let q = f32::from(KVALUES_IQ4NL[usize::from(best_index(id * x))]);
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let first = -max / f32::from(KVALUES_IQ4NL[0]);
    let (sumqx, sumq2) = sums(1.0 / first);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Two values' indices a byte: value `j` low, `j + 16` high, for each 32-value group.
fn push_indices(levels: &[u8], out: &mut Vec<u8>) {
    for l in levels.chunks_exact(32) {
        out.extend((0..16).map(|j| l[j] | (l[j + 16] << 4)));
    }
}

/// Encode 32 values as an `IQ4_NL` block (`quantize_iq4_nl` without an importance matrix).
pub(super) fn iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    let d = block_scale(x);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let levels: Vec<u8> = x.iter().map(|&v| best_index(id * v)).collect();
    out.extend_from_slice(&f16(d));
    push_indices(&levels, out);
}

/// Encode 256 values as an `IQ4_XS` super-block (`quantize_iq4_xs` without an importance
/// matrix): each sub-block's scale as for `IQ4_NL`, then one `f16` scale `-max / 32` (the
/// sub-block scale of largest magnitude, signed) and each sub-block's nearest factor of it.
pub(super) fn iq4_xs(x: &[f32], out: &mut Vec<u8>) {
    let scales: Vec<f32> = x.chunks_exact(32).map(block_scale).collect();
    let (mut amax_scale, mut max_scale) = (0f32, 0f32);
    for &s in &scales {
        if s.abs() > amax_scale {
            amax_scale = s.abs();
            max_scale = s;
        }
    }
    let d = -max_scale / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    let mut levels = Vec::with_capacity(QK_K);
    for (ib, (&scale, xb)) in scales.iter().zip(x.chunks_exact(32)).enumerate() {
        let l = nearest_int(id * scale).clamp(-32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        levels.extend(xb.iter().map(|&v| best_index(idl * v)));
        let l = (l + 32) as u8;
        scales_l[ib / 2] |= (l & 0xF) << (4 * (ib % 2));
        scales_h |= u16::from(l >> 4) << (2 * ib);
    }
    out.extend_from_slice(&f16(d));
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend_from_slice(&scales_l);
    push_indices(&levels, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-worked: the nearest level, ties going up, the ends clamped.
    #[test]
    fn best_index_is_the_nearest_level() {
        assert_eq!(best_index(-500.0), 0);
        assert_eq!(best_index(500.0), 15);
        assert_eq!(best_index(0.0), 8); // -10 is 10 away, 1 is 1 away
        assert_eq!(best_index(-4.5), 8); // 5.5 from 1, 5.5 from -10: the upper
        assert_eq!(best_index(-4.6), 7);
        assert_eq!(best_index(100.0), 14); // 11 from 89, 13 from 113
    }

    /// A block whose values are levels times a scale comes back exactly.
    #[test]
    fn levels_times_a_power_of_two_round_trip() {
        let x: Vec<f32> = (0..32)
            .map(|j| f32::from(KVALUES_IQ4NL[(j * 7) % 16]) * 0.25)
            .collect();
        let mut bytes = Vec::new();
        iq4_nl(&x, &mut bytes);
        let block: [u8; BLOCK_IQ4_NL_BYTES] = bytes.try_into().unwrap();
        let mut back = [0f32; 32];
        dequantize_block_iq4_nl(&block, &mut back);
        assert_eq!(back.to_vec(), x);
    }

    /// Hand-worked `IQ4_XS` header: factor 32 + l in six bits, split low/high.
    #[test]
    fn iq4_xs_factors_unpack() {
        let mut block = [0u8; BLOCK_IQ4_XS_BYTES];
        // Factors 0, 63, 32, 1, 17, 48, 5, 60.
        let ls = [0u8, 63, 32, 1, 17, 48, 5, 60];
        let mut h = 0u16;
        for (ib, &l) in ls.iter().enumerate() {
            block[4 + ib / 2] |= (l & 0xF) << (4 * (ib % 2));
            h |= u16::from(l >> 4) << (2 * ib);
        }
        block[2..4].copy_from_slice(&h.to_le_bytes());
        for (ib, &l) in ls.iter().enumerate() {
            assert_eq!(iq4_xs_factor(&block, ib), i32::from(l));
        }
    }
}
