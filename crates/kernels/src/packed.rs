//! The load-time layout of quantized matrices (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`,
//! `Q4_K`, `Q5_K`, `Q6_K`; `Q3_K` and `Q2_K` in `packed_low_k.rs`): rows interleaved in groups
//! of eight.
//!
//! A GGUF row stores its blocks one after another, each block with its own `f16` scale. A
//! kernel that walks one row at a time must convert one scale per block with scalar code and
//! reduce each row's partial sums horizontally. Here the rows are regrouped, eight at a time,
//! block column by block column, so that one 16-byte load and one `vcvtph2ps` give the scales
//! of eight rows and the eight rows' dot products land in the eight lanes of one vector:
//!
//! ```text
//! group g (rows 8g..8g+8), block column b, for Q4_1 (160 bytes = 8 blocks of 20):
//!   [d of rows P[0..8], f16 x 8] [m of rows P[0..8], f16 x 8] [qs of row 0] ... [qs of row 7]
//! for Q4_0 (144 bytes = 8 blocks of 18): the same without the m row;
//! for Q8_0 (272 bytes = 8 blocks of 34):
//!   [d of rows P[0..8], f16 x 8] [qs of row 0] ... [qs of row 7]
//! for Q5_0 (176 bytes = 8 blocks of 22) and Q5_1 (192 = 8 x 24, with the m row):
//!   [d of rows P[0..8]] ([m of rows P[0..8]]) [fifth bits, 32 bytes] [quant vector 0, 32 bytes]
//!   ... [quant vector 3]
//! ```
//!
//! The `Q5` forms hold the rows *in the lanes*: byte `4 s + p` of quant vector `c` holds the
//! low four bits of values `4c + p` (low nibble) and `16 + 4c + p` (high nibble) of row
//! `P[s]`, and bits `c` and `4 + c` of byte `4 s + p` of the fifth bits are those two values'
//! fifth bits (see [`q5_places`]), so an 8-bit product with four activations broadcast to
//! every lane leaves each row's sum in its own lane, and one shift per quant vector moves its
//! fifth bits to bit 4.
//!
//! The scales are stored in the lane order [`LANE_ROWS`] (`P`) in which the kernels' pairwise
//! horizontal adds leave the rows. The groups follow each other (each `nb` block columns
//! long) and the `rows % 8` rows left over follow in the plain GGUF layout. The bytes are the
//! file's bytes, moved: same scales, same quants, same size.
//!
//! `Q4_K` and `Q5_K` are regrouped into the same forms: each 32-value sub-block of a
//! super-block becomes a `Q4_1`-like (`Q5_1`-like) block column, so that the `Q4_1` (`Q5`)
//! group kernels run them, 8-bit ones included. Their scales are not `f16` (a sub-block's
//! scale is `d * sc` with a 6-bit `sc`, exact in `f32` but not in `f16`), so each super-block
//! column starts with a header of the eight rows' `d` and `dmin` (`f16`) and their eight
//! 6-bit scales and mins unpacked to bytes, and the kernels form `d * sc` and `-(dmin * mn)`
//! in `f32`, exactly llama.cpp's `d1` and `m1`:
//!
//! ```text
//! group g, super-block column s (Q4_K: 1184 bytes for 8 x 144; Q5_K: 1440 for 8 x 176):
//!   [d of rows P[0..8], f16 x 8] [dmin, f16 x 8] [sc of sub-block 0 of rows P[0..8], u8 x 8]
//!   ... [sc of sub-block 7] [mn of sub-block 0, u8 x 8] ... [mn of sub-block 7]
//!   [sub-block 0: Q4_K: qs of row 0, 16 bytes ... qs of row 7; Q5_K: as a Q5_1 block
//!   column's fifth bits and quant vectors] ... [sub-block 7]
//! ```
//!
//! A `Q4_K` sub-block's 16 quant bytes a row hold its values `t` (low nibble) and `t + 16`
//! (high nibble) as `Q4_1` does; a `Q5_K` sub-block is laid out as a `Q5_1` block column,
//! the rows in the lanes. The rows past the last whole group
//! are padded with zero rows to a group (32 bytes more per row of each super-block than the
//! file, 2%).
//!
//! `Q6_K` (value `d * sc * (q - 32)`, a 6-bit `q` and an `i8` scale `sc` per 16 values) gets
//! a form of its own that the `Q6` group kernels (`x86_q6.rs`) read, the same bytes moved:
//!
//! ```text
//! group g, super-block column s (1680 bytes = 8 x 210):
//!   [d of rows P[0..8], f16 x 8] [sc of values 0..16 of rows P[0..8], i8 x 8] ...
//!   [sc of values 240..256] [sub-block 0: 64 bytes of top bits, then four 32-byte vectors
//!   of quants] ... [sub-block 7]
//! ```
//!
//! Here the rows lie in the lanes of a vector: quant vector `c` of a 32-value sub-block holds
//! at byte `4 s + p` the low four bits of values `4c + p` (low nibble) and `16 + 4c + p`
//! (high nibble) of row `P[s]`, so that an 8-bit product with four activations broadcast to
//! every lane leaves each row's sum in its own lane, with no horizontal adds. The top two
//! bits of value `16 h + 4c + p` of row `P[s]` are bits `2c` and `2c + 1` of byte
//! `32 h + 4 s + p` of the 64 (see [`q6_places`]), so one constant shift per quant vector
//! moves its 32 top-bit pairs to bits 4 and 5. Padding rows to a whole group as for `Q4_K`.

use kindle_gguf::quant::GgmlType;

use super::{packed_iq4, packed_low_k};

/// Rows per interleaved group.
pub(crate) const GROUP: usize = 8;

/// The row (within its group) whose scale sits in each lane: the order pairwise horizontal
/// adds of rows `(0,1), (2,3), ...` leave the sums in.
pub(crate) const LANE_ROWS: [usize; GROUP] = [0, 2, 4, 6, 1, 3, 5, 7];

/// Whether matrices of `ty` are stored interleaved.
pub(crate) fn packs(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q4_0 | Q4_1 | Q8_0 | Q5_0 | Q5_1 | Q4_K | Q5_K | Q6_K | Q3_K | Q2_K | IQ4_NL | IQ4_XS
    )
}

/// Where row `r` of a packed matrix lies: its group's first byte, its row within the group
/// and the lane of its scales (for the forms of `packed_iq4.rs`).
fn group_place(p: &Packing, r: usize) -> (usize, usize, usize) {
    let (g, i) = (r / GROUP, r % GROUP);
    let lane = LANE_ROWS.iter().position(|&row| row == i).unwrap_or(0);
    (g * p.group_bytes(), i, lane)
}

/// Whether `ty` is packed as K-quant super-block columns (`Q4_K`, `Q5_K`).
fn k_packed(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K)
}

/// Bytes of a packed `Q6_K` super-block column's header: the `d` row (`f16 x 8`) and the 16
/// scales of eight rows (`i8 x 8` each).
pub(crate) const Q6_HEADER: usize = 16 + 128;

/// Bytes of one 32-value sub-block of a packed `Q6_K` super-block column: 64 bytes of top
/// bits, then four vectors of eight rows' quant bytes.
pub(crate) const Q6_SUB_BYTES: usize = 64 + GROUP * 16;

/// Bytes of a packed `Q6_K` super-block column (eight rows' 210-byte super-blocks).
pub(crate) const Q6_COLUMN_BYTES: usize = Q6_HEADER + 8 * Q6_SUB_BYTES;

/// Where, in a packed `Q6_K` super-block column, the scales of values `16 t..16 t + 16`
/// start: eight `i8` in lane order.
pub(crate) const fn q6_scales_at(t: usize) -> usize {
    16 + 8 * t
}

/// Where, in a packed `Q6_K` super-block column, sub-block `j` (values `32 j..32 j + 32`)
/// starts: its 64 bytes of top bits, then quant vector `c` at `64 + 32 c`.
pub(crate) const fn q6_sub_at(j: usize) -> usize {
    Q6_HEADER + Q6_SUB_BYTES * j
}

/// Where value `v` (`0..32`) of the row in lane `s` of its group lies in a packed `Q6_K`
/// sub-block (see the module docs): its quant byte (from the sub-block's start) and nibble
/// shift, and its top bits' byte and shift.
pub(crate) fn q6_places(s: usize, v: usize) -> ((usize, u32), (usize, u32)) {
    let (h, c, p) = (v / 16, v % 16 / 4, v % 4);
    let byte = 4 * s + p;
    (
        (64 + 32 * c + byte, 4 * h as u32),
        (32 * h + byte, 2 * c as u32),
    )
}

/// The 6-bit quant (`0..64`) of value `v` of a GGUF `Q6_K` super-block's `ql` (128 bytes)
/// and `qh` (64 bytes): ggml's `dequantize_row_q6_K` order.
fn q6_quant(ql: &[u8], qh: &[u8], v: usize) -> u8 {
    let (n, qq, l) = (v / 128, v % 128 / 32, v % 32);
    let low = ql[64 * n + l + 32 * (qq % 2)] >> (4 * (qq / 2)) & 0x0F;
    let top = qh[32 * n + l] >> (2 * qq) & 3;
    low | top << 4
}

/// Bytes of a packed K-quant super-block column's header: the `d` and `dmin` rows (`f16 x 8`
/// each), the scales and the mins (`8 x 8` bytes each).
pub(crate) const K_HEADER: usize = 32 + 128;

/// Bytes of one sub-block of a packed K-quant super-block column: eight rows' 16 quant bytes,
/// after 32 bytes of fifth bits for `Q5_K` (`five`).
const fn k_sub_bytes(five: bool) -> usize {
    GROUP * 16 + if five { 32 } else { 0 }
}

/// Bytes of a packed `Q4_K` (or, `five`, `Q5_K`) super-block column.
pub(crate) const fn k_column_bytes(five: bool) -> usize {
    K_HEADER + 8 * k_sub_bytes(five)
}

/// Where, in a packed K-quant super-block column, the scales of sub-block `j` start, eight
/// bytes in lane order.
pub(crate) const fn k_scales_at(j: usize) -> usize {
    32 + 8 * j
}

/// Where, in a packed K-quant super-block column, the mins of sub-block `j` start.
pub(crate) const fn k_mins_at(j: usize) -> usize {
    96 + 8 * j
}

/// Where, in a packed K-quant super-block column, sub-block `j` starts (its fifth bits for
/// `Q5_K`, then row `i`'s quants 16 bytes further on per row).
const fn k_sub_at(five: bool, j: usize) -> usize {
    K_HEADER + k_sub_bytes(five) * j
}

/// `f16` fields at the start of a block: `d`, and `m` for `Q4_1`/`Q5_1`.
fn f16_fields(ty: GgmlType) -> usize {
    if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
        2
    } else {
        1
    }
}

/// Bytes of fifth bits (`qh`) in a block: 4 for `Q5_0`/`Q5_1`.
fn qh_bytes(ty: GgmlType) -> usize {
    if matches!(ty, GgmlType::Q5_0 | GgmlType::Q5_1) {
        4
    } else {
        0
    }
}

/// Bytes of scales at the start of a group's block column (`d`, and `m` for `Q4_1`/`Q5_1`).
pub(crate) fn scale_bytes(ty: GgmlType) -> usize {
    16 * f16_fields(ty)
}

/// Where the parts of a packed matrix lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packing {
    /// Bytes of one GGUF block.
    pub block_bytes: usize,
    /// GGUF blocks per row.
    pub nb: usize,
    /// Rows in groups: `rows - rows % 8`, the rest stored plainly after them; for `Q4_K`
    /// every row, the last group padded (`rows.next_multiple_of(8)`).
    pub grouped_rows: usize,
    /// Bytes of one block column of a group (eight GGUF blocks' worth, [`k_column_bytes`]
    /// for `Q4_K`/`Q5_K`).
    pub column_bytes: usize,
}

impl Packing {
    pub fn new(ty: GgmlType, rows: usize, cols: usize) -> Self {
        let (block_bytes, nb) = (ty.type_size(), cols / ty.block_size());
        if matches!(ty, GgmlType::Q6_K | GgmlType::Q3_K | GgmlType::Q2_K) {
            return Packing {
                block_bytes,
                nb,
                grouped_rows: rows.next_multiple_of(GROUP),
                column_bytes: match ty {
                    GgmlType::Q6_K => Q6_COLUMN_BYTES,
                    GgmlType::Q3_K => packed_low_k::Q3_COLUMN_BYTES,
                    _ => packed_low_k::Q2_COLUMN_BYTES,
                },
            };
        }
        if k_packed(ty) {
            return Packing {
                block_bytes,
                nb,
                grouped_rows: rows.next_multiple_of(GROUP),
                column_bytes: k_column_bytes(ty == GgmlType::Q5_K),
            };
        }
        if packed_iq4::iq4(ty) {
            return Packing {
                block_bytes,
                nb,
                grouped_rows: rows - rows % GROUP,
                column_bytes: packed_iq4::columns_per_block(ty) * packed_iq4::IQ4_COLUMN_BYTES,
            };
        }
        Packing {
            block_bytes,
            nb,
            grouped_rows: rows - rows % GROUP,
            column_bytes: GROUP * block_bytes,
        }
    }

    /// Bytes of one group (eight whole rows).
    pub fn group_bytes(&self) -> usize {
        self.nb * self.column_bytes
    }

    /// Bytes of the packed matrix of `rows` rows.
    pub fn bytes(&self, rows: usize) -> usize {
        let plain = rows.saturating_sub(self.grouped_rows);
        self.grouped_rows / GROUP * self.group_bytes() + plain * self.row_bytes()
    }

    /// Bytes of one plain row.
    pub fn row_bytes(&self) -> usize {
        self.nb * self.block_bytes
    }

    /// Byte offsets of block `b` of row `r`: the scales `d` (and `m`), and the quants.
    fn block_parts(&self, ty: GgmlType, r: usize, b: usize) -> BlockParts {
        debug_assert!(r < self.grouped_rows);
        let (g, i) = (r / GROUP, r % GROUP);
        let column = g * self.group_bytes() + b * GROUP * self.block_bytes;
        let lane = LANE_ROWS.iter().position(|&row| row == i).unwrap_or(0);
        let scales = scale_bytes(ty);
        let qh_len = qh_bytes(ty);
        let qs_len = self.block_bytes - scales / GROUP - qh_len;
        BlockParts {
            d: column + 2 * lane,
            m: column + 16 + 2 * lane,
            qh: column + scales,
            qh_len,
            lane,
            qs: column + scales + GROUP * qh_len + i * qs_len,
            qs_len,
        }
    }
}

struct BlockParts {
    d: usize,
    m: usize,
    /// For `Q5_0`/`Q5_1`: the block column's 32 bytes of transposed fifth bits.
    qh: usize,
    qh_len: usize,
    /// The lane of the row's scales (and, for `Q5`, of its values).
    lane: usize,
    qs: usize,
    qs_len: usize,
}

/// Where value `v` (`0..32`) of the row in lane `s` of its group lies in a `Q5` block
/// column, from the start of its 32 bytes of fifth bits (see the module docs): its quant
/// byte and nibble shift, and its fifth bit's byte and bit.
pub(crate) fn q5_places(s: usize, v: usize) -> ((usize, u32), (usize, u32)) {
    let (h, c, p) = (v / 16, v % 16 / 4, v % 4);
    let byte = 4 * s + p;
    (
        (32 + 32 * c + byte, 4 * h as u32),
        (byte, (c + 4 * h) as u32),
    )
}

impl BlockParts {
    /// Copy one GGUF block `src` into its places in `out`.
    fn put(&self, ty: GgmlType, src: &[u8], out: &mut [u8]) {
        out[self.d..self.d + 2].copy_from_slice(&src[0..2]);
        let f = 2 * f16_fields(ty);
        if f == 4 {
            out[self.m..self.m + 2].copy_from_slice(&src[2..4]);
        }
        if self.qh_len == 4 {
            // GGUF: byte `t` of `qs` holds values `t` and `t + 16`, bit `v` of `qh` value `v`'s
            // fifth bit.
            let qh = u32::from_le_bytes([src[f], src[f + 1], src[f + 2], src[f + 3]]);
            let qs = &src[f + 4..];
            for v in 0..32 {
                let ((byte, shift), (hbyte, bit)) = q5_places(self.lane, v);
                out[self.qh + byte] |= (qs[v % 16] >> (4 * (v / 16)) & 0x0F) << shift;
                out[self.qh + hbyte] |= (((qh >> v) & 1) as u8) << bit;
            }
            return;
        }
        out[self.qs..self.qs + self.qs_len].copy_from_slice(&src[f + self.qh_len..]);
    }

    /// The GGUF block back from `data` into `dst` (`data` may start a whole number of block
    /// columns later than the matrix: the offsets are relative to it).
    fn get(&self, ty: GgmlType, data: &[u8], dst: &mut [u8]) {
        dst[0..2].copy_from_slice(&data[self.d..self.d + 2]);
        let f = 2 * f16_fields(ty);
        if f == 4 {
            dst[2..4].copy_from_slice(&data[self.m..self.m + 2]);
        }
        if self.qh_len == 4 {
            let mut qh = 0u32;
            let (qh_bytes, qs) = dst[f..].split_at_mut(4);
            qs[..16].fill(0);
            for v in 0..32 {
                let ((byte, shift), (hbyte, bit)) = q5_places(self.lane, v);
                qs[v % 16] |= (data[self.qh + byte] >> shift & 0x0F) << (4 * (v / 16));
                qh |= u32::from(data[self.qh + hbyte] >> bit & 1) << v;
            }
            qh_bytes.copy_from_slice(&qh.to_le_bytes());
            return;
        }
        let dst = &mut dst[f + self.qh_len..];
        let qs = &data[self.qs..];
        // Sizes the compiler knows, so each copy is a move or two, not a `memcpy` call.
        match self.qs_len {
            16 => dst[..16].copy_from_slice(&qs[..16]),
            32 => dst[..32].copy_from_slice(&qs[..32]),
            n => dst[..n].copy_from_slice(&qs[..n]),
        }
    }
}

/// Rows packed between two calls of `consumed` in [`pack_releasing`] (a multiple of [`GROUP`]).
const CHUNK_ROWS: usize = 1024;

/// `data` (GGUF row-major blocks of `ty`) in the packed layout, telling `consumed` each byte
/// range of `data` it has finished reading, in order, so that a caller can drop a
/// memory-mapped source's pages as it goes: resident memory then never holds a whole matrix
/// twice (the tied 49152 x 576 `Q8_0` head is 30 MB). The result lies in memory backed by
/// huge pages (`arena.rs`).
pub(crate) fn pack_releasing(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
    mut consumed: impl FnMut(std::ops::Range<usize>),
) -> super::arena::Buffer {
    let p = Packing::new(ty, rows, cols);
    let row_bytes = p.row_bytes();
    // Zeroed fresh pages: only written pages count, and a padded `Q4_K` group's missing rows
    // are zero (`d = dmin = 0`).
    let mut buffer = super::arena::zeroed(p.bytes(rows));
    let out = buffer.as_mut_slice();
    let mut done = 0;
    for r in 0..p.grouped_rows.min(rows) {
        if r > 0 && r % CHUNK_ROWS == 0 {
            consumed(done..r * row_bytes);
            done = r * row_bytes;
        }
        for b in 0..p.nb {
            let src = &data[r * row_bytes + b * p.block_bytes..][..p.block_bytes];
            if ty == GgmlType::Q6_K {
                put_q6(&p, r, b, src, out);
            } else if matches!(ty, GgmlType::Q3_K | GgmlType::Q2_K) {
                let (col, lane, _) = k_place(&p, r, b);
                match ty {
                    GgmlType::Q3_K => packed_low_k::put_q3(col, lane, src, out),
                    _ => packed_low_k::put_q2(col, lane, src, out),
                }
            } else if k_packed(ty) {
                put_k(ty, &p, r, b, src, out);
            } else if packed_iq4::iq4(ty) {
                packed_iq4::put(ty, group_place(&p, r), b, src, out);
            } else {
                p.block_parts(ty, r, b).put(ty, src, out);
            }
        }
    }
    if rows > p.grouped_rows {
        let tail = p.grouped_rows * row_bytes;
        let at = p.grouped_rows / GROUP * p.group_bytes();
        out[at..].copy_from_slice(&data[tail..]);
    }
    if done < data.len() {
        consumed(done..data.len());
    }
    buffer
}

/// Row `r` of a matrix of `ty` (`packing`: in the packed layout; else plain rows of
/// `row_bytes`) dequantised into `out`, unpacking a packed row through `scratch`.
pub(crate) fn dequantize_row(
    ty: GgmlType,
    packing: Option<&Packing>,
    data: &[u8],
    row_bytes: usize,
    r: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) {
    let row = match packing {
        Some(p) if ty == GgmlType::Q6_K && r < p.grouped_rows => {
            return dequantize_q6_row(p, data, r, out);
        }
        Some(p) if matches!(ty, GgmlType::Q3_K | GgmlType::Q2_K) && r < p.grouped_rows => {
            for (b, y) in out.chunks_exact_mut(256).enumerate() {
                let (col, lane, _) = k_place(p, r, b);
                match ty {
                    GgmlType::Q3_K => packed_low_k::dequantize_q3(col, lane, data, y),
                    _ => packed_low_k::dequantize_q2(col, lane, data, y),
                }
            }
            return;
        }
        Some(p) if (qh_bytes(ty) == 4 || ty == GgmlType::Q5_K) && r < p.grouped_rows => {
            return dequantize_q5_row(ty, p, data, r, out);
        }
        Some(p) if packed_iq4::iq4(ty) && r < p.grouped_rows => {
            return packed_iq4::dequantize(data, group_place(p, r), out);
        }
        Some(p) => {
            scratch.resize(row_bytes, 0);
            unpack_row(ty, p, data, r, scratch);
            &scratch[..]
        }
        None if super::grid::grid(ty) => {
            let row = &data[r * row_bytes..(r + 1) * row_bytes];
            return super::grid::dequantize(super::simd::Simd::detect(), ty, row, out);
        }
        None => &data[r * row_bytes..(r + 1) * row_bytes],
    };
    kindle_gguf::quant::dequantize(ty, row, out).expect("shape checked at construction");
}

/// Row `r` of a packed `Q6_K` matrix dequantised into `out` straight from the packed layout
/// (the prefill product dequantises every weight row once per product: unpacking each
/// super-block bit by bit first made a Gemma-3 pp512 5% slower), with the bits of
/// `dequantize_block_q6_k`'s `(d * scale) * (q - 32)`.
fn dequantize_q6_row(p: &Packing, data: &[u8], r: usize, out: &mut [f32]) {
    for (b, y) in out.chunks_exact_mut(256).enumerate() {
        let (col, lane, _) = k_place(p, r, b);
        let d = half::f16::from_le_bytes([data[col + 2 * lane], data[col + 2 * lane + 1]]);
        let d = d.to_f32();
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let sub = &data[col + q6_sub_at(j)..][..Q6_SUB_BYTES];
            let ds =
                [2 * j, 2 * j + 1].map(|t| d * f32::from(data[col + q6_scales_at(t) + lane] as i8));
            for c in 0..4 {
                for p in 0..4 {
                    let byte = 4 * lane + p;
                    let nibbles = sub[64 + 32 * c + byte];
                    let top = [sub[byte], sub[32 + byte]].map(|t| t >> (2 * c) & 3);
                    let lo = i32::from((nibbles & 0x0F) | top[0] << 4) - 32;
                    let hi = i32::from((nibbles >> 4) | top[1] << 4) - 32;
                    y[4 * c + p] = ds[0] * lo as f32;
                    y[16 + 4 * c + p] = ds[1] * hi as f32;
                }
            }
        }
    }
}

/// The 32 five-bit quants of the row in lane `s` of the `Q5` block column whose fifth bits
/// start at `at` in `data` (the inverse of [`q5_places`], unrolled: the prefill product
/// dequantises every weight row once per product).
fn q5_quants(data: &[u8], at: usize, s: usize) -> [u8; 32] {
    let col: &[u8; 160] = data[at..at + 160].try_into().expect("a whole block column");
    let mut q = [0u8; 32];
    for c in 0..4 {
        for p in 0..4 {
            let (byte, fifth) = (col[32 + 32 * c + 4 * s + p], col[4 * s + p]);
            q[4 * c + p] = (byte & 0x0F) | (fifth >> c & 1) << 4;
            q[16 + 4 * c + p] = (byte >> 4) | (fifth >> (4 + c) & 1) << 4;
        }
    }
    q
}

/// Row `r` of a packed `Q5_0`, `Q5_1` or `Q5_K` matrix (`r` within its groups) dequantised
/// into `out` straight from the packed layout, as [`dequantize_q6_row`], with the bits of
/// `kindle_gguf`'s `(q - 16) * d`, `q * d + m` and `d1 * q - m1`.
fn dequantize_q5_row(ty: GgmlType, p: &Packing, data: &[u8], r: usize, out: &mut [f32]) {
    let f16 = |at: usize| half::f16::from_le_bytes([data[at], data[at + 1]]).to_f32();
    if ty == GgmlType::Q5_K {
        for (b, y) in out.chunks_exact_mut(256).enumerate() {
            let (col, lane, _) = k_place(p, r, b);
            let (d, dmin) = (f16(col + 2 * lane), f16(col + 16 + 2 * lane));
            for (j, y) in y.chunks_exact_mut(32).enumerate() {
                let d1 = d * f32::from(data[col + k_scales_at(j) + lane]);
                let m1 = dmin * f32::from(data[col + k_mins_at(j) + lane]);
                let q = q5_quants(data, col + k_sub_at(true, j), lane);
                for (y, &q) in y.iter_mut().zip(&q) {
                    *y = d1 * f32::from(q) - m1;
                }
            }
        }
        return;
    }
    for (b, y) in out.chunks_exact_mut(32).enumerate() {
        let parts = p.block_parts(ty, r, b);
        let d = f16(parts.d);
        let m = f16(parts.m);
        let q = q5_quants(data, parts.qh, parts.lane);
        if ty == GgmlType::Q5_0 {
            for (y, &q) in y.iter_mut().zip(&q) {
                *y = (i32::from(q) - 16) as f32 * d;
            }
        } else {
            for (y, &q) in y.iter_mut().zip(&q) {
                *y = f32::from(q) * d + m;
            }
        }
    }
}

/// Row `r` of a packed matrix back in GGUF layout, written to `out` (`row_bytes` long). Not
/// for the grouped rows of `IQ4_NL` and `IQ4_XS` (their form keeps `IQ4_XS`'s scales as
/// `f32` products, not the file's fields): read those with [`dequantize_row`].
pub(crate) fn unpack_row(ty: GgmlType, p: &Packing, data: &[u8], r: usize, out: &mut [u8]) {
    let row_bytes = p.row_bytes();
    if r >= p.grouped_rows {
        let at = p.grouped_rows / GROUP * p.group_bytes() + (r - p.grouped_rows) * row_bytes;
        out.copy_from_slice(&data[at..at + row_bytes]);
        return;
    }
    if k_packed(ty) || matches!(ty, GgmlType::Q6_K | GgmlType::Q3_K | GgmlType::Q2_K) {
        for (b, dst) in out.chunks_exact_mut(p.block_bytes).enumerate() {
            match ty {
                GgmlType::Q6_K => get_q6(p, data, r, b, dst),
                GgmlType::Q3_K => {
                    let (col, lane, _) = k_place(p, r, b);
                    packed_low_k::get_q3(col, lane, data, dst)
                }
                GgmlType::Q2_K => {
                    let (col, lane, _) = k_place(p, r, b);
                    packed_low_k::get_q2(col, lane, data, dst)
                }
                _ => get_k(ty, p, data, r, b, dst),
            }
        }
        return;
    }
    // Block `b` of the row lies one block column (eight blocks) after block `b - 1`.
    let parts = p.block_parts(ty, r, 0);
    let column = GROUP * p.block_bytes;
    for (b, dst) in out.chunks_exact_mut(p.block_bytes).enumerate() {
        parts.get(ty, &data[b * column..], dst);
    }
}

/// Where super-block column `b` of row `r`'s group starts in a packed K-quant matrix, and
/// the row's lane (the place of its scales) and index within the group.
fn k_place(p: &Packing, r: usize, b: usize) -> (usize, usize, usize) {
    let (g, i) = (r / GROUP, r % GROUP);
    let lane = LANE_ROWS.iter().position(|&row| row == i).unwrap_or(0);
    (g * p.group_bytes() + b * p.column_bytes, lane, i)
}

/// Copy `Q4_K` or `Q5_K` super-block `b` of row `r` (`src`, 144 or 176 bytes) into its
/// places in `out`.
fn put_k(ty: GgmlType, p: &Packing, r: usize, b: usize, src: &[u8], out: &mut [u8]) {
    let five = ty == GgmlType::Q5_K;
    let (col, lane, i) = k_place(p, r, b);
    out[col + 2 * lane..][..2].copy_from_slice(&src[0..2]);
    out[col + 16 + 2 * lane..][..2].copy_from_slice(&src[2..4]);
    let packed: [u8; 12] = std::array::from_fn(|k| src[4 + k]);
    let (sc, mn) = kindle_gguf::quant::unpack_scale_min_k4(&packed);
    // `Q5_K`: 32 bytes of fifth bits (bit `j` of byte `t`: value `t` of sub-block `j`).
    let (qh, qs) = if five {
        (&src[16..48], &src[48..176])
    } else {
        (&src[16..16], &src[16..144])
    };
    for j in 0..8 {
        out[col + k_scales_at(j) + lane] = sc[j];
        out[col + k_mins_at(j) + lane] = mn[j];
        // Sub-block `j`: the low (even `j`) or high (odd) nibbles of 32 bytes of `qs`.
        let value = |t: usize| {
            let byte = qs[32 * (j / 2) + t];
            if j % 2 == 0 { byte & 0x0F } else { byte >> 4 }
        };
        let sub = col + k_sub_at(five, j);
        if five {
            // The `Q5_1` form: the rows in the lanes (`q5_places`).
            for (v, &h) in qh.iter().enumerate() {
                let ((byte, shift), (hbyte, bit)) = q5_places(lane, v);
                out[sub + byte] |= value(v) << shift;
                out[sub + hbyte] |= ((h >> j) & 1) << bit;
            }
            continue;
        }
        for (t, d) in out[sub + 16 * i..][..16].iter_mut().enumerate() {
            *d = value(t) | (value(t + 16) << 4);
        }
    }
}

/// `Q4_K` or `Q5_K` super-block `b` of row `r` back from its places in `data`, into `dst`.
fn get_k(ty: GgmlType, p: &Packing, data: &[u8], r: usize, b: usize, dst: &mut [u8]) {
    let five = ty == GgmlType::Q5_K;
    let (col, lane, i) = k_place(p, r, b);
    dst[0..2].copy_from_slice(&data[col + 2 * lane..][..2]);
    dst[2..4].copy_from_slice(&data[col + 16 + 2 * lane..][..2]);
    let sc: [u8; 8] = std::array::from_fn(|j| data[col + k_scales_at(j) + lane]);
    let mn: [u8; 8] = std::array::from_fn(|j| data[col + k_mins_at(j) + lane]);
    // The inverse of `unpack_scale_min_k4`: twelve bytes hold exactly the 16 six-bit values.
    for j in 0..4 {
        dst[4 + j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        dst[8 + j] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        dst[12 + j] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    let (qh, qs) = dst[16..].split_at_mut(if five { 32 } else { 0 });
    qh.fill(0);
    qs.fill(0);
    for j in 0..8 {
        let sub = col + k_sub_at(five, j);
        let shift = if j % 2 == 0 { 0 } else { 4 };
        if five {
            for (v, h) in qh.iter_mut().enumerate() {
                let ((byte, nibble), (hbyte, bit)) = q5_places(lane, v);
                qs[32 * (j / 2) + v] |= (data[sub + byte] >> nibble & 0x0F) << shift;
                *h |= ((data[sub + hbyte] >> bit) & 1) << j;
            }
            continue;
        }
        for (t, &byte) in data[sub + 16 * i..][..16].iter().enumerate() {
            qs[32 * (j / 2) + t] |= (byte & 0x0F) << shift;
            qs[32 * (j / 2) + t + 16] |= (byte >> 4) << shift;
        }
    }
}

/// Copy `Q6_K` super-block `b` of row `r` (`src`, 210 bytes: `ql`, `qh`, 16 scales, `d`)
/// into its places in `out` (zeroed).
fn put_q6(p: &Packing, r: usize, b: usize, src: &[u8], out: &mut [u8]) {
    let (col, lane, _) = k_place(p, r, b);
    let (ql, qh) = (&src[..128], &src[128..192]);
    out[col + 2 * lane..][..2].copy_from_slice(&src[208..210]);
    for t in 0..16 {
        out[col + q6_scales_at(t) + lane] = src[192 + t];
    }
    for j in 0..8 {
        let sub = col + q6_sub_at(j);
        for v in 0..32 {
            let q = q6_quant(ql, qh, 32 * j + v);
            let ((byte, nibble), (top, shift)) = q6_places(lane, v);
            out[sub + byte] |= (q & 0x0F) << nibble;
            out[sub + top] |= (q >> 4) << shift;
        }
    }
}

/// `Q6_K` super-block `b` of row `r` back from its places in `data`, into `dst`.
fn get_q6(p: &Packing, data: &[u8], r: usize, b: usize, dst: &mut [u8]) {
    let (col, lane, _) = k_place(p, r, b);
    dst.fill(0);
    for j in 0..8 {
        let sub = col + q6_sub_at(j);
        for v in 0..32 {
            let ((byte, nibble), (top, shift)) = q6_places(lane, v);
            let low = data[sub + byte] >> nibble & 0x0F;
            let top = data[sub + top] >> shift & 3;
            // Value `w` of the super-block in ggml's order (the inverse of `q6_quant`).
            let w = 32 * j + v;
            let (n, qq, l) = (w / 128, w % 128 / 32, w % 32);
            dst[64 * n + l + 32 * (qq % 2)] |= low << (4 * (qq / 2));
            dst[128 + 32 * n + l] |= top << (2 * qq);
        }
    }
    for t in 0..16 {
        dst[192 + t] = data[col + q6_scales_at(t) + lane];
    }
    dst[208..210].copy_from_slice(&data[col + 2 * lane..][..2]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packing reports every source byte once, in order and in chunks, and each row unpacks
    /// to its original bytes (across chunk boundaries and the unpacked rows left over).
    #[test]
    fn packing_releases_in_order_and_round_trips() {
        for ty in [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q3_K,
            GgmlType::Q2_K,
        ] {
            let (rows, cols) = (2 * CHUNK_ROWS + 13, ty.block_size() * 2);
            let row_bytes = cols / ty.block_size() * ty.type_size();
            let mut state = 0x9e37_79b9_u32;
            let data: Vec<u8> = (0..rows * row_bytes)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect();
            let mut ranges = Vec::new();
            let buffer = pack_releasing(ty, rows, cols, &data, |r| ranges.push(r));
            let packed = buffer.as_slice();
            assert_eq!(ranges.len(), 3, "{ty:?}: {ranges:?}");
            assert_eq!(ranges[0], 0..CHUNK_ROWS * row_bytes);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            assert_eq!(ranges.last().unwrap().end, data.len());
            assert_ne!(packed, data, "{ty:?}: the layout moves bytes");
            let p = Packing::new(ty, rows, cols);
            let mut row = vec![0u8; row_bytes];
            for r in 0..rows {
                unpack_row(ty, &p, packed, r, &mut row);
                assert_eq!(
                    row,
                    data[r * row_bytes..(r + 1) * row_bytes],
                    "{ty:?} row {r}"
                );
            }
        }
    }
}
