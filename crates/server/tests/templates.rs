//! `chat_template_kwargs` on chat completions with the fake codec: a request's extra
//! template variables reach the template (the fake's `style` after `assistant:`).

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
