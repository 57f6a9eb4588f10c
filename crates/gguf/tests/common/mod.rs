//! What the tests against ggml's own outputs share: reading a reference file of
//! `testdata/reference` and its hex strings.

use serde_json::Value;

/// `testdata/reference/{name}`, parsed.
pub fn reference(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/reference/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("the reference is JSON")
}

/// The bytes of a hex string.
pub fn hex(text: &Value) -> Vec<u8> {
    let text = text.as_str().expect("a hex string");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}
