//! The API over a real loopback socket with the fake model: response shapes (plain and
//! streamed), continuous batching giving each request what it gives alone, n, seeds, stops,
//! logprobs, cancellation on disconnect, draining, and the small endpoints.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Letters, TestServer, alone, config, greedy, seeded};
use serde_json::{Value, json};

fn prompt_ids(text: &str) -> Vec<u32> {
    Letters::ids(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_has_openai_shape_and_equals_the_request_alone() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"model": "toy", "prompt": "the cat", "max_tokens": 12, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"), "{body}");
    assert_eq!(body["object"], "text_completion");
    assert!(body["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(body["model"], "toy");
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert!(choice["logprobs"].is_null());
    let (text, reason, generated) = alone(&prompt_ids("the cat"), 12, greedy(), &[]);
    assert_eq!(choice["text"], text.as_str());
    assert_eq!(choice["finish_reason"], reason);
    assert_eq!(body["usage"]["prompt_tokens"], 7);
    assert_eq!(body["usage"]["completion_tokens"], generated);
    assert_eq!(body["usage"]["total_tokens"], 7 + generated);
    // `kindle` names the served model too; token-id prompts work as text ones.
    let (status, by_ids) = server
        .post(
            "/v1/completions",
            &json!({"model": "kindle", "prompt": prompt_ids("the cat"), "max_tokens": 12, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(by_ids["choices"][0]["text"], text.as_str());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_ends_with_length() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    // Find a prompt whose greedy continuation runs past 5 tokens.
    let prompt = (0..40)
        .map(|i| format!("p{}", char::from(b'a' + (i % 26) as u8)).repeat(1 + i / 26))
        .find(|p| alone(&prompt_ids(p), 5, greedy(), &[]).1 == "length")
        .expect("a prompt that runs to the limit");
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 5, "temperature": 0}),
        )
        .await;
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_completion_chunks_concatenate_to_the_plain_answer() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let request = json!({"prompt": "once upon", "max_tokens": 20, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true}});
    let events = server.stream("/v1/completions", &request).await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (usage_chunk, chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let mut text = String::new();
    for chunk in chunks {
        assert_eq!(chunk["object"], "text_completion");
        assert!(chunk["id"].as_str().unwrap().starts_with("cmpl-"));
        assert!(chunk["usage"].is_null(), "{chunk}");
        text.push_str(chunk["choices"][0]["text"].as_str().unwrap());
    }
    let last = chunks.last().unwrap();
    let (expected, reason, generated) = alone(&prompt_ids("once upon"), 20, greedy(), &[]);
    assert_eq!(last["choices"][0]["finish_reason"], reason);
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    assert_eq!(text, expected);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], generated);
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 9);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completion_plain_and_streamed() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let messages =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]);
    let prompt = prompt_ids("system:be brief\nuser:hi there\nassistant:");
    let (expected, reason, _) = alone(&prompt, 30, greedy(), &[]);
    let (status, body) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": messages, "max_completion_tokens": 30, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], expected.as_str());
    assert_eq!(choice["finish_reason"], reason);
    assert_eq!(body["usage"]["prompt_tokens"], prompt.len());

    let events = server
        .stream(
            "/v1/chat/completions",
            &json!({"messages": messages, "max_tokens": 30, "temperature": 0, "stream": true}),
        )
        .await;
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert!(
            chunk.get("usage").is_none(),
            "no usage unless asked: {chunk}"
        );
        if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    assert_eq!(text, expected);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], reason);
    assert_eq!(last["choices"][0]["delta"], json!({}));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_batched_and_each_equals_its_single_run() {
    let mut cfg = config();
    cfg.parallel = 8;
    let server = TestServer::start(cfg, Duration::from_millis(3)).await;
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("prompt number {}", "abcdefgh".chars().nth(i).unwrap()))
        .collect();
    let mut tasks = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let client = server.client.clone();
        let path = "/v1/completions";
        // Half greedy, half seeded sampling; half streamed.
        let body = if i % 2 == 0 {
            json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": i % 4 == 0})
        } else {
            json!({"prompt": prompt, "max_tokens": 24, "temperature": 1, "seed": 100 + i, "stream": i % 4 == 1})
        };
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(path)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            let text = response.text().await;
            if body["stream"] == true {
                text.split("\n\n")
                    .filter_map(|e| e.strip_prefix("data: "))
                    .filter(|e| *e != "[DONE]")
                    .map(|e| {
                        let v: Value = serde_json::from_str(e).unwrap();
                        v["choices"][0]["text"].as_str().unwrap().to_string()
                    })
                    .collect::<String>()
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                v["choices"][0]["text"].as_str().unwrap().to_string()
            }
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let got = task.await.unwrap();
        let sampler = if i % 2 == 0 {
            greedy()
        } else {
            seeded(100 + i as u64)
        };
        let (expected, _, _) = alone(&prompt_ids(&prompts[i]), 24, sampler, &[]);
        assert_eq!(got, expected, "request {i}");
    }
    let largest = server.model.largest_batch.load(Ordering::SeqCst);
    assert!(largest > 1, "requests never shared a forward pass");
    // Their steps were finished on the model's threads (the fake's three).
    assert!(server.model.task_runs.load(Ordering::SeqCst) > 1);
    server.settle("kindle_sequences_running", 0.0).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_seeds_and_stops() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let request =
        json!({"prompt": "seed test", "max_tokens": 16, "temperature": 1, "seed": 42, "n": 2});
    let (status, first) = server.post("/v1/completions", &request).await;
    assert_eq!(status, 200, "{first}");
    let (_, again) = server.post("/v1/completions", &request).await;
    assert_eq!(first["choices"], again["choices"], "same seed, same output");
    let prompt = prompt_ids("seed test");
    for i in 0..2 {
        let choice = &first["choices"][i];
        assert_eq!(choice["index"], i);
        let (expected, _, _) = alone(&prompt, 16, seeded(42 + i as u64), &[]);
        assert_eq!(choice["text"], expected.as_str(), "choice {i}");
    }
    // Usage counts the prompt once.
    assert_eq!(first["usage"]["prompt_tokens"], prompt.len());

    // A stop string cuts the text and ends with `stop`.
    let (full, _, _) = alone(&prompt, 40, greedy(), &[]);
    let stop: String = full.chars().skip(3).take(2).collect();
    assert_eq!(stop.chars().count(), 2, "{full:?} is long enough");
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "seed test", "max_tokens": 40, "temperature": 0, "stop": [stop]}),
        )
        .await;
    let (cut, reason, _) = alone(&prompt, 40, greedy(), &[&stop]);
    assert_eq!(body["choices"][0]["text"], cut.as_str());
    assert_eq!(reason, "stop");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(!cut.contains(&stop));

    // Several prompts: prompt-major choice indices.
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": ["ab", "cd"], "max_tokens": 4, "temperature": 0, "n": 2}),
        )
        .await;
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    assert_eq!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(
        choices[2]["text"],
        alone(&prompt_ids("cd"), 4, greedy(), &[]).0.as_str()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_in_both_shapes() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": 3, "temperature": 0, "logprobs": 2, "ignore_eos": true}),
        )
        .await;
    let lp = &body["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3, "{lp}");
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 3);
    assert_eq!(lp["text_offset"][0], 0);
    let top = lp["top_logprobs"][0].as_object().unwrap();
    assert_eq!(top.len(), 2);
    let best = lp["token_logprobs"][0].as_f64().unwrap();
    assert!(best < 0.0 && best > -1.0, "{best}");
    assert_eq!(
        top[lp["tokens"][0].as_str().unwrap()].as_f64().unwrap(),
        best
    );

    let (_, body) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                    "temperature": 0, "logprobs": true, "top_logprobs": 3, "ignore_eos": true}),
        )
        .await;
    let content = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 3);
    let first = &content[0];
    assert!(first["token"].is_string() && first["logprob"].is_number());
    assert!(first["bytes"].is_array());
    assert_eq!(first["top_logprobs"].as_array().unwrap().len(), 3);
    assert_eq!(first["top_logprobs"][0]["token"], first["token"]);

    // Streamed: logprobs ride on each chunk.
    let events = server
        .stream(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                    "temperature": 0, "logprobs": true, "top_logprobs": 1, "stream": true, "ignore_eos": true}),
        )
        .await;
    let with_logprobs = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter(|c| c["choices"][0]["logprobs"]["content"].is_array())
        .count();
    assert_eq!(with_logprobs, 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kindle_trace_reports_the_chain_per_token() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let request = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
        "temperature": 0.8, "top_k": 3, "seed": 5, "logprobs": true, "ignore_eos": true,
        "kindle_trace": true});
    let (status, body) = server.post("/v1/chat/completions", &request).await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 4);
    for entry in content {
        let trace = &entry["kindle_trace"];
        let stages: Vec<&str> = trace["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert!(
            stages.contains(&"top_k") && stages.contains(&"temperature"),
            "{trace}"
        );
        let top_k = trace["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "top_k")
            .unwrap();
        assert_eq!(top_k["kept"], 3, "{trace}");
        // The token's raw probability is its logprob; after the chain it was one of three.
        let p = trace["probability"].as_f64().unwrap();
        let logprob = entry["logprob"].as_f64().unwrap();
        assert!((p.ln() - logprob).abs() < 1e-4, "{p} vs {logprob}");
        let candidates = trace["candidates"].as_array().unwrap();
        let kept: Vec<&Value> = candidates
            .iter()
            .filter(|c| c["final"].as_f64().unwrap() > 0.0)
            .collect();
        assert_eq!(kept.len(), 3, "{trace}");
        let total: f64 = kept.iter().map(|c| c["final"].as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        let chosen = candidates
            .iter()
            .find(|c| c["token"] == entry["token"])
            .expect("the chosen token is a candidate");
        assert!(chosen["final"].as_f64().unwrap() > 0.0);
        assert_eq!(
            chosen["final"].as_f64().unwrap(),
            trace["selected_probability"].as_f64().unwrap()
        );
    }
    // The same request without the trace chooses the same tokens (tracing changes nothing).
    let mut plain = request.clone();
    plain.as_object_mut().unwrap().remove("kindle_trace");
    let (_, untraced) = server.post("/v1/chat/completions", &plain).await;
    assert_eq!(
        untraced["choices"][0]["message"]["content"],
        body["choices"][0]["message"]["content"]
    );

    // Completions, streamed: a one-element kindle_trace array beside each chunk's logprobs.
    let events = server
        .stream(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": 3, "temperature": 0, "logprobs": 1,
                    "stream": true, "ignore_eos": true, "kindle_trace": true}),
        )
        .await;
    let traces: Vec<Vec<Value>> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|c| {
            c["choices"][0]["logprobs"]["kindle_trace"]
                .as_array()
                .cloned()
        })
        .collect();
    assert_eq!(traces.len(), 3);
    for trace in &traces {
        assert_eq!(trace.len(), 1);
        // Greedy: the last stage puts all the mass on the argmax.
        let stages = trace[0]["stages"].as_array().unwrap();
        assert_eq!(stages.last().unwrap()["name"], "greedy", "{trace:?}");
        assert_eq!(trace[0]["rank"], 1);
        assert_eq!(trace[0]["selected_probability"], 1.0);
    }

    // The trace rides in the logprobs: without them it is a named error.
    let (status, body) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}], "kindle_trace": true}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "kindle_trace", "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_is_removed_and_its_cache_freed() {
    let server = TestServer::start(config(), Duration::from_millis(20)).await;
    // Streamed: read two chunks, then drop the response.
    let mut response = server
        .client
        .post("/v1/completions")
        .header("content-type", "application/json")
        .body(
            json!({"prompt": "go on", "max_tokens": 200, "ignore_eos": true, "stream": true})
                .to_string(),
        )
        .send()
        .await;
    for _ in 0..2 {
        assert!(response.chunk().await.is_some());
    }
    assert_eq!(server.metric("kindle_sequences_running").await, 1.0);
    drop(response);
    // Not streamed: the client gives up after 150 ms.
    let request = server
        .client
        .post("/v1/completions")
        .header("content-type", "application/json")
        .body(json!({"prompt": "go on", "max_tokens": 200, "ignore_eos": true}).to_string())
        .send();
    let result = tokio::time::timeout(Duration::from_millis(150), request).await;
    assert!(result.is_err(), "the request should time out on the client");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let running = server.metric("kindle_sequences_running").await;
        let cancelled = server.metric("kindle_sequences_cancelled_total").await;
        if running == 0.0 && cancelled >= 2.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "running {running}, cancelled {cancelled}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both left long before 200 tokens (20 ms each) were generated.
    let generated = server.metric("kindle_generated_tokens_total").await;
    assert!(generated < 100.0, "{generated}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_refuses_new_requests_and_finishes_running_ones() {
    let server = TestServer::start(config(), Duration::from_millis(10)).await;
    let client = server.client.clone();
    let path = "/v1/completions";
    let running = tokio::spawn(async move {
        let response = client
            .post(path)
            .header("content-type", "application/json")
            .body(json!({"prompt": "long one", "max_tokens": 40, "ignore_eos": true}).to_string())
            .send()
            .await;
        let status = response.status;
        let body: Value = serde_json::from_str(&response.text().await).unwrap();
        (status, body)
    });
    while server.metric("kindle_sequences_running").await < 1.0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut server = server;
    server.begin_stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, health) = server.get("/health").await;
    assert_eq!(status, 503, "{health}");
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "late", "max_tokens": 2}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "draining");
    let (status, body) = running.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 40);
    server.join().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_endpoints() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let (status, health) = server.get("/health").await;
    assert_eq!((status, health.as_str()), (200, r#"{"status":"ok"}"#));
    let (status, models) = server.get("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "toy");
    assert_eq!(models["data"][0]["object"], "model");
    let (status, _) = server.get("/v1/models/toy").await;
    assert_eq!(status, 200);
    let (_, tokens) = server
        .post("/tokenize", &json!({"content": "hi you"}))
        .await;
    assert_eq!(tokens["tokens"], json!([8, 9, 27, 25, 15, 21]));
    let (_, text) = server
        .post("/detokenize", &json!({"tokens": [8, 9, 27, 25, 15, 21]}))
        .await;
    assert_eq!(text["content"], "hi you");
    server
        .post("/v1/completions", &json!({"prompt": "ab", "max_tokens": 3}))
        .await;
    server.settle("kindle_sequences_running", 0.0).await;
    let (_, metrics) = server.get("/metrics").await;
    for name in [
        "kindle_requests_total{status=\"200\"}",
        "kindle_sequences_running 0",
        "kindle_sequences_queued 0",
        "kindle_prompt_tokens_total 2",
        "kindle_generated_tokens_total",
        "kindle_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
        "kindle_time_per_output_token_seconds_count",
    ] {
        assert!(metrics.contains(name), "{name} missing from {metrics}");
    }
    server.stop().await;
}

/// Wait until the engine has given back every block (it does right after the last answer).
async fn until_no_block_is_used(server: &TestServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.metric("kindle_kv_blocks_used").await > 0.0 {
        assert!(std::time::Instant::now() < deadline, "blocks still held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_reuses_the_blocks_of_an_earlier_prompt() {
    let mut cfg = config();
    cfg.block_size = 4;
    let server = TestServer::start(cfg, Duration::ZERO).await;
    assert_eq!(server.metric("kindle_kv_block_size_tokens").await, 4.0);
    // 256-token context x 4 parallel sequences, in blocks of 4.
    assert_eq!(server.metric("kindle_kv_blocks_total").await, 256.0);
    let system = "you are a helpful assistant. "; // 29 tokens: 7 whole blocks
    for (i, question) in ["what is up", "where is it", "who are you"]
        .iter()
        .enumerate()
    {
        let prompt = format!("{system}{question}");
        let (status, body) = server
            .post(
                "/v1/completions",
                &json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let (expected, _, _) = alone(&prompt_ids(&prompt), 8, greedy(), &[]);
        assert_eq!(body["choices"][0]["text"], expected.as_str(), "{prompt}");
        assert_eq!(
            server.metric("kindle_prefix_cache_hits_total").await,
            i as f64
        );
        until_no_block_is_used(&server).await;
        // The finished sequence's full blocks stay cached; the rest are free again.
        assert!(server.metric("kindle_kv_blocks_cached").await >= 7.0);
    }
    // Each later prompt skipped the system text's 7 whole blocks ("wh" continues it too).
    let saved = server.metric("kindle_prefix_cache_hit_tokens_total").await;
    assert!(saved >= 2.0 * 28.0, "{saved}");
    let blocks = ["used", "cached", "free"];
    let mut sum = 0.0;
    for b in blocks {
        sum += server.metric(&format!("kindle_kv_blocks_{b}")).await;
    }
    assert_eq!(sum, 256.0, "used + cached + free");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_prefix_cache_nothing_is_reused() {
    let mut cfg = config();
    cfg.block_size = 4;
    cfg.prefix_cache = false;
    let server = TestServer::start(cfg, Duration::ZERO).await;
    for _ in 0..2 {
        let (status, body) = server
            .post(
                "/v1/completions",
                &json!({"prompt": "the same prompt twice", "max_tokens": 4, "temperature": 0}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    until_no_block_is_used(&server).await;
    assert_eq!(server.metric("kindle_prefix_cache_hits_total").await, 0.0);
    assert_eq!(server.metric("kindle_kv_blocks_cached").await, 0.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_room_in_a_small_pool() {
    // A pool of one context (256 tokens): each request reserves its prompt plus 200 tokens,
    // so only one runs at a time although four slots are free; the others wait, then run,
    // and each gets what it gets alone.
    let mut cfg = config();
    cfg.kv_pool_tokens = Some(256);
    cfg.prefix_cache = false;
    let server = TestServer::start(cfg, Duration::from_millis(1)).await;
    let prompts = ["one tale", "two tales", "three tales", "four tales"];
    let mut tasks = Vec::new();
    for prompt in prompts {
        let client = server.client.clone();
        tasks.push(tokio::spawn(async move {
            let body = json!({"prompt": prompt, "max_tokens": 200, "temperature": 0});
            let reply = client
                .post("/v1/completions")
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            let status = reply.status;
            let body: Value = serde_json::from_str(&reply.text().await).unwrap();
            (prompt, status, body)
        }));
    }
    let mut running_max = 0.0f64;
    while !tasks.iter().all(|t| t.is_finished()) {
        running_max = running_max.max(server.metric("kindle_sequences_running").await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(running_max, 1.0, "the pool holds one request at a time");
    for task in tasks {
        let (prompt, status, body) = task.await.unwrap();
        assert_eq!(status, 200, "{prompt}: {body}");
        let (expected, _, _) = alone(&prompt_ids(prompt), 200, greedy(), &[]);
        assert_eq!(body["choices"][0]["text"], expected.as_str(), "{prompt}");
    }
    until_no_block_is_used(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_smaller_than_the_context_is_refused() {
    let mut cfg = config();
    cfg.kv_pool_tokens = Some(100);
    let error = cfg.validate().unwrap_err().to_string();
    assert!(error.contains("--kv-pool"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samplers_sets_the_order_of_the_chain() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let prompt = prompt_ids("a tale");
    // top_k 1 with the temperature stage left out keeps only the argmax: greedy, whatever
    // the temperature says; as an array of names or a one-letter string.
    let (greedy_text, _, _) = alone(&prompt, 12, greedy(), &[]);
    for samplers in [json!(["top_k"]), json!("km"), json!("top_k;min_p")] {
        let (status, body) = server
            .post(
                "/v1/completions",
                &json!({"prompt": "a tale", "max_tokens": 12, "temperature": 1.5,
                        "top_k": 1, "seed": 3, "samplers": samplers}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["choices"][0]["text"],
            greedy_text.as_str(),
            "{samplers}"
        );
    }
    // The order matters: the same settings with the default chain sample at temperature 1
    // after top_k 40; with only `temperature` in the chain, top_k is not applied.
    let mut only_temperature = seeded(5);
    only_temperature.top_k = 1;
    only_temperature.order = vec![kindle_sampling::Stage::Temperature];
    let (expected, _, _) = alone(&prompt, 12, only_temperature, &[]);
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "a tale", "max_tokens": 12, "temperature": 1, "top_k": 1,
                    "seed": 5, "samplers": ["temperature"]}),
        )
        .await;
    assert_eq!(body["choices"][0]["text"], expected.as_str());
    assert_ne!(expected, greedy_text, "the seed must leave the greedy path");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_prompts_are_prefilled_in_chunks_while_streams_keep_going() {
    let mut cfg = config();
    cfg.step_tokens = 8;
    let server = TestServer::start(cfg, Duration::from_millis(4)).await;
    // A stream that runs to its 80-token limit.
    let stream_prompt = (0..60)
        .map(|i| format!("once {}", "abcdefghij".chars().nth(i % 10).unwrap()).repeat(1 + i / 10))
        .find(|p| alone(&prompt_ids(p), 80, greedy(), &[]).1 == "length")
        .expect("a prompt that runs to the limit");
    let body = json!({"prompt": stream_prompt, "max_tokens": 80, "temperature": 0, "stream": true});
    let mut reply = server
        .client
        .post("/v1/completions")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    assert_eq!(reply.status, 200);
    // Read the stream on its own task, noting when each event came.
    let reader = tokio::spawn(async move {
        let mut raw = String::new();
        let mut times = Vec::new();
        while let Some(chunk) = reply.chunk().await {
            let text = String::from_utf8(chunk.to_vec()).unwrap();
            for _ in 0..text.matches("data: ").count() {
                times.push(std::time::Instant::now());
            }
            raw.push_str(&text);
        }
        (raw, times)
    });
    tokio::time::sleep(Duration::from_millis(60)).await;

    // A 120-token prompt arrives while the stream decodes.
    let long: String = "the quick brown fox jumps over the lazy dog. "
        .repeat(3)
        .chars()
        .take(120)
        .collect();
    let started = std::time::Instant::now();
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": long, "max_tokens": 4, "temperature": 0}),
        )
        .await;
    let ended = std::time::Instant::now();
    assert_eq!(status, 200, "{body}");
    let (expected, _, _) = alone(&prompt_ids(&long), 4, greedy(), &[]);
    assert_eq!(body["choices"][0]["text"], expected.as_str());

    let (raw, times) = reader.await.unwrap();
    let streamed: String = raw
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();
    let (stream_expected, _, _) = alone(&prompt_ids(&stream_prompt), 80, greedy(), &[]);
    assert_eq!(streamed, stream_expected);

    // No pass fed more than the budget of prompt tokens plus the stream's one token ...
    let largest = server.model.largest_rows.load(Ordering::SeqCst);
    assert!(largest <= 8 + 1, "a pass of {largest} tokens");
    // ... so the 120-token prompt took at least 15 passes, in 14 chunks before its last ...
    assert!(server.metric("kindle_prefill_chunks_total").await >= 14.0);
    // ... during which the stream kept getting a token a step.
    let during = times
        .iter()
        .filter(|t| **t > started && **t < ended)
        .count();
    assert!(
        during >= 14,
        "the stream got {during} tokens while the prompt was read"
    );
    server.stop().await;
}
