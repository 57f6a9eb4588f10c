//! Every way a request can be wrong gets its status and an OpenAI error body
//! (`{"error": {"message", "type", "param", "code"}}`); none gets a 500 or a 422.

mod common;

use std::time::Duration;

use common::{TestServer, config};
use serde_json::{Value, json};

/// The error object of a body, checked for OpenAI's four fields.
fn error_of(body: &Value) -> &Value {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert!(
        error.get("param").is_some() && error.get("code").is_some(),
        "{body}"
    );
    error
}

async fn raw(
    server: &TestServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<Vec<u8>>,
) -> (u16, hyper::HeaderMap, Value) {
    raw_request(server.client.request(method, path).body(body), content_type).await
}

async fn raw_request(
    mut request: common::RequestBuilder,
    content_type: Option<&str>,
) -> (u16, hyper::HeaderMap, Value) {
    if let Some(ct) = content_type {
        request = request.header("content-type", ct);
    }
    let path = "request";
    let response = request.send().await;
    let status = response.status;
    let headers = response.headers.clone();
    let text = response.text().await;
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {status} with non-JSON body {text:?}: {e}"));
    (status, headers, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_invalid_field_is_a_400_naming_it() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/v1/completions",
            json!({"prompt": "a", "temperature": 2.5}),
            "temperature",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "temperature": "hot"}),
            "temperature",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "top_p": -0.1}),
            "top_p",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "top_k": -5}),
            "top_k",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "min_p": 1.5}),
            "min_p",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "typical_p": 0}),
            "typical_p",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "repeat_penalty": -1}),
            "repeat_penalty",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "presence_penalty": 3}),
            "presence_penalty",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "samplers": ["top_k", "bogus"]}),
            "samplers",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "samplers": "top_k;top_k"}),
            "samplers",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "samplers": 3}),
            "samplers",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "frequency_penalty": -2.1}),
            "frequency_penalty",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": 0}),
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": -3}),
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "repeat_penalty": 1e-300}),
            "repeat_penalty",
        ),
        ("/v1/completions", json!({"prompt": "a", "n": 0}), "n"),
        ("/v1/completions", json!({"prompt": "a", "n": 1000}), "n"),
        ("/v1/completions", json!({"prompt": "a", "n": 100}), "n"),
        // As many choices from a list of prompts, with `n` or without it.
        (
            "/v1/completions",
            json!({"prompt": vec!["a"; 100], "n": 1}),
            "n",
        ),
        (
            "/v1/completions",
            json!({"prompt": vec!["a"; 100]}),
            "prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}),
            "stop",
        ),
        ("/v1/completions", json!({"prompt": "a", "stop": 7}), "stop"),
        (
            "/v1/completions",
            json!({"prompt": "a", "logit_bias": {"abc": 1}}),
            "logit_bias",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "logit_bias": {"1": 500}}),
            "logit_bias",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "logit_bias": {"99999": 1}}),
            "logit_bias",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "logprobs": 6}),
            "logprobs",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "seed": "x"}),
            "seed",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "stream": "yes"}),
            "stream",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "min_tokens": -1}),
            "min_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "ignore_eos": "no"}),
            "ignore_eos",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "echo": "yes"}),
            "echo",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "echo": true}),
            "echo",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": "x"}),
            "chat_template_kwargs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}],
                   "chat_template_kwargs": {"messages": []}}),
            "chat_template_kwargs",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "chat_template_kwargs": {"enable_thinking": false}}),
            "chat_template_kwargs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "reasoning_format": "r1"}),
            "reasoning_format",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "reasoning_format": "none"}),
            "reasoning_format",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "echo": true, "max_tokens": -1}),
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "model": 3}),
            "model",
        ),
        ("/v1/completions", json!({"prompt": "A?"}), "prompt"),
        ("/v1/completions", json!({"prompt": ""}), "prompt"),
        ("/v1/completions", json!({"prompt": []}), "prompt"),
        ("/v1/completions", json!({"prompt": [1, 999]}), "prompt"),
        (
            "/v1/completions",
            json!({"prompt": {"text": "a"}}),
            "prompt",
        ),
        ("/v1/completions", json!({"max_tokens": 3}), "prompt"),
        ("/v1/chat/completions", json!({"messages": []}), "messages"),
        ("/v1/chat/completions", json!({}), "messages"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "a"}]}),
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user"}]}),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}),
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}),
            "tools[0]",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": "required", "guided_regex": "a+"}),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"},
                                {"role": "assistant", "content": null,
                                 "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]}),
            "messages[1].tool_calls[0]",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tools",
        ),
        ("/tokenize", json!({"content": 5}), "content"),
        ("/detokenize", json!({"tokens": [1, -1]}), "tokens"),
        ("/detokenize", json!({"tokens": "1"}), "tokens"),
        (
            "/tokenize",
            json!({"content": "a", "with_pieces": "yes"}),
            "with_pieces",
        ),
    ];
    for (path, body, param) in cases {
        let (status, answer) = server.post(path, &body).await;
        assert_eq!(status, 400, "{path} {body}: {answer}");
        let error = error_of(&answer);
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["param"], param, "{path} {body}: {answer}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_content_types_endpoints_and_methods() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    for body in ["{", "", "[1,2]", "\"text\"", "null", "{\"prompt\": \"a\",}"] {
        let (status, _, answer) = raw(
            &server,
            "POST",
            "/v1/completions",
            Some("application/json"),
            body,
        )
        .await;
        assert_eq!(status, 400, "{body:?}: {answer}");
        error_of(&answer);
    }
    let (status, _, answer) = raw(
        &server,
        "POST",
        "/v1/completions",
        Some("application/json"),
        vec![0xff, 0xfe, 0x00],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    for content_type in [
        Some("text/plain"),
        None,
        Some("application/x-www-form-urlencoded"),
    ] {
        let (status, _, answer) = raw(
            &server,
            "POST",
            "/v1/chat/completions",
            content_type,
            r#"{"messages":[{"role":"user","content":"a"}]}"#,
        )
        .await;
        assert_eq!(status, 415, "{content_type:?}: {answer}");
        assert_eq!(error_of(&answer)["code"], "unsupported_media_type");
    }
    // A content type with parameters is fine.
    let (status, _, answer) = raw(
        &server,
        "POST",
        "/v1/completions",
        Some("application/json; charset=utf-8"),
        r#"{"prompt":"a","max_tokens":1}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    for path in [
        "/v2/completions",
        "/index.html",
        "/v1/embeddings",
        "/v1/models/x/y",
    ] {
        let (status, _, answer) = raw(&server, "GET", path, None, "").await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert_eq!(error_of(&answer)["code"], "unknown_url");
    }
    let (status, _, answer) = raw(&server, "GET", "/v1/completions", None, "").await;
    assert_eq!(status, 405, "{answer}");
    error_of(&answer);
    let (status, _, answer) = raw(&server, "POST", "/health", None, "").await;
    assert_eq!(status, 405, "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_is_404() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let (status, answer) = server
        .post("/v1/completions", &json!({"model": "gpt-4", "prompt": "a"}))
        .await;
    assert_eq!(status, 404, "{answer}");
    let error = error_of(&answer);
    assert_eq!(error["code"], "model_not_found");
    assert_eq!(error["param"], "model");
    let (status, _) = server.get("/v1/models/gpt-4").await;
    assert_eq!(status, 404);
    // A name that is not UTF-8: a 400 in the API's shape, naming the path.
    let (status, answer) = server.get("/v1/models/%FF%FE").await;
    assert_eq!(status, 400, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("a JSON error");
    assert!(
        error_of(&answer)["message"]
            .as_str()
            .unwrap()
            .contains("model name in the path"),
        "{answer}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_over_the_context_are_context_length_exceeded() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let long = "ab".repeat(128); // 256 tokens: the whole context, no room left
    let (status, answer) = server
        .post("/v1/completions", &json!({"prompt": long}))
        .await;
    assert_eq!(status, 400, "{answer}");
    let error = error_of(&answer);
    assert_eq!(error["code"], "context_length_exceeded");
    assert_eq!(error["param"], "prompt");
    let (status, answer) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": long}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(error_of(&answer)["code"], "context_length_exceeded");
    // max_tokens past the context is capped, not refused.
    let (status, answer) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "a".repeat(250), "max_tokens": 1000, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 6);
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_413() {
    let mut cfg = config();
    cfg.max_body_bytes = 1000;
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let body = json!({"prompt": "a".repeat(2000)}).to_string();
    let (status, _, answer) = raw(
        &server,
        "POST",
        "/v1/completions",
        Some("application/json"),
        body.clone(),
    )
    .await;
    assert_eq!(status, 413, "{answer}");
    error_of(&answer);
    // Without a length up front (chunked), the limit holds while reading.
    let chunks = body.into_bytes().chunks(100).map(<[u8]>::to_vec).collect();
    let (status, _, answer) = raw_request(
        server.client.post("/v1/completions").chunked_body(chunks),
        Some("application/json"),
    )
    .await;
    assert_eq!(status, 413, "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_is_required_when_set() {
    let mut cfg = config();
    cfg.api_key = Some("sesame".into());
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let body = r#"{"prompt":"a","max_tokens":1}"#;
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("sesame"),
        Some("Bearer sesam"),
    ] {
        let mut request = server
            .client
            .post("/v1/completions")
            .header("content-type", "application/json")
            .body(body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await;
        assert_eq!(response.status, 401, "{auth:?}");
        let answer: Value = serde_json::from_str(&response.text().await).unwrap();
        assert_eq!(error_of(&answer)["type"], "authentication_error");
    }
    let response = server
        .client
        .post("/v1/completions")
        .header("content-type", "application/json")
        .header("authorization", "Bearer sesame")
        .body(body)
        .send()
        .await;
    assert_eq!(response.status, 200);
    let (status, _) = server.get("/health").await;
    assert_eq!(status, 200, "/health needs no key");
    let (status, _) = server.get("/v1/models").await;
    assert_eq!(status, 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_429_with_retry_after() {
    let mut cfg = config();
    cfg.parallel = 1;
    cfg.queue = 1;
    let server = TestServer::start(cfg, Duration::from_millis(20)).await;
    let body = json!({"prompt": "slow", "max_tokens": 30, "ignore_eos": true});
    let mut background = Vec::new();
    for _ in 0..2 {
        let client = server.client.clone();
        let path = "/v1/completions";
        let body = body.to_string();
        background.push(tokio::spawn(async move {
            client
                .post(path)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .status
        }));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(server.metric("kindle_sequences_running").await, 1.0);
    assert_eq!(server.metric("kindle_sequences_queued").await, 1.0);
    let (status, headers, answer) = raw(
        &server,
        "POST",
        "/v1/completions",
        Some("application/json"),
        body.to_string(),
    )
    .await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(error_of(&answer)["code"], "queue_full");
    for task in background {
        assert_eq!(task.await.unwrap(), 200);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_off_unless_an_origin_is_allowed() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let response = server
        .client
        .get("/v1/models")
        .header("origin", "http://example.com")
        .send()
        .await;
    assert!(
        response
            .headers
            .get("access-control-allow-origin")
            .is_none()
    );
    server.stop().await;

    let mut cfg = config();
    cfg.cors_origins = vec!["http://example.com".into()];
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let response = server
        .client
        .request("OPTIONS", "/v1/chat/completions")
        .header("origin", "http://example.com")
        .header("access-control-request-method", "POST")
        .send()
        .await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.headers["access-control-allow-origin"],
        "http://example.com"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_never_gets_a_5xx() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let values = [
        json!(null),
        json!(-1),
        json!(1e300),
        json!("x"),
        json!([]),
        json!({}),
        json!([null]),
        json!(true),
        json!(1.5),
        json!(u64::MAX),
        json!([{"type": "function", "function": {"name": "f"}}]),
        json!({"type": "function", "function": {"name": "f"}}),
        json!({"enable_thinking": false}),
        json!("required"),
    ];
    let fields = [
        "model",
        "prompt",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "seed",
        "user",
        "top_k",
        "min_p",
        "typical_p",
        "repeat_penalty",
        "min_tokens",
        "ignore_eos",
        "stream_options",
        "max_completion_tokens",
        "samplers",
        "echo",
        "chat_template_kwargs",
        "reasoning_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "guided_grammar",
    ];
    for path in ["/v1/completions", "/v1/chat/completions"] {
        for field in fields {
            for value in &values {
                let mut body = if path == "/v1/completions" {
                    json!({"prompt": "ab", "max_tokens": 2})
                } else {
                    json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 2})
                };
                body[field] = value.clone();
                let response = server
                    .client
                    .post(path)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                let status = response.status;
                let text = response.text().await;
                assert!(
                    status == 200 || status == 400 || status == 404,
                    "{path} {body}: {status} {text}"
                );
            }
        }
    }
    server.settle("kindle_sequences_running", 0.0).await;
    server.stop().await;
}

/// Read from `stream` until it is closed; when that was (panics past `limit`).
fn closed_within(stream: &mut std::net::TcpStream, limit: Duration) -> std::time::Instant {
    use std::io::Read;
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return std::time::Instant::now(),
            Ok(_) => {} // a response; keep reading until the close
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the connection stayed open past {limit:?}")
            }
            Err(_) => return std::time::Instant::now(), // reset by the server
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_finish_their_headers_or_idle_are_cut_off() {
    let mut cfg = config();
    cfg.header_timeout = Duration::from_millis(400);
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let addr = server.addr.clone();
    let took = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let connect = || std::net::TcpStream::connect(&addr).unwrap();
        let start = std::time::Instant::now();
        // Connects and sends nothing.
        let mut silent = connect();
        // Sends half of its headers, then stalls.
        let mut slow = connect();
        slow.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-")
            .unwrap();
        // Finishes one request, then idles on the kept-alive connection.
        let mut idle = connect();
        idle.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        let limit = Duration::from_secs(5);
        [&mut silent, &mut slow, &mut idle].map(|s| closed_within(s, limit) - start)
    })
    .await
    .unwrap();
    // Each was cut off by the timeout, not at once.
    for t in took {
        assert!(t >= Duration::from_millis(300), "{took:?}");
    }
    // The server answers normally afterwards.
    let (status, _) = server.get("/health").await;
    assert_eq!(status, 200);
    let (status, body) = server
        .post("/v1/completions", &json!({"prompt": "ab", "max_tokens": 2}))
        .await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

#[test]
fn a_zero_header_timeout_is_refused() {
    let mut cfg = config();
    cfg.header_timeout = Duration::ZERO;
    let error = cfg.validate().unwrap_err().to_string();
    assert!(error.contains("--header-timeout"), "{error}");
}
