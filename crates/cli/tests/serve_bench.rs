//! Throughput of `kindle serve` on the real model: C concurrent greedy streams of 64 tokens
//! each, for C in `KINDLE_BENCH_CLIENTS` (default 1,4,16); prints aggregate generated tokens
//! per second and the median / p95 time to first token. A measurement, not a check: it is
//! ignored by default.
//!
//! ```sh
//! cargo test --release -p kindle-cli --test serve_bench -- --ignored --nocapture
//! ```

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::Served;

const TOKENS: usize = 64;

/// One streamed completion: (time to first token, tokens received, total time).
fn stream_one(addr: &str, prompt: &str) -> (Duration, usize, Duration) {
    let body = serde_json::json!({"prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
                                  "ignore_eos": true, "stream": true})
    .to_string();
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connecting");
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("sending");
    let mut first = None;
    let mut tokens = 0;
    for line in BufReader::new(stream).lines() {
        let line = line.expect("reading");
        if let Some(data) = line.strip_prefix("data: ") {
            if data == "[DONE]" {
                break;
            }
            let chunk: serde_json::Value = serde_json::from_str(data).expect("a JSON chunk");
            if chunk["choices"][0]["finish_reason"].is_null() {
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
    let Some(model) = common::real_model() else {
        return;
    };
    let clients: Vec<usize> = std::env::var("KINDLE_BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,4,16".into())
        .split(',')
        .map(|c| c.trim().parse().expect("a client count"))
        .collect();
    let most = clients.iter().copied().max().unwrap_or(1);
    let threads = std::env::var("KINDLE_BENCH_THREADS").unwrap_or_else(|_| "2".into());
    let parallel = most.to_string();
    let queue = (most * 2).to_string();
    let server = Served::start(
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
    );
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let name = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let avx512 = cpu.contains("avx512f");
    println!("CPU: {name} (avx512f: {avx512}), -t {threads}, {TOKENS} tokens per stream");
    println!("| clients | generated tok/s | median TTFT ms | p95 TTFT ms | wall s |");
    println!("| --- | --- | --- | --- | --- |");
    // Warm up.
    stream_one(&server.addr, "Warm up");
    for &c in &clients {
        let start = Instant::now();
        let results: Vec<(Duration, usize, Duration)> = std::thread::scope(|scope| {
            let tasks: Vec<_> = (0..c)
                .map(|i| {
                    let addr = server.addr.clone();
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
        assert_eq!(tokens, c * TOKENS, "every stream ran to {TOKENS} tokens");
        println!(
            "| {c} | {:.1} | {:.0} | {:.0} | {wall:.1} |",
            tokens as f64 / wall,
            at(0.5),
            at(0.95)
        );
    }
    let (status, _) = server.terminate();
    assert!(status.success());
}
