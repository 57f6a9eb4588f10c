//! `kindle serve` on the real model, through its HTTP API: greedy requests sent together
//! (continuously batched) give what each gives alone, and what `kindle generate` gives; SIGTERM
//! drains and exits 0.

mod common;

use std::process::Command;

use common::server::Served;
use serde_json::{Value, json};

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "The three primary colors are",
];
const MAX_TOKENS: usize = 24;

/// `kindle generate`'s greedy text for `prompt` (`--chat`: as a user message).
fn generate(prompt: &str, chat: bool) -> String {
    let model = common::model_path();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kindle"));
    command
        .args(["generate", "--json", "-n", &MAX_TOKENS.to_string(), "-m"])
        .arg(&model);
    if chat {
        command.arg("--chat");
    }
    let out = command
        .arg(prompt)
        .output()
        .expect("running kindle generate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    value["text"].as_str().expect("a text").to_string()
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
