//! A server with a draft model (`kindle serve --draft-model`): requests draft with it by
//! default and give what they give without it (tokens, logprobs, usage), alone or in chat;
//! beside other requests they decode in the batch instead of in passes of their own;
//! `kindle_draft_max` sets the draft length or (0) turns drafting off, `kindle_draft_p_min`
//! where drafts end and `kindle_draft_min` the shortest verified; bad settings are clear
//! 400s; `/metrics` counts drafted and accepted tokens.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{CacheFull, HashModel, TestServer, Tokens, VOCAB, config, with};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use kindle_generate::{BlockStats, LanguageModel, PagedModel};
use kindle_server::draft::{DraftModel, Drafting};
use serde_json::{Value, json};

/// A draft model: the target's logits (from a [`HashModel`] of its own), except in about one
/// row in four (by a hash of the row), where the peak moves to another token: its drafts are
/// accepted in part; in another one row in four its peak is lower (the draft is unsure). Its model counts its passes and sleeps `delay` in each one-row pass.
#[derive(Clone)]
struct Draft {
    inner: HashModel,
    /// Tokens run through the model.
    tokens: Arc<AtomicUsize>,
}

impl Draft {
    fn new(delay: Duration) -> Self {
        Draft {
            inner: HashModel::new(delay),
            tokens: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Tokens run through the model so far.
    fn tokens(&self) -> usize {
        self.tokens.load(Ordering::SeqCst)
    }

    /// Forward passes run.
    fn passes(&self) -> usize {
        self.inner.passes.load(Ordering::SeqCst) + self.inner.all_passes.load(Ordering::SeqCst)
    }

    fn perturb(mut row: Vec<f32>) -> Vec<f32> {
        let h = row.iter().fold(7u64, |h, x| {
            h.wrapping_mul(31).wrapping_add(u64::from(x.to_bits()))
        });
        let peak = (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        if h % 4 == 0 {
            row[peak] = -5.0;
            row[peak % 26 + 1] = 3.0;
        } else if h % 4 == 1 {
            // Unsure: the same peak, lower (about 0.2 of the probability, where the other
            // rows' peaks have about 0.7).
            row[peak] = 1.0;
        }
        row
    }
}

impl LanguageModel for Draft {
    type Cache = Tokens;
    type Error = CacheFull;

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn context_length(&self) -> usize {
        self.inner.context_length()
    }
    fn new_cache(&self, capacity: usize) -> Result<Tokens, CacheFull> {
        self.inner.new_cache(capacity)
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, CacheFull> {
        self.tokens.fetch_add(tokens.len(), Ordering::SeqCst);
        self.inner.forward_last(tokens, cache).map(Self::perturb)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, CacheFull> {
        self.tokens.fetch_add(tokens.len(), Ordering::SeqCst);
        let rows = self.inner.forward_all(tokens, cache)?;
        Ok(rows
            .chunks(VOCAB)
            .flat_map(|row| Self::perturb(row.to_vec()))
            .collect())
    }
}

impl PagedModel for Draft {
    fn open_pool(&mut self, blocks: usize, size: usize, sequences: usize) -> Result<(), CacheFull> {
        self.inner.open_pool(blocks, size, sequences)
    }
    fn pooled_cache(
        &self,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Option<(Tokens, usize)>, CacheFull> {
        self.inner.pooled_cache(prompt, capacity)
    }
    fn publish(&self, cache: &Tokens, tokens: &[u32]) -> usize {
        self.inner.publish(cache, tokens)
    }
    fn pool_stats(&self) -> Option<BlockStats> {
        self.inner.pool_stats()
    }
}

/// A server drafting with a fresh [`Draft`], `draft_max` tokens a step by default; both
/// models sleep `delay` a pass (the target only in its batched passes).
async fn drafting_server(delay: Duration, draft_max: usize) -> (TestServer, Draft) {
    let draft = Draft::new(delay);
    let drafting = Drafting::new(DraftModel::new(draft.clone()), draft_max).unwrap();
    let server = TestServer::start_drafting(config(), delay, Some(drafting)).await;
    (server, draft)
}

/// A counter's value in `/metrics`.
async fn counter(server: &TestServer, name: &str) -> u64 {
    let (status, text) = server.get("/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

/// Verification passes, drafted tokens and drafts dropped for their length so far, from
/// `/metrics`.
async fn drafts(server: &TestServer) -> (u64, u64, u64) {
    (
        counter(server, "kindle_draft_passes_total").await,
        counter(server, "kindle_draft_tokens_total").await,
        counter(server, "kindle_draft_short_total").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_model_gives_the_output_of_the_request_without_it() {
    let (server, draft) = drafting_server(Duration::ZERO, 4).await;
    let drafted = json!({
        "model": "toy", "prompt": "the cat sat on", "max_tokens": 80,
        "temperature": 0, "logprobs": 2,
    });
    let plain = with(drafted.clone(), json!({"kindle_draft_max": 0}));
    let (s1, a) = server.post("/v1/completions", &plain).await;
    assert_eq!(s1, 200, "{a}");
    assert_eq!(
        (
            draft.passes(),
            server.model.all_passes.load(Ordering::SeqCst)
        ),
        (0, 0),
        "kindle_draft_max 0 drafted"
    );
    let (s2, b) = server.post("/v1/completions", &drafted).await;
    assert_eq!(s2, 200, "{b}");
    assert_eq!(a["choices"], b["choices"]);
    assert_eq!(a["usage"], b["usage"]);
    let completion = a["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(completion >= 20, "too short to show anything: {a}");
    let verified = server.model.all_passes.load(Ordering::SeqCst) as u64;
    assert!(verified > 0, "no draft was verified");
    assert!(draft.passes() > 0);
    // Some drafts were accepted, some not (the draft differs one step in four).
    let drafted_tokens = counter(&server, "kindle_draft_tokens_total").await;
    let accepted = counter(&server, "kindle_draft_accepted_tokens_total").await;
    assert_eq!(
        counter(&server, "kindle_draft_passes_total").await,
        verified
    );
    assert!(
        0 < accepted && accepted < drafted_tokens,
        "{accepted} of {drafted_tokens}"
    );
    // Fewer target passes than tokens: the drafts saved passes.
    assert!(
        verified < completion,
        "{verified} passes for {completion} tokens"
    );

    // Another draft length, streaming, and a chat request: the same output.
    let longer = with(drafted.clone(), json!({"kindle_draft_max": 8}));
    let (s3, c) = server.post("/v1/completions", &longer).await;
    assert_eq!(s3, 200);
    assert_eq!(a["choices"], c["choices"]);
    // `kindle_draft_p_min: 1`: no draft token is that sure, so every draft ends before its
    // first token and nothing is verified; the output is the same.
    let passes = counter(&server, "kindle_draft_passes_total").await;
    let unsure = with(drafted.clone(), json!({"kindle_draft_p_min": 1.0}));
    let (s6, f) = server.post("/v1/completions", &unsure).await;
    assert_eq!(s6, 200, "{f}");
    assert_eq!(a["choices"], f["choices"]);
    assert_eq!(counter(&server, "kindle_draft_passes_total").await, passes);
    let sure_enough = with(drafted.clone(), json!({"kindle_draft_p_min": 0.1}));
    let (s7, g) = server.post("/v1/completions", &sure_enough).await;
    assert_eq!(s7, 200, "{g}");
    assert_eq!(a["choices"], g["choices"]);
    assert!(counter(&server, "kindle_draft_passes_total").await > passes);
    // Drafts ending where the draft is unsure, with `kindle_draft_min` at the draft length:
    // only whole drafts are verified (every pass four tokens), where without it some are
    // shorter; the output is the same.
    for (min, whole) in [(None, false), (Some(4), true)] {
        let (passes, tokens, short) = drafts(&server).await;
        let mut ask = json!({"kindle_draft_p_min": 0.5});
        if let Some(min) = min {
            ask["kindle_draft_min"] = json!(min);
        }
        let (status, h) = server
            .post("/v1/completions", &with(drafted.clone(), ask))
            .await;
        assert_eq!(status, 200, "{h}");
        assert_eq!(a["choices"], h["choices"]);
        let (p, t, dropped) = drafts(&server).await;
        let (p, t, dropped) = (p - passes, t - tokens, dropped - short);
        assert!(p > 0, "min {min:?}: nothing verified");
        assert_eq!(dropped > 0, whole, "min {min:?}: {dropped} dropped");
        // Whole drafts only, or short ones in more places than the output's end.
        let fits = if whole { t == 4 * p } else { t + 4 < 4 * p };
        assert!(fits, "min {min:?}: {t} tokens in {p} passes");
    }
    let chat = json!({
        "model": "toy", "messages": [{"role": "user", "content": "a dog ran"}],
        "max_tokens": 60, "temperature": 0,
    });
    let (s4, drafted_chat) = server.post("/v1/chat/completions", &chat).await;
    let chat = with(chat, json!({"kindle_draft_max": 0}));
    let (s5, plain_chat) = server.post("/v1/chat/completions", &chat).await;
    assert_eq!((s4, s5), (200, 200));
    assert_eq!(plain_chat["choices"], drafted_chat["choices"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_other_requests_drafting_requests_decode_in_the_batch() {
    let (server, _draft) = drafting_server(Duration::from_millis(5), 4).await;
    let body = |prompt: &str| {
        json!({
            "model": "toy", "prompt": prompt, "max_tokens": 40, "temperature": 0,
            "ignore_eos": true,
        })
    };
    let prompts = ["the cat", "a dog ran", "abcab abcab"];
    let bodies = prompts.map(body);
    let (a, b, c) = tokio::join!(
        server.post("/v1/completions", &bodies[0]),
        server.post("/v1/completions", &bodies[1]),
        server.post("/v1/completions", &bodies[2]),
    );
    assert_eq!((a.0, b.0, c.0), (200, 200, 200));
    assert_eq!(server.model.largest_batch.load(Ordering::SeqCst), 3);
    // Running side by side for 40 tokens each, they verified (almost) no drafts: drafting
    // alone, each would have verified one pass per few tokens (dozens in all). A request
    // admitted a step before the others may draft once while alone.
    let verified = server.model.all_passes.load(Ordering::SeqCst);
    assert!(
        verified <= 3,
        "{verified} verification passes beside others"
    );
    // Each gives what it gives alone, drafting or not.
    for (prompt, together) in prompts.iter().zip([a.1, b.1, c.1]) {
        let (_, alone) = server.post("/v1/completions", &body(prompt)).await;
        let off = with(body(prompt), json!({"kindle_draft_max": 0}));
        let (_, plain) = server.post("/v1/completions", &off).await;
        assert_eq!(together["choices"], alone["choices"], "{prompt}");
        assert_eq!(together["choices"], plain["choices"], "{prompt}");
    }
    assert!(
        server.model.all_passes.load(Ordering::SeqCst) > verified,
        "alone, no request drafted"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_joining_a_drafting_one_changes_neither() {
    // The second request arrives while the first drafts alone: the first stops drafting
    // after emitting what its last verification pass left, and both decode in the batch.
    let (server, _draft) = drafting_server(Duration::from_millis(3), 6).await;
    let body = |prompt: &str, n: usize| {
        json!({
            "model": "toy", "prompt": prompt, "max_tokens": n, "temperature": 0,
            "ignore_eos": true, "logprobs": 1,
        })
    };
    let (first, second) = (body("the cat sat", 90), body("a dog", 30));
    let later = async {
        tokio::time::sleep(Duration::from_millis(60)).await;
        server.post("/v1/completions", &second).await
    };
    let (a, b) = tokio::join!(server.post("/v1/completions", &first), later);
    assert_eq!((a.0, b.0), (200, 200), "{} {}", a.1, b.1);
    assert!(
        server.model.all_passes.load(Ordering::SeqCst) > 0,
        "nothing drafted"
    );
    assert_eq!(
        server.model.largest_batch.load(Ordering::SeqCst),
        2,
        "no batch"
    );
    for (body, together) in [(first, a.1), (second, b.1)] {
        let off = with(body, json!({"kindle_draft_max": 0}));
        let (_, plain) = server.post("/v1/completions", &off).await;
        let text = |v: &Value| v["choices"][0]["text"].clone();
        assert_eq!(text(&together), text(&plain));
        assert_eq!(together["choices"], plain["choices"]);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_requests_draft_too() {
    let (server, draft) = drafting_server(Duration::ZERO, 4).await;
    let body = json!({
        "model": "toy", "prompt": "the cat", "max_tokens": 30, "temperature": 0.8,
        "top_k": 10, "seed": 7, "ignore_eos": true,
    });
    let (status, out) = server.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["usage"]["completion_tokens"], 30);
    assert!(draft.passes() > 0);
    assert!(server.model.all_passes.load(Ordering::SeqCst) > 0);
    // Mirostat cannot be verified: without asking, such a request simply does not draft.
    let before = server.model.all_passes.load(Ordering::SeqCst);
    let mirostat = with(body.clone(), json!({"mirostat": 2}));
    let (status, out) = server.post("/v1/completions", &mirostat).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(server.model.all_passes.load(Ordering::SeqCst), before);
    // Nor does a traced one.
    let traced = with(body, json!({"kindle_trace": true, "logprobs": 1}));
    let (status, out) = server.post("/v1/completions", &traced).await;
    assert_eq!(status, 200, "{out}");
    assert!(
        out["choices"][0]["logprobs"]["kindle_trace"].is_array(),
        "{out}"
    );
    assert_eq!(server.model.all_passes.load(Ordering::SeqCst), before);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_draft_settings_are_clear_errors() {
    let (server, _draft) = drafting_server(Duration::ZERO, 4).await;
    let base = json!({"model": "toy", "prompt": "abc", "max_tokens": 4});
    for (extra, field, says) in [
        (
            json!({"kindle_draft_max": 15}),
            "kindle_draft_max",
            "between 0 and 14",
        ),
        (
            json!({"kindle_draft_max": -1}),
            "kindle_draft_max",
            "between 0 and 14",
        ),
        (
            json!({"kindle_draft_max": 3, "kindle_trace": true, "logprobs": 1}),
            "kindle_draft_max",
            "kindle_trace",
        ),
        (
            json!({"kindle_draft_max": 3, "mirostat": 2, "temperature": 0.8}),
            "kindle_draft_max",
            "mirostat",
        ),
        (
            json!({"kindle_lookup_ngram": 3, "mirostat": 1, "temperature": 0.8}),
            "kindle_lookup_ngram",
            "mirostat",
        ),
        (
            json!({"kindle_draft_p_min": 1.5}),
            "kindle_draft_p_min",
            "between 0 and 1",
        ),
        (
            json!({"kindle_draft_p_min": 0.5, "mirostat": 2, "temperature": 0.8}),
            "kindle_draft_p_min",
            "mirostat",
        ),
        (
            json!({"kindle_draft_p_min": 0.5, "kindle_lookup_ngram": 3}),
            "kindle_draft_p_min",
            "prompt lookup",
        ),
        (
            json!({"kindle_lookup_ngram": 3, "kindle_draft_max": 0}),
            "kindle_draft_max",
            "between 1 and 14",
        ),
        (
            json!({"kindle_draft_min": 15}),
            "kindle_draft_min",
            "between 0 and 14",
        ),
        (
            json!({"kindle_draft_min": 5}),
            "kindle_draft_min",
            "more than the server's longest draft (4)",
        ),
        (
            json!({"kindle_draft_min": 3, "kindle_draft_max": 2}),
            "kindle_draft_min",
            "more than the request's longest draft (2)",
        ),
        (
            json!({"kindle_draft_min": 5, "kindle_lookup_ngram": 3}),
            "kindle_draft_min",
            "more than the request's longest draft (4)",
        ),
        (
            json!({"kindle_draft_min": 2, "kindle_draft_max": 0}),
            "kindle_draft_min",
            "turns drafting off",
        ),
        (
            json!({"kindle_draft_min": 2, "mirostat": 2, "temperature": 0.8}),
            "kindle_draft_min",
            "mirostat",
        ),
        (
            json!({"kindle_draft_min": 2, "kindle_draft_p_min": 0.5, "temperature": 0.8}),
            "kindle_draft_min",
            "would change the output distribution",
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
    // A draft length the server cannot take.
    for k in [0, 15] {
        let error = Drafting::new(DraftModel::new(Draft::new(Duration::ZERO)), k)
            .err()
            .unwrap_or_else(|| panic!("--draft-max {k} taken"));
        assert!(error.to_string().contains("--draft-max"), "{error}");
    }
    let error = Drafting::new(DraftModel::new(Draft::new(Duration::ZERO)), 4)
        .and_then(|d| d.with_draft_min(5))
        .err()
        .unwrap();
    assert!(error.to_string().contains("--draft-min"), "{error}");
}

/// A server whose draft model's drafts end where it is unsure (`--draft-p-min`) and that
/// verifies only whole drafts (`--draft-min` at the draft length): a greedy request gets only
/// whole drafts verified; a sampled one gets every draft verified instead (dropping the short
/// ones would change its distribution), and asking for a minimum itself is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_draft_minimum_applies_where_it_keeps_the_distribution() {
    let draft = Draft::new(Duration::ZERO);
    let model = DraftModel::new(draft.clone()).with_p_min(0.5).unwrap();
    let drafting = Drafting::new(model, 4)
        .and_then(|d| d.with_draft_min(4))
        .unwrap();
    let server = TestServer::start_drafting(config(), Duration::ZERO, Some(drafting)).await;
    let greedy = json!({
        "model": "toy", "prompt": "the cat sat on", "max_tokens": 80, "temperature": 0,
    });
    let sampled = json!({
        "model": "toy", "prompt": "the cat sat on", "max_tokens": 80, "temperature": 0.8,
        "seed": 5, "ignore_eos": true,
    });
    for (body, whole) in [(&greedy, true), (&sampled, false)] {
        let (passes, tokens, short) = drafts(&server).await;
        let (status, out) = server.post("/v1/completions", body).await;
        assert_eq!(status, 200, "{out}");
        let (p, t, dropped) = drafts(&server).await;
        let (p, t, dropped) = (p - passes, t - tokens, dropped - short);
        assert!(p > 0, "{body}: nothing verified");
        assert_eq!(dropped > 0, whole, "{body}: {dropped} dropped");
        let fits = if whole { t == 4 * p } else { t + 4 < 4 * p };
        assert!(fits, "{body}: {t} tokens in {p} passes");
    }
    let asked = with(sampled, json!({"kindle_draft_min": 4}));
    let (status, out) = server.post("/v1/completions", &asked).await;
    assert_eq!(status, 400, "{out}");
    assert_eq!(out["error"]["param"], "kindle_draft_min", "{out}");
    server.stop().await;
}

/// The same request twice to a server drafting with a fresh [`Draft`], its own pool or none:
/// the tokens the draft ran for each, and the prompt's length.
async fn draft_tokens_for_a_repeat(pooled: bool) -> (usize, usize, usize) {
    let draft = Draft::new(Duration::ZERO);
    let config = config();
    let drafting = if pooled {
        let model =
            DraftModel::pooled(draft.clone(), config.pool_blocks(), config.block_size, 4).unwrap();
        Drafting::new(model, 4).unwrap()
    } else {
        Drafting::new(DraftModel::new(draft.clone()), 4).unwrap()
    };
    assert_eq!(drafting.pool_stats().is_some(), pooled);
    let server = TestServer::start_drafting(config, Duration::ZERO, Some(drafting)).await;
    let body = json!({
        "model": "toy", "prompt": "the cat sat on the mat and the dog sat on the log ".repeat(3),
        "max_tokens": 40, "temperature": 0,
    });
    let (s1, a) = server.post("/v1/completions", &body).await;
    assert_eq!(s1, 200, "{a}");
    let first = draft.tokens();
    let hits = "kindle_draft_prefix_cache_hit_tokens_total";
    assert_eq!(counter(&server, hits).await, 0);
    let (s2, b) = server.post("/v1/completions", &body).await;
    assert_eq!(s2, 200, "{b}");
    assert_eq!(a["choices"], b["choices"]);
    let prompt = a["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    let second = draft.tokens() - first;
    // The counter says what the draft did not run again.
    let reused = counter(&server, hits).await as usize;
    assert_eq!(reused > 0, pooled, "{reused} tokens reused");
    assert!(
        second + reused <= first,
        "{first} then {second}, {reused} reused"
    );
    (first, second, prompt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_draft_runs_a_prompt_seen_before_only_past_its_cached_prefix() {
    let block = config().block_size;
    let (first, second, prompt) = draft_tokens_for_a_repeat(true).await;
    assert!(prompt > 4 * block, "a prompt of {prompt} tokens");
    assert!(
        first >= prompt,
        "the first request's draft ran {first} tokens"
    );
    // All but the prompt's last (partial) block came from the draft's pool.
    assert!(
        second + prompt - block <= first,
        "the draft ran {first} then {second} tokens for a prompt of {prompt}"
    );
    // Without a pool the draft runs the whole prompt again (the check above can fail).
    let (first, second, _) = draft_tokens_for_a_repeat(false).await;
    assert!(
        second + prompt - block > first,
        "{first} then {second} without a pool"
    );
}
