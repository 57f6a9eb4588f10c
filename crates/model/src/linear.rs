//! The one seam through which every weight matrix of the transformer is applied.
//!
//! A [`QLinear`] holds a weight in the layout GGUF stores it (`[out, in]`, rows are output
//! features), in one of two forms (see [`LinearWeight`]):
//! - **dense**: an `f32` Burn tensor multiplied with Burn's `matmul` (any device: the form
//!   for GPUs, and the fallback);
//! - **quantized**: a [`QuantMatrix`] of GGUF blocks, multiplied on the host by the fused
//!   dequantise-and-multiply kernels of [`kindle_kernels`] (CPU devices).
//!
//! The same type also serves as the token embedding ([`QLinear::embed`]), so a tied output
//! head and the embedding lookup share one (quantized) table.

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::{DType, TensorData};

use kindle_kernels::{Kernels, QuantMatrix};

/// A linear layer `y = x W^T`, with a bias `y = x W^T + b` if one is attached
/// ([`with_bias`](Self::with_bias): Qwen2's q/k/v projections).
///
/// # Shapes
/// - weight: `[d_out, d_in]`
/// - bias: `[d_out]`
/// - input: `[batch, seq, d_in]`
/// - output: `[batch, seq, d_out]`
#[derive(Module, Debug)]
pub struct QLinear {
    /// The weight as an `f32` tensor `[d_out, d_in]`, when dense.
    dense: Option<Param<Tensor<2>>>,
    /// The weight in its GGUF encoding, when quantized.
    #[module(skip)]
    quantized: Option<QuantMatrix>,
    /// The bias, if any, `f32` on the model's device.
    bias: Option<Param<Tensor<1>>>,
    /// The bias on the host (CPU devices), for the host executor.
    #[module(skip)]
    host_bias: Option<Vec<f32>>,
}

/// The form a [`QLinear`]'s weight takes.
#[derive(Debug, Clone)]
pub enum LinearWeight<'a> {
    /// `f32` on the model's device, `[d_out, d_in]`.
    Dense(&'a Param<Tensor<2>>),
    /// GGUF blocks on the host, multiplied by the CPU kernels.
    Quantized(&'a QuantMatrix),
}

impl QLinear {
    /// A dense layer from a `[d_out, d_in]` weight tensor.
    pub fn new(weight: Tensor<2>) -> Self {
        QLinear {
            dense: Some(Param::from_tensor(weight)),
            quantized: None,
            bias: None,
            host_bias: None,
        }
    }

    /// A layer applying `matrix` (`rows` = `d_out`) with the quantized CPU kernels.
    pub fn quantized(matrix: QuantMatrix) -> Self {
        QLinear {
            dense: None,
            quantized: Some(matrix),
            bias: None,
            host_bias: None,
        }
    }

    /// The layer with `bias` (`[d_out]`, `f32`) added to its output.
    pub fn with_bias(self, bias: Tensor<1>) -> Self {
        let host_bias = if crate::device::is_host_device(&bias.device()) {
            bias.clone()
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .ok()
        } else {
            None
        };
        QLinear {
            bias: Some(Param::from_tensor(bias)),
            host_bias,
            ..self
        }
    }

    /// The bias on the host, if the layer has one and it lives on a CPU device.
    pub(crate) fn host_bias(&self) -> Option<&[f32]> {
        self.host_bias.as_deref()
    }

    /// Its number of parameters: the weight's and the bias's.
    pub fn parameter_count(&self) -> u64 {
        let bias = self.bias.as_ref().map_or(0, |b| b.dims()[0]);
        (self.d_out() * self.d_in() + bias) as u64
    }

    /// The bytes of its weight as the products read them: the GGUF blocks of a quantized
    /// weight (the file's bytes), four per value of an `f32` one.
    pub fn weight_bytes(&self) -> u64 {
        match self.weight() {
            LinearWeight::Quantized(q) => q.n_bytes() as u64,
            LinearWeight::Dense(w) => (w.dims()[0] * w.dims()[1] * 4) as u64,
        }
    }

    /// Whether the layer has no bias or has one the host can read.
    pub(crate) fn bias_on_host_if_any(&self) -> bool {
        self.bias.is_none() || self.host_bias.is_some()
    }

    /// The weight.
    pub fn weight(&self) -> LinearWeight<'_> {
        match (&self.quantized, &self.dense) {
            (Some(q), _) => LinearWeight::Quantized(q),
            (None, Some(d)) => LinearWeight::Dense(d),
            (None, None) => unreachable!("a QLinear is built with one form of weight"),
        }
    }

    /// Output features.
    pub fn d_out(&self) -> usize {
        match self.weight() {
            LinearWeight::Dense(w) => w.dims()[0],
            LinearWeight::Quantized(q) => q.rows(),
        }
    }

    /// Input features.
    pub fn d_in(&self) -> usize {
        match self.weight() {
            LinearWeight::Dense(w) => w.dims()[1],
            LinearWeight::Quantized(q) => q.cols(),
        }
    }

    /// Apply the layer; a quantized weight is multiplied by `kernels` (a dense one ignores
    /// them).
    pub fn forward(&self, input: Tensor<3>, kernels: &Kernels) -> Tensor<3> {
        let product = self.product(input, kernels);
        match &self.bias {
            Some(bias) => product + bias.val().unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0),
            None => product,
        }
    }

    /// `input W^T`.
    fn product(&self, input: Tensor<3>, kernels: &Kernels) -> Tensor<3> {
        match self.weight() {
            LinearWeight::Dense(w) => {
                let w = w.val();
                match w.dtype() {
                    DType::F32 => matmul_transposed(input, w),
                    // Half-precision weights: the product runs in their type, the result
                    // goes back to f32 for the residual stream.
                    dtype => matmul_transposed(input.cast(dtype), w).cast(DType::F32),
                }
            }
            LinearWeight::Quantized(q)
                if input.dims()[0] * input.dims()[1] >= DENSE_PREFILL_ROWS
                    && !q.prefers_batched_kernel() =>
            {
                // Many activation rows (prefill) and no faster batched kernel for this weight:
                // the row-at-a-time kernels are compute-bound at about decode speed per row,
                // while dequantising once and using Burn's register-blocked f32 matmul is
                // several times faster.
                let device = input.device();
                let w = Tensor::from_data(
                    TensorData::new(q.dequantize_all(kernels), [q.rows(), q.cols()]),
                    &device,
                );
                matmul_transposed(input, w)
            }
            LinearWeight::Quantized(q) => {
                let [b, t, d_in] = input.dims();
                let device = input.device();
                let x = host_f32(input);
                debug_assert_eq!(x.len(), b * t * d_in);
                let mut out = vec![0f32; b * t * q.rows()];
                // The kernels' format for every row count, as the host executor: a prefill
                // reaches here only where the batched kernels run (the dense path above is
                // always f32).
                q.matmul(&x, b * t, &mut out, kernels);
                Tensor::from_data(TensorData::new(out, [b, t, q.rows()]), &device)
            }
        }
    }

    /// Rows `ids` of the weight, as a `[1, ids.len(), d_in]` tensor on `device`: the lookup
    /// of a token embedding stored as `[vocab, d_model]`. Ids must be below
    /// [`d_out`](Self::d_out) (the caller checks them).
    pub fn embed(&self, ids: &[u32], device: &Device) -> Tensor<3> {
        let t = ids.len();
        match self.weight() {
            LinearWeight::Dense(w) => {
                let ids: Vec<i64> = ids.iter().map(|&id| i64::from(id)).collect();
                let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t]), device);
                burn::tensor::module::embedding(w.val(), ids).cast(DType::F32)
            }
            LinearWeight::Quantized(q) => {
                let d = q.cols();
                let mut out = vec![0f32; t * d];
                for (row, &id) in out.chunks_exact_mut(d).zip(ids) {
                    q.dequantize_row(id as usize, row);
                }
                Tensor::from_data(TensorData::new(out, [1, t, d]), device)
            }
        }
    }
}

/// From this many activation rows on a quantized layer without a batched kernel
/// ([`QuantMatrix::prefers_batched_kernel`]: no SIMD) dequantises its weight for the call and
/// multiplies with Burn's `f32` matmul (the SIMD kernels run their prefill product from
/// [`PREFILL_ROWS`](kindle_kernels::PREFILL_ROWS) rows on).
pub const DENSE_PREFILL_ROWS: usize = 16;

/// The values of `tensor` on the host as `f32`, in row-major order.
fn host_f32<const D: usize>(tensor: Tensor<D>) -> Vec<f32> {
    tensor
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("converted to f32")
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
