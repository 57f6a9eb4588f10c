//! K-shift: re-rotating cached keys when the tokens they belong to move to new positions.
//!
//! Keys are cached already rotated (RoPE applied at the position the token had when it was
//! processed). Rotations compose by adding angles, so moving a token from position `p` to
//! `p + delta` is one more rotation by `delta`, with no need to know `p`. This is what
//! llama.cpp's context shift does (its "K-shift"): after discarding `n` tokens, the keys that
//! follow them are rotated by `-n`, and positions stay contiguous.
//!
//! The rotation is the one the model applied ([`KeyRotation`], per layer): pair `i` of each
//! head is `(2i, 2i+1)` (adjacent, GGUF's llama layout) or `(i, i + d/2)` (halves, llama.cpp's
//! NeoX type: Gemma, Qwen2), turned by `delta * theta^(-2i/d)` computed in f64, with the
//! layer's own base `theta` (Gemma-3's local layers 10,000, its global ones 1,000,000):
//!
//! ```text
//! out[a] = x[a] * cos - x[b] * sin
//! out[b] = x[a] * sin + x[b] * cos        (a, b) = (2i, 2i+1) or (i, i + d/2)
//! ```
//!
//! A model that scales its rotary frequencies (Llama 3's frequency factors, linear or YaRN
//! scaling) gives each layer's angles per position ([`KeyRotation::frequencies`]); a shift
//! turns by `delta` times those. YaRN's magnitude is in the keys already and is not applied
//! again.

use std::sync::Arc;

use burn::prelude::*;

/// Which features of a head RoPE turns together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotaryPairs {
    /// `(2i, 2i + 1)`.
    Adjacent,
    /// `(i, i + head_dim / 2)`.
    Halves,
}

/// How a layer's keys were rotated: the pairs, the base, and the angles of a scaled model.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRotation {
    /// Which features form a pair.
    pub pairs: RotaryPairs,
    /// The rotary base `theta`.
    pub theta: f64,
    /// Each pair's angle per position when the model scales its frequencies (`head_dim / 2`
    /// values); `None`: `theta^(-2i/head_dim)`.
    pub frequencies: Option<Arc<[f64]>>,
}

impl KeyRotation {
    /// Pairs `pairs` turned with base `theta`, unscaled.
    pub fn new(pairs: RotaryPairs, theta: f64) -> Self {
        KeyRotation {
            pairs,
            theta,
            frequencies: None,
        }
    }

    /// Adjacent pairs with base `theta` (the llama layout).
    pub fn adjacent(theta: f64) -> Self {
        KeyRotation::new(RotaryPairs::Adjacent, theta)
    }

    /// `(cos, sin)` of `delta` times pair `i`'s angle per position, for each `i <
    /// head_dim / 2`.
    fn shift_angles(&self, delta: i64, head_dim: usize) -> (Vec<f32>, Vec<f32>) {
        (0..head_dim / 2)
            .map(|i| {
                let freq = match &self.frequencies {
                    Some(f) => f[i],
                    None => self.theta.powf(-2.0 * i as f64 / head_dim as f64),
                };
                let angle = delta as f64 * freq;
                (angle.cos() as f32, angle.sin() as f32)
            })
            .unzip()
    }
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
    k_shift_as(keys, delta, KeyRotation::adjacent(rope_theta))
}

/// Rotate every head of `keys` (`[batch, heads, T, head_dim]`, `head_dim` even) by `delta`
/// positions on the device, as `rotation` turned them.
///
/// ```
/// use burn::prelude::*;
/// use kindle_kv_cache::shift::{KeyRotation, RotaryPairs, k_shift_as};
///
/// let device = Device::flex();
/// // Halves: features 0 and 2 are pair 0 (base^0 = 1), features 1 and 3 pair 1.
/// let keys = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 0.0, 0.0, 0.0], [1, 1, 1, 4]), &device);
/// let rotation = KeyRotation::new(RotaryPairs::Halves, 10000.0);
/// let out: Vec<f32> = k_shift_as(keys, 1, rotation).into_data().try_into_vec().unwrap();
/// assert!((out[0] - 1f32.cos()).abs() < 1e-6 && (out[2] - 1f32.sin()).abs() < 1e-6);
/// assert_eq!((out[1], out[3]), (0.0, 0.0));
/// ```
pub fn k_shift_as(keys: Tensor<4>, delta: i64, rotation: KeyRotation) -> Tensor<4> {
    let [b, h, t, d] = keys.dims();
    if delta == 0 || t == 0 {
        return keys;
    }
    let device = keys.device();
    let (cos, sin) = rotation.shift_angles(delta, d);
    // The pair's two features along `axis` of the 5-D view, the pair index along the other.
    let (axis, view, table) = match rotation.pairs {
        RotaryPairs::Adjacent => (4, [b, h, t, d / 2, 2], [1, 1, 1, d / 2, 1]),
        RotaryPairs::Halves => (3, [b, h, t, 2, d / 2], [1, 1, 1, 1, d / 2]),
    };
    let cos = Tensor::<5>::from_data(TensorData::new(cos, table), &device);
    let sin = Tensor::<5>::from_data(TensorData::new(sin, table), &device);
    let pairs = keys.reshape(view);
    let x0 = pairs.clone().narrow(axis, 0, 1);
    let x1 = pairs.narrow(axis, 1, 1);
    let out0 = x0.clone() * cos.clone() - x1.clone() * sin.clone();
    let out1 = x0 * sin + x1 * cos;
    Tensor::cat(vec![out0, out1], axis).reshape([b, h, t, d])
}

/// [`k_shift`] on the host: rotate each `head_dim`-wide vector in `x` by `delta` positions.
/// Any trailing elements short of a whole vector are left alone.
pub fn k_shift_host(x: &mut [f32], head_dim: usize, delta: i64, rope_theta: f64) {
    k_shift_host_as(x, head_dim, delta, KeyRotation::adjacent(rope_theta));
}

/// [`k_shift_as`] on the host: rotate each `head_dim`-wide vector in `x` by `delta`
/// positions, as `rotation` turned it. Any trailing elements short of a whole vector are
/// left alone.
pub fn k_shift_host_as(x: &mut [f32], head_dim: usize, delta: i64, rotation: KeyRotation) {
    if head_dim < 2 {
        return;
    }
    let half = head_dim / 2;
    let (cos, sin) = rotation.shift_angles(delta, head_dim);
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match rotation.pairs {
                RotaryPairs::Adjacent => (2 * i, 2 * i + 1),
                RotaryPairs::Halves => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x0 * sin[i] + x1 * cos[i];
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
        let data: Vec<f32> = (0..2 * 3 * 8).map(|i| (i as f32 * 0.37).sin()).collect();
        for pairs in [RotaryPairs::Adjacent, RotaryPairs::Halves] {
            let rotation = KeyRotation::new(pairs, 500.0);
            let t = Tensor::<4>::from_data(TensorData::new(data.clone(), [1, 2, 3, 8]), &device);
            let out: Vec<f32> = k_shift_as(t, -5, rotation.clone())
                .into_data()
                .try_into_vec()
                .unwrap();
            let mut host = data.clone();
            k_shift_host_as(&mut host, 8, -5, rotation);
            for (a, b) in out.iter().zip(&host) {
                assert!((a - b).abs() < 1e-6, "{pairs:?}");
            }
        }
    }

    /// A halves rotation is the adjacent one on the features reordered so that each pair is
    /// adjacent (`(i, i + d/2)` to `(2i, 2i + 1)`), and it turns each pair by its own angle.
    #[test]
    fn halves_turn_the_pairs_of_halves() {
        let d = 8;
        let x: Vec<f32> = (0..d).map(|i| (i as f32 * 0.9).cos()).collect();
        let mut halves = x.clone();
        k_shift_host_as(
            &mut halves,
            d,
            3,
            KeyRotation::new(RotaryPairs::Halves, 100.0),
        );
        let interleave =
            |v: &[f32]| -> Vec<f32> { (0..d / 2).flat_map(|i| [v[i], v[i + d / 2]]).collect() };
        let mut adjacent = interleave(&x);
        k_shift_host_as(&mut adjacent, d, 3, KeyRotation::adjacent(100.0));
        assert_eq!(interleave(&halves), adjacent);
        assert_ne!(halves, x);
    }
}
