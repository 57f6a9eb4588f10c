//! `config.json` ⇄ GGUF `{arch}.*` metadata, with the keys llama.cpp's converter writes.

use std::path::Path;

use kindle_gguf::{GgufFile, MetadataValue};
use serde_json::{Value, json};

use crate::error::{HfError, Result};
use crate::json::{JsonObject, f32_number};
use crate::rope::Llama3Scaling;

/// An architecture kindle converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `LlamaForCausalLM`, `MistralForCausalLM` → GGUF `llama` (q/k rows permuted).
    Llama,
    /// `Qwen2ForCausalLM` → GGUF `qwen2` (q/k/v biases).
    Qwen2,
    /// `Qwen3ForCausalLM` → GGUF `qwen3` (per-head q/k RMSNorms, no biases, the head width
    /// stated).
    Qwen3,
    /// `GPT2LMHeadModel` → GGUF `gpt2` (fused q|k|v, Conv1D weights transposed).
    Gpt2,
    /// `Gemma3ForCausalLM`, `Gemma3ForConditionalGeneration` (its text model) → GGUF
    /// `gemma3` (norm weights stored plus one).
    Gemma3,
}

/// The `architectures[0]` values kindle converts, and their GGUF architecture.
pub const SUPPORTED_ARCHITECTURES: [(&str, Arch); 7] = [
    ("LlamaForCausalLM", Arch::Llama),
    ("MistralForCausalLM", Arch::Llama),
    ("Qwen2ForCausalLM", Arch::Qwen2),
    ("Qwen3ForCausalLM", Arch::Qwen3),
    ("GPT2LMHeadModel", Arch::Gpt2),
    ("Gemma3ForCausalLM", Arch::Gemma3),
    ("Gemma3ForConditionalGeneration", Arch::Gemma3),
];

impl Arch {
    /// The GGUF `general.architecture` name.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gpt2 => "gpt2",
            Self::Gemma3 => "gemma3",
        }
    }

    /// The architecture of a GGUF `general.architecture` name.
    pub fn from_gguf_name(name: &str) -> Result<Self> {
        const ALL: [Arch; 5] = [
            Arch::Llama,
            Arch::Qwen2,
            Arch::Qwen3,
            Arch::Gpt2,
            Arch::Gemma3,
        ];
        ALL.into_iter()
            .find(|a| a.gguf_name() == name)
            .ok_or_else(|| HfError::UnsupportedArchitecture {
                name: name.to_owned(),
                supported: ALL.iter().map(|a| a.gguf_name()).collect(),
            })
    }

    /// The class name written to `config.json` and its `model_type`.
    fn hf_names(self) -> (&'static str, &'static str) {
        match self {
            Self::Llama => ("LlamaForCausalLM", "llama"),
            Self::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
            Self::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
            Self::Gpt2 => ("GPT2LMHeadModel", "gpt2"),
            Self::Gemma3 => ("Gemma3ForCausalLM", "gemma3_text"),
        }
    }
}

/// Rotary scaling (`rope_scaling` in config.json, `rope.scaling.*` in GGUF).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling {
    /// `linear`, `yarn` or `llama3` (Llama 3.1 and later: frequency factors, which a GGUF
    /// file holds as the `rope_freqs.weight` tensor, not as keys).
    pub kind: String,
    /// The factor.
    pub factor: f64,
    /// The original context length (yarn, llama3).
    pub original_context_length: Option<u64>,
    /// `low_freq_factor` (llama3).
    pub low_freq_factor: Option<f64>,
    /// `high_freq_factor` (llama3).
    pub high_freq_factor: Option<f64>,
}

impl RopeScaling {
    /// The `llama3` scaling's parameters, if it is one.
    pub fn llama3(&self) -> Option<Llama3Scaling> {
        let d = Llama3Scaling::default();
        (self.kind == "llama3").then(|| Llama3Scaling {
            factor: self.factor,
            low_freq_factor: self.low_freq_factor.unwrap_or(d.low_freq_factor),
            high_freq_factor: self.high_freq_factor.unwrap_or(d.high_freq_factor),
            original_context: self.original_context_length.unwrap_or(d.original_context),
        })
    }

    /// The `llama3` scaling whose frequency factors (`rope_freqs.weight`) are `factors`, for
    /// heads `head_dim` wide and base `theta`: the converter's defaults with the factors'
    /// last value as the factor (Llama 3.1's 8, 3.2's 32), if they give the same factors
    /// (to 1e-5: the converter computes them with torch's `pow`).
    fn llama3_of(factors: &[f32], head_dim: usize, theta: f64) -> Option<RopeScaling> {
        let scaling = Llama3Scaling {
            factor: f64::from(*factors.last()?),
            ..Llama3Scaling::default()
        };
        let again = scaling.frequency_factors(head_dim, theta);
        let same = again.len() == factors.len()
            && again
                .iter()
                .zip(factors)
                .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs());
        same.then(|| RopeScaling {
            kind: "llama3".into(),
            factor: scaling.factor,
            original_context_length: Some(scaling.original_context),
            low_freq_factor: Some(scaling.low_freq_factor),
            high_freq_factor: Some(scaling.high_freq_factor),
        })
    }
}

/// The hyperparameters of a model, as both formats hold them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The architecture.
    pub arch: Arch,
    /// Width of the residual stream.
    pub d_model: u64,
    /// Number of blocks.
    pub n_layers: u64,
    /// Query heads.
    pub n_heads: u64,
    /// Key/value heads.
    pub n_kv_heads: u64,
    /// Width of the feed-forward layer.
    pub d_ff: u64,
    /// Context length.
    pub context_length: u64,
    /// Vocabulary size (`None`: not stated).
    pub vocab_size: Option<u64>,
    /// Width of a head when it is not `d_model / n_heads` (or stated anyway).
    pub head_dim: Option<u64>,
    /// Rotary base (not GPT-2).
    pub rope_theta: Option<f64>,
    /// The norm epsilon (RMS norm; layer norm for GPT-2).
    pub norm_eps: f64,
    /// Whether the output head is the token embedding.
    pub tied_embeddings: bool,
    /// Sliding window of local layers (Gemma-3), or of every layer.
    pub sliding_window: Option<u64>,
    /// Rotary base of local layers (Gemma-3 `rope_local_base_freq`).
    pub rope_local_theta: Option<f64>,
    /// One global layer every this many (Gemma-3 `sliding_window_pattern`).
    pub sliding_window_pattern: Option<u64>,
    /// Final logit soft-capping (Gemma-3).
    pub final_logit_softcapping: Option<f64>,
    /// Queries scaled by `1/sqrt(this)` (Gemma-3; GGUF has no key: kindle's loader uses the
    /// head width, and llama.cpp's rule for the 27B model).
    pub query_pre_attn_scalar: Option<f64>,
    /// Rotary scaling.
    pub rope_scaling: Option<RopeScaling>,
    /// BOS id from config.json (used for generation_config.json).
    pub bos_token_id: Option<u64>,
    /// EOS id from config.json.
    pub eos_token_id: Option<u64>,
}

impl ModelConfig {
    /// Reads `config.json` at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        Self::from_json(&JsonObject::read(path)?)
    }

    /// Parses the text of a `config.json` (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        Self::from_json(&JsonObject::parse(path, text)?)
    }

    pub(crate) fn from_json(top: &JsonObject) -> Result<Self> {
        let archs = top
            .map
            .get("architectures")
            .ok_or_else(|| top.missing("architectures"))?;
        let name = archs
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .ok_or_else(|| top.wrong("architectures", "a list of class names", archs))?;
        let (class, arch) = SUPPORTED_ARCHITECTURES
            .iter()
            .find(|(n, _)| *n == name)
            .copied()
            .ok_or_else(|| HfError::UnsupportedArchitecture {
                name: name.to_owned(),
                supported: SUPPORTED_ARCHITECTURES.iter().map(|(n, _)| *n).collect(),
            })?;
        let text;
        let c = if class == "Gemma3ForConditionalGeneration" {
            text = top
                .object("text_config")?
                .ok_or_else(|| top.missing("text_config"))?;
            &text
        } else {
            top
        };
        if arch == Arch::Gpt2 {
            return gpt2_from_json(c);
        }
        let gemma = arch == Arch::Gemma3;
        // Gemma-3's text configs leave keys at their defaults (llama.cpp's converter too).
        let or_gemma = |v: Option<u64>, key: &str, default: u64| match v {
            Some(v) => Ok(v),
            None if gemma => Ok(default),
            None => Err(c.missing(key)),
        };
        let n_heads = or_gemma(c.opt_u64("num_attention_heads")?, "num_attention_heads", 8)?;
        let n_kv_heads = match c.opt_u64("num_key_value_heads")? {
            Some(v) => v,
            None if gemma => 4,
            None => n_heads,
        };
        let rope_scaling = rope_scaling(c)?;
        if let Some(s) = rope_scaling.as_ref().filter(|s| s.llama3().is_some())
            && arch != Arch::Llama
        {
            return Err(HfError::Unsupported {
                key: "rope_scaling.rope_type".into(),
                reason: format!(
                    "`{}` scaling is converted for Llama models only (llama.cpp's converter \
                     writes its frequency factors for them), not {}",
                    s.kind,
                    arch.gguf_name()
                ),
            });
        }
        let rope_theta = c
            .opt_f64("rope_theta")?
            .or(gemma.then_some(1_000_000.0))
            .or(Some(10_000.0));
        let sliding_window_pattern = if gemma { gemma_pattern(c)? } else { None };
        let use_window = c.opt_bool("use_sliding_window")?.unwrap_or(gemma);
        Ok(Self {
            arch,
            d_model: c.u64("hidden_size")?,
            n_layers: c.u64("num_hidden_layers")?,
            n_heads,
            n_kv_heads,
            d_ff: c.u64("intermediate_size")?,
            context_length: or_gemma(
                c.opt_u64("max_position_embeddings")?,
                "max_position_embeddings",
                131_072,
            )?,
            vocab_size: c.opt_u64("vocab_size")?.or(gemma.then_some(262_208)),
            head_dim: c.opt_u64("head_dim")?.or(gemma.then_some(256)),
            rope_theta,
            norm_eps: c
                .opt_f64("rms_norm_eps")?
                .or(gemma.then_some(1e-6))
                .ok_or_else(|| c.missing("rms_norm_eps"))?,
            tied_embeddings: c
                .opt_bool("tie_word_embeddings")?
                .or(top.opt_bool("tie_word_embeddings")?)
                .unwrap_or(gemma),
            sliding_window: if use_window {
                c.opt_u64("sliding_window")?
            } else {
                None
            },
            rope_local_theta: c.opt_f64("rope_local_base_freq")?,
            sliding_window_pattern,
            final_logit_softcapping: c.opt_f64("final_logit_softcapping")?,
            query_pre_attn_scalar: c.opt_f64("query_pre_attn_scalar")?,
            rope_scaling,
            bos_token_id: token_id(c, "bos_token_id")?.or(token_id(top, "bos_token_id")?),
            eos_token_id: token_id(c, "eos_token_id")?.or(token_id(top, "eos_token_id")?),
        })
    }

    /// The GGUF metadata (`general.architecture` and `{arch}.*`), with llama.cpp's types.
    pub fn to_metadata(&self) -> Vec<(String, MetadataValue)> {
        let arch = self.arch.gguf_name();
        let mut out: Vec<(String, MetadataValue)> =
            vec![("general.architecture".into(), arch.into())];
        let mut put = |key: &str, v: MetadataValue| out.push((format!("{arch}.{key}"), v));
        let u32_of = |v: u64| MetadataValue::U32(u32::try_from(v).unwrap_or(u32::MAX));
        let f32_of = |v: f64| MetadataValue::F32(v as f32);
        put("block_count", u32_of(self.n_layers));
        put("context_length", u32_of(self.context_length));
        put("embedding_length", u32_of(self.d_model));
        put("feed_forward_length", u32_of(self.d_ff));
        put("attention.head_count", u32_of(self.n_heads));
        if self.arch == Arch::Gpt2 {
            put("attention.layer_norm_epsilon", f32_of(self.norm_eps));
            return out;
        }
        put("attention.head_count_kv", u32_of(self.n_kv_heads));
        if let Some(theta) = self.rope_theta {
            put("rope.freq_base", f32_of(theta));
        }
        if let Some(theta) = self.rope_local_theta {
            put("rope.freq_base_swa", f32_of(theta));
        }
        put("attention.layer_norm_rms_epsilon", f32_of(self.norm_eps));
        if let Some(d) = self.head_dim {
            put("attention.key_length", u32_of(d));
            put("attention.value_length", u32_of(d));
        }
        if self.arch == Arch::Llama {
            if let Some(v) = self.vocab_size {
                put("vocab_size", u32_of(v));
            }
            let rope_dim = self.head_dim.unwrap_or(self.d_model / self.n_heads.max(1));
            put("rope.dimension_count", u32_of(rope_dim));
        }
        if let Some(w) = self.sliding_window {
            put("attention.sliding_window", u32_of(w));
        }
        if let Some(p) = self.sliding_window_pattern {
            put("attention.sliding_window_pattern", u32_of(p));
        }
        if let Some(cap) = self.final_logit_softcapping {
            put("final_logit_softcapping", f32_of(cap));
        }
        // Llama 3's scaling is the `rope_freqs.weight` tensor, not keys (as llama.cpp's
        // converter writes it).
        if let Some(s) = self.rope_scaling.as_ref().filter(|s| s.llama3().is_none()) {
            put("rope.scaling.type", s.kind.as_str().into());
            put("rope.scaling.factor", f32_of(s.factor));
            if let Some(n) = s.original_context_length {
                put("rope.scaling.original_context_length", u32_of(n));
            }
        }
        out
    }

    /// The configuration in a GGUF file's metadata; `vocab_size` from the tokens or the
    /// embedding, `tied_embeddings` from the absence of `output.weight`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch = Arch::from_gguf_name(file.architecture()?)?;
        let name = arch.gguf_name();
        let key = |k: &str| format!("{name}.{k}");
        let u = |k: &str| file.get_u64(&key(k));
        let f32_back = |v: Option<f64>| v.map(|v| f64::from(v as f32));
        let n_heads = u("attention.head_count")?;
        let d_model = u("embedding_length")?;
        let vocab_size = match file.tensor("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => Some(t.dims[1]),
            _ => file
                .opt_array("tokenizer.ggml.tokens")?
                .map(|a| a.len() as u64),
        };
        let norm_eps = if arch == Arch::Gpt2 {
            file.get_f64(&key("attention.layer_norm_epsilon"))?
        } else {
            file.get_f64(&key("attention.layer_norm_rms_epsilon"))?
        };
        let rope_scaling = match file.opt_str(&key("rope.scaling.type"))? {
            Some(kind) if kind != "none" => Some(RopeScaling {
                kind: kind.to_owned(),
                factor: file.get_f64(&key("rope.scaling.factor"))?,
                original_context_length: file
                    .opt_u64(&key("rope.scaling.original_context_length"))?,
                low_freq_factor: None,
                high_freq_factor: None,
            }),
            _ => None,
        };
        let rope_scaling = match file.tensor("rope_freqs.weight") {
            None => rope_scaling,
            Some(_) => {
                let factors = file.dequantize("rope_freqs.weight")?;
                let head_dim = match file.opt_u64(&key("attention.key_length"))? {
                    Some(k) => k,
                    None => d_model / n_heads.max(1),
                } as usize;
                let theta = file.opt_f64(&key("rope.freq_base"))?.unwrap_or(10000.0);
                let llama3 = RopeScaling::llama3_of(&factors, head_dim, theta);
                match (rope_scaling, llama3) {
                    (None, Some(llama3)) => Some(llama3),
                    _ => {
                        return Err(HfError::Unsupported {
                            key: "rope_freqs.weight".into(),
                            reason: "these rotary frequency factors are not a Llama 3 \
                                     `rope_scaling` (factor, low_freq_factor 1, high_freq_factor \
                                     4, original context 8192) that config.json can state"
                                .into(),
                        });
                    }
                }
            }
        };
        Ok(Self {
            arch,
            d_model,
            n_layers: u("block_count")?,
            n_heads,
            n_kv_heads: file
                .opt_u64(&key("attention.head_count_kv"))?
                .unwrap_or(n_heads),
            d_ff: u("feed_forward_length")?,
            context_length: u("context_length")?,
            vocab_size,
            head_dim: file.opt_u64(&key("attention.key_length"))?,
            rope_theta: f32_back(file.opt_f64(&key("rope.freq_base"))?),
            norm_eps: f64::from(norm_eps as f32),
            tied_embeddings: file.tensor("output.weight").is_none(),
            sliding_window: file.opt_u64(&key("attention.sliding_window"))?,
            rope_local_theta: f32_back(file.opt_f64(&key("rope.freq_base_swa"))?),
            sliding_window_pattern: file.opt_u64(&key("attention.sliding_window_pattern"))?,
            final_logit_softcapping: f32_back(file.opt_f64(&key("final_logit_softcapping"))?),
            query_pre_attn_scalar: None,
            rope_scaling,
            bos_token_id: file.opt_u64("tokenizer.ggml.bos_token_id")?,
            eos_token_id: file.opt_u64("tokenizer.ggml.eos_token_id")?,
        })
    }

    /// The `config.json` a Hugging Face loader reads; `torch_dtype` names the weights' dtype.
    pub fn to_json(&self, torch_dtype: &str) -> Value {
        let (class, model_type) = self.arch.hf_names();
        let num = |v: f64| f32_number(v as f32);
        let mut c = if self.arch == Arch::Gpt2 {
            json!({
                "n_embd": self.d_model,
                "n_layer": self.n_layers,
                "n_head": self.n_heads,
                "n_positions": self.context_length,
                "n_ctx": self.context_length,
                "n_inner": self.d_ff,
                "layer_norm_epsilon": num(self.norm_eps),
                "activation_function": "gelu_new",
            })
        } else {
            json!({
                "hidden_size": self.d_model,
                "intermediate_size": self.d_ff,
                "num_hidden_layers": self.n_layers,
                "num_attention_heads": self.n_heads,
                "num_key_value_heads": self.n_kv_heads,
                "max_position_embeddings": self.context_length,
                "rms_norm_eps": num(self.norm_eps),
            })
        };
        let obj = c.as_object_mut().expect("built as an object");
        obj.insert("architectures".into(), json!([class]));
        obj.insert("model_type".into(), json!(model_type));
        obj.insert("torch_dtype".into(), json!(torch_dtype));
        obj.insert("tie_word_embeddings".into(), json!(self.tied_embeddings));
        let mut set = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                obj.insert(k.into(), v);
            }
        };
        set("vocab_size", self.vocab_size.map(Value::from));
        set("bos_token_id", self.bos_token_id.map(Value::from));
        set("eos_token_id", self.eos_token_id.map(Value::from));
        if self.arch == Arch::Gpt2 {
            return c;
        }
        set("rope_theta", self.rope_theta.map(num));
        set("head_dim", self.head_dim.map(Value::from));
        let hidden_act = if self.arch == Arch::Gemma3 {
            set("hidden_activation", Some(json!("gelu_pytorch_tanh")));
            set(
                "query_pre_attn_scalar",
                self.query_pre_attn_scalar
                    .map(num)
                    .or(self.head_dim.map(Value::from)),
            );
            set("rope_local_base_freq", self.rope_local_theta.map(num));
            set(
                "sliding_window_pattern",
                self.sliding_window_pattern.map(Value::from),
            );
            set(
                "final_logit_softcapping",
                Some(self.final_logit_softcapping.map_or(Value::Null, num)),
            );
            "gelu_pytorch_tanh"
        } else {
            "silu"
        };
        set("hidden_act", Some(json!(hidden_act)));
        set("sliding_window", self.sliding_window.map(Value::from));
        if matches!(self.arch, Arch::Qwen2 | Arch::Qwen3) {
            set(
                "use_sliding_window",
                Some(json!(self.sliding_window.is_some())),
            );
        }
        let scaling = self.rope_scaling.as_ref().map(|s| {
            let mut v = json!({ "rope_type": s.kind, "type": s.kind, "factor": num(s.factor) });
            if let Some(n) = s.original_context_length {
                v["original_max_position_embeddings"] = json!(n);
            }
            if let Some(l3) = s.llama3() {
                v["low_freq_factor"] = num(l3.low_freq_factor);
                v["high_freq_factor"] = num(l3.high_freq_factor);
            }
            v
        });
        set("rope_scaling", Some(scaling.unwrap_or(Value::Null)));
        c
    }
}

fn gpt2_from_json(c: &JsonObject) -> Result<ModelConfig> {
    let d_model = c.u64("n_embd")?;
    Ok(ModelConfig {
        arch: Arch::Gpt2,
        d_model,
        n_layers: c.u64("n_layer")?,
        n_heads: c.u64("n_head")?,
        n_kv_heads: c.u64("n_head")?,
        d_ff: c.opt_u64("n_inner")?.unwrap_or(4 * d_model),
        context_length: c.u64_of(&["n_positions", "n_ctx"])?,
        vocab_size: c.opt_u64("vocab_size")?,
        head_dim: None,
        rope_theta: None,
        norm_eps: c.opt_f64("layer_norm_epsilon")?.unwrap_or(1e-5),
        tied_embeddings: c.opt_bool("tie_word_embeddings")?.unwrap_or(true),
        sliding_window: None,
        rope_local_theta: None,
        sliding_window_pattern: None,
        final_logit_softcapping: None,
        query_pre_attn_scalar: None,
        rope_scaling: None,
        bos_token_id: token_id(c, "bos_token_id")?,
        eos_token_id: token_id(c, "eos_token_id")?,
    })
}

/// A token id key: an integer, or a list whose first element is taken.
fn token_id(c: &JsonObject, key: &str) -> Result<Option<u64>> {
    match c.map.get(key) {
        Some(Value::Array(list)) => Ok(list.first().and_then(Value::as_u64)),
        _ => c.opt_u64(key),
    }
}

/// `rope_scaling` (or `rope_parameters`): `linear` and `yarn` as llama.cpp writes them, and
/// `llama3` (a `rope_freqs.weight` tensor in the GGUF file); others are refused.
fn rope_scaling(c: &JsonObject) -> Result<Option<RopeScaling>> {
    let Some(s) = c.object("rope_scaling")? else {
        return Ok(None);
    };
    let kind = s
        .opt_str("rope_type")?
        .or(s.opt_str("type")?)
        .unwrap_or("default")
        .to_owned();
    match kind.as_str() {
        "default" | "none" => Ok(None),
        "linear" | "yarn" => Ok(Some(RopeScaling {
            factor: s
                .opt_f64("factor")?
                .ok_or_else(|| s.missing("rope_scaling.factor"))?,
            original_context_length: s.opt_u64("original_max_position_embeddings")?,
            kind,
            low_freq_factor: None,
            high_freq_factor: None,
        })),
        // The converter's defaults where a key is missing.
        "llama3" => {
            let d = Llama3Scaling::default();
            Ok(Some(RopeScaling {
                factor: s.opt_f64("factor")?.unwrap_or(d.factor),
                original_context_length: Some(
                    s.opt_u64("original_max_position_embeddings")?
                        .unwrap_or(d.original_context),
                ),
                low_freq_factor: Some(s.opt_f64("low_freq_factor")?.unwrap_or(d.low_freq_factor)),
                high_freq_factor: Some(
                    s.opt_f64("high_freq_factor")?.unwrap_or(d.high_freq_factor),
                ),
                kind,
            }))
        }
        other => Err(HfError::Unsupported {
            key: "rope_scaling.rope_type".into(),
            reason: format!(
                "rotary scaling type `{other}` is not converted (linear, yarn and llama3 are)"
            ),
        }),
    }
}

/// Gemma-3's layer pattern: `sliding_window_pattern`, or a `layer_types` list of the form
/// (N-1 × `sliding_attention`, `full_attention`) repeated; other lists are refused.
fn gemma_pattern(c: &JsonObject) -> Result<Option<u64>> {
    if let Some(p) = c.opt_u64("sliding_window_pattern")? {
        return Ok(Some(p));
    }
    let Some(types) = c.map.get("layer_types") else {
        return Ok(None);
    };
    let list: Option<Vec<&str>> = types
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect());
    let list = list.ok_or_else(|| c.wrong("layer_types", "a list of strings", types))?;
    let Some(first_full) = list.iter().position(|t| *t == "full_attention") else {
        return Ok(None);
    };
    let period = first_full + 1;
    let regular = list.iter().enumerate().all(|(i, t)| {
        let full = (i + 1) % period == 0;
        *t == if full {
            "full_attention"
        } else {
            "sliding_attention"
        }
    });
    if !regular {
        return Err(HfError::Unsupported {
            key: "layer_types".into(),
            reason: "only a repeating pattern (N-1 sliding layers, then one full) is converted"
                .into(),
        });
    }
    Ok(Some(period as u64))
}
