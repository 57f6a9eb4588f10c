//! Glue between the crates: the Burn model seen through `kindle-generate`'s traits, and the
//! device choice, which is made here and nowhere else.

use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};
use kindle_model::gguf::GgufFile;
use kindle_model::tokenizer::{Tokenizer, TokenizerError};
use kindle_model::{
    BatchSequence, KvCache, KvStore, KvType, Llama, LoadOptions, LogitsFor, ModelError,
    SlidingWindowCache, WeightFormat,
};

/// The compute devices `--device` accepts.
///
/// Every kind is always accepted on the command line; one this build lacks (`cuda` without
/// the `cuda` cargo feature) or this machine cannot open (`wgpu` without a GPU or a Vulkan,
/// Metal or DX12 driver) is an error naming the problem when it is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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

    /// The Burn device, opened (a GPU device is initialised here, so a missing driver is an
    /// error now rather than a panic at the first tensor).
    pub fn device(self) -> Result<Device> {
        match self {
            DeviceKind::Flex => Ok(Device::flex()),
            #[allow(deprecated)] // Burn deprecates ndarray; it stays selectable here.
            DeviceKind::Ndarray => Ok(Device::ndarray()),
            DeviceKind::Wgpu => wgpu_device(),
            DeviceKind::Cuda => cuda_device(),
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Flex => "flex",
            DeviceKind::Ndarray => "ndarray",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// Whether the device runs on the host CPU (the quantized kernels and `-t` apply).
    pub fn is_cpu(self) -> bool {
        matches!(self, DeviceKind::Flex | DeviceKind::Ndarray)
    }
}

/// The wgpu device, opened once per process (Burn's runtime cannot be initialised twice).
#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<Device> {
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
        Err(why) => bail!(
            "no wgpu device: {why} (wgpu needs a GPU with a Vulkan, Metal or DX12 driver; on a \
             machine without one, Mesa's lavapipe (Debian: mesa-vulkan-drivers) runs it on the CPU)"
        ),
    }
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> Result<Device> {
    bail!(
        "this kindle was built without the `wgpu` feature (rebuild with `cargo build --release --features wgpu`)"
    )
}

/// The first CUDA device.
#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device> {
    let init = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let device = Device::cuda(0);
        // Touch the device so that a missing driver shows up here.
        let _ = Tensor::<1>::zeros([1], &device).into_data();
        device
    }));
    init.map_err(|_| {
        anyhow::anyhow!(
            "no CUDA device: the CUDA driver or a GPU is missing (see the message above)"
        )
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<Device> {
    bail!(
        "this kindle was built without the `cuda` feature (rebuild with `cargo build --release --features cuda`: that build downloads LLVM, and running it needs the CUDA driver)"
    )
}

/// What `kindle devices` says about one device kind.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceReport {
    /// The `--device` value.
    pub device: &'static str,
    /// Whether it opened.
    pub available: bool,
    /// The adapter or CPU it runs on, or why it is not available.
    pub detail: String,
    /// The `--dtype` values it computes in.
    pub dtypes: Vec<&'static str>,
}

/// Open `kind` and describe it (never fails: an unavailable device says why).
pub fn describe_device(kind: DeviceKind) -> DeviceReport {
    let device = match kind.device() {
        Ok(device) => device,
        Err(error) => {
            return DeviceReport {
                device: kind.name(),
                available: false,
                detail: format!("{error:#}"),
                dtypes: Vec::new(),
            };
        }
    };
    let detail = if kind.is_cpu() {
        format!(
            "CPU, quantized kernels ({}), {} threads by default",
            cpu_simd(),
            kindle_model::kernels::num_threads()
        )
    } else {
        gpu_name(&device)
    };
    let dtypes = [Dtype::F32, Dtype::F16, Dtype::Bf16]
        .into_iter()
        .filter(|d| *d == Dtype::F32 || (!kind.is_cpu() && device.supports_dtype(d.float_dtype())))
        .map(Dtype::name)
        .collect();
    DeviceReport {
        device: kind.name(),
        available: true,
        detail,
        dtypes,
    }
}

/// The SIMD level the CPU kernels run with on this machine.
fn cpu_simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return "AVX2/FMA";
        }
    }
    "portable scalar"
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

/// The float types `--dtype` accepts for dense weights and their products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// 32-bit floats.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Burn's float type.
    pub fn float_dtype(self) -> burn::tensor::FloatDType {
        match self {
            Dtype::F32 => burn::tensor::FloatDType::F32,
            Dtype::F16 => burn::tensor::FloatDType::F16,
            Dtype::Bf16 => burn::tensor::FloatDType::BF16,
        }
    }
}

/// Where and how the model runs: the command-line flags shared by every command that runs it.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Where the model runs
    #[arg(long, value_enum, default_value = "flex")]
    pub device: DeviceKind,
    /// Threads for the CPU kernels [default: the number of physical cores]
    #[arg(short = 't', long, value_name = "N")]
    pub threads: Option<usize>,
    /// Activations in the quantized CPU kernels: f32 (exact: decode and prefill agree) or
    /// int8 (llama.cpp's scheme: faster, logits differ by up to about 0.5)
    #[arg(long, value_enum, default_value = "f32")]
    pub activations: Activations,
    /// How the KV cache stores keys and values: f32, f16 or int8 (per-token, per-head scales)
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub kv_type: KvType,
    /// Float type of the weights and matrix products on GPU devices (wgpu, cuda); CPU
    /// devices keep the file's quantized weights and take only f32
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: Dtype,
}

/// The activation formats `--activations` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Activations {
    /// 32-bit floats.
    F32,
    /// 8-bit integers per 32-value block, as llama.cpp.
    Int8,
}

impl DeviceArgs {
    /// Defaults: flex, the physical cores, f32 activations, an f32 KV cache.
    pub fn cpu() -> Self {
        DeviceArgs {
            device: DeviceKind::Flex,
            threads: None,
            activations: Activations::F32,
            kv_type: KvType::F32,
            dtype: Dtype::F32,
        }
    }

    /// The same settings on another device.
    pub fn on(kind: DeviceKind) -> Self {
        DeviceArgs {
            device: kind,
            ..DeviceArgs::cpu()
        }
    }

    /// Open the device and check that it can run `--dtype`.
    pub fn open(&self) -> Result<Device> {
        let device = self.device.device()?;
        if self.dtype != Dtype::F32 {
            if self.device.is_cpu() {
                bail!(
                    "--dtype {} needs a GPU device (--device wgpu or cuda): on {} the weights stay \
                     in the file's quantized form with f32 activations",
                    self.dtype.name(),
                    self.device.name()
                );
            }
            if !device.supports_dtype(self.dtype.float_dtype()) {
                bail!(
                    "the {} device cannot compute in {} (try --dtype f32{})",
                    self.device.name(),
                    self.dtype.name(),
                    if self.dtype == Dtype::Bf16 {
                        " or f16"
                    } else {
                        ""
                    }
                );
            }
        }
        Ok(device)
    }

    /// How the weights are held on this device.
    pub fn load_options(&self, device: &Device) -> LoadOptions {
        match self.dtype {
            Dtype::F32 => LoadOptions::for_device(device),
            Dtype::F16 => LoadOptions {
                weights: WeightFormat::DenseF16,
            },
            Dtype::Bf16 => LoadOptions {
                weights: WeightFormat::DenseBf16,
            },
        }
    }

    /// Apply the thread count and activation format to the CPU kernels (process-wide).
    pub fn configure(&self) -> Result<()> {
        if let Some(threads) = self.threads {
            if threads == 0 {
                bail!("--threads must be at least 1");
            }
            kindle_model::kernels::set_num_threads(threads);
        }
        kindle_model::kernels::set_activation_format(match self.activations {
            Activations::F32 => kindle_model::kernels::ActivationFormat::F32,
            Activations::Int8 => kindle_model::kernels::ActivationFormat::Int8,
        });
        Ok(())
    }
}

/// A [`Llama`] behind the generation loop's [`LanguageModel`] trait.
pub struct BurnModel {
    /// The transformer.
    pub llama: Llama,
    /// How new caches store keys and values.
    pub kv_type: KvType,
    /// `Some(keep)`: new caches are sliding windows that never discard their first `keep`
    /// tokens (llama.cpp's context shift); `None`: fixed caches that fill up.
    pub sliding_keep: Option<usize>,
}

/// A KV cache behind the generation loop's [`ModelCache`] trait: fixed or sliding.
#[derive(Debug)]
pub enum BurnCache {
    /// Fills up; a forward pass that does not fit is an error.
    Fixed(KvCache),
    /// Discards old tokens (after the kept prefix) to make room.
    Sliding(SlidingWindowCache),
}

impl BurnCache {
    /// The cache as the model sees it.
    pub fn store(&mut self) -> &mut dyn KvStore {
        match self {
            BurnCache::Fixed(c) => c,
            BurnCache::Sliding(c) => c,
        }
    }

    fn store_ref(&self) -> &dyn KvStore {
        match self {
            BurnCache::Fixed(c) => c,
            BurnCache::Sliding(c) => c,
        }
    }

    /// Bytes of the cache's storage.
    pub fn bytes(&self) -> usize {
        self.store_ref().bytes()
    }
}

impl ModelCache for BurnCache {
    fn len(&self) -> usize {
        self.store_ref().len()
    }
    fn capacity(&self) -> usize {
        self.store_ref().capacity()
    }
    fn truncate(&mut self, len: usize) {
        self.store().truncate(len)
    }
    fn fork(&self) -> Self {
        match self {
            BurnCache::Fixed(c) => BurnCache::Fixed(c.fork()),
            BurnCache::Sliding(c) => BurnCache::Sliding(c.fork()),
        }
    }
    fn sliding_keep(&self) -> Option<usize> {
        match self {
            BurnCache::Fixed(_) => None,
            BurnCache::Sliding(c) => Some(c.keep()),
        }
    }
    fn discarded(&self) -> usize {
        match self {
            BurnCache::Fixed(_) => 0,
            BurnCache::Sliding(c) => c.discarded(),
        }
    }
}

impl LanguageModel for BurnModel {
    type Cache = BurnCache;
    type Error = ModelError;

    fn vocab_size(&self) -> usize {
        self.llama.config().vocab_size
    }
    fn context_length(&self) -> usize {
        self.llama.config().context_length
    }
    fn new_cache(&self, capacity: usize) -> Result<BurnCache, ModelError> {
        Ok(match self.sliding_keep {
            None => BurnCache::Fixed(self.llama.new_cache_typed(capacity, self.kv_type)),
            Some(keep) => {
                BurnCache::Sliding(self.llama.new_sliding_cache(capacity, self.kv_type, keep)?)
            }
        })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut BurnCache) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, cache.store(), LogitsFor::Last)
    }
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut BurnCache)],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut sequences: Vec<BatchSequence<'_>> = batch
            .iter_mut()
            .map(|(tokens, cache)| BatchSequence {
                tokens,
                cache: cache.store(),
            })
            .collect();
        self.llama.forward_batch(&mut sequences, LogitsFor::Last)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut BurnCache) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, cache.store(), LogitsFor::All)
    }
}

/// What a run's KV cache does when the context is full (`--context-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContextMode {
    /// Generation stops when prompt plus output reach the context size.
    Fixed,
    /// The context shifts as in llama.cpp: keep the first `--keep` tokens, discard half of the
    /// rest, go on; generation runs until --max-tokens or a stop.
    Sliding,
}

/// Parse a byte count: a plain number or one with a suffix K, M, G (powers of 1024, also
/// written KiB, MiB, GiB) or KB, MB, GB (powers of 1000); case-insensitive, spaces allowed
/// before the suffix.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let scale: f64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        other => {
            return Err(format!(
                "unknown size suffix '{other}' in '{text}' (use K, M, G, KiB, MiB, GiB, KB, MB or GB)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size in bytes (e.g. 512M, 2GiB)"))?;
    let bytes = value * scale;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < usize::MAX as f64) {
        return Err(format!("'{text}' is not a usable size in bytes"));
    }
    Ok(bytes as usize)
}

/// A byte count for people: `123456789 bytes (117.7 MiB)`.
pub fn show_bytes(bytes: usize) -> String {
    format!("{bytes} bytes ({:.1} MiB)", bytes as f64 / (1 << 20) as f64)
}

/// A [`Tokenizer`] behind the generation loop's [`TokenDecoder`] trait.
pub struct Detokenizer<'a> {
    /// The tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// Whether special tokens (such as `<|im_start|>`) are rendered as text.
    pub render_special: bool,
}

impl TokenDecoder for Detokenizer<'_> {
    type Error = TokenizerError;
    fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.tokenizer.decode(ids, !self.render_special)
    }
}

/// A loaded model file: metadata, tokenizer and (optionally) weights.
pub struct Loaded {
    /// The parsed GGUF file.
    pub file: GgufFile,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
}

/// Open a GGUF file and build its tokenizer.
pub fn open(path: &Path) -> Result<Loaded> {
    if !path.exists() {
        bail!("model file {} does not exist", path.display());
    }
    if path.is_dir() {
        bail!("{} is a directory, not a GGUF model file", path.display());
    }
    let file = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("building the tokenizer of {}", path.display()))?;
    Ok(Loaded { file, tokenizer })
}

/// Load the weights of an opened file onto `device`.
pub fn load_model(loaded: &Loaded, device: &DeviceArgs) -> Result<BurnModel> {
    device.configure()?;
    let burn_device = device.open()?;
    let llama = Llama::from_gguf_with(
        &loaded.file,
        &burn_device,
        device.load_options(&burn_device),
    )
    .context("loading the model weights")?;
    if llama.config().vocab_size < loaded.tokenizer.vocab_size() {
        bail!(
            "the tokenizer has {} tokens but the model's embedding has only {} rows",
            loaded.tokenizer.vocab_size(),
            llama.config().vocab_size
        );
    }
    Ok(BurnModel {
        llama,
        kv_type: device.kv_type,
        sliding_keep: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("1K"), Ok(1024));
        assert_eq!(parse_bytes("1KiB"), Ok(1024));
        assert_eq!(parse_bytes("1kb"), Ok(1000));
        assert_eq!(parse_bytes("1.5M"), Ok(3 << 19));
        assert_eq!(parse_bytes("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("3MB"), Ok(3_000_000));
        for bad in ["", "K", "12X", "-1M", "0", "1e3"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
