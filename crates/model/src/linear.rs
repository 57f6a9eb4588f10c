//! The one seam through which every weight matrix of the transformer is applied.
//!
//! A [`QLinear`] holds a weight in the layout GGUF stores it (`[out, in]`, rows are output
//! features), in one of two forms (see [`LinearWeight`]):
//! - **dense**: an `f32` (or half-precision) Burn tensor multiplied with Burn's `matmul` (any
//!   device: the form for GPUs, and the fallback). On a GPU a matrix larger than
//!   [`DENSE_BLOCK_BYTES`] is held as blocks of rows, since a GPU API bounds the size of one
//!   buffer (Gemma-3's 262,144-row embedding is 671 MB in `f32`); the blocks' products are
//!   joined along the output features;
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
    /// The weight as blocks of rows `[rows, d_in]` that together make `[d_out, d_in]`, when
    /// dense (one block unless the matrix is larger than [`DENSE_BLOCK_BYTES`] on a GPU).
    dense: Vec<Param<Tensor<2>>>,
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
    /// On the model's device, `[d_out, d_in]` as one or more blocks of consecutive rows.
    Dense(&'a [Param<Tensor<2>>]),
    /// GGUF blocks on the host, multiplied by the CPU kernels.
    Quantized(&'a QuantMatrix),
}

impl QLinear {
    /// A dense layer from a `[d_out, d_in]` weight tensor, held as one block.
    pub fn new(weight: Tensor<2>) -> Self {
        QLinear {
            dense: vec![Param::from_tensor(weight)],
            quantized: None,
            bias: None,
            host_bias: None,
        }
    }

    /// A dense layer from `data`, a `[d_out, d_in]` matrix on the host, put on `device` in
    /// `dtype`: on a GPU in blocks of at most [`DENSE_BLOCK_BYTES`] (whole rows), elsewhere
    /// as one tensor.
    pub fn dense_from_data(data: TensorData, device: &Device, dtype: DType) -> Self {
        let per_block = dense_block_rows(data.shape()[1], dtype.size(), device);
        Self::dense_in_blocks(data, device, dtype, per_block)
    }

    /// As [`dense_from_data`](Self::dense_from_data), `per_block` rows a block.
    fn dense_in_blocks(data: TensorData, device: &Device, dtype: DType, per_block: usize) -> Self {
        let [rows, cols] = [data.shape()[0], data.shape()[1]];
        let data = data.convert_dtype(dtype);
        if rows <= per_block {
            return Self::new(Tensor::from_data(data, (device, dtype)));
        }
        let bytes = data.as_bytes();
        let row_bytes = cols * dtype.size();
        let dense = (0..rows)
            .step_by(per_block)
            .map(|start| {
                let n = per_block.min(rows - start);
                let part = &bytes[start * row_bytes..(start + n) * row_bytes];
                let block = TensorData::from_bytes_vec(part.to_vec(), [n, cols], dtype);
                Param::from_tensor(Tensor::from_data(block, (device, dtype)))
            })
            .collect();
        QLinear {
            dense,
            quantized: None,
            bias: None,
            host_bias: None,
        }
    }

    /// A layer applying `matrix` (`rows` = `d_out`) with the quantized CPU kernels.
    pub fn quantized(matrix: QuantMatrix) -> Self {
        QLinear {
            dense: Vec::new(),
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
            LinearWeight::Dense(blocks) => blocks
                .iter()
                .map(|w| (w.dims()[0] * w.dims()[1] * w.val().dtype().size()) as u64)
                .sum(),
        }
    }

    /// Whether the layer has no bias or has one the host can read.
    pub(crate) fn bias_on_host_if_any(&self) -> bool {
        self.bias.is_none() || self.host_bias.is_some()
    }

    /// The weight.
    pub fn weight(&self) -> LinearWeight<'_> {
        match &self.quantized {
            Some(q) => LinearWeight::Quantized(q),
            None => LinearWeight::Dense(&self.dense),
        }
    }

    /// Output features.
    pub fn d_out(&self) -> usize {
        match self.weight() {
            LinearWeight::Dense(blocks) => blocks.iter().map(|w| w.dims()[0]).sum(),
            LinearWeight::Quantized(q) => q.rows(),
        }
    }

    /// Input features.
    pub fn d_in(&self) -> usize {
        match self.weight() {
            LinearWeight::Dense(blocks) => blocks[0].dims()[1],
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
            LinearWeight::Dense(blocks) => {
                // Half-precision weights: the product runs in their type, the result goes back
                // to f32 for the residual stream.
                let dtype = blocks[0].val().dtype();
                let input = if dtype == DType::F32 {
                    input
                } else {
                    input.cast(dtype)
                };
                let product = match blocks {
                    [w] => matmul_transposed(input, w.val()),
                    _ => Tensor::cat(
                        blocks
                            .iter()
                            .map(|w| matmul_transposed(input.clone(), w.val()))
                            .collect(),
                        2,
                    ),
                };
                if dtype == DType::F32 {
                    product
                } else {
                    product.cast(DType::F32)
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
            LinearWeight::Dense([w]) => {
                let ids: Vec<i64> = ids.iter().map(|&id| i64::from(id)).collect();
                let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t]), device);
                burn::tensor::module::embedding(w.val(), ids).cast(DType::F32)
            }
            LinearWeight::Dense(blocks) => embed_from_blocks(blocks, ids, device),
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

/// The rows `ids` of a matrix held as `blocks` of consecutive rows, `[1, ids.len(), d_in]`:
/// each block looks up the ids that fall in it, and the parts are put back in the ids' order.
fn embed_from_blocks(blocks: &[Param<Tensor<2>>], ids: &[u32], device: &Device) -> Tensor<3> {
    let mut parts = Vec::new();
    // Where each id's row lands among the parts, joined in block order.
    let mut order = vec![0i64; ids.len()];
    let (mut first_row, mut found) = (0usize, 0usize);
    for block in blocks {
        let rows = block.dims()[0];
        let mut local = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if let Some(row) = (id as usize).checked_sub(first_row).filter(|&r| r < rows) {
                order[i] = (found + local.len()) as i64;
                local.push(row as i64);
            }
        }
        if !local.is_empty() {
            let n = local.len();
            found += n;
            let local = Tensor::<2, Int>::from_data(TensorData::new(local, [1, n]), device);
            parts.push(burn::tensor::module::embedding(block.val(), local));
        }
        first_row += rows;
    }
    let joined = Tensor::cat(parts, 1).cast(DType::F32);
    if order.iter().enumerate().all(|(i, &o)| o == i as i64) {
        return joined;
    }
    let order = Tensor::<1, Int>::from_data(TensorData::new(order, [ids.len()]), device);
    joined.select(1, order)
}

/// The most bytes one block of a dense weight takes on a GPU: a GPU API bounds one buffer
/// (wgpu's default for a storage binding is 128 MiB, and Mesa's lavapipe refuses Gemma-3's
/// 671 MB embedding), so larger matrices are held as several blocks of rows.
pub const DENSE_BLOCK_BYTES: usize = 64 << 20;

/// Rows per block of a dense `cols`-wide weight of `elem` bytes a value on `device`: every
/// row on a CPU device, else as many as [`DENSE_BLOCK_BYTES`] holds (at least one).
fn dense_block_rows(cols: usize, elem: usize, device: &Device) -> usize {
    if crate::device::is_host_device(device) {
        usize::MAX
    } else {
        (DENSE_BLOCK_BYTES / (cols * elem).max(1)).max(1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `rows x cols` matrix of distinct values.
    fn matrix(rows: usize, cols: usize) -> TensorData {
        let values: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        TensorData::new(values, [rows, cols])
    }

    fn host(tensor: Tensor<3>) -> Vec<f32> {
        host_f32(tensor)
    }

    #[test]
    fn a_matrix_in_blocks_of_rows_looks_up_and_multiplies_as_one_block() {
        let device = Device::flex();
        let kernels = Kernels::default();
        let whole = QLinear::dense_in_blocks(matrix(10, 4), &device, DType::F32, usize::MAX);
        let blocks = QLinear::dense_in_blocks(matrix(10, 4), &device, DType::F32, 3);
        assert!(matches!(whole.weight(), LinearWeight::Dense(b) if b.len() == 1));
        assert!(matches!(blocks.weight(), LinearWeight::Dense(b) if b.len() == 4));
        assert_eq!((blocks.d_out(), blocks.d_in()), (10, 4));
        assert_eq!(blocks.weight_bytes(), whole.weight_bytes());
        // Out of order, repeated, several in one block, none in another (rows 6..9).
        for ids in [vec![9, 0, 4, 4, 3, 8], vec![0, 1, 2], vec![5], vec![9, 3]] {
            assert_eq!(
                host(blocks.embed(&ids, &device)),
                host(whole.embed(&ids, &device)),
                "ids {ids:?}"
            );
        }
        let input = Tensor::<3>::from_data(
            TensorData::new(matrix(6, 4).try_to_vec::<f32>().unwrap(), [1, 6, 4]),
            &device,
        );
        assert_eq!(
            host(blocks.forward(input.clone(), &kernels)),
            host(whole.forward(input, &kernels))
        );
    }

    #[test]
    fn only_a_gpu_splits_a_dense_matrix() {
        assert_eq!(dense_block_rows(640, 4, &Device::flex()), usize::MAX);
    }
}
