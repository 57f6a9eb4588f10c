//! The load-time layouts of `Q3_K` and `Q2_K` matrices: the packed `Q6_K` form (`packed.rs`)
//! with three- and two-bit quants, so that the `Q6` group kernels (`x86_q6.rs`) run them.
//!
//! A `Q3_K` value is `d * sc * (q - 4)`: an `f16` `d` per 256 values, a signed 6-bit scale
//! `sc` per 16, and a 3-bit `q` (two low bits in `qs`, the third in `hmask`). That is
//! `Q6_K`'s `d * sc * (q - 32)` with another offset, so the form keeps `Q6_K`'s header (the
//! eight rows' `d`, then their 16 scales as `i8`) and its rows in the lanes; only a
//! sub-block's quants are narrower:
//!
//! ```text
//! group g, super-block column s (912 bytes; the file's eight 110-byte super-blocks are 880:
//! the scales unpacked to bytes):
//!   [d of rows P[0..8], f16 x 8] [sc of values 0..16 of rows P[0..8], i8 x 8] ...
//!   [sc of values 240..256] [sub-block 0: 32 bytes of third bits, then two 32-byte vectors
//!   of two-bit pairs] ... [sub-block 7]
//! ```
//!
//! Value `16 h + 4 c + p` (`h` in `0..2`, `c` and `p` in `0..4`) of the row in lane `s` lies
//! at byte `4 s + p` of each part, as in `Q6_K`'s quant vector `c`: its low two bits at bits
//! `2 (c % 2) + 4 h` of two-bit vector `c / 2`, its third bit at bit `c + 4 h` of the third
//! bits (see [`q3_places`]). Padding rows to a whole group as for `Q6_K`.
//!
//! A `Q2_K` value is `d * sc * q - dmin * m`: `f16` `d` and `dmin` per 256 values, a 4-bit
//! scale `sc` and min `m` per 16 (one byte, `sc | m << 4`), a 2-bit `q`. Its form holds the
//! same bytes, moved (672 bytes a super-block column, as the file's eight 84-byte blocks):
//!
//! ```text
//! group g, super-block column s:
//!   [d of rows P[0..8], f16 x 8] [dmin, f16 x 8] [sc | m << 4 of values 0..16 of rows
//!   P[0..8], u8 x 8] ... [of values 240..256] [sub-block 0: two 32-byte vectors of two-bit
//!   pairs, as Q3_K's] ... [sub-block 7]
//! ```

use kindle_gguf::quant::unpack_scales_q3_k;

/// Bytes of a packed `Q3_K` super-block column's header: the `d` row (`f16 x 8`) and the 16
/// scales of eight rows (`i8 x 8` each), as `Q6_K`'s.
pub(crate) const Q3_HEADER: usize = 16 + 128;

/// Where, in a packed `Q3_K` super-block column, the scales of values `16 t..16 t + 16`
/// start: eight `i8` in lane order.
pub(crate) const fn q3_scales_at(t: usize) -> usize {
    16 + 8 * t
}

/// Bytes of one 32-value sub-block of a packed `Q3_K` super-block column: 32 bytes of third
/// bits, then two vectors of eight rows' two-bit pairs.
pub(crate) const Q3_SUB_BYTES: usize = 32 + 64;

/// Bytes of a packed `Q3_K` super-block column (eight rows' super-blocks, the scales as
/// bytes).
pub(crate) const Q3_COLUMN_BYTES: usize = Q3_HEADER + 8 * Q3_SUB_BYTES;

/// Where, in a packed `Q3_K` super-block column, sub-block `j` (values `32 j..32 j + 32`)
/// starts: its 32 bytes of third bits, then two-bit vector `k` at `32 + 32 k`.
pub(crate) const fn q3_sub_at(j: usize) -> usize {
    Q3_HEADER + Q3_SUB_BYTES * j
}

/// Where value `v` (`0..32`) of the row in lane `s` lies in a packed `Q3_K` sub-block (see
/// the module docs): its two low bits' byte (from the sub-block's start) and shift, and its
/// third bit's byte and bit.
pub(crate) fn q3_places(s: usize, v: usize) -> ((usize, u32), (usize, u32)) {
    let (h, c, p) = (v / 16, v % 16 / 4, v % 4);
    let byte = 4 * s + p;
    (
        (32 + 32 * (c / 2) + byte, (2 * (c % 2) + 4 * h) as u32),
        (byte, (c + 4 * h) as u32),
    )
}

/// Where value `v` (`0..256`) of a GGUF `Q3_K` super-block lies, in ggml's
/// `dequantize_row_q3_K` order: its `qs` byte and shift, and its `hmask` byte and bit.
fn file_places(v: usize) -> ((usize, u32), (usize, u32)) {
    let (n, j, l) = (v / 128, v % 128 / 32, v % 32);
    ((32 * n + l, 2 * j as u32), (l, (4 * n + j) as u32))
}

/// Bytes of one 32-value sub-block of a packed `Q2_K` super-block column: two vectors of
/// eight rows' two-bit pairs.
pub(crate) const Q2_SUB_BYTES: usize = 64;

/// Bytes of a packed `Q2_K` super-block column's header: the `d` and `dmin` rows (`f16 x 8`
/// each) and the 16 scale-and-min bytes of eight rows.
pub(crate) const Q2_HEADER: usize = 32 + 128;

/// Bytes of a packed `Q2_K` super-block column (eight rows' 84-byte super-blocks).
pub(crate) const Q2_COLUMN_BYTES: usize = Q2_HEADER + 8 * Q2_SUB_BYTES;

/// Where, in a packed `Q2_K` super-block column, the scale-and-min bytes of values
/// `16 t..16 t + 16` start: eight bytes in lane order.
pub(crate) const fn q2_scales_at(t: usize) -> usize {
    32 + 8 * t
}

/// Where, in a packed `Q2_K` super-block column, sub-block `j` starts: two-bit vector `k`
/// at `32 k` from there.
pub(crate) const fn q2_sub_at(j: usize) -> usize {
    Q2_HEADER + Q2_SUB_BYTES * j
}

/// The offsets of a GGUF `Q3_K` super-block's parts: `hmask`, `qs`, `scales`, `d`.
const HMASK: usize = 0;
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// Copy a `Q3_K` super-block (`src`, 110 bytes) into its places in `out` (zeroed): the
/// super-block column starting at `col`, the row in lane `lane`. (The same arguments below.)
pub(crate) fn put_q3(col: usize, lane: usize, src: &[u8], out: &mut [u8]) {
    out[col + 2 * lane..][..2].copy_from_slice(&src[D..D + 2]);
    let scales: [u8; 12] = std::array::from_fn(|k| src[SCALES + k]);
    for (t, sc) in unpack_scales_q3_k(&scales).into_iter().enumerate() {
        out[col + q3_scales_at(t) + lane] = sc as u8;
    }
    for j in 0..8 {
        let sub = col + q3_sub_at(j);
        for v in 0..32 {
            let ((qs, shift), (hm, bit)) = file_places(32 * j + v);
            let low = src[QS + qs] >> shift & 3;
            let third = src[HMASK + hm] >> bit & 1;
            let ((byte, to), (tbyte, tbit)) = q3_places(lane, v);
            out[sub + byte] |= low << to;
            out[sub + tbyte] |= third << tbit;
        }
    }
}

/// A `Q3_K` super-block back from its places in `data`, into `dst` (110 bytes): the file's
/// bytes, its scales packed again as ggml packs them.
pub(crate) fn get_q3(col: usize, lane: usize, data: &[u8], dst: &mut [u8]) {
    dst.fill(0);
    for j in 0..8 {
        let sub = col + q3_sub_at(j);
        for v in 0..32 {
            let ((byte, from), (tbyte, tbit)) = q3_places(lane, v);
            let low = data[sub + byte] >> from & 3;
            let third = data[sub + tbyte] >> tbit & 1;
            let ((qs, shift), (hm, bit)) = file_places(32 * j + v);
            dst[QS + qs] |= low << shift;
            dst[HMASK + hm] |= third << bit;
        }
    }
    // The inverse of `unpack_scales_q3_k`: low four bits of scale `t` in the low (`t < 8`)
    // or high nibble of byte `t % 8`, the top two in byte `8 + t % 4` at bits `2 (t / 4)`.
    for t in 0..16 {
        let sc = (data[col + q3_scales_at(t) + lane] as i8 as i32 + 32) as u8;
        dst[SCALES + t % 8] |= (sc & 0x0F) << (4 * (t / 8));
        dst[SCALES + 8 + t % 4] |= (sc >> 4 & 3) << (2 * (t / 4));
    }
    dst[D..D + 2].copy_from_slice(&data[col + 2 * lane..][..2]);
}

/// A packed `Q3_K` super-block dequantised into `y` straight from the packed layout (the
/// prefill product dequantises every weight row once per product), with the bits of ggml's
/// `(d * (sc - 32)) * (q - 4)`.
pub(crate) fn dequantize_q3(col: usize, lane: usize, data: &[u8], y: &mut [f32]) {
    let d = half::f16::from_le_bytes([data[col + 2 * lane], data[col + 2 * lane + 1]]);
    let d = d.to_f32();
    for (j, y) in y.chunks_exact_mut(32).enumerate() {
        let sub: &[u8; Q3_SUB_BYTES] = data[col + q3_sub_at(j)..][..Q3_SUB_BYTES]
            .try_into()
            .expect("a whole sub-block");
        let ds =
            [2 * j, 2 * j + 1].map(|t| d * f32::from(data[col + q3_scales_at(t) + lane] as i8));
        for c in 0..4 {
            for p in 0..4 {
                let byte = 4 * lane + p;
                let pairs = sub[32 + 32 * (c / 2) + byte] >> (2 * (c % 2));
                let third = sub[byte] >> c;
                let lo = i32::from((pairs & 3) | (third & 1) << 2) - 4;
                let hi = i32::from((pairs >> 4 & 3) | (third >> 4 & 1) << 2) - 4;
                y[4 * c + p] = ds[0] * lo as f32;
                y[16 + 4 * c + p] = ds[1] * hi as f32;
            }
        }
    }
}

/// The offsets of a GGUF `Q2_K` super-block's parts: `scales` (16 bytes, `sc | m << 4`),
/// `qs`, `d`, `dmin`.
const Q2_QS: usize = 16;
const Q2_D: usize = 80;

/// Copy a `Q2_K` super-block (`src`, 84 bytes) into its places in `out` (zeroed). Its
/// two-bit pairs lie as `Q3_K`'s ([`q3_places`], less the 32 bytes of third bits before
/// them).
pub(crate) fn put_q2(col: usize, lane: usize, src: &[u8], out: &mut [u8]) {
    out[col + 2 * lane..][..2].copy_from_slice(&src[Q2_D..Q2_D + 2]);
    out[col + 16 + 2 * lane..][..2].copy_from_slice(&src[Q2_D + 2..Q2_D + 4]);
    for t in 0..16 {
        out[col + q2_scales_at(t) + lane] = src[t];
    }
    for j in 0..8 {
        let sub = col + q2_sub_at(j);
        for v in 0..32 {
            let ((qs, shift), _) = file_places(32 * j + v);
            let ((byte, to), _) = q3_places(lane, v);
            out[sub + byte - 32] |= (src[Q2_QS + qs] >> shift & 3) << to;
        }
    }
}

/// A `Q2_K` super-block back from its places in `data`, into `dst` (84 bytes).
pub(crate) fn get_q2(col: usize, lane: usize, data: &[u8], dst: &mut [u8]) {
    dst.fill(0);
    for j in 0..8 {
        let sub = col + q2_sub_at(j);
        for v in 0..32 {
            let ((byte, from), _) = q3_places(lane, v);
            let ((qs, shift), _) = file_places(32 * j + v);
            dst[Q2_QS + qs] |= (data[sub + byte - 32] >> from & 3) << shift;
        }
    }
    for t in 0..16 {
        dst[t] = data[col + q2_scales_at(t) + lane];
    }
    dst[Q2_D..Q2_D + 2].copy_from_slice(&data[col + 2 * lane..][..2]);
    dst[Q2_D + 2..Q2_D + 4].copy_from_slice(&data[col + 16 + 2 * lane..][..2]);
}

/// A packed `Q2_K` super-block dequantised into `y` straight from the packed layout, with
/// the bits of ggml's `(d * sc) * q - dmin * m`.
pub(crate) fn dequantize_q2(col: usize, lane: usize, data: &[u8], y: &mut [f32]) {
    let f16 = |at: usize| half::f16::from_le_bytes([data[at], data[at + 1]]).to_f32();
    let (d, dmin) = (f16(col + 2 * lane), f16(col + 16 + 2 * lane));
    for (j, y) in y.chunks_exact_mut(32).enumerate() {
        let sub: &[u8; Q2_SUB_BYTES] = data[col + q2_sub_at(j)..][..Q2_SUB_BYTES]
            .try_into()
            .expect("a whole sub-block");
        let [(d0, m0), (d1, m1)] = [2 * j, 2 * j + 1].map(|t| {
            let sm = data[col + q2_scales_at(t) + lane];
            (d * f32::from(sm & 0x0F), dmin * f32::from(sm >> 4))
        });
        for c in 0..4 {
            for p in 0..4 {
                let pairs = sub[32 * (c / 2) + 4 * lane + p] >> (2 * (c % 2));
                y[4 * c + p] = d0 * f32::from(pairs & 3) - m0;
                y[16 + 4 * c + p] = d1 * f32::from(pairs >> 4 & 3) - m1;
            }
        }
    }
}
