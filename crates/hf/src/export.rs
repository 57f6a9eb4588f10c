//! A GGUF file → a Hugging Face model directory.

use std::path::Path;

use kindle_gguf::GgufFile;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::config::ModelConfig;
use crate::error::{HfError, Result, io_error};
use crate::names;
use crate::vocab_export;

/// The dtype of the weights [`write_hf`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfDtype {
    /// 32-bit floats: the dequantised values exactly.
    F32,
    /// IEEE half precision (rounded to nearest even).
    F16,
    /// bfloat16 (rounded to nearest even).
    BF16,
}

impl HfDtype {
    /// The name config.json's `torch_dtype` uses.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
        }
    }

    fn safetensors(self) -> Dtype {
        match self {
            Self::F32 => Dtype::F32,
            Self::F16 => Dtype::F16,
            Self::BF16 => Dtype::BF16,
        }
    }

    fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            Self::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Self::F16 => values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
            Self::BF16 => values
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
        }
    }
}

/// What [`write_hf_with`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HfWriteOptions {
    /// The weights' dtype.
    pub dtype: HfDtype,
    /// Write the tokenizer: tokenizer.json (byte-level BPE) or tokenizer.model
    /// (SentencePiece), tokenizer_config.json and generation_config.json (when the file has
    /// tokenizer metadata; an error, before anything is written, when it cannot be
    /// converted).
    pub tokenizer: bool,
}

/// Writes `file` as a Hugging Face directory in `out_dir` (created if needed): config.json,
/// model.safetensors (every tensor dequantised, un-permuted, GPT-2's Conv1D weights
/// transposed back, Gemma-3's norms minus one, in `dtype`), and the tokenizer files.
///
/// Byte-level BPE vocabularies are written as tokenizer.json, SentencePiece ones (`llama`) as
/// tokenizer.model; another vocabulary is an error before anything is written
/// ([`write_hf_with`] can leave the tokenizer out).
pub fn write_hf(file: &GgufFile, out_dir: impl AsRef<Path>, dtype: HfDtype) -> Result<()> {
    write_hf_with(
        file,
        out_dir,
        &HfWriteOptions {
            dtype,
            tokenizer: true,
        },
    )
}

/// [`write_hf`] with options.
pub fn write_hf_with(
    file: &GgufFile,
    out_dir: impl AsRef<Path>,
    options: &HfWriteOptions,
) -> Result<()> {
    let out_dir = out_dir.as_ref();
    let config = ModelConfig::from_gguf(file)?;
    let with_tokenizer = options.tokenizer && vocab_export::has_vocab(file);
    let tokenizer = if with_tokenizer {
        Some(vocab_export::export(file, config.arch)?)
    } else {
        None
    };

    let dtype = options.dtype;
    let mut tensors: Vec<(String, Vec<u64>, Vec<u8>)> = Vec::with_capacity(file.tensors().len());
    for info in file.tensors() {
        // Llama 3's frequency factors are config.json's `rope_scaling` (checked to be one).
        if info.name == "rope_freqs.weight" {
            continue;
        }
        let (hf, transform) = names::gguf_to_hf(&config, &info.name)?;
        let values = file.dequantize(&info.name)?;
        let shape: Vec<u64> = info.dims.iter().rev().copied().collect();
        let (values, shape) = names::apply(transform, true, &info.name, values, &shape)?;
        tensors.push((hf, shape, dtype.encode(&values)));
    }
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            TensorView::new(dtype.safetensors(), shape, bytes)
                .map(|v| (name.as_str(), v))
                .map_err(|e| HfError::BadShape {
                    tensor: name.clone(),
                    reason: e.to_string(),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = Some(std::collections::HashMap::from([(
        "format".to_owned(),
        "pt".to_owned(),
    )]));

    std::fs::create_dir_all(out_dir).map_err(io_error(out_dir))?;
    let weights = out_dir.join("model.safetensors");
    safetensors::serialize_to_file(views, metadata, &weights).map_err(|source| {
        HfError::Safetensors {
            file: weights.clone(),
            source,
        }
    })?;
    let config_path = out_dir.join("config.json");
    write_json(&config_path, &config.to_json(dtype.torch_name()))?;
    // The safetensors crate persists a temporary file (mode 0600): give the weights the
    // mode `std::fs::write` gave config.json (0666 less the umask).
    let mode = std::fs::metadata(&config_path)
        .map_err(io_error(&config_path))?
        .permissions();
    std::fs::set_permissions(&weights, mode).map_err(io_error(&weights))?;
    if let Some(t) = tokenizer {
        for (name, bytes) in [
            ("tokenizer.json", t.tokenizer_json.map(String::into_bytes)),
            ("tokenizer.model", t.tokenizer_model),
        ] {
            if let Some(bytes) = bytes {
                let path = out_dir.join(name);
                std::fs::write(&path, bytes).map_err(io_error(&path))?;
            }
        }
        write_json(&out_dir.join("tokenizer_config.json"), &t.tokenizer_config)?;
        write_json(
            &out_dir.join("generation_config.json"),
            &t.generation_config,
        )?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| HfError::Json {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    std::fs::write(path, text + "\n").map_err(io_error(path))
}
