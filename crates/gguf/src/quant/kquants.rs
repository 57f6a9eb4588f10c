//! The 256-value K-quant super-block formats: `Q4_K`, `Q5_K` and `Q6_K`.

use super::f16_le;

/// Values in one super-block of the K-quant formats (`Q4_K`, `Q5_K`, `Q6_K`).
pub const QK_K: usize = 256;

/// Bytes in one `Q4_K` super-block: `f16 d`, `f16 dmin`, 12 bytes of packed 6-bit scales and
/// mins, then 128 bytes of 4-bit quants.
pub const BLOCK_Q4_K_BYTES: usize = 144;
/// Bytes in one `Q5_K` super-block: `f16 d`, `f16 dmin`, 12 bytes of packed 6-bit scales and
/// mins, 32 bytes of high bits (`qh`), then 128 bytes of low nibbles (`qs`).
pub const BLOCK_Q5_K_BYTES: usize = 176;
/// Bytes in one `Q6_K` super-block: 128 bytes of low nibbles (`ql`), 64 bytes of high 2-bit
/// pairs (`qh`), 16 `i8` scales, then `f16 d` (last).
pub const BLOCK_Q6_K_BYTES: usize = 210;

/// Unpack the 12 `scales` bytes of a `Q4_K`/`Q5_K` super-block into the eight 6-bit
/// `(scales, mins)` of its 32-value sub-blocks (ggml's `get_scale_min_k4` for `j` in `0..8`).
///
/// For `j < 4`: `scale = s[j] & 63`, `min = s[j + 4] & 63`. For `j >= 4` the low four bits come
/// from `s[j + 4]` (scale in the low nibble, min in the high nibble) and the top two bits from
/// the spare top bits of `s[j - 4]` (scale) and `s[j]` (min).
#[inline]
pub fn unpack_scale_min_k4(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

/// The packed `scales` field (bytes `4..16`) of a `Q4_K` or `Q5_K` super-block.
#[inline(always)]
fn k4_scales<const N: usize>(block: &[u8; N]) -> [u8; 12] {
    std::array::from_fn(|i| block[4 + i])
}

/// Dequantise one `Q4_K` super-block (256 values).
///
/// Four groups of 64 values each use 32 bytes of `qs`: the low nibbles are sub-block `2g` and
/// the high nibbles sub-block `2g + 1`, each with `x = (d * scale) * q - dmin * min`.
#[inline]
pub fn dequantize_block_q4_k(block: &[u8; BLOCK_Q4_K_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[0], block[1]);
    let dmin = f16_le(block[2], block[3]);
    let (sc, mn) = unpack_scale_min_k4(&k4_scales(block));
    let (qs, _) = block[16..].as_chunks::<32>();
    let (ys, _) = out.as_chunks_mut::<64>();
    for (g, (q, y)) in qs.iter().zip(ys).enumerate() {
        let d1 = d * f32::from(sc[2 * g]);
        let m1 = dmin * f32::from(mn[2 * g]);
        let d2 = d * f32::from(sc[2 * g + 1]);
        let m2 = dmin * f32::from(mn[2 * g + 1]);
        for l in 0..32 {
            y[l] = d1 * f32::from(q[l] & 0x0F) - m1;
            y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
        }
    }
}

/// Dequantise one `Q5_K` super-block (256 values).
///
/// Like [`dequantize_block_q4_k`], with a fifth bit per value: value `l` of sub-block `s`
/// (`l` in `0..32`, `s` in `0..8`) adds 16 when bit `s` of `qh[l]` is set.
#[inline]
pub fn dequantize_block_q5_k(block: &[u8; BLOCK_Q5_K_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[0], block[1]);
    let dmin = f16_le(block[2], block[3]);
    let (sc, mn) = unpack_scale_min_k4(&k4_scales(block));
    let qh: [u8; 32] = std::array::from_fn(|i| block[16 + i]);
    let (qs, _) = block[48..].as_chunks::<32>();
    let (ys, _) = out.as_chunks_mut::<64>();
    for (g, (q, y)) in qs.iter().zip(ys).enumerate() {
        let d1 = d * f32::from(sc[2 * g]);
        let m1 = dmin * f32::from(mn[2 * g]);
        let d2 = d * f32::from(sc[2 * g + 1]);
        let m2 = dmin * f32::from(mn[2 * g + 1]);
        let (s1, s2) = (2 * g as u32, 2 * g as u32 + 1);
        for l in 0..32 {
            let h1 = ((qh[l] >> s1) & 1) << 4;
            let h2 = ((qh[l] >> s2) & 1) << 4;
            y[l] = d1 * f32::from((q[l] & 0x0F) | h1) - m1;
            y[l + 32] = d2 * f32::from((q[l] >> 4) | h2) - m2;
        }
    }
}

/// Dequantise one `Q6_K` super-block (256 values): `x = (d * scale) * (q - 32)`.
///
/// Each half of 128 values uses 64 bytes of `ql`, 32 bytes of `qh` and 8 scales (one per 16
/// values). Within a half, value `l + 32 * k` (`l` in `0..32`, `k` in `0..4`) takes its low four
/// bits from `ql[l + 32 * (k % 2)]` (low nibble for `k < 2`, high nibble otherwise) and its top
/// two bits from bits `2k..2k+2` of `qh[l]`.
#[inline]
pub fn dequantize_block_q6_k(block: &[u8; BLOCK_Q6_K_BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(block[208], block[209]);
    let scales: [i8; 16] = std::array::from_fn(|i| block[192 + i] as i8);
    let (ql, _) = block[..128].as_chunks::<64>();
    let (qh, _) = block[128..192].as_chunks::<32>();
    let (sc, _) = scales.as_chunks::<8>();
    let (ys, _) = out.as_chunks_mut::<128>();
    for (((ql, qh), sc), y) in ql.iter().zip(qh).zip(sc).zip(ys) {
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * f32::from(sc[is]) * q1 as f32;
            y[l + 32] = d * f32::from(sc[is + 2]) * q2 as f32;
            y[l + 64] = d * f32::from(sc[is + 4]) * q3 as f32;
            y[l + 96] = d * f32::from(sc[is + 6]) * q4 as f32;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::quant::GgmlType;
    use crate::quant::tests::{F16_HALF, F16_QUARTER, deq, put_f16};

    /// Sub-block scales and mins used by the hand-built Q4_K and Q5_K blocks.
    const K_SC: [u8; 8] = [1, 2, 3, 4, 17, 33, 50, 63];
    const K_MN: [u8; 8] = [0, 4, 8, 12, 20, 36, 7, 63];

    /// `K_SC`/`K_MN` packed by hand into the 12-byte `scales` field:
    /// bytes 0..4 = sc[j] | (sc[j+4] >> 4) << 6; bytes 4..8 = mn[j] | (mn[j+4] >> 4) << 6;
    /// bytes 8..12 = (sc[j+4] & 15) | (mn[j+4] & 15) << 4.
    /// sc[4..8] = 17, 33, 50, 63 have top bits 1, 2, 3, 3 and low nibbles 1, 1, 2, 15;
    /// mn[4..8] = 20, 36, 7, 63 have top bits 1, 2, 0, 3 and low nibbles 4, 4, 7, 15.
    const K_SCALES: [u8; 12] = [
        1 | 1 << 6, // 0x41
        2 | 2 << 6, // 0x82
        3 | 3 << 6, // 0xC3
        4 | 3 << 6, // 0xC4
        1 << 6,     // 0x40
        4 | 2 << 6, // 0x84
        8,          // 0x08
        12 | 3 << 6,
        0x41,
        0x41,
        0x72,
        0xFF,
    ];

    #[test]
    fn scale_min_k4_unpacks_hand_packed_bytes() {
        assert_eq!(
            K_SCALES,
            [
                0x41, 0x82, 0xC3, 0xC4, 0x40, 0x84, 0x08, 0xCC, 0x41, 0x41, 0x72, 0xFF
            ]
        );
        assert_eq!(unpack_scale_min_k4(&K_SCALES), (K_SC, K_MN));
    }

    /// d = 0.5, dmin = 0.25, scales `K_SCALES`, and a few chosen quant bytes (the rest 0).
    pub(in crate::quant) fn q4_k_hand_block() -> [u8; 144] {
        let mut b = [0u8; 144];
        put_f16(&mut b, 0, F16_HALF);
        put_f16(&mut b, 2, F16_QUARTER);
        b[4..16].copy_from_slice(&K_SCALES);
        let qs = 16;
        b[qs] = 0x3A; // group 0: value 0 (sub 0) q=10, value 32 (sub 1) q=3
        b[qs + 31] = 0xF0; // group 0: value 31 q=0, value 63 q=15
        b[qs + 32] = 0x21; // group 1: value 64 (sub 2) q=1, value 96 (sub 3) q=2
        b[qs + 64] = 0x5F; // group 2: value 128 (sub 4) q=15, value 160 (sub 5) q=5
        b[qs + 96] = 0xE7; // group 3: value 192 (sub 6) q=7, value 224 (sub 7) q=14
        b
    }

    #[test]
    fn q4_k_by_hand() {
        let out = deq(GgmlType::Q4_K, &q4_k_hand_block());
        // x = (d*sc)*q - dmin*m with d = 0.5, dmin = 0.25.
        // sub 0: sc 1, m 0  -> 0.5*q - 0
        assert_eq!(out[0], 5.0); // q=10
        assert_eq!(out[31], 0.0); // q=0
        assert_eq!(out[1], 0.0); // q=0
        // sub 1: sc 2, m 4 -> 1.0*q - 1.0
        assert_eq!(out[32], 2.0); // q=3
        assert_eq!(out[63], 14.0); // q=15
        assert_eq!(out[33], -1.0); // q=0
        // sub 2: sc 3, m 8 -> 1.5*q - 2.0
        assert_eq!(out[64], -0.5); // q=1
        assert_eq!(out[65], -2.0); // q=0
        // sub 3: sc 4, m 12 -> 2.0*q - 3.0
        assert_eq!(out[96], 1.0); // q=2
        assert_eq!(out[127], -3.0); // q=0
        // sub 4 (packed high bits): sc 17, m 20 -> 8.5*q - 5.0
        assert_eq!(out[128], 122.5); // q=15: 127.5 - 5
        assert_eq!(out[159], -5.0); // q=0
        // sub 5: sc 33, m 36 -> 16.5*q - 9.0
        assert_eq!(out[160], 73.5); // q=5: 82.5 - 9
        assert_eq!(out[191], -9.0);
        // sub 6: sc 50, m 7 -> 25*q - 1.75
        assert_eq!(out[192], 173.25); // q=7: 175 - 1.75
        assert_eq!(out[223], -1.75);
        // sub 7: sc 63, m 63 -> 31.5*q - 15.75
        assert_eq!(out[224], 425.25); // q=14: 441 - 15.75
        assert_eq!(out[255], -15.75);
    }

    /// The Q4_K hand block's header and scales, with qh and qs chosen to exercise the fifth bit.
    fn q5_k_hand_block() -> [u8; 176] {
        let mut b = [0u8; 176];
        put_f16(&mut b, 0, F16_HALF);
        put_f16(&mut b, 2, F16_QUARTER);
        b[4..16].copy_from_slice(&K_SCALES);
        let (qh, qs) = (16, 48);
        // qh[0] bits 0, 3, 4, 7: sub-blocks 0, 3, 4, 7 get +16 at position l = 0.
        b[qh] = 0x99;
        // qh[1] bit 1: value 33 (sub 1, l = 1) gets +16.
        b[qh + 1] = 0x02;
        // qh[31] all bits: position l = 31 of every sub-block gets +16.
        b[qh + 31] = 0xFF;
        b[qs] = 0x3A; // value 0 low 10, value 32 high 3
        b[qs + 32] = 0x21; // value 64 low 1, value 96 high 2
        b[qs + 64] = 0x5F; // value 128 low 15, value 160 high 5
        b[qs + 96] = 0xE7; // value 192 low 7, value 224 high 14
        b
    }

    #[test]
    fn q5_k_by_hand() {
        let out = deq(GgmlType::Q5_K, &q5_k_hand_block());
        // Same per-sub-block (d*sc, dmin*m) as in q4_k_by_hand.
        assert_eq!(out[0], 13.0); // sub 0, qh bit 0 set: q = 10+16 = 26 -> 0.5*26
        assert_eq!(out[1], 0.0); // sub 0, q = 0
        assert_eq!(out[31], 8.0); // sub 0, qh[31] bit 0: q = 16 -> 0.5*16
        assert_eq!(out[32], 2.0); // sub 1, qh[0] bit 1 clear: q = 3 -> 3 - 1
        assert_eq!(out[33], 15.0); // sub 1, qh[1] bit 1: q = 16 -> 16 - 1
        assert_eq!(out[63], 15.0); // sub 1, qh[31] bit 1: q = 16
        assert_eq!(out[64], -0.5); // sub 2, bit 2 clear: q = 1 -> 1.5 - 2
        assert_eq!(out[95], 22.0); // sub 2, qh[31]: q = 16 -> 24 - 2
        assert_eq!(out[96], 33.0); // sub 3, bit 3 set: q = 18 -> 2*18 - 3
        assert_eq!(out[97], -3.0); // sub 3, q = 0
        assert_eq!(out[128], 258.5); // sub 4, bit 4 set: q = 31 -> 8.5*31 - 5 = 263.5 - 5
        assert_eq!(out[160], 73.5); // sub 5, bit 5 clear: q = 5 -> 82.5 - 9
        assert_eq!(out[191], 255.0); // sub 5, qh[31]: q = 16 -> 264 - 9
        assert_eq!(out[192], 173.25); // sub 6, bit 6 clear: q = 7 -> 175 - 1.75
        assert_eq!(out[223], 398.25); // sub 6, qh[31]: q = 16 -> 400 - 1.75
        assert_eq!(out[224], 929.25); // sub 7, bit 7 set: q = 30 -> 945 - 15.75
        assert_eq!(out[225], -15.75); // sub 7, q = 0
        assert_eq!(out[255], 488.25); // sub 7, qh[31]: q = 16 -> 504 - 15.75
    }

    /// Scales of the hand-built Q6_K block, one per 16 values.
    const Q6_SCALES: [i8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, -5, -6, -7, -128];

    pub(in crate::quant) fn q6_k_hand_block() -> [u8; 210] {
        let mut b = [0u8; 210];
        let (ql, qh, sc) = (0, 128, 192);
        for (i, s) in Q6_SCALES.into_iter().enumerate() {
            b[sc + i] = s as u8;
        }
        put_f16(&mut b, 208, F16_HALF); // d is the last field
        // First half: ql[0..64], qh[0..32], scales 0..8.
        b[ql] = 0x21; // value 0 low 1, value 64 low 2
        b[ql + 32] = 0x0F; // value 32 low 15, value 96 low 0
        b[qh] = 0b11_10_01_00; // high bits: value 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
        b[ql + 16] = 0xFF; // value 16 low 15, value 80 low 15 (ql[48] = 0: 48 and 112 low 0)
        b[qh + 16] = 0xFF; // high bits 3 for values 16, 48, 80, 112
        // Second half: ql[64..128], qh[32..64], scales 8..16.
        b[ql + 127] = 0x50; // value 255 (l = 31, quarter 3) low 5
        b[qh + 63] = 0x40; // value 255 high bits (bits 6..8) = 1
        b
    }

    #[test]
    fn q6_k_by_hand() {
        let out = deq(GgmlType::Q6_K, &q6_k_hand_block());
        // x = (d*scale)*(q - 32) with d = 0.5.
        assert_eq!(out[0], -15.5); // q = 1 | 0<<4 = 1 -> -31; scale 1 -> 0.5*-31
        assert_eq!(out[32], -1.5); // q = 15 | 1<<4 = 31 -> -1; scale[2] = 3
        assert_eq!(out[64], 5.0); // q = 2 | 2<<4 = 34 -> 2; scale[4] = 5
        assert_eq!(out[96], 56.0); // q = 0 | 3<<4 = 48 -> 16; scale[6] = 7
        assert_eq!(out[16], 31.0); // q = 63 -> 31; scale[1] = 2
        assert_eq!(out[48], 32.0); // q = 48 -> 16; scale[3] = 4
        assert_eq!(out[80], 93.0); // q = 63 -> 31; scale[5] = 6
        assert_eq!(out[112], 64.0); // q = 48 -> 16; scale[7] = 8
        assert_eq!(out[1], -16.0); // q = 0 -> -32; scale 1
        assert_eq!(out[15], -16.0); // still scale 0 (values 0..16)
        // Second half, all-zero quants (q - 32 = -32): 0.5 * scale * -32 = -16 * scale.
        assert_eq!(out[128], 16.0); // scale[8] = -1
        assert_eq!(out[144], 32.0); // scale[9] = -2
        assert_eq!(out[160], 48.0); // scale[10] = -3
        assert_eq!(out[192], 80.0); // scale[12] = -5
        assert_eq!(out[224], 112.0); // scale[14] = -7
        assert_eq!(out[240], 2048.0); // scale[15] = -128
        assert_eq!(out[255], 704.0); // q = 5 | 1<<4 = 21 -> -11; scale[15] = -128 -> 0.5*-128*-11
    }

    /// xorshift64*: a tiny deterministic generator for the random-block tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn bytes<const N: usize>(&mut self) -> [u8; N] {
            std::array::from_fn(|_| self.next() as u8)
        }

        /// A random normal f16 of either sign with magnitude in about [2^-10, 2^5).
        fn f16_bits(&mut self) -> u16 {
            let r = self.next();
            let sign = (r & 1) as u16;
            let exp = 5 + (r >> 8) % 15; // biased exponent 5..=19
            let mant = ((r >> 16) & 0x3FF) as u16;
            sign << 15 | (exp as u16) << 10 | mant
        }
    }

    fn f16_val(bits: u16) -> f32 {
        half::f16::from_bits(bits).to_f32()
    }

    /// Reference scales and mins of a Q4_K/Q5_K super-block, read by walking the 12 bytes
    /// (rather than per sub-block): every byte says which 6-bit fields its bits belong to.
    fn ref_scales_mins(s: &[u8]) -> ([u32; 8], [u32; 8]) {
        let (mut sc, mut mn) = ([0u32; 8], [0u32; 8]);
        for (byte_index, &byte) in s.iter().enumerate() {
            for bit in 0..8 {
                let v = u32::from(byte >> bit & 1);
                match byte_index {
                    // Bytes 0..4: bits 0..6 are scale `i` (bits 0..6); bits 6..8 are bits 4..6 of
                    // scale `i + 4`.
                    i @ 0..4 if bit < 6 => sc[i] |= v << bit,
                    i @ 0..4 => sc[i + 4] |= v << (bit - 2),
                    // Bytes 4..8: the same for mins.
                    i @ 4..8 if bit < 6 => mn[i - 4] |= v << bit,
                    i @ 4..8 => mn[i] |= v << (bit - 2),
                    // Bytes 8..12: low nibble is bits 0..4 of scale `i - 4`, high nibble of min.
                    i if bit < 4 => sc[i - 4] |= v << bit,
                    i => mn[i - 4] |= v << (bit - 4),
                }
            }
        }
        (sc, mn)
    }

    /// Reference Q4_K / Q5_K decoder, one value at a time from its index.
    fn ref_q45_k(block: &[u8], five_bit: bool) -> Vec<f32> {
        let d = f16_val(u16::from_le_bytes([block[0], block[1]]));
        let dmin = f16_val(u16::from_le_bytes([block[2], block[3]]));
        let (sc, mn) = ref_scales_mins(&block[4..16]);
        let (qh, qs) = if five_bit {
            (&block[16..48], &block[48..176])
        } else {
            (&block[..0], &block[16..144])
        };
        (0..256)
            .map(|i| {
                let sub = i / 32; // sub-block 0..8
                let pos = i % 32; // position within the sub-block
                let byte = qs[(sub / 2) * 32 + pos]; // a pair of sub-blocks shares 32 bytes
                let mut q = if sub % 2 == 0 { byte % 16 } else { byte / 16 } as u32;
                if five_bit && qh[pos] & (1 << sub) != 0 {
                    q += 16;
                }
                (d * sc[sub] as f32) * q as f32 - dmin * mn[sub] as f32
            })
            .collect()
    }

    /// Reference Q6_K decoder, one value at a time from its index.
    fn ref_q6_k(block: &[u8]) -> Vec<f32> {
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        let d = f16_val(u16::from_le_bytes([block[208], block[209]]));
        (0..256)
            .map(|i| {
                let half = i / 128;
                let quarter = (i % 128) / 32; // 0..4 within the half
                let pos = i % 32;
                let low_byte = ql[half * 64 + (quarter % 2) * 32 + pos];
                let low = if quarter < 2 {
                    low_byte & 0xF
                } else {
                    low_byte >> 4
                } as i32;
                let high = (qh[half * 32 + pos] >> (2 * quarter)) as i32 & 3;
                let q = low + 16 * high - 32;
                let scale = scales[i / 16] as i8 as f32;
                (d * scale) * q as f32
            })
            .collect()
    }

    fn assert_bits_eq(fast: &[f32], reference: &[f32], what: &str) {
        assert_eq!(fast.len(), reference.len());
        for (i, (a, b)) in fast.iter().zip(reference).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{what}: value {i}: {a} vs {b}");
        }
    }

    #[test]
    fn reference_decoders_agree_with_hand_blocks() {
        assert_bits_eq(
            &ref_q45_k(&q4_k_hand_block(), false),
            &deq(GgmlType::Q4_K, &q4_k_hand_block()),
            "Q4_K hand",
        );
        assert_bits_eq(
            &ref_q45_k(&q5_k_hand_block(), true),
            &deq(GgmlType::Q5_K, &q5_k_hand_block()),
            "Q5_K hand",
        );
        assert_bits_eq(
            &ref_q6_k(&q6_k_hand_block()),
            &deq(GgmlType::Q6_K, &q6_k_hand_block()),
            "Q6_K hand",
        );
    }

    #[test]
    fn k_quants_match_reference_on_random_blocks() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let mut b4: [u8; 144] = rng.bytes();
            put_f16(&mut b4, 0, rng.f16_bits());
            put_f16(&mut b4, 2, rng.f16_bits());
            let mut fast = [0.0f32; 256];
            dequantize_block_q4_k(&b4, &mut fast);
            assert_bits_eq(
                &fast,
                &ref_q45_k(&b4, false),
                &format!("Q4_K round {round}"),
            );

            let mut b5: [u8; 176] = rng.bytes();
            put_f16(&mut b5, 0, rng.f16_bits());
            put_f16(&mut b5, 2, rng.f16_bits());
            dequantize_block_q5_k(&b5, &mut fast);
            assert_bits_eq(&fast, &ref_q45_k(&b5, true), &format!("Q5_K round {round}"));

            let mut b6: [u8; 210] = rng.bytes();
            put_f16(&mut b6, 208, rng.f16_bits());
            dequantize_block_q6_k(&b6, &mut fast);
            assert_bits_eq(&fast, &ref_q6_k(&b6), &format!("Q6_K round {round}"));
        }
        // Several random super-blocks through `dequantize` land block by block.
        let data: Vec<u8> = (0..5 * 176).map(|_| rng.next() as u8).collect();
        let out = deq(GgmlType::Q5_K, &data);
        for (b, block) in data.chunks(176).enumerate() {
            assert_bits_eq(
                &out[256 * b..256 * (b + 1)],
                &ref_q45_k(block, true),
                "Q5_K row",
            );
        }
    }
}
