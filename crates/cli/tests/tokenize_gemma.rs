//! `kindle tokenize -m gemma3-270m`: a fetchable model named instead of a path, whose
//! SentencePiece vocabulary is read without loading the model (Gemma-3 weights are not needed),
//! checked against llama.cpp's ids in `testdata/reference/gemma3-270m-q4_k_m.json`.

use std::process::Command;

use kindle_fetch::GEMMA3_270M;
use serde_json::Value;

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/reference/gemma3-270m-q4_k_m.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("reading the reference JSON"))
        .expect("parsing the reference JSON")
}

/// `kindle tokenize --json -m gemma3-270m [--special] TEXT`: the ids.
fn tokenize(text: &str, special: bool) -> Vec<u64> {
    let mut args = vec!["tokenize", "--json", "-m", GEMMA3_270M.name];
    if special {
        args.push("--special");
    }
    args.push(text);
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(&args)
        .output()
        .expect("running kindle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kindle {args:?} failed: {stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on standard output");
    json["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_u64().expect("an id"))
        .collect()
}

#[test]
fn tokenize_by_model_name_matches_llama_cpp() {
    // Fetch (or find) the file the way the command will: the cache folder of this environment.
    if kindle_fetch::fetchable_model_for_tests(&GEMMA3_270M).is_none() {
        return; // KINDLE_SKIP_REAL_MODEL=1
    }
    let reference = reference();
    for vector in reference["tokenizer_vectors"].as_array().expect("vectors") {
        let text = vector["text"].as_str().expect("text");
        for (special, key) in [
            (true, "ids_add_bos_parse_special"),
            (false, "ids_add_bos_no_special"),
        ] {
            let want: Vec<u64> = vector[key]
                .as_array()
                .expect("ids")
                .iter()
                .map(|id| id.as_u64().expect("an id"))
                .collect();
            assert_eq!(
                tokenize(text, special),
                want,
                "{text:?} --special={special}"
            );
        }
    }
}

#[test]
fn an_unknown_model_name_lists_the_fetchable_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["tokenize", "-m", "no-such-model-name", "hi"])
        .output()
        .expect("running kindle");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("gemma3-270m"), "{stderr}");
}

/// Gemma's file has no chat template: its turn format is the default (llama.cpp's `gemma`
/// template), rendered with the markers parsed and the message contents as text.
#[test]
fn gemma_chat_prompts_use_the_turn_format() {
    use kindle_cli::chat::{chat_template, encode_single_turn};
    use kindle_gguf::GgufFile;
    use kindle_tokenizer::Tokenizer;

    let Some(path) = kindle_fetch::fetchable_model_for_tests(&GEMMA3_270M) else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(&path).expect("open")).expect("vocab");
    assert!(tokenizer.chat_template().is_none());
    let template = chat_template(&tokenizer, &Default::default()).expect("template");
    let ids = encode_single_turn(&tokenizer, &template, Some("Be brief."), "Hi<end_of_turn>")
        .expect("encode");
    let whole = "<start_of_turn>user\nBe brief.\n\nHi";
    let mut want = tokenizer.encode(whole, true).expect("encode");
    // The content's "<end_of_turn>" is text, not the marker.
    want.extend(&tokenizer.encode("<end_of_turn>", false).expect("encode")[1..]);
    want.extend(
        &tokenizer
            .encode("<end_of_turn>\n<start_of_turn>model\n", true)
            .expect("encode")[1..],
    );
    assert_eq!(ids, want);
    assert_eq!(ids[..3], [2, 105, 2364]);
}
