//! `kindle serve` on the real model as llama-server's and OpenAI's clients expect it: special
//! tokens written in a completion prompt, `/tokenize` and `/detokenize` with llama-server's
//! options, the bytes of tokens that are part of a character, completions' `top_logprobs`
//! holding the sampled token, llama-server's `grammar` (GBNF), `json_schema` and `n_predict`,
//! `/props` and the
//! paths without `/v1`, a cut tool call.

mod common;

use common::server::Served;
use serde_json::{Value, json};

fn ids(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn llama_server_and_openai_clients_get_what_they_expect() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["-c", "1024", "-t", "2"]);

    // A chat prompt formatted by hand: `<|im_start|>` (id 1) and `<|im_end|>` (2) are the
    // special tokens, as llama-server and vLLM read a prompt, so the text gives what its ids
    // give.
    let text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    let (status, tokenized) = server.post("/tokenize", &json!({"content": text}));
    assert_eq!(status, 200, "{tokenized}");
    let prompt_ids = ids(&tokenized["tokens"]);
    assert_eq!(prompt_ids.len(), 10, "{tokenized}");
    assert_eq!((prompt_ids[0], prompt_ids[4]), (1, 2), "{tokenized}");
    let complete = |prompt: Value| {
        let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0});
        let (status, reply) = server.post("/v1/completions", &body);
        assert_eq!(status, 200, "{reply}");
        reply
    };
    let by_text = complete(json!(text));
    let by_ids = complete(json!(prompt_ids));
    assert_eq!(by_text["choices"][0]["text"], by_ids["choices"][0]["text"]);
    assert_eq!(by_text["usage"]["prompt_tokens"], 10, "{by_text}");

    // `/tokenize`: `parse_special: false` spells the tag as text; vLLM's `prompt` form adds
    // the BOS the vocabulary asks for (SmolLM2 asks for none) and parses special tokens.
    let (_, plain) = server.post(
        "/tokenize",
        &json!({"content": "<|im_start|>", "parse_special": false}),
    );
    assert!(ids(&plain["tokens"]).len() > 3, "{plain}");
    let (_, vllm) = server.post("/tokenize", &json!({"prompt": "<|im_start|>"}));
    assert_eq!(ids(&vllm["tokens"]), [1], "{vllm}");
    // `/detokenize` renders special tokens, as llama-server.
    let (_, back) = server.post("/detokenize", &json!({"tokens": prompt_ids}));
    assert_eq!(back["content"], text, "{back}");

    // A cat is four bytes, more than one token: each piece is its bytes (an array where they
    // are not a character alone), and the pieces' bytes join to the cat.
    let cat = "🐱";
    let (_, pieces) = server.post("/tokenize", &json!({"content": cat, "with_pieces": true}));
    let pieces = pieces["tokens"].as_array().unwrap().clone();
    assert!(pieces.len() > 1, "{pieces:?}");
    let piece_bytes = |p: &Value| -> Vec<u8> {
        match &p["piece"] {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Array(b) => b.iter().map(|v| v.as_u64().unwrap() as u8).collect(),
            other => panic!("a piece of {other}"),
        }
    };
    let joined: Vec<u8> = pieces.iter().flat_map(piece_bytes).collect();
    assert_eq!(joined, cat.as_bytes());
    assert!(pieces.iter().any(|p| p["piece"].is_array()), "{pieces:?}");

    // Chat logprobs of those tokens (forced by logit_bias, in the order the model likes):
    // each `bytes` is the token's own bytes, not U+FFFD's.
    let bias: serde_json::Map<String, Value> = pieces
        .iter()
        .map(|p| (p["id"].to_string(), json!(100)))
        .collect();
    let body = json!({
        "messages": [{"role": "user", "content": "A cat:"}], "max_tokens": 3,
        "temperature": 0, "logprobs": true, "top_logprobs": 2, "logit_bias": bias,
    });
    let (status, reply) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{reply}");
    let content = reply["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 3, "{reply}");
    for entry in content {
        let piece = pieces
            .iter()
            .find(|p| p["piece"] == entry["token"] || piece_bytes(p) == bytes_of(&entry["bytes"]))
            .unwrap_or_else(|| panic!("{entry} is none of the cat's pieces {pieces:?}"));
        assert_eq!(bytes_of(&entry["bytes"]), piece_bytes(piece), "{entry}");
        assert_ne!(bytes_of(&entry["bytes"]), "\u{FFFD}".as_bytes(), "{entry}");
    }

    // Completions' `top_logprobs` hold the sampled token, even where the sampler picked one
    // outside the top 1 (a high temperature, seeded).
    let body = json!({"prompt": "My favourite animal is the", "max_tokens": 12,
                      "temperature": 1.5, "seed": 3, "logprobs": 1});
    let (_, reply) = server.post("/v1/completions", &body);
    let lp = &reply["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    let mut wider = 0;
    for (i, token) in tokens.iter().enumerate() {
        let top = lp["top_logprobs"][i].as_object().unwrap();
        let token = token.as_str().unwrap();
        assert_eq!(top[token], lp["token_logprobs"][i], "{lp}");
        wider += usize::from(top.len() == 2);
    }
    assert!(
        wider > 0,
        "no token outside the top 1 at temperature 1.5: {lp}"
    );

    // llama-server's `json_schema` constrains; its `n_predict` is the token limit.
    let schema = json!({"type": "object", "properties": {"age": {"type": "integer"}},
                        "required": ["age"], "additionalProperties": false});
    let body = json!({"prompt": "A person as JSON:", "max_tokens": 20, "temperature": 0,
                      "json_schema": schema});
    let (status, reply) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{reply}");
    let answer: Value = serde_json::from_str(reply["choices"][0]["text"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{reply}: {e}"));
    assert!(answer["age"].is_i64(), "{answer}");
    // llama-server's `grammar` is GBNF.
    let body = json!({"prompt": "My favourite colour is", "max_tokens": 4, "temperature": 0,
                      "grammar": "root ::= \" red\" | \" blue\""});
    let (status, reply) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{reply}");
    let colour = reply["choices"][0]["text"].as_str().unwrap();
    assert!([" red", " blue"].contains(&colour), "{reply}");
    // Bad grammars are 400s naming the field, never a crash: unterminated, matching no text,
    // nested 10,000 deep; a chain of 1,000 rules (whose compile overflowed a worker's stack and
    // aborted the server) compiles and constrains.
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(10_000), ")".repeat(10_000));
    for bad in ["root ::= \"a", "root ::= root", &deep] {
        let body = json!({"prompt": "x", "max_tokens": 2, "grammar": bad});
        let (status, reply) = server.post("/v1/completions", &body);
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["param"], "grammar", "{reply}");
    }
    let mut chain = String::from("root ::= r0\n");
    for i in 0..1000 {
        chain.push_str(&format!("r{i} ::= r{} \"b\"\n", i + 1));
    }
    chain.push_str("r1000 ::= \"a\"\n");
    let body = json!({"prompt": "x", "max_tokens": 3, "temperature": 0, "grammar": chain});
    let (status, reply) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["text"], "abb", "{reply}");
    let body = json!({"prompt": "One, two,", "n_predict": 3, "temperature": 0});
    let (_, reply) = server.post("/v1/completions", &body);
    assert_eq!(reply["usage"]["completion_tokens"], 3, "{reply}");

    // `/props` (llama.cpp's web UI reads it) and the paths without `/v1`.
    let (status, props) = server.get("/props");
    assert_eq!(status, 200, "{props}");
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(
        props["default_generation_settings"]["n_ctx"], 1024,
        "{props}"
    );
    assert!(
        props["chat_template"]
            .as_str()
            .unwrap()
            .contains("im_start"),
        "{props}"
    );
    let body = json!({"prompt": text, "max_tokens": 8, "temperature": 0});
    let (status, bare) = server.post("/completions", &body);
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["choices"][0]["text"], by_text["choices"][0]["text"]);
    let (status, models) = server.get("/models");
    assert_eq!(status, 200, "{models}");
}

fn bytes_of(value: &Value) -> Vec<u8> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("bytes: {value}"))
        .iter()
        .map(|v| v.as_u64().unwrap() as u8)
        .collect()
}

/// A further tool call cut by `max_tokens` after a whole one: the reply says `length` and
/// carries no call markup in its content.
#[test]
fn a_cut_tool_call_leaves_no_markup() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("tools.jinja");
    std::fs::write(&template, common::server::TOOLS_TEMPLATE).unwrap();
    let server = Served::start(
        &model,
        &[
            "-c",
            "1024",
            "-t",
            "2",
            "--chat-template-file",
            template.to_str().unwrap(),
        ],
    );
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": false},
    }}]);
    let mut cut = 0;
    for max_tokens in [28, 34, 40, 46, 52] {
        let body = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                          "tools": tools, "tool_choice": "required", "max_tokens": max_tokens,
                          "temperature": 0});
        for stream in [false, true] {
            let (content, finish, calls) = if stream {
                let mut b = body.clone();
                b["stream"] = json!(true);
                let (status, events) = server.post_stream("/v1/chat/completions", &b);
                assert_eq!(status, 200);
                let chunks: Vec<Value> = events
                    .iter()
                    .filter(|e| *e != "[DONE]")
                    .map(|e| serde_json::from_str(e).unwrap())
                    .collect();
                let content: String = chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                    .collect();
                let finish = chunks
                    .iter()
                    .find_map(|c| {
                        c["choices"][0]["finish_reason"]
                            .as_str()
                            .map(str::to_string)
                    })
                    .unwrap();
                let calls = chunks
                    .iter()
                    .any(|c| c["choices"][0]["delta"].get("tool_calls").is_some());
                (content, finish, calls)
            } else {
                let (status, reply) = server.post("/v1/chat/completions", &body);
                assert_eq!(status, 200, "{reply}");
                let choice = &reply["choices"][0];
                let content = choice["message"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let finish = choice["finish_reason"].as_str().unwrap().to_string();
                (
                    content,
                    finish,
                    choice["message"].get("tool_calls").is_some(),
                )
            };
            assert!(
                !content.contains("<tool_call"),
                "{max_tokens} {stream}: {content:?}"
            );
            if calls && finish == "length" {
                cut += 1;
            }
        }
    }
    assert!(cut > 0, "no reply had a whole call and a cut one");
}
