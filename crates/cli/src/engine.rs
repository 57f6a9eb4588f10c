//! Glue between the crates: the Burn model seen through `kindle-generate`'s traits, and the
//! device choice, which is made here and nowhere else.

use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};
use kindle_model::gguf::GgufFile;
use kindle_model::tokenizer::{Tokenizer, TokenizerError};
use kindle_model::{BatchSequence, KvCache, KvType, Llama, LogitsFor, ModelError};

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
}

/// A [`KvCache`] behind the generation loop's [`ModelCache`] trait.
pub struct BurnCache(pub KvCache);

impl ModelCache for BurnCache {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn capacity(&self) -> usize {
        self.0.capacity()
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len)
    }
    fn fork(&self) -> Self {
        BurnCache(self.0.fork())
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
        Ok(BurnCache(
            self.llama.new_cache_typed(capacity, self.kv_type),
        ))
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut BurnCache) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, &mut cache.0, LogitsFor::Last)
    }
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut BurnCache)],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut sequences: Vec<BatchSequence<'_>> = batch
            .iter_mut()
            .map(|(tokens, cache)| BatchSequence {
                tokens,
                cache: &mut cache.0,
            })
            .collect();
        self.llama.forward_batch(&mut sequences, LogitsFor::Last)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut BurnCache) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(tokens, &mut cache.0, LogitsFor::All)
    }
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
    })
}
