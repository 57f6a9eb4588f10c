//! A fake model and vocabulary, and a server on a real loopback socket, for the HTTP tests.
#![allow(dead_code)]

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full as FullBody, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::TokioIo;
use kindle_blocks::BlockManager;
use kindle_generate::chat::{ChatEnding, ChatMessage, ChatPart, ChatTemplate, TemplateVars};
use kindle_generate::{
    BlockStats, BoxError, GenerationConfig, LanguageModel, ModelCache, PagedModel, Session,
    TokenDecoder, generate_to_end,
};
use kindle_sampling::SamplerConfig;
use kindle_server::{Encoding, ServerConfig, TextCodec};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The end-of-generation id.
pub const EOS: u32 = 0;
/// `.`: after it the model predicts EOS.
pub const DOT: u32 = 28;
/// Letters a-z are 1..=26, then ' ', '.', '\n', ':'; 0 is `<eos>`.
pub const VOCAB: usize = 32;

fn char_of(id: u32) -> Option<char> {
    match id {
        1..=26 => Some(char::from(b'a' + (id - 1) as u8)),
        27 => Some(' '),
        28 => Some('.'),
        29 => Some('\n'),
        30 => Some(':'),
        _ => None,
    }
}

fn id_of(c: char) -> Option<u32> {
    match c {
        'a'..='z' => Some(c as u32 - 'a' as u32 + 1),
        ' ' => Some(27),
        '.' => Some(28),
        '\n' => Some(29),
        ':' => Some(30),
        _ => None,
    }
}

/// The toy vocabulary.
pub struct Letters;

#[derive(Debug)]
pub struct UnknownChar(pub char);

impl fmt::Display for UnknownChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no token for {:?}", self.0)
    }
}

impl std::error::Error for UnknownChar {}

impl TokenDecoder for Letters {
    type Error = Infallible;
    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        Ok(ids.iter().filter_map(|&id| char_of(id)).collect())
    }
}

impl Letters {
    pub fn ids(text: &str) -> Result<Vec<u32>, UnknownChar> {
        text.chars()
            .map(|c| id_of(c).ok_or(UnknownChar(c)))
            .collect()
    }
}

/// The fake's chat template: a `doc:` line per document when a request sends them,
/// `role:content` lines, then `assistant:` and, when a request sets it, its `style`.
pub const FAKE_TEMPLATE: &str = "{% if documents is defined %}{% for d in documents %}\
    doc:{{ d.text }}\n{% endfor %}{% endif %}\
    {% for m in messages %}{{ m.role }}:{{ m.content }}\n{% endfor %}\
    {% if add_generation_prompt %}assistant:\
    {% if style is defined %}{{ style }} {% endif %}{% endif %}";

impl TextCodec for Letters {
    fn template_uses(&self, name: &str) -> bool {
        ChatTemplate::new(FAKE_TEMPLATE).is_ok_and(|t| t.mentions(name))
    }
    fn encode(&self, text: &str, _: Encoding) -> Result<Vec<u32>, BoxError> {
        Ok(Letters::ids(text)?)
    }
    fn encode_chat(
        &self,
        messages: &[ChatMessage],
        ending: ChatEnding,
        vars: &TemplateVars,
    ) -> Result<Vec<u32>, BoxError> {
        let template = ChatTemplate::new(FAKE_TEMPLATE)?;
        let parts = template.render_parts_ending(messages, ending, vars)?;
        let text: String = parts.iter().map(ChatPart::text).collect();
        Ok(Letters::ids(&text)?)
    }
    fn token_text(&self, id: u32) -> String {
        char_of(id).map_or_else(|| "<eos>".to_string(), String::from)
    }
    fn eog_ids(&self) -> Vec<u32> {
        vec![EOS]
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
}

/// A cache that keeps its tokens: the fake model's logits depend on the whole history. From
/// the fake's pool it also holds blocks, kept with the same `BlockManager` as the real pool
/// (its "storage" is the token list: a reused block's tokens are the prompt's, which the
/// prefix index guarantees).
#[derive(Debug)]
pub struct Tokens {
    pub tokens: Vec<u32>,
    pub capacity: usize,
    blocks: Vec<usize>,
    pool: Option<Arc<Mutex<BlockManager>>>,
}

impl Drop for Tokens {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.lock().unwrap().release_all(&self.blocks);
        }
    }
}

impl ModelCache for Tokens {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }
    fn fork(&self) -> Self {
        if let Some(pool) = &self.pool {
            let mut pool = pool.lock().unwrap();
            for &b in &self.blocks {
                pool.retain(b);
            }
        }
        Tokens {
            tokens: self.tokens.clone(),
            capacity: self.capacity,
            blocks: self.blocks.clone(),
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug)]
pub struct CacheFull;

impl fmt::Display for CacheFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cache full")
    }
}

impl std::error::Error for CacheFull {}

/// A model whose logits are a hash of the sequence so far: a peak on one letter (EOS after
/// '.'), and a spread over the rest so sampling has choices. It sleeps `delay` per forward
/// pass and records the largest batch it ran (in sequences and in tokens).
#[derive(Clone)]
pub struct HashModel {
    pub delay: Duration,
    pub largest_batch: Arc<AtomicUsize>,
    /// Tasks run by [`LanguageModel::for_each_task`] (sequences finished on its threads).
    pub task_runs: Arc<AtomicUsize>,
    pub largest_rows: Arc<AtomicUsize>,
    pub passes: Arc<AtomicUsize>,
    /// Passes returning every position's logits (speculative verifications).
    pub all_passes: Arc<AtomicUsize>,
    pool: Option<Arc<Mutex<BlockManager>>>,
}

impl HashModel {
    pub fn new(delay: Duration) -> Self {
        HashModel {
            delay,
            largest_batch: Arc::new(AtomicUsize::new(0)),
            task_runs: Arc::new(AtomicUsize::new(0)),
            largest_rows: Arc::new(AtomicUsize::new(0)),
            passes: Arc::new(AtomicUsize::new(0)),
            all_passes: Arc::new(AtomicUsize::new(0)),
            pool: None,
        }
    }

    pub fn row(history: &[u32]) -> Vec<f32> {
        let mut h: u64 = 0xcbf29ce484222325;
        for &t in history {
            h = (h ^ u64::from(t)).wrapping_mul(0x100000001b3);
        }
        let peak = if history.last() == Some(&DOT) {
            EOS
        } else {
            // Mostly letters, a space now and then, a '.' rarely.
            match h % 40 {
                0 => DOT,
                1..=6 => 27,
                x => 1 + (x % 26) as u32,
            }
        };
        let mut row: Vec<f32> = (0..VOCAB as u64)
            .map(|j| -(((j * 7 + h) % 13) as f32) * 0.3)
            .collect();
        row[peak as usize] = 3.0;
        row
    }

    fn run(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, CacheFull> {
        if cache.tokens.len() + tokens.len() > cache.capacity {
            return Err(CacheFull);
        }
        cache.tokens.extend_from_slice(tokens);
        Ok(Self::row(&cache.tokens))
    }
}

impl LanguageModel for HashModel {
    type Cache = Tokens;
    type Error = CacheFull;

    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn context_length(&self) -> usize {
        256
    }
    fn new_cache(&self, capacity: usize) -> Result<Tokens, CacheFull> {
        Ok(Tokens {
            tokens: Vec::new(),
            capacity,
            blocks: Vec::new(),
            pool: None,
        })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, CacheFull> {
        self.forward_batch(&mut [(tokens, cache)])
            .map(|mut rows| rows.remove(0))
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, CacheFull> {
        if cache.tokens.len() + tokens.len() > cache.capacity {
            return Err(CacheFull);
        }
        self.all_passes.fetch_add(1, Ordering::SeqCst);
        let mut rows = Vec::with_capacity(tokens.len() * VOCAB);
        for &t in tokens {
            cache.tokens.push(t);
            rows.extend(Self::row(&cache.tokens));
        }
        Ok(rows)
    }
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut Tokens)],
    ) -> Result<Vec<Vec<f32>>, CacheFull> {
        self.largest_batch.fetch_max(batch.len(), Ordering::SeqCst);
        let rows = batch.iter().map(|(tokens, _)| tokens.len()).sum();
        self.largest_rows.fetch_max(rows, Ordering::SeqCst);
        self.passes.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        batch
            .iter_mut()
            .map(|(tokens, cache)| self.run(tokens, cache))
            .collect()
    }
    /// On three threads, each claiming the next index (as the kernels' pool does), so the
    /// tests see a batch's sequences finished concurrently and out of order.
    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            break;
                        }
                        task(i);
                    }
                });
            }
        });
        self.task_runs.fetch_add(n, Ordering::SeqCst);
    }
}

impl PagedModel for HashModel {
    fn open_pool(&mut self, blocks: usize, block_size: usize, _: usize) -> Result<(), CacheFull> {
        let manager = BlockManager::new(blocks, block_size).map_err(|_| CacheFull)?;
        self.pool = Some(Arc::new(Mutex::new(manager)));
        Ok(())
    }
    fn pooled_cache(
        &self,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Option<(Tokens, usize)>, CacheFull> {
        let pool = self.pool.as_ref().ok_or(CacheFull)?;
        let mut m = pool.lock().unwrap();
        let bs = m.block_size();
        let mut blocks = m.match_prefix(prompt, prompt.len().saturating_sub(1) / bs);
        let fresh = m.blocks_for(capacity).saturating_sub(blocks.len());
        match m.allocate(fresh) {
            Ok(more) => {
                let reused = blocks.len() * bs;
                blocks.extend(more);
                let cache = Tokens {
                    tokens: prompt[..reused].to_vec(),
                    capacity,
                    blocks,
                    pool: Some(Arc::clone(pool)),
                };
                Ok(Some((cache, reused)))
            }
            Err(_) => {
                m.release_all(&blocks);
                Ok(None)
            }
        }
    }
    fn publish(&self, cache: &Tokens, tokens: &[u32]) -> usize {
        match &self.pool {
            Some(pool) => pool.lock().unwrap().publish(&cache.blocks, tokens),
            None => 0,
        }
    }
    fn pool_stats(&self) -> Option<BlockStats> {
        self.pool.as_ref().map(|p| p.lock().unwrap().stats())
    }
}

/// What the same request gives alone, through the plain generation loop (no server).
pub fn alone(
    prompt: &[u32],
    max_tokens: usize,
    sampler: SamplerConfig,
    stops: &[&str],
) -> (String, &'static str, usize) {
    let model = HashModel::new(Duration::ZERO);
    let mut session = Session::new(&model, prompt.len() + max_tokens).unwrap();
    let mut sampler = sampler.build().unwrap();
    sampler.set_prompt_len(prompt.len());
    let config = GenerationConfig::default()
        .with_max_new_tokens(max_tokens)
        .with_eog_token_ids([EOS])
        .with_stop_strings(stops.iter().copied());
    let summary = generate_to_end(
        &model,
        &mut session,
        prompt,
        &mut sampler,
        &Letters,
        &config,
    )
    .unwrap();
    let reason = match summary.finish_reason {
        kindle_generate::FinishReason::Stop => "stop",
        _ => "length",
    };
    (summary.text, reason, summary.generated_tokens)
}

/// Greedy, as the server sets it up for `temperature: 0` (OpenAI penalty scope; no penalty).
pub fn greedy() -> SamplerConfig {
    SamplerConfig {
        temperature: 0.0,
        penalty_scope: kindle_sampling::PenaltyScope::OutputOnly,
        penalty_last_n: -1,
        eog_ids: vec![EOS],
        ..SamplerConfig::neutral()
    }
}

/// Sampling at temperature 1 with a seed.
pub fn seeded(seed: u64) -> SamplerConfig {
    let mut config = greedy();
    config.temperature = 1.0;
    config.seed = Some(seed);
    config
}

/// A minimal HTTP/1.1 client on hyper's connection API: one connection per request, closed
/// when the reply (or the unfinished request) is dropped, as a browser tab closing would.
#[derive(Clone)]
pub struct Client {
    pub addr: String,
}

/// A request being built.
pub struct RequestBuilder {
    addr: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: BoxBody<Bytes, std::io::Error>,
}

/// An answer whose body is read as it comes.
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    body: Incoming,
    _conn: ConnGuard,
}

/// Aborts the connection task when dropped.
struct ConnGuard(JoinHandle<()>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Client {
    pub fn new(addr: impl Into<String>) -> Self {
        Client { addr: addr.into() }
    }

    pub fn request(&self, method: &str, path: &str) -> RequestBuilder {
        RequestBuilder {
            addr: self.addr.clone(),
            method: method.to_string(),
            path: path.to_string(),
            headers: Vec::new(),
            body: FullBody::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
        }
    }

    pub fn post(&self, path: &str) -> RequestBuilder {
        self.request("POST", path)
    }

    pub fn get(&self, path: &str) -> RequestBuilder {
        self.request("GET", path)
    }
}

impl RequestBuilder {
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = FullBody::new(Bytes::from(body.into()))
            .map_err(|never| match never {})
            .boxed();
        self
    }

    /// A body sent in these chunks with no length up front (chunked transfer encoding).
    pub fn chunked_body(mut self, chunks: Vec<Vec<u8>>) -> Self {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Frame::data(Bytes::from(c))));
        self.body = StreamBody::new(futures_util::stream::iter(frames)).boxed();
        self
    }

    pub async fn send(self) -> Reply {
        let stream = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let guard = ConnGuard(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let mut request = hyper::Request::builder()
            .method(self.method.as_str())
            .uri(&self.path)
            .header("host", &self.addr);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = sender
            .send_request(request.body(self.body).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            _conn: guard,
        }
    }
}

impl Reply {
    /// The next piece of the body, `None` at its end.
    pub async fn chunk(&mut self) -> Option<Bytes> {
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame.expect("reading the body").into_data() {
                return Some(data);
            }
        }
        None
    }

    pub async fn text(mut self) -> String {
        let mut raw = Vec::new();
        while let Some(chunk) = self.chunk().await {
            raw.extend_from_slice(&chunk);
        }
        String::from_utf8(raw).expect("a UTF-8 body")
    }
}

/// A server on 127.0.0.1 with a free port.
pub struct TestServer {
    pub base: String,
    pub addr: String,
    pub client: Client,
    pub model: HashModel,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), kindle_server::ServerError>>>,
}

/// The defaults of the tests: context 256, 4 parallel, queue 16.
pub fn config() -> ServerConfig {
    let mut config = ServerConfig::new("toy", 256);
    config.parallel = 4;
    config.queue = 16;
    config.drain_timeout = Duration::from_secs(10);
    config
}

/// `body` with the fields of `extra` set over it.
pub fn with(mut body: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

impl TestServer {
    pub async fn start(config: ServerConfig, delay: Duration) -> TestServer {
        Self::start_drafting(config, delay, None).await
    }

    /// A server whose requests draft with `drafting` unless they say otherwise.
    pub async fn start_drafting(
        config: ServerConfig,
        delay: Duration,
        drafting: Option<kindle_server::draft::Drafting>,
    ) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let base = format!("http://{addr}");
        let model = HashModel::new(delay);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(kindle_server::serve(
            listener,
            model.clone(),
            drafting,
            Letters,
            config,
            async move {
                let _ = rx.await;
            },
        ));
        TestServer {
            base,
            client: Client::new(addr.clone()),
            addr,
            model,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST a JSON body; the status and the parsed JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        let status = response.status;
        let text = response.text().await;
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON {text:?}: {e}"));
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let response = self.client.get(path).send().await;
        (response.status, response.text().await)
    }

    /// POST a streaming request and read every SSE `data:` payload to the end.
    pub async fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let response = self
            .client
            .post(path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        assert_eq!(response.status, 200);
        assert_eq!(
            response.headers["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        let text = response.text().await;
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        text.split("\n\n")
            .filter(|event| !event.is_empty())
            .map(|event| {
                event
                    .strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data line: {event:?}"))
                    .to_string()
            })
            .collect()
    }

    /// A metric's value from `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    }

    /// Wait (up to 5 s) until a metric shows `value`: the engine updates its gauges at the end
    /// of the step in which it answered.
    pub async fn settle(&self, name: &str, value: f64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.metric(name).await;
            if now == value {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} stays at {now}, expected {value}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Signal shutdown and wait for `serve` to return.
    pub async fn stop(mut self) {
        self.begin_stop();
        self.join().await;
    }

    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn join(&mut self) {
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("the server drains and returns")
                .unwrap()
                .unwrap();
        }
    }
}
