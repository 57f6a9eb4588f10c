//! Reference computations shared by the integration tests, written the plain way (every step
//! in `f64`) to check the crate's fast ones against.

#![allow(dead_code)]

/// Reference softmax in `f64`, max-subtracted.
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|x| x / s).collect()
}
