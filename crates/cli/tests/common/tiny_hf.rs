//! Tiny random models for the architecture tests (`tests/tiny_archs.rs`, `tests/tiny_gpt2.rs`):
//! weights, a safetensors writer, and running a model over a prompt both ways.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use kindle_model::{Llama, LogitsFor};

/// A deterministic generator of weights in [-scale, scale).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    pub fn values(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

/// The model's tensors by HF name: row-major, `[out, in]` for matrices.
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// A safetensors file, written as the format says: an 8-byte little-endian header length, the
/// JSON header (dtype, shape, data offsets), the data.
pub fn write_safetensors(path: &Path, tensors: &Tensors) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, (shape, values)) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.clone(),
            serde_json::json!({ "dtype": "F32", "shape": shape, "data_offsets": [start, data.len()] }),
        );
    }
    let mut header = serde_json::Value::Object(header).to_string().into_bytes();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// `W x` for a row-major `[out, in]` matrix, summed in `f64`.
pub fn matvec(w: &(Vec<usize>, Vec<f32>), x: &[f32]) -> Vec<f32> {
    let (rows, cols) = (w.0[0], w.0[1]);
    assert_eq!(x.len(), cols);
    (0..rows)
        .map(|r| {
            let row = &w.1[r * cols..(r + 1) * cols];
            row.iter()
                .zip(x)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum::<f64>() as f32
        })
        .collect()
}

/// Logits of every position: one pass over the whole prompt, and the same tokens fed one at
/// a time.
pub fn run(model: &Llama, tokens: &[u32]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let vocab = model.config().vocab_size;
    let mut cache = model.new_cache(tokens.len());
    let all = model.forward(tokens, &mut cache, LogitsFor::All).unwrap();
    let mut cache = model.new_cache(tokens.len());
    let steps = tokens
        .iter()
        .map(|&t| model.forward(&[t], &mut cache, LogitsFor::Last).unwrap())
        .collect();
    (all.chunks(vocab).map(<[f32]>::to_vec).collect(), steps)
}

pub fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

/// llama.cpp's logits on the tiny models (`testdata/reference/tiny-archs-llama-cpp.json`),
/// parsed once.
pub fn llama_cpp_reference() -> &'static serde_json::Value {
    static CELL: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/reference/tiny-archs-llama-cpp.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        serde_json::from_str(&text).expect("parsing the reference JSON")
    })
}

/// The bytes of a tiny model's GGUF file as llama.cpp ran it: `file` with
/// `tokenizer.ggml.model = none` (llama.cpp then makes `{arch}.vocab_size` dummy tokens).
pub fn for_llama_cpp(writer: kindle_gguf::GgufWriter) -> Vec<u8> {
    writer.metadata("tokenizer.ggml.model", "none").to_bytes()
}

/// Case `name` of [`llama_cpp_reference`]: checks that `bytes` are the file llama.cpp ran
/// (its sha256), then returns the tokens and llama.cpp's logits at every position.
pub fn llama_cpp_case(name: &str, bytes: &[u8]) -> (Vec<u32>, Vec<Vec<f32>>) {
    use sha2::{Digest, Sha256};
    let case = &llama_cpp_reference()["cases"][name];
    assert!(case.is_object(), "no llama.cpp case {name}");
    let digest: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest, case["sha256"],
        "{name}: the file written is not the one llama.cpp's reference was made on"
    );
    let tokens = case["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let logits = case["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    (tokens, logits)
}

/// Writes `bytes` as `{name}.gguf` to `$KINDLE_TINY_ARCHS_DIR` (the reference's inputs; see
/// its `about`).
pub fn write_for_llama_cpp(name: &str, bytes: &[u8]) {
    let dir = std::env::var("KINDLE_TINY_ARCHS_DIR").expect("KINDLE_TINY_ARCHS_DIR");
    std::fs::write(Path::new(&dir).join(format!("{name}.gguf")), bytes).unwrap();
}
