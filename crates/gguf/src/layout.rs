//! The layout facts every part of the crate shares: the alignment rule of the data section and
//! where a tensor's data lies ([`TensorInfo`]).

use crate::quant::GgmlType;

/// The metadata key giving the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The alignment used when a file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// The largest alignment kindle accepts (2^24).
pub const MAX_ALIGNMENT: u32 = 1 << 24;

/// Where a tensor's data lies and how to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` (ne0) is the fastest-varying one, the row length.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dimensions; saturates for shapes a validated file
    /// never has).
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Number of bytes of data (saturates for shapes a validated file never has).
    pub fn n_bytes(&self) -> u64 {
        let block = self.ty.block_size() as u64;
        let blocks = self.n_elements().checked_div(block).unwrap_or(0);
        blocks.saturating_mul(self.ty.type_size() as u64)
    }

    /// Row length: `ne0`, the number of values in one row.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// Number of rows: product of all dimensions but the first (1 for a vector).
    pub fn n_rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// `(rows, cols)` of the tensor seen as a matrix of rows of `ne0` values.
    pub fn shape_rows_cols(&self) -> (u64, u64) {
        (self.n_rows(), self.row_len())
    }

    /// The shape in row-major order (slowest-varying first, as Burn and NumPy write it): the
    /// reverse of [`TensorInfo::dims`].
    pub fn shape(&self) -> Vec<usize> {
        self.dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect()
    }
}
