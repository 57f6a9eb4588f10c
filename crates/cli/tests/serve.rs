//! `kindle serve` on the real model, through its HTTP API: greedy requests sent together
//! (continuously batched) give what each gives alone, and what `kindle generate` gives; SIGTERM
//! drains and exits 0.

mod common;

use std::process::Command;

use common::server::{Served, generated_text};
use serde_json::{Value, json};

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "The three primary colors are",
];
const MAX_TOKENS: usize = 24;

/// `kindle serve` on `model` with the chat template `source`, written as `name` in `dir`.
fn serve_with_template(
    model: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    source: &str,
    context: &str,
) -> Served {
    let path = dir.join(name);
    std::fs::write(&path, source).expect("writing the template");
    let template = path.to_str().unwrap();
    Served::start(
        model,
        &["-c", context, "-t", "2", "--chat-template-file", template],
    )
}

/// The first tool call's deltas in a streamed chat reply to `body`, and the reply's chunks.
fn streamed_call(server: &Served, body: &Value) -> (Vec<Value>, Vec<Value>) {
    let (status, events) = server.post_stream("/v1/chat/completions", body);
    assert_eq!(status, 200);
    let chunks: Vec<Value> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let pieces = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .map(|calls| calls[0].clone())
        .collect();
    (pieces, chunks)
}

/// Joined arguments of a call's streamed deltas.
fn joined_arguments(pieces: &[Value]) -> String {
    pieces
        .iter()
        .map(|d| d["function"]["arguments"].as_str().unwrap())
        .collect()
}

/// `kindle generate`'s greedy text for `prompt` (`--chat`: as a user message).
fn generate(prompt: &str, chat: bool) -> String {
    let model = common::model_path();
    let n = MAX_TOKENS.to_string();
    let mut args = vec!["-n", &n, "-m", model.to_str().unwrap()];
    if chat {
        args.push("--chat");
    }
    generated_text(&args, prompt)
}

fn completion(server: &Served, prompt: &str) -> String {
    let (status, body) = server.post(
        "/v1/completions",
        &json!({"model": "kindle", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    body["choices"][0]["text"]
        .as_str()
        .expect("a text")
        .to_string()
}

fn chat(server: &Served, message: &str) -> String {
    let (status, body) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": message}],
                "max_tokens": MAX_TOKENS, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    body["choices"][0]["message"]["content"]
        .as_str()
        .expect("a text")
        .to_string()
}

#[test]
fn concurrent_greedy_requests_equal_single_runs_and_kindle_generate() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["--parallel", "4", "-c", "512", "-t", "2"]);
    let (status, health) = server.get("/health");
    assert_eq!(status, 200, "{health}");

    // One at a time.
    let alone: Vec<String> = PROMPTS.iter().map(|p| completion(&server, p)).collect();
    let chat_alone = chat(&server, "What is the capital of France?");

    // All at once (plus a chat request), continuously batched.
    let together: Vec<String> = std::thread::scope(|scope| {
        let chat_task = scope.spawn(|| chat(&server, "What is the capital of France?"));
        let tasks: Vec<_> = PROMPTS
            .iter()
            .map(|p| {
                let server = &server;
                scope.spawn(move || completion(server, p))
            })
            .collect();
        let texts = tasks
            .into_iter()
            .map(|t| t.join().expect("a request thread"))
            .collect();
        assert_eq!(chat_task.join().expect("the chat thread"), chat_alone);
        texts
    });
    let metric = |name: &str| -> f64 {
        let (_, metrics) = server.get("/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    // Batching happened: fewer forward passes than tokens fed one sequence at a time.
    assert!(metric("kindle_engine_step_rows_total") > metric("kindle_engine_steps_total"));
    // Where the engine's time went: the passes, then sampling (on the two threads).
    let (forward, completion) = (
        metric("kindle_engine_forward_seconds_total"),
        metric("kindle_engine_completion_seconds_total"),
    );
    assert!(
        forward > completion && completion > 0.0,
        "{forward} s forward, {completion} s completing"
    );
    // The engine updates its gauges at the end of the step in which it answered, which may
    // come after the answer reached the client: wait for it (up to 5 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while metric("kindle_sequences_running") != 0.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(metric("kindle_sequences_running"), 0.0);

    for (i, prompt) in PROMPTS.iter().enumerate() {
        assert_eq!(together[i], alone[i], "{prompt:?}: batched vs alone");
        assert_eq!(
            alone[i],
            generate(prompt, false),
            "{prompt:?}: server vs kindle generate"
        );
    }
    assert_eq!(
        chat_alone,
        generate("What is the capital of France?", true),
        "chat vs kindle generate --chat"
    );
    assert!(alone[0].contains("Paris"), "{:?}", alone[0]);

    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}

#[test]
fn structured_output_fields_constrain_the_answer() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["--parallel", "2", "-c", "512", "-t", "2"]);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let ask = |extra: serde_json::Value| {
        let mut body = serde_json::json!({
            "messages": [{"role": "user", "content": "Describe a person."}],
            "max_tokens": 200,
            "temperature": 0.8,
            "seed": 7,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        server.post("/v1/chat/completions", &body)
    };
    let (status, out) = ask(
        serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}}),
    );
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["message"]["content"].as_str().unwrap();
    let value: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        value["name"].is_string() && value["age"].as_u64().unwrap() <= 120,
        "{text}"
    );
    assert_eq!(out["choices"][0]["finish_reason"], "stop");

    let (status, out) = ask(serde_json::json!({"response_format": {"type": "json_object"}}));
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(text)
            .unwrap()
            .is_object(),
        "{text}"
    );

    let (status, out) = ask(serde_json::json!({"guided_choice": ["red", "green"]}));
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text == "red" || text == "green", "{text}");

    let (status, out) = ask(serde_json::json!({"guided_regex": "[a-z]{2}[0-9]"}));
    assert_eq!(status, 200, "{out}");
    let text = out["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(text.len(), 3, "{text}");

    // Constraints no text can meet: the grammar engine says so as the answer begins, a 400
    // with its words (a 500 before), and the server goes on.
    for unmet in [
        serde_json::json!({"guided_grammar": "start: start"}),
        serde_json::json!({"guided_json": {"$ref": "#"}}),
    ] {
        let (status, out) = ask(unmet.clone());
        assert_eq!(status, 400, "{unmet}: {out}");
        assert_eq!(out["error"]["type"], "invalid_request_error", "{out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains("constraint cannot be met: "), "{message}");
    }
    let (status, out) = ask(serde_json::json!({"guided_choice": ["red", "green"]}));
    assert_eq!(status, 200, "{out}");

    let (status, out) = ask(
        serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "strange"}}}}),
    );
    assert_eq!(status, 400, "{out}");
    assert_eq!(out["error"]["param"], "response_format", "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .contains("response_format"),
        "{out}"
    );
}

/// `kindle score`'s JSON for `text`: its token ids and each next token's logprob and top two.
fn score(text: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["score", "--json", "--top", "2", "-m"])
        .arg(common::model_path())
        .args(["--text", text])
        .output()
        .expect("running kindle score");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn echo_scores_the_prompt_as_kindle_score_does() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["-c", "512", "-t", "2"]);
    let text = "The capital of France is Paris, and the capital of Germany is Berlin.";
    let scored = score(text);
    let ids = scored["tokens"].as_array().expect("token ids");
    let positions = scored["positions"].as_array().expect("positions");
    // As lm-eval-harness asks a completions server for a loglikelihood: token ids, `echo`,
    // logprobs, no new tokens.
    let (status, body) = server.post(
        "/v1/completions",
        &json!({"prompt": ids, "echo": true, "max_tokens": 0, "logprobs": 2}),
    );
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], text);
    let lp = &choice["logprobs"];
    let logprobs = lp["token_logprobs"].as_array().expect("token_logprobs");
    assert_eq!(logprobs.len(), ids.len(), "{lp}");
    assert!(logprobs[0].is_null());
    let mut worst = 0f64;
    for (i, position) in positions.iter().enumerate() {
        let want = position["logprob"].as_f64().unwrap();
        let got = logprobs[i + 1].as_f64().unwrap();
        worst = worst.max((got - want).abs());
        let mut tops: Vec<f64> = lp["top_logprobs"][i + 1]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .collect();
        tops.sort_by(|a, b| b.total_cmp(a));
        let want_tops: Vec<f64> = position["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t[1].as_f64().unwrap())
            .collect();
        for (g, w) in tops.iter().zip(&want_tops) {
            worst = worst.max((g - w).abs());
        }
        // And the token itself where it is not among them (OpenAI's "up to logprobs+1").
        if tops.len() == want_tops.len() + 1 {
            worst = worst.max((tops[want_tops.len()] - got).abs());
        } else {
            assert_eq!(tops.len(), want_tops.len(), "{lp}");
        }
    }
    assert!(
        worst < 1e-6,
        "echo's prompt logprobs against kindle score: {worst}"
    );

    // With new tokens: the prompt, then what the request gives without `echo`.
    let (_, plain) = server.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}),
    );
    let (_, echoed) = server.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
                "echo": true}),
    );
    let completion = plain["choices"][0]["text"].as_str().unwrap();
    assert_eq!(
        echoed["choices"][0]["text"],
        format!("The capital of France is{completion}")
    );
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}

#[test]
fn a_reply_that_opens_with_think_has_its_reasoning_split_out() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["-c", "512", "-t", "2"]);
    // A grammar makes the small model think first, as Qwen3 and DeepSeek-R1 do.
    let request = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "What is two plus two?"}],
            "max_tokens": 60, "temperature": 0,
            "guided_regex": "<think>[a-z]{2,8}( [a-z]{2,8}){1,3}</think>\n\n[A-Z][a-z]{1,8}( [a-z]{1,8}){0,4}\\.",
        });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let (status, whole) = server.post(
        "/v1/chat/completions",
        &request(json!({"reasoning_format": "none"})),
    );
    assert_eq!(status, 200, "{whole}");
    let text = whole["choices"][0]["message"]["content"].as_str().unwrap();
    let (thought, answer) = text
        .strip_prefix("<think>")
        .and_then(|t| t.split_once("</think>"))
        .unwrap_or_else(|| panic!("the grammar's shape: {text:?}"));
    assert!(
        whole["choices"][0]["message"]
            .get("reasoning_content")
            .is_none()
    );

    // The server's default (auto): reasoning apart from the answer.
    let (status, split) = server.post("/v1/chat/completions", &request(json!({})));
    assert_eq!(status, 200, "{split}");
    let message = &split["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], thought);
    assert_eq!(message["content"], answer);

    // Streamed: the deltas' reasoning and answer add up to the same.
    let (status, events) =
        server.post_stream("/v1/chat/completions", &request(json!({"stream": true})));
    assert_eq!(status, 200);
    let (mut reasoning, mut content) = (String::new(), String::new());
    for event in events.iter().filter(|e| *e != "[DONE]") {
        let chunk: Value = serde_json::from_str(event).unwrap();
        let delta = &chunk["choices"][0]["delta"];
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        content.push_str(delta["content"].as_str().unwrap_or(""));
    }
    assert_eq!((reasoning.as_str(), content.as_str()), (thought, answer));

    // A prefilled reply (`continue_final_message`): the model goes on from the assistant's
    // words; one prefilled inside `<think>` goes on inside the reasoning.
    let prefill = |content: &str| {
        json!({"messages": [{"role": "user", "content": "What is the capital of France?"},
                            {"role": "assistant", "content": content}],
               "continue_final_message": true, "max_tokens": 6, "temperature": 0,
               "ignore_eos": true})
    };
    let (status, continued) =
        server.post("/v1/chat/completions", &prefill("The capital of France is"));
    assert_eq!(status, 200, "{continued}");
    let text = continued["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(text.starts_with(" Paris"), "{continued}");
    let (status, thinking) = server.post("/v1/chat/completions", &prefill("<think>\nLet me"));
    assert_eq!(status, 200, "{thinking}");
    let message = &thinking["choices"][0]["message"];
    assert!(message["content"].is_null(), "{thinking}");
    assert!(
        !message["reasoning_content"].as_str().unwrap().is_empty(),
        "{thinking}"
    );
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // A template whose prompt opens the reasoning (as DeepSeek-R1's does): the reply starts
    // inside it, and one cut off before `</think>` is all reasoning.
    let dir = tempfile::tempdir().expect("a scratch directory");
    let server = serve_with_template(
        &model,
        dir.path(),
        "r1.jinja",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
         {% endfor %}<|im_start|>assistant\n<think>\n",
        "512",
    );
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                      "temperature": 0, "ignore_eos": true});
    let (status, reply) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{reply}");
    let message = &reply["choices"][0]["message"];
    assert!(message["content"].is_null(), "{reply}");
    assert!(
        !message["reasoning_content"].as_str().unwrap().is_empty(),
        "{reply}"
    );
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}

/// Mistral v0.3's tool-calling turns, on SmolLM2's text: tools before the last user turn,
/// calls as a list after `[TOOL_CALLS]`, ids checked as Mistral's template checks them.
const MISTRAL_TEMPLATE: &str = "{%- for m in messages %}\
    {%- if m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS] {{ tools | tojson }}\
    [/AVAILABLE_TOOLS]{% endif %}[INST] {{ m.content }}[/INST]\
    {%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS] [\
    {%- for c in m.tool_calls %}{% if c.id is not defined or c.id | length != 9 %}\
    {{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}\
    {\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}, \
    \"id\": \"{{ c.id }}\"}{% if not loop.last %}, {% endif %}{% endfor %}]</s>\
    {%- elif m.role == 'tool' %}[TOOL_RESULTS] {\"content\": {{ m.content | tojson }}, \
    \"call_id\": \"{{ m.tool_call_id }}\"}[/TOOL_RESULTS]\
    {%- else %}{{ m.content }}</s>{% endif %}{%- endfor %}";

#[test]
fn tool_calls_come_back_as_tool_calls() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let dir = tempfile::tempdir().expect("a scratch directory");
    let server = serve_with_template(
        &model,
        dir.path(),
        "tools.jinja",
        common::server::TOOLS_TEMPLATE,
        "1024",
    );
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": false},
    }}]);
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let ask = |extra: Value| {
        let mut body = json!({"messages": [user], "tools": tools, "tool_choice": "required",
                              "parallel_tool_calls": false, "max_tokens": 60,
                              "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    // `required`: the grammar makes the model call; the call comes back parsed.
    let (status, reply) = server.post("/v1/chat/completions", &ask(json!({})));
    assert_eq!(status, 200, "{reply}");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    assert!(choice["message"]["content"].is_null(), "{reply}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");

    // Streamed: the call's name in its first tool_calls delta, then its arguments piece by
    // piece as they are written, adding up to the same call; then the finish reason.
    let (streamed, chunks) = streamed_call(&server, &ask(json!({"stream": true})));
    assert!(streamed.len() > 3, "{chunks:?}");
    assert_eq!(streamed[0]["function"]["name"], "get_weather");
    assert_eq!(streamed[0]["type"], "function");
    assert!(streamed[0]["id"].as_str().unwrap().starts_with("call_"));
    assert!(streamed.iter().all(|d| d["index"] == 0));
    assert!(streamed[1..].iter().all(|d| d.get("id").is_none()));
    assert_eq!(
        joined_arguments(&streamed),
        call["function"]["arguments"].as_str().unwrap()
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );

    // The next turn carries the call and its result through the template.
    let turn = json!({"messages": [
        user,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 C"},
    ], "tools": tools, "max_tokens": 8, "temperature": 0});
    let (status, next) = server.post("/v1/chat/completions", &turn);
    assert_eq!(status, 200, "{next}");
    assert!(
        next["usage"]["prompt_tokens"].as_u64() > reply["usage"]["prompt_tokens"].as_u64(),
        "{next}"
    );
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // A template that asks for Llama 3's format: the whole reply one JSON call.
    let server = serve_with_template(
        &model,
        dir.path(),
        "llama3.jinja",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if tools and loop.last %}\
         Respond in the format {\"name\": function name, \"parameters\": dictionary of \
         argument name and its value}. Functions:\n{% for t in tools %}{{ t | tojson }}\n\
         {% endfor %}{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n",
        "1024",
    );
    let (status, reply) = server.post("/v1/chat/completions", &ask(json!({})));
    assert_eq!(status, 200, "{reply}");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{reply}");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // A template in the style of Mistral v0.3's: the reply a list after `[TOOL_CALLS]`, and
    // call ids that must be nine letters and digits when the call comes back.
    let server = serve_with_template(
        &model,
        dir.path(),
        "mistral.jinja",
        MISTRAL_TEMPLATE,
        "1024",
    );
    let (status, reply) = server.post("/v1/chat/completions", &ask(json!({})));
    assert_eq!(status, 200, "{reply}");
    let call = &reply["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{reply}");
    let id = call["id"].as_str().unwrap();
    assert!(
        id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{id}"
    );
    let (pieces, _) = streamed_call(&server, &ask(json!({"stream": true})));
    assert!(pieces.len() > 3, "{pieces:?}");
    assert_eq!(
        joined_arguments(&pieces),
        call["function"]["arguments"].as_str().unwrap()
    );
    let turn = json!({"messages": [
        user,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": id, "content": "Sunny, 21 C"},
    ], "tools": tools, "max_tokens": 8, "temperature": 0});
    let (status, next) = server.post("/v1/chat/completions", &turn);
    assert_eq!(status, 200, "{next}");
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");

    // A template that never reads `tools` refuses them rather than ignoring them.
    let server = Served::start(&model, &["-c", "512", "-t", "2"]);
    let (status, refused) = server.post("/v1/chat/completions", &ask(json!({})));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "tools");
    // So are documents.
    let body = json!({"messages": [user], "documents": [{"text": "Paris is sunny."}]});
    let (status, refused) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "documents");
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}

#[test]
fn a_chat_template_that_loops_is_a_400_and_the_server_goes_on() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    // 10^10 iterations: it froze the server before templates ran on a budget.
    let looping =
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    let dir = tempfile::tempdir().expect("a scratch directory");
    let server = serve_with_template(&model, dir.path(), "loop.jinja", looping, "512");
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let (status, out) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 400, "{out}");
    let message = out["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("instructions without finishing"),
        "{message}"
    );
    let (status, _) = server.get("/health");
    assert_eq!(status, 200);
    assert!(completion(&server, "The capital of France is").contains("Paris"));
    let (status, _) = server.terminate();
    assert!(status.success());
}
