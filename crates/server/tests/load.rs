//! A bounded load test on loopback with the fake model: 64 concurrent streams, 30% of them
//! disconnecting after a few chunks. No 5xx, every finished stream ends with `[DONE]` and
//! equals the request run alone, and afterwards nothing runs or waits and no KV block is held.

mod common;

use std::time::{Duration, Instant};

use common::{Letters, TestServer, alone, config, greedy};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_streams_with_early_disconnects() {
    let mut cfg = config();
    cfg.parallel = 16;
    cfg.queue = 64;
    // Each request reserves 4 blocks of 16 (prompt plus 48 tokens): a pool of 32 holds 8 of
    // the 16 slots' requests, so admission waits for blocks under load too.
    cfg.kv_pool_tokens = Some(512);
    cfg.context = 128;
    let server = TestServer::start(cfg, Duration::from_millis(1)).await;
    let mut tasks = Vec::new();
    for i in 0..64usize {
        let client = server.client.clone();
        let path = "/v1/completions";
        let prompt: String = (0..3 + i % 5)
            .map(|k| char::from(b'a' + ((i * 7 + k * 3) % 26) as u8))
            .collect();
        let disconnect = i % 10 < 3;
        tasks.push(tokio::spawn(async move {
            let body = json!({"prompt": prompt, "max_tokens": 48, "temperature": 0,
                              "ignore_eos": disconnect, "stream": true});
            let mut response = client
                .post(path)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            let status = response.status;
            let mut raw = Vec::new();
            let mut chunks = 0;
            while let Some(chunk) = response.chunk().await {
                raw.extend_from_slice(&chunk);
                chunks += 1;
                if disconnect && chunks == 3 {
                    return (status, prompt, None);
                }
            }
            (status, prompt, Some(String::from_utf8(raw).unwrap()))
        }));
    }
    let mut finished = 0;
    for task in tasks {
        let (status, prompt, text) = task.await.unwrap();
        assert_eq!(status, 200, "{prompt}");
        let Some(text) = text else { continue };
        finished += 1;
        assert!(text.ends_with("data: [DONE]\n\n"), "{prompt}: {text}");
        let streamed: String = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .map(|e| {
                let v: Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let (expected, _, _) = alone(&Letters::ids(&prompt).unwrap(), 48, greedy(), &[]);
        assert_eq!(streamed, expected, "{prompt}");
    }
    assert!(finished >= 40, "{finished} streams finished");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let running = server.metric("kindle_sequences_running").await;
        let queued = server.metric("kindle_sequences_queued").await;
        if running == 0.0 && queued == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "running {running}, queued {queued}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, metrics) = server.get("/metrics").await;
    assert!(!metrics.contains("status=\"5"), "{metrics}");
    assert!(server.metric("kindle_sequences_cancelled_total").await >= 1.0);
    // Finished and cancelled sequences gave back every block.
    assert_eq!(server.metric("kindle_kv_blocks_used").await, 0.0);
    server.stop().await;
}
