//! GGUF → Hugging Face → GGUF on tiny random models of every architecture: the same tensors
//! (bit-exact through F32), the same metadata, and tensor types as asked.

mod common;

use common::{TempDir, tiny_gguf};
use kindle_gguf::{GgmlType, GgufFile};
use kindle_hf::{HfDir, HfDtype, ModelConfig, ToGgufOptions, write_hf};

const ARCHS: [(&str, &str); 5] = [
    ("llama", "llama-bpe"),
    ("qwen2", "qwen2"),
    ("qwen3", "qwen2"),
    ("gpt2", "gpt-2"),
    ("gemma3", "smollm"),
];

fn round_trip(gguf: &GgufFile, dtype: HfDtype, options: &ToGgufOptions) -> (TempDir, GgufFile) {
    let dir = TempDir::new("rt");
    write_hf(gguf, dir.path(), dtype).unwrap();
    let back = HfDir::open(dir.path())
        .unwrap()
        .to_gguf_file(options)
        .unwrap();
    (dir, back)
}

/// The in-memory file and the file written to disk (each tensor converted as the file
/// reaches it) are the file the writer builds from converted tensors, byte for byte: every
/// architecture (GPT-2's transposed weights, Llama's permuted rows, Gemma's norms), kept and
/// re-encoded types.
#[test]
fn the_file_built_in_place_is_the_writer_s() {
    for (arch, pre) in ARCHS {
        let gguf = tiny_gguf(arch, pre);
        for (dtype, ty) in [
            (HfDtype::BF16, None),
            (HfDtype::F16, None),
            (HfDtype::F32, Some(GgmlType::Q8_0)),
        ] {
            let dir = TempDir::new("inplace");
            write_hf(&gguf, dir.path(), dtype).unwrap();
            let hf = HfDir::open(dir.path()).unwrap();
            let options = ToGgufOptions {
                tensor_type: ty,
                tokenizer: true,
            };
            let path = dir.path().join("written.gguf");
            hf.write_gguf(&path, &options).unwrap();
            let written = std::fs::read(&path).unwrap();
            let writer = hf.to_gguf(&options).unwrap().to_bytes();
            assert!(written == writer, "{arch} {dtype:?}: the written file");
            let built = hf.to_gguf_file(&options).unwrap();
            let whole = GgufFile::from_bytes(writer).unwrap();
            assert_eq!(built.metadata(), whole.metadata(), "{arch} {dtype:?}");
            assert_eq!(built.tensors(), whole.tensors(), "{arch} {dtype:?}");
            for t in whole.tensors() {
                assert!(
                    built.tensor_bytes(t) == whole.tensor_bytes(t),
                    "{arch} {dtype:?} {}",
                    t.name
                );
            }
        }
    }
}

#[test]
fn every_architecture_round_trips_bit_exact_through_f32() {
    for (arch, pre) in ARCHS {
        let gguf = tiny_gguf(arch, pre);
        let (_dir, back) = round_trip(&gguf, HfDtype::F32, &ToGgufOptions::default());
        let names = |f: &GgufFile| {
            f.tensors()
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
        };
        let mut want = names(&gguf);
        let mut got = names(&back);
        want.sort();
        got.sort();
        assert_eq!(got, want, "{arch}: tensor names");
        for info in gguf.tensors() {
            let b = back.tensor(&info.name).unwrap();
            assert_eq!(b.dims, info.dims, "{arch} {}: dims", info.name);
            assert_eq!(b.ty, GgmlType::F32, "{arch} {}", info.name);
            assert_eq!(
                back.tensor_bytes(b),
                gguf.tensor_bytes(info),
                "{arch} {}: bytes",
                info.name
            );
        }
        // Every key of the original reads back with its value.
        for (key, value) in gguf.metadata() {
            assert_eq!(back.get(key), Some(value), "{arch}: metadata {key}");
        }
        assert_eq!(
            ModelConfig::from_gguf(&back).unwrap(),
            ModelConfig::from_gguf(&gguf).unwrap()
        );
    }
}

#[test]
fn half_precision_outputs_round_to_the_nearest_and_stay_half() {
    for (arch, pre) in ARCHS {
        let gguf = tiny_gguf(arch, pre);
        for dtype in [HfDtype::F16, HfDtype::BF16] {
            let (dir, back) = round_trip(&gguf, dtype, &ToGgufOptions::default());
            let config: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.path().join("config.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(config["torch_dtype"], dtype.torch_name());
            // llama.cpp's `general.file_type`: MOSTLY_F16 (1) or MOSTLY_BF16 (32).
            let file_type = if dtype == HfDtype::F16 { 1 } else { 32 };
            assert_eq!(back.get_u64("general.file_type").unwrap(), file_type);
            for info in gguf.tensors() {
                let b = back.tensor(&info.name).unwrap();
                // F16 matrices stay F16, BF16 ones BF16; 1-D tensors are F32.
                let want = match dtype {
                    _ if info.dims.len() != 2 => GgmlType::F32,
                    HfDtype::F16 => GgmlType::F16,
                    _ => GgmlType::BF16,
                };
                assert_eq!(b.ty, want, "{arch} {dtype:?} {}", info.name);
                let orig = gguf.dequantize(&info.name).unwrap();
                let got = back.dequantize(&info.name).unwrap();
                let tol = if dtype == HfDtype::F16 { 1e-3 } else { 1.6e-2 };
                for (a, b) in orig.iter().zip(&got) {
                    assert!(
                        (a - b).abs() <= tol * a.abs().max(1.0),
                        "{arch} {}: {a} vs {b}",
                        info.name
                    );
                }
            }
        }
    }
}

#[test]
fn a_target_type_quantizes_matrices_whose_rows_are_whole_blocks() {
    let gguf = tiny_gguf("llama", "llama-bpe");
    let options = ToGgufOptions {
        tensor_type: Some(GgmlType::Q8_0),
        tokenizer: false,
    };
    let (_dir, back) = round_trip(&gguf, HfDtype::F32, &options);
    // Rows of 8 are not whole Q8_0 blocks (32): the matrices take llama-quantize's fallback
    // for that, F16, the norms stay F32 ...
    for t in back.tensors() {
        let want = if t.dims.len() >= 2 {
            GgmlType::F16
        } else {
            GgmlType::F32
        };
        assert_eq!(t.ty, want, "{}", t.name);
    }
    assert_eq!(back.get_u64("general.file_type").unwrap(), 7);
    assert!(back.get("tokenizer.ggml.tokens").is_none());
    // ... but 2-D tensors with rows of 32 are quantized: the embedding of a wide model.
    let dir = TempDir::new("q8");
    let v = common::values(9, 32 * 4, -1.0, 1.0);
    let config = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 32, "intermediate_size": 32,
        "num_hidden_layers": 0, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
    });
    common::write_hf_dir(
        dir.path(),
        &config,
        &[
            (
                "model.embed_tokens.weight".into(),
                safetensors::Dtype::BF16,
                vec![4, 32],
                v.clone(),
            ),
            (
                "model.norm.weight".into(),
                safetensors::Dtype::F16,
                vec![32],
                v[..32].to_vec(),
            ),
        ],
    );
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        let options = ToGgufOptions {
            tensor_type: Some(ty),
            tokenizer: false,
        };
        let file = HfDir::open(dir.path())
            .unwrap()
            .to_gguf_file(&options)
            .unwrap();
        assert_eq!(file.tensor("token_embd.weight").unwrap().ty, ty);
        assert_eq!(file.tensor("output_norm.weight").unwrap().ty, GgmlType::F32);
        let back = file.dequantize("token_embd.weight").unwrap();
        let bf16: Vec<f32> = v
            .iter()
            .map(|x| half::bf16::from_f32(*x).to_f32())
            .collect();
        let want_bytes = kindle_gguf::quant::quantize(ty, &bf16).unwrap();
        assert_eq!(file.tensor_data("token_embd.weight").unwrap(), want_bytes);
        assert_eq!(back.len(), 128);
    }
    let err = HfDir::open(dir.path())
        .unwrap()
        .to_gguf(&ToGgufOptions {
            tensor_type: Some(GgmlType::Q8_K),
            tokenizer: false,
        })
        .unwrap_err();
    assert!(err.to_string().contains("Q8_K"), "{err}");
}

#[test]
fn written_directories_hold_what_transformers_reads() {
    let gguf = tiny_gguf("gpt2", "gpt-2");
    let dir = TempDir::new("files");
    write_hf(&gguf, dir.path(), HfDtype::F32).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let st = kindle_hf::SafetensorsFile::open(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(st.metadata(), [("format".to_owned(), "pt".to_owned())]);
    // GPT-2 names carry the `transformer.` prefix and Conv1D weights are [in, out].
    let qkv = st.tensor("transformer.h.0.attn.c_attn.weight").unwrap();
    assert_eq!(qkv.shape, [common::D, 3 * common::D]);
    assert!(st.tensor("lm_head.weight").is_none());
    // Released pages (a converted tensor's) read back the same bytes from the file.
    let before = st.data(qkv).to_vec();
    st.release(qkv);
    assert_eq!(st.data(qkv), before);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["architectures"][0], "GPT2LMHeadModel");
    assert_eq!(config["n_embd"], common::D);
    assert_eq!(config["layer_norm_epsilon"], 1e-5);
    let generation: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("generation_config.json")).unwrap(),
    )
    .unwrap();
    let v = common::vocab();
    assert_eq!(generation["eos_token_id"], common::id_of(&v, "<|im_end|>"));
}

/// The tiny llama model with base `theta` and `factors` as its `rope_freqs.weight`.
fn with_rope_freqs(theta: f32, factors: &[f32]) -> GgufFile {
    let gguf = tiny_gguf("llama", "llama-bpe");
    let mut w = kindle_gguf::GgufWriter::new();
    for (key, value) in gguf.metadata() {
        let value = match key.as_str() {
            "llama.rope.freq_base" => kindle_gguf::MetadataValue::F32(theta),
            _ => value.clone(),
        };
        w = w.metadata(key.clone(), value);
    }
    w = w.tensor_f32("rope_freqs.weight", &[factors.len() as u64], factors);
    for t in gguf.tensors() {
        w = w.tensor(t.name.clone(), &t.dims, t.ty, gguf.tensor_bytes(t).to_vec());
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

/// Llama 3's frequency factors go to config.json as a `llama3` `rope_scaling` (not as a
/// weight) and come back as the same `rope_freqs.weight`, first, as llama.cpp's converter
/// writes it; factors no `llama3` scaling gives are refused, naming the tensor.
#[test]
fn llama3_frequency_factors_round_trip_through_rope_scaling() {
    let theta = 1e7;
    let scaling = kindle_hf::Llama3Scaling {
        factor: 32.0,
        ..Default::default()
    };
    let factors = scaling.frequency_factors(4, f64::from(theta));
    assert_eq!(factors, [1.0, 32.0]);
    let gguf = with_rope_freqs(theta, &factors);
    let (dir, back) = round_trip(&gguf, HfDtype::F32, &ToGgufOptions::default());
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    let s = &config["rope_scaling"];
    assert_eq!(s["rope_type"], "llama3", "{config}");
    assert_eq!(
        (&s["factor"], &s["low_freq_factor"], &s["high_freq_factor"]),
        (&32.0.into(), &1.0.into(), &4.0.into())
    );
    assert_eq!(s["original_max_position_embeddings"], 8192);
    assert_eq!(back.tensors()[0].name, "rope_freqs.weight");
    let (a, b) = (
        back.tensor("rope_freqs.weight").unwrap(),
        gguf.tensor("rope_freqs.weight").unwrap(),
    );
    assert_eq!(back.tensor_bytes(a), gguf.tensor_bytes(b));
    assert!(back.get("llama.rope.scaling.type").is_none());
    for (key, value) in gguf.metadata() {
        assert_eq!(back.get(key), Some(value), "metadata {key}");
    }
    let err = write_hf(
        &with_rope_freqs(theta, &[2.0, 3.0]),
        TempDir::new("rf").path(),
        HfDtype::F32,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("rope_freqs.weight"), "{err}");
}
