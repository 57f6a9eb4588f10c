//! The Burn executor of the recipe: every op a Burn tensor op on the model's device (any
//! backend, GPUs included). Activations are `[1, rows, width]` tensors.

use burn::prelude::*;
use burn::tensor::TensorData;
use burn::tensor::activation::gelu_approximate;
use burn::tensor::module::attention as attention_op;
use burn::tensor::ops::AttentionModuleOptions;
use kindle_kernels::Kernels;

use super::recipe::{Attention, LayerOps, Pass};
use super::{AttentionShape, FfnActivation, Norm, RopeStyle, RopeTable};
use crate::error::ModelError;
use crate::linear::QLinear;

/// Runs the recipe with Burn tensor ops on `device`; quantized weights multiply with
/// `kernels`.
pub(super) struct BurnOps<'m> {
    kernels: &'m Kernels,
    device: Device,
    /// The pass's grouped attention masks, built once for every layer that has the same
    /// window and the same rows and keys ([`grouped_mask`]'s arguments, then the mask).
    masks: Vec<(MaskKey, Tensor<4, Bool>)>,
}

/// What a grouped attention mask depends on: the window, the grouped rows, the new rows `T`
/// and the keys `S`.
type MaskKey = (Option<usize>, usize, usize, usize);

impl<'m> BurnOps<'m> {
    /// An executor on `device` (one per pass).
    pub(super) fn new(kernels: &'m Kernels, device: Device) -> Self {
        BurnOps {
            kernels,
            device,
            masks: Vec::new(),
        }
    }
}

/// A `[1, rows, width]` tensor, or an empty buffer before the recipe first writes it.
#[derive(Default)]
pub(super) struct BurnAct(Option<Tensor<3>>);

impl BurnAct {
    /// The tensor (the recipe reads a buffer only after writing it).
    fn get(&self) -> &Tensor<3> {
        self.0
            .as_ref()
            .expect("the recipe writes a buffer before reading it")
    }

    /// The tensor, leaving the buffer empty (so that an op may reuse its memory).
    fn take(&mut self) -> Tensor<3> {
        self.0
            .take()
            .expect("the recipe writes a buffer before reading it")
    }

    /// The tensor, as the pass's result.
    pub(super) fn into_tensor(mut self) -> Tensor<3> {
        self.take()
    }
}

/// A pass's rotation table on the device, laid out like a head's pairs: `[1, rows, 1,
/// head_dim / 2, 2]` for adjacent pairs, `[1, rows, 1, 2, head_dim / 2]` for halves. `cos`
/// holds each pair's cosine twice; `sin` its sine negated for the pair's first feature, so
/// that a rotation is `x * cos + swapped(x) * sin` (four kernels on a GPU, where slicing the
/// pairs apart and joining them took ten).
pub(super) struct BurnRope {
    style: RopeStyle,
    cos: Tensor<5>,
    sin: Tensor<5>,
}

impl LayerOps for BurnOps<'_> {
    type Act = BurnAct;
    type Rope = BurnRope;

    fn embed(&mut self, table: &QLinear, ids: &[u32]) -> BurnAct {
        BurnAct(Some(table.embed(ids, &self.device)))
    }

    fn scale(&mut self, x: &mut BurnAct, factor: f32) {
        x.0 = Some(x.take().mul_scalar(factor));
    }

    fn rope_table(&mut self, table: RopeTable) -> BurnRope {
        let (style, rows, half) = (table.style(), table.rows(), table.half());
        let (cos, sin) = table.into_parts();
        // Per row, the pair layout: (c, c) and (-s, s) per pair, adjacent or in halves.
        let mut cos2 = Vec::with_capacity(2 * cos.len());
        let mut sin2 = Vec::with_capacity(2 * sin.len());
        for (c, s) in cos.chunks_exact(half).zip(sin.chunks_exact(half)) {
            match style {
                RopeStyle::Adjacent => {
                    for (&c, &s) in c.iter().zip(s) {
                        cos2.extend([c, c]);
                        sin2.extend([-s, s]);
                    }
                }
                RopeStyle::Halves => {
                    cos2.extend(c.iter().chain(c));
                    sin2.extend(s.iter().map(|&s| -s).chain(s.iter().copied()));
                }
            }
        }
        let shape = match style {
            RopeStyle::Adjacent => [1, rows, 1, half, 2],
            RopeStyle::Halves => [1, rows, 1, 2, half],
        };
        BurnRope {
            style,
            cos: Tensor::from_data(TensorData::new(cos2, shape), &self.device),
            sin: Tensor::from_data(TensorData::new(sin2, shape), &self.device),
        }
    }

    fn norm(&mut self, x: &BurnAct, norm: &Norm, out: &mut BurnAct) {
        out.0 = Some(norm.forward(x.get().clone()));
    }

    fn linear(&mut self, layer: &QLinear, x: &BurnAct, out: &mut BurnAct) {
        out.0 = Some(layer.forward(x.get().clone(), self.kernels));
    }

    /// Rotate the pairs of every head: adjacent `(2i, 2i+1)`, or halves `(i, i + half)`:
    /// `(x0 c - x1 s, x1 c + x0 s)`, as `x * cos + swapped(x) * sin` with the table's signs
    /// (the same products and sums, so the same bits).
    fn rope(&mut self, x: &mut BurnAct, rope: &BurnRope) {
        let input = x.take();
        let [b, t, width] = input.dims();
        // The axis that tells a pair's two features apart, and the view that has it.
        let (axis, pairs) = match rope.style {
            RopeStyle::Adjacent => {
                let half = rope.cos.dims()[3];
                (4, input.reshape([b, t, width / (2 * half), half, 2]))
            }
            RopeStyle::Halves => {
                let half = rope.cos.dims()[4];
                (3, input.reshape([b, t, width / (2 * half), 2, half]))
            }
        };
        let swapped = pairs.clone().flip([axis]);
        let rotated = pairs * rope.cos.clone() + swapped * rope.sin.clone();
        x.0 = Some(rotated.reshape([b, t, width]));
    }

    fn attend_with_cache(
        &mut self,
        pass: &mut Pass<'_, '_>,
        layer: usize,
        attention: Attention,
        [q, k, v]: [&BurnAct; 3],
        out: &mut BurnAct,
    ) -> Result<(), ModelError> {
        let shape = attention.shape;
        let [b, t, _] = q.get().dims();
        let AttentionShape {
            heads: h,
            kv_heads: hkv,
            head_dim: hd,
        } = shape;
        // `[1, heads, rows, head_dim]` views.
        let heads = |x: &BurnAct, n: usize| x.get().clone().reshape([b, t, n, hd]).swap_dims(1, 2);
        let (q, k, v) = (heads(q, h), heads(k, hkv), heads(v, hkv));
        let mut contexts = Vec::with_capacity(pass.seqs.len());
        for (seq, &(start, len)) in pass.seqs.iter_mut().zip(pass.spans) {
            let (keys, values) = seq.cache.update(
                layer,
                k.clone().narrow(2, start, len),
                v.clone().narrow(2, start, len),
            )?;
            let q = q.clone().narrow(2, start, len);
            contexts.push(attend(
                q,
                keys,
                values,
                attention,
                &mut self.masks,
                &self.device,
            ));
        }
        let context = match contexts.pop() {
            Some(only) if contexts.is_empty() => only,
            Some(last) => {
                contexts.push(last);
                Tensor::cat(contexts, 2)
            }
            None => return Err(ModelError::EmptyInput),
        };
        out.0 = Some(context.swap_dims(1, 2).reshape([b, t, shape.q_width()]));
        Ok(())
    }

    fn gated(&mut self, activation: FfnActivation, gate: &mut BurnAct, up: &BurnAct) {
        self.activate(activation, gate);
        gate.0 = Some(gate.take() * up.get().clone());
    }

    fn activate(&mut self, activation: FfnActivation, x: &mut BurnAct) {
        x.0 = Some(match activation {
            // `x / (1 + exp(-x))`, as the host executor computes it: four kernels on a GPU,
            // where Burn's `silu` (`x * exp(-log(1 + exp(-x)))`) takes seven.
            FfnActivation::Silu => {
                let x = x.take();
                x.clone() / x.neg().exp().add_scalar(1.0)
            }
            FfnActivation::GeluTanh => gelu_approximate(x.take()),
        });
    }

    fn add(&mut self, x: &mut BurnAct, y: &BurnAct) {
        x.0 = Some(x.take() + y.get().clone());
    }

    fn select_rows(&mut self, x: BurnAct, rows: &[usize], _width: usize) -> BurnAct {
        let x = x.into_tensor();
        let picked = rows.iter().map(|&r| x.clone().narrow(1, r, 1)).collect();
        BurnAct(Some(Tensor::cat(picked, 1)))
    }
}

/// Causal grouped-query attention of `q` (`[1, heads, T, head_dim]`) over `keys`/`values`
/// (`[1, kv_heads, S, head_dim]`, the last `T` of them new): `[1, heads, T, head_dim]`. A
/// local layer's queries see only their window: one query reads the last `window` keys, a
/// prefill masks the others. `masks` keeps the pass's masks for the layers after this one.
fn attend(
    q: Tensor<4>,
    keys: Tensor<4>,
    values: Tensor<4>,
    attention: Attention,
    masks: &mut Vec<(MaskKey, Tensor<4, Bool>)>,
    device: &Device,
) -> Tensor<4> {
    let [b, _, t, hd] = q.dims();
    let s = keys.dims()[2];
    let shape = attention.shape;
    let (h, hkv, group) = (shape.heads, shape.kv_heads, shape.group());
    let options = |is_causal| AttentionModuleOptions {
        scale: Some(f64::from(attention.scale)),
        softcap: None,
        is_causal,
    };
    if t == 1 {
        // One query per head: group the query heads by the KV head they read
        // (head h reads KV head h / group), so no key or value is copied.
        let first = attention.first_seen(s - 1);
        let (keys, values) = if first > 0 {
            (
                keys.narrow(2, first, s - first),
                values.narrow(2, first, s - first),
            )
        } else {
            (keys, values)
        };
        let q = q.reshape([b, hkv, group, hd]);
        decode_attention(q, keys, values, attention.scale).reshape([b, h, 1, hd])
    } else if group == 1 && attention.first_seen(s - 1) == 0 {
        // Every query head reads its own KV head, and nothing is out of a window: Burn's
        // causal attention as it is. Query `i` sits at position `s - t + i`.
        attention_op(q, keys, values, None, None, options(true))
    } else {
        // Several query heads per KV head (or a window): group the queries by the KV head
        // they read, `[1, kv_heads, group * T, head_dim]` (row `g * T + i` is query `i` of
        // head `kv * group + g`), so that no key or value is copied once per query head: the
        // copies were `heads x S x head_dim` floats each, a buffer past what a GPU allocates
        // at long contexts. The mask is built on the device from the rows' positions.
        let rows = group * t;
        let q = q.reshape([b, hkv, rows, hd]);
        let key = (attention.window, rows, t, s);
        let mask = match masks.iter().find(|(k, _)| *k == key) {
            Some((_, mask)) => mask.clone(),
            None => {
                let mask = grouped_mask(attention, rows, t, s, device);
                masks.push((key, mask.clone()));
                mask
            }
        };
        let mask = mask.expand([b, hkv, rows, s]);
        attention_op(q, keys, values, Some(mask), None, options(false)).reshape([b, h, t, hd])
    }
}

/// What each of `rows` grouped query rows (row `r` is query `r % t`, at position
/// `s - t + r % t`) may not see of `s` keys: the keys after its position and, in a local
/// layer, those before its window (see [`Attention::first_seen`]). `[1, 1, rows, s]`, built
/// on the device (index ranges, a remainder and comparisons: five kernels, eight with a
/// window) instead of uploaded.
fn grouped_mask(
    attention: Attention,
    rows: usize,
    t: usize,
    s: usize,
    device: &Device,
) -> Tensor<4, Bool> {
    // A tensor dimension is far below `i64::MAX`.
    let int = |n: usize| n as i64;
    let positions = Tensor::<1, Int>::arange(0..int(rows), device)
        .remainder_scalar(int(t))
        .add_scalar(int(s - t))
        .reshape([rows, 1])
        .expand([rows, s]);
    let keys = Tensor::<1, Int>::arange(0..int(s), device)
        .reshape([1, s])
        .expand([rows, s]);
    let mut mask = keys.clone().greater(positions.clone());
    if let Some(window) = attention.window {
        // `j < first_seen(p) = p + 1 - window` is `j + window <= p` (never when `p < window`).
        mask = mask.bool_or(keys.add_scalar(int(window)).lower_equal(positions));
    }
    mask.reshape([1, 1, rows, s])
}

/// One query row per head against every key it may see: Burn's attention fallback without
/// its two guards for fully masked rows (`clamp_min` of the row maximum and of the sum: four
/// kernels on a GPU), which cannot fire here (nothing is masked, and the sum of the
/// exponentials is at least the maximum's 1). The same operations in the same order
/// otherwise, so the same bits: `q k^T * scale`, softmax over the keys, times `v`.
fn decode_attention(q: Tensor<4>, keys: Tensor<4>, values: Tensor<4>, scale: f32) -> Tensor<4> {
    let scores = q.matmul(keys.transpose()).mul_scalar(f64::from(scale));
    let max = scores.clone().max_dim(3);
    let numerator = (scores - max).exp();
    let sum = numerator.clone().sum_dim(3);
    (numerator / sum).matmul(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attention(heads: usize, kv_heads: usize, window: Option<usize>) -> Attention {
        Attention {
            shape: AttentionShape {
                heads,
                kv_heads,
                head_dim: 8,
            },
            scale: 0.35,
            window,
        }
    }

    /// Pseudo-random values in `[-1, 1)`, the same for the same seed.
    fn tensor(shape: [usize; 4], seed: u32, device: &Device) -> Tensor<4> {
        let n = shape.iter().product::<usize>();
        let values: Vec<f32> = (0..n as u32)
            .map(|i| {
                let x = (i ^ seed).wrapping_mul(2_654_435_761).rotate_left(13);
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        Tensor::from_data(TensorData::new(values, shape), device)
    }

    #[test]
    fn grouped_masks_hide_what_each_query_may_not_see() {
        let device = Device::flex();
        for window in [None, Some(1), Some(3), Some(40)] {
            for (group, t, s) in [(1, 5, 5), (3, 4, 9), (4, 1, 6), (2, 7, 7)] {
                let a = attention(group, 1, window);
                let mask = grouped_mask(a, group * t, t, s, &device);
                let got: Vec<bool> = mask.into_data().try_to_vec().unwrap();
                let mut want = Vec::new();
                for r in 0..group * t {
                    let pos = s - t + r % t;
                    want.extend((0..s).map(|j| j < a.first_seen(pos) || j > pos));
                }
                assert_eq!(got, want, "window {window:?}, group {group}, T {t}, S {s}");
            }
        }
    }

    /// The grouped prefill against attention with every KV head copied to its query heads
    /// and the mask built on the host (the formulation it replaced), on flex: the same bits.
    #[test]
    fn grouped_attention_is_attention_with_copied_keys() {
        let device = Device::flex();
        for (heads, kv_heads) in [(4, 2), (9, 3), (4, 1), (2, 2)] {
            for window in [None, Some(3)] {
                let (t, s, hd) = (5, 8, 8);
                let a = attention(heads, kv_heads, window);
                let q = tensor([1, heads, t, hd], 1, &device);
                let keys = tensor([1, kv_heads, s, hd], 2, &device);
                let values = tensor([1, kv_heads, s, hd], 3, &device);
                let mut masks = Vec::new();
                let got = attend(
                    q.clone(),
                    keys.clone(),
                    values.clone(),
                    a,
                    &mut masks,
                    &device,
                );
                let group = heads / kv_heads;
                let copied = |x: Tensor<4>| {
                    x.unsqueeze_dim::<5>(2)
                        .expand([1, kv_heads, group, s, hd])
                        .reshape([1, heads, s, hd])
                };
                let mut masked = Vec::new();
                for i in 0..t {
                    let pos = s - t + i;
                    masked.extend((0..s).map(|j| j < a.first_seen(pos) || j > pos));
                }
                let mask =
                    Tensor::<4, Bool>::from_data(TensorData::new(masked, [1, 1, t, s]), &device)
                        .expand([1, heads, t, s]);
                let options = AttentionModuleOptions {
                    scale: Some(f64::from(a.scale)),
                    softcap: None,
                    is_causal: false,
                };
                let want = attention_op(q, copied(keys), copied(values), Some(mask), None, options);
                let (got, want): (Vec<f32>, Vec<f32>) = (
                    got.into_data().try_to_vec().unwrap(),
                    want.into_data().try_to_vec().unwrap(),
                );
                assert_eq!(
                    got, want,
                    "{heads} heads, {kv_heads} KV heads, window {window:?}"
                );
            }
        }
    }
}
