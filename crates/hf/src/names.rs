//! Tensor names Hugging Face ⇄ GGUF per architecture (llama.cpp's `tensor_mapping.py`), and
//! what happens to the values on the way (llama.cpp's `modify_tensors`).

use crate::config::{Arch, ModelConfig};
use crate::error::{HfError, Result};

/// What a tensor's values go through from Hugging Face to GGUF (reversed the other way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Copied.
    Keep,
    /// Rows permuted from rotate-half pairs to adjacent pairs, `heads` heads (Llama q and k:
    /// llama.cpp's `LlamaModel.permute`).
    Permute {
        /// Heads in the tensor (query heads for q, key/value heads for k).
        heads: u64,
    },
    /// Transposed (GPT-2's Conv1D weights are stored `[in, out]`).
    Transpose,
    /// One added (Gemma-3's RMSNorm multiplies by `1 + weight`; GGUF stores `1 + weight`).
    AddOne,
}

/// (Hugging Face suffix, GGUF suffix) within a block, Llama and Qwen2.
const LLAMA_LAYER: &[(&str, &str)] = &[
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Qwen3's block: Llama's without biases, with head norms.
const QWEN3_LAYER: &[(&str, &str)] = &[
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Gemma-3's block: head norms, and norms around both halves.
const GEMMA3_LAYER: &[(&str, &str)] = &[
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    (
        "post_attention_layernorm.weight",
        "post_attention_norm.weight",
    ),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// GPT-2's block (names after `h.N.`).
const GPT2_LAYER: &[(&str, &str)] = &[
    ("ln_1.weight", "attn_norm.weight"),
    ("ln_1.bias", "attn_norm.bias"),
    ("attn.c_attn.weight", "attn_qkv.weight"),
    ("attn.c_attn.bias", "attn_qkv.bias"),
    ("attn.c_proj.weight", "attn_output.weight"),
    ("attn.c_proj.bias", "attn_output.bias"),
    ("ln_2.weight", "ffn_norm.weight"),
    ("ln_2.bias", "ffn_norm.bias"),
    ("mlp.c_fc.weight", "ffn_up.weight"),
    ("mlp.c_fc.bias", "ffn_up.bias"),
    ("mlp.c_proj.weight", "ffn_down.weight"),
    ("mlp.c_proj.bias", "ffn_down.bias"),
];

const LLAMA_GLOBAL: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

const GPT2_GLOBAL: &[(&str, &str)] = &[
    ("wte.weight", "token_embd.weight"),
    ("wpe.weight", "position_embd.weight"),
    ("ln_f.weight", "output_norm.weight"),
    ("ln_f.bias", "output_norm.bias"),
    ("lm_head.weight", "output.weight"),
];

/// (Hugging Face name, GGUF name) pairs.
type NameTable = &'static [(&'static str, &'static str)];

/// The global names, the block names and the block prefix of `arch`.
fn tables(arch: Arch) -> (NameTable, NameTable, &'static str) {
    match arch {
        Arch::Llama | Arch::Qwen2 => (LLAMA_GLOBAL, LLAMA_LAYER, "model.layers."),
        Arch::Qwen3 => (LLAMA_GLOBAL, QWEN3_LAYER, "model.layers."),
        Arch::Gemma3 => (LLAMA_GLOBAL, GEMMA3_LAYER, "model.layers."),
        Arch::Gpt2 => (GPT2_GLOBAL, GPT2_LAYER, "h."),
    }
}

/// The transform of the tensor called `hf` (its normalised Hugging Face name).
fn transform(cfg: &ModelConfig, hf: &str) -> Transform {
    match cfg.arch {
        Arch::Llama if hf.contains("self_attn.q_proj.") => {
            Transform::Permute { heads: cfg.n_heads }
        }
        Arch::Llama if hf.contains("self_attn.k_proj.") => Transform::Permute {
            heads: cfg.n_kv_heads,
        },
        Arch::Gpt2
            if hf.ends_with(".weight")
                && ["c_attn", "c_proj", "c_fc"].iter().any(|m| hf.contains(m)) =>
        {
            Transform::Transpose
        }
        // llama.cpp's `Gemma3Model.norm_shift`: every name ending in `norm.weight`.
        Arch::Gemma3 if hf.ends_with("norm.weight") => Transform::AddOne,
        _ => Transform::Keep,
    }
}

/// The name a Hugging Face tensor has in the architecture's own tables: wrappers stripped
/// (`transformer.` for GPT-2, the language model of a Gemma-3 vision model); `None` for a
/// tensor the conversion leaves out (buffers, the vision tower, a tied head).
fn normalise(cfg: &ModelConfig, name: &str) -> Option<String> {
    let mut name = name.to_owned();
    match cfg.arch {
        Arch::Gpt2 => {
            if let Some(rest) = name.strip_prefix("transformer.") {
                name = rest.to_owned();
            }
            if name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") {
                return None;
            }
        }
        Arch::Gemma3 => {
            for (from, to) in [
                ("language_model.model.", "model."),
                ("model.language_model.", "model."),
                ("language_model.lm_head.", "lm_head."),
            ] {
                if let Some(rest) = name.strip_prefix(from) {
                    name = format!("{to}{rest}");
                }
            }
            let vision = ["vision_tower.", "multi_modal_projector."];
            if vision.iter().any(|p| {
                name.starts_with(p)
                    || name
                        .strip_prefix("model.")
                        .is_some_and(|n| n.starts_with(p))
            }) {
                return None;
            }
        }
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {}
    }
    if name.ends_with("rotary_emb.inv_freq") || (name == "lm_head.weight" && cfg.tied_embeddings) {
        return None;
    }
    Some(name)
}

/// The GGUF name and transform of the Hugging Face tensor `name`; `Ok(None)` for a tensor
/// that is left out, [`HfError::UnknownTensor`] for one with no mapping.
pub fn hf_to_gguf(cfg: &ModelConfig, name: &str) -> Result<Option<(String, Transform)>> {
    let Some(hf) = normalise(cfg, name) else {
        return Ok(None);
    };
    let (global, layer, prefix) = tables(cfg.arch);
    let unknown = || HfError::UnknownTensor {
        tensor: name.to_owned(),
        arch: cfg.arch.gguf_name(),
    };
    if let Some((_, g)) = global.iter().find(|(h, _)| *h == hf) {
        return Ok(Some(((*g).to_owned(), transform(cfg, &hf))));
    }
    let rest = hf.strip_prefix(prefix).ok_or_else(unknown)?;
    let (block, suffix) = rest.split_once('.').ok_or_else(unknown)?;
    let block: u64 = block.parse().map_err(|_| unknown())?;
    if block >= cfg.n_layers {
        return Err(unknown());
    }
    let (_, g) = layer
        .iter()
        .find(|(h, _)| *h == suffix)
        .ok_or_else(unknown)?;
    Ok(Some((format!("blk.{block}.{g}"), transform(cfg, &hf))))
}

/// The Hugging Face name and transform (to undo) of the GGUF tensor `name`.
pub fn gguf_to_hf(cfg: &ModelConfig, name: &str) -> Result<(String, Transform)> {
    let (global, layer, prefix) = tables(cfg.arch);
    let wrapper = if cfg.arch == Arch::Gpt2 {
        "transformer."
    } else {
        ""
    };
    let unknown = || HfError::UnknownTensor {
        tensor: name.to_owned(),
        arch: cfg.arch.gguf_name(),
    };
    let hf = if let Some((h, _)) = global.iter().find(|(_, g)| *g == name) {
        (*h).to_owned()
    } else {
        let rest = name.strip_prefix("blk.").ok_or_else(unknown)?;
        let (block, suffix) = rest.split_once('.').ok_or_else(unknown)?;
        let block: u64 = block.parse().map_err(|_| unknown())?;
        let (h, _) = layer
            .iter()
            .find(|(_, g)| *g == suffix)
            .ok_or_else(unknown)?;
        format!("{prefix}{block}.{h}")
    };
    let t = transform(cfg, &hf);
    let full = if hf == "lm_head.weight" {
        hf
    } else {
        format!("{wrapper}{hf}")
    };
    Ok((full, t))
}

/// llama.cpp's `LlamaModel.permute`: `w.reshape(heads, 2, rows / heads / 2, cols)
/// .swapaxes(1, 2).reshape(w.shape)` on a row-major `[rows, cols]` tensor.
pub fn permute(values: &[f32], rows: usize, cols: usize, heads: usize) -> Option<Vec<f32>> {
    reorder(values, rows, cols, heads, false)
}

/// The inverse of [`permute`].
pub fn unpermute(values: &[f32], rows: usize, cols: usize, heads: usize) -> Option<Vec<f32>> {
    reorder(values, rows, cols, heads, true)
}

fn reorder(
    values: &[f32],
    rows: usize,
    cols: usize,
    heads: usize,
    inverse: bool,
) -> Option<Vec<f32>> {
    if heads == 0 || !rows.is_multiple_of(2 * heads) || values.len() != rows.checked_mul(cols)? {
        return None;
    }
    let half = rows / heads / 2;
    let mut out = vec![0.0; values.len()];
    for h in 0..heads {
        for s in 0..2 {
            for j in 0..half {
                // Input row (h, s, j) lands at output row (h, j, s).
                let from = h * 2 * half + s * half + j;
                let to = h * 2 * half + j * 2 + s;
                let (src, dst) = if inverse { (to, from) } else { (from, to) };
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&values[src * cols..(src + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// A row-major `[rows, cols]` tensor transposed to `[cols, rows]`.
pub fn transpose(values: &[f32], rows: usize, cols: usize) -> Option<Vec<f32>> {
    if values.len() != rows.checked_mul(cols)? {
        return None;
    }
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    Some(out)
}

/// Applies `t` (or its inverse) to `values`, row-major with `shape`; returns the values and
/// the new row-major shape. An error names `tensor` when the shape does not fit.
pub(crate) fn apply(
    t: Transform,
    inverse: bool,
    tensor: &str,
    values: Vec<f32>,
    shape: &[u64],
) -> Result<(Vec<f32>, Vec<u64>)> {
    let bad = |reason: String| HfError::BadShape {
        tensor: tensor.to_owned(),
        reason,
    };
    let (rows, cols) = match shape {
        [n] => (*n as usize, 1),
        [r, c] => (*r as usize, *c as usize),
        _ if t == Transform::Keep => return Ok((values, shape.to_vec())),
        _ => {
            return Err(bad(format!(
                "shape {shape:?}: expected one or two dimensions"
            )));
        }
    };
    Ok(match t {
        Transform::Keep => (values, shape.to_vec()),
        Transform::Permute { heads } => {
            let f = if inverse { unpermute } else { permute };
            let out = f(&values, rows, cols, heads as usize).ok_or_else(|| {
                bad(format!(
                    "{rows} rows do not split into {heads} heads of row pairs"
                ))
            })?;
            (out, shape.to_vec())
        }
        Transform::Transpose => {
            if shape.len() != 2 {
                return Err(bad(format!(
                    "shape {shape:?}: a Conv1D weight has two dimensions"
                )));
            }
            let out = transpose(&values, rows, cols).ok_or_else(|| bad("size".into()))?;
            (out, vec![shape[1], shape[0]])
        }
        Transform::AddOne => {
            let d = if inverse { -1.0 } else { 1.0 };
            (values.into_iter().map(|v| v + d).collect(), shape.to_vec())
        }
    })
}
