//! K-shift: re-rotating cached keys when the tokens they belong to move to new positions.
//!
//! Keys are cached already rotated (RoPE applied at the position the token had when it was
//! processed). Rotations compose by adding angles, so moving a token from position `p` to
//! `p + delta` is one more rotation by `delta`, with no need to know `p`. This is what
//! llama.cpp's context shift does (its "K-shift"): after discarding `n` tokens, the keys that
//! follow them are rotated by `-n`, and positions stay contiguous.
//!
//! The rotation is the one kindle's Llama uses: adjacent pairs `(2i, 2i+1)` of each head
//! (GGUF's llama layout), angle `delta * theta^(-2i/d)` computed in f64:
//!
//! ```text
//! out[2i]   = x[2i] * cos - x[2i+1] * sin
//! out[2i+1] = x[2i] * sin + x[2i+1] * cos
//! ```
//!
//! Plain RoPE only: models with scaled or NeoX-style (half-split) rotary embeddings need their
//! own shift.

use burn::prelude::*;

/// `(cos, sin)` of `delta * theta^(-2i/head_dim)` for each pair `i < head_dim / 2`.
fn shift_angles(delta: i64, head_dim: usize, rope_theta: f64) -> (Vec<f32>, Vec<f32>) {
    (0..head_dim / 2)
        .map(|i| {
            let inv_freq = rope_theta.powf(-2.0 * i as f64 / head_dim as f64);
            let angle = delta as f64 * inv_freq;
            (angle.cos() as f32, angle.sin() as f32)
        })
        .unzip()
}

/// Rotate every head of `keys` (`[batch, heads, T, head_dim]`, `head_dim` even) by `delta`
/// positions on the device.
///
/// ```
/// use burn::prelude::*;
/// use kindle_kv_cache::shift::k_shift;
///
/// let device = Device::flex();
/// let keys = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 0.0], [1, 1, 1, 2]), &device);
/// // theta^0 = 1: a shift by one position turns (1, 0) by one radian.
/// let out: Vec<f32> = k_shift(keys, 1, 10000.0).into_data().try_into_vec().unwrap();
/// assert!((out[0] - 1f32.cos()).abs() < 1e-6 && (out[1] - 1f32.sin()).abs() < 1e-6);
/// ```
pub fn k_shift(keys: Tensor<4>, delta: i64, rope_theta: f64) -> Tensor<4> {
    let [b, h, t, d] = keys.dims();
    if delta == 0 || t == 0 {
        return keys;
    }
    let device = keys.device();
    let (cos, sin) = shift_angles(delta, d, rope_theta);
    let shape = [1, 1, 1, d / 2, 1];
    let cos = Tensor::<5>::from_data(TensorData::new(cos, shape), &device);
    let sin = Tensor::<5>::from_data(TensorData::new(sin, shape), &device);
    let pairs = keys.reshape([b, h, t, d / 2, 2]);
    let x0 = pairs.clone().narrow(4, 0, 1);
    let x1 = pairs.narrow(4, 1, 1);
    let out0 = x0.clone() * cos.clone() - x1.clone() * sin.clone();
    let out1 = x0 * sin + x1 * cos;
    Tensor::cat(vec![out0, out1], 4).reshape([b, h, t, d])
}

/// [`k_shift`] on the host: rotate each `head_dim`-wide vector in `x` by `delta` positions.
/// Any trailing elements short of a whole vector are left alone.
pub fn k_shift_host(x: &mut [f32], head_dim: usize, delta: i64, rope_theta: f64) {
    if head_dim < 2 {
        return;
    }
    let (cos, sin) = shift_angles(delta, head_dim, rope_theta);
    for head in x.chunks_exact_mut(head_dim) {
        for (i, pair) in head.chunks_exact_mut(2).enumerate() {
            let (x0, x1) = (pair[0], pair[1]);
            pair[0] = x0 * cos[i] - x1 * sin[i];
            pair[1] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_compose_and_undo() {
        let orig = vec![0.3f32, -1.2, 2.0, 0.5, -0.7, 0.1, 1.5, -2.5];
        let mut x = orig.clone();
        k_shift_host(&mut x, 8, 7, 10000.0);
        k_shift_host(&mut x, 8, -3, 10000.0);
        let mut y = orig.clone();
        k_shift_host(&mut y, 8, 4, 10000.0);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-5, "{x:?} vs {y:?}");
        }
        k_shift_host(&mut y, 8, -4, 10000.0);
        for (a, b) in y.iter().zip(&orig) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn device_matches_host() {
        let device = Device::flex();
        let data: Vec<f32> = (0..2 * 3 * 4).map(|i| (i as f32 * 0.37).sin()).collect();
        let t = Tensor::<4>::from_data(TensorData::new(data.clone(), [1, 2, 3, 4]), &device);
        let out: Vec<f32> = k_shift(t, -5, 500.0).into_data().try_into_vec().unwrap();
        let mut host = data;
        k_shift_host(&mut host, 4, -5, 500.0);
        for (a, b) in out.iter().zip(&host) {
            assert!((a - b).abs() < 1e-6);
        }
    }
}
