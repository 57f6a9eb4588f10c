//! Quantisation of `f32` values to the types `kindle quantize` writes, following ggml's
//! reference functions (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`, `_q4_1_ref`,
//! `_q5_0_ref`, `_q5_1_ref`, the `f16` conversion, round to nearest even, and ggml's
//! `ggml_compute_fp32_to_bf16`) operation by
//! operation, so the bytes are those ggml writes (`tests/ggml_quantizers.rs`); `Q3_K` and
//! `Q2_K` in `quantize_low_k.rs`, `Q4_K`, `Q5_K` and `Q6_K` in `quantize_k.rs`, `IQ4_NL` and
//! `IQ4_XS` in `iq4.rs`.

use super::{GgmlType, QK_K, QK32, QuantError};

/// The types [`quantize`] can produce.
pub const QUANTIZE_TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Encode `values` as `ty`: whole blocks (`values.len()` a multiple of `ty.block_size()`, else
/// [`QuantError::SizeMismatch`]); types outside [`QUANTIZE_TYPES`] are
/// [`QuantError::Unsupported`].
///
/// ```
/// use kindle_gguf::quant::{GgmlType, dequantize, quantize};
/// let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
/// let bytes = quantize(GgmlType::Q8_0, &x).unwrap();
/// assert_eq!(bytes.len(), 34);
/// let mut back = vec![0.0; 32];
/// dequantize(GgmlType::Q8_0, &bytes, &mut back).unwrap();
/// assert!(back.iter().zip(&x).all(|(a, b)| (a - b).abs() < 0.07));
/// ```
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !QUANTIZE_TYPES.contains(&ty) {
        return Err(QuantError::Unsupported(ty));
    }
    if !values.len().is_multiple_of(ty.block_size()) {
        return Err(QuantError::SizeMismatch {
            ty,
            bytes: 0,
            values: values.len(),
            block: ty.block_size(),
            block_bytes: ty.type_size(),
        });
    }
    let mut out = Vec::with_capacity(values.len() / ty.block_size() * ty.type_size());
    match ty {
        GgmlType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values.iter().for_each(|v| out.extend_from_slice(&f16(*v))),
        GgmlType::BF16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&bf16(*v).to_le_bytes())),
        GgmlType::Q8_0 => values.chunks_exact(QK32).for_each(|b| q8_0(b, &mut out)),
        GgmlType::Q4_0 => values.chunks_exact(QK32).for_each(|b| q4_0(b, &mut out)),
        GgmlType::Q5_0 => values.chunks_exact(QK32).for_each(|b| q5_0(b, &mut out)),
        GgmlType::Q5_1 => values.chunks_exact(QK32).for_each(|b| q5_1(b, &mut out)),
        GgmlType::Q4_K => values
            .chunks_exact(QK_K)
            .for_each(|b| super::quantize_k::q4_k(b, &mut out)),
        GgmlType::Q5_K => values
            .chunks_exact(QK_K)
            .for_each(|b| super::quantize_k::q5_k(b, &mut out)),
        GgmlType::Q6_K => values
            .chunks_exact(QK_K)
            .for_each(|b| super::quantize_k::q6_k(b, &mut out)),
        GgmlType::Q3_K => values
            .chunks_exact(QK_K)
            .for_each(|b| super::quantize_low_k::q3_k(b, &mut out)),
        GgmlType::Q2_K => values
            .chunks_exact(QK_K)
            .for_each(|b| super::quantize_low_k::q2_k(b, &mut out)),
        GgmlType::IQ4_NL => values
            .chunks_exact(QK32)
            .for_each(|b| super::iq4::iq4_nl(b, &mut out)),
        GgmlType::IQ4_XS => values
            .chunks_exact(QK_K)
            .for_each(|b| super::iq4::iq4_xs(b, &mut out)),
        _ => values.chunks_exact(QK32).for_each(|b| q4_1(b, &mut out)),
    }
    Ok(out)
}

fn f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// ggml's `ggml_compute_fp32_to_bf16`: the top 16 bits, rounded to nearest even (a value
/// that rounds past the largest finite one becomes infinity); a NaN keeps its top bits and
/// is made quiet.
pub(crate) fn bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16(d));
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16(d));
    for j in 0..QK32 / 2 {
        let x0 = x[j] * id;
        let x1 = x[QK32 / 2 + j] * id;
        let q0 = ((x0 + 8.5) as i8).min(15) as u8;
        let q1 = ((x1 + 8.5) as i8).min(15) as u8;
        out.push(q0 | (q1 << 4));
    }
}

fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16(d));
    out.extend_from_slice(&f16(min));
    for j in 0..QK32 / 2 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[QK32 / 2 + j] - min) * id;
        let q0 = ((x0 + 0.5) as i8).min(15) as u8;
        let q1 = ((x1 + 0.5) as i8).min(15) as u8;
        out.push(q0 | (q1 << 4));
    }
}

/// `Q5_0`: `d = max / -16` (the value of largest magnitude, signed), levels `0..=31` as four low
/// bits in `qs` and the fifth bits in the 32-bit `qh`.
fn q5_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let level = |v: f32| ((v * id + 16.5) as i8).min(31) as u8;
    push_five_bit_levels(&f16(d), x, level, out);
}

/// `Q5_1`: `d = (max - min) / 31`, `m = min`, levels `0..=31` as in `Q5_0`.
fn q5_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let level = |v: f32| ((v - min) * id + 0.5) as u8;
    let [d0, d1] = f16(d);
    let [m0, m1] = f16(min);
    push_five_bit_levels(&[d0, d1, m0, m1], x, level, out);
}

/// A `Q5` block: `head` (its factors), then `qh` (bit 4 of value `j` in bit `j`), then `qs`
/// (values `j` and `j + 16` in the low and high nibbles of byte `j`).
fn push_five_bit_levels(head: &[u8], x: &[f32], level: impl Fn(f32) -> u8, out: &mut Vec<u8>) {
    let levels: [u8; QK32] = std::array::from_fn(|j| level(x[j]));
    let qh = levels
        .iter()
        .enumerate()
        .fold(0u32, |qh, (j, &l)| qh | u32::from((l & 0x10) >> 4) << j);
    out.extend_from_slice(head);
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend((0..QK32 / 2).map(|j| (levels[j] & 0x0F) | ((levels[j + QK32 / 2] & 0x0F) << 4)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 3.0
            })
            .collect()
    }

    /// Quantising what a type dequantises to gives back the same bytes (the grid points are
    /// fixed points), and the error is within half a step.
    #[test]
    fn round_trips_and_error_bounds() {
        // The K-quants and `IQ4_NL` search their scales (requantising is not a fixed point);
        // they are checked against ggml's own quantizer (`tests/ggml_quantizers.rs`).
        for ty in QUANTIZE_TYPES
            .into_iter()
            .filter(|t| t.block_size() == 32 || t.block_size() == 1)
            .filter(|t| *t != GgmlType::IQ4_NL)
        {
            let x = values(32 * 64, 7);
            let bytes = quantize(ty, &x).unwrap();
            assert_eq!(bytes.len(), x.len() / ty.block_size() * ty.type_size());
            let mut back = vec![0.0; x.len()];
            dequantize(ty, &bytes, &mut back).unwrap();
            let again = quantize(ty, &back).unwrap();
            let mut back2 = vec![0.0; x.len()];
            dequantize(ty, &again, &mut back2).unwrap();
            let drift = back
                .iter()
                .zip(&back2)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(drift < 1e-2, "{ty}: requantising drifts by {drift}");
            for (b, (xs, ys)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
                let range = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let step = match ty {
                    GgmlType::F32 => 0.0,
                    GgmlType::F16 => range * 1e-3,
                    GgmlType::Q8_0 => range / 127.0,
                    // -8..=7 times max / -8: the far end is clipped by up to a step.
                    GgmlType::Q4_0 => 2.0 * range / 8.0,
                    _ => 2.0 * range / 15.0,
                };
                for (a, y) in xs.iter().zip(ys) {
                    // Half a step, plus the scale's own f16 rounding.
                    assert!(
                        (a - y).abs() <= step * 0.5 + range * 2e-3 + 1e-6,
                        "{ty} block {b}: {a} -> {y}"
                    );
                }
            }
        }
    }

    /// Hand-worked blocks: a ramp in Q4_0 (d = max / -8) and Q4_1 (d = range / 15).
    #[test]
    fn hand_worked_blocks() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect(); // -16 ..= 15
        let q = quantize(GgmlType::Q4_0, &x).unwrap();
        assert_eq!(half::f16::from_le_bytes([q[0], q[1]]).to_f32(), 2.0); // -16 / -8
        // x[0] = -16 -> -8 + 8.5 -> 0; x[16] = 0 -> 8.
        assert_eq!(q[2], 8 << 4);
        let q = quantize(GgmlType::Q4_1, &x).unwrap();
        assert_eq!(half::f16::from_le_bytes([q[2], q[3]]).to_f32(), -16.0);
        assert_eq!(
            half::f16::from_le_bytes([q[0], q[1]]),
            half::f16::from_f32(31.0 / 15.0)
        );
        assert!(quantize(GgmlType::Q4_K, &x).is_err());
        assert!(quantize(GgmlType::Q8_0, &x[..31]).is_err());
    }
}
