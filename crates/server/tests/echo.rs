//! `echo` on `/v1/completions` with the fake model: the prompt repeated before the
//! completion, its tokens scored (the first `null`) as the model scores them, with no new
//! tokens (lm-eval-harness's log-likelihood request), in chunks for a long prompt, streamed.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Letters, TestServer, alone, config, greedy};
use serde_json::{Value, json};

fn prompt_ids(text: &str) -> Vec<u32> {
    Letters::ids(text).unwrap()
}

/// The log-softmax of the fake model's logits after `history` at `id`, and its `top` most
/// likely `(token text, logprob)`, as `echo` with `logprobs` must report them.
fn expected_score(history: &[u32], id: u32, top: usize) -> (f64, Vec<(String, f64)>) {
    let row = common::HashModel::row(history);
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(max)
        + row
            .iter()
            .map(|&x| (f64::from(x) - f64::from(max)).exp())
            .sum::<f64>()
            .ln();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let tops = order[..top]
        .iter()
        .map(|&j| {
            let text = kindle_server::TextCodec::token_text(&Letters, j as u32);
            (text, f64::from(row[j]) - lse)
        })
        .collect();
    (f64::from(row[id as usize]) - lse, tops)
}

/// Each prompt token's reported logprob and alternatives against the model's (the first
/// token's `null`), and the text offsets running over the tokens' texts.
fn check_prompt_logprobs(lp: &Value, prompt: &str, top: usize) {
    let ids = prompt_ids(prompt);
    assert_eq!(lp["token_logprobs"][0], Value::Null, "{lp}");
    assert_eq!(lp["top_logprobs"][0], Value::Null, "{lp}");
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(
            lp["tokens"][i].as_str().unwrap(),
            kindle_server::TextCodec::token_text(&Letters, id)
        );
        // One character a token.
        assert_eq!(lp["text_offset"][i], i, "{lp}");
        if i == 0 {
            continue;
        }
        let (want, tops) = expected_score(&ids[..i], id, top);
        let got = lp["token_logprobs"][i].as_f64().unwrap();
        assert!((got - want).abs() < 1e-5, "token {i}: {got} against {want}");
        let reported = lp["top_logprobs"][i].as_object().unwrap();
        // The alternatives, and the token itself where it is not among them (OpenAI: "up to
        // logprobs+1 elements").
        let text = kindle_server::TextCodec::token_text(&Letters, id);
        let among = tops.iter().any(|(t, _)| *t == text);
        assert_eq!(reported.len(), top + usize::from(!among), "{lp}");
        let got = reported[&text].as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-5,
            "token {i} itself: {got} against {want}"
        );
        for (text, want) in tops {
            let got = reported[&text].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-5,
                "token {i} top {text:?}: {got} against {want}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_repeats_the_prompt_and_scores_its_tokens() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let prompt = "the cat sat";
    let n = prompt.len();
    let plain = json!({"prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 2,
                       "ignore_eos": true});
    let (_, alone_body) = server.post("/v1/completions", &plain).await;
    let mut echoed = plain.clone();
    echoed["echo"] = json!(true);
    let (status, body) = server.post("/v1/completions", &echoed).await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    let completion = alone_body["choices"][0]["text"].as_str().unwrap();
    assert_eq!(choice["text"], format!("{prompt}{completion}"));
    let lp = &choice["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), n + 5, "{lp}");
    check_prompt_logprobs(lp, prompt, 2);
    // The completion's logprobs are the request's without echo, offsets after the prompt.
    let gen_lp = &alone_body["choices"][0]["logprobs"];
    for key in ["tokens", "token_logprobs", "top_logprobs"] {
        assert_eq!(
            lp[key].as_array().unwrap()[n..],
            gen_lp[key].as_array().unwrap()[..]
        );
    }
    assert_eq!(lp["text_offset"][n], n);
    assert_eq!(body["usage"]["prompt_tokens"], n);
    assert_eq!(body["usage"]["completion_tokens"], 5);
    // The echoed prompt is never taken from the prefix cache (its logits are needed), so it
    // scores the same a second time.
    let (_, again) = server.post("/v1/completions", &echoed).await;
    assert_eq!(again["choices"][0], body["choices"][0]);

    // Without logprobs, the text alone; token-id prompts echo their decoded text.
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt_ids(prompt), "max_tokens": 5, "temperature": 0,
                    "echo": true, "ignore_eos": true, "n": 2}),
        )
        .await;
    for c in 0..2 {
        assert_eq!(body["choices"][c]["text"], format!("{prompt}{completion}"));
        assert_eq!(body["choices"][c]["logprobs"], Value::Null);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_with_no_tokens_scores_the_prompt_alone() {
    // As evaluation harnesses ask (lm-eval's loglikelihood): `max_tokens` 0 with `echo`.
    let server = TestServer::start(config(), Duration::ZERO).await;
    let prompt = "a dog ran far";
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], prompt);
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 0);
    let lp = &choice["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), prompt.len(), "{lp}");
    check_prompt_logprobs(lp, prompt, 1);
    // A one-token prompt has only its `null`.
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "a", "max_tokens": 0, "echo": true, "logprobs": 0}),
        )
        .await;
    let lp = &body["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"], json!(["a"]));
    assert_eq!(lp["token_logprobs"], json!([null]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_echoed_prompt_is_scored_in_chunks_and_streams_as_it_answers() {
    let mut cfg = config();
    cfg.step_tokens = 8;
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let prompt: String = "the quick brown fox jumps over the lazy dog. "
        .repeat(2)
        .chars()
        .take(70)
        .collect();
    let request = json!({"prompt": prompt, "max_tokens": 4, "temperature": 0, "echo": true,
                         "logprobs": 3, "ignore_eos": true});
    let passes = server.model.all_passes.load(Ordering::SeqCst);
    let (status, body) = server.post("/v1/completions", &request).await;
    assert_eq!(status, 200, "{body}");
    // 69 tokens scored 8 at a time: 9 passes returning every position's logits.
    assert_eq!(server.model.all_passes.load(Ordering::SeqCst) - passes, 9);
    let lp = &body["choices"][0]["logprobs"];
    check_prompt_logprobs(lp, &prompt, 3);

    // Streamed: the prompt's text opens the stream, its scored tokens ride on the first
    // chunks, and the chunks add up to the plain answer.
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let events = server.stream("/v1/completions", &streamed).await;
    let chunks: Vec<Value> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["text"], prompt.as_str());
    let mut text = String::new();
    let mut joined =
        json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    for chunk in &chunks {
        let choice = &chunk["choices"][0];
        text.push_str(choice["text"].as_str().unwrap());
        if choice["logprobs"].is_object() {
            for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
                let more = choice["logprobs"][key].as_array().unwrap().clone();
                joined[key].as_array_mut().unwrap().extend(more);
            }
        }
    }
    assert_eq!(text, body["choices"][0]["text"].as_str().unwrap());
    for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(joined[key], lp[key], "{key}");
    }

    // Streamed without logprobs: the prompt's text first, then the completion.
    let events = server
        .stream(
            "/v1/completions",
            &json!({"prompt": "the cat", "max_tokens": 3, "temperature": 0, "echo": true,
                    "stream": true}),
        )
        .await;
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["choices"][0]["text"], "the cat");
    let (completion, ..) = alone(&prompt_ids("the cat"), 3, greedy(), &[]);
    let text: String = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(text, format!("the cat{completion}"));
    server.stop().await;
}

/// The rank the fake model gives `id` after `history`: 1 + the tokens strictly more likely.
fn expected_rank(history: &[u32], id: u32) -> u64 {
    let row = common::HashModel::row(history);
    1 + row.iter().filter(|&&x| x > row[id as usize]).count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_logprobs_score_the_prompt_of_both_endpoints() {
    let server = TestServer::start(config(), Duration::ZERO).await;
    let prompt = "a cat sat";
    let ids = prompt_ids(prompt);
    // vLLM's shape: `null`, then per token a map from ids to {logprob, rank, decoded_token}
    // with the prompt's token and the top ones.
    let check = |lp: &Value, ids: &[u32], top: usize| {
        let list = lp.as_array().unwrap();
        assert_eq!(list.len(), ids.len(), "{lp}");
        assert!(list[0].is_null());
        for i in 1..ids.len() {
            let map = list[i].as_object().unwrap();
            let own = &map[&ids[i].to_string()];
            let (want, tops) = expected_score(&ids[..i], ids[i], top);
            assert!(
                (own["logprob"].as_f64().unwrap() - want).abs() < 1e-5,
                "{own}"
            );
            assert_eq!(own["rank"], expected_rank(&ids[..i], ids[i]));
            assert_eq!(
                own["decoded_token"],
                kindle_server::TextCodec::token_text(&Letters, ids[i])
            );
            assert!(map.len() == top || map.len() == top + 1, "{map:?}");
            for (text, want) in tops {
                let found = map
                    .values()
                    .find(|e| e["decoded_token"] == text.as_str())
                    .unwrap_or_else(|| panic!("{text:?} in {map:?}"));
                assert!((found["logprob"].as_f64().unwrap() - want).abs() < 1e-5);
            }
        }
    };
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    check(&body["choices"][0]["prompt_logprobs"], &ids, 2);
    assert!(body["choices"][0]["logprobs"].is_null());

    // Chat: the rendered conversation's tokens, once beside the choices.
    let (status, body) = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                    "temperature": 0, "prompt_logprobs": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    check(
        &body["prompt_logprobs"],
        &prompt_ids("user:hi\nassistant:"),
        1,
    );

    // With echo and logprobs too, the echoed tokens keep `logprobs`' alternatives.
    let (_, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 1,
                    "prompt_logprobs": 3}),
        )
        .await;
    let lp = &body["choices"][0]["logprobs"];
    assert_eq!(lp["top_logprobs"][1].as_object().unwrap().len(), 1, "{lp}");
    check(&body["choices"][0]["prompt_logprobs"], &ids, 3);

    // Not streamed.
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "stream": true, "prompt_logprobs": 1}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt_logprobs");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_token_in_an_echoed_prompt_takes_no_room_in_the_text() {
    // `<eos>` decodes to nothing (the text leaves control tokens out): its offset is where the
    // next token starts, and the offsets stay within the text (they ran 5 past it before).
    let server = TestServer::start(config(), Duration::ZERO).await;
    let body = json!({"prompt": [common::EOS, 1, 2, common::EOS, 3], "max_tokens": 0,
                      "echo": true, "logprobs": 1});
    let (status, body) = server.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], "abc");
    let lp = &choice["logprobs"];
    assert_eq!(
        lp["tokens"],
        json!(["<eos>", "a", "b", "<eos>", "c"]),
        "{lp}"
    );
    assert_eq!(lp["text_offset"], json!([0, 0, 1, 2, 2]), "{lp}");
    server.stop().await;
}
