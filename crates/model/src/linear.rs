//! The one seam through which every weight matrix of the transformer is applied.
//!
//! A [`QLinear`] holds the weight in the layout GGUF stores it (`[out, in]`, rows are output
//! features). Today the weight is dequantised to `f32` at load and multiplied with Burn's
//! `matmul`; faster kernels that read quantized blocks directly slot in here without touching
//! the rest of the model.

use burn::module::Param;
use burn::prelude::*;

/// A bias-free linear layer `y = x W^T`.
///
/// # Shapes
/// - weight: `[d_out, d_in]`
/// - input: `[batch, seq, d_in]`
/// - output: `[batch, seq, d_out]`
#[derive(Module, Debug)]
pub struct QLinear {
    /// The weight, `[d_out, d_in]`.
    pub weight: Param<Tensor<2>>,
}

impl QLinear {
    /// A layer from a `[d_out, d_in]` weight tensor.
    pub fn new(weight: Tensor<2>) -> Self {
        QLinear {
            weight: Param::from_tensor(weight),
        }
    }

    /// Output features.
    pub fn d_out(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Input features.
    pub fn d_in(&self) -> usize {
        self.weight.dims()[1]
    }

    /// Apply the layer.
    pub fn forward(&self, input: Tensor<3>) -> Tensor<3> {
        matmul_transposed(input, self.weight.val())
    }
}

/// `input W^T` for a `[d_out, d_in]` weight, computed as one 2-D product: Burn's flex backend
/// multiplies a transposed 2-D view at full speed, while a broadcast 3-D one runs about 10x
/// slower.
pub fn matmul_transposed(input: Tensor<3>, weight: Tensor<2>) -> Tensor<3> {
    let [b, t, d_in] = input.dims();
    let d_out = weight.dims()[0];
    input
        .reshape([b * t, d_in])
        .matmul(weight.transpose())
        .reshape([b, t, d_out])
}
