//! `kindle generate` output modes, stops, seeds and beams, run as a binary on the real model.

mod common;

use std::process::Command;

use common::model_path;
use serde_json::Value;

const PROMPT: &str = "The capital of France is";

fn kindle(args: &[&str]) -> String {
    let model = model_path();
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .arg("generate")
        .arg("-m")
        .arg(&model)
        .args(args)
        .output()
        .expect("running kindle");
    assert!(
        out.status.success(),
        "kindle generate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&kindle(&all)).expect("one JSON object")
}

fn ids(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn json_shape() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let out = json(&[PROMPT, "-n", "8", "--logprobs", "3"]);
    assert_eq!(ids(&out["prompt_tokens"]).len(), 5);
    assert_eq!(ids(&out["tokens"]).len(), 8);
    assert_eq!(out["finish_reason"], "length");
    assert!(out["text"].as_str().unwrap().starts_with(" Paris"));
    assert_eq!(out["timings"]["prefill_tokens"], 5);
    let logprobs = out["logprobs"].as_array().unwrap();
    assert_eq!(logprobs.len(), 8);
    assert_eq!(logprobs[0]["top_logprobs"].as_array().unwrap().len(), 3);
}

#[test]
fn jsonl_lines() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let text = kindle(&["--jsonl", PROMPT, "-n", "6", "--logprobs", "2"]);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 7);
    let mut joined = String::new();
    for line in &lines[..6] {
        assert!(line["token"].is_u64());
        assert!(line["logprob"].as_f64().unwrap() <= 0.0);
        let top = line["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0][0], line["token"]);
        joined.push_str(line["text"].as_str().unwrap());
    }
    let last = &lines[6];
    assert_eq!(last["finish_reason"], "length");
    assert_eq!(last["generated_tokens"], 6);
    assert_eq!(last["prompt_tokens"], 5);
    assert_eq!(last["text"].as_str().unwrap(), joined);
}

#[test]
fn stop_string_spanning_tokens() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let greedy = json(&[PROMPT, "-n", "24"]);
    let tokens = ids(&greedy["tokens"]);
    let text = greedy["text"].as_str().unwrap().to_string();
    // A 3-token span from the middle of the output, found through the per-token texts.
    let pieces: Vec<String> = kindle(&["--jsonl", PROMPT, "-n", "24"])
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["token"]
                .as_u64()
                .map(|_| v["text"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(pieces.len(), tokens.len());
    let start = 4;
    let stop: String = pieces[start..start + 3].concat();
    let before: String = pieces[..start].concat();
    assert!(text.starts_with(&(before.clone() + &stop)));
    let cut = text.find(&stop).unwrap();
    let out = json(&[PROMPT, "-n", "24", "--stop", &stop]);
    assert_eq!(out["finish_reason"], "stop");
    let got = out["text"].as_str().unwrap();
    assert!(!got.contains(&stop));
    assert_eq!(got, &text[..cut]);
}

#[test]
fn stop_token() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let greedy = json(&[PROMPT, "-n", "12"]);
    let tokens = ids(&greedy["tokens"]);
    let stop = tokens[3].to_string();
    let out = json(&[PROMPT, "-n", "12", "--stop-token", &stop]);
    assert_eq!(out["finish_reason"], "stop");
    let first = tokens.iter().position(|t| t.to_string() == stop).unwrap();
    assert_eq!(ids(&out["tokens"]), tokens[..=first]);
}

#[test]
fn max_time() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    // --min-tokens holds end-of-text back, so only the time budget can end the run however
    // fast decoding is (2048 tokens of context would take more than 0.3 s at any speed here).
    let out = json(&[
        PROMPT,
        "-n",
        "100000",
        "--min-tokens",
        "100000",
        "--max-time",
        "0.3",
        "-c",
        "2048",
    ]);
    assert_eq!(out["finish_reason"], "time");
    let n = ids(&out["tokens"]).len();
    assert!((1..2000).contains(&n), "{n} tokens");
}

/// `--ignore-eos`: a chat reply that ends by itself after about two dozen tokens runs on to
/// `-n`, no end-of-generation token among its tokens; the same tokens as without the flag up
/// to where that one ended it.
#[test]
fn ignore_eos_runs_to_max_tokens() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let ended = json(&["--chat", "Say hi.", "-n", "64"]);
    assert_eq!(ended["finish_reason"], "stop");
    let short = ids(&ended["tokens"]);
    assert!(short.len() < 60, "{} tokens", short.len());
    let out = json(&["--chat", "Say hi.", "-n", "64", "--ignore-eos"]);
    assert_eq!(out["finish_reason"], "length");
    let long = ids(&out["tokens"]);
    assert_eq!(long.len(), 64);
    let eog = *short.last().unwrap();
    assert!(!long.contains(&eog), "{long:?}");
    assert_eq!(long[..short.len() - 1], short[..short.len() - 1]);
}

/// llama.cpp's spellings: `-s` for the seed, `--n-predict` / `--predict` for `-n`, and a JSON
/// schema given as its text.
#[test]
fn llama_cpp_flag_spellings() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let long = json(&[PROMPT, "-n", "8", "--temperature", "0.9", "--seed", "11"]);
    let short = json(&[
        PROMPT,
        "--n-predict",
        "8",
        "--temperature",
        "0.9",
        "-s",
        "11",
    ]);
    assert_eq!(short["tokens"], long["tokens"]);
    assert_eq!(ids(&json(&[PROMPT, "--predict", "3"])["tokens"]).len(), 3);
    let schema = r#"{"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"], "additionalProperties": false}"#;
    let out = json(&["--json-schema", schema, "-n", "64", "A year as JSON:"]);
    let text = out["text"].as_str().unwrap();
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(value["year"].is_i64(), "{text}");
    assert_eq!(value.as_object().unwrap().len(), 1, "{text}");
}

#[test]
fn seeds_replay_and_differ() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let run = |seed: &str| {
        json(&[PROMPT, "-n", "24", "--temperature", "0.9", "--seed", seed])["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}

#[test]
fn several_samples_follow_their_seeds() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let out = json(&[
        PROMPT,
        "-n",
        "12",
        "--temperature",
        "0.9",
        "--seed",
        "7",
        "--num-samples",
        "3",
    ]);
    let sequences = out["sequences"].as_array().unwrap();
    assert_eq!(sequences.len(), 3);
    for (i, s) in sequences.iter().enumerate() {
        assert_eq!(s["seed"], 7 + i as u64);
        assert_eq!(s["prompt"], PROMPT);
    }
    let alone = json(&[PROMPT, "-n", "12", "--temperature", "0.9", "--seed", "8"]);
    assert_eq!(sequences[1]["text"], alone["text"]);
}

#[test]
fn beams_return_ranked_sequences() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let out = json(&[
        "--num-beams",
        "4",
        "--num-return-sequences",
        "4",
        PROMPT,
        "-n",
        "16",
    ]);
    let sequences = out["sequences"].as_array().unwrap();
    assert_eq!(sequences.len(), 4);
    let scores: Vec<f64> = sequences
        .iter()
        .map(|s| s["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    for s in sequences {
        assert!(!ids(&s["tokens"]).is_empty());
        assert!(s["text"].is_string());
        assert!(s["finish_reason"].is_string());
    }
    assert_eq!(out["text"], sequences[0]["text"]);
    // The best beam scores at least as well as greedy decoding under the same measure.
    let greedy = kindle(&["--jsonl", PROMPT, "-n", "16"]);
    let sum: f64 = greedy
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).unwrap()["logprob"].as_f64())
        .sum();
    assert!(
        scores[0] >= sum / 16.0 - 1e-4,
        "beam {} vs greedy {}",
        scores[0],
        sum / 16.0
    );
}

#[test]
fn chat_flag_applies_the_template() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let out = json(&["--chat", "What is the boiling point of water?", "-n", "4"]);
    let want = common::ids(&common::reference()["prompts"]["chat"]["prompt_ids"]);
    let got: Vec<u32> = ids(&out["prompt_tokens"])
        .iter()
        .map(|&i| i as u32)
        .collect();
    assert_eq!(got, want);
}
