//! Crafted, internally inconsistent llama GGUF files: each parses as GGUF, but loading the model
//! (or its tokenizer) must fail with the specific [`ModelError`] naming the problem, never panic
//! and never allocate what the file merely claims.

use burn::prelude::Device;
use kindle_gguf::{GgufFile, GgufWriter, MetadataValue};
use kindle_model::{Llama, LogitsFor, ModelError};
use kindle_tokenizer::{Tokenizer, TokenizerError};

const VOCAB: u64 = 64;
const D: u64 = 16;
const FF: u64 = 32;
const HEADS: u64 = 4;
const KV_HEADS: u64 = 2;
const HEAD_DIM: u64 = D / HEADS;
const LAYERS: u64 = 2;

/// One metadata or tensor edit applied to the tiny model.
enum Edit {
    /// Set (or replace) a metadata key.
    Set(&'static str, MetadataValue),
    /// Drop a metadata key.
    Unset(&'static str),
    /// Drop a tensor.
    DropTensor(&'static str),
    /// Replace a tensor by a zero-filled one of other dimensions.
    Reshape(&'static str, Vec<u64>),
    /// Add an `F32` tensor of these values (one dimension).
    AddTensor(&'static str, Vec<f32>),
}

/// The tiny model's metadata: byte-level-ish vocabulary of 64 printable ASCII tokens.
fn metadata() -> Vec<(&'static str, MetadataValue)> {
    // 63 single printable characters, then the one merge's result.
    let tokens: Vec<MetadataValue> = (0..VOCAB - 1)
        .map(|i| MetadataValue::String(char::from(b'!' + i as u8).to_string()))
        .chain([MetadataValue::String("!\"".into())])
        .collect();
    let merges = vec![MetadataValue::String("! \"".into())];
    let mut types = vec![MetadataValue::I32(1); VOCAB as usize];
    types[0] = MetadataValue::I32(3);
    vec![
        ("general.architecture", "llama".into()),
        ("general.name", "tiny".into()),
        ("llama.block_count", MetadataValue::U32(LAYERS as u32)),
        ("llama.context_length", MetadataValue::U32(64)),
        ("llama.embedding_length", MetadataValue::U32(D as u32)),
        ("llama.feed_forward_length", MetadataValue::U32(FF as u32)),
        (
            "llama.attention.head_count",
            MetadataValue::U32(HEADS as u32),
        ),
        (
            "llama.attention.head_count_kv",
            MetadataValue::U32(KV_HEADS as u32),
        ),
        (
            "llama.rope.dimension_count",
            MetadataValue::U32(HEAD_DIM as u32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon",
            MetadataValue::F32(1e-5),
        ),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.pre", "gpt2".into()),
        ("tokenizer.ggml.tokens", MetadataValue::Array(tokens.into())),
        ("tokenizer.ggml.merges", MetadataValue::Array(merges.into())),
        (
            "tokenizer.ggml.token_type",
            MetadataValue::Array(types.into()),
        ),
        ("tokenizer.ggml.bos_token_id", MetadataValue::U32(0)),
        ("tokenizer.ggml.eos_token_id", MetadataValue::U32(0)),
    ]
}

/// The tiny model's tensors, GGUF dimensions `[d_in, d_out]`.
fn tensors() -> Vec<(String, Vec<u64>)> {
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![D, VOCAB]),
        ("output_norm.weight".to_string(), vec![D]),
    ];
    for l in 0..LAYERS {
        let p = format!("blk.{l}.");
        t.extend([
            (format!("{p}attn_norm.weight"), vec![D]),
            (format!("{p}ffn_norm.weight"), vec![D]),
            (format!("{p}attn_q.weight"), vec![D, D]),
            (format!("{p}attn_k.weight"), vec![D, KV_HEADS * HEAD_DIM]),
            (format!("{p}attn_v.weight"), vec![D, KV_HEADS * HEAD_DIM]),
            (format!("{p}attn_output.weight"), vec![D, D]),
            (format!("{p}ffn_gate.weight"), vec![D, FF]),
            (format!("{p}ffn_up.weight"), vec![D, FF]),
            (format!("{p}ffn_down.weight"), vec![FF, D]),
        ]);
    }
    t
}

/// Deterministic small weights (norms are ones).
fn values(name: &str, n: usize) -> Vec<f32> {
    if name.ends_with("norm.weight") {
        return vec![1.0; n];
    }
    let seed = name
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    (0..n)
        .map(|i| {
            let x = seed.wrapping_add(i as u32).wrapping_mul(2_654_435_761);
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

/// The bytes of the tiny llama model with `edits` applied.
fn tiny_model(edits: &[Edit]) -> Vec<u8> {
    let mut meta = metadata();
    let mut tens = tensors();
    let mut added = Vec::new();
    for edit in edits {
        match edit {
            Edit::Set(key, value) => {
                meta.retain(|(k, _)| k != key);
                meta.push((key, value.clone()));
            }
            Edit::Unset(key) => meta.retain(|(k, _)| k != key),
            Edit::DropTensor(name) => tens.retain(|(n, _)| n != name),
            Edit::Reshape(name, dims) => {
                for (n, d) in &mut tens {
                    if n == name {
                        *d = dims.clone();
                    }
                }
            }
            Edit::AddTensor(name, values) => added.push((*name, values.clone())),
        }
    }
    let mut writer = GgufWriter::new();
    for (key, value) in meta {
        writer = writer.metadata(key, value);
    }
    for (name, dims) in tens {
        let n = dims.iter().product::<u64>() as usize;
        writer = writer.tensor_f32(name.clone(), &dims, &values(&name, n));
    }
    for (name, v) in added {
        writer = writer.tensor_f32(name, &[v.len() as u64], &v);
    }
    writer.to_bytes()
}

fn load(edits: &[Edit]) -> Result<Llama, ModelError> {
    let file = GgufFile::from_bytes(tiny_model(edits))?;
    Llama::from_gguf(&file, &Device::flex())
}

/// Load with `edits`, expecting an error whose message names every one of `parts`.
fn load_err(edits: &[Edit], parts: &[&str]) -> ModelError {
    let err = match load(edits) {
        Ok(model) => panic!("inconsistent model loaded: {:?}", model.config()),
        Err(e) => e,
    };
    let msg = err.to_string();
    for part in parts {
        assert!(msg.contains(part), "message {msg:?} does not name {part:?}");
    }
    err
}

fn tokenizer_err(edits: &[Edit], parts: &[&str]) -> TokenizerError {
    let file = GgufFile::from_bytes(tiny_model(edits)).expect("valid GGUF");
    let err = match Tokenizer::from_gguf(&file) {
        Ok(_) => panic!("inconsistent tokenizer built"),
        Err(e) => e,
    };
    let msg = err.to_string();
    for part in parts {
        assert!(msg.contains(part), "message {msg:?} does not name {part:?}");
    }
    err
}

fn u32v(v: u32) -> MetadataValue {
    MetadataValue::U32(v)
}

#[test]
fn the_tiny_model_loads_tokenizes_and_runs() {
    let file = GgufFile::from_bytes(tiny_model(&[])).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tokenizer.vocab_size(), VOCAB as usize);
    let ids = tokenizer.encode("!\"AB", false).unwrap();
    assert_eq!(ids, [63, 32, 33], "the merge applies");
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), "!\"AB");
    let model = Llama::from_gguf(&file, &Device::flex()).unwrap();
    assert_eq!(model.config().vocab_size, VOCAB as usize);
    assert_eq!(model.config().n_kv_heads, KV_HEADS as usize);
    let mut cache = model.new_cache(8);
    let logits = model.forward(&ids, &mut cache, LogitsFor::Last).unwrap();
    assert_eq!(logits.len(), VOCAB as usize);
    assert!(logits.iter().all(|x| x.is_finite()));
    let next = model.forward(&[5], &mut cache, LogitsFor::All).unwrap();
    assert_eq!(next.len(), VOCAB as usize);
}

#[test]
fn kv_heads_not_dividing_heads() {
    let err = load_err(
        &[Edit::Set("llama.attention.head_count_kv", u32v(3))],
        &["head_count_kv", "3 KV heads", "4 query heads"],
    );
    assert!(
        matches!(err, ModelError::Hyperparameter { ref key, .. } if key == "attention.head_count_kv")
    );
}

#[test]
fn more_kv_heads_than_heads() {
    let err = load_err(
        &[Edit::Set("llama.attention.head_count_kv", u32v(8))],
        &["head_count_kv"],
    );
    assert!(matches!(err, ModelError::Hyperparameter { .. }));
}

#[test]
fn heads_not_dividing_the_embedding_width() {
    let err = load_err(
        &[
            Edit::Set("llama.attention.head_count", u32v(5)),
            Edit::Set("llama.attention.head_count_kv", u32v(5)),
        ],
        &["head_count", "5 heads", "16"],
    );
    assert!(
        matches!(err, ModelError::Hyperparameter { ref key, .. } if key == "attention.head_count")
    );
}

#[test]
fn huge_head_count() {
    let err = load_err(
        &[Edit::Set(
            "llama.attention.head_count",
            MetadataValue::U64(u64::MAX),
        )],
        &["head_count"],
    );
    assert!(matches!(err, ModelError::Hyperparameter { .. }));
}

#[test]
fn embedding_width_not_matching_the_tensors() {
    let err = load_err(
        &[
            Edit::Set("llama.embedding_length", u32v(32)),
            Edit::Set("llama.rope.dimension_count", u32v(8)),
        ],
        &["token_embd.weight", "[16, 64]", "[32, 64]"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
}

#[test]
fn one_layer_tensor_of_the_wrong_shape() {
    let err = load_err(
        &[Edit::Reshape("blk.1.attn_k.weight", vec![D, D])],
        &["blk.1.attn_k.weight", "[16, 16]", "[16, 8]"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
}

#[test]
fn vocab_size_key_not_matching_the_embedding_rows() {
    let err = load_err(
        &[Edit::Set("llama.vocab_size", u32v(100))],
        &["token_embd.weight", "[16, 64]", "[16, 100]"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
}

#[test]
fn token_list_not_matching_the_embedding_rows() {
    // 64 tokens in the vocabulary, 48 embedding rows and no `vocab_size` key.
    let err = load_err(
        &[Edit::Reshape("token_embd.weight", vec![D, 48])],
        &["token_embd.weight", "[16, 48]", "[16, 64]"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
}

#[test]
fn bos_id_outside_the_vocabulary() {
    let err = tokenizer_err(
        &[Edit::Set("tokenizer.ggml.bos_token_id", u32v(64))],
        &["bos", "64", "64 tokens"],
    );
    assert!(matches!(
        err,
        TokenizerError::SpecialIdOutOfRange { which: "bos", .. }
    ));
}

#[test]
fn eos_id_outside_the_vocabulary() {
    let err = tokenizer_err(
        &[Edit::Set("tokenizer.ggml.eos_token_id", u32v(1000))],
        &["eos", "1000"],
    );
    assert!(matches!(
        err,
        TokenizerError::SpecialIdOutOfRange { which: "eos", .. }
    ));
}

#[test]
fn eos_id_beyond_32_bits() {
    let err = tokenizer_err(
        &[Edit::Set(
            "tokenizer.ggml.eos_token_id",
            MetadataValue::U64(1 << 40),
        )],
        &["tokenizer.ggml.eos_token_id"],
    );
    assert!(matches!(err, TokenizerError::MalformedKey { .. }));
}

#[test]
fn token_types_not_one_per_token() {
    let err = tokenizer_err(
        &[Edit::Set(
            "tokenizer.ggml.token_type",
            MetadataValue::Array(vec![MetadataValue::I32(1); 3].into()),
        )],
        &["64 tokens", "3 token types"],
    );
    assert!(matches!(err, TokenizerError::TokenTypeCountMismatch { .. }));
}

#[test]
fn a_required_tensor_missing() {
    let err = load_err(
        &[Edit::DropTensor("blk.1.ffn_down.weight")],
        &["blk.1.ffn_down.weight", "missing"],
    );
    assert!(matches!(err, ModelError::MissingTensor(_)));
}

#[test]
fn the_embedding_missing() {
    let err = load_err(
        &[Edit::DropTensor("token_embd.weight")],
        &["token_embd.weight"],
    );
    assert!(matches!(err, ModelError::MissingTensor(_)));
}

#[test]
fn block_count_zero() {
    let err = load_err(
        &[Edit::Set("llama.block_count", u32v(0))],
        &["block_count", "positive"],
    );
    assert!(matches!(err, ModelError::Hyperparameter { .. }));
}

#[test]
fn block_count_more_than_the_file_holds() {
    let err = load_err(
        &[Edit::Set("llama.block_count", u32v(3))],
        &["blk.2.attn_norm.weight"],
    );
    assert!(matches!(err, ModelError::MissingTensor(_)));
}

#[test]
fn block_count_u64_max_fails_without_allocating() {
    let err = load_err(
        &[Edit::Set("llama.block_count", MetadataValue::U64(u64::MAX))],
        &["block_count"],
    );
    assert!(matches!(
        err,
        ModelError::Hyperparameter { .. } | ModelError::MissingTensor(_)
    ));
}

#[test]
fn huge_feed_forward_and_embedding_widths_fail_on_shapes() {
    let err = load_err(
        &[Edit::Set(
            "llama.feed_forward_length",
            MetadataValue::U64(1 << 62),
        )],
        &["ffn_gate.weight"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
    let err = load_err(
        &[
            Edit::Set("llama.embedding_length", MetadataValue::U64(1 << 62)),
            Edit::Unset("llama.rope.dimension_count"),
        ],
        &["token_embd.weight"],
    );
    assert!(matches!(err, ModelError::TensorShape { .. }));
}

#[test]
fn huge_context_length_loads_without_preallocating() {
    // The context length is only an upper bound: nothing is allocated from it at load.
    let model = load(&[Edit::Set(
        "llama.context_length",
        MetadataValue::U64(u64::MAX),
    )])
    .expect("loads");
    let mut cache = model.new_cache(4);
    model.forward(&[1, 2], &mut cache, LogitsFor::Last).unwrap();
}

#[test]
fn context_length_zero() {
    let err = load_err(
        &[Edit::Set("llama.context_length", u32v(0))],
        &["context_length"],
    );
    assert!(matches!(err, ModelError::Hyperparameter { .. }));
}

#[test]
fn an_unsupported_architecture() {
    let err = load_err(
        &[Edit::Set("general.architecture", "falcon".into())],
        &["unsupported", "falcon", "llama", "qwen2", "gemma3", "gpt2"],
    );
    assert!(matches!(err, ModelError::UnsupportedArchitecture(ref a) if a == "falcon"));
}

#[test]
fn no_architecture_key() {
    load_err(
        &[Edit::Unset("general.architecture")],
        &["general.architecture"],
    );
}

#[test]
fn a_missing_required_key() {
    for key in [
        "llama.embedding_length",
        "llama.block_count",
        "llama.attention.head_count",
        "llama.feed_forward_length",
        "llama.context_length",
    ] {
        let err = load_err(&[Edit::Unset(key)], &[key]);
        assert!(matches!(err, ModelError::Gguf(_)), "{key}: {err:?}");
    }
}

#[test]
fn a_key_of_the_wrong_type() {
    load_err(
        &[Edit::Set("llama.embedding_length", "sixteen".into())],
        &["llama.embedding_length"],
    );
    load_err(
        &[Edit::Set(
            "llama.attention.head_count",
            MetadataValue::I32(-4),
        )],
        &["llama.attention.head_count"],
    );
}

#[test]
fn bad_float_hyperparameters() {
    load_err(
        &[Edit::Set(
            "llama.attention.layer_norm_rms_epsilon",
            MetadataValue::F32(f32::NAN),
        )],
        &["layer_norm_rms_epsilon"],
    );
    load_err(
        &[Edit::Set("llama.rope.freq_base", MetadataValue::F32(-1.0))],
        &["rope.freq_base"],
    );
}

#[test]
fn partial_rotary_dimension() {
    load_err(
        &[Edit::Set("llama.rope.dimension_count", u32v(2))],
        &["rope.dimension_count"],
    );
}

#[test]
fn a_token_id_outside_the_vocabulary_given_to_forward() {
    let model = load(&[]).unwrap();
    let mut cache = model.new_cache(8);
    let err = model
        .forward(&[1, VOCAB as u32], &mut cache, LogitsFor::Last)
        .unwrap_err();
    assert!(matches!(
        err,
        ModelError::TokenOutOfRange {
            token: 64,
            vocab_size: 64
        }
    ));
    assert!(err.to_string().contains("64"));
    assert_eq!(
        cache.len(),
        0,
        "a refused forward leaves the cache untouched"
    );
    let err = model
        .forward(&[u32::MAX], &mut cache, LogitsFor::Last)
        .unwrap_err();
    assert!(matches!(err, ModelError::TokenOutOfRange { .. }));
    assert!(matches!(
        model.forward(&[], &mut cache, LogitsFor::Last),
        Err(ModelError::EmptyInput)
    ));
}

#[test]
fn more_tokens_than_the_cache_holds() {
    let model = load(&[]).unwrap();
    let mut cache = model.new_cache(2);
    let err = model
        .forward(&[1, 2, 3], &mut cache, LogitsFor::Last)
        .unwrap_err();
    assert!(matches!(err, ModelError::Cache(_)), "{err:?}");
}

/// Rotary scaling the file states: linear, YaRN and Llama 3's frequency factors load (and
/// change the logits); what llama.cpp does not run, or runs as something else, is refused
/// naming the key or tensor.
#[test]
fn rotary_scaling_keys_and_frequency_factors() {
    let logits = |edits: &[Edit]| {
        let model = load(edits).unwrap();
        let mut cache = model.new_cache(8);
        model
            .forward(&[5, 9, 3], &mut cache, LogitsFor::All)
            .unwrap()
    };
    let plain = logits(&[]);
    let factor = |f: f32| Edit::Set("llama.rope.scaling.factor", MetadataValue::F32(f));
    let kind = |k: &'static str| Edit::Set("llama.rope.scaling.type", k.into());
    let freqs = |v: Vec<f32>| Edit::AddTensor("rope_freqs.weight", v);
    for edits in [
        vec![kind("linear"), factor(4.0)],
        // No type: llama.cpp's default, linear.
        vec![factor(4.0)],
        vec![kind("yarn"), factor(4.0)],
        vec![freqs(vec![1.0, 8.0])],
    ] {
        assert_ne!(logits(&edits), plain);
    }
    // `none`, or a factor of 1 or 0, change nothing.
    for edits in [
        vec![kind("none"), factor(4.0)],
        vec![kind("linear"), factor(1.0)],
        vec![factor(0.0)],
    ] {
        assert_eq!(logits(&edits), plain);
        assert_eq!(load(&edits).unwrap().config().rope_scaling, None);
    }
    load_err(
        &[kind("longrope"), factor(4.0)],
        &["llama.rope.scaling.type", "longrope", "linear and yarn"],
    );
    load_err(&[factor(-2.0)], &["llama.rope.scaling.factor", "-2"]);
    load_err(
        &[Edit::Set(
            "llama.rope.scaling.attn_factor",
            MetadataValue::F32(f32::NAN),
        )],
        &["llama.rope.scaling.attn_factor", "NaN"],
    );
    load_err(
        &[
            kind("yarn"),
            factor(4.0),
            Edit::Set(
                "llama.rope.scaling.yarn_log_multiplier",
                MetadataValue::F32(0.1),
            ),
        ],
        &["yarn_log_multiplier", "not supported"],
    );
    let err = load_err(&[freqs(vec![1.0; 3])], &["rope_freqs.weight", "[2]", "[3]"]);
    assert!(matches!(err, ModelError::TensorShape { .. }));
    load_err(
        &[freqs(vec![1.0, 0.0])],
        &["rope_freqs.weight", "positive", "0"],
    );
}

/// A tensor the architecture does not read is refused, named: llama.cpp reads a llama
/// file's optional biases, which kindle does not, so running without them would be a
/// silently different model.
#[test]
fn a_tensor_the_architecture_does_not_read() {
    let err = load_err(
        &[Edit::AddTensor(
            "blk.1.attn_output.bias",
            vec![0.5; D as usize],
        )],
        &["blk.1.attn_output.bias", "llama", "does not read it"],
    );
    assert!(matches!(err, ModelError::UnexpectedTensor { .. }));
}
