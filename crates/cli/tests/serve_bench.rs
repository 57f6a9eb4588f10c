//! Throughput of `kindle serve` on the real model: C concurrent greedy streams of 64 tokens
//! each, for C in `KINDLE_BENCH_CLIENTS` (default 1,4,16); prints aggregate generated tokens
//! per second and the median / p95 time to first token. A measurement, not a check: it is
//! ignored by default.
//!
//! ```sh
//! cargo test --release -p kindle-cli --test serve_bench -- --ignored --nocapture
//! ```
//!
//! With `KINDLE_BENCH_ADDR=127.0.0.1:PORT` the throughput test measures the server already
//! listening there instead of starting `kindle serve` (llama-server, for a comparison with the
//! same client).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::Served;

const TOKENS: usize = 64;

/// One streamed completion: (time to first token, tokens received, total time).
fn stream_one(addr: &str, prompt: &str) -> (Duration, usize, Duration) {
    let body = serde_json::json!({"prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
                                  "ignore_eos": true, "stream": true});
    stream_request(addr, "/v1/completions", &body)
}

/// One streamed request to `path`: (time to first token, tokens received, total time).
fn stream_request(addr: &str, path: &str, body: &serde_json::Value) -> (Duration, usize, Duration) {
    let body = body.to_string();
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connecting");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("sending");
    let chat = path.contains("chat");
    let mut first = None;
    let mut tokens = 0;
    for line in BufReader::new(stream).lines() {
        let line = line.expect("reading");
        if let Some(data) = line.strip_prefix("data: ") {
            if data == "[DONE]" {
                break;
            }
            let chunk: serde_json::Value = serde_json::from_str(data).expect("a JSON chunk");
            let choice = &chunk["choices"][0];
            // Chat streams open with a role-only chunk; count content chunks.
            // A chunk carrying text is a token (chat streams open with a role-only chunk;
            // llama-server puts the last token in the chunk with the finish reason).
            let is_token = if chat {
                choice["delta"]["role"].is_null()
                    && choice["delta"]["content"]
                        .as_str()
                        .is_some_and(|t| !t.is_empty())
            } else {
                choice["text"].as_str().is_some_and(|t| !t.is_empty())
            };
            if is_token && chunk["choices"].as_array().is_some_and(|c| !c.is_empty()) {
                tokens += 1;
                first.get_or_insert_with(|| start.elapsed());
            }
        }
    }
    (first.unwrap_or_default(), tokens, start.elapsed())
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn throughput_by_concurrent_streams() {
    let clients: Vec<usize> = std::env::var("KINDLE_BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,4,16".into())
        .split(',')
        .map(|c| c.trim().parse().expect("a client count"))
        .collect();
    let most = clients.iter().copied().max().unwrap_or(1);
    let threads = std::env::var("KINDLE_BENCH_THREADS").unwrap_or_else(|_| "2".into());
    let parallel = most.to_string();
    let queue = (most * 2).to_string();
    let external = std::env::var("KINDLE_BENCH_ADDR").ok();
    let server = match &external {
        Some(_) => None,
        None => {
            let Some(model) = common::real_model() else {
                return;
            };
            Some(Served::start(
                &model,
                &[
                    "--parallel",
                    &parallel,
                    "--queue",
                    &queue,
                    "-c",
                    "2048",
                    "-t",
                    &threads,
                ],
            ))
        }
    };
    let addr = match (&external, &server) {
        (Some(addr), _) => addr.clone(),
        (None, Some(served)) => served.addr.clone(),
        (None, None) => unreachable!("a server was started"),
    };
    println!(
        "server: {}",
        external
            .as_deref()
            .map_or("kindle serve".to_string(), |a| format!("external at {a}"))
    );
    let (name, avx512) = cpu();
    println!("CPU: {name} (avx512f: {avx512}), -t {threads}, {TOKENS} tokens per stream");
    println!("| clients | generated tok/s | median TTFT ms | p95 TTFT ms | wall s |");
    println!("| --- | --- | --- | --- | --- |");
    // Warm up.
    stream_one(&addr, "Warm up");
    for &c in &clients {
        let start = Instant::now();
        let results: Vec<(Duration, usize, Duration)> = std::thread::scope(|scope| {
            let tasks: Vec<_> = (0..c)
                .map(|i| {
                    let addr = addr.clone();
                    scope.spawn(move || stream_one(&addr, &format!("Story number {i}: Once")))
                })
                .collect();
            tasks
                .into_iter()
                .map(|t| t.join().expect("a client"))
                .collect()
        });
        let wall = start.elapsed().as_secs_f64();
        let tokens: usize = results.iter().map(|r| r.1).sum();
        let mut ttft: Vec<f64> = results.iter().map(|r| r.0.as_secs_f64() * 1e3).collect();
        ttft.sort_by(f64::total_cmp);
        let at = |q: f64| ttft[((ttft.len() as f64 - 1.0) * q).round() as usize];
        // Every stream runs to TOKENS tokens (ignore_eos); a token whose text is empty (held
        // back inside a character) is not seen as a chunk, hence the margin.
        assert!(
            tokens <= c * TOKENS && tokens * 10 >= c * TOKENS * 9,
            "{tokens} tokens for {c} streams of {TOKENS}"
        );
        println!(
            "| {c} | {:.1} | {:.0} | {:.0} | {wall:.1} |",
            tokens as f64 / wall,
            at(0.5),
            at(0.95)
        );
    }
    if let Some(server) = server {
        let (status, _) = server.terminate();
        assert!(status.success());
    }
}

/// The CPU's model name and whether it has AVX-512.
fn cpu() -> (String, bool) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let name = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    (name, cpu.contains("avx512f"))
}

/// About 200 tokens of system prompt that every request shares.
fn system_prompt() -> String {
    "You are the help desk of a public library. Answer in one or two short sentences. The \
     library opens at nine in the morning and closes at eight in the evening on weekdays, and \
     at five on Saturdays; it is closed on Sundays and public holidays. Members may borrow up \
     to twelve books, four films and two games at a time, for three weeks, and renew each \
     loan twice online or at the desk unless another member has reserved it. Late returns \
     cost ten cents a day per item, capped at the item's price. Membership is free for \
     residents and costs twenty dollars a year for others. The reading rooms are on the \
     second floor, the children's section on the ground floor next to the café, and the \
     computers, printers and scanners on the first floor; printing costs ten cents a page. \
     Quiet study rooms can be booked for two hours a day. Wi-Fi is free in the whole \
     building; ask at the desk for the password, which changes every Monday. A lost card is \
     replaced for two dollars."
        .to_string()
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn shared_system_prompt_ttft_with_and_without_the_prefix_cache() {
    let Some(model) = common::real_model() else {
        return;
    };
    let clients: usize = std::env::var("KINDLE_BENCH_CLIENTS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4);
    let rounds = 4;
    let threads = std::env::var("KINDLE_BENCH_THREADS").unwrap_or_else(|_| "2".into());
    let (name, avx512) = cpu();
    let questions = [
        "When do you open on Saturday?",
        "How many films can I borrow?",
        "Where are the printers?",
        "What does a late book cost?",
        "Is membership free?",
        "Can I renew a loan?",
        "Where is the children's section?",
        "Can I book a study room?",
    ];
    println!(
        "CPU: {name} (avx512f: {avx512}), -t {threads}, {clients} clients x {rounds} chat \
         requests sharing a system prompt, 16 tokens each"
    );
    println!(
        "| prefix cache | median TTFT ms | p95 TTFT ms | prefix-cache hits | reused prompt tokens |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for cache in [false, true] {
        let parallel = clients.to_string();
        let mut args = vec!["--parallel", &parallel, "-c", "1024", "-t", &threads];
        if !cache {
            args.push("--no-prefix-cache");
        }
        let server = Served::start(&model, &args);
        let mut ttft: Vec<f64> = std::thread::scope(|scope| {
            let tasks: Vec<_> = (0..clients)
                .map(|c| {
                    let addr = server.addr.clone();
                    scope.spawn(move || {
                        (0..rounds)
                            .map(|r| {
                                let q = questions[(c + r * clients) % questions.len()];
                                let body = serde_json::json!({
                                    "messages": [{"role": "system", "content": system_prompt()},
                                                 {"role": "user", "content": q}],
                                    "max_tokens": 16, "temperature": 0, "stream": true});
                                let (first, _, _) =
                                    stream_request(&addr, "/v1/chat/completions", &body);
                                first.as_secs_f64() * 1e3
                            })
                            .collect::<Vec<f64>>()
                    })
                })
                .collect();
            tasks
                .into_iter()
                .flat_map(|t| t.join().expect("a client"))
                .collect()
        });
        ttft.sort_by(f64::total_cmp);
        let at = |q: f64| ttft[((ttft.len() as f64 - 1.0) * q).round() as usize];
        let (_, metrics) = server.get("/metrics");
        let metric = |name: &str| -> f64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or(0.0)
        };
        let hits = metric("kindle_prefix_cache_hits_total");
        let reused = metric("kindle_prefix_cache_hit_tokens_total");
        println!(
            "| {} | {:.0} | {:.0} | {hits} | {reused} |",
            if cache { "on (blocks of 16)" } else { "off" },
            at(0.5),
            at(0.95)
        );
        if cache {
            assert!(hits > 0.0, "the prefix cache was never hit");
        } else {
            assert_eq!(hits, 0.0, "the prefix cache was off");
        }
        let (status, _) = server.terminate();
        assert!(status.success());
    }
}
