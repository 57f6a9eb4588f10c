//! The low-bit K-quant super-blocks, `Q2_K` and `Q3_K`: 256 values in 16 sub-blocks of 16,
//! each with its own 4-bit (`Q2_K`: a scale and a min) or 6-bit signed (`Q3_K`) scale.
//!
//! Both lay their quants out alike: each half of 128 values reads 32 bytes of `qs`, and value
//! `l + 16 h + 32 j` of a half (`l` in `0..16`, `h` in `0..2`, `j` in `0..4`) takes bits
//! `2j..2j + 2` of `qs[16 h + l]`, with sub-block scale `8 half + 2 j + h`. `Q3_K` adds a third
//! (high) bit from bit `4 half + j` of `hmask[16 h + l]`: set, the quant is `q`; clear, `q - 4`.

use super::f16_le;
use super::kquants::QK_K;

/// Bytes in one `Q2_K` super-block: 16 bytes of scales (low nibble) and mins (high nibble),
/// 64 bytes of 2-bit quants, then `f16 d` and `f16 dmin`.
pub const BLOCK_Q2_K_BYTES: usize = 84;
/// Bytes in one `Q3_K` super-block: 32 bytes of high bits (`hmask`), 64 bytes of 2-bit quants
/// (`qs`), 12 bytes of packed 6-bit scales, then `f16 d`.
pub const BLOCK_Q3_K_BYTES: usize = 110;

/// The sixteen 6-bit scales of a `Q3_K` super-block's 12 `scales` bytes, minus 32 (ggml's
/// `aux` shuffle in `dequantize_row_q3_K`): scale `j`'s low four bits are the low (`j < 8`) or
/// high nibble of byte `j % 8`, its top two bits bits `2 (j / 4)..` of byte `8 + j % 4`.
#[inline]
pub fn unpack_scales_q3_k(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0x0F } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Dequantise one `Q2_K` super-block (256 values): `x = (d * scale) * q - dmin * min`.
#[inline]
pub fn dequantize_block_q2_k(block: &[u8; BLOCK_Q2_K_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[80], block[81]);
    let dmin = f16_le(block[82], block[83]);
    let (scales, qs) = (&block[..16], &block[16..80]);
    for (index, value) in out.iter_mut().enumerate() {
        let (half, j, h, l) = place(index);
        let sc = scales[8 * half + 2 * j + h];
        let dl = d * f32::from(sc & 0x0F);
        let ml = dmin * f32::from(sc >> 4);
        let q = (qs[32 * half + 16 * h + l] >> (2 * j)) & 3;
        *value = dl * f32::from(q) - ml;
    }
}

/// Dequantise one `Q3_K` super-block (256 values): `x = (d * (scale - 32)) * q`, `q` in
/// `-4..4`.
#[inline]
pub fn dequantize_block_q3_k(block: &[u8; BLOCK_Q3_K_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[108], block[109]);
    let scales = unpack_scales_q3_k(block[96..108].try_into().expect("12 bytes"));
    let (hmask, qs) = (&block[..32], &block[32..96]);
    for (index, value) in out.iter_mut().enumerate() {
        let (half, j, h, l) = place(index);
        let dl = d * f32::from(scales[8 * half + 2 * j + h]);
        let i = 16 * h + l;
        let low = ((qs[32 * half + i] >> (2 * j)) & 3) as i8;
        let high = hmask[i] & (1 << (4 * half + j)) != 0;
        *value = dl * f32::from(if high { low } else { low - 4 });
    }
}

/// Where value `index` of a super-block lies: its half, bit pair `j`, which 16 bytes of the
/// half's 32 (`h`) and the byte among them (`l`).
#[inline(always)]
fn place(index: usize) -> (usize, usize, usize, usize) {
    let (half, rest) = (index / 128, index % 128);
    (half, rest / 32, (rest % 32) / 16, rest % 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scales_unpack_hand_packed_bytes() {
        // Scale j = j * 4 (0, 4, ..., 60): low nibbles 0, 4, 8, 12 repeating, top bits
        // j / 4 (0, 0, 0, 0, 1, 1, 1, 1, 2, ...).
        let want: [u8; 16] = std::array::from_fn(|j| 4 * j as u8);
        let mut s = [0u8; 12];
        for (j, &v) in want.iter().enumerate() {
            if j < 8 {
                s[j] |= v & 0x0F;
            } else {
                s[j - 8] |= (v & 0x0F) << 4;
            }
            s[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
        }
        let got = unpack_scales_q3_k(&s);
        assert_eq!(got, std::array::from_fn(|j| want[j] as i8 - 32));
    }

    #[test]
    fn q2_k_by_hand() {
        // Sub-block k: scale k % 16, min 1; d = 0.5, dmin = 0.25; every quant 3, except
        // value 0's (0) and value 1's (q = 1: bit pair 0 of byte 1).
        let mut block = [0u8; BLOCK_Q2_K_BYTES];
        for (k, s) in block[..16].iter_mut().enumerate() {
            *s = (k as u8 & 0x0F) | (1 << 4);
        }
        block[16..80].fill(0xFF);
        block[16] = 0xFC;
        block[17] = 0xFD;
        block[80..82].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        block[82..84].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
        let mut out = [0f32; QK_K];
        dequantize_block_q2_k(&block, &mut out);
        // Value 0: sub-block 0 (scale 0): 0 * 0 - 0.25.
        assert_eq!(out[0], -0.25);
        // Value 1: sub-block 0 again, q = 1, scale 0.
        assert_eq!(out[1], -0.25);
        // Value 16: sub-block 1 (h = 1): 0.5 * 1 * 3 - 0.25.
        assert_eq!(out[16], 1.25);
        // Value 32 + 16 + 2 (j = 1, h = 1): sub-block 3: 0.5 * 3 * 3 - 0.25.
        assert_eq!(out[50], 4.25);
        // Value 128 + 96 (second half, j = 3, h = 0): sub-block 14: 0.5 * 14 * 3 - 0.25.
        assert_eq!(out[224], 20.75);
    }

    #[test]
    fn q3_k_by_hand() {
        // Every scale 33 (33 - 32 = 1), d = 2; low bits 1 everywhere; high bits set for
        // `j = 0` of the first half only (hmask bit 0): its 32 values are 2 * 1, the others
        // 2 * (1 - 4).
        let mut block = [0u8; BLOCK_Q3_K_BYTES];
        block[..32].fill(0x01);
        block[32..96].fill(0x55);
        // 6-bit 33 = 0b10_0001: low nibbles 1, top bits 2.
        block[96..104].fill(0x11);
        block[104..108].fill(0xAA);
        block[108..110].copy_from_slice(&half::f16::from_f32(2.0).to_le_bytes());
        let mut out = [0f32; QK_K];
        dequantize_block_q3_k(&block, &mut out);
        assert!(out[..32].iter().all(|&v| v == 2.0), "{:?}", &out[..32]);
        assert!(out[32..].iter().all(|&v| v == -6.0));
    }
}
