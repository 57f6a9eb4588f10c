//! Speculative decoding and `kindle quantize` as the binary runs them on the real model:
//! greedy output with each drafter equals plain greedy output, token for token; bad drafting
//! settings are clear errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::tiny::TinyLlama;
use serde_json::Value;

fn kindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .output()
        .expect("running kindle")
}

fn tmp_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("speculative_cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An F16 copy of the real model made with `kindle quantize` (once per test binary).
fn f16_target(model: &Path) -> &'static PathBuf {
    static F16: OnceLock<PathBuf> = OnceLock::new();
    F16.get_or_init(|| {
        let out = tmp_dir().join("smollm2-f16.gguf");
        let run = kindle(&[
            "quantize",
            model.to_str().unwrap(),
            out.to_str().unwrap(),
            "--type",
            "f16",
        ]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        out
    })
}

fn prompt_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/speculative")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The generated ids of a greedy `--json` run.
fn tokens(model: &Path, prompt: &str, extra: &[&str]) -> Vec<u64> {
    let mut args = vec![
        "generate",
        "-m",
        model.to_str().unwrap(),
        "--special",
        "--json",
        "-n",
        "48",
        prompt,
    ];
    args.extend_from_slice(extra);
    let out = kindle(&args);
    assert!(
        out.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seq = &json["sequences"][0];
    let ids = if seq.is_null() {
        &json["tokens"]
    } else {
        &seq["tokens"]
    };
    ids.as_array()
        .unwrap_or_else(|| panic!("no tokens in {json}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn prompts() -> Vec<String> {
    vec![
        "The capital of France is".into(),
        "Once upon a time, in a small village,".into(),
        prompt_file("edit_paragraph.txt"),
        prompt_file("refactor_code.txt"),
    ]
}

#[test]
fn greedy_output_is_unchanged_by_each_drafter() {
    let Some(model) = common::real_model() else {
        return;
    };
    let model_str = model.to_str().unwrap();
    let f16 = f16_target(&model);
    for prompt in prompts() {
        let plain = tokens(&model, &prompt, &[]);
        for extra in [
            &["--lookup-ngram", "3", "--draft-max", "8"][..],
            &["--lookup-ngram", "1", "--draft-max", "3"],
            &[
                "--lookup-ngram",
                "4",
                "--lookup-min",
                "1",
                "--draft-adaptive",
            ],
            &[
                "--self-speculative",
                "10",
                "--draft-max",
                "4",
                "--draft-kv-type",
                "f16",
            ],
            &[
                "--self-speculative",
                "10",
                "--draft-max",
                "4",
                "--draft-vocab",
                "4096",
            ],
            &[
                "--lookup-ngram",
                "3",
                "--lookup-min",
                "1",
                "--draft-max",
                "6",
                "--draft-min",
                "3",
            ],
        ] {
            assert_eq!(
                plain,
                tokens(&model, &prompt, extra),
                "{extra:?} on {prompt:?}"
            );
        }
        let plain = tokens(f16, &prompt, &[]);
        for extra in [
            &["--draft-model", model_str, "--draft-max", "6"][..],
            &[
                "--draft-model",
                model_str,
                "--draft-activations",
                "f32",
                "--draft-kv-type",
                "f32",
                "--draft-max",
                "8",
            ],
            &[
                "--draft-model",
                model_str,
                "--draft-max",
                "8",
                "--draft-vocab",
                "8192",
            ],
            &[
                "--draft-model",
                model_str,
                "--draft-max",
                "8",
                "--draft-p-min",
                "0.75",
            ],
            &[
                "--draft-model",
                model_str,
                "--draft-p-min",
                "0.75",
                "--draft-min",
                "3",
            ],
            &["--lookup-ngram", "2"],
        ] {
            assert_eq!(
                plain,
                tokens(f16, &prompt, extra),
                "F16 target, {extra:?} on {prompt:?}"
            );
        }
    }
}

/// Gemma-3's 262,144-token head is most of a draft step: a draft over part of the
/// vocabulary (the file itself with 8-bit activations, or its first six layers) leaves the
/// greedy output unchanged.
#[test]
fn gemma3_greedy_output_is_unchanged_by_a_draft_over_part_of_the_vocabulary() {
    let Some(model) = common::gemma3_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let m = model.to_str().unwrap();
    for prompt in [
        "The capital of France is".into(),
        prompt_file("edit_paragraph.txt"),
    ] {
        let plain = tokens(&model, &prompt, &[]);
        for extra in [
            &["--draft-model", m, "--draft-vocab", "32768"][..],
            &[
                "--self-speculative",
                "6",
                "--draft-max",
                "3",
                "--draft-vocab",
                "4096",
            ],
        ] {
            assert_eq!(
                plain,
                tokens(&model, &prompt, extra),
                "Gemma-3, {extra:?} on {prompt:?}"
            );
        }
    }
}

/// `kindle chat` fed `lines` on standard input, with `extra` flags: the replies as printed.
fn chat(model: &Path, lines: &str, extra: &[&str]) -> (String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["chat", "-m", model.to_str().unwrap(), "-n", "40", "-v"])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running kindle chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "kindle chat {extra:?}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

#[test]
fn chat_replies_are_unchanged_by_drafting() {
    let Some(model) = common::real_model() else {
        return;
    };
    // The second turn repeats the first reply's words: prompt lookup finds them in the
    // conversation the cache holds.
    let lines = "List the planets of the solar system.\nRepeat that list, in the same order.\n";
    let (plain, _) = chat(&model, lines, &[]);
    for extra in [
        &["--lookup-ngram", "2", "--draft-max", "6"][..],
        &["--self-speculative", "10", "--draft-max", "4"],
    ] {
        let (drafted, log) = chat(&model, lines, extra);
        assert_eq!(drafted, plain, "{extra:?}");
        // -v reports the drafting after each turn, with something drafted.
        let stats: Vec<&str> = log.lines().filter(|l| l.contains("speculative:")).collect();
        assert_eq!(stats.len(), 2, "{extra:?}: {log}");
        assert!(
            !stats[1].contains("speculative: 0 drafted"),
            "{extra:?}: {log}"
        );
    }
}

fn fails_with(args: &[&str], needle: &str) {
    let out = kindle(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(err.contains(needle), "{args:?}: {err}");
}

/// `-v` names the draft model's activations and cache: 8-bit and int8 unless told otherwise
/// (a CPU device), the flags' when given.
#[test]
fn verbose_output_names_the_draft_models_formats() {
    let Some(model) = common::real_model() else {
        return;
    };
    let m = model.to_str().unwrap();
    let base = [
        "generate",
        "-m",
        m,
        "-n",
        "4",
        "-v",
        "--self-speculative",
        "6",
    ];
    for (extra, line) in [
        (&[][..], "draft model: int8 activations, int8 KV cache"),
        (
            &["--draft-activations", "f32", "--draft-kv-type", "f16"],
            "draft model: f32 activations, f16 KV cache",
        ),
    ] {
        let out = kindle(&[&base[..], extra, &["The capital of France is"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?}: {err}");
        assert!(err.contains(line), "{extra:?}: {err}");
    }
}

#[test]
fn bad_drafting_settings_are_clear_errors() {
    let Some(model) = common::real_model() else {
        return;
    };
    let m = model.to_str().unwrap();
    let cases: [(&[&str], &str); 17] = [
        (
            &["--lookup-ngram", "2", "--draft-max", "0"],
            "--draft-max must be at least 1",
        ),
        (
            &["--lookup-ngram", "2", "--num-beams", "2"],
            "cannot be combined with beam search",
        ),
        (&["--draft-max", "4"], "--draft-max needs a drafter"),
        (
            &["--lookup-ngram", "2", "--draft-activations", "f32"],
            "--draft-activations sets a draft model's kernels",
        ),
        (&["--draft-activations", "int4"], "int4"),
        (
            &["--lookup-ngram", "2", "--draft-kv-type", "f16"],
            "--draft-kv-type sets a draft model's cache",
        ),
        (&["--self-speculative", "4", "--draft-kv-type", "q4"], "q4"),
        (&["--draft-adaptive"], "--draft-adaptive needs a drafter"),
        (
            &["--lookup-ngram", "2", "--lookup-min", "3"],
            "--lookup-min 3: between 1 and --lookup-ngram (2)",
        ),
        (&["--lookup-min", "2"], "--lookup-min needs --lookup-ngram"),
        (
            &["--lookup-ngram", "2", "--draft-vocab", "1000"],
            "--draft-vocab sets what a draft model proposes from",
        ),
        (
            &["--self-speculative", "4", "--draft-vocab", "0"],
            "--draft-vocab must be at least 1",
        ),
        (
            &["--lookup-ngram", "2", "--draft-p-min", "0.5"],
            "--draft-p-min stops a draft model where it is unsure",
        ),
        (
            &["--self-speculative", "4", "--draft-p-min", "1.5"],
            "--draft-p-min 1.5: a probability, between 0 and 1",
        ),
        (&["--draft-min", "2"], "--draft-min needs a drafter"),
        (
            &["--lookup-ngram", "2", "--draft-min", "5"],
            "--draft-min 5 is more than the longest draft (--draft-max 4)",
        ),
        (
            &[
                "--self-speculative",
                "4",
                "--draft-p-min",
                "0.5",
                "--draft-min",
                "2",
                "--temperature",
                "0.8",
            ],
            "--draft-min with --draft-p-min and a sampled run (--temperature 0.8)",
        ),
    ];
    for (extra, needle) in cases {
        fails_with(&[&["generate", "-m", m, "hi"][..], extra].concat(), needle);
    }
    let missing = tmp_dir().join("missing.gguf");
    fails_with(
        &[
            "generate",
            "-m",
            m,
            "hi",
            "--draft-model",
            missing.to_str().unwrap(),
        ],
        "loading the draft model",
    );
    let garbage = tmp_dir().join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF not really").unwrap();
    fails_with(
        &[
            "generate",
            "-m",
            m,
            "hi",
            "--draft-model",
            garbage.to_str().unwrap(),
        ],
        "loading the draft model",
    );
    // A tiny model with another vocabulary.
    let other = tmp_dir().join("other-vocab.gguf");
    TinyLlama::SMALL.write_constant(&other, 0.01);
    fails_with(
        &[
            "generate",
            "-m",
            m,
            "hi",
            "--draft-model",
            other.to_str().unwrap(),
        ],
        "a draft must share the target's vocabulary",
    );
}

#[test]
fn quantize_keeps_metadata_and_refuses_unknown_types() {
    let Some(model) = common::real_model() else {
        return;
    };
    let f16 = f16_target(&model);
    let out = kindle(&["inspect", "-m", f16.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("F16"), "{text}");
    let to = tmp_dir().join("x.gguf");
    fails_with(
        &[
            "quantize",
            model.to_str().unwrap(),
            to.to_str().unwrap(),
            "--type",
            "iq2_xxs",
        ],
        "not a type kindle quantizes to",
    );
    // A grid quant's file type says why: kindle reads such files, it does not write them.
    fails_with(
        &[
            "quantize",
            model.to_str().unwrap(),
            to.to_str().unwrap(),
            "--type",
            "IQ3_M",
        ],
        "llama-quantize --imatrix",
    );
}

#[test]
fn quantize_pure_writes_q3_k_and_q2_k_with_llama_quantizes_fallback() {
    let Some(model) = common::real_model() else {
        return;
    };
    for ty in ["q3_k", "q2_k"] {
        let to = tmp_dir().join(format!("smol-{ty}.gguf"));
        let args = [
            "quantize",
            model.to_str().unwrap(),
            to.to_str().unwrap(),
            "--type",
            ty,
            "--pure",
        ];
        let out = kindle(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SmolLM2's 1536-wide feed-forward down projections hold whole super-blocks; its
        // 576-wide matrices take Q4_0, as llama-quantize gives them.
        let out = kindle(&["inspect", "-m", to.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        let down = text
            .lines()
            .find(|l| l.contains("blk.0.ffn_down.weight"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(down.contains(&ty.to_uppercase()), "{down}");
        let up = text
            .lines()
            .find(|l| l.contains("blk.0.ffn_up.weight"))
            .unwrap();
        assert!(up.contains("Q4_0"), "{up}");
        let out = kindle(&["generate", "-m", to.to_str().unwrap(), "-n", "4", "Hello"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty());
    }
}
