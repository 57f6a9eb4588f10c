//! `chat_template_kwargs`, `add_generation_prompt` and `continue_final_message` on chat
//! completions with the fake codec: a request's extra template variables reach the template
//! (the fake's `style` after `assistant:`), and the conversation ends where it asks.

mod common;

use std::time::Duration;

use common::{TestServer, config};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_template_kwargs_reach_the_template() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let ask = |vars: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                              "temperature": 0});
        if !vars.is_null() {
            body["chat_template_kwargs"] = vars;
        }
        body
    };
    let (status, plain) = server.post("/v1/chat/completions", &ask(Value::Null)).await;
    assert_eq!(status, 200, "{plain}");
    // "user:hi\nassistant:" against "user:hi\nassistant:terse ".
    assert_eq!(plain["usage"]["prompt_tokens"], 18);
    let (status, styled) = server
        .post("/v1/chat/completions", &ask(json!({"style": "terse"})))
        .await;
    assert_eq!(status, 200, "{styled}");
    assert_eq!(styled["usage"]["prompt_tokens"], 24);
    let (_, same) = server.post("/v1/chat/completions", &ask(json!({}))).await;
    assert_eq!(same["usage"]["prompt_tokens"], 18);
    server.stop().await;
}

/// `continue_final_message` continues the last message where its content ends (a prefilled
/// reply), as the same text sent to /v1/completions does; `add_generation_prompt: false`
/// closes the conversation without opening a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_message_is_continued_as_a_prefilled_reply() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let messages = json!([{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "ab"}]);
    let ask = |extra: Value| {
        let mut body = json!({"messages": messages, "max_tokens": 6, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let (status, continued) = server
        .post(
            "/v1/chat/completions",
            &ask(json!({"continue_final_message": true, "add_generation_prompt": false})),
        )
        .await;
    assert_eq!(status, 200, "{continued}");
    // "user:hi\nassistant:ab": the content's line left open.
    assert_eq!(continued["usage"]["prompt_tokens"], 20);
    let (status, completed) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "user:hi\nassistant:ab", "max_tokens": 6, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(
        continued["choices"][0]["message"]["content"],
        completed["choices"][0]["text"]
    );
    // Without the explicit `add_generation_prompt: false` too.
    let (_, alone) = server
        .post(
            "/v1/chat/completions",
            &ask(json!({"continue_final_message": true})),
        )
        .await;
    assert_eq!(alone["usage"]["prompt_tokens"], 20, "{alone}");
    // Closed: "user:hi\nassistant:ab\n"; the default adds "assistant:".
    let (_, closed) = server
        .post(
            "/v1/chat/completions",
            &ask(json!({"add_generation_prompt": false})),
        )
        .await;
    assert_eq!(closed["usage"]["prompt_tokens"], 21, "{closed}");
    let (_, opened) = server.post("/v1/chat/completions", &ask(json!({}))).await;
    assert_eq!(opened["usage"]["prompt_tokens"], 31, "{opened}");
    // Refused, each naming its field.
    for (url, body, param) in [
        (
            "/v1/chat/completions",
            ask(json!({"continue_final_message": true, "add_generation_prompt": true})),
            "continue_final_message",
        ),
        (
            "/v1/chat/completions",
            ask(json!({"add_generation_prompt": "no"})),
            "add_generation_prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": "ab", "continue_final_message": true}),
            "continue_final_message",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": " "}],
                   "continue_final_message": true}),
            "messages",
        ),
    ] {
        let (status, error) = server.post(url, &body).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    server.stop().await;
}

/// `documents` reach a retrieval template (the fake's `doc:` lines); bad ones are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_reach_the_template() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let ask = |documents: Value| {
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
               "temperature": 0, "documents": documents})
    };
    let (status, reply) = server
        .post(
            "/v1/chat/completions",
            &ask(json!([{"title": "a", "text": "paris"}, {"text": "rome"}])),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    // "doc:paris\ndoc:rome\n" before "user:hi\nassistant:".
    assert_eq!(reply["usage"]["prompt_tokens"], 19 + 18);
    for (url, body, param) in [
        ("/v1/chat/completions", ask(json!("paris")), "documents"),
        (
            "/v1/chat/completions",
            ask(json!([{"text": "a"}, 3])),
            "documents[1]",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "documents": []}),
            "documents",
        ),
    ] {
        let (status, error) = server.post(url, &body).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    server.stop().await;
}
