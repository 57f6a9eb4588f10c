//! `kindle explain` on the real model: the same tokens as `kindle generate` with the same
//! flags, the JSON's numbers hang together, the table, valid SVG/PNG pictures and a
//! self-contained page, `--compare`, and clear errors.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const PROMPT: &str = "The capital of France is";
const FLAGS: [&str; 8] = [
    "-n",
    "8",
    "--temperature",
    "0.8",
    "--top-p",
    "0.9",
    "--seed",
    "3",
];

fn kindle(model: &Path, command: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kindle"))
        .arg(command)
        .arg("-m")
        .arg(model)
        .args(args)
        .output()
        .expect("running kindle")
}

fn ok_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn explain_chooses_generates_tokens_and_reports_the_chain() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let mut args = vec![PROMPT, "--json"];
    args.extend_from_slice(&FLAGS);
    let explained = ok_json(&kindle(&model, "explain", &args));
    let generated = ok_json(&kindle(&model, "generate", &args));
    let tokens: Vec<u64> = explained["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["token"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = generated["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(
        tokens, expected,
        "explain and generate chose different tokens"
    );
    assert_eq!(explained["text"], generated["text"]);

    // The default chain, in llama.cpp's order.
    let chain: Vec<&str> = explained["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        chain,
        [
            "penalties",
            "dry",
            "top_n_sigma",
            "top_k",
            "typ_p",
            "top_p",
            "min_p",
            "xtc",
            "temperature"
        ]
    );
    let top_p = chain.iter().position(|c| *c == "top_p").unwrap();
    for step in explained["steps"].as_array().unwrap() {
        let p = step["probability"].as_f64().unwrap();
        let selected = step["selected_probability"].as_f64().unwrap();
        assert!(
            p > 0.0 && p <= 1.0 && selected > 0.0 && selected <= 1.0,
            "{step}"
        );
        // top_p 0.9 keeps the smallest set with 90% of the mass: a few tokens of 49,152.
        let kept = step["stages"][top_p]["kept"].as_u64().unwrap();
        assert!((1..49_152).contains(&kept), "{kept}");
        let candidates = step["candidates"].as_array().unwrap();
        let chosen = candidates
            .iter()
            .find(|c| c["id"] == step["token"])
            .expect("the chosen token is listed");
        assert_eq!(chosen["raw_probability"].as_f64().unwrap(), p);
        let after = chosen["after"].as_array().unwrap();
        assert_eq!(after.len(), chain.len());
        assert_eq!(after.last().unwrap().as_f64().unwrap(), selected);
    }
}

#[test]
fn table_pictures_and_page() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (svg, png, html) = (
        dir.join("explain.svg"),
        dir.join("explain.png"),
        dir.join("explain.html"),
    );
    for path in [&svg, &png, &html] {
        let _ = std::fs::remove_file(path);
    }
    let (svg_arg, png_arg, html_arg) = (
        format!("--plot={}", svg.display()),
        format!("--plot={}", png.display()),
        format!("--html={}", html.display()),
    );
    let mut args = vec![PROMPT];
    args.extend_from_slice(&FLAGS);
    let mut with_svg = args.clone();
    with_svg.extend([svg_arg.as_str(), html_arg.as_str()]);
    let out = kindle(&model, "explain", &with_svg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("step 8:") && table.contains("top_p") && table.contains('*'),
        "{table}"
    );
    let mut with_png = args.clone();
    with_png.extend([png_arg.as_str(), "--plot-steps", "1,8"]);
    let out = kindle(&model, "explain", &with_png);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG parses");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(doc.descendants().filter(|n| n.has_tag_name("rect")).count() > 30);
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().expect("the PNG decodes");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    // Two step panels side by side above the per-step series.
    assert_eq!((info.width, info.height), (1100, 600));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg"));
    assert_eq!(page.matches("<table>").count(), 8);
    let without_namespace = page.replace("http://www.w3.org/2000/svg", "");
    for needle in ["<script", "<link", "src=", "http://", "https://"] {
        assert!(
            !without_namespace.contains(needle),
            "the page loads {needle}"
        );
    }
}

#[test]
fn compare_shows_two_settings_along_one_text() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let out = kindle(
        &model,
        "explain",
        &[
            PROMPT,
            "-n",
            "3",
            "--json",
            "--compare",
            "--temperature 0.5 --seed 1",
            "--temperature 1.5 --seed 1",
        ],
    );
    let value = ok_json(&out);
    assert_eq!(value["compare"][1], "--temperature 1.5 --seed 1");
    let tokens = |side: &str| -> Vec<u64> {
        value[side]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["token"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(tokens("a"), tokens("b"), "B is fed A's tokens");
    let entropy = |side: &str| {
        let stages = value[side]["steps"][0]["stages"].as_array().unwrap();
        stages.last().unwrap()["entropy"].as_f64().unwrap()
    };
    assert!(
        entropy("b") > entropy("a"),
        "a hotter setting spreads the mass"
    );
}

#[test]
fn bad_input_is_named() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let cases: [(&[&str], &str); 5] = [
        (&[PROMPT, "-n", "0"], "--max-tokens"),
        (&[PROMPT, "-n", "2", "--plot", "x.gif"], ".svg or .png"),
        (
            &[PROMPT, "-n", "2", "--plot", "x.svg", "--plot-steps", "3"],
            "--plot-steps",
        ),
        (&[PROMPT, "-n", "2", "--mirostat", "2"], "mirostat"),
        (
            &[PROMPT, "--compare", "--temperature 0.5", "--bogus 1"],
            "--compare",
        ),
    ];
    for (args, needle) in cases {
        let out = kindle(&model, "explain", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        // An error that quotes its cause does not print it twice.
        let line = stderr.lines().last().unwrap_or_default();
        let said = line.trim_start_matches("kindle: error: ");
        let tail = said.rsplit(": ").next().unwrap_or_default();
        assert_eq!(said.matches(tail).count(), 1, "{args:?}: {stderr}");
    }
}
