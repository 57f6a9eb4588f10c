//! CPU matrix kernels over GGUF quantized weights.
//!
//! A [`QuantMatrix`] is a weight of `rows` output features, each row `cols` input values stored
//! as whole GGUF blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`,
//! `Q6_K`, `IQ4_NL`, `IQ4_XS`, the grid quants `IQ1_S` ... `IQ3_S`, or `F32`/`F16`/`BF16`).
//! [`QuantMatrix::matmul`] computes `y[m, rows] = x[m, cols] W^T` without ever materialising
//! `W` in `f32`: decode (`m = 1`) is a matrix-vector product bound by how fast the weight
//! bytes stream from memory (or, for the `f32` kernels, by the vector pipes), so reading
//! 4.5-bit blocks instead of 32-bit floats is the win.
//!
//! `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0` matrices are repacked once at load into groups of
//! eight rows interleaved block column by block column (see `packed.rs`): the same bytes, moved, so
//! that one load gives eight rows' `f16` scales and eight rows' dot products land in the lanes of
//! one vector. `Q4_K` and `Q5_K` are repacked into the `Q4_1` and `Q5_1` forms (each 32-value
//! sub-block a block column, its scale and min unpacked to bytes, 2% larger than the file) and run
//! those kernels. `Q6_K` is repacked into a group form of its own (the eight rows in the lanes
//! of a vector, its 16-value scales per row; the same bytes) read by its group kernels, and
//! `Q3_K` and `Q2_K` into the same shape with narrower quants (`packed_low_k.rs`; `Q3_K` 4%
//! larger than the file, its scales as bytes), read by the same kernels. `IQ4_NL` and `IQ4_XS`
//! share a form of their own with `f32` block scales (`packed_iq4.rs`), whose kernels look each
//! 4-bit index up in the level table with one byte shuffle (`x86_iq4.rs`). The grid quants
//! stay as in the file, their grid lookups done by `kindle_gguf`'s walks (`grid.rs`). The
//! file's pages are then released, so resident memory stays near the file size. `F32`, `F16`
//! and `BF16` are read in place from the memory-mapped file, in tiles of a few rows.
//!
//! Two activation formats, chosen by [`ActivationFormat`]:
//! - [`ActivationFormat::F32`] (the default): each weight block is dequantised in registers
//!   and multiplied with the `f32` activations (FMA).
//! - [`ActivationFormat::Int8`] (llama.cpp's scheme): each activation row is quantized to 8
//!   bits per 32-value block with an `f32` scale, and a weight block times an activation
//!   block is an integer dot product (AVX-512 VNNI or AVX-VNNI `vpdpbusd`, or AVX2 `maddubs`),
//!   scaled once per block. Used for `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0` and (with AVX2)
//!   `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`, `Q6_K`, `IQ4_NL`, `IQ4_XS` and the grid quants.
//!
//! Kernels are chosen at run time: AVX-512 (`f32` group kernels), AVX-VNNI, AVX2 + FMA +
//! F16C, or portable Rust. The work is split over output rows between the threads of a small
//! persistent pool. The activation format and the thread count are not process-wide: a
//! [`Kernels`] handle (made from [`KernelOptions`]) carries them, and every product is given
//! one, so two models can run with different settings. For `1 < m < 32` a group kernel decodes
//! each weight block once for up to eight activation rows, with the same arithmetic per output
//! as for `m = 1`: a row's result does not depend on the batch it was computed in (a
//! speculative verification, a batch of decode steps).
//!
//! From 32 rows on (a prompt), `f32` products run as a register-blocked matrix multiply over
//! weights dequantised a few rows at a time (`gemm.rs`): every output an FMA chain over the
//! inner dimension in order, the same bits in any prefill of 32 rows or more, whatever the
//! SIMD level or thread count, but not the decode kernels' bits (they sum a block at a time).
//!
//! ```
//! use kindle_kernels::{KernelOptions, Kernels, QuantMatrix, WeightBytes};
//! use kindle_gguf::quant::GgmlType;
//!
//! // A 2 x 32 Q8_0 matrix: each row is one block (f16 scale 1.0, then 32 signed quants).
//! let mut bytes = Vec::new();
//! for row in 0..2i8 {
//!     bytes.extend_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
//!     bytes.extend((0..32).map(|_| (row + 1) as u8));
//! }
//! let w = QuantMatrix::new(GgmlType::Q8_0, 2, 32, WeightBytes::owned(bytes)).unwrap();
//! let x = vec![0.5f32; 32];
//! let mut y = vec![0.0; 2];
//! let kernels = Kernels::new(KernelOptions::threads(1));
//! w.matmul(&x, 1, &mut y, &kernels);
//! assert!((y[0] - 16.0).abs() < 0.1 && (y[1] - 32.0).abs() < 0.2);
//! ```

mod aligned;
mod arena;
mod bandwidth;
mod block;
#[cfg(target_arch = "x86_64")]
mod columns;
mod config;
mod copies;
mod dense;
mod dot;
mod gather;
mod gemm;
#[cfg(test)]
mod gemm_tests;
mod grid;
#[cfg(test)]
mod kq_tests;
mod packed;
mod packed_iq4;
mod packed_low_k;
mod pool;
#[cfg(target_arch = "x86_64")]
mod prefetch;
mod product;
pub mod profile;
mod q8;
mod scalar;
mod simd;
mod subset;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_512;
#[cfg(target_arch = "x86_64")]
mod x86_dense;
#[cfg(target_arch = "x86_64")]
mod x86_iq4;
#[cfg(target_arch = "x86_64")]
mod x86_q5;
#[cfg(target_arch = "x86_64")]
mod x86_q6;
#[cfg(target_arch = "x86_64")]
mod x86_q8_512;
#[cfg(target_arch = "x86_64")]
mod x86_shared;

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use kindle_gguf::quant::GgmlType;
use kindle_gguf::{GgufFile, SharedBytes, TensorInfo};
use pool::SyncPtr;

pub use bandwidth::read_bandwidth;
pub use config::{KernelOptions, Kernels, RowArithmetic};
pub use gather::{gatherings, set_gathering};
/// Activation rows from which an `f32` product runs as the prefill product (a register-blocked
/// multiply over dequantised weights) instead of the decode kernels: 32 (by default: see
/// [`RowArithmetic`]). Below it a row has the bits it has alone; from it on, the bits it has
/// in any such prefill.
pub use gemm::GEMM_MIN_ROWS as PREFILL_ROWS;
pub use pool::{MAX_THREADS, default_threads};

pub use q8::{BlockQ8, quantize_row_q8};
pub use simd::{cpu_runs_avx512, cpu_summary, simd_cap_name, simd_level};

/// Why a [`QuantMatrix`] could not be built.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// The element type has no kernel.
    #[error("no matrix kernel for tensor type {0:?}")]
    UnsupportedType(GgmlType),
    /// The row length is not a whole number of blocks.
    #[error("row length {cols} is not a multiple of the {ty:?} block size {block}")]
    PartialBlock {
        /// The element type.
        ty: GgmlType,
        /// The row length.
        cols: usize,
        /// The type's block size.
        block: usize,
    },
    /// The byte count does not match the shape.
    #[error("{ty:?} matrix of {rows} x {cols} needs {expected} bytes, got {got}")]
    SizeMismatch {
        /// The element type.
        ty: GgmlType,
        /// Rows (output features).
        rows: usize,
        /// Columns (input features).
        cols: usize,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
}

/// Which form the activations take in the inner product (see the module docs).
///
/// The default is `F32`: exact `f32` arithmetic on the dequantised weights. A row's product
/// has the same bits alone (decode) and with up to 31 others (a speculative verification, a
/// batch of decode steps), and the same bits in every prefill of 32 rows or more; between
/// the two it differs only by the order of the sums (a few units in the last place). `Int8`
/// is llama.cpp's scheme: faster, about as exact as llama.cpp; its prefill of weights
/// without an integer group kernel (`F16`, `BF16`, `F32`) runs the `f32` prefill product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActivationFormat {
    /// 8-bit activations per 32-value block, integer dot products (falls back to `F32` for
    /// weight types without an integer kernel).
    Int8,
    /// `f32` activations, weights dequantised in registers.
    #[default]
    F32,
}

/// The bytes of a weight: a range of a (memory-mapped) GGUF file or an owned buffer.
#[derive(Clone)]
pub enum WeightBytes {
    /// Borrowed from a GGUF file, which stays mapped while any of its ranges is alive.
    Mapped(SharedBytes),
    /// Owned by the matrix. (`Arc<Vec<u8>>`, not `Arc<[u8]>`: making the latter from a `Vec`
    /// copies it, and for the 30 MB tied head that copy was the load's peak of resident memory.)
    Owned(Arc<Vec<u8>>),
    /// Repacked at load (see [`QuantMatrix::new`]), in memory backed by huge pages.
    Packed(Arc<PackedBytes>),
}

/// A repacked matrix's bytes, in a region of memory backed by transparent huge pages where
/// the system grants them (a decode streams every weight once: 4 KiB pages cost a TLB miss
/// and a stop of the hardware prefetchers every 4 KiB).
pub struct PackedBytes(arena::Buffer);

impl WeightBytes {
    /// Owned bytes.
    pub fn owned(bytes: Vec<u8>) -> Self {
        WeightBytes::Owned(Arc::new(bytes))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            WeightBytes::Mapped(b) => b,
            WeightBytes::Owned(b) => b.as_slice(),
            WeightBytes::Packed(b) => b.0.as_slice(),
        }
    }
}

impl fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightBytes::Mapped(b) => write!(f, "Mapped({} bytes)", b.len()),
            WeightBytes::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
            WeightBytes::Packed(b) => write!(f, "Packed({} bytes)", b.0.as_slice().len()),
        }
    }
}

/// Whether `ty` has a matrix kernel: the dense types, every packed quantized one, and the grid
/// quants (`IQ2_XXS` ... `IQ1_M`: read as in the file, `grid.rs`).
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        || packed::packs(ty)
        || grid::grid(ty)
}

/// A weight matrix `[rows, cols]` (rows are output features) kept in its GGUF encoding.
#[derive(Clone, Debug)]
pub struct QuantMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: WeightBytes,
    /// For the quantized types: `data` is in the interleaved layout of [`packed`].
    packing: Option<packed::Packing>,
}

impl QuantMatrix {
    /// A matrix of `rows` rows of `cols` values of type `ty`, stored row after row in `data`.
    ///
    /// Quantized data is copied into the interleaved layout the group kernels read (and a
    /// mapped range's pages are released: it is not read again); `F32`, `F16` and `BF16` keep
    /// `data` as it is.
    pub fn new(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightBytes,
    ) -> Result<Self, KernelError> {
        if !supports(ty) {
            return Err(KernelError::UnsupportedType(ty));
        }
        let block = ty.block_size();
        if !cols.is_multiple_of(block) {
            return Err(KernelError::PartialBlock { ty, cols, block });
        }
        let row_bytes = cols / block * ty.type_size();
        let expected = row_bytes.saturating_mul(rows);
        let got = data.as_slice().len();
        if expected != got {
            return Err(KernelError::SizeMismatch {
                ty,
                rows,
                cols,
                expected,
                got,
            });
        }
        let (data, packing) = if packed::packs(ty) {
            // The file's copy is not read again: its pages are dropped as packing goes, so
            // resident memory stays near the file size, at load too.
            let bytes = packed::pack_releasing(ty, rows, cols, data.as_slice(), |range| {
                if let WeightBytes::Mapped(mapped) = &data {
                    mapped.release_range(range.start, range.len());
                }
            });
            (
                WeightBytes::Packed(Arc::new(PackedBytes(bytes))),
                Some(packed::Packing::new(ty, rows, cols)),
            )
        } else {
            (data, None)
        };
        Ok(QuantMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            data,
            packing,
        })
    }

    /// The 2-D tensor `info` of `file` (GGUF dims `[cols, rows]`): its bytes read in place,
    /// or for the quantized types repacked (see [`QuantMatrix::new`]).
    pub fn from_gguf(file: &GgufFile, info: &TensorInfo) -> Result<Self, KernelError> {
        let (rows, cols) = info.shape_rows_cols();
        let (rows, cols) = (
            usize::try_from(rows).unwrap_or(usize::MAX),
            usize::try_from(cols).unwrap_or(usize::MAX),
        );
        Self::new(
            info.ty,
            rows,
            cols,
            WeightBytes::Mapped(file.shared_tensor_bytes(info)),
        )
    }

    /// The element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of weight data (what one product reads).
    pub fn n_bytes(&self) -> usize {
        self.row_bytes * self.rows
    }

    /// Whether a product with many activation rows (prefill) runs in these kernels rather than
    /// as Burn's dense `f32` matmul of the dequantised weight: with any SIMD level (the
    /// prefill product needs AVX2 + FMA; the packed types' batched kernels any SIMD). They
    /// are faster at any thread count, and `-t` bounds them (Burn's matmul used every core
    /// whatever `-t` said).
    pub fn prefers_batched_kernel(&self) -> bool {
        dot::Simd::detect() != dot::Simd::Scalar
    }

    /// Dequantise row `r` into `out` (`cols` values).
    ///
    /// # Panics
    /// If `r >= rows` or `out.len() != cols`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        self.dequantize_row_with(r, out, &mut Vec::new());
    }

    /// [`Self::dequantize_row`] reusing `scratch` for a packed row's bytes.
    fn dequantize_row_with(&self, r: usize, out: &mut [f32], scratch: &mut Vec<u8>) {
        assert_eq!(out.len(), self.cols, "output row length");
        assert!(r < self.rows, "row {r} of {}", self.rows);
        dequantize_weights_row(&self.weights(), r, out, scratch);
    }

    /// The kernels' view of the weights.
    fn weights(&self) -> dot::Weights<'_> {
        dot::Weights {
            ty: self.ty,
            data: self.data.as_slice(),
            row_bytes: self.row_bytes,
            packing: self.packing,
        }
    }

    /// `out[m, rows] = x[m, cols] W^T` with `kernels`' activation format, on its threads.
    ///
    /// # Panics
    /// If `x.len() != m * cols` or `out.len() != m * rows`.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32], kernels: &Kernels) {
        self.matmul_with(x, m, out, kernels.activations(), kernels);
    }

    /// `out[m, rows] = x[m, cols] W^T` with activations in `format` (whatever `kernels`'
    /// format), on `kernels`' threads.
    ///
    /// # Panics
    /// If `x.len() != m * cols` or `out.len() != m * rows`.
    pub fn matmul_with(
        &self,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        format: ActivationFormat,
        kernels: &Kernels,
    ) {
        let kernel = dot::Kernel::select(self.ty, format);
        self.matmul_kernel(x, m, out, kernel, kernels);
    }

    /// The whole matrix dequantised to `f32`, `[rows, cols]` row-major (rows split over
    /// `kernels`' threads).
    pub fn dequantize_all(&self, kernels: &Kernels) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        let pool = kernels.pool();
        let threads = pool.threads();
        let per_task = self.rows.div_ceil(threads).max(1);
        let ptr = SyncPtr(out.as_mut_ptr());
        let work = |task: usize| {
            let start = task * per_task;
            let end = ((task + 1) * per_task).min(self.rows);
            let mut scratch = Vec::new();
            for r in start..end {
                // SAFETY: tasks cover disjoint rows of `out`, which outlives the call.
                let row = unsafe {
                    std::slice::from_raw_parts_mut(ptr.get().add(r * self.cols), self.cols)
                };
                self.dequantize_row_with(r, row, &mut scratch);
            }
        };
        pool.run(self.rows.div_ceil(per_task), &work);
        out
    }

    /// `out[m, rows] = x[m, cols] W^T` computed the slow, obvious way (dequantise each row,
    /// multiply in `f64`): the reference the kernels are tested against.
    pub fn matmul_reference(&self, x: &[f32], m: usize, out: &mut [f32]) {
        assert_eq!(x.len(), m * self.cols, "activation length");
        assert_eq!(out.len(), m * self.rows, "output length");
        let mut row = vec![0f32; self.cols];
        for r in 0..self.rows {
            self.dequantize_row(r, &mut row);
            for j in 0..m {
                let xs = &x[j * self.cols..(j + 1) * self.cols];
                let dot: f64 = row.iter().zip(xs).map(|(&w, &v)| w as f64 * v as f64).sum();
                out[j * self.rows + r] = dot as f32;
            }
        }
    }
}

/// The forms of a product's activations its kernel reads, made once per product (or once
/// for several products of one input, [`QuantMatrix::matmul_many`]); the permuted `f32`
/// form once per thread that runs a task of it (`copies.rs`).
struct Prepared {
    q8: Vec<BlockQ8>,
    q8_d: Vec<f32>,
    q8_s: Vec<f32>,
    q8_halves: Vec<i32>,
    /// Where the kernel reads permuted activations: the name under which each thread makes
    /// its own (`copies::with_local`).
    permute: Option<u64>,
    block_sums: Vec<f32>,
    panels: Vec<f32>,
    /// The `f32` activations on a cache line, where an `f32` kernel reads them and they did
    /// not start on one.
    aligned: aligned::Aligned,
}

impl Prepared {
    /// What `kernel` reads of `x` (rows of `cols` values), for a packed matrix or not.
    fn new(
        kernel: dot::Kernel,
        packed: bool,
        x: &[f32],
        cols: usize,
        arithmetic: RowArithmetic,
    ) -> Prepared {
        let m = x.len() / cols.max(1);
        if runs_gemm(kernel.int8(), packed, m, arithmetic) {
            // The prefill product reads the activations in its panels only.
            return Prepared {
                q8: Vec::new(),
                q8_d: Vec::new(),
                q8_s: Vec::new(),
                q8_halves: Vec::new(),
                permute: None,
                block_sums: Vec::new(),
                panels: gemm::pack_activations(x, m, cols),
                aligned: aligned::Aligned::default(),
            };
        }
        let q8: Vec<BlockQ8> = if kernel.int8() {
            quantize_row_q8(&x[..m * cols]) // rows of whole blocks (`QuantMatrix::new`)
        } else {
            Vec::new()
        };
        let (permute, block_sums) = if kernel.wants_permuted(packed) {
            let (_, _, width) = kernel.permutation();
            let sums = x.chunks_exact(width).map(|b| b.iter().sum()).collect();
            (Some(copies::next_id()), sums)
        } else {
            (None, Vec::new())
        };
        let q8_halves = if kernel.wants_half_sums() {
            q8::half_sums_x32(&q8)
        } else {
            Vec::new()
        };
        Prepared {
            q8_halves,
            q8_d: q8.iter().map(|b| b.d).collect(),
            q8_s: q8.iter().map(|b| b.s).collect(),
            q8,
            permute,
            block_sums,
            panels: Vec::new(),
            // Read in place by the `f32` kernels that do not permute them.
            aligned: if kernel.int8() || permute.is_some() {
                aligned::Aligned::default()
            } else {
                aligned::Aligned::of(x)
            },
        }
    }

    /// The kernels' view of `x` (`m` rows of `cols`) and these forms of it.
    fn activations<'a>(&'a self, x: &'a [f32], cols: usize, m: usize) -> dot::Activations<'a> {
        dot::Activations {
            f32: self.aligned.get(x),
            q8: &self.q8,
            q8_d: &self.q8_d,
            q8_s: &self.q8_s,
            q8_halves: &self.q8_halves,
            permuted: &[],
            block_sums: &self.block_sums,
            panels: &self.panels,
            cols,
            m,
        }
    }
}

/// Row `r` of `w` dequantised into `out`, a packed row unpacked through `scratch`.
fn dequantize_weights_row(w: &dot::Weights, r: usize, out: &mut [f32], scratch: &mut Vec<u8>) {
    let packing = w.packing.as_ref();
    packed::dequantize_row(w.ty, packing, w.data, w.row_bytes, r, out, scratch);
}

/// The prefill product's register tile height on this CPU ([`gemm::WR512`] with AVX-512,
/// [`gemm::WR256`] with AVX2 + FMA), or `None` without a micro-kernel.
fn gemm_tile() -> Option<usize> {
    match dot::Simd::detect() {
        dot::Simd::Scalar => None,
        dot::Simd::Avx512 => Some(gemm::WR512),
        dot::Simd::Avx2 | dot::Simd::Vnni => Some(gemm::WR256),
    }
}

/// Whether a product of `m` activation rows runs the prefill product ([`gemm`]): as
/// `arithmetic` says ([`RowArithmetic::ByRows`]: from [`PREFILL_ROWS`] rows on), where this
/// CPU has a micro-kernel, and not for 8-bit activations on a packed matrix (their integer
/// group kernels are faster, SmolLM2's `Q4_1` pp512 405-429 tok/s against 364-374 in `f32` at
/// one thread, and give a row the same bits in any batch; `Q6_K` joined them when it was
/// packed: Gemma-3's 8-bit pp512 438-469 -> 477-481 tok/s at one thread). 8-bit activations
/// on other types (`F16`, `BF16`, `F32`) run it in `f32`.
fn runs_gemm(int8: bool, packed: bool, m: usize, arithmetic: RowArithmetic) -> bool {
    let rows = match arithmetic {
        RowArithmetic::ByRows => m >= PREFILL_ROWS,
        RowArithmetic::Prefill => true,
        RowArithmetic::Decode => false,
    };
    !(int8 && packed) && rows && gemm_tile().is_some()
}
