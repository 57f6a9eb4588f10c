//! `kindle quantize`'s encoders against ggml itself: `testdata/reference/ggml-quantizers.json`
//! holds the blocks ggml's `quantize_row_<type>_ref` (what `llama-quantize` runs without an
//! importance matrix; for `IQ4_NL` and `IQ4_XS` their `quantize_iq4_*`) made of eight kinds of
//! rows (`ggml_quantizers.py` beside it wrote the file
//! through ctypes). kindle must write the same bytes.

mod common;

use common::hex;
use kindle_gguf::quant::{GgmlType, dequantize, quantize};
use serde_json::Value;

fn reference() -> Value {
    common::reference("ggml-quantizers.json")
}

fn rows(reference: &Value) -> Vec<Vec<f32>> {
    let rows = reference["rows"].as_array().expect("rows");
    rows.iter()
        .map(|row| {
            let row = row.as_array().expect("a row of f32 bits");
            row.iter()
                .map(|v| f32::from_bits(v.as_u64().expect("u32") as u32))
                .collect()
        })
        .collect()
}

const TYPES: [(&str, GgmlType); 10] = [
    ("Q8_0", GgmlType::Q8_0),
    ("Q4_0", GgmlType::Q4_0),
    ("Q4_1", GgmlType::Q4_1),
    ("Q5_0", GgmlType::Q5_0),
    ("Q5_1", GgmlType::Q5_1),
    ("Q4_K", GgmlType::Q4_K),
    ("Q5_K", GgmlType::Q5_K),
    ("Q6_K", GgmlType::Q6_K),
    ("IQ4_NL", GgmlType::IQ4_NL),
    ("IQ4_XS", GgmlType::IQ4_XS),
];

/// The blocks of `got` that differ from `want`'s, as (row, block) pairs.
fn differing_blocks(ty: GgmlType, got: &[u8], want: &[u8]) -> Vec<usize> {
    let size = ty.type_size();
    got.chunks(size)
        .zip(want.chunks(size))
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(b, _)| b)
        .collect()
}

#[test]
fn every_type_quantizes_to_ggml_s_bytes() {
    let reference = reference();
    let rows = rows(&reference);
    assert_eq!(rows.len(), 8, "eight kinds of rows");
    let mut failures = Vec::new();
    for (name, ty) in TYPES {
        let blocks = reference["types"][name]
            .as_array()
            .expect("blocks of each row");
        for (r, (row, want)) in rows.iter().zip(blocks).enumerate() {
            let want = hex(want);
            let got = quantize(ty, row).unwrap();
            assert_eq!(got.len(), want.len(), "{name} row {r}: byte count");
            let differ = differing_blocks(ty, &got, &want);
            if !differ.is_empty() {
                failures.push(format!("{name} row {r}: blocks {differ:?} differ"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// kindle's `IQ4_NL` and `IQ4_XS` decoders give ggml's `dequantize_row_iq4_nl` / `_iq4_xs`
/// values bit for bit, on ggml's own blocks; and a changed index changes exactly one value.
#[test]
fn non_linear_decoders_give_ggml_s_values() {
    let reference = reference();
    for (name, ty) in [("IQ4_NL", GgmlType::IQ4_NL), ("IQ4_XS", GgmlType::IQ4_XS)] {
        let blocks = reference["types"][name].as_array().expect("blocks");
        let decoded = reference["decoded"][name].as_array().expect("decoded rows");
        assert_eq!(blocks.len(), 8, "{name}");
        for (r, (bytes, want)) in blocks.iter().zip(decoded).enumerate() {
            let bytes = hex(bytes);
            let want: Vec<u32> = want
                .as_array()
                .expect("f32 bits")
                .iter()
                .map(|v| v.as_u64().expect("u32") as u32)
                .collect();
            let mut got = vec![0f32; want.len()];
            dequantize(ty, &bytes, &mut got).unwrap();
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "{name} row {r}");
        }
        // The first row's first value, its index moved by one level.
        let mut bytes = hex(&blocks[0]);
        let at = if ty == GgmlType::IQ4_NL { 2 } else { 8 };
        bytes[at] ^= 0x01;
        let mut got = vec![0f32; 4 * 256];
        dequantize(ty, &bytes, &mut got).unwrap();
        let want: Vec<f32> = decoded[0].as_array().unwrap()[..got.len()]
            .iter()
            .map(|v| f32::from_bits(v.as_u64().unwrap() as u32))
            .collect();
        let differ: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        assert_eq!(differ, [0], "{name}");
    }
}

/// The comparison above can fail: one changed bit in one block is named, and only that block.
#[test]
fn a_changed_block_is_caught() {
    let reference = reference();
    let rows = rows(&reference);
    for (name, ty) in TYPES {
        let want = hex(&reference["types"][name][0]);
        let mut got = quantize(ty, &rows[0]).unwrap();
        assert!(differing_blocks(ty, &got, &want).is_empty(), "{name}");
        // A quant byte near the end of the second block.
        let at = 2 * ty.type_size() - 3;
        got[at] ^= 0x01;
        assert_eq!(differing_blocks(ty, &got, &want), [1], "{name}");
    }
}

/// The grid quants kindle reads (it does not write them), as in `ggml-grid-quants.json`.
const GRID_TYPES: [(&str, GgmlType); 7] = [
    ("IQ2_XXS", GgmlType::IQ2_XXS),
    ("IQ2_XS", GgmlType::IQ2_XS),
    ("IQ2_S", GgmlType::IQ2_S),
    ("IQ3_XXS", GgmlType::IQ3_XXS),
    ("IQ3_S", GgmlType::IQ3_S),
    ("IQ1_S", GgmlType::IQ1_S),
    ("IQ1_M", GgmlType::IQ1_M),
];

fn f32_bits(values: &Value) -> Vec<u32> {
    let values = values.as_array().expect("f32 bits");
    values
        .iter()
        .map(|v| v.as_u64().expect("u32") as u32)
        .collect()
}

fn decoded_bits(ty: GgmlType, bytes: &[u8]) -> Vec<u32> {
    let mut got = vec![0f32; bytes.len() / ty.type_size() * ty.block_size()];
    dequantize(ty, bytes, &mut got).unwrap();
    got.iter().map(|v| v.to_bits()).collect()
}

/// kindle's grid-quant decoders give ggml's `dequantize_row_iq*` values bit for bit, on blocks
/// ggml's quantizers made under an importance matrix and on random blocks (every index, sign
/// and scale pattern).
#[test]
fn grid_decoders_give_ggml_s_values() {
    let reference = common::reference("ggml-grid-quants.json");
    for (name, ty) in GRID_TYPES {
        let blocks = reference["types"][name].as_array().expect("blocks");
        let decoded = reference["decoded"][name].as_array().expect("decoded rows");
        assert_eq!((blocks.len(), decoded.len()), (6, 6), "{name}");
        for (r, (bytes, want)) in blocks.iter().zip(decoded).enumerate() {
            let got = decoded_bits(ty, &hex(bytes));
            let want = f32_bits(want);
            let differ = (0..want.len()).filter(|&i| got.get(i) != Some(&want[i]));
            let differ: Vec<usize> = differ.collect();
            assert!(
                differ.is_empty(),
                "{name} row {r}: values {differ:?} differ"
            );
        }
    }
}

/// The comparison above can fail: one flipped bit of a grid index (the first byte after the
/// scale) changes the values of its group only, and a flipped scale bit every value of its
/// sub-block.
#[test]
fn a_changed_grid_index_is_caught() {
    let reference = common::reference("ggml-grid-quants.json");
    for (name, ty) in GRID_TYPES {
        let mut bytes = hex(&reference["types"][name][4]);
        let want = f32_bits(&reference["decoded"][name][4]);
        // `IQ1_M` has no leading `f16`: its indices come first.
        let at = if ty == GgmlType::IQ1_M { 0 } else { 2 };
        bytes[at] ^= 0x01;
        let got = decoded_bits(ty, &bytes);
        let differ: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
        // `IQ3_XXS`'s and `IQ3_S`'s points hold four values, the others' eight.
        let group = if matches!(ty, GgmlType::IQ3_XXS | GgmlType::IQ3_S) {
            4
        } else {
            8
        };
        assert!(
            !differ.is_empty() && differ.iter().all(|&i| i < group),
            "{name}: {differ:?}"
        );
    }
}
