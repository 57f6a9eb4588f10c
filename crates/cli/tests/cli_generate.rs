//! The `kindle` binary end to end on the real model: the JSON shapes scripts rely on, and the
//! greedy France continuation against llama.cpp's reference.

mod common;

use std::process::Command;

use serde_json::Value;

fn kindle(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(args)
        .arg("--model")
        .arg(common::model_path())
        .output()
        .expect("running kindle");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_json_france_matches_llama_cpp_until_a_close_call() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let france = &common::reference()["prompts"]["france"];
    let (ok, stdout, stderr) =
        kindle(&["generate", "--json", "-n", "16", "The capital of France is"]);
    assert!(ok, "kindle generate failed: {stderr}");
    let out: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(
        common::ids(&out["prompt_tokens"]),
        common::ids(&france["prompt_ids"])
    );
    let tokens = common::ids(&out["tokens"]);
    assert_eq!(tokens.len(), 16);
    assert_eq!(out["finish_reason"], "length");
    let steps = france["steps"].as_array().unwrap();
    let decisive = steps
        .iter()
        .position(|s| s["margin"].as_f64().unwrap() < 0.5)
        .unwrap();
    assert_eq!(
        tokens[..decisive],
        common::ids(&france["greedy_ids"])[..decisive]
    );
    assert!(
        out["text"].as_str().unwrap().starts_with(" Paris."),
        "text: {}",
        out["text"]
    );
    assert!(out["timings"]["decode_tokens_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn score_json_has_the_documented_shape() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&[
        "score",
        "--ids",
        "504,3575,282,4649,314,7042",
        "--top",
        "3",
        "--json",
    ]);
    assert!(ok, "kindle score failed: {stderr}");
    let out: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        common::ids(&out["tokens"]),
        vec![504, 3575, 282, 4649, 314, 7042]
    );
    let positions = out["positions"].as_array().unwrap();
    assert_eq!(positions.len(), 5);
    let last = &positions[4];
    assert_eq!(last["pos"], 4);
    assert_eq!(last["next_token"], 7042);
    assert_eq!(last["argmax"], 7042);
    // llama.cpp: logprob of " Paris" after the prompt is -0.264.
    assert!((last["logprob"].as_f64().unwrap() + 0.264).abs() < 0.6);
    assert_eq!(last["top"].as_array().unwrap().len(), 3);
    assert!(out["perplexity"].as_f64().unwrap() > 1.0);
}

#[test]
fn tokenize_json_ids_and_pieces() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, _) = kindle(&["tokenize", "--json", "Hello world"]);
    assert!(ok);
    let out: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(common::ids(&out["ids"]), vec![19556, 905]);
    assert_eq!(out["pieces"], serde_json::json!(["Hello", "Ġworld"]));
    let (ok, stdout, _) = kindle(&["tokenize", "--json", "<|im_start|>user"]);
    assert!(ok);
    let plain: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_ne!(
        common::ids(&plain["ids"])[0],
        1,
        "special tokens are parsed only with --special"
    );
    let (ok, stdout, _) = kindle(&["tokenize", "--json", "--special", "<|im_start|>user"]);
    assert!(ok);
    let special: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(common::ids(&special["ids"]), vec![1, 4093]);
}

#[test]
fn inspect_reports_kv_cache_bytes() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&["inspect", "--json", "--context", "1000"]);
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(stdout.trim()).unwrap();
    // 2 (K and V) x 30 layers x 3 KV heads x 64 dims x 4 bytes = 46,080 bytes per token.
    assert_eq!(out["kv_cache"]["bytes_per_token"], 46080);
    assert_eq!(out["kv_cache"]["bytes"], 46_080_000);
    assert_eq!(out["tensors"].as_array().unwrap().len(), 272);
    assert_eq!(out["metadata"]["general.architecture"], "llama");
}

#[test]
fn a_missing_model_file_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["generate", "--model", "/nonexistent/model.gguf", "hi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model.gguf"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Eight prompts of different lengths run as one batch give, greedily, the same tokens as
/// each prompt run alone.
#[test]
fn a_batch_of_eight_prompts_equals_the_single_runs() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let prompts = [
        "The capital of France is",
        "Once upon a time, there was a",
        "The boiling point of water is",
        "My favourite programming language is",
        "In 1492, Columbus",
        "The best way to learn mathematics is",
        "Photosynthesis is the process by which",
        "A haiku about the sea:",
    ];
    let file = std::env::temp_dir().join(format!("kindle-batch-{}.txt", std::process::id()));
    std::fs::write(&file, prompts.join("\n")).unwrap();
    let (ok, stdout, stderr) = kindle(&[
        "generate",
        "--json",
        "-n",
        "12",
        "--prompt-file",
        file.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&file);
    assert!(ok, "batch failed: {stderr}");
    let batch: Value = serde_json::from_str(stdout.trim()).unwrap();
    let sequences = batch["sequences"].as_array().unwrap();
    assert_eq!(sequences.len(), prompts.len());
    for (prompt, sequence) in prompts.iter().zip(sequences) {
        let (ok, stdout, stderr) = kindle(&["generate", "--json", "-n", "12", prompt]);
        assert!(ok, "single run failed: {stderr}");
        let single: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(sequence["prompt"], *prompt);
        assert_eq!(sequence["tokens"], single["tokens"], "{prompt}");
        assert_eq!(sequence["text"], single["text"], "{prompt}");
    }
}

/// `kindle bench --json`: one row per thread count and test, in llama-bench's names.
#[test]
fn bench_json_rows() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&[
        "bench",
        "-p",
        "8",
        "-n",
        "4",
        "-d",
        "0,16",
        "-r",
        "1",
        "--threads-list",
        "1,2",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
    let rows = rows.as_array().unwrap();
    let tests: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["test"].as_str().unwrap().to_string(),
                r["threads"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tests,
        [
            ("pp8".into(), 1),
            ("tg4".into(), 1),
            ("pp8 @ d16".into(), 1),
            ("tg4 @ d16".into(), 1),
            ("pp8".into(), 2),
            ("tg4".into(), 2),
            ("pp8 @ d16".into(), 2),
            ("tg4 @ d16".into(), 2)
        ]
    );
    let depths: Vec<u64> = rows
        .iter()
        .map(|r| r["n_depth"].as_u64().unwrap())
        .collect();
    assert_eq!(depths, [0, 0, 16, 16, 0, 0, 16, 16]);
    for row in rows {
        assert_eq!(row["device"], "flex");
        assert!(row["tokens_per_second"].as_f64().unwrap() > 0.0);
        assert!(row["stddev"].as_f64().unwrap() >= 0.0);
        assert!(
            row["peak_rss_bytes"].as_u64().unwrap() > 90 << 20,
            "the weights are mapped"
        );
        // What the figures were taken on: the CPU's instruction sets and the kernels' level,
        // AVX-512 exactly where the CPU has all that its kernels use.
        let cpu = row["cpu"].as_str().unwrap();
        assert!(cpu.contains("avx2"), "{cpu}");
        let lacks: Vec<&str> = cpu.split("; no ").nth(1).unwrap_or("").split(' ').collect();
        let avx512 = [
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512_vnni",
        ]
        .iter()
        .all(|f| !lacks.contains(f));
        if std::env::var_os("KINDLE_SIMD").is_none() {
            assert_eq!(row["simd"] == "AVX-512", avx512, "{row}");
        }
    }
}

/// `kindle bench -d` past the model's context: an error naming both, before any work.
#[test]
fn bench_depth_past_the_context_is_an_error() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, _, stderr) = kindle(&["bench", "-p", "512", "-n", "0", "-d", "8000", "-r", "1"]);
    assert!(!ok);
    assert!(
        stderr.contains("at depth 8000 does not fit the model's context of 8192"),
        "{stderr}"
    );
}

/// `kindle bench` with every length 0 has nothing to time: an error, not an empty table.
#[test]
fn bench_with_nothing_to_time_is_an_error() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&["bench", "-p", "0", "-n", "0", "-r", "1"]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("nothing to time"), "{stderr}");
}

/// `kindle bench --output csv`: a header, then one line per test with the same columns.
#[test]
fn bench_csv_rows() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&[
        "bench", "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--output", "csv",
    ]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header[6], "test");
    assert_eq!(header[7], "tokens_per_second");
    for (line, test) in lines[1..].iter().zip(["pp4", "tg2"]) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), header.len(), "{line}");
        assert_eq!(cells[2], "flex");
        assert_eq!(cells[5], "1");
        assert_eq!(cells[6], test);
        assert!(cells[7].parse::<f64>().unwrap() > 0.0, "{line}");
    }
}

/// `kindle bench --bandwidth`: each decode test's weight bytes per second beside the read
/// bandwidth measured at its thread count. A token's weight bytes are the file's matrices
/// (SmolLM2's head is its tied embedding, counted once), not its norms.
#[test]
fn bench_bandwidth_sets_decode_beside_the_read_rate() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let (ok, stdout, stderr) = kindle(&[
        "bench",
        "-p",
        "4",
        "-n",
        "4",
        "-r",
        "1",
        "--threads-list",
        "1,2",
        "--bandwidth",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let file = kindle_gguf::GgufFile::open(common::model_path()).unwrap();
    let matrices: u64 = file
        .tensors()
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| t.n_bytes())
        .sum();
    for row in rows {
        assert_eq!(row["weight_bytes_per_token"].as_u64(), Some(matrices));
        let read = row["read_gbps"].as_f64().expect("a read bandwidth per row");
        assert!(read > 0.5, "{read} GB/s");
        if row["test"] == "tg4" {
            let tps = row["tokens_per_second"].as_f64().unwrap();
            let weights = row["weights_gbps"].as_f64().unwrap();
            let want = tps * matrices as f64 / 1e9;
            assert!(
                (weights - want).abs() <= 1e-9 * want,
                "{weights} against {want}"
            );
            let share = row["of_read_bandwidth"].as_f64().unwrap();
            assert!((share - weights / read).abs() <= 1e-9, "{share}");
        } else {
            // A prefill reads the weights once for all its tokens: no streaming rate.
            assert!(row["weights_gbps"].is_null() && row["of_read_bandwidth"].is_null());
        }
    }
    // The table grows the three columns only when asked.
    let (ok, stdout, stderr) = kindle(&["bench", "-p", "0", "-n", "2", "-r", "1", "-t", "1"]);
    assert!(ok, "{stderr}");
    assert!(!stdout.contains("read GB/s"), "{stdout}");
    let (ok, stdout, stderr) = kindle(&[
        "bench",
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--bandwidth",
    ]);
    assert!(ok, "{stderr}");
    let header = stdout.lines().next().unwrap();
    assert!(
        header.ends_with("| weights GB/s | read GB/s | of read |"),
        "{header}"
    );
    let row = stdout.lines().nth(2).unwrap();
    assert!(row.trim_end().ends_with("% |"), "{row}");
    // A GPU device has no CPU bandwidth to set beside: refused before the model loads.
    let (ok, _, stderr) = kindle(&["bench", "--device", "wgpu", "--bandwidth", "-r", "1"]);
    assert!(!ok);
    assert!(
        stderr.contains("--bandwidth measures the CPU's read bandwidth")
            && stderr.contains("not wgpu"),
        "{stderr}"
    );
}

/// `kindle bench --profile`: each test's weight products by shape, per step (a decode token
/// or a prefill pass), inside the step's time, and the time outside them. SmolLM2 has 30
/// layers (query/key/value and gate/up run as one job each) and a tied `Q8_0` head, which a
/// test computes for its last row only.
#[test]
fn bench_profile_splits_a_step_into_its_products() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let args = [
        "bench",
        "-p",
        "4",
        "-n",
        "3",
        "-r",
        "2",
        "-t",
        "1",
        "--profile",
    ];
    let (ok, stdout, stderr) = kindle(&[&args[..], &["--json"]].concat());
    assert!(ok, "{stderr}");
    let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
    for row in rows.as_array().unwrap() {
        let test = row["test"].as_str().unwrap();
        let rows_of_layers = if test == "pp4" { 4 } else { 1 };
        let p = &row["profile"];
        let products = p["products"].as_array().unwrap();
        let find = |name: &str| {
            products
                .iter()
                .find(|q| q["matrices"] == name)
                .unwrap_or_else(|| panic!("{name} in {p}"))
        };
        let head = find("Q8_0 49152x576");
        assert_eq!(head["activation_rows"], 1, "{test}");
        assert_eq!(head["calls_per_step"].as_f64(), Some(1.0), "{test}");
        for name in [
            "Q4_1 576x576 + Q4_1 192x576 + Q4_1 192x576",
            "Q4_1 576x576",
            "Q4_1 1536x576 + Q4_1 1536x576",
            "Q4_1 576x1536",
        ] {
            let q = find(name);
            assert_eq!(q["activation_rows"], rows_of_layers, "{test} {name}");
            assert_eq!(q["calls_per_step"].as_f64(), Some(30.0), "{test} {name}");
            assert_eq!(q["activations"], "f32");
            assert!(q["weights_gbps"].as_f64().unwrap() > 0.0);
        }
        assert_eq!(products.len(), 5, "{test}: {p}");
        // The attention (with its cache writes), once a layer.
        let operations = p["operations"].as_array().unwrap();
        assert_eq!(operations.len(), 1, "{p}");
        let attention = &operations[0];
        assert_eq!(attention["name"], "attention");
        assert_eq!(attention["calls_per_step"].as_f64(), Some(30.0), "{test}");
        assert_eq!(attention["activation_rows"], rows_of_layers, "{test}");
        let ms = |v: &Value| v.as_f64().unwrap();
        let inside: f64 = products.iter().map(|q| ms(&q["ms_per_step"])).sum();
        assert!((inside - ms(&p["products_ms"])).abs() < 1e-9, "{p}");
        assert!((ms(&attention["ms_per_step"]) - ms(&p["operations_ms"])).abs() < 1e-9);
        // The products and the attention run inside the timed steps.
        let outside = ms(&p["step_ms"]) - ms(&p["products_ms"]) - ms(&p["operations_ms"]);
        assert!((outside - ms(&p["outside_ms"])).abs() < 1e-9, "{p}");
        assert!(ms(&p["products_ms"]) > 0.0 && outside >= 0.0, "{p}");
        let shares: f64 = products
            .iter()
            .chain(operations)
            .map(|q| ms(&q["share"]))
            .sum();
        assert!(shares <= 1.0, "{p}");
    }
    // Markdown: a table per test after the main one; none without the flag.
    let (ok, stdout, stderr) = kindle(&args);
    assert!(ok, "{stderr}");
    for test in ["pp4", "tg3"] {
        assert!(
            stdout.contains(&format!("\nprofile: {test}, 1 threads: ")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("| Q8_0 49152x576 | 1 | f32 | 1 | "),
        "{stdout}"
    );
    assert!(stdout.contains("| (attention) | 4 | | 30 | "), "{stdout}");
    let (ok, stdout, _) = kindle(&args[..args.len() - 1]);
    assert!(ok && !stdout.contains("profile:"), "{stdout}");
    let (ok, _, stderr) = kindle(&["bench", "--device", "wgpu", "--profile", "-r", "1"]);
    assert!(!ok);
    assert!(
        stderr.contains("--profile times the CPU kernels' products") && stderr.contains("not wgpu"),
        "{stderr}"
    );
}

#[test]
fn a_chat_template_file_with_extra_variables_renders_the_prompt() {
    if common::real_model().is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    // Qwen3's switch: with `enable_thinking` false an empty thinking block closes the prompt.
    let dir = tempfile::tempdir().expect("a scratch directory");
    let template = dir.path().join("think.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
         {% endfor %}<|im_start|>assistant\n\
         {% if enable_thinking is defined and enable_thinking is false %}\
         <think>\n\n</think>\n\n{% endif %}",
    )
    .expect("writing the template");
    let template = template.to_str().expect("a UTF-8 path");
    let prompt_ids = |extra: &[&str]| -> Value {
        let mut args = vec!["generate", "--chat", "--chat-template-file", template];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-n", "1", "--json", "Hi"]);
        let (ok, stdout, stderr) = kindle(&args);
        assert!(ok, "{stderr}");
        serde_json::from_str::<Value>(&stdout).expect("one JSON object")["prompt_tokens"].clone()
    };
    let ids_of = |text: &str| -> Value {
        let (ok, stdout, stderr) = kindle(&["tokenize", "--special", "--json", text]);
        assert!(ok, "{stderr}");
        serde_json::from_str::<Value>(&stdout).expect("one JSON object")["ids"].clone()
    };
    let open = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(prompt_ids(&[]), ids_of(open));
    let off = prompt_ids(&["--chat-template-kwargs", r#"{"enable_thinking": false}"#]);
    assert_eq!(off, ids_of(&format!("{open}<think>\n\n</think>\n\n")));
    let on = prompt_ids(&["--chat-template-kwargs", r#"{"enable_thinking": true}"#]);
    assert_eq!(on, ids_of(open));
}
