//! Prompt-lookup drafting per request (`kindle_lookup_ngram`, `kindle_draft_max`,
//! `kindle_draft_min`): a greedy
//! request gives what it gives without drafting (tokens, finish reason, logprobs, usage),
//! beside other requests in the same batches; bad settings are clear 400s.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{TestServer, config, with};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafting_gives_the_output_of_the_request_without_it() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let plain = json!({
        "model": "toy", "prompt": "abcab abcab abcab abc", "max_tokens": 150,
        "temperature": 0, "logprobs": 2,
    });
    let drafting = with(
        plain.clone(),
        json!({"kindle_lookup_ngram": 3, "kindle_draft_max": 4}),
    );
    let other = json!({"model": "toy", "prompt": "the cat", "max_tokens": 60, "temperature": 0});
    let (a, b, c) = tokio::join!(
        server.post("/v1/completions", &plain),
        server.post("/v1/completions", &drafting),
        server.post("/v1/completions", &other),
    );
    assert_eq!((a.0, b.0, c.0), (200, 200, 200), "{} {}", a.1, b.1);
    assert_eq!(a.1["choices"], b.1["choices"]);
    assert_eq!(a.1["usage"], b.1["usage"]);
    assert!(
        server.model.all_passes.load(Ordering::SeqCst) > 0,
        "no draft was verified: the test shows nothing"
    );
    // Alone too, and with a chat request.
    let (status, again) = server.post("/v1/completions", &drafting).await;
    assert_eq!(status, 200);
    assert_eq!(a.1["choices"], again["choices"]);
    let chat = json!({
        "model": "toy", "messages": [{"role": "user", "content": "abcab abcab abcab"}],
        "max_tokens": 80, "temperature": 0,
    });
    // Single-token lookup, eight tokens a draft, then only drafts of three tokens or more
    // verified (`kindle_draft_min`): the same output, fewer passes (the short drafts dropped),
    // every verified draft at least three tokens long.
    let metric = |name| server.metric(name);
    let (passes, tokens) = (
        metric("kindle_draft_passes_total").await,
        metric("kindle_draft_tokens_total").await,
    );
    let probe = with(
        plain.clone(),
        json!({"kindle_lookup_ngram": 1, "kindle_draft_max": 8}),
    );
    let (status, probed) = server.post("/v1/completions", &probe).await;
    assert_eq!(status, 200, "{probed}");
    assert_eq!(a.1["choices"], probed["choices"]);
    let p0 = metric("kindle_draft_passes_total").await - passes;
    let t0 = metric("kindle_draft_tokens_total").await - tokens;
    let (passes, tokens) = (
        metric("kindle_draft_passes_total").await,
        metric("kindle_draft_tokens_total").await,
    );
    let long = with(probe.clone(), json!({"kindle_draft_min": 3}));
    let (status, long) = server.post("/v1/completions", &long).await;
    assert_eq!(status, 200, "{long}");
    assert_eq!(a.1["choices"], long["choices"]);
    let p = metric("kindle_draft_passes_total").await - passes;
    let t = metric("kindle_draft_tokens_total").await - tokens;
    let dropped = metric("kindle_draft_short_total").await;
    assert!(
        p > 0.0 && p < p0 && t >= 3.0 * p && p + dropped == p0,
        "{t} tokens in {p} passes and {dropped} dropped, without the minimum {t0} in {p0}"
    );
    let (s1, plain_chat) = server.post("/v1/chat/completions", &chat).await;
    let chat = with(chat, json!({"kindle_lookup_ngram": 2}));
    let (s2, drafted_chat) = server.post("/v1/chat/completions", &chat).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(plain_chat["choices"], drafted_chat["choices"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_drafting_settings_are_clear_errors() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let base = json!({"model": "toy", "prompt": "abc", "max_tokens": 4});
    for (extra, field, says) in [
        (
            json!({"kindle_lookup_ngram": 0}),
            "kindle_lookup_ngram",
            "between 1 and 16",
        ),
        (
            json!({"kindle_lookup_ngram": "3"}),
            "kindle_lookup_ngram",
            "integer",
        ),
        (
            json!({"kindle_lookup_ngram": 3, "kindle_draft_max": 15}),
            "kindle_draft_max",
            "between 0 and 14",
        ),
        (
            json!({"kindle_draft_max": 4}),
            "kindle_draft_max",
            "needs a drafter",
        ),
        (
            json!({"kindle_draft_p_min": 0.5}),
            "kindle_draft_p_min",
            "this server has none",
        ),
        (
            json!({"kindle_draft_min": 2}),
            "kindle_draft_min",
            "needs a drafter",
        ),
        (
            json!({"kindle_lookup_ngram": 3, "kindle_trace": true, "logprobs": 1}),
            "kindle_lookup_ngram",
            "kindle_trace",
        ),
    ] {
        let (status, body) = server
            .post("/v1/completions", &with(base.clone(), extra.clone()))
            .await;
        assert_eq!(status, 400, "{extra}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(body["error"]["param"], field, "{extra}: {body}");
        assert!(message.contains(says), "{extra}: {message}");
    }
    server.stop().await;
}
