//! `kindle bench` with a drafter: plain and drafting generations of real prompts in turn, one
//! row a prompt, with both decode rates, the speedup, the acceptance and whether drafting gave
//! the plain run's tokens; its flags refused where they mean nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn kindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .output()
        .expect("running kindle")
}

fn prompt_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/speculative")
        .join(name)
}

/// Run `kindle args` expecting success; its rows (`--json`).
fn rows(args: &[&str]) -> Vec<Value> {
    let out = kindle(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("a JSON list");
    rows.as_array().expect("a JSON list").clone()
}

/// A draft model identical to the target (the real model with `--draft-activations f32
/// --draft-kv-type f32`) proposes exactly the target's greedy tokens: every draft is
/// accepted, the output is the plain run's, and each round times both.
#[test]
fn a_draft_model_bench_gives_a_row_a_prompt_with_both_rates() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let model = model.to_str().unwrap();
    let (edit, code) = (
        prompt_path("edit_paragraph.txt"),
        prompt_path("refactor_code.txt"),
    );
    let rows = rows(&[
        "bench",
        "-m",
        model,
        "--draft-model",
        model,
        "--draft-activations",
        "f32",
        "--draft-kv-type",
        "f32",
        "--draft-max",
        "4",
        "--special",
        "--prompt-file",
        edit.to_str().unwrap(),
        "--prompt-file",
        code.to_str().unwrap(),
        "-n",
        "20",
        "-r",
        "2",
        "-t",
        "1",
        "--json",
    ]);
    let prompts: Vec<&str> = rows.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    assert_eq!(prompts, ["edit_paragraph", "refactor_code"]);
    for row in &rows {
        assert_eq!(row["test"], "tg20", "{row}");
        assert_eq!(row["threads"], 1, "{row}");
        assert_eq!(row["same_output"], true, "{row}");
        assert!(
            row["draft"]
                .as_str()
                .unwrap()
                .ends_with("Q4_1.gguf (max 4)"),
            "{row}"
        );
        let generated = row["generated_tokens"].as_u64().unwrap();
        assert!((2..=20).contains(&generated), "{row}");
        assert!(row["prompt_tokens"].as_u64().unwrap() > 100, "{row}");
        for key in ["plain_samples", "drafting_samples", "round_speedups"] {
            let values = row[key].as_array().unwrap();
            assert_eq!(values.len(), 2, "{key}: {row}");
            assert!(values.iter().all(|v| v.as_f64().unwrap() > 0.0), "{row}");
        }
        // The draft is the target: nothing it drafts is rejected.
        let (drafted, accepted) = (row["drafted"].as_u64(), row["accepted"].as_u64());
        assert!(drafted.unwrap() > 0, "{row}");
        assert_eq!(accepted, drafted, "{row}");
        assert_eq!(row["acceptance_rate"], 1.0, "{row}");
        assert!(row["tokens_per_pass"].as_f64().unwrap() > 2.0, "{row}");
        let speedup = row["speedup"].as_f64().unwrap();
        let (plain, drafting) = (
            row["plain_tokens_per_second"].as_f64().unwrap(),
            row["drafting_tokens_per_second"].as_f64().unwrap(),
        );
        assert!((speedup - drafting / plain).abs() < 1e-9, "{row}");
        assert!(row["draft_ms_per_pass"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["verify_ms_per_pass"].as_f64().unwrap() > 0.0, "{row}");
    }
}

/// Prompt lookup in the Markdown and CSV forms: the table names the drafter, the CPU, and says
/// the output was the same.
#[test]
fn a_prompt_lookup_bench_prints_a_table_and_csv() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let edit = prompt_path("edit_paragraph.txt");
    let base = [
        "bench",
        "-m",
        model.to_str().unwrap(),
        "--lookup-ngram",
        "3",
        "--special",
        "--prompt-file",
        edit.to_str().unwrap(),
        "-n",
        "12",
        "-r",
        "1",
        "-t",
        "1",
    ];
    let out = kindle(&base);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("| model | draft |"), "{stdout}");
    assert!(lines[0].contains("| speedup |"), "{stdout}");
    assert!(lines[2].contains("| lookup 3-gram (max 4) |"), "{stdout}");
    assert!(lines[2].contains("| edit_paragraph | tg12 |"), "{stdout}");
    assert!(lines[2].ends_with("| yes |"), "{stdout}");
    assert!(stdout.contains("\ncpu: "), "{stdout}");

    let out = kindle(&[&base[..], &["--output", "csv"]].concat());
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header[9], "speedup");
    // The drafter's name is quoted (it may hold a comma; this one does not).
    let cells: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(cells.len(), header.len(), "{stdout}");
    assert_eq!(cells[4], "edit_paragraph");
    assert!(cells[9].parse::<f64>().unwrap() > 0.0, "{stdout}");
    assert_eq!(cells[14], "yes");
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let out = kindle(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// What a drafting bench cannot take, and the drafting flags without a drafter: errors naming
/// the flag, before any model loads (the model named here does not exist).
#[test]
fn drafting_bench_flags_that_do_not_go_together_are_errors() {
    let edit = prompt_path("edit_paragraph.txt");
    let edit = edit.to_str().unwrap();
    let m = ["bench", "-m", "/nonexistent/model.gguf"];
    let with = |rest: &[&'static str]| -> Vec<&str> {
        let mut args = m.to_vec();
        args.extend_from_slice(rest);
        args
    };
    fails_with(
        &with(&["--lookup-ngram", "3"]),
        &["--prompt-file PATH or --prompt TEXT"],
    );
    fails_with(
        &[&with(&["--prompt-file"])[..], &[edit]].concat(),
        &["--prompt-file", "need --draft-model FILE, --lookup-ngram N"],
    );
    fails_with(
        &[
            &with(&["--lookup-ngram", "3", "-p", "64", "--prompt-file"])[..],
            &[edit],
        ]
        .concat(),
        &["-p/--n-prompt times prefill"],
    );
    fails_with(
        &[
            &with(&["--lookup-ngram", "3", "-d", "64", "--prompt-file"])[..],
            &[edit],
        ]
        .concat(),
        &["-d/--n-depth"],
    );
    fails_with(
        &[
            &with(&["--lookup-ngram", "3", "--profile", "--prompt-file"])[..],
            &[edit],
        ]
        .concat(),
        &["--bandwidth and --profile"],
    );
    fails_with(
        &with(&[
            "--lookup-ngram",
            "3",
            "--prompt-file",
            "/nonexistent/prompt.txt",
        ]),
        &["reading /nonexistent/prompt.txt"],
    );
    fails_with(
        &with(&["--lookup-ngram", "3", "--prompt", " "]),
        &["--prompt 1 is empty"],
    );
    fails_with(
        &with(&["--lookup-ngram", "3", "--draft-max", "0", "--prompt", "a b"]),
        &["--draft-max must be at least 1"],
    );
    fails_with(
        &with(&["--lookup-ngram", "3", "-n", "0", "--prompt", "a b"]),
        &["nothing to time"],
    );
}
