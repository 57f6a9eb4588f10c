//! `kindle generate` with output constraints (`--json-schema`, `--regex`, `--choice`,
//! `--json-object`, `--grammar`) on the real model: every output valid, greedy unchanged where
//! the model's own choice is allowed, bad input named.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn kindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .arg("generate")
        .arg("-m")
        .arg(common::model_path())
        .args(args)
        .output()
        .expect("running kindle")
}

/// The `--json` object of a successful run.
fn json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = kindle(&all);
    assert!(
        out.status.success(),
        "kindle generate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn schemas() -> Vec<(PathBuf, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/schemas");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 10, "ten schemas in {}", dir.display());
    paths
        .into_iter()
        .map(|p| {
            let schema = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (p, schema)
        })
        .collect()
}

#[test]
fn every_schema_output_validates_at_temperature_1_and_0() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    for (path, schema) in schemas() {
        let validator = jsonschema::validator_for(&schema).unwrap();
        let file = path.to_str().unwrap();
        let mut runs: Vec<Vec<String>> = (1..=5)
            .map(|seed| {
                ["--temp", "1.0", "--seed", &seed.to_string()]
                    .map(String::from)
                    .to_vec()
            })
            .collect();
        runs.push(vec!["--temp".into(), "0".into()]);
        for run in runs {
            let mut args = vec!["--json-schema", file, "-n", "300", "Answer in JSON:"];
            args.extend(run.iter().map(String::as_str));
            let out = json(&args);
            let text = out["text"].as_str().unwrap();
            assert_eq!(out["finish_reason"], "stop", "{file} {run:?}: {text}");
            let value: Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("{file} {run:?}: not JSON ({e}): {text}"));
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{file} {run:?}: {text}: {errors:?}");
            let stats = &out["timings"]["constraint"];
            assert!(stats["masks"].as_u64().unwrap() >= 1, "{out}");
        }
    }
}

#[test]
fn regex_choice_object_and_grammar_outputs_match() {
    if common::real_model().is_none() {
        return;
    }
    for seed in ["1", "2", "3"] {
        let out = json(&[
            "--regex",
            "[0-9]{3}-[0-9]{4}",
            "--temp",
            "1",
            "--seed",
            seed,
            "A phone number:",
        ]);
        let text = out["text"].as_str().unwrap();
        assert!(is_phone_number(text), "{text:?}");
        assert_eq!(out["finish_reason"], "stop");

        let out = json(&[
            "--choice",
            "yes",
            "--choice",
            "no",
            "--temp",
            "1",
            "--seed",
            seed,
            "Is water wet? Answer:",
        ]);
        let text = out["text"].as_str().unwrap();
        assert!(text == "yes" || text == "no", "{text:?}");

        let out = json(&[
            "--json-object",
            "-n",
            "300",
            "--temp",
            "1",
            "--seed",
            seed,
            "A JSON object:",
        ]);
        let text = out["text"].as_str().unwrap();
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(value.is_object(), "{text}");
    }
    let scratch = tempfile::Builder::new()
        .prefix("kindle-grammar-")
        .tempdir()
        .unwrap();
    let dir = scratch.path();
    let grammar = dir.join("sum.lark");
    std::fs::write(
        &grammar,
        "start: NUM \" + \" NUM \" = \" NUM\nNUM: /[0-9]{1,3}/\n",
    )
    .unwrap();
    let out = json(&[
        "--grammar",
        grammar.to_str().unwrap(),
        "--temp",
        "0",
        "Arithmetic:",
    ]);
    let text = out["text"].as_str().unwrap();
    let parts: Vec<&str> = text.split(' ').collect();
    assert_eq!(parts.len(), 5, "{text:?}");
    assert!(
        parts[0].parse::<u32>().is_ok() && parts[1] == "+" && parts[3] == "=",
        "{text:?}"
    );
    // llama.cpp's `--grammar`: the grammar's text on the command line (GBNF, by its `::=`),
    // sampled so that either answer can come; and `--grammar-file`.
    for seed in ["1", "2", "3"] {
        let out = json(&[
            "--grammar",
            "root ::= answer \".\"\nanswer ::= \"yes\" | \"no\"",
            "--temp",
            "1.5",
            "--seed",
            seed,
            "Is water wet?",
        ]);
        let text = out["text"].as_str().unwrap();
        assert!(text == "yes." || text == "no.", "{text:?}");
    }
    let gbnf = dir.join("digits.txt");
    std::fs::write(&gbnf, "root ::= [0-9] [0-9]\n").unwrap();
    let out = json(&["--grammar-file", gbnf.to_str().unwrap(), "The year:"]);
    let text = out["text"].as_str().unwrap();
    assert!(
        text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit()),
        "{text:?}"
    );
}

/// Whether `text` matches `[0-9]{3}-[0-9]{4}` in full (checked by hand, without a regex crate).
fn is_phone_number(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 8
        && b[..3].iter().all(u8::is_ascii_digit)
        && b[3] == b'-'
        && b[4..].iter().all(u8::is_ascii_digit)
}

#[test]
fn greedy_constrained_equals_greedy_where_allowed() {
    if common::real_model().is_none() {
        return;
    }
    // The unconstrained greedy continuation, then the same prompt constrained by a regex that
    // allows exactly that text (and more): the output must be the same tokens.
    let prompt = "The capital of France is";
    let free = json(&[prompt, "-n", "6", "--temp", "0"]);
    let text = free["text"].as_str().unwrap().to_owned();
    let escaped: String = text
        .chars()
        .map(|c| match c {
            '\n' => "\\n".to_owned(),
            c if c.is_ascii_punctuation() => format!("\\{c}"),
            c => c.to_string(),
        })
        .collect();
    let rx = format!("{escaped}(.|\\n)*");
    let constrained = json(&["--regex", &rx, prompt, "-n", "6", "--temp", "0"]);
    assert_eq!(constrained["tokens"], free["tokens"], "{rx}");
    // Drafting (prompt lookup, checked against the mask) leaves a constrained greedy run as
    // it is, token for token.
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/schemas");
    let first = schemas().into_iter().next().unwrap().0;
    assert!(first.starts_with(&schema));
    let file = first.to_str().unwrap();
    let args = [
        "--json-schema",
        file,
        "-n",
        "200",
        "--temp",
        "0",
        "Answer in JSON:",
    ];
    let plain = json(&args);
    let mut drafted_args = args.to_vec();
    drafted_args.extend(["--lookup-ngram", "2"]);
    let drafted = json(&drafted_args);
    assert_eq!(drafted["tokens"], plain["tokens"], "{file}");
    assert_eq!(drafted["finish_reason"], "stop", "{drafted}");
    // A regex that forbids the greedy first token changes only what it must: the first token
    // differs, and the output matches.
    let out = json(&["--regex", "[0-9]+", prompt, "-n", "4", "--temp", "0"]);
    let digits = out["text"].as_str().unwrap();
    assert!(
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        "{digits:?}"
    );
}

#[test]
fn bad_constraints_name_the_flag_and_position() {
    if common::real_model().is_none() {
        return;
    }
    let err = |args: &[&str]| {
        let out = kindle(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&["--regex", "[0-9", "x"]);
    assert!(e.contains("--regex: invalid regex"), "{e}");
    let scratch = tempfile::Builder::new()
        .prefix("kindle-bad-")
        .tempdir()
        .unwrap();
    let dir = scratch.path();
    let schema = dir.join("bad.json");
    std::fs::write(&schema, "{\"type\": \"object\",\n  \"properties\": }").unwrap();
    let e = err(&["--json-schema", schema.to_str().unwrap(), "x"]);
    assert!(
        e.contains("--json-schema: not valid JSON at line 2, column"),
        "{e}"
    );
    std::fs::write(&schema, "{\"type\": \"strange\"}").unwrap();
    let e = err(&["--json-schema", schema.to_str().unwrap(), "x"]);
    assert!(e.contains("--json-schema: invalid JSON schema"), "{e}");
    let grammar = dir.join("bad.lark");
    std::fs::write(&grammar, "start: \"a\" (\n").unwrap();
    let e = err(&["--grammar", grammar.to_str().unwrap(), "x"]);
    assert!(e.contains("--grammar: invalid grammar"), "{e}");
    let e = err(&["--grammar", "root ::= (\"a\"", "x"]);
    assert!(
        e.contains("--grammar: invalid GBNF at line 1, column 14"),
        "{e}"
    );
    let e = err(&["--grammar", "typo.gbnf", "x"]);
    assert!(e.contains("--grammar \"typo.gbnf\": no such file"), "{e}");
    let e = err(&["--grammar-file", "typo.gbnf", "x"]);
    assert!(e.contains("reading typo.gbnf"), "{e}");
    let e = err(&["--regex", "a", "--num-beams", "2", "x"]);
    assert!(e.contains("--regex constrains a single sequence"), "{e}");
}
