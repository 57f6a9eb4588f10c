//! Glue between the crates: the flags that say where and how a model runs, opening a model
//! file with its tokenizer, and the tokenizer seen through `kindle-generate`'s traits. The
//! device is chosen here (a flag) and opened by `kindle_model::device`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use kindle_generate::TokenDecoder;
use kindle_gguf::mix::{FileType, ModelFacts};
use kindle_gguf::quant::{GgmlType, QUANTIZE_TYPES, quantize};
use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_model::{
    ActivationFormat, DeviceKind, Dtype, Engine, EngineOptions, KvType, LlamaConfig, RopeOverrides,
    RopeScalingKind,
};
use kindle_tokenizer::{Tokenizer, TokenizerError};

/// `--device`'s parser: one of [`DeviceKind::NAMES`], listed in `--help`.
fn device_kind() -> impl TypedValueParser<Value = DeviceKind> {
    PossibleValuesParser::new(DeviceKind::NAMES).try_map(|name| name.parse::<DeviceKind>())
}

/// `--dtype`'s parser: one of [`Dtype::NAMES`].
fn dtype() -> impl TypedValueParser<Value = Dtype> {
    PossibleValuesParser::new(Dtype::NAMES).try_map(|name| name.parse::<Dtype>())
}

/// `--activations`' parser: `f32` or `int8`.
pub fn activations() -> impl TypedValueParser<Value = ActivationFormat> {
    PossibleValuesParser::new(["f32", "int8"]).map(|name| match name.as_str() {
        "int8" => ActivationFormat::Int8,
        _ => ActivationFormat::F32,
    })
}

/// `--rope-scaling`'s parser: `none`, `linear` or `yarn`.
fn rope_scaling() -> impl TypedValueParser<Value = RopeScalingKind> {
    PossibleValuesParser::new(["none", "linear", "yarn"]).map(|name| match name.as_str() {
        "linear" => RopeScalingKind::Linear,
        "yarn" => RopeScalingKind::Yarn,
        _ => RopeScalingKind::None,
    })
}

/// Where and how the model runs: the command-line flags shared by every command that runs it.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Where the model runs
    #[arg(long, default_value = "flex", value_parser = device_kind())]
    pub device: DeviceKind,
    /// Threads for the CPU kernels [default: the number of physical cores]
    #[arg(short = 't', long, value_name = "N")]
    pub threads: Option<usize>,
    /// Activations in the quantized CPU kernels: f32 (exact: decode and prefill agree) or
    /// int8 (llama.cpp's scheme: faster, logits differ by up to about 0.5)
    #[arg(long, default_value = "f32", value_parser = activations())]
    pub activations: ActivationFormat,
    /// How the KV cache stores keys and values: f32, f16 or int8 (per-token, per-head scales)
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub kv_type: KvType,
    /// Float type of the weights and matrix products on GPU devices (wgpu, cuda); CPU
    /// devices keep the file's quantized weights and take only f32
    #[arg(long, default_value = "f32", value_parser = dtype())]
    pub dtype: Dtype,
    /// Rotary scaling over the model file's, as llama.cpp's flag: none, linear or yarn (with
    /// --rope-scale, to run past the trained context)
    #[arg(long, value_name = "KIND", value_parser = rope_scaling())]
    pub rope_scaling: Option<RopeScalingKind>,
    /// The factor the context is stretched by (--rope-scaling linear or yarn); the context
    /// length grows to match
    #[arg(long, value_name = "N")]
    pub rope_scale: Option<f64>,
    /// The rotary base of the model's global layers, over the file's
    #[arg(long, value_name = "N")]
    pub rope_freq_base: Option<f64>,
    /// YaRN's original context, over the file's (default: the file's, else its context)
    #[arg(long, value_name = "N")]
    pub yarn_orig_ctx: Option<usize>,
}

impl DeviceArgs {
    /// Defaults: flex, the physical cores, f32 activations, an f32 KV cache.
    pub fn cpu() -> Self {
        DeviceArgs::on(DeviceKind::Flex)
    }

    /// The default settings on another device.
    pub fn on(kind: DeviceKind) -> Self {
        DeviceArgs::from(EngineOptions::on(kind))
    }

    /// The options the model is loaded with.
    pub fn options(&self) -> EngineOptions {
        EngineOptions {
            device: self.device,
            dtype: self.dtype,
            threads: self.threads,
            activations: self.activations,
            kv_type: self.kv_type,
            rope: RopeOverrides {
                kind: self.rope_scaling,
                factor: self.rope_scale,
                freq_base: self.rope_freq_base,
                original_context: self.yarn_orig_ctx,
            },
            ..EngineOptions::default()
        }
    }
}

impl From<EngineOptions> for DeviceArgs {
    fn from(options: EngineOptions) -> Self {
        DeviceArgs {
            device: options.device,
            threads: options.threads,
            activations: options.activations,
            kv_type: options.kv_type,
            dtype: options.dtype,
            rope_scaling: options.rope.kind,
            rope_scale: options.rope.factor,
            rope_freq_base: options.rope.freq_base,
            yarn_orig_ctx: options.rope.original_context,
        }
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

/// Read a model: a GGUF file (metadata and tensor table; the data stays memory-mapped) or a
/// Hugging Face directory (`config.json`, safetensors, `tokenizer.json`), converted in memory
/// into the GGUF file llama.cpp's converter would write (see [`kindle_hf`]). A missing path,
/// a directory without `config.json` or a malformed file is an error naming the path.
pub fn open_file(path: &Path) -> Result<GgufFile> {
    open_file_with(path, None)
}

/// [`open_file`], with the dense (`f32`, `f16`, `bf16`) weight matrices quantized to
/// `quantize` (`q8_0`, `q4_0`, `q4_1`, ...) in memory when it is given, as `kindle quantize`
/// would write them: the CPU kernels then multiply them as they do a quantized file's.
pub fn open_file_with(path: &Path, quantize: Option<GgmlType>) -> Result<GgufFile> {
    if !path.exists() {
        bail!("model file {} does not exist", path.display());
    }
    if path.is_dir() {
        if !kindle_hf::is_hf_dir(path) {
            bail!(
                "{} is a directory without a config.json: neither a GGUF model file nor a \
                 Hugging Face model directory",
                path.display()
            );
        }
        let options = kindle_hf::ToGgufOptions {
            tensor_type: quantize,
            tokenizer: true,
        };
        return kindle_hf::HfDir::open(path)
            .and_then(|dir| dir.to_gguf_file(&options))
            .with_context(|| format!("reading the Hugging Face directory {}", path.display()));
    }
    let file = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    match quantize {
        None => Ok(file),
        Some(ty) => requantize(&file, Scheme::Pure(ty), false)
            .and_then(|writer| Ok(GgufFile::from_bytes(writer.to_bytes())?))
            .with_context(|| {
                format!(
                    "quantizing the weights of {} to {}",
                    path.display(),
                    ty.name()
                )
            }),
    }
}

/// The types `--quantize` and `kindle convert --type` write (every one of [`QUANTIZE_TYPES`]).
pub fn quantize_type(name: &str) -> Result<GgmlType> {
    QUANTIZE_TYPES
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .with_context(|| {
            let names: Vec<String> = QUANTIZE_TYPES
                .iter()
                .map(|t| t.name().to_ascii_lowercase())
                .collect();
            format!(
                "{name}: not a type kindle quantizes to ({})",
                names.join(", ")
            )
        })
}

/// The file types `kindle quantize --type` writes: llama-quantize's names ([`FileType`]).
pub fn file_type(name: &str) -> Result<FileType> {
    FileType::parse(name).with_context(|| {
        let names: Vec<String> = FileType::ALL
            .iter()
            .map(|t| t.name().to_ascii_lowercase())
            .collect();
        // llama-quantize's importance-matrix file types: kindle reads them, not writes them.
        let grid = [
            "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs", "iq3_xs", "iq3_s",
            "iq3_m",
        ];
        let why = if grid.contains(&name.to_ascii_lowercase().as_str()) {
            " (kindle reads these files but does not write them: their encoders search a grid \
             under an importance matrix, which kindle does not compute; make them with \
             llama-quantize --imatrix)"
        } else {
            ""
        };
        format!(
            "{name}: not a type kindle quantizes to ({}; q3_k, q4_k and q5_k are the _m mixtures, \
             as in llama-quantize){why}",
            names.join(", ")
        )
    })
}

/// How [`requantize`] picks each matrix's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Every quantizable matrix this type (`--quantize`), or llama-quantize's fallback where
    /// its rows are not whole blocks of it.
    Pure(GgmlType),
    /// llama-quantize's mixture for a file type (`kindle quantize --type q4_k_m`): some
    /// matrices get more bits (`kindle_gguf::mix`).
    Mix(FileType),
    /// A file type without its mixture (`kindle quantize --type q4_k_s --pure`): every
    /// matrix its default type, the file named as that file type.
    PureFile(FileType),
}

/// `file` with its weight matrices encoded as `scheme` says: the tensors llama-quantize
/// quantizes (matrices named `*weight`, not norms; `kindle_gguf::mix::is_quantizable`), every
/// other tensor and every metadata entry kept as they are. A matrix already of its new type is
/// copied. With `all`, quantized matrices are re-encoded too (`kindle quantize`, which also
/// sets `general.file_type` and `general.quantization_version` and orders the tensors as
/// llama-quantize does, so the file is its byte for byte); without, only dense ones (`f32`,
/// `f16`, `bf16`: `--quantize`).
pub fn requantize(file: &GgufFile, scheme: Scheme, all: bool) -> Result<GgufWriter> {
    let (ftype, pure) = match scheme {
        Scheme::Pure(ty) => (
            FileType::of_type(ty).with_context(|| format!("{ty}: no file type has it"))?,
            true,
        ),
        Scheme::Mix(ftype) => (ftype, false),
        Scheme::PureFile(ftype) => (ftype, true),
    };
    let facts = ModelFacts::of(file).context("reading the model's architecture")?;
    let types = kindle_gguf::mix::tensor_types(ftype, pure, &facts, file.tensors());
    // llama-quantize stamps ggml's quantization version and the file type, each moved to the
    // end of the metadata (ggml's `gguf_set_val_u32` on a key it has), and writes the tensors
    // in its loader's order: the file is then llama-quantize's byte for byte.
    let stamped = [
        (QUANTIZATION_VERSION_KEY, QUANTIZATION_VERSION),
        (FILE_TYPE_KEY, ftype.id()),
    ];
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata() {
        if !(all && stamped.iter().any(|(k, _)| k == key)) {
            writer = writer.metadata(key.clone(), value.clone());
        }
    }
    if all {
        for (key, value) in stamped {
            writer = writer.metadata(key, MetadataValue::U32(value));
        }
    }
    let order = if all {
        kindle_gguf::mix::llama_order(file.tensors())
    } else {
        (0..file.tensors().len()).collect()
    };
    for (info, to) in order.into_iter().map(|i| (&file.tensors()[i], types[i])) {
        let dense = matches!(info.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let keep = match to {
            None => true,
            Some(to) => to == info.ty || (!all && !dense),
        };
        if keep {
            let bytes = file.tensor_bytes(info).to_vec();
            writer = writer.tensor(info.name.clone(), &info.dims, info.ty, bytes);
            continue;
        }
        let to = to.expect("kept above when None");
        let values = file
            .dequantize(&info.name)
            .with_context(|| format!("reading tensor {}", info.name))?;
        // As llama-quantize (which validates what it writes): a weight that is not a number
        // would make a model that fails at its first token.
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            bail!(
                "tensor {} holds {} at value {at}: not quantizing a broken model",
                info.name,
                values[at]
            );
        }
        let bytes = quantize_rows(to, &values, info.dims[0] as usize)
            .with_context(|| format!("quantizing {}", info.name))?;
        writer = writer.tensor(info.name.clone(), &info.dims, to, bytes);
    }
    Ok(writer)
}

/// `general.file_type`: llama.cpp's `llama_ftype` of the file.
const FILE_TYPE_KEY: &str = "general.file_type";
/// `general.quantization_version`: llama-quantize writes ggml's `GGML_QNT_VERSION`, 2.
const QUANTIZATION_VERSION_KEY: &str = "general.quantization_version";
const QUANTIZATION_VERSION: u32 = 2;

/// [`quantize`] on every core: the rows (`ncols` values each) split into one run per thread
/// (the blocks are independent, so the bytes are those of one call).
fn quantize_rows(ty: GgmlType, values: &[f32], ncols: usize) -> Result<Vec<u8>> {
    let rows = values.len() / ncols.max(1);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(rows.max(1));
    if threads < 2 || values.len() < 1 << 16 {
        return Ok(quantize(ty, values)?);
    }
    let per = rows.div_ceil(threads) * ncols;
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = values
            .chunks(per)
            .map(|part| scope.spawn(move || quantize(ty, part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a quantizing thread panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(parts.concat())
}

/// Open a model file (or Hugging Face directory) and build its tokenizer.
pub fn open(path: &Path) -> Result<Loaded> {
    open_with(path, None)
}

/// [`open`] with the dense weights quantized to `quantize` (see [`open_file_with`]).
pub fn open_with(path: &Path, quantize: Option<GgmlType>) -> Result<Loaded> {
    let file = open_file_with(path, quantize)?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("building the tokenizer of {}", path.display()))?;
    Ok(Loaded { file, tokenizer })
}

/// Load the weights of an opened file onto the device `device` names.
pub fn load_model(loaded: &Loaded, device: &DeviceArgs) -> Result<Engine> {
    load_model_with(loaded, &device.options())
}

/// Load the weights of an opened file as `options` say.
pub fn load_model_with(loaded: &Loaded, options: &EngineOptions) -> Result<Engine> {
    let engine = Engine::load(&loaded.file, options).context("loading the model weights")?;
    check_vocab(engine.llama.config(), &loaded.tokenizer)?;
    Ok(engine)
}

/// The model's embedding must have a row for every token of its tokenizer.
pub fn check_vocab(config: &LlamaConfig, tokenizer: &Tokenizer) -> Result<()> {
    if config.vocab_size < tokenizer.vocab_size() {
        bail!(
            "the tokenizer has {} tokens but the model's embedding has only {} rows",
            tokenizer.vocab_size(),
            config.vocab_size
        );
    }
    Ok(())
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
