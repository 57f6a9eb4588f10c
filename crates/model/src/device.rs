//! Devices: opening the one a run asks for, whether it computes on the host, and which float
//! types it computes in. The CLI keeps the choice (a flag); this module is the only place
//! that turns it into a Burn device.

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use burn::tensor::FloatDType;

pub use kindle_kv_cache::is_host_device;

/// What went wrong opening a device or checking a float type against it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device could not be opened (no driver, no GPU, a feature not built).
    #[error("{0}")]
    Unavailable(String),
    /// A `--dtype` other than `f32` on a CPU device.
    #[error(
        "--dtype {dtype} needs a GPU device (--device wgpu or cuda): on {device} the weights stay \
         in the file's quantized form with f32 activations"
    )]
    DtypeNeedsGpu {
        /// The float type asked for.
        dtype: Dtype,
        /// The CPU device.
        device: DeviceKind,
    },
    /// A float type the device does not compute in.
    #[error("the {device} device cannot compute in {dtype} (try --dtype f32{hint})", hint = if *dtype == Dtype::Bf16 { " or f16" } else { "" })]
    DtypeUnsupported {
        /// The float type asked for.
        dtype: Dtype,
        /// The device.
        device: DeviceKind,
    },
    /// A KV cache type whose elements the device's kernels cannot hold (wgpu's WGSL has no
    /// 8-bit integers).
    #[error(
        "the {device} device cannot hold an {kv_type} KV cache (its kernels have no such \
         element type; try --kv-type f16 or f32)"
    )]
    KvTypeUnsupported {
        /// The cache type asked for.
        kv_type: kindle_kv_cache::KvType,
        /// The device.
        device: DeviceKind,
    },
    /// A name that is not a device or a float type.
    #[error("unknown {what} '{name}' (expected one of: {expected})")]
    UnknownName {
        /// "device" or "dtype".
        what: &'static str,
        /// The name given.
        name: String,
        /// The names accepted.
        expected: String,
    },
}

/// The compute devices kindle runs on.
///
/// Every kind can be named; one this build lacks (`cuda` without the `cuda` cargo feature) or
/// this machine cannot open (`wgpu` without a GPU or a Vulkan, Metal or DX12 driver) is an
/// error naming the problem when it is [opened](Self::open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// Burn's pure-Rust CPU backend (fastest on CPU).
    Flex,
    /// Burn's ndarray CPU backend (deprecated by Burn, kept selectable).
    Ndarray,
    /// The GPU through wgpu (Vulkan, Metal or DX12; lavapipe runs it on a CPU).
    Wgpu,
    /// An NVIDIA GPU through CUDA (needs the `cuda` cargo feature).
    Cuda,
}

impl DeviceKind {
    /// Every kind, in the order `kindle devices` lists them.
    pub const ALL: [DeviceKind; 4] = [
        DeviceKind::Flex,
        DeviceKind::Ndarray,
        DeviceKind::Wgpu,
        DeviceKind::Cuda,
    ];

    /// The names [`FromStr`] accepts, in [`ALL`](Self::ALL)'s order.
    pub const NAMES: [&'static str; 4] = ["flex", "ndarray", "wgpu", "cuda"];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Flex => "flex",
            DeviceKind::Ndarray => "ndarray",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// Whether the device computes on the host CPU (the quantized kernels and threads apply).
    pub fn is_host(self) -> bool {
        matches!(self, DeviceKind::Flex | DeviceKind::Ndarray)
    }

    /// The Burn device, opened (a GPU device is initialised here, so a missing driver is an
    /// error now rather than a panic at the first tensor).
    pub fn open(self) -> Result<Device, DeviceError> {
        match self {
            DeviceKind::Flex => Ok(Device::flex()),
            #[allow(deprecated)] // Burn deprecates ndarray; it stays selectable here.
            DeviceKind::Ndarray => Ok(Device::ndarray()),
            DeviceKind::Wgpu => wgpu_device(),
            DeviceKind::Cuda => cuda_device(),
        }
    }

    /// Whether the opened `device` can hold a KV cache of `kv_type` (CPU devices: every type,
    /// kept in host memory; a GPU: where its kernels have the element type).
    pub fn holds_kv_type(self, device: &Device, kv_type: kindle_kv_cache::KvType) -> bool {
        use burn::tensor::DType;
        let element = match kv_type {
            kindle_kv_cache::KvType::F32 => return true,
            kindle_kv_cache::KvType::F16 => DType::F16,
            kindle_kv_cache::KvType::Int8 => DType::I8,
        };
        self.is_host() || device.supports_dtype(element)
    }

    /// Whether the opened `device` computes in `dtype` (CPU devices: `f32` only, since their
    /// weights stay quantized).
    pub fn supports(self, device: &Device, dtype: Dtype) -> bool {
        dtype == Dtype::F32 || (!self.is_host() && device.supports_dtype(dtype.float_dtype()))
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DeviceKind {
    type Err = DeviceError;
    fn from_str(name: &str) -> Result<Self, DeviceError> {
        DeviceKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| DeviceError::UnknownName {
                what: "device",
                name: name.into(),
                expected: DeviceKind::NAMES.join(", "),
            })
    }
}

/// The wgpu device, opened once per process (Burn's runtime cannot be initialised twice).
#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<Device, DeviceError> {
    use std::sync::OnceLock;
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    let opened = DEVICE.get_or_init(|| {
        // wgpu panics on some driver failures instead of returning an error: turn those into
        // the same error.
        let init = std::panic::catch_unwind(|| Device::wgpu_options().init());
        match init {
            Ok(Ok(device)) => Ok(device),
            Ok(Err(error)) => Err(error.to_string()),
            Err(panic) => Err(panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the wgpu runtime panicked".into())),
        }
    });
    match opened {
        Ok(device) => Ok(device.clone()),
        Err(why) => Err(DeviceError::Unavailable(format!(
            "no wgpu device: {why} (wgpu needs a GPU with a Vulkan, Metal or DX12 driver; on a \
             machine without one, Mesa's lavapipe (Debian: mesa-vulkan-drivers) runs it on the CPU)"
        ))),
    }
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> Result<Device, DeviceError> {
    Err(DeviceError::Unavailable(
        "this kindle was built without the `wgpu` feature (rebuild with `cargo build --release --features wgpu`)".into(),
    ))
}

/// The first CUDA device.
#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device, DeviceError> {
    let init = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let device = Device::cuda(0);
        // Touch the device so that a missing driver shows up here.
        let _ = Tensor::<1>::zeros([1], &device).into_data();
        device
    }));
    init.map_err(|_| {
        DeviceError::Unavailable(
            "no CUDA device: the CUDA driver or a GPU is missing (see the message above)".into(),
        )
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<Device, DeviceError> {
    Err(DeviceError::Unavailable(
        "this kindle was built without the `cuda` feature (rebuild with `cargo build --release --features cuda`: that build downloads LLVM, and running it needs the CUDA driver)".into(),
    ))
}

/// The float types dense weights and their products can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit floats.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Every type, in the order `kindle devices` lists them.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

    /// The names [`FromStr`] accepts.
    pub const NAMES: [&'static str; 3] = ["f32", "f16", "bf16"];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Burn's float type.
    pub fn float_dtype(self) -> FloatDType {
        match self {
            Dtype::F32 => FloatDType::F32,
            Dtype::F16 => FloatDType::F16,
            Dtype::Bf16 => FloatDType::BF16,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = DeviceError;
    fn from_str(name: &str) -> Result<Self, DeviceError> {
        Dtype::ALL
            .into_iter()
            .find(|dtype| dtype.name() == name)
            .ok_or_else(|| DeviceError::UnknownName {
                what: "dtype",
                name: name.into(),
                expected: Dtype::NAMES.join(", "),
            })
    }
}

/// A device opened for a run, with the float type its weights use.
#[derive(Debug, Clone)]
pub struct OpenDevice {
    /// Which kind it is.
    pub kind: DeviceKind,
    /// The Burn device.
    pub device: Device,
    /// The float type of dense weights and matrix products.
    pub dtype: Dtype,
}

impl OpenDevice {
    /// Open `kind` and check that it computes in `dtype`.
    pub fn open(kind: DeviceKind, dtype: Dtype) -> Result<Self, DeviceError> {
        if dtype != Dtype::F32 && kind.is_host() {
            return Err(DeviceError::DtypeNeedsGpu {
                dtype,
                device: kind,
            });
        }
        let device = kind.open()?;
        if !kind.supports(&device, dtype) {
            return Err(DeviceError::DtypeUnsupported {
                dtype,
                device: kind,
            });
        }
        Ok(OpenDevice {
            kind,
            device,
            dtype,
        })
    }

    /// Flex (the default CPU device) in `f32`: opening it cannot fail.
    pub fn flex() -> Self {
        OpenDevice {
            kind: DeviceKind::Flex,
            device: Device::flex(),
            dtype: Dtype::F32,
        }
    }
}

/// What `kindle devices` says about one device kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    /// The device kind.
    pub kind: DeviceKind,
    /// Whether it opened.
    pub available: bool,
    /// The adapter or CPU it runs on, or why it is not available.
    pub detail: String,
    /// The float types it computes in.
    pub dtypes: Vec<Dtype>,
}

/// Open `kind` and describe it (never fails: an unavailable device says why).
pub fn describe(kind: DeviceKind) -> DeviceReport {
    let device = match kind.open() {
        Ok(device) => device,
        Err(error) => {
            return DeviceReport {
                kind,
                available: false,
                detail: error.to_string(),
                dtypes: Vec::new(),
            };
        }
    };
    let detail = if kind.is_host() {
        format!(
            "CPU, quantized kernels ({}), {} threads by default",
            kindle_kernels::simd_level(),
            kindle_kernels::default_threads()
        )
    } else {
        gpu_name(&device)
    };
    let dtypes = Dtype::ALL
        .into_iter()
        .filter(|d| kind.supports(&device, *d))
        .collect();
    DeviceReport {
        kind,
        available: true,
        detail,
        dtypes,
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_name(device: &Device) -> String {
    match device.identity() {
        Some(identity) => format!("{} ({})", identity.name, identity.fingerprint),
        None => "GPU".into(),
    }
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn gpu_name(_device: &Device) -> String {
    "GPU".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in DeviceKind::ALL {
            assert_eq!(kind.name().parse::<DeviceKind>(), Ok(kind));
        }
        for dtype in Dtype::ALL {
            assert_eq!(dtype.name().parse::<Dtype>(), Ok(dtype));
        }
        let err = "tpu".parse::<DeviceKind>().unwrap_err().to_string();
        assert!(
            err.contains("'tpu'") && err.contains("flex, ndarray, wgpu, cuda"),
            "{err}"
        );
    }

    #[test]
    fn host_devices_are_the_cpu_backends() {
        assert!(is_host_device(&DeviceKind::Flex.open().unwrap()));
        assert!(is_host_device(&DeviceKind::Ndarray.open().unwrap()));
        assert!(DeviceKind::Flex.is_host() && DeviceKind::Ndarray.is_host());
        assert!(!DeviceKind::Wgpu.is_host() && !DeviceKind::Cuda.is_host());
    }

    #[test]
    fn half_precision_needs_a_gpu() {
        let err = OpenDevice::open(DeviceKind::Flex, Dtype::F16).unwrap_err();
        assert!(matches!(err, DeviceError::DtypeNeedsGpu { .. }), "{err}");
        let flex = OpenDevice::open(DeviceKind::Flex, Dtype::F32).unwrap();
        assert_eq!(
            flex.load_options().weights,
            crate::loader::WeightFormat::Quantized
        );
    }
}
