//! `Q2_K` and `Q3_K` against ggml itself: `testdata/reference/ggml-low-k-quants.json` holds
//! what ggml's `dequantize_row_q2_K` / `dequantize_row_q3_K` gave for random super-blocks (a
//! few with zero, subnormal and largest `f16` scales) and for the blocks its
//! `quantize_row_q*_K_ref` made of six kinds of rows (`ggml_low_k_quants.py` beside it wrote
//! the file through ctypes). kindle's decoders must give the same bits.

mod common;

use common::hex;
use kindle_gguf::quant::{GgmlType, dequantize};
use serde_json::Value;

fn reference() -> Value {
    common::reference("ggml-low-k-quants.json")
}

fn bits(values: &Value) -> Vec<u32> {
    let values = values.as_array().expect("an array of f32 bits");
    values
        .iter()
        .map(|v| v.as_u64().expect("u32") as u32)
        .collect()
}

/// Every value's bits equal, else the first difference named.
fn assert_decodes(ty: GgmlType, blocks: &[u8], want: &[u32], what: &str) {
    let mut out = vec![0f32; want.len()];
    dequantize(ty, blocks, &mut out).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (i, (got, &want)) in out.iter().zip(want).enumerate() {
        assert_eq!(
            got.to_bits(),
            want,
            "{what}: value {i} is {got}, ggml gives {}",
            f32::from_bits(want)
        );
    }
}

#[test]
fn q2_k_and_q3_k_decode_as_ggml_does() {
    let reference = reference();
    for (name, ty) in [("Q2_K", GgmlType::Q2_K), ("Q3_K", GgmlType::Q3_K)] {
        let entry = &reference["types"][name];
        let blocks = hex(&entry["blocks"]);
        assert_eq!(
            blocks.len(),
            12 * ty.type_size(),
            "{name}: twelve random blocks"
        );
        assert_decodes(ty, &blocks, &bits(&entry["values_bits"]), name);
        let rows = entry["quantized"].as_array().expect("quantized rows");
        assert_eq!(rows.len(), 6);
        for (r, row) in rows.iter().enumerate() {
            let what = format!("{name}, quantized row {r}");
            assert_decodes(ty, &hex(&row["blocks"]), &bits(&row["values_bits"]), &what);
        }
    }
}

/// The comparison above can fail: one flipped quant bit in one block changes a value.
#[test]
fn a_flipped_bit_changes_the_decoded_values() {
    let reference = reference();
    for (name, ty, byte) in [("Q2_K", GgmlType::Q2_K, 40), ("Q3_K", GgmlType::Q3_K, 50)] {
        let entry = &reference["types"][name];
        let mut blocks = hex(&entry["blocks"]);
        // Block 7 (an ordinary scale), a quant byte.
        blocks[7 * ty.type_size() + byte] ^= 0x04;
        let result = std::panic::catch_unwind(|| {
            assert_decodes(ty, &blocks, &bits(&entry["values_bits"]), name)
        });
        assert!(result.is_err(), "{name}: a flipped bit went unnoticed");
    }
}

/// ggml's `quantize_row_q2_K_ref` / `quantize_row_q3_K_ref` on six kinds of rows (gaussian,
/// small uniform, outliers, all positive, sparse, constant then zero): kindle's quantizers
/// follow them operation by operation, so every super-block is ggml's bytes.
#[test]
fn q2_k_and_q3_k_quantize_as_ggml_does() {
    let reference = reference();
    for (name, ty) in [("Q2_K", GgmlType::Q2_K), ("Q3_K", GgmlType::Q3_K)] {
        for (r, row) in reference["types"][name]["quantized"]
            .as_array()
            .expect("quantized rows")
            .iter()
            .enumerate()
        {
            let input: Vec<f32> = bits(&row["input_bits"])
                .into_iter()
                .map(f32::from_bits)
                .collect();
            let got = kindle_gguf::quant::quantize(ty, &input).unwrap();
            let want = hex(&row["blocks"]);
            assert_eq!(got.len(), want.len(), "{name} row {r}");
            let size = ty.type_size();
            for (b, (g, w)) in got.chunks(size).zip(want.chunks(size)).enumerate() {
                assert_eq!(g, w, "{name} row {r} super-block {b}: not ggml's bytes");
            }
        }
    }
}
