//! The load-time layout of `IQ4_NL` and `IQ4_XS` matrices: rows in groups of eight (as in
//! `packed.rs`), one form for both.
//!
//! A value is a block scale times one of 16 fixed levels ([`KVALUES_IQ4NL`]), picked by a
//! 4-bit index. `IQ4_NL`'s scale is its block's `f16 d`; `IQ4_XS`'s, for each 32 values,
//! `d * (ls - 32)` with a 6-bit `ls`, exact in `f32` but not in `f16`. So every 32 values of
//! eight rows become one block column with the eight scales as `f32` (ggml's `dl`, the very
//! bits its decoder multiplies by), in the lane order of `packed::LANE_ROWS`, then each row's
//! 16 index bytes as in the file (value `j` in the low nibble of byte `j`, `j + 16` in its high
//! nibble):
//!
//! ```text
//! group g, block column c (160 bytes):
//!   [scale of rows P[0..8], f32 x 8] [indices of row 0, 16 bytes] ... [indices of row 7]
//! ```
//!
//! 160 bytes where the file has 144 (`IQ4_NL`, 11% more) or 136 (`IQ4_XS`, 18% more): the
//! kernels (`x86_iq4.rs`) then load eight rows' scales with one instruction and turn indices
//! into levels with one byte shuffle each. The `rows % 8` rows left over follow in the plain
//! GGUF layout, as in `packed.rs`.

use kindle_gguf::quant::{GgmlType, KVALUES_IQ4NL, iq4_xs_factor};

/// Bytes of one packed block column: eight `f32` scales, eight rows of 16 index bytes.
pub(crate) const IQ4_COLUMN_BYTES: usize = 32 + 8 * 16;

/// Whether `ty` is packed in this form.
pub(crate) fn iq4(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ4_NL | GgmlType::IQ4_XS)
}

/// 32-value block columns per GGUF block of `ty` (1 for `IQ4_NL`, 8 for `IQ4_XS`).
pub(crate) fn columns_per_block(ty: GgmlType) -> usize {
    ty.block_size() / 32
}

/// GGUF block `src` (block `b` of a row that is row `i` of its group, its scales in lane
/// `lane`) into its block columns of the group starting at `group_at` of `out`.
pub(crate) fn put(
    ty: GgmlType,
    (group_at, i, lane): (usize, usize, usize),
    b: usize,
    src: &[u8],
    out: &mut [u8],
) {
    let d = half::f16::from_le_bytes([src[0], src[1]]).to_f32();
    let per = columns_per_block(ty);
    for k in 0..per {
        let (scale, qs) = match ty {
            GgmlType::IQ4_XS => {
                let block: &[u8; 136] = src.try_into().expect("an IQ4_XS block");
                let dl = d * (iq4_xs_factor(block, k) - 32) as f32;
                (dl, &src[8 + 16 * k..8 + 16 * (k + 1)])
            }
            _ => (d, &src[2..18]),
        };
        let col = group_at + (b * per + k) * IQ4_COLUMN_BYTES;
        out[col + 4 * lane..col + 4 * lane + 4].copy_from_slice(&scale.to_le_bytes());
        out[col + 32 + 16 * i..col + 32 + 16 * (i + 1)].copy_from_slice(qs);
    }
}

/// The row that is row `i` of the group at `group_at` (scales in lane `lane`) dequantised into
/// `out` (`32 *` its block columns): `scale * level`, the bits of `kindle_gguf`'s decoder.
pub(crate) fn dequantize(data: &[u8], (group_at, i, lane): (usize, usize, usize), out: &mut [f32]) {
    for (c, y) in out.chunks_exact_mut(32).enumerate() {
        let col = group_at + c * IQ4_COLUMN_BYTES;
        let scale = f32::from_le_bytes(
            data[col + 4 * lane..col + 4 * lane + 4]
                .try_into()
                .expect("four bytes"),
        );
        let qs = &data[col + 32 + 16 * i..col + 32 + 16 * (i + 1)];
        for j in 0..16 {
            y[j] = scale * f32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0x0F)]);
            y[j + 16] = scale * f32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]);
        }
    }
}
