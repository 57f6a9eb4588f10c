//! Hugging Face directories written by the tests → GGUF: names, llama.cpp's permutation,
//! GPT-2's transposes, Gemma-3's norms, tied heads, shards, metadata.

mod common;

use common::{D, FF, HEADS, HfTensor, KV_HEADS, TempDir, values, write_hf_dir};
use kindle_hf::names::{permute, transpose, unpermute};
use kindle_hf::{HfDir, HfError, ToGgufOptions};
use safetensors::Dtype;
use serde_json::json;

fn no_tokenizer() -> ToGgufOptions {
    ToGgufOptions {
        tokenizer: false,
        ..ToGgufOptions::default()
    }
}

/// llama.cpp's `permute`, written out with numpy's index arithmetic: `w.reshape(n_head, 2,
/// rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols)`.
fn llama_cpp_permute(w: &[f32], rows: usize, cols: usize, n_head: usize) -> Vec<f32> {
    let half = rows / n_head / 2;
    // Shape after swapaxes: (n_head, half, 2, cols); element [h][j][s][c] = w[h][s][j][c].
    let mut out = Vec::with_capacity(w.len());
    for h in 0..n_head {
        for j in 0..half {
            for s in 0..2 {
                for c in 0..cols {
                    out.push(w[((h * 2 + s) * half + j) * cols + c]);
                }
            }
        }
    }
    out
}

#[test]
fn permute_is_llama_cpp_formula_and_unpermute_inverts_it() {
    for (rows, cols, heads) in [(8, 3, 2), (16, 5, 4), (4, 1, 1), (24, 2, 3), (12, 7, 6)] {
        let w = values(rows as u64, (rows * cols) as u64, -1.0, 1.0);
        let p = permute(&w, rows, cols, heads).unwrap();
        assert_eq!(
            p,
            llama_cpp_permute(&w, rows, cols, heads),
            "{rows}x{cols}/{heads}"
        );
        assert_eq!(unpermute(&p, rows, cols, heads).unwrap(), w);
        assert_eq!(
            permute(
                &unpermute(&w, rows, cols, heads).unwrap(),
                rows,
                cols,
                heads
            )
            .unwrap(),
            w
        );
    }
    // Rows that do not split into head pairs are refused.
    assert!(permute(&[0.0; 6], 6, 1, 2).is_none());
    assert!(permute(&[0.0; 6], 3, 2, 0).is_none());
    let t = transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3).unwrap();
    assert_eq!(t, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(transpose(&t, 3, 2).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

fn llama_layer(prefix: &str, bias: bool) -> Vec<HfTensor> {
    let (q, kv) = (HEADS * 4, KV_HEADS * 4);
    let mut seed = 100;
    let mut t = |name: &str, shape: Vec<usize>| {
        seed += 1;
        let n = shape.iter().product::<usize>() as u64;
        (
            format!("{prefix}{name}"),
            Dtype::F32,
            shape,
            values(seed, n, -1.0, 1.0),
        )
    };
    let (d, ff, q, kv) = (D as usize, FF as usize, q as usize, kv as usize);
    let mut out = vec![
        t("input_layernorm.weight", vec![d]),
        t("self_attn.q_proj.weight", vec![q, d]),
        t("self_attn.k_proj.weight", vec![kv, d]),
        t("self_attn.v_proj.weight", vec![kv, d]),
        t("self_attn.o_proj.weight", vec![d, q]),
        t("post_attention_layernorm.weight", vec![d]),
        t("mlp.gate_proj.weight", vec![ff, d]),
        t("mlp.up_proj.weight", vec![ff, d]),
        t("mlp.down_proj.weight", vec![d, ff]),
    ];
    if bias {
        out.push(t("self_attn.q_proj.bias", vec![q]));
        out.push(t("self_attn.k_proj.bias", vec![kv]));
        out.push(t("self_attn.v_proj.bias", vec![kv]));
    }
    out
}

fn globals(tied: bool) -> Vec<HfTensor> {
    let mut out = vec![
        (
            "model.embed_tokens.weight".into(),
            Dtype::BF16,
            vec![16, D as usize],
            values(1, 16 * D, -1.0, 1.0),
        ),
        (
            "model.norm.weight".into(),
            Dtype::F32,
            vec![D as usize],
            values(2, D, -1.0, 1.0),
        ),
        (
            "model.rotary_emb.inv_freq".into(),
            Dtype::F32,
            vec![2],
            vec![1.0, 0.5],
        ),
    ];
    if !tied {
        out.push((
            "lm_head.weight".into(),
            Dtype::F16,
            vec![16, D as usize],
            values(3, 16 * D, -1.0, 1.0),
        ));
    }
    out
}

fn find<'a>(tensors: &'a [HfTensor], name: &str) -> &'a HfTensor {
    tensors.iter().find(|t| t.0 == name).unwrap()
}

#[test]
fn llama_names_permutation_and_metadata() {
    let dir = TempDir::new("llama");
    let mut tensors = globals(false);
    tensors.extend(llama_layer("model.layers.0.", false));
    write_hf_dir(dir.path(), &common::llama_config(false), &tensors);
    let file = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&no_tokenizer())
        .unwrap();

    let q = find(&tensors, "model.layers.0.self_attn.q_proj.weight");
    let k = find(&tensors, "model.layers.0.self_attn.k_proj.weight");
    let d = D as usize;
    assert_eq!(
        file.dequantize("blk.0.attn_q.weight").unwrap(),
        llama_cpp_permute(&q.3, 8, d, 2)
    );
    assert_eq!(
        file.dequantize("blk.0.attn_k.weight").unwrap(),
        llama_cpp_permute(&k.3, 4, d, 1)
    );
    let v = find(&tensors, "model.layers.0.self_attn.v_proj.weight");
    assert_eq!(file.dequantize("blk.0.attn_v.weight").unwrap(), v.3);
    assert_eq!(file.tensor("blk.0.attn_q.weight").unwrap().dims, [D, 8]);
    assert_eq!(file.tensor("blk.0.ffn_down.weight").unwrap().dims, [FF, D]);
    // BF16 stays BF16 (its values exactly); F16 stays F16; the rotary buffer is left out.
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.ty, embd.dims.clone()),
        (kindle_gguf::GgmlType::BF16, vec![D, 16])
    );
    let bf16: Vec<f32> = globals(false)[0]
        .3
        .iter()
        .map(|x| half::bf16::from_f32(*x).to_f32())
        .collect();
    assert_eq!(file.dequantize("token_embd.weight").unwrap(), bf16);
    assert_eq!(
        file.tensor("output.weight").unwrap().ty,
        kindle_gguf::GgmlType::F16
    );
    assert!(file.tensors().iter().all(|t| !t.name.contains("rotary")));
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"token_embd.weight"));
    assert_eq!(names.last(), Some(&"output.weight"));

    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.get_u64("llama.embedding_length").unwrap(), D);
    assert_eq!(
        file.get_u64("llama.attention.head_count_kv").unwrap(),
        KV_HEADS
    );
    assert_eq!(file.get_u64("llama.block_count").unwrap(), 1);
    assert_eq!(file.get_u64("llama.context_length").unwrap(), common::CTX);
    assert_eq!(file.get_u64("llama.vocab_size").unwrap(), 16);
    assert_eq!(file.get_u64("llama.rope.dimension_count").unwrap(), 4);
    assert_eq!(
        file.get_f64("llama.attention.layer_norm_rms_epsilon")
            .unwrap(),
        f64::from(1e-5f32)
    );
    assert_eq!(
        file.get_str("general.name").unwrap(),
        dir.path().file_name().unwrap().to_str().unwrap()
    );

    // Tied: lm_head is left out even when present.
    let dir = TempDir::new("tied");
    let mut tensors = globals(false);
    tensors.extend(llama_layer("model.layers.0.", false));
    write_hf_dir(dir.path(), &common::llama_config(true), &tensors);
    let file = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&no_tokenizer())
        .unwrap();
    assert!(file.tensor("output.weight").is_none());
}

#[test]
fn qwen2_keeps_rows_and_biases_in_place() {
    let dir = TempDir::new("qwen2");
    let mut tensors = globals(true);
    tensors.extend(llama_layer("model.layers.0.", true));
    let mut config = common::llama_config(true);
    config["architectures"] = json!(["Qwen2ForCausalLM"]);
    config["sliding_window"] = json!(4096);
    config["use_sliding_window"] = json!(false);
    write_hf_dir(dir.path(), &config, &tensors);
    let file = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&no_tokenizer())
        .unwrap();
    assert_eq!(file.architecture().unwrap(), "qwen2");
    for (hf, gguf) in [
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.q_proj.bias", "attn_q.bias"),
        ("self_attn.k_proj.bias", "attn_k.bias"),
        ("self_attn.v_proj.bias", "attn_v.bias"),
        ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ] {
        let t = find(&tensors, &format!("model.layers.0.{hf}"));
        assert_eq!(
            file.dequantize(&format!("blk.0.{gguf}")).unwrap(),
            t.3,
            "{hf}"
        );
    }
    assert!(file.get("qwen2.attention.sliding_window").is_none());
    assert!(file.tensor("output.weight").is_none());
}

#[test]
fn gemma3_norms_gain_one_and_its_keys_are_written() {
    let dir = TempDir::new("gemma3");
    let (d, hd) = (D as usize, 4usize);
    let mut tensors: Vec<HfTensor> = vec![
        (
            "language_model.model.embed_tokens.weight".into(),
            Dtype::F32,
            vec![16, d],
            values(1, 16 * D, -1.0, 1.0),
        ),
        (
            "language_model.model.norm.weight".into(),
            Dtype::F32,
            vec![d],
            values(2, D, -1.0, 1.0),
        ),
        (
            "vision_tower.vision_model.embeddings.patch_embedding.weight".into(),
            Dtype::F32,
            vec![2, 2],
            vec![0.0; 4],
        ),
        (
            "multi_modal_projector.mm_soft_emb_norm.weight".into(),
            Dtype::F32,
            vec![2],
            vec![0.0; 2],
        ),
    ];
    let norms = [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ];
    for (i, n) in norms.iter().enumerate() {
        tensors.push((
            format!("language_model.model.layers.0.{n}.weight"),
            Dtype::F32,
            vec![d],
            values(10 + i as u64, D, -1.0, 1.0),
        ));
    }
    for (i, n) in ["q_norm", "k_norm"].iter().enumerate() {
        tensors.push((
            format!("language_model.model.layers.0.self_attn.{n}.weight"),
            Dtype::F32,
            vec![hd],
            values(20 + i as u64, 4, -1.0, 1.0),
        ));
    }
    for (i, (n, shape)) in [
        ("self_attn.q_proj", vec![8, d]),
        ("self_attn.k_proj", vec![4, d]),
        ("self_attn.v_proj", vec![4, d]),
        ("self_attn.o_proj", vec![d, 8]),
        ("mlp.gate_proj", vec![16, d]),
        ("mlp.up_proj", vec![16, d]),
        ("mlp.down_proj", vec![d, 16]),
    ]
    .into_iter()
    .enumerate()
    {
        let n_el = shape.iter().product::<usize>() as u64;
        tensors.push((
            format!("language_model.model.layers.0.{n}.weight"),
            Dtype::F32,
            shape,
            values(30 + i as u64, n_el, -1.0, 1.0),
        ));
    }
    let config = json!({
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {
            "hidden_size": D, "intermediate_size": 16, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "vocab_size": 16,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "query_pre_attn_scalar": 4, "final_logit_softcapping": null,
        },
    });
    write_hf_dir(dir.path(), &config, &tensors);
    let file = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(&no_tokenizer())
        .unwrap();
    assert_eq!(file.architecture().unwrap(), "gemma3");
    for (hf, gguf) in [
        ("layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"),
        (
            "layers.0.post_attention_layernorm.weight",
            "blk.0.post_attention_norm.weight",
        ),
        (
            "layers.0.pre_feedforward_layernorm.weight",
            "blk.0.ffn_norm.weight",
        ),
        (
            "layers.0.post_feedforward_layernorm.weight",
            "blk.0.post_ffw_norm.weight",
        ),
        (
            "layers.0.self_attn.q_norm.weight",
            "blk.0.attn_q_norm.weight",
        ),
        (
            "layers.0.self_attn.k_norm.weight",
            "blk.0.attn_k_norm.weight",
        ),
        ("norm.weight", "output_norm.weight"),
    ] {
        let t = find(&tensors, &format!("language_model.model.{hf}"));
        let plus_one: Vec<f32> = t.3.iter().map(|v| v + 1.0).collect();
        assert_eq!(file.dequantize(gguf).unwrap(), plus_one, "{hf}");
    }
    // q and k are not permuted for Gemma-3.
    let q = find(
        &tensors,
        "language_model.model.layers.0.self_attn.q_proj.weight",
    );
    assert_eq!(file.dequantize("blk.0.attn_q.weight").unwrap(), q.3);
    assert_eq!(file.tensors().len(), 1 + 1 + 13);
    assert_eq!(file.get_u64("gemma3.attention.sliding_window").unwrap(), 8);
    assert_eq!(
        file.get_u64("gemma3.attention.sliding_window_pattern")
            .unwrap(),
        3
    );
    assert_eq!(file.get_u64("gemma3.attention.key_length").unwrap(), 4);
    assert_eq!(file.get_f64("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(file.get_f64("gemma3.rope.freq_base_swa").unwrap(), 1e4);
    assert!(file.get("gemma3.final_logit_softcapping").is_none());
}

fn gpt2_tensors(prefix: &str) -> Vec<HfTensor> {
    let d = D as usize;
    let mut seed = 200;
    let mut t = |name: &str, shape: Vec<usize>| {
        seed += 1;
        let n = shape.iter().product::<usize>() as u64;
        (
            format!("{prefix}{name}"),
            Dtype::F32,
            shape,
            values(seed, n, -1.0, 1.0),
        )
    };
    vec![
        t("wte.weight", vec![16, d]),
        t("wpe.weight", vec![32, d]),
        t("h.0.ln_1.weight", vec![d]),
        t("h.0.ln_1.bias", vec![d]),
        t("h.0.attn.bias", vec![1, 1, 32, 32]),
        t("h.0.attn.masked_bias", vec![1]),
        t("h.0.attn.c_attn.weight", vec![d, 3 * d]),
        t("h.0.attn.c_attn.bias", vec![3 * d]),
        t("h.0.attn.c_proj.weight", vec![d, d]),
        t("h.0.attn.c_proj.bias", vec![d]),
        t("h.0.ln_2.weight", vec![d]),
        t("h.0.ln_2.bias", vec![d]),
        t("h.0.mlp.c_fc.weight", vec![d, 4 * d]),
        t("h.0.mlp.c_fc.bias", vec![4 * d]),
        t("h.0.mlp.c_proj.weight", vec![4 * d, d]),
        t("h.0.mlp.c_proj.bias", vec![d]),
        t("ln_f.weight", vec![d]),
        t("ln_f.bias", vec![d]),
    ]
}

#[test]
fn gpt2_conv1d_weights_are_transposed_with_or_without_the_prefix() {
    for prefix in ["", "transformer."] {
        let dir = TempDir::new("gpt2");
        let tensors = gpt2_tensors(prefix);
        let config = json!({
            "architectures": ["GPT2LMHeadModel"], "n_embd": D, "n_layer": 1, "n_head": 2,
            "n_positions": 32, "n_ctx": 32, "layer_norm_epsilon": 1e-5, "vocab_size": 16,
        });
        write_hf_dir(dir.path(), &config, &tensors);
        let file = HfDir::open(dir.path())
            .unwrap()
            .to_gguf_file(&no_tokenizer())
            .unwrap();
        let d = D as usize;
        for (hf, gguf, rows, cols) in [
            ("h.0.attn.c_attn.weight", "blk.0.attn_qkv.weight", d, 3 * d),
            ("h.0.attn.c_proj.weight", "blk.0.attn_output.weight", d, d),
            ("h.0.mlp.c_fc.weight", "blk.0.ffn_up.weight", d, 4 * d),
            ("h.0.mlp.c_proj.weight", "blk.0.ffn_down.weight", 4 * d, d),
        ] {
            let t = find(&tensors, &format!("{prefix}{hf}"));
            assert_eq!(
                file.dequantize(gguf).unwrap(),
                transpose(&t.3, rows, cols).unwrap(),
                "{hf}"
            );
            // GGUF dims: ne0 = the row length = the input width.
            assert_eq!(
                file.tensor(gguf).unwrap().dims,
                [rows as u64, cols as u64],
                "{hf}"
            );
        }
        for (hf, gguf) in [
            ("wte.weight", "token_embd.weight"),
            ("wpe.weight", "position_embd.weight"),
            ("h.0.ln_1.bias", "blk.0.attn_norm.bias"),
            ("h.0.attn.c_attn.bias", "blk.0.attn_qkv.bias"),
            ("h.0.ln_2.weight", "blk.0.ffn_norm.weight"),
            ("ln_f.bias", "output_norm.bias"),
        ] {
            let t = find(&tensors, &format!("{prefix}{hf}"));
            assert_eq!(file.dequantize(gguf).unwrap(), t.3, "{hf}");
        }
        assert_eq!(
            file.tensors().len(),
            16,
            "the attention buffers are left out"
        );
        assert_eq!(file.get_u64("gpt2.feed_forward_length").unwrap(), 4 * D);
        assert_eq!(
            file.get_f64("gpt2.attention.layer_norm_epsilon").unwrap(),
            f64::from(1e-5f32)
        );
        assert!(file.tensor("output.weight").is_none());
    }
}

#[test]
fn sharded_directories_read_every_shard() {
    let dir = TempDir::new("shards");
    let mut tensors = globals(true);
    tensors.extend(llama_layer("model.layers.0.", false));
    std::fs::write(
        dir.path().join("config.json"),
        common::llama_config(true).to_string(),
    )
    .unwrap();
    let (a, b) = tensors.split_at(5);
    let mut map = serde_json::Map::new();
    for (part, file) in [
        (a, "model-00001-of-00002.safetensors"),
        (b, "model-00002-of-00002.safetensors"),
    ] {
        std::fs::write(dir.path().join(file), common::safetensors_bytes(part)).unwrap();
        for t in part {
            map.insert(t.0.clone(), json!(file));
        }
    }
    let index = json!({ "metadata": {}, "weight_map": map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let hf = HfDir::open(dir.path()).unwrap();
    assert_eq!(hf.shards().len(), 2);
    let file = hf.to_gguf_file(&no_tokenizer()).unwrap();
    assert_eq!(file.tensors().len(), 11);

    // An unknown tensor name is an error naming it.
    let dir = TempDir::new("unknown");
    let mut tensors = globals(true);
    tensors.push((
        "model.layers.0.mlp.experts.weight".into(),
        Dtype::F32,
        vec![1],
        vec![0.0],
    ));
    write_hf_dir(dir.path(), &common::llama_config(true), &tensors);
    let err = HfDir::open(dir.path())
        .unwrap()
        .to_gguf(&no_tokenizer())
        .unwrap_err();
    assert!(
        matches!(&err, HfError::UnknownTensor { tensor, .. } if tensor.contains("experts")),
        "{err}"
    );
}
