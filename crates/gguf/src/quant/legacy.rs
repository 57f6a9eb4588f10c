//! The 32-value block formats: `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0`.

use super::f16_le;

/// Values in one block of the 32-value formats (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`).
pub const QK32: usize = 32;

/// Bytes in one `Q4_0` block: `f16 d`, then 16 bytes of 4-bit quants.
pub const BLOCK_Q4_0_BYTES: usize = 18;
/// Bytes in one `Q4_1` block: `f16 d`, `f16 m`, then 16 bytes of 4-bit quants.
pub const BLOCK_Q4_1_BYTES: usize = 20;
/// Bytes in one `Q5_0` block: `f16 d`, 4 bytes of fifth bits, then 16 bytes of 4-bit quants.
pub const BLOCK_Q5_0_BYTES: usize = 22;
/// Bytes in one `Q5_1` block: `f16 d`, `f16 m`, 4 bytes of fifth bits, then 16 bytes of
/// 4-bit quants.
pub const BLOCK_Q5_1_BYTES: usize = 24;
/// Bytes in one `Q8_0` block: `f16 d`, then 32 `i8` quants.
pub const BLOCK_Q8_0_BYTES: usize = 34;

/// Dequantise one `Q4_0` block: `out[j] = ((qs[j] & 0xF) - 8) * d` and
/// `out[j + 16] = ((qs[j] >> 4) - 8) * d` for `j` in `0..16`.
#[inline]
pub fn dequantize_block_q4_0(block: &[u8; BLOCK_Q4_0_BYTES], out: &mut [f32; QK32]) {
    let [d0, d1, qs @ ..] = block;
    let d = f16_le(*d0, *d1);
    for j in 0..16 {
        let x0 = i32::from(qs[j] & 0x0F) - 8;
        let x1 = i32::from(qs[j] >> 4) - 8;
        out[j] = x0 as f32 * d;
        out[j + 16] = x1 as f32 * d;
    }
}

/// Dequantise one `Q4_1` block: `out[j] = (qs[j] & 0xF) * d + m` and
/// `out[j + 16] = (qs[j] >> 4) * d + m` for `j` in `0..16`.
#[inline]
pub fn dequantize_block_q4_1(block: &[u8; BLOCK_Q4_1_BYTES], out: &mut [f32; QK32]) {
    let [d0, d1, m0, m1, qs @ ..] = block;
    let d = f16_le(*d0, *d1);
    let m = f16_le(*m0, *m1);
    for j in 0..16 {
        out[j] = f32::from(qs[j] & 0x0F) * d + m;
        out[j + 16] = f32::from(qs[j] >> 4) * d + m;
    }
}

/// The 5-bit quants of a `Q5_0`/`Q5_1` block (`0..32`): value `j` is the low nibble of
/// `qs[j]` with bit `j` of the little-endian `qh` as its fifth bit, value `j + 16` the high
/// nibble with bit `j + 16`, as in ggml's `dequantize_row_q5_0`.
#[inline]
fn q5_quants(qh: [u8; 4], qs: &[u8]) -> [u8; QK32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; QK32];
    for j in 0..16 {
        let high0 = ((qh >> j) & 1) as u8;
        let high1 = ((qh >> (j + 16)) & 1) as u8;
        q[j] = (qs[j] & 0x0F) | (high0 << 4);
        q[j + 16] = (qs[j] >> 4) | (high1 << 4);
    }
    q
}

/// Dequantise one `Q5_0` block: `out[j] = (q[j] - 16) * d` with the 5-bit quants of
/// `q5_quants`.
#[inline]
pub fn dequantize_block_q5_0(block: &[u8; BLOCK_Q5_0_BYTES], out: &mut [f32; QK32]) {
    let [d0, d1, h0, h1, h2, h3, qs @ ..] = block;
    let d = f16_le(*d0, *d1);
    for (o, q) in out.iter_mut().zip(q5_quants([*h0, *h1, *h2, *h3], qs)) {
        *o = (i32::from(q) - 16) as f32 * d;
    }
}

/// Dequantise one `Q5_1` block: `out[j] = q[j] * d + m` with the 5-bit quants of
/// `q5_quants`.
#[inline]
pub fn dequantize_block_q5_1(block: &[u8; BLOCK_Q5_1_BYTES], out: &mut [f32; QK32]) {
    let [d0, d1, m0, m1, h0, h1, h2, h3, qs @ ..] = block;
    let d = f16_le(*d0, *d1);
    let m = f16_le(*m0, *m1);
    for (o, q) in out.iter_mut().zip(q5_quants([*h0, *h1, *h2, *h3], qs)) {
        *o = f32::from(q) * d + m;
    }
}

/// Dequantise one `Q8_0` block: `out[j] = qs[j] as i8 * d`.
#[inline]
pub fn dequantize_block_q8_0(block: &[u8; BLOCK_Q8_0_BYTES], out: &mut [f32; QK32]) {
    let [d0, d1, qs @ ..] = block;
    let d = f16_le(*d0, *d1);
    for (o, &q) in out.iter_mut().zip(qs) {
        *o = f32::from(q as i8) * d;
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::GgmlType;
    use crate::quant::tests::{F16_HALF, F16_MINUS_ONE, F16_QUARTER, F16_TWO, deq, put_f16};

    #[test]
    fn q4_0_by_hand() {
        let mut b = [0x88u8; 18]; // nibble 8 everywhere -> (8 - 8) * d = 0
        put_f16(&mut b, 0, F16_HALF);
        b[2] = 0x9A; // qs[0]: low 10 -> value 0 = (10-8)*0.5 = 1.0; high 9 -> value 16 = 0.5
        b[3] = 0x0F; // qs[1]: low 15 -> value 1 = 7*0.5 = 3.5; high 0 -> value 17 = -8*0.5 = -4.0
        b[17] = 0x80; // qs[15]: low 0 -> value 15 = -4.0; high 8 -> value 31 = 0.0
        let out = deq(GgmlType::Q4_0, &b);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[16], 0.5);
        assert_eq!(out[1], 3.5);
        assert_eq!(out[17], -4.0);
        assert_eq!(out[15], -4.0);
        assert_eq!(out[31], 0.0);
        assert_eq!(out[2], 0.0);
        assert_eq!(out[20], 0.0);

        // Every nibble position: qs[j] = j | (15 - j) << 4 with d = 2
        // -> value j = (j - 8) * 2 and value j + 16 = (15 - j - 8) * 2 = (7 - j) * 2.
        let mut b = [0u8; 18];
        put_f16(&mut b, 0, F16_TWO);
        for j in 0..16 {
            b[2 + j] = j as u8 | ((15 - j as u8) << 4);
        }
        let out = deq(GgmlType::Q4_0, &b);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 2.0, "value {j}");
            assert_eq!(out[j + 16], (7.0 - j as f32) * 2.0, "value {}", j + 16);
        }
    }

    #[test]
    fn q4_1_by_hand() {
        let mut b = [0u8; 20]; // nibble 0 -> 0 * d + m = m = -1.0
        put_f16(&mut b, 0, F16_QUARTER); // d = 0.25
        put_f16(&mut b, 2, F16_MINUS_ONE); // m = -1.0
        b[4] = 0x9A; // qs[0]: value 0 = 10*0.25 - 1 = 1.5; value 16 = 9*0.25 - 1 = 1.25
        b[9] = 0xF0; // qs[5]: value 5 = 0*0.25 - 1 = -1.0; value 21 = 15*0.25 - 1 = 2.75
        b[19] = 0x4C; // qs[15]: value 15 = 12*0.25 - 1 = 2.0; value 31 = 4*0.25 - 1 = 0.0
        let out = deq(GgmlType::Q4_1, &b);
        assert_eq!(out[0], 1.5);
        assert_eq!(out[16], 1.25);
        assert_eq!(out[5], -1.0);
        assert_eq!(out[21], 2.75);
        assert_eq!(out[15], 2.0);
        assert_eq!(out[31], 0.0);
        assert_eq!(out[1], -1.0);
        assert_eq!(out[30], -1.0);
    }

    #[test]
    fn q5_0_by_hand() {
        let mut b = [0u8; 22]; // quant 0 -> (0 - 16) * d
        put_f16(&mut b, 0, F16_HALF); // d = 0.5
        // qh (little-endian u32): bit 0 (value 0), bit 17 (value 17) and bit 31 (value 31).
        b[2..6].copy_from_slice(&(1u32 | 1 << 17 | 1 << 31).to_le_bytes());
        b[6] = 0x3F; // qs[0]: value 0 = (16 + 15 - 16) * 0.5 = 7.5; value 16 = (3 - 16) * 0.5 = -6.5
        b[7] = 0xA0; // qs[1]: value 1 = (0 - 16) * 0.5 = -8.0; value 17 = (16 + 10 - 16) * 0.5 = 5.0
        b[21] = 0xF1; // qs[15]: value 15 = (1 - 16) * 0.5 = -7.5; value 31 = (31 - 16) * 0.5 = 7.5
        let out = deq(GgmlType::Q5_0, &b);
        assert_eq!([out[0], out[16], out[1], out[17]], [7.5, -6.5, -8.0, 5.0]);
        assert_eq!([out[15], out[31]], [-7.5, 7.5]);
        assert_eq!([out[2], out[18]], [-8.0, -8.0]);
    }

    #[test]
    fn q5_1_by_hand() {
        let mut b = [0u8; 24]; // quant 0 -> m
        put_f16(&mut b, 0, F16_QUARTER); // d = 0.25
        put_f16(&mut b, 2, F16_MINUS_ONE); // m = -1.0
        b[4..8].copy_from_slice(&(1u32 << 4 | 1 << 20).to_le_bytes()); // values 4 and 20
        b[8 + 4] = 0x2F; // qs[4]: value 4 = (16 + 15) * 0.25 - 1 = 6.75; value 20 = (16 + 2) * 0.25 - 1 = 3.5
        b[8 + 9] = 0x70; // qs[9]: value 9 = 0 * 0.25 - 1 = -1.0; value 25 = 7 * 0.25 - 1 = 0.75
        let out = deq(GgmlType::Q5_1, &b);
        assert_eq!([out[4], out[20], out[9], out[25]], [6.75, 3.5, -1.0, 0.75]);
        assert_eq!([out[0], out[31]], [-1.0, -1.0]);
    }

    #[test]
    fn q8_0_by_hand() {
        let mut b = [0u8; 34];
        put_f16(&mut b, 0, F16_HALF);
        b[2] = 0x7F; // 127 * 0.5 = 63.5
        b[3] = 0x80; // -128 * 0.5 = -64.0
        b[4] = 0x03; // 3 * 0.5 = 1.5
        b[33] = 0xFF; // -1 * 0.5 = -0.5
        let out = deq(GgmlType::Q8_0, &b);
        assert_eq!(out[..3], [63.5, -64.0, 1.5]);
        assert_eq!(out[31], -0.5);
        assert!(out[3..31].iter().all(|&x| x == 0.0));
    }
}
