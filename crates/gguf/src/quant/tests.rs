//! Tests of the dispatch in `dequantize` (sizes, errors, plain float types, blocks in
//! sequence), and the helpers the block-format tests share.

use super::*;
use crate::quant::kquants::tests::{q4_k_hand_block, q6_k_hand_block};

// f16 bit patterns used by the tests of every block format.
pub(super) const F16_ONE: u16 = 0x3C00; // 1.0
pub(super) const F16_HALF: u16 = 0x3800; // 0.5
pub(super) const F16_QUARTER: u16 = 0x3400; // 0.25
pub(super) const F16_TWO: u16 = 0x4000; // 2.0
pub(super) const F16_MINUS_ONE: u16 = 0xBC00; // -1.0

pub(super) fn put_f16(block: &mut [u8], at: usize, bits: u16) {
    block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
}

pub(super) fn deq(ty: GgmlType, data: &[u8]) -> Vec<f32> {
    let n = data.len() / ty.type_size() * ty.block_size();
    let mut out = vec![f32::NAN; n];
    dequantize(ty, data, &mut out).unwrap();
    out
}

#[test]
fn block_constants_match_type_sizes() {
    use GgmlType::*;
    for (ty, bytes, values) in [
        (Q4_0, BLOCK_Q4_0_BYTES, QK32),
        (Q4_1, BLOCK_Q4_1_BYTES, QK32),
        (Q5_0, BLOCK_Q5_0_BYTES, QK32),
        (Q5_1, BLOCK_Q5_1_BYTES, QK32),
        (Q8_0, BLOCK_Q8_0_BYTES, QK32),
        (Q4_K, BLOCK_Q4_K_BYTES, QK_K),
        (Q5_K, BLOCK_Q5_K_BYTES, QK_K),
        (Q6_K, BLOCK_Q6_K_BYTES, QK_K),
    ] {
        assert_eq!(ty.type_size(), bytes, "{ty}");
        assert_eq!(ty.block_size(), values, "{ty}");
    }
}

#[test]
fn f32_is_read_little_endian() {
    // 1.5 = 0x3FC00000, -2.0 = 0xC0000000.
    let data = [0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0];
    assert_eq!(deq(GgmlType::F32, &data), [1.5, -2.0]);
}

#[test]
fn f16_conversions() {
    let mut data = Vec::new();
    for bits in [
        0x3C00u16, // 1.0
        0xC000,    // -2.0
        0x3555,    // 1 + 0x155/1024 = 1.3330078125, times 2^-2 = 0.333251953125
        0x0001,    // smallest subnormal, 2^-24
        0x7BFF,    // largest finite, 65504
        0x7C00,    // +inf
        0x8000,    // -0.0
    ] {
        data.extend_from_slice(&bits.to_le_bytes());
    }
    let out = deq(GgmlType::F16, &data);
    assert_eq!(out[..5], [1.0, -2.0, 0.333_251_95, 2f32.powi(-24), 65504.0]);
    assert_eq!(out[5], f32::INFINITY);
    assert_eq!(out[6].to_bits(), 0x8000_0000);
    // A NaN stays a NaN.
    assert!(deq(GgmlType::F16, &0x7E00u16.to_le_bytes())[0].is_nan());
    // Every bit pattern, in runs longer than the conversion's chunks: each value widened as
    // `half` widens it alone (NaNs stay NaNs).
    let all: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let out = deq(GgmlType::F16, &all);
    for (bits, got) in (0..=u16::MAX).zip(out) {
        let want = half::f16::from_bits(bits).to_f32();
        let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
        assert!(same, "f16 {bits:#06x}: {got} against {want}");
    }
}

#[test]
fn bf16_conversions() {
    let mut data = Vec::new();
    // bf16 is the top half of an f32: 0x3F80 -> 0x3F800000 = 1.0; 0xC040 -> -3.0;
    // 0x4049 -> 0x40490000 = 3.140625; 0x0001 -> 2^-133 (an f32 subnormal).
    for bits in [0x3F80u16, 0xC040, 0x4049, 0x0001] {
        data.extend_from_slice(&bits.to_le_bytes());
    }
    let out = deq(GgmlType::BF16, &data);
    assert_eq!(out, [1.0, -3.0, 3.140625, f32::from_bits(0x0001_0000)]);
}

/// `BF16` written as ggml's `ggml_compute_fp32_to_bf16` writes it: the top half rounded to
/// nearest, ties to even; past the largest finite value to infinity; NaN kept quiet.
#[test]
fn bf16_encoding_rounds_to_nearest_even() {
    let cases: [(u32, u16); 12] = [
        (0x3F80_0000, 0x3F80), // 1.0 exactly
        (0x3F80_7FFF, 0x3F80), // below the half: down
        (0x3F80_8000, 0x3F80), // the half, even below: down
        (0x3F81_8000, 0x3F82), // the half, odd below: up to even
        (0x3F80_8001, 0x3F81), // above the half: up
        (0xC040_0000, 0xC040), // -3.0
        (0x7F7F_FFFF, 0x7F80), // f32::MAX rounds past bf16's largest: infinity
        (0x7F80_0000, 0x7F80), // infinity
        (0xFF80_0000, 0xFF80), // -infinity
        (0x7F80_0001, 0x7FC0), // a signalling NaN made quiet (ggml: `| 64`)
        (0xFFC1_2345, 0xFFC1), // a quiet NaN keeps its top bits
        (0x0000_8001, 0x0001), // a subnormal rounds like any value
    ];
    for (input, want) in cases {
        let bytes = quantize(GgmlType::BF16, &[f32::from_bits(input)]).unwrap();
        assert_eq!(
            u16::from_le_bytes([bytes[0], bytes[1]]),
            want,
            "{input:#010x}"
        );
    }
    // Every bf16 value survives the round trip: widening is exact.
    let all: Vec<u8> = (0..=u16::MAX)
        .filter(|b| b & 0x7FFF <= 0x7F80) // NaNs aside
        .flat_map(u16::to_le_bytes)
        .collect();
    let values = deq(GgmlType::BF16, &all);
    assert_eq!(quantize(GgmlType::BF16, &values).unwrap(), all);
}

#[test]
fn consecutive_blocks_land_in_place() {
    // Three Q8_0 blocks with d = 1, 2, -1 and qs[j] = j: value 32*b + j = j * d_b.
    let ds = [F16_ONE, F16_TWO, F16_MINUS_ONE];
    let mut data = Vec::new();
    for d in ds {
        data.extend_from_slice(&d.to_le_bytes());
        data.extend(0..32u8);
    }
    let out = deq(GgmlType::Q8_0, &data);
    assert_eq!(out.len(), 96);
    for (b, scale) in [1.0f32, 2.0, -1.0].into_iter().enumerate() {
        for j in 0..32 {
            assert_eq!(out[32 * b + j], j as f32 * scale, "block {b} value {j}");
        }
    }

    // Two Q4_K blocks: the hand-built one, then the same one with d and dmin doubled, whose
    // values (all exact) must be doubled and start at 256.
    let first = q4_k_hand_block();
    let mut second = first;
    put_f16(&mut second, 0, F16_ONE);
    put_f16(&mut second, 2, F16_HALF);
    let mut data = first.to_vec();
    data.extend_from_slice(&second);
    let out = deq(GgmlType::Q4_K, &data);
    let single = deq(GgmlType::Q4_K, &first);
    assert_eq!(out[..256], single[..]);
    for i in 0..256 {
        assert_eq!(out[256 + i], 2.0 * single[i], "value {i} of block 1");
    }

    // Two Q6_K blocks, the second all zero bytes (d = 0): it must not disturb the first.
    let mut data = q6_k_hand_block().to_vec();
    data.extend_from_slice(&[0u8; 210]);
    let out = deq(GgmlType::Q6_K, &data);
    assert_eq!(out[..256], deq(GgmlType::Q6_K, &q6_k_hand_block())[..]);
    assert!(out[256..].iter().all(|&x| x == 0.0));
}

#[test]
fn size_mismatches_are_errors() {
    use GgmlType::*;
    let mut out = vec![0.0f32; 64];
    // Not a whole number of blocks.
    assert_eq!(
        dequantize(Q4_0, &[0u8; 18], &mut out[..31]),
        Err(QuantError::SizeMismatch {
            ty: Q4_0,
            bytes: 18,
            values: 31,
            block: 32,
            block_bytes: 18
        })
    );
    // Whole blocks, wrong byte count (one short, one long, one block too many).
    assert!(matches!(
        dequantize(Q4_0, &[0u8; 17], &mut out[..32]),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(Q8_0, &[0u8; 35], &mut out[..32]),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(Q6_K, &[0u8; 420], &mut out[..32]),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(F32, &[0u8; 7], &mut out[..2]),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(F16, &[0u8; 3], &mut out[..2]),
        Err(QuantError::SizeMismatch { .. })
    ));
    // A failed call leaves `out` untouched.
    assert!(out.iter().all(|&x| x == 0.0));
    // Zero values from zero bytes is fine.
    for ty in [
        F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    ] {
        assert_eq!(dequantize(ty, &[], &mut []), Ok(()), "{ty}");
    }
}

#[test]
fn unsupported_types_are_errors() {
    use GgmlType::*;
    for ty in [Q8_1, Q8_K, I8, I16, I32, I64, F64] {
        assert!(!ty.can_dequantize());
        // Correctly sized input still fails, and is reported as unsupported first.
        let mut out = vec![0.0; ty.block_size()];
        let data = vec![0u8; ty.type_size()];
        assert_eq!(
            dequantize(ty, &data, &mut out),
            Err(QuantError::Unsupported(ty))
        );
        assert_eq!(
            dequantize(ty, &[1], &mut []),
            Err(QuantError::Unsupported(ty))
        );
    }
}

#[test]
fn dequantize_row_is_dequantize() {
    let b = q4_k_hand_block();
    let mut out = [0.0f32; 256];
    dequantize_row(GgmlType::Q4_K, &b, &mut out).unwrap();
    assert_eq!(out[..], deq(GgmlType::Q4_K, &b)[..]);
}

#[test]
fn never_panics_on_odd_sizes() {
    let data = [0xA5u8; 600];
    let mut out = [0.0f32; 600];
    for id in 0..40 {
        let Some(ty) = GgmlType::from_id(id) else {
            continue;
        };
        for bytes in [0, 1, 2, 17, 18, 33, 144, 175, 176, 209, 210, 211, 420] {
            for values in [0, 1, 2, 31, 32, 64, 255, 256, 257, 512] {
                let r = dequantize(ty, &data[..bytes], &mut out[..values]);
                let fits = values % ty.block_size() == 0
                    && values / ty.block_size() * ty.type_size() == bytes;
                assert_eq!(
                    r.is_ok(),
                    ty.can_dequantize() && fits,
                    "{ty} {bytes} {values}"
                );
            }
        }
    }
}
