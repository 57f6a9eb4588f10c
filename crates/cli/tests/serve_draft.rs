//! `kindle serve` with a draft model (`--draft-model`, `--self-speculative`) on the real model:
//! a greedy request gives the same text drafting or not (`kindle_draft_max: 0`), and what
//! `kindle generate` gives; `/metrics` counts the drafts; bad flags stop the server before it
//! listens, naming the problem.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::server::{Served, generated_text};
use common::tiny::TinyLlama;
use serde_json::{Value, json};

const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
];
const MAX_TOKENS: usize = 40;

fn completion(server: &Served, prompt: &str, extra: Value) -> String {
    let mut body = json!({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, body) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{body}");
    body["choices"][0]["text"]
        .as_str()
        .expect("a text")
        .to_string()
}

fn metric(server: &Served, name: &str) -> f64 {
    let (_, metrics) = server.get("/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

/// `kindle generate`'s greedy text for `prompt`.
fn generate(model: &Path, prompt: &str) -> String {
    let n = MAX_TOKENS.to_string();
    generated_text(
        &["-t", "2", "-n", &n, "-m", model.to_str().unwrap()],
        prompt,
    )
}

#[test]
fn a_served_draft_model_changes_no_greedy_output() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let m = model.to_str().unwrap();
    // The file as its own draft, with the draft's default 8-bit activations: the target's
    // `f32` arithmetic disagrees with it now and then.
    let server = Served::start(
        &model,
        &[
            "-c",
            "512",
            "-t",
            "2",
            "--draft-model",
            m,
            "--draft-max",
            "6",
        ],
    );
    assert!(
        server.banner.contains("drafting 6 tokens a step"),
        "{}",
        server.banner
    );
    for prompt in PROMPTS {
        let drafted = completion(&server, prompt, json!({}));
        let plain = completion(&server, prompt, json!({"kindle_draft_max": 0}));
        assert_eq!(drafted, plain, "{prompt:?}");
        assert_eq!(drafted, generate(&model, prompt), "{prompt:?}");
        let longer = completion(&server, prompt, json!({"kindle_draft_max": 12}));
        assert_eq!(longer, plain, "{prompt:?}, 12 a step");
    }
    // The last prompt's second drafting request found its first block (16 tokens) in the
    // draft's own prefix cache.
    let reused = metric(&server, "kindle_draft_prefix_cache_hit_tokens_total");
    assert!(reused >= 16.0, "{reused} prompt tokens reused by the draft");
    let passes = metric(&server, "kindle_draft_passes_total");
    let drafted = metric(&server, "kindle_draft_tokens_total");
    let accepted = metric(&server, "kindle_draft_accepted_tokens_total");
    assert!(passes > 0.0 && accepted > 0.0, "{passes} {accepted}");
    assert!(accepted <= drafted, "{accepted} of {drafted}");
    // At most half as many verification passes as the drafting requests' tokens: the drafts
    // were accepted in runs.
    let tokens = (2 * PROMPTS.len() * MAX_TOKENS) as f64;
    assert!(
        2.0 * passes <= tokens,
        "{passes} passes for at most {tokens} tokens"
    );
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // The model's first ten layers as the draft.
    let server = Served::start(
        &model,
        &["-c", "512", "-t", "2", "--self-speculative", "10"],
    );
    let prompt = PROMPTS[0];
    let drafted = completion(&server, prompt, json!({}));
    assert_eq!(
        drafted,
        completion(&server, prompt, json!({"kindle_draft_max": 0}))
    );
    assert!(drafted.contains("Paris"), "{drafted:?}");
    assert!(metric(&server, "kindle_draft_passes_total") > 0.0);
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // A draft that stops where it is unsure (`--draft-p-min`), verified from three tokens
    // (`--draft-min`).
    let server = Served::start(
        &model,
        &[
            "-c",
            "512",
            "-t",
            "2",
            "--draft-model",
            m,
            "--draft-p-min",
            "0.5",
            "--draft-min",
            "3",
        ],
    );
    assert!(
        server.banner.contains(
            "drafting 8 tokens a step, verifying drafts of 3 or more, stopping below p 0.5"
        ),
        "{}",
        server.banner
    );
    let drafted = completion(&server, prompt, json!({}));
    assert_eq!(
        drafted,
        completion(&server, prompt, json!({"kindle_draft_max": 0}))
    );
    assert!(metric(&server, "kindle_draft_passes_total") > 0.0);
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}

/// `kindle serve -m model --port 0 extra...` must exit (within a minute) unsuccessfully, its
/// error containing `needle`.
fn serve_fails(model: &Path, extra: &[&str], needle: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .arg("serve")
        .arg("-m")
        .arg(model)
        .args(["--port", "0", "-c", "256"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kindle serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for kindle serve") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kindle serve {extra:?} went on serving");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{extra:?} succeeded");
    assert!(err.contains(needle), "{extra:?}: {err}");
}

#[test]
fn bad_server_draft_settings_are_clear_errors() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let m = model.to_str().unwrap();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve_draft");
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.gguf");
    let other = dir.join("other-vocab.gguf");
    TinyLlama::SMALL.write_constant(&other, 0.01);
    let cases: [(&[&str], &str); 11] = [
        (
            &["--draft-max", "4"],
            "give --draft-model FILE or --self-speculative L",
        ),
        (&["--draft-vocab", "100"], "give --draft-model FILE"),
        (&["--draft-p-min", "0.5"], "give --draft-model FILE"),
        (&["--draft-min", "2"], "give --draft-model FILE"),
        (
            &["--draft-model", m, "--draft-max", "4", "--draft-min", "5"],
            "--draft-min 5 is more than the longest draft (--draft-max 4)",
        ),
        (
            &["--draft-model", m, "--draft-p-min", "1.5"],
            "--draft-p-min 1.5: a probability, between 0 and 1",
        ),
        (
            &["--draft-model", m, "--draft-max", "0"],
            "--draft-max must be at least 1",
        ),
        (&["--draft-model", m, "--draft-max", "15"], "at most 14"),
        (
            &["--draft-model", missing.to_str().unwrap()],
            "loading the draft model",
        ),
        (
            &["--draft-model", other.to_str().unwrap()],
            "a draft must share the target's vocabulary",
        ),
        (
            &["--self-speculative", "30"],
            "fewer layers than the model's 30",
        ),
    ];
    for (extra, needle) in cases {
        serve_fails(&model, extra, needle);
    }
}
