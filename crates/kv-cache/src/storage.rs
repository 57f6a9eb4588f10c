//! Element storage of a contiguous cache buffer: f32, f16 or int8 with per-vector scales.

use burn::prelude::*;
use burn::tensor::{DType, FloatDType, IntDType};

/// How cached keys and values are stored (`--kv-type`). Attention always sees f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// 4 bytes per element, exact.
    #[default]
    F32,
    /// 2 bytes per element; relative error at most 2^-11 for normal values.
    F16,
    /// 1 byte per element plus one f32 scale per `[token, head]` vector (symmetric absmax/127
    /// quantisation); absolute error at most `absmax / 254` per element of that vector.
    Int8,
}

impl KvType {
    /// Bytes one head of one token takes for keys or for values: `head_dim` elements (plus a
    /// 4-byte scale for int8).
    pub fn bytes_per_head(self, head_dim: usize) -> usize {
        match self {
            KvType::F32 => 4 * head_dim,
            KvType::F16 => 2 * head_dim,
            KvType::Int8 => head_dim + 4,
        }
    }

    /// The name used on the command line: `f32`, `f16` or `int8`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Int8 => "int8",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "int8" | "i8" | "q8" => Ok(KvType::Int8),
            other => Err(format!(
                "unknown KV cache type {other:?} (expected f32, f16 or int8)"
            )),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One `[1, heads, capacity, head_dim]` buffer.
// One buffer per layer, so the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum Buffer {
    /// f32 or f16 elements.
    Float(Tensor<4>),
    /// int8 elements and f32 scales `[1, heads, capacity, 1]`.
    Int8 {
        data: Tensor<4, Int>,
        scales: Tensor<4>,
    },
}

/// An empty placeholder, so that a buffer can be taken out and written uniquely owned.
pub(crate) fn placeholder(device: &Device) -> Tensor<4> {
    Tensor::empty([0, 0, 0, 0], device)
}

impl Buffer {
    /// A zeroed buffer.
    pub(crate) fn zeros(kv_type: KvType, shape: [usize; 4], device: &Device) -> Self {
        match kv_type {
            KvType::F32 => Buffer::Float(Tensor::zeros(shape, device)),
            KvType::F16 => Buffer::Float(Tensor::zeros(shape, (device, DType::F16))),
            KvType::Int8 => Buffer::Int8 {
                data: Tensor::zeros(shape, (device, DType::I8)),
                scales: Tensor::zeros([shape[0], shape[1], shape[2], 1], device),
            },
        }
    }

    /// Write `x` (f32, `[1, heads, T, head_dim]`) at positions `start..start + T`, in place.
    pub(crate) fn write(&mut self, start: usize, x: Tensor<4>) {
        let [b, h, t, d] = x.dims();
        let range = [0..b, 0..h, start..start + t, 0..d];
        match self {
            Buffer::Float(buf) => {
                let device = buf.device();
                let taken = std::mem::replace(buf, placeholder(&device));
                let x = x.cast(FloatDType::from(taken.dtype()));
                *buf = taken.slice_assign(range, x);
            }
            Buffer::Int8 { data, scales } => {
                let device = scales.device();
                let absmax = x.clone().abs().max_dim(3);
                let scale = absmax / 127.0;
                let q = (x / scale.clone().clamp_min(f32::MIN_POSITIVE))
                    .round()
                    .clamp(-127.0, 127.0)
                    .cast(IntDType::I8);
                let taken =
                    std::mem::replace(data, Tensor::empty([0, 0, 0, 0], (&device, DType::I8)));
                *data = taken.slice_assign(range.clone(), q);
                let taken = std::mem::replace(scales, placeholder(&device));
                *scales = taken.slice_assign([0..b, 0..h, start..start + t, 0..1], scale);
            }
        }
    }

    /// The f32 contents of positions `range`.
    pub(crate) fn read(&self, range: std::ops::Range<usize>) -> Tensor<4> {
        match self {
            Buffer::Float(buf) => {
                let [b, h, _, d] = buf.dims();
                buf.clone()
                    .slice([0..b, 0..h, range, 0..d])
                    .cast(FloatDType::F32)
            }
            Buffer::Int8 { data, scales } => {
                let [b, h, _, d] = data.dims();
                let q = data
                    .clone()
                    .slice([0..b, 0..h, range.clone(), 0..d])
                    .cast(FloatDType::F32);
                q * scales.clone().slice([0..b, 0..h, range, 0..1])
            }
        }
    }

    /// Copy positions `from..from + n` to `to..to + n` without converting (a move left when
    /// `to < from`).
    pub(crate) fn move_within(&mut self, from: usize, to: usize, n: usize) {
        if n == 0 || from == to {
            return;
        }
        match self {
            Buffer::Float(buf) => {
                let [b, h, _, d] = buf.dims();
                let part = buf.clone().slice([0..b, 0..h, from..from + n, 0..d]);
                let device = buf.device();
                let taken = std::mem::replace(buf, placeholder(&device));
                *buf = taken.slice_assign([0..b, 0..h, to..to + n, 0..d], part);
            }
            Buffer::Int8 { data, scales } => {
                let [b, h, _, d] = data.dims();
                let part = data.clone().slice([0..b, 0..h, from..from + n, 0..d]);
                *data = data
                    .clone()
                    .slice_assign([0..b, 0..h, to..to + n, 0..d], part);
                let part = scales.clone().slice([0..b, 0..h, from..from + n, 0..1]);
                *scales = scales
                    .clone()
                    .slice_assign([0..b, 0..h, to..to + n, 0..1], part);
            }
        }
    }
}
