//! Building a [`Llama`] from a GGUF file: hyperparameters from the metadata, weights from the
//! tensors, every shape checked against the hyperparameters first.

use burn::prelude::*;
use burn::tensor::{DType, TensorData};

use crate::error::ModelError;
use crate::linear::QLinear;
use crate::llama::{
    ArchSpec, Block, LayerPattern, Llama, LlamaConfig, Norm, NormKind, Parts, Positions,
    RopeOverrides, RopeScaling, RopeScalingKind,
};
use kindle_gguf::GgufFile;
use kindle_kernels::{self, KernelOptions, Kernels, QuantMatrix};

/// The description of `file`'s architecture (`general.architecture`), if the loader runs it
/// (see [`ArchSpec::SUPPORTED`]).
pub fn arch_of(file: &GgufFile) -> Result<&'static ArchSpec, ModelError> {
    let name = file.architecture()?;
    ArchSpec::named(name).ok_or_else(|| ModelError::UnsupportedArchitecture(name.to_string()))
}

/// `file`'s architecture as it runs: [`arch_of`] with what the file's metadata overrides
/// (for local/global layers, `{arch}.attention.sliding_window_pattern` and
/// `{arch}.rope.freq_base_swa`, as llama.cpp reads them).
pub fn arch_spec_of(file: &GgufFile) -> Result<ArchSpec, ModelError> {
    let mut arch = arch_of(file)?.clone();
    let key = |name: &str| format!("{}.{name}", arch.name);
    if let LayerPattern::LocalGlobal {
        period,
        local_rope_theta,
    } = arch.layers
    {
        let pattern_key = key("attention.sliding_window_pattern");
        let period = match file.get(&pattern_key) {
            None => period,
            Some(value) => match value.as_u64() {
                Some(p) if p > 0 => p as usize,
                _ => {
                    return Err(ModelError::Hyperparameter {
                        key: pattern_key,
                        problem: "only a positive period (one global layer every N) is \
                                  supported, not a per-layer list"
                            .into(),
                    });
                }
            },
        };
        let local_rope_theta = file
            .opt_f64(&key("rope.freq_base_swa"))?
            .unwrap_or(local_rope_theta);
        arch.layers = LayerPattern::LocalGlobal {
            period,
            local_rope_theta,
        };
    }
    Ok(arch)
}

impl LlamaConfig {
    /// Read the hyperparameters of a GGUF file of a supported architecture and check them
    /// against the shapes of its tensors.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let config = Self::read_gguf(file)?;
        match config.problems(file).into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(config),
        }
    }

    /// Every reason a GGUF file's model would not load, found without reading its weights:
    /// the architecture, a missing or unreadable hyperparameter, hyperparameters inconsistent
    /// with each other, and then every tensor missing or of the wrong shape. Empty when
    /// [`LlamaConfig::from_gguf`] accepts the file. (When the hyperparameters are inconsistent
    /// with each other, the first such problem is reported and, of the tensors, only the
    /// embedding's shape is checked.)
    pub fn check_gguf(file: &GgufFile) -> Vec<ModelError> {
        match Self::read_gguf(file) {
            Ok(config) => config.problems(file),
            Err(problem) => vec![problem],
        }
    }

    /// The hyperparameters as the file states them, not yet checked.
    fn read_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let spec = arch_of(file)?;
        let arch = spec.name;
        let key = |name: &str| format!("{arch}.{name}");
        let usize_of = |name: &str| -> Result<usize, ModelError> {
            let value = file.get_u64(&key(name))?;
            usize::try_from(value).map_err(|_| ModelError::Hyperparameter {
                key: key(name),
                problem: format!("{value} does not fit in memory"),
            })
        };
        let d_model = usize_of("embedding_length")?;
        let n_heads = usize_of("attention.head_count")?;
        let n_kv_heads = match file.opt_u64(&key("attention.head_count_kv"))? {
            Some(v) => v as usize,
            None => n_heads,
        };
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        // The vocabulary size: the explicit key, else the tokenizer's token list (which the
        // embedding must match, as in llama.cpp), else the embedding's rows.
        let vocab_size = match file.opt_u64(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => match file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(tokens) => tokens.len(),
                None => embd.dims.get(1).copied().unwrap_or(0) as usize,
            },
        };
        let key_length = file
            .opt_u64(&key("attention.key_length"))?
            .map(|k| k as usize);
        if let Some(v) = file.opt_u64(&key("attention.value_length"))?
            && Some(v as usize) != key_length.or_else(|| d_model.checked_div(n_heads))
        {
            return Err(ModelError::Hyperparameter {
                key: key("attention.value_length"),
                problem: format!(
                    "value heads {v} wide, key heads {} wide: only equal widths are supported",
                    key_length.unwrap_or(d_model / n_heads.max(1))
                ),
            });
        }
        // Local layers need their window; llama.cpp would run such a file with every layer
        // global, which gives other numbers than the model was trained for: refuse it.
        let sliding_window = match spec.layers {
            LayerPattern::Uniform => None,
            LayerPattern::LocalGlobal { .. } => {
                let window_key = key("attention.sliding_window");
                match file.opt_u64(&window_key)? {
                    Some(w) => Some(w as usize),
                    None => {
                        return Err(ModelError::Hyperparameter {
                            key: window_key,
                            problem: format!(
                                "missing: a {arch} file states how many positions its local \
                                 (sliding-window) layers see"
                            ),
                        });
                    }
                }
            }
        };
        let n_layers = usize_of("block_count")?;
        // llama.cpp scales Gemma-3 27B's queries (62 layers) by 1 / sqrt(d_model / heads),
        // every other size's by 1 / sqrt(key_length).
        let query_scale = (arch == ArchSpec::GEMMA3.name && n_layers == 62)
            .then(|| 1.0 / (d_model as f64 / n_heads.max(1) as f64).sqrt());
        let config = LlamaConfig {
            vocab_size,
            d_model,
            n_layers,
            n_heads,
            n_kv_heads,
            d_ff: usize_of("feed_forward_length")?,
            rope_theta: file.opt_f64(&key("rope.freq_base"))?.unwrap_or(10000.0),
            // RMSNorm's epsilon, or LayerNorm's (GPT-2), as llama.cpp reads them.
            rms_eps: match spec.norm {
                NormKind::Rms => file.opt_f64(&key("attention.layer_norm_rms_epsilon"))?,
                NormKind::Layer => file.opt_f64(&key("attention.layer_norm_epsilon"))?,
            }
            .unwrap_or(1e-5),
            context_length: usize_of("context_length")?,
            tied_embeddings: file.tensor("output.weight").is_none(),
            key_length,
            sliding_window,
            query_scale,
            rope_scaling: None,
        };
        let rope_scaling = rope_scaling_of(file, spec, config.head_dim(), config.context_length)?;
        Ok(LlamaConfig {
            rope_scaling,
            ..config
        })
    }

    /// What is wrong with these hyperparameters read from `file`: the first inconsistency
    /// between them (with the embedding's shape, which shows a wrong width), else every tensor
    /// problem.
    fn problems(&self, file: &GgufFile) -> Vec<ModelError> {
        match self.validate().and_then(|()| self.check_features(file)) {
            Ok(()) => self.tensor_problems(file),
            Err(problem) => {
                let embedding = [self.d_model as u64, self.vocab_size as u64];
                let embedding = check_shape(file, "token_embd.weight", &embedding).err();
                std::iter::once(problem).chain(embedding).collect()
            }
        }
    }

    /// Partial rotary embeddings, final logit soft-capping and mixtures of experts are not
    /// supported.
    fn check_features(&self, file: &GgufFile) -> Result<(), ModelError> {
        let arch = file.architecture()?;
        let key = |name: &str| format!("{arch}.{name}");
        let config = self;
        if let Some(rope_dim) = file.opt_u64(&key("rope.dimension_count"))?
            && rope_dim as usize != config.head_dim()
        {
            return Err(ModelError::Hyperparameter {
                key: key("rope.dimension_count"),
                problem: format!(
                    "partial rotary embeddings are not supported ({rope_dim} rotated of {} per head)",
                    config.head_dim()
                ),
            });
        }
        if let Some(cap) = file.opt_f64(&key("final_logit_softcapping"))?
            && cap != 0.0
        {
            return Err(ModelError::Hyperparameter {
                key: key("final_logit_softcapping"),
                problem: format!("soft-capping the logits (at {cap}) is not supported"),
            });
        }
        if let Some(count) = file.opt_u64(&key("expert_count"))?
            && count > 0
        {
            return Err(ModelError::Hyperparameter {
                key: key("expert_count"),
                problem: format!("mixture-of-experts models ({count} experts) are not supported"),
            });
        }
        Ok(())
    }

    /// Every tensor missing from `file` or of the wrong shape.
    fn tensor_problems(&self, file: &GgufFile) -> Vec<ModelError> {
        // Every block has nine tensors: a block count beyond the file's tensors is an error
        // before the list of expected tensors is built from it.
        let n_tensors = file.tensors().len();
        if self.n_layers > n_tensors {
            let arch = file.architecture().unwrap_or("llama");
            return vec![ModelError::Hyperparameter {
                key: format!("{arch}.block_count"),
                problem: format!(
                    "{} blocks, but the file holds only {n_tensors} tensors",
                    self.n_layers
                ),
            }];
        }
        let spec = match arch_of(file) {
            Ok(spec) => spec,
            Err(problem) => return vec![problem],
        };
        let expected = self.tensors_of(spec);
        let mut problems: Vec<ModelError> = expected
            .iter()
            .filter_map(|(name, dims)| check_shape(file, name, dims).err())
            .collect();
        // Every tensor of the file is read: the expected ones, and Llama 3's frequency factors
        // (read with the hyperparameters).
        let known: std::collections::HashSet<&str> = expected
            .iter()
            .map(|(name, _)| name.as_str())
            .chain(["rope_freqs.weight"])
            .collect();
        problems.extend(
            file.tensors()
                .iter()
                .filter(|t| !known.contains(t.name.as_str()))
                .map(|t| ModelError::UnexpectedTensor {
                    name: t.name.clone(),
                    arch: spec.name.to_string(),
                }),
        );
        problems
    }

    /// Every tensor a llama-architecture file must hold, with its GGUF dimensions
    /// (`[d_in, d_out]`: the first dimension is the row length).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>)> {
        self.tensors_of(&ArchSpec::LLAMA)
    }

    /// Every tensor a file of architecture `arch` must hold, with its GGUF dimensions
    /// (`[d_in, d_out]`: the first dimension is the row length).
    pub fn tensors_of(&self, arch: &ArchSpec) -> Vec<(String, Vec<u64>)> {
        let shape = self.attention();
        let (d, hd, ff, v) = (
            self.d_model as u64,
            shape.head_dim as u64,
            self.d_ff as u64,
            self.vocab_size as u64,
        );
        let (q, kv) = (shape.q_width() as u64, shape.kv_width() as u64);
        let layer_norm = arch.norm == NormKind::Layer;
        // A norm's weight, and its bias for a LayerNorm.
        let norm = |tensors: &mut Vec<(String, Vec<u64>)>, name: &str, width: u64| {
            tensors.push((format!("{name}.weight"), vec![width]));
            if layer_norm {
                tensors.push((format!("{name}.bias"), vec![width]));
            }
        };
        // A matrix (GGUF dims `[d_in, d_out]`), and its bias when it has one.
        let matrix = |tensors: &mut Vec<(String, Vec<u64>)>, name: &str, dims: [u64; 2], bias| {
            tensors.push((format!("{name}.weight"), dims.to_vec()));
            if bias {
                tensors.push((format!("{name}.bias"), vec![dims[1]]));
            }
        };
        let mut tensors = vec![("token_embd.weight".to_string(), vec![d, v])];
        norm(&mut tensors, "output_norm", d);
        if arch.positions == Positions::Learned {
            let context = self.context_length as u64;
            tensors.push(("position_embd.weight".to_string(), vec![d, context]));
        }
        if !self.tied_embeddings {
            tensors.push(("output.weight".to_string(), vec![d, v]));
        }
        let bias = arch.linear_bias;
        for l in 0..self.n_layers {
            let p = format!("blk.{l}.");
            norm(&mut tensors, &format!("{p}attn_norm"), d);
            if arch.fused_qkv {
                matrix(
                    &mut tensors,
                    &format!("{p}attn_qkv"),
                    [d, q + 2 * kv],
                    arch.qkv_bias,
                );
            } else {
                matrix(&mut tensors, &format!("{p}attn_q"), [d, q], arch.qkv_bias);
                matrix(&mut tensors, &format!("{p}attn_k"), [d, kv], arch.qkv_bias);
                matrix(&mut tensors, &format!("{p}attn_v"), [d, kv], arch.qkv_bias);
            }
            matrix(&mut tensors, &format!("{p}attn_output"), [q, d], bias);
            norm(&mut tensors, &format!("{p}ffn_norm"), d);
            if arch.ffn_gated {
                matrix(&mut tensors, &format!("{p}ffn_gate"), [d, ff], bias);
            }
            matrix(&mut tensors, &format!("{p}ffn_up"), [d, ff], bias);
            matrix(&mut tensors, &format!("{p}ffn_down"), [ff, d], bias);
            if arch.qk_norm {
                tensors.extend([
                    (format!("{p}attn_q_norm.weight"), vec![hd]),
                    (format!("{p}attn_k_norm.weight"), vec![hd]),
                ]);
            }
            if arch.post_norms {
                tensors.extend([
                    (format!("{p}post_attention_norm.weight"), vec![d]),
                    (format!("{p}post_ffw_norm.weight"), vec![d]),
                ]);
            }
        }
        tensors
    }
}

/// How `file`'s model stretches its rotary frequencies, read as llama.cpp reads it:
/// `{arch}.rope.scaling.type` (`none`, `linear` or `yarn`; `linear` when absent),
/// `.factor` (or the older `rope.scale_linear`; absent or 0: 1), `.attn_factor`,
/// `.original_context_length` (YaRN; else the training context), and a llama file's
/// `rope_freqs.weight` (Llama 3's per-pair frequency divisors). `None` when nothing
/// changes the trained frequencies. `longrope`, YaRN's log multiplier (DeepSeek) and
/// frequency factors outside the llama architecture are refused, naming the key.
fn rope_scaling_of(
    file: &GgufFile,
    spec: &ArchSpec,
    head_dim: usize,
    context_length: usize,
) -> Result<Option<RopeScaling>, ModelError> {
    let key = |name: &str| format!("{}.rope.{name}", spec.name);
    let bad = |k: String, problem: String| ModelError::Hyperparameter { key: k, problem };
    let type_key = key("scaling.type");
    let kind = match file.opt_str(&type_key)?.unwrap_or("linear") {
        "none" => RopeScalingKind::None,
        "linear" => RopeScalingKind::Linear,
        "yarn" => RopeScalingKind::Yarn,
        other => {
            return Err(bad(
                type_key,
                format!("rotary scaling `{other}` is not supported (none, linear and yarn are)"),
            ));
        }
    };
    let factor_key = key("scaling.factor");
    let factor = match file.opt_f64(&factor_key)? {
        Some(f) => f,
        None => file.opt_f64(&key("scale_linear"))?.unwrap_or(0.0),
    };
    if !(factor.is_finite() && factor >= 0.0) {
        return Err(bad(
            factor_key,
            format!("must be a positive number, got {factor}"),
        ));
    }
    let factor = if factor == 0.0 { 1.0 } else { factor };
    let attn_key = key("scaling.attn_factor");
    let attn_factor = file.opt_f64(&attn_key)?.unwrap_or(1.0);
    if !(attn_factor.is_finite() && attn_factor > 0.0) {
        return Err(bad(
            attn_key,
            format!("must be a positive number, got {attn_factor}"),
        ));
    }
    let log_key = key("scaling.yarn_log_multiplier");
    if let Some(m) = file.opt_f64(&log_key)?
        && m != 0.0
    {
        return Err(bad(
            log_key,
            format!("YaRN's log multiplier ({m}, DeepSeek's attention scaling) is not supported"),
        ));
    }
    let original_context = match file.opt_u64(&key("scaling.original_context_length"))? {
        Some(n) if n > 0 => n as usize,
        _ => context_length,
    };
    const FREQS: &str = "rope_freqs.weight";
    let freq_factors = match file.tensor(FREQS) {
        None => None,
        Some(_) if spec.name != ArchSpec::LLAMA.name => {
            return Err(bad(
                FREQS.into(),
                format!(
                    "frequency factors are read for llama files only, not {}",
                    spec.name
                ),
            ));
        }
        Some(_) => {
            check_shape(file, FREQS, &[(head_dim / 2) as u64])?;
            let values = file.dequantize(FREQS)?;
            if let Some(v) = values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(bad(
                    FREQS.into(),
                    format!("frequency factors must be positive numbers, one is {v}"),
                ));
            }
            Some(values)
        }
    };
    Ok(RopeScaling {
        kind,
        factor,
        original_context,
        attn_factor,
        freq_factors,
    }
    .normalized())
}

fn check_shape(file: &GgufFile, name: &str, expected: &[u64]) -> Result<(), ModelError> {
    let info = file
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if info.dims != expected {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            expected: expected.to_vec(),
            got: info.dims.clone(),
        });
    }
    Ok(())
}

/// How a model's weight matrices are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// In their GGUF encoding, read in place from the (memory-mapped) file and multiplied by
    /// the CPU kernels of [`kindle_kernels`]. Tensor types without a kernel are dequantised.
    Quantized,
    /// Dequantised to `f32` Burn tensors on the device.
    DenseF32,
    /// Dequantised to `f16` Burn tensors on the device; the matrix products run in `f16`
    /// (activations are cast to `f16` for each product and back to `f32` after it, so norms,
    /// attention and the residual stream stay `f32`).
    DenseF16,
    /// As [`DenseF16`](Self::DenseF16) in `bfloat16`.
    DenseBf16,
}

impl WeightFormat {
    /// The float type of dense weights (`None` for quantized ones).
    pub fn dense_dtype(self) -> Option<DType> {
        match self {
            WeightFormat::Quantized => None,
            WeightFormat::DenseF32 => Some(DType::F32),
            WeightFormat::DenseF16 => Some(DType::F16),
            WeightFormat::DenseBf16 => Some(DType::BF16),
        }
    }

    /// The natural format for `device`: quantized on CPU backends (flex, ndarray), where
    /// the fused kernels beat an `f32` matmul, dense elsewhere.
    // burn-ndarray is deprecated in Burn, but it is still a CPU backend kindle can run on.
    #[allow(deprecated)]
    pub fn for_device(device: &Device) -> Self {
        if crate::device::is_host_device(device) {
            WeightFormat::Quantized
        } else {
            WeightFormat::DenseF32
        }
    }
}

/// Options for [`Llama::from_gguf_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadOptions {
    /// How the weight matrices (and the token embedding) are held.
    pub weights: WeightFormat,
    /// How quantized weights are multiplied (threads, activation format): the model holds
    /// the resulting [`Kernels`] ([`Llama::kernels`]).
    pub kernels: KernelOptions,
    /// Rotary settings over the file's ([`LlamaConfig::with_rope_overrides`]).
    pub rope: RopeOverrides,
}

impl LoadOptions {
    /// Weights held as `weights`, the default kernel options.
    pub fn new(weights: WeightFormat) -> Self {
        LoadOptions {
            weights,
            kernels: KernelOptions::default(),
            rope: RopeOverrides::default(),
        }
    }

    /// The defaults for `device` (see [`WeightFormat::for_device`]).
    pub fn for_device(device: &Device) -> Self {
        LoadOptions::new(WeightFormat::for_device(device))
    }

    /// The same options with the kernels' threads and activations as `kernels` says.
    pub fn with_kernels(self, kernels: KernelOptions) -> Self {
        LoadOptions { kernels, ..self }
    }

    /// The same options with rotary settings `rope` over the file's.
    pub fn with_rope(self, rope: RopeOverrides) -> Self {
        LoadOptions { rope, ..self }
    }
}

/// Dequantise tensor `name` into a Burn tensor of the given (row-major) shape.
fn load<const D: usize>(
    file: &GgufFile,
    name: &str,
    shape: [usize; D],
    device: &Device,
) -> Result<Tensor<D>, ModelError> {
    let values = file.dequantize(name)?;
    Ok(Tensor::from_data(TensorData::new(values, shape), device))
}

/// The `[d_out, d_in]` matrix `name` as a layer in `format` (shape checked by the config).
fn load_linear(
    file: &GgufFile,
    name: &str,
    [d_out, d_in]: [usize; 2],
    format: WeightFormat,
    device: &Device,
) -> Result<QLinear, ModelError> {
    load_rows(file, name, 0..d_out, d_in, format, device)
}

/// Rows `rows` of the matrix `name` (rows of `d_in` values) as a layer in `format`: a fused
/// matrix's part (GPT-2's q, k and v). Quantized rows are read in place.
fn load_rows(
    file: &GgufFile,
    name: &str,
    rows: std::ops::Range<usize>,
    d_in: usize,
    format: WeightFormat,
    device: &Device,
) -> Result<QLinear, ModelError> {
    let info = file
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if format == WeightFormat::Quantized && kindle_kernels::supports(info.ty) {
        // Rows of whole blocks lie one after another: the part is a range of the tensor's
        // bytes. The shape was checked against the hyperparameters, so this cannot fail; fall
        // back to a dense weight all the same rather than panic.
        let row_bytes = (d_in / info.ty.block_size() * info.ty.type_size()) as u64;
        let part = kindle_gguf::TensorInfo {
            name: info.name.clone(),
            dims: vec![d_in as u64, rows.len() as u64],
            ty: info.ty,
            offset: info.offset + rows.start as u64 * row_bytes,
        };
        if let Ok(matrix) = QuantMatrix::from_gguf(file, &part)
            && matrix.rows() == rows.len()
            && matrix.cols() == d_in
        {
            return Ok(QLinear::quantized(matrix));
        }
    }
    let dtype = format.dense_dtype().unwrap_or(DType::F32);
    let mut values = file.dequantize(name)?;
    if values.len() < rows.end * d_in {
        return Err(ModelError::MissingTensor(format!(
            "{name} (rows {rows:?} of {d_in} values)"
        )));
    }
    values.truncate(rows.end * d_in);
    values.drain(..rows.start * d_in);
    let data = TensorData::new(values, [rows.len(), d_in]);
    Ok(QLinear::dense_from_data(data, device, dtype))
}

/// Part `range` of the vector `name`.
fn load_part(
    file: &GgufFile,
    name: &str,
    range: std::ops::Range<usize>,
    device: &Device,
) -> Result<Tensor<1>, ModelError> {
    let mut values = file.dequantize(name)?;
    if values.len() < range.end {
        return Err(ModelError::MissingTensor(format!(
            "{name} (values {range:?})"
        )));
    }
    values.truncate(range.end);
    values.drain(..range.start);
    let len = values.len();
    Ok(Tensor::from_data(TensorData::new(values, [len]), device))
}

impl Llama {
    /// Load a llama-architecture model from a GGUF file onto `device`, with the weight format
    /// natural for the device ([`LoadOptions::for_device`]): quantized weights read in place
    /// from the file on CPU backends, `f32` tensors elsewhere.
    pub fn from_gguf(file: &GgufFile, device: &Device) -> Result<Self, ModelError> {
        Self::from_gguf_with(file, device, LoadOptions::for_device(device))
    }

    /// Load a llama-architecture model from a GGUF file onto an opened device, holding the
    /// weights as that device does (quantized on the host, dense in its float type elsewhere).
    pub fn load(file: &GgufFile, device: &crate::device::OpenDevice) -> Result<Self, ModelError> {
        Self::from_gguf_with(file, &device.device, device.load_options())
    }

    /// Load a model of a supported architecture ([`ArchSpec::SUPPORTED`]) from a GGUF file
    /// onto `device` as `options` say.
    ///
    /// Quantized weights keep the file's storage (its memory map) alive through shared
    /// handles, so `file` may be dropped afterwards.
    pub fn from_gguf_with(
        file: &GgufFile,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Self, ModelError> {
        let arch = arch_spec_of(file)?;
        let config = LlamaConfig::from_gguf(file)?.with_rope_overrides(&options.rope)?;
        let shape = config.attention();
        let (d, ff, q, kv) = (
            config.d_model,
            config.d_ff,
            shape.q_width(),
            shape.kv_width(),
        );
        let format = options.weights;
        // The matrix `{name}.weight` (`[d_out, d_in]`), with `{name}.bias` when `bias`.
        let linear = |name: &str, d_out: usize, d_in: usize, bias: bool| {
            let layer = load_linear(
                file,
                &format!("{name}.weight"),
                [d_out, d_in],
                format,
                device,
            )?;
            if !bias {
                return Ok::<_, ModelError>(layer);
            }
            Ok(layer.with_bias(load(file, &format!("{name}.bias"), [d_out], device)?))
        };
        // The norm `{name}` (`.weight`, and `.bias` for a LayerNorm).
        let norm_of = |name: &str, width: usize| -> Result<Norm, ModelError> {
            let gamma = load(file, &format!("{name}.weight"), [width], device)?;
            Ok(match arch.norm {
                NormKind::Rms => Norm::new(gamma, config.rms_eps),
                NormKind::Layer => {
                    let beta = load(file, &format!("{name}.bias"), [width], device)?;
                    Norm::layer_norm(gamma, beta, config.rms_eps)
                }
            })
        };
        let norm = |name: &str| norm_of(name, d);
        // q, k and v: their own matrices, or rows of the fused `attn_qkv` (q, then k, then v).
        let qkv = |p: &str| -> Result<[QLinear; 3], ModelError> {
            if !arch.fused_qkv {
                return Ok([
                    linear(&format!("{p}attn_q"), q, d, arch.qkv_bias)?,
                    linear(&format!("{p}attn_k"), kv, d, arch.qkv_bias)?,
                    linear(&format!("{p}attn_v"), kv, d, arch.qkv_bias)?,
                ]);
            }
            let name = format!("{p}attn_qkv");
            let part = |rows: std::ops::Range<usize>| {
                let w = format!("{name}.weight");
                let layer = load_rows(file, &w, rows.clone(), d, format, device)?;
                if !arch.qkv_bias {
                    return Ok::<_, ModelError>(layer);
                }
                Ok(layer.with_bias(load_part(file, &format!("{name}.bias"), rows, device)?))
            };
            Ok([part(0..q)?, part(q..q + kv)?, part(q + kv..q + 2 * kv)?])
        };
        let bias = arch.linear_bias;
        let mut layers = Vec::with_capacity(config.n_layers);
        for l in 0..config.n_layers {
            let p = format!("blk.{l}.");
            let [wq, wk, wv] = qkv(&p)?;
            let wo = linear(&format!("{p}attn_output"), d, q, bias)?;
            let (attn_norm, ffn_norm) = (
                norm(&format!("{p}attn_norm"))?,
                norm(&format!("{p}ffn_norm"))?,
            );
            let w_up = linear(&format!("{p}ffn_up"), ff, d, bias)?;
            let w_down = linear(&format!("{p}ffn_down"), d, ff, bias)?;
            let mut block = if arch.ffn_gated {
                let w_gate = linear(&format!("{p}ffn_gate"), ff, d, bias)?;
                Block::new(attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down)
            } else {
                Block::sequential(attn_norm, wq, wk, wv, wo, ffn_norm, w_up, w_down)
            };
            if arch.qk_norm {
                block = block.with_qk_norms(
                    norm_of(&format!("{p}attn_q_norm"), shape.head_dim)?,
                    norm_of(&format!("{p}attn_k_norm"), shape.head_dim)?,
                );
            }
            if arch.post_norms {
                block = block.with_post_norms(
                    norm(&format!("{p}post_attention_norm"))?,
                    norm(&format!("{p}post_ffw_norm"))?,
                );
            }
            layers.push(block);
        }
        let embedding = linear("token_embd", config.vocab_size, d, false)?;
        let output = if config.tied_embeddings {
            None
        } else {
            Some(linear("output", config.vocab_size, d, false)?)
        };
        let positions = match arch.positions {
            Positions::Rotary => None,
            Positions::Learned => Some(linear("position_embd", config.context_length, d, false)?),
        };
        let parts = Parts {
            norm: norm("output_norm")?,
            config,
            arch,
            embedding,
            layers,
            output,
            positions,
        };
        Ok(Llama::assemble(parts, Kernels::new(options.kernels)))
    }
}

impl crate::device::OpenDevice {
    /// How the weights are held on this device: quantized on the host, dense in `dtype`
    /// elsewhere.
    pub fn load_options(&self) -> LoadOptions {
        let weights = match (self.kind.is_host(), self.dtype) {
            (true, _) => WeightFormat::Quantized,
            (false, crate::device::Dtype::F32) => WeightFormat::DenseF32,
            (false, crate::device::Dtype::F16) => WeightFormat::DenseF16,
            (false, crate::device::Dtype::Bf16) => WeightFormat::DenseBf16,
        };
        LoadOptions::new(weights)
    }
}
