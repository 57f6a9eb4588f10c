//! Glue between the crates: the Burn model seen through `kindle-generate`'s traits, and the
//! device choice, which is made here and nowhere else.

use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};
use kindle_model::gguf::GgufFile;
use kindle_model::tokenizer::{Tokenizer, TokenizerError};
use kindle_model::{
    BatchSequence, KvCache, KvStore, KvType, Llama, LogitsFor, ModelError, SlidingWindowCache,
};

/// The compute devices `--device` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceKind {
    /// Burn's pure-Rust CPU backend (fastest on CPU).
    Flex,
    /// Burn's ndarray CPU backend (deprecated by Burn, kept selectable).
    Ndarray,
}

impl DeviceKind {
    /// The Burn device.
    pub fn device(self) -> Device {
        match self {
            DeviceKind::Flex => Device::flex(),
            #[allow(deprecated)] // Burn deprecates ndarray; it stays selectable here.
            DeviceKind::Ndarray => Device::ndarray(),
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Flex => "flex",
            DeviceKind::Ndarray => "ndarray",
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
    let llama = Llama::from_gguf(&loaded.file, &device.device.device())
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
