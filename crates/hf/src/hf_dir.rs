//! A Hugging Face model directory, and its conversion to GGUF.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kindle_gguf::quant::{QUANTIZE_TYPES, quantize};
use kindle_gguf::{GgmlType, GgufFile, GgufWriter, MetadataValue, WriteError};
use safetensors::Dtype;
use serde_json::Value;

use crate::config::ModelConfig;
use crate::error::{HfError, Result, io_error};
use crate::json::JsonObject;
use crate::names::{self, Transform};
use crate::safetensors_file::{SafetensorsFile, decode_f32};
use crate::vocab_import::{self, TokenizerFiles};
use crate::vocab_spm;

/// How [`HfDir::to_gguf`] writes tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToGgufOptions {
    /// The type of the weight matrices. `None` keeps them: F32 stays F32, F16 stays F16,
    /// BF16 stays BF16 (as llama.cpp's `convert_hf_to_gguf.py --outtype auto`). `Some(t)` (one
    /// of [`QUANTIZE_TYPES`]) encodes every two-dimensional tensor whose rows are whole blocks
    /// of `t` with kindle-gguf's quantizers (others take llama-quantize's fallback type), as
    /// `kindle quantize` does. One-dimensional tensors (norms, biases) are
    /// always F32, as llama.cpp writes them.
    pub tensor_type: Option<GgmlType>,
    /// Write the `tokenizer.*` metadata (from tokenizer.json, or tokenizer.model for
    /// SentencePiece vocabularies); an error when the directory has neither or one that
    /// cannot be converted.
    pub tokenizer: bool,
}

impl Default for ToGgufOptions {
    fn default() -> Self {
        Self {
            tensor_type: None,
            tokenizer: true,
        }
    }
}

/// A Hugging Face model directory: `config.json`, `model.safetensors` or the shards of
/// `model.safetensors.index.json` (memory-mapped and checked), and the tokenizer files.
#[derive(Debug)]
pub struct HfDir {
    dir: PathBuf,
    config: ModelConfig,
    config_json: JsonObject,
    shards: Vec<SafetensorsFile>,
    /// Tensor name → shard index, in the order the tensors were found.
    tensors: Vec<(String, usize)>,
    tokenizer: Option<TokenizerFiles>,
}

impl HfDir {
    /// Opens the directory `dir`: reads config.json (an unknown architecture, a missing key
    /// or a key of the wrong type is an error naming it), maps and checks every shard, reads
    /// the tokenizer files when present.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_owned();
        let config_path = dir.join("config.json");
        let config_json = JsonObject::read(&config_path)?;
        let config = ModelConfig::from_json(&config_json)?;
        let (shards, tensors) = open_weights(&dir)?;
        Ok(Self {
            config,
            config_json,
            shards,
            tensors,
            tokenizer: TokenizerFiles::read(&dir)?,
            dir,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The model's configuration (from config.json).
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The safetensors files.
    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// Whether the directory has a tokenizer.json or a tokenizer.model.
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// The tensor called `name` (Hugging Face name): its shard and entry.
    fn find(&self, name: &str) -> Option<(&SafetensorsFile, &crate::SafetensorsTensor)> {
        let (_, shard) = self.tensors.iter().find(|(n, _)| n == name)?;
        let file = self.shards.get(*shard)?;
        Some((file, file.tensor(name)?))
    }

    /// The model as a GGUF file's contents: `general.architecture`, `{arch}.*` hyperparameters,
    /// the tokenizer metadata (unless `options` says not to), and every tensor under its GGUF
    /// name (llama.cpp's names and transforms).
    pub fn to_gguf(&self, options: &ToGgufOptions) -> Result<GgufWriter> {
        let (mut w, plan) = self.plan(options)?;
        for t in &plan {
            let mut bytes = Vec::with_capacity(t.len);
            self.encode(t, &mut bytes)?;
            w = w.tensor(t.gguf.clone(), &t.dims, t.ty, bytes);
        }
        Ok(w)
    }

    /// The writer with the metadata, and what each tensor becomes (in the file's order),
    /// before any tensor's values are read.
    fn plan(&self, options: &ToGgufOptions) -> Result<(GgufWriter, Vec<PlannedTensor>)> {
        if let Some(t) = options.tensor_type.filter(|t| !QUANTIZE_TYPES.contains(t)) {
            return Err(HfError::Unsupported {
                key: "tensor type".into(),
                reason: format!(
                    "{} is not a type kindle quantizes to ({})",
                    t.name(),
                    QUANTIZE_TYPES
                        .map(|t| t.name().to_ascii_lowercase())
                        .join(", ")
                ),
            });
        }
        let mut meta: Vec<(String, MetadataValue)> = Vec::new();
        let mut arch_meta = self.config.to_metadata().into_iter();
        meta.extend(arch_meta.next());
        if let Some(name) = self.dir.file_name().and_then(|n| n.to_str()) {
            meta.push(("general.name".into(), name.into()));
        }
        meta.extend(arch_meta);
        let tokenizer = if options.tokenizer {
            let files = self.tokenizer.as_ref().ok_or_else(|| {
                HfError::Tokenizer(format!(
                    "{}: no tokenizer.json or tokenizer.model",
                    self.dir.display()
                ))
            })?;
            match &files.model {
                Some(model) if files.is_sentencepiece() => vocab_spm::metadata(
                    files,
                    model,
                    self.config.arch,
                    self.config.vocab_size,
                    Some(&self.config_json),
                )?,
                _ => {
                    vocab_import::metadata(files, self.config.vocab_size, Some(&self.config_json))?
                }
            }
        } else {
            Vec::new()
        };

        let mut named = Vec::new();
        for (name, _) in &self.tensors {
            if let Some((gguf, t)) = names::hf_to_gguf(&self.config, name)? {
                named.push((order_key(&gguf), gguf, name.clone(), t));
            }
        }
        named.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = named.windows(2).find(|w| w[0].1 == w[1].1) {
            return Err(HfError::Unsupported {
                key: w[1].2.clone(),
                reason: format!("`{}` and `{}` both map to `{}`", w[0].2, w[1].2, w[1].1),
            });
        }
        let mut plan = named
            .into_iter()
            .map(|(_, gguf, hf, transform)| self.plan_tensor(hf, gguf, transform, options))
            .collect::<Result<Vec<_>>>()?;
        if let Some(t) = self.rope_freqs() {
            // Where llama.cpp's converter puts it: first (its extra tensors come first).
            let at = plan.partition_point(|p| order_key(&p.gguf) < order_key(&t.gguf));
            plan.insert(at, t);
        }
        let any = |ty: GgmlType| plan.iter().any(|t| t.ty == ty);
        let file_type = match options.tensor_type {
            Some(t) => file_type(t),
            None if any(GgmlType::F16) => 1,
            None if any(GgmlType::BF16) => file_type(GgmlType::BF16),
            None => 0,
        };
        meta.push(("general.file_type".into(), MetadataValue::U32(file_type)));
        meta.extend(tokenizer);
        let mut w = GgufWriter::new();
        for (k, v) in meta {
            w = w.metadata(k, v);
        }
        Ok((w, plan))
    }

    /// Llama 3's `rope_freqs.weight` (`F32`, `head_dim / 2` values), which llama.cpp's
    /// converter computes from a `llama3` `rope_scaling`.
    fn rope_freqs(&self) -> Option<PlannedTensor> {
        let c = &self.config;
        let llama3 = c.rope_scaling.as_ref()?.llama3()?;
        let head_dim = c.head_dim.unwrap_or(c.d_model / c.n_heads.max(1)) as usize;
        let values = llama3.frequency_factors(head_dim, c.rope_theta.unwrap_or(10000.0));
        Some(PlannedTensor {
            hf: String::new(),
            gguf: "rope_freqs.weight".into(),
            transform: Transform::Keep,
            dims: vec![values.len() as u64],
            ty: GgmlType::F32,
            len: 4 * values.len(),
            generated: Some(values),
        })
    }

    /// What tensor `hf` becomes: its GGUF dims after the transform (a transposed weight's
    /// swapped), its type (1-D tensors `F32`; matrices the target type or llama-quantize's
    /// fallback for it, else their own: F16, BF16, or F32) and its length in bytes.
    fn plan_tensor(
        &self,
        hf: String,
        gguf: String,
        transform: Transform,
        options: &ToGgufOptions,
    ) -> Result<PlannedTensor> {
        let (_, info) = self
            .find(&hf)
            .ok_or_else(|| HfError::MissingTensor { tensor: hf.clone() })?;
        let mut shape = info.shape.clone();
        if transform == Transform::Transpose && shape.len() == 2 {
            shape.swap(0, 1);
        }
        let dims: Vec<u64> = shape.iter().rev().copied().collect();
        let ty = if dims.len() < 2 {
            GgmlType::F32
        } else {
            match options.tensor_type {
                // Rows that are not whole blocks: llama-quantize's fallback type.
                Some(t) => kindle_gguf::mix::fallback(t, dims[0]),
                None if info.dtype == Dtype::F16 => GgmlType::F16,
                None if info.dtype == Dtype::BF16 => GgmlType::BF16,
                None => GgmlType::F32,
            }
        };
        let values: u64 = dims.iter().product();
        let len = (values / ty.block_size() as u64 * ty.type_size() as u64) as usize;
        Ok(PlannedTensor {
            hf,
            gguf,
            transform,
            dims,
            ty,
            len,
            generated: None,
        })
    }

    /// Tensor `t`'s bytes appended to `out`: its values as `f32`, the transform, then its
    /// type.
    fn encode(&self, t: &PlannedTensor, out: &mut Vec<u8>) -> Result<()> {
        if let Some(values) = &t.generated {
            out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            return Ok(());
        }
        let (file, info) = self.find(&t.hf).ok_or_else(|| HfError::MissingTensor {
            tensor: t.hf.clone(),
        })?;
        let values = decode_f32(&t.hf, info.dtype, file.data(info))?;
        // Converted: its pages need not stay resident beside the GGUF bytes being built.
        file.release(info);
        let (values, shape) = names::apply(t.transform, false, &t.hf, values, &info.shape)?;
        debug_assert!(shape.iter().rev().eq(&t.dims), "{}: planned dims", t.hf);
        let bytes = quantize(t.ty, &values).map_err(|reason| HfError::Quant {
            tensor: t.gguf.clone(),
            ty: t.ty,
            reason,
        })?;
        if bytes.len() != t.len {
            return Err(HfError::Quant {
                tensor: t.gguf.clone(),
                ty: t.ty,
                reason: kindle_gguf::quant::QuantError::SizeMismatch {
                    ty: t.ty,
                    bytes: bytes.len(),
                    values: values.len(),
                    block: t.ty.block_size(),
                    block_bytes: t.ty.type_size(),
                },
            });
        }
        out.extend_from_slice(&bytes);
        Ok(())
    }

    /// The GGUF file's bytes (see [`to_gguf`](Self::to_gguf)), read back as a [`GgufFile`].
    /// Each tensor is converted straight into the file's bytes (and its safetensors pages
    /// dropped): the tensors are never held twice.
    pub fn to_gguf_file(&self, options: &ToGgufOptions) -> Result<GgufFile> {
        let (mut w, plan) = self.plan(options)?;
        for t in &plan {
            w = w.planned_tensor(t.gguf.clone(), &t.dims, t.ty, t.len);
        }
        let bytes = w.into_bytes_with(|i, out| self.encode(&plan[i], out))?;
        Ok(GgufFile::from_bytes(bytes)?)
    }

    /// Writes the GGUF file to `path`, each tensor converted as the file reaches it (one at a
    /// time in memory), and reads it back to check it ([`GgufWriter::write_checked_with`]).
    pub fn write_gguf(&self, path: impl AsRef<Path>, options: &ToGgufOptions) -> Result<()> {
        let path = path.as_ref();
        let (mut w, plan) = self.plan(options)?;
        for t in &plan {
            w = w.planned_tensor(t.gguf.clone(), &t.dims, t.ty, t.len);
        }
        w.write_checked_with(path, |i, out| self.encode(&plan[i], out))
            .map_err(|e| match e {
                WriteError::Io(e) => io_error(path)(e),
                WriteError::Fill(e) => e,
            })
    }
}

/// What one tensor of the directory becomes in the GGUF file.
struct PlannedTensor {
    /// Its Hugging Face name.
    hf: String,
    /// Its GGUF name.
    gguf: String,
    transform: Transform,
    /// GGUF dims (ggml order).
    dims: Vec<u64>,
    ty: GgmlType,
    /// Its bytes in the file.
    len: usize,
    /// The `F32` values of a tensor the conversion computes (no Hugging Face tensor).
    generated: Option<Vec<f32>>,
}

/// llama.cpp's `LlamaFileType` of a weight type (a K-quant's `_M` mixture's, as llama-quantize
/// names a file of one type).
fn file_type(t: GgmlType) -> u32 {
    kindle_gguf::mix::FileType::of_type(t).map_or(0, |f| f.id())
}

/// Sort key of a GGUF tensor: embeddings, then blocks in order, then the output.
fn order_key(name: &str) -> (u8, u64, String) {
    if let Some(rest) = name.strip_prefix("blk.") {
        let (block, suffix) = rest.split_once('.').unwrap_or((rest, ""));
        return (1, block.parse().unwrap_or(u64::MAX), suffix.to_owned());
    }
    let group = match name {
        n if n.starts_with("output_norm") => 2,
        n if n.starts_with("output") => 3,
        _ => 0,
    };
    (group, 0, name.to_owned())
}

/// Tensor name → index of its shard.
type TensorPlaces = Vec<(String, usize)>;

/// The safetensors files of `dir` and where each tensor is.
fn open_weights(dir: &Path) -> Result<(Vec<SafetensorsFile>, TensorPlaces)> {
    let single = dir.join("model.safetensors");
    let index_path = dir.join("model.safetensors.index.json");
    if !index_path.is_file() {
        if !single.is_file() {
            return Err(HfError::NoWeights {
                dir: dir.to_owned(),
            });
        }
        let file = SafetensorsFile::open(&single)?;
        let tensors = file.tensors().iter().map(|t| (t.name.clone(), 0)).collect();
        return Ok((vec![file], tensors));
    }
    let index = JsonObject::read(&index_path)?;
    let map = index
        .object("weight_map")?
        .ok_or_else(|| index.missing("weight_map"))?;
    let mut shard_of: HashMap<String, usize> = HashMap::new();
    let mut shard_names: Vec<String> = Vec::new();
    let mut tensors = Vec::with_capacity(map.map.len());
    for (tensor, shard) in &map.map {
        let Value::String(shard) = shard else {
            return Err(map.wrong(&format!("weight_map.{tensor}"), "a file name", shard));
        };
        if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
            return Err(map.wrong(
                &format!("weight_map.{tensor}"),
                "a file name in the directory",
                &Value::String(shard.clone()),
            ));
        }
        let next = shard_names.len();
        let i = *shard_of.entry(shard.clone()).or_insert_with(|| {
            shard_names.push(shard.clone());
            next
        });
        tensors.push((tensor.clone(), i));
    }
    let mut files = Vec::with_capacity(shard_names.len());
    for (i, shard) in shard_names.iter().enumerate() {
        let path = dir.join(shard);
        if !path.is_file() {
            let tensor = tensors
                .iter()
                .find(|t| t.1 == i)
                .map(|t| t.0.clone())
                .unwrap_or_default();
            return Err(HfError::MissingShard {
                index: index_path.clone(),
                shard: shard.clone(),
                tensor,
            });
        }
        files.push(SafetensorsFile::open(&path)?);
    }
    for (tensor, i) in &tensors {
        if files[*i].tensor(tensor).is_none() {
            return Err(HfError::TensorNotInShard {
                shard: files[*i].path().to_owned(),
                tensor: tensor.clone(),
            });
        }
    }
    Ok((files, tensors))
}
