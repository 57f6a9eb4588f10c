//! Which type each tensor of a model gets when the model is quantized, as `llama-quantize`
//! decides it: llama.cpp's file types (`Q4_K_M`, `Q5_K_S`, ...) are mixtures (the output
//! matrix, some attention value and feed-forward down projections get more bits), and a
//! matrix whose rows are not whole blocks of its type takes a fallback type. Following
//! `llama_tensor_get_type` (llama.cpp's `src/llama-quant.cpp`) rule by rule, for the file
//! types kindle writes, so a file `kindle quantize` makes has the types `llama-quantize`'s
//! has (no importance matrix: kindle has none).
//!
//! ```
//! use kindle_gguf::mix::{FileType, ModelFacts, tensor_types};
//! use kindle_gguf::{GgmlType, TensorInfo};
//!
//! let facts = ModelFacts { arch: "llama".into(), n_layer: 1, n_head: 8, n_head_kv: 8, n_expert: 0 };
//! let tensor = |name: &str, dims: &[u64]| TensorInfo {
//!     name: name.into(), dims: dims.to_vec(), ty: GgmlType::F16, offset: 0,
//! };
//! let tensors = [
//!     tensor("token_embd.weight", &[512, 1000]),
//!     tensor("blk.0.attn_norm.weight", &[512]),
//!     tensor("blk.0.attn_v.weight", &[512, 512]),
//!     tensor("blk.0.ffn_up.weight", &[512, 1536]),
//!     tensor("blk.0.ffn_down.weight", &[1536, 512]),
//! ];
//! let types = tensor_types(FileType::parse("q4_k_m").unwrap(), false, &facts, &tensors);
//! assert_eq!(
//!     types,
//!     [
//!         Some(GgmlType::Q6_K), // tied embedding: the output's type
//!         None,                 // norms are not quantized
//!         Some(GgmlType::Q6_K), // the first layer's values get more bits
//!         Some(GgmlType::Q4_K),
//!         Some(GgmlType::Q6_K),
//!     ]
//! );
//! ```

use std::cmp::Ordering;

use crate::quant::GgmlType;
use crate::{GgufError, GgufFile, TensorInfo};

/// llama.cpp's `llama_ftype`: what `general.file_type` says and `llama-quantize`'s type names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum FileType {
    /// Every matrix `F32`.
    F32,
    /// Every matrix `F16`.
    F16,
    /// `Q4_0`, the output matrix `Q6_K` (or `Q8_0`).
    Q4_0,
    /// `Q4_1`, the output matrix `Q6_K` (or `Q8_0`).
    Q4_1,
    /// `Q8_0`.
    Q8_0,
    /// `Q5_0`, the output matrix `Q6_K` (or `Q8_0`).
    Q5_0,
    /// `Q5_1`, the output matrix `Q6_K` (or `Q8_0`).
    Q5_1,
    /// `Q2_K`, with `Q3_K` down projections, attention values and outputs.
    Q2_K,
    /// `Q3_K` throughout (the output matrix `Q6_K`).
    Q3_K_S,
    /// `Q3_K`, with `Q4_K`/`Q5_K` attention values, outputs and down projections.
    Q3_K_M,
    /// `Q3_K`, with `Q5_K` attention values, outputs and down projections.
    Q3_K_L,
    /// `Q4_K`, the first eighth of the layers' down projections and the first four attention
    /// values `Q5_K`.
    Q4_K_S,
    /// `Q4_K`, about half of the attention values and down projections `Q6_K`.
    Q4_K_M,
    /// `Q5_K` (the output matrix `Q6_K`).
    Q5_K_S,
    /// `Q5_K`, about half of the attention values and down projections `Q6_K`.
    Q5_K_M,
    /// `Q6_K`.
    Q6_K,
    /// Every matrix `BF16` (bfloat16: the top half of an `f32`).
    BF16,
    /// `IQ4_NL` (4-bit non-linear levels), the first eighth of the down projections `Q5_K`
    /// and, with four or more query heads a key head, the attention values.
    IQ4_NL,
    /// `IQ4_XS` (`IQ4_NL`'s levels with a 6-bit scale per 32 values), the same exceptions;
    /// rows that are not whole 256-value super-blocks `IQ4_NL`.
    IQ4_XS,
}

impl FileType {
    /// Every file type, in `llama_ftype` order.
    pub const ALL: [FileType; 19] = [
        FileType::F32,
        FileType::F16,
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q8_0,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q2_K,
        FileType::Q3_K_S,
        FileType::Q3_K_M,
        FileType::Q3_K_L,
        FileType::Q4_K_S,
        FileType::Q4_K_M,
        FileType::Q5_K_S,
        FileType::Q5_K_M,
        FileType::Q6_K,
        FileType::IQ4_NL,
        FileType::IQ4_XS,
        FileType::BF16,
    ];

    /// The value of `general.file_type` (`llama_ftype`).
    pub fn id(self) -> u32 {
        match self {
            FileType::F32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q2_K => 10,
            FileType::Q3_K_S => 11,
            FileType::Q3_K_M => 12,
            FileType::Q3_K_L => 13,
            FileType::Q4_K_S => 14,
            FileType::Q4_K_M => 15,
            FileType::Q5_K_S => 16,
            FileType::Q5_K_M => 17,
            FileType::Q6_K => 18,
            FileType::IQ4_NL => 25,
            FileType::IQ4_XS => 30,
            FileType::BF16 => 32,
        }
    }

    /// `llama-quantize`'s name for it (`Q4_K_M`).
    pub fn name(self) -> &'static str {
        match self {
            FileType::F32 => "F32",
            FileType::F16 => "F16",
            FileType::Q4_0 => "Q4_0",
            FileType::Q4_1 => "Q4_1",
            FileType::Q8_0 => "Q8_0",
            FileType::Q5_0 => "Q5_0",
            FileType::Q5_1 => "Q5_1",
            FileType::Q2_K => "Q2_K",
            FileType::Q3_K_S => "Q3_K_S",
            FileType::Q3_K_M => "Q3_K_M",
            FileType::Q3_K_L => "Q3_K_L",
            FileType::Q4_K_S => "Q4_K_S",
            FileType::Q4_K_M => "Q4_K_M",
            FileType::Q5_K_S => "Q5_K_S",
            FileType::Q5_K_M => "Q5_K_M",
            FileType::Q6_K => "Q6_K",
            FileType::IQ4_NL => "IQ4_NL",
            FileType::IQ4_XS => "IQ4_XS",
            FileType::BF16 => "BF16",
        }
    }

    /// The file type `name` names, in any case, with `llama-quantize`'s aliases (`Q3_K`,
    /// `Q4_K` and `Q5_K` are its `_M` mixtures); `None` for other names.
    pub fn parse(name: &str) -> Option<FileType> {
        let upper = name.to_ascii_uppercase();
        let name = match upper.as_str() {
            "Q3_K" => "Q3_K_M",
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            other => other,
        };
        FileType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The type of its matrices before the mixture's exceptions (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        match self {
            FileType::F32 => GgmlType::F32,
            FileType::F16 => GgmlType::F16,
            FileType::Q4_0 => GgmlType::Q4_0,
            FileType::Q4_1 => GgmlType::Q4_1,
            FileType::Q8_0 => GgmlType::Q8_0,
            FileType::Q5_0 => GgmlType::Q5_0,
            FileType::Q5_1 => GgmlType::Q5_1,
            FileType::Q2_K => GgmlType::Q2_K,
            FileType::Q3_K_S | FileType::Q3_K_M | FileType::Q3_K_L => GgmlType::Q3_K,
            FileType::Q4_K_S | FileType::Q4_K_M => GgmlType::Q4_K,
            FileType::Q5_K_S | FileType::Q5_K_M => GgmlType::Q5_K,
            FileType::Q6_K => GgmlType::Q6_K,
            FileType::IQ4_NL => GgmlType::IQ4_NL,
            FileType::IQ4_XS => GgmlType::IQ4_XS,
            FileType::BF16 => GgmlType::BF16,
        }
    }

    /// The file type whose matrices are `ty` (for a K-quant, its `_M` mixture, as
    /// `llama-quantize` names it), if there is one.
    pub fn of_type(ty: GgmlType) -> Option<FileType> {
        FileType::parse(ty.name())
    }
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the choice of types reads from a model's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFacts {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: usize,
    /// `{arch}.attention.head_count` (the first layer's).
    pub n_head: usize,
    /// `{arch}.attention.head_count_kv` (the first layer's; the head count when absent).
    pub n_head_kv: usize,
    /// `{arch}.expert_count` (0 when absent).
    pub n_expert: usize,
}

impl ModelFacts {
    /// The facts of `file` (a missing architecture or block count is an error; the other keys
    /// have llama.cpp's defaults).
    pub fn of(file: &GgufFile) -> Result<ModelFacts, GgufError> {
        let arch = file.architecture()?.to_string();
        let count = |key: &str| -> Result<Option<usize>, GgufError> {
            let key = format!("{arch}.{key}");
            if let Ok(Some(v)) = file.opt_u64(&key) {
                return Ok(Some(v as usize));
            }
            // Per-layer counts (an array): the first layer's, as llama.cpp's `n_gqa(0)`.
            Ok(file
                .opt_i32_array(&key)?
                .and_then(|a| a.first().map(|&v| v.max(0) as usize)))
        };
        let n_layer = file.get_u64(&format!("{arch}.block_count"))? as usize;
        let n_head = count("attention.head_count")?.unwrap_or(0);
        Ok(ModelFacts {
            n_layer,
            n_head,
            n_head_kv: count("attention.head_count_kv")?.unwrap_or(n_head),
            n_expert: count("expert_count")?.unwrap_or(0),
            arch,
        })
    }

    fn n_gqa(&self) -> usize {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// llama.cpp's `LLM_TYPE_70B` for the `llama` architecture: 80 layers with grouped keys.
    fn is_70b(&self) -> bool {
        self.arch == "llama" && self.n_layer == 80 && self.n_head != self.n_head_kv
    }
}

/// Whether `llama-quantize` quantizes a tensor at all (`tensor_allows_quantization`): matrices
/// whose names end in `weight`, but not norms, expert gates, positional embeddings and a few
/// small tables.
pub fn is_quantizable(name: &str, dims: &[u64]) -> bool {
    const KEPT: [&str; 11] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "time_mix_",
        "attn_rel_b.weight",
        ".position_embd",
    ];
    // ggml's `ggml_n_dims`: trailing dimensions of 1 do not count.
    let n_dims = dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    n_dims >= 2
        && name.ends_with("weight")
        && name != "position_embd.weight"
        && name != "token_types.weight"
        && !KEPT.iter().any(|k| name.contains(k))
}

/// The type a matrix of `ncols` columns takes instead of `target` when its rows are not whole
/// blocks of `target` (`tensor_type_fallback`): a 32-value type of about as many bits, else
/// `F16`.
pub fn fallback(target: GgmlType, ncols: u64) -> GgmlType {
    let whole = |t: GgmlType| ncols.is_multiple_of(t.block_size() as u64);
    if whole(target) {
        return target;
    }
    let instead = match target {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    };
    if whole(instead) {
        instead
    } else {
        GgmlType::F16
    }
}

/// `llama-quantize`'s broad kinds of tensors (`tensor_get_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    let has = |s: &str| name.contains(s);
    match name {
        "output.weight" => Category::Output,
        "token_embd.weight" | "per_layer_token_embd.weight" => Category::TokenEmbd,
        _ if has("attn_qkv.weight") => Category::AttnQkv,
        _ if has("attn_kv_b.weight") => Category::AttnKvB,
        _ if has("attn_v.weight") => Category::AttnV,
        _ if has("attn_k.weight") => Category::AttnK,
        _ if has("attn_q.weight") => Category::AttnQ,
        _ if has("attn_output.weight") => Category::AttnOutput,
        _ if has("ffn_up") => Category::FfnUp,
        _ if has("ffn_gate") => Category::FfnGate,
        _ if has("ffn_down") => Category::FfnDown,
        _ => Category::Other,
    }
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// The layer of a `blk.N.` tensor (llama.cpp's `sscanf(name, "blk.%d.")`), else -1.
fn layer_of(name: &str) -> i64 {
    let Some(rest) = name.strip_prefix("blk.") else {
        return -1;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(-1)
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// between.
fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The counters `llama_tensor_get_type_impl` keeps while it walks the tensors.
struct Walk<'a> {
    facts: &'a ModelFacts,
    ftype: FileType,
    tied: bool,
    n_attention_wv: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
}

impl Walk<'_> {
    /// `llama_tensor_get_type_impl` for the file types kindle writes.
    fn mixed(&mut self, name: &str, ncols: u64) -> GgmlType {
        use FileType as F;
        use GgmlType as T;
        let (facts, ftype) = (self.facts, self.ftype);
        let falcon = facts.arch == "falcon";
        let n_layer = facts.n_layer as i64;
        let mut ty = ftype.default_type();
        let category = category(name);
        if category == Category::Output || (self.tied && category == Category::TokenEmbd) {
            if falcon || !ncols.is_multiple_of(ty.block_size() as u64) {
                ty = T::Q8_0;
            } else if ty != T::Q8_0 {
                ty = T::Q6_K;
            }
        } else if category == Category::TokenEmbd {
            // Only the IQ and ternary file types change an untied embedding.
        } else if is_attn_v(category) {
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            match ftype {
                F::Q2_K => ty = if facts.n_gqa() >= 4 { T::Q4_K } else { T::Q3_K },
                F::Q3_K_M => ty = if i < 2 { T::Q5_K } else { T::Q4_K },
                F::Q3_K_L => ty = T::Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => ty = T::Q6_K,
                F::Q4_K_S if i < 4 => ty = T::Q5_K,
                F::IQ4_NL | F::IQ4_XS if facts.n_gqa() >= 4 => ty = T::Q5_K,
                _ => {}
            }
            if facts.is_70b() && matches!(ty, T::Q3_K | T::Q4_K) {
                ty = T::Q5_K;
            }
            if facts.n_expert == 8 {
                ty = T::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if category == Category::AttnK {
            if facts.n_expert == 8 {
                ty = T::Q8_0;
            }
        } else if category == Category::FfnDown {
            let (i, n) = if facts.n_expert > 1 {
                (layer_of(name), n_layer)
            } else {
                (self.i_ffn_down, n_layer)
            };
            match ftype {
                F::Q2_K => ty = T::Q3_K,
                F::Q3_K_M => {
                    ty = if i < n / 16 {
                        T::Q5_K
                    } else if !falcon || use_more_bits(i, n) {
                        T::Q4_K
                    } else {
                        T::Q3_K
                    }
                }
                F::Q3_K_L => ty = if falcon { T::Q4_K } else { T::Q5_K },
                F::Q4_K_M if falcon => {
                    ty = if i < n / 16 {
                        T::Q6_K
                    } else if use_more_bits(i, n) {
                        T::Q5_K
                    } else {
                        T::Q4_K
                    }
                }
                // Without an importance matrix (kindle quantizes without one).
                F::IQ4_NL | F::IQ4_XS if i < n / 8 => ty = T::Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => ty = T::Q6_K,
                F::Q4_K_S if !falcon && i < n / 8 => ty = T::Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if category == Category::AttnOutput {
            if !falcon {
                if facts.n_expert == 8 {
                    let more = matches!(
                        ftype,
                        F::Q2_K
                            | F::Q3_K_S
                            | F::Q3_K_M
                            | F::Q4_K_S
                            | F::Q4_K_M
                            | F::IQ4_NL
                            | F::IQ4_XS
                    );
                    if more {
                        ty = T::Q5_K;
                    }
                } else {
                    match ftype {
                        F::Q2_K => ty = T::Q3_K,
                        F::Q3_K_M => ty = T::Q4_K,
                        F::Q3_K_L => ty = T::Q5_K,
                        _ => {}
                    }
                }
            } else if ftype == F::Q3_K_L {
                ty = T::Q4_K;
            }
        }
        // llama.cpp's branch for a fused `attn_qkv` after this one is never reached: the
        // attention-value branch above takes it first.
        ty
    }
}

/// The indices of `tensors` in the order llama-quantize walks and writes them: by layer
/// (tensors outside the `blk.N.` layers first), then by name (its loader's
/// `weight_name_comparer`).
pub fn llama_order(tensors: &[TensorInfo]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tensors[a].name, &tensors[b].name);
        match layer_of(a).cmp(&layer_of(b)) {
            Ordering::Equal => a.cmp(b),
            other => other,
        }
    });
    order
}

/// The type of each tensor of `tensors` in the file type `ftype` (`pure`: every quantized
/// matrix `ftype`'s default type, without the mixture's exceptions, as `llama-quantize
/// --pure`), `None` for tensors that are not quantized (kept as they are). A matrix whose rows
/// are not whole blocks of its type takes [`fallback`]'s.
pub fn tensor_types(
    ftype: FileType,
    pure: bool,
    facts: &ModelFacts,
    tensors: &[TensorInfo],
) -> Vec<Option<GgmlType>> {
    // The counters below follow llama-quantize's order.
    let order = llama_order(tensors);
    let mut walk = Walk {
        facts,
        ftype,
        tied: !tensors.iter().any(|t| t.name == "output.weight"),
        n_attention_wv: tensors
            .iter()
            .filter(|t| is_attn_v(category(&t.name)))
            .count() as i64,
        i_attention_wv: 0,
        i_ffn_down: 0,
    };
    let mut types = vec![None; tensors.len()];
    for i in order {
        let tensor = &tensors[i];
        if !is_quantizable(&tensor.name, &tensor.dims) {
            continue;
        }
        let default = ftype.default_type();
        let quantized = !matches!(default, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        types[i] = Some(if !quantized {
            default
        } else {
            let ty = if pure {
                default
            } else {
                walk.mixed(&tensor.name, tensor.dims[0])
            };
            fallback(ty, tensor.dims[0])
        });
    }
    types
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, dims: &[u64]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            dims: dims.to_vec(),
            ty: GgmlType::F16,
            offset: 0,
        }
    }

    /// A SmolLM2-shaped model: 30 layers, 576 wide (not whole 256-value super-blocks), a
    /// 1536-wide feed-forward, 9 query heads over 3 key heads, a tied embedding.
    fn smollm2() -> (ModelFacts, Vec<TensorInfo>) {
        let facts = ModelFacts {
            arch: "llama".into(),
            n_layer: 30,
            n_head: 9,
            n_head_kv: 3,
            n_expert: 0,
        };
        let mut tensors = vec![
            info("token_embd.weight", &[576, 49152]),
            info("output_norm.weight", &[576]),
        ];
        for l in 0..30 {
            for (name, dims) in [
                ("attn_norm.weight", &[576][..]),
                ("attn_q.weight", &[576, 576]),
                ("attn_k.weight", &[576, 192]),
                ("attn_v.weight", &[576, 192]),
                ("attn_output.weight", &[576, 576]),
                ("ffn_norm.weight", &[576]),
                ("ffn_gate.weight", &[576, 1536]),
                ("ffn_up.weight", &[576, 1536]),
                ("ffn_down.weight", &[1536, 576]),
            ] {
                tensors.push(info(&format!("blk.{l}.{name}"), dims));
            }
        }
        (facts, tensors)
    }

    fn type_of(tensors: &[TensorInfo], types: &[Option<GgmlType>], name: &str) -> Option<GgmlType> {
        let at = tensors.iter().position(|t| t.name == name).unwrap();
        types[at]
    }

    #[test]
    fn names_ids_and_aliases() {
        assert_eq!(FileType::parse("q4_k_m"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::parse("Q4_K"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::parse("q3_k"), Some(FileType::Q3_K_M));
        assert_eq!(FileType::parse("f16"), Some(FileType::F16));
        assert_eq!(FileType::parse("q4_k_x"), None);
        assert_eq!(FileType::Q4_K_M.id(), 15);
        assert_eq!(FileType::Q6_K.id(), 18);
        assert_eq!(FileType::of_type(GgmlType::Q6_K), Some(FileType::Q6_K));
        assert_eq!(FileType::of_type(GgmlType::BF16), Some(FileType::BF16));
        assert_eq!(FileType::parse("bf16").map(FileType::id), Some(32));
        for t in FileType::ALL {
            assert_eq!(FileType::parse(t.name()), Some(t));
        }
    }

    /// Hand-worked from `llama_tensor_get_type` for SmolLM2's shapes. `use_more_bits(i, 30)`
    /// holds for layers 0-2 and 26-29 and for 5, 8, ..., 23 (`(i - 3) % 3 == 2`).
    #[test]
    fn q4_k_m_on_smollm2() {
        let (facts, tensors) = smollm2();
        let types = tensor_types(FileType::Q4_K_M, false, &facts, &tensors);
        let t = |name: &str| type_of(&tensors, &types, name);
        // Tied embedding: the output's rule, Q6_K, whose 256 does not divide 576: Q8_0.
        assert_eq!(t("token_embd.weight"), Some(GgmlType::Q8_0));
        assert_eq!(t("output_norm.weight"), None);
        assert_eq!(t("blk.0.attn_norm.weight"), None);
        let more = [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29];
        for l in 0..30 {
            let bits = more.contains(&l);
            // 576-wide rows: Q4_K falls back to Q5_0, Q6_K to Q8_0.
            let v = if bits { GgmlType::Q8_0 } else { GgmlType::Q5_0 };
            assert_eq!(t(&format!("blk.{l}.attn_v.weight")), Some(v), "layer {l}");
            let down = if bits { GgmlType::Q6_K } else { GgmlType::Q4_K };
            assert_eq!(
                t(&format!("blk.{l}.ffn_down.weight")),
                Some(down),
                "layer {l}"
            );
            for m in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
                assert_eq!(t(&format!("blk.{l}.{m}.weight")), Some(GgmlType::Q5_0));
            }
        }
        // --pure: every matrix Q4_K or its fallback, the embedding included.
        let pure = tensor_types(FileType::Q4_K_M, true, &facts, &tensors);
        assert_eq!(
            type_of(&tensors, &pure, "token_embd.weight"),
            Some(GgmlType::Q5_0)
        );
        assert_eq!(
            type_of(&tensors, &pure, "blk.0.ffn_down.weight"),
            Some(GgmlType::Q4_K)
        );
    }

    #[test]
    fn other_mixtures_on_smollm2() {
        let (facts, tensors) = smollm2();
        let t = |ftype: FileType, name: &str| {
            type_of(
                &tensors,
                &tensor_types(ftype, false, &facts, &tensors),
                name,
            )
        };
        // Q2_K: down projections Q3_K; values Q3_K (3 query heads a key head, under 4) and
        // outputs Q3_K, both 576 wide: Q4_0.
        assert_eq!(
            t(FileType::Q2_K, "blk.7.ffn_down.weight"),
            Some(GgmlType::Q3_K)
        );
        assert_eq!(
            t(FileType::Q2_K, "blk.7.attn_v.weight"),
            Some(GgmlType::Q4_0)
        );
        // Q3_K_M: the first two values Q5_K (-> Q5_1), then Q4_K (-> Q5_0); down projections
        // of layer 0 (< 30 / 16) Q5_K, then Q4_K.
        assert_eq!(
            t(FileType::Q3_K_M, "blk.1.attn_v.weight"),
            Some(GgmlType::Q5_1)
        );
        assert_eq!(
            t(FileType::Q3_K_M, "blk.2.attn_v.weight"),
            Some(GgmlType::Q5_0)
        );
        assert_eq!(
            t(FileType::Q3_K_M, "blk.0.ffn_down.weight"),
            Some(GgmlType::Q5_K)
        );
        assert_eq!(
            t(FileType::Q3_K_M, "blk.1.ffn_down.weight"),
            Some(GgmlType::Q4_K)
        );
        assert_eq!(
            t(FileType::Q3_K_M, "blk.1.ffn_up.weight"),
            Some(GgmlType::Q4_0)
        );
        // Q4_K_S: down projections of layers 0-2 (< 30 / 8) Q5_K, values of layers 0-3.
        assert_eq!(
            t(FileType::Q4_K_S, "blk.2.ffn_down.weight"),
            Some(GgmlType::Q5_K)
        );
        assert_eq!(
            t(FileType::Q4_K_S, "blk.3.ffn_down.weight"),
            Some(GgmlType::Q4_K)
        );
        assert_eq!(
            t(FileType::Q4_K_S, "blk.3.attn_v.weight"),
            Some(GgmlType::Q5_1)
        );
        // Legacy types: their own type, the embedding as the output (Q6_K -> Q8_0).
        assert_eq!(
            t(FileType::Q4_0, "blk.3.ffn_down.weight"),
            Some(GgmlType::Q4_0)
        );
        assert_eq!(t(FileType::Q4_0, "token_embd.weight"), Some(GgmlType::Q8_0));
        assert_eq!(t(FileType::F16, "token_embd.weight"), Some(GgmlType::F16));
        assert_eq!(t(FileType::F16, "output_norm.weight"), None);
        assert_eq!(t(FileType::BF16, "token_embd.weight"), Some(GgmlType::BF16));
        assert_eq!(
            t(FileType::BF16, "blk.3.attn_v.weight"),
            Some(GgmlType::BF16)
        );
        assert_eq!(t(FileType::BF16, "output_norm.weight"), None);
    }

    /// The counters follow llama-quantize's order (by layer, then name), not the file's: the
    /// same tensors listed backwards get the same types.
    #[test]
    fn the_file_order_does_not_matter() {
        let (facts, mut tensors) = smollm2();
        let types = tensor_types(FileType::Q4_K_M, false, &facts, &tensors);
        let named: Vec<_> = tensors.iter().map(|t| t.name.clone()).zip(types).collect();
        tensors.reverse();
        let again = tensor_types(FileType::Q4_K_M, false, &facts, &tensors);
        for (t, ty) in tensors.iter().zip(again) {
            let want = named.iter().find(|(n, _)| *n == t.name).unwrap().1;
            assert_eq!(ty, want, "{}", t.name);
        }
    }

    #[test]
    fn fallbacks() {
        assert_eq!(fallback(GgmlType::Q4_K, 512), GgmlType::Q4_K);
        assert_eq!(fallback(GgmlType::Q4_K, 576), GgmlType::Q5_0);
        assert_eq!(fallback(GgmlType::Q5_K, 576), GgmlType::Q5_1);
        assert_eq!(fallback(GgmlType::Q6_K, 576), GgmlType::Q8_0);
        assert_eq!(fallback(GgmlType::Q2_K, 576), GgmlType::Q4_0);
        assert_eq!(fallback(GgmlType::Q4_K, 100), GgmlType::F16);
        assert_eq!(fallback(GgmlType::Q8_0, 100), GgmlType::F16);
    }
}
