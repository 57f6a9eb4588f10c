//! `kindle serve` on Gemma-3, whose local layers attend to a sliding window of 512: their KV
//! blocks are a group of their own, sized for the window (the startup line and `/metrics`
//! say so); a prompt longer than the window and the slack is answered, and answered the same
//! again from the prefix cache, which brings the window before the reused prefix's end.

mod common;

use common::server::Served;
use serde_json::json;

/// A `/metrics` gauge or counter.
fn metric(server: &Served, name: &str) -> f64 {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in /metrics:\n{text}"))
        .parse()
        .expect("a number")
}

#[test]
fn local_layers_keep_their_window_and_a_long_prompt_is_reused() {
    let Some(model) = common::gemma3_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let server = Served::start(&model, &["-c", "4096", "-t", "2", "--parallel", "1"]);
    // 256 global blocks of 16; the local layers (window 512) have blocks for one sequence's
    // window, a pass and a rollback, twice over: ((512 + 513) / 16 + 2) x 2 = 134.
    assert_eq!(metric(&server, "kindle_kv_blocks_total"), 256.0);
    assert_eq!(metric(&server, "kindle_kv_local_blocks_total"), 134.0);
    assert!(
        server
            .banner
            .contains("its sliding-window layers 2144 tokens"),
        "{}",
        server.banner
    );

    let prompt = "The quiet river runs past the old mill, and the miller counts his sacks of \
                  flour one by one before the sun goes down. "
        .repeat(36);
    let body = json!({"prompt": prompt, "max_tokens": 12, "temperature": 0});
    let ask = || {
        let (status, reply) = server.post("/v1/completions", &body);
        assert_eq!(status, 200, "{reply}");
        reply
    };
    let first = ask();
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 512 + 256 + 16,
        "{prompt_tokens} prompt tokens"
    );
    // The answer goes out before the engine gives the finished sequence's blocks back: wait
    // for the gauge (a busy machine showed 49 still held when the reply arrived).
    let settled = (0..100).any(|_| {
        let used = metric(&server, "kindle_kv_local_blocks_used");
        used == 0.0 || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            false
        }
    });
    assert!(
        settled,
        "{} local blocks still held 5 s after the answer",
        metric(&server, "kindle_kv_local_blocks_used")
    );
    assert!(metric(&server, "kindle_kv_local_blocks_cached") <= 134.0);

    // Again: the whole prompt but its last block comes from the prefix cache, local windows
    // included, and the answer is the same.
    let second = ask();
    assert_eq!(second["choices"][0]["text"], first["choices"][0]["text"]);
    let reused = metric(&server, "kindle_prefix_cache_hit_tokens_total");
    assert!(
        reused as u64 >= prompt_tokens - 16,
        "{reused} of {prompt_tokens} tokens reused"
    );
    let (status, _) = server.terminate();
    assert!(status.success());
}
