//! The playground at `/`, driven in headless Chromium through chromedriver (WebDriver): type a
//! prompt, press send, see the text stream in with every token coloured by its probability and
//! its top 5 on hover, press stop (the server cancels the sequence), switch to prompt mode, and
//! save a screenshot (`$CARGO_TARGET_TMPDIR/playground.png`).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). Without them the
//! test fails saying so; `KINDLE_SKIP_BROWSER=1` skips it instead (CI never sets it).
//! `KINDLE_CHROMEDRIVER` and `KINDLE_CHROMIUM` override where the two are looked for.
//!
//! The WebDriver calls go through the tests' own hyper client (`WebDriver` below: eight JSON
//! endpoints of the W3C protocol). The `fantoccini` crate would do the same, but it brings
//! `webdriver` → ICU → `yoke-derive`, which turns on `syn`'s `fold` feature in the test build
//! only, so `cargo test --workspace` would rebuild every proc macro and everything above
//! them (Burn included) instead of sharing `cargo run`'s build.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Client, Letters, TestServer, alone, config, greedy};
use serde_json::{Value, json};

/// The W3C name of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One WebDriver session with chromedriver.
struct WebDriver {
    client: Client,
    session: String,
}

impl WebDriver {
    /// A headless Chromium session.
    async fn open(driver: &Driver, chromium: &Path) -> WebDriver {
        let client = Client::new(driver.addr.clone());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,860"],
            },
        }}});
        let answer = call(&client, "POST", "/session", Some(caps)).await;
        let session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session from chromedriver: {answer}"))
            .to_string();
        WebDriver { client, session }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        call(&self.client, method, &path, body).await
    }

    async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    async fn title(&self) -> String {
        self.cmd("GET", "/title", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The first element matching a CSS selector.
    async fn find(&self, css: &str) -> String {
        let found = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    /// Clear a field and type `text` into it (real key events).
    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.cmd("POST", &format!("/element/{id}/clear"), Some(json!({})))
            .await;
        if !text.is_empty() {
            self.cmd(
                "POST",
                &format!("/element/{id}/value"),
                Some(json!({"text": text})),
            )
            .await;
        }
    }

    /// Move the mouse onto the element's centre (a real pointer move, so hover handlers run).
    async fn hover(&self, css: &str) {
        let id = self.find(css).await;
        let actions = json!({"actions": [{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "duration": 50, "x": 0, "y": 0,
                         "origin": {ELEMENT: id}}],
        }]});
        self.cmd("POST", "/actions", Some(actions)).await;
    }

    async fn execute(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    async fn screenshot(&self) -> Vec<u8> {
        let encoded = self.cmd("GET", "/screenshot", None).await;
        base64_decode(encoded.as_str().expect("a base64 screenshot"))
    }

    async fn close(self) {
        call(
            &self.client,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        )
        .await;
    }
}

/// One WebDriver command: its `value`, or a panic naming the WebDriver error.
async fn call(client: &Client, method: &str, path: &str, body: Option<Value>) -> Value {
    let mut request = client.request(method, path);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let reply = request.send().await;
    let status = reply.status;
    let text = reply.text().await;
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: {status} {text:?}: {e}"));
    assert_eq!(status, 200, "{method} {path}: {answer}");
    answer["value"].clone()
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?}"),
        }
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().fold(0u32, |acc, &c| (acc << 6) | value(c)) << (6 * (4 - chunk.len()));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    addr: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(var: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var) {
        return Some(PathBuf::from(path));
    }
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// Where chromedriver and chromium are; `None` only when the test is opted out.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let driver = find(
        "KINDLE_CHROMEDRIVER",
        &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
    );
    let chromium = find(
        "KINDLE_CHROMIUM",
        &["/usr/bin/chromium", "/usr/lib/chromium/chromium"],
    );
    match (driver, chromium) {
        (Some(d), Some(c)) => Some((d, c)),
        _ if std::env::var_os("KINDLE_SKIP_BROWSER").is_some() => {
            eprintln!("playground browser test skipped (KINDLE_SKIP_BROWSER is set)");
            None
        }
        (d, c) => panic!(
            "the playground test needs headless Chromium and chromedriver (found driver {d:?}, \
             browser {c:?}); on Debian: apt-get install chromium chromium-driver (as .ci/run \
             does), or set KINDLE_SKIP_BROWSER=1 to skip this test"
        ),
    }
}

fn start_driver(path: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
    let driver = Driver {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

/// Run a script in the page and return its value.
async fn js(browser: &WebDriver, script: &str) -> Value {
    browser.execute(script).await
}

/// Poll `script` until it returns true (up to `secs` seconds).
async fn wait_until(browser: &WebDriver, script: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if js(browser, script).await == Value::Bool(true) {
            return;
        }
        if Instant::now() > deadline {
            let status = js(
                browser,
                "return document.getElementById('status').textContent",
            )
            .await;
            panic!("timed out waiting for `{script}`; status line: {status}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_streams_colours_tokens_and_stops_in_a_real_browser() {
    let Some((driver_path, chromium)) = browser() else {
        return; // KINDLE_SKIP_BROWSER=1
    };
    // Slow steps (40 ms a token) so that stop lands mid-stream.
    let server = TestServer::start(config(), Duration::from_millis(40)).await;
    let driver = start_driver(&driver_path);
    let page = WebDriver::open(&driver, &chromium).await;

    page.goto(&server.url("/")).await;
    assert_eq!(page.title().await, "kindle playground");
    // The page lists the served model from /v1/models.
    wait_until(
        &page,
        "return document.getElementById('model').textContent === 'toy'",
        10,
    )
    .await;

    // Chat mode (the default), greedy, long enough to be stopped.
    page.type_into("#temperature", "0").await;
    page.type_into("#max_tokens", "200").await;
    page.type_into("#prompt", "once upon a time").await;
    page.click("#send").await;
    wait_until(
        &page,
        "return document.querySelectorAll('#output .tok').length >= 8",
        20,
    )
    .await;
    assert_eq!(server.metric("kindle_sequences_running").await, 1.0);

    // Every token is a coloured span with its probability and its top alternatives.
    let tokens = js(
        &page,
        "return [...document.querySelectorAll('#output .tok')].map(t => \
         ({text: t.textContent, p: parseFloat(t.dataset.p), top: t.dataset.top, \
           bg: getComputedStyle(t).backgroundColor}))",
    )
    .await;
    let tokens = tokens.as_array().unwrap().clone();
    for token in &tokens {
        let p = token["p"].as_f64().unwrap();
        assert!(p > 0.0 && p <= 1.0, "{token}");
        let bg = token["bg"].as_str().unwrap();
        assert!(
            bg.starts_with("rgb") && bg != "rgba(0, 0, 0, 0)",
            "uncoloured: {token}"
        );
        // The sampler's trace: how sure, what the chain kept (greedy here), the candidates
        // (at least the top 5) before and after the chain.
        let top = token["top"].as_str().unwrap();
        let lines: Vec<&str> = top.lines().collect();
        assert!(lines[0].starts_with("p = ") && lines.len() >= 9, "{top}");
        assert!(
            lines[1].starts_with("rank 1, after the chain p = 1.000"),
            "{top}"
        );
        // The page's default top-p and min-p run before greedy's argmax.
        assert!(
            lines[2].contains(" tokens → top_p kept ") && lines[2].ends_with("→ greedy kept 1"),
            "{top}"
        );
        assert_eq!(
            lines[4..].iter().filter(|l| l.ends_with("1.000")).count(),
            1,
            "one candidate has all the mass after greedy: {top}"
        );
    }

    // Hovering a token shows its trace in the tooltip.
    page.hover("#output .tok").await;
    wait_until(
        &page,
        "return document.getElementById('tip').style.display === 'block'",
        5,
    )
    .await;
    let tip = js(&page, "return document.getElementById('tip').textContent").await;
    let tip = tip.as_str().unwrap();
    assert!(tip.starts_with("p = ") && tip.lines().count() >= 9, "{tip}");
    assert!(tip.contains("greedy kept 1"), "{tip}");

    // Stop: the request is aborted, the server drops the sequence.
    page.click("#stop").await;
    wait_until(
        &page,
        "return document.getElementById('status').textContent === 'stopped'",
        10,
    )
    .await;
    server.settle("kindle_sequences_running", 0.0).await;
    let shown = js(
        &page,
        "return document.querySelector('#output .reply').textContent",
    )
    .await;
    let shown = shown.as_str().unwrap().to_string();
    let chat_prompt = Letters::ids("user:once upon a time\nassistant:").unwrap();
    let (whole, _, _) = alone(&chat_prompt, 200, greedy(), &[]);
    assert!(
        shown.len() >= tokens.len() && whole.starts_with(&shown) && shown.len() < whole.len(),
        "the page shows {shown:?}, not a strict prefix of the greedy answer {whole:?}"
    );

    // Prompt mode runs to the end and reports the finish reason.
    page.click("#clear").await;
    page.click("#mode-prompt").await;
    page.type_into("#max_tokens", "6").await;
    page.type_into("#prompt", "the cat").await;
    page.click("#send").await;
    let done = "return document.getElementById('status').textContent.startsWith('done (')";
    wait_until(&page, done, 20).await;
    let shown = js(
        &page,
        "return document.querySelector('#output .reply').textContent",
    )
    .await;
    let (expected, reason, count) = alone(&Letters::ids("the cat").unwrap(), 6, greedy(), &[]);
    assert_eq!(shown.as_str().unwrap(), expected);
    let status = js(
        &page,
        "return document.getElementById('status').textContent",
    )
    .await;
    assert!(
        status
            .as_str()
            .unwrap()
            .starts_with(&format!("done ({reason}): {count} tokens")),
        "{status}"
    );

    // Once more in chat mode, sampled, for the screenshot.
    page.click("#clear").await;
    page.click("#mode-chat").await;
    page.type_into("#temperature", "0.8").await;
    page.type_into("#seed", "7").await;
    page.type_into("#max_tokens", "60").await;
    page.type_into("#prompt", "tell me a story").await;
    page.click("#send").await;
    wait_until(&page, done, 30).await;
    page.hover("#output .tok:nth-of-type(3)").await;
    let png = page.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("playground.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("playground screenshot: {}", path.display());

    page.close().await;
    drop(driver);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_is_one_self_contained_page_served_without_the_key() {
    let mut cfg = config();
    cfg.api_key = Some("sesame".into());
    let server = TestServer::start(cfg, Duration::ZERO).await;
    let reply = server.client.get("/").send().await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.headers["content-type"].to_str().unwrap(),
        "text/html; charset=utf-8"
    );
    let page = reply.text().await;
    assert!(page.contains("<title>kindle playground</title>"));
    // Nothing loaded from elsewhere: no CDN, no external script or style.
    for needle in ["http://", "https://", "src=", "<link"] {
        assert!(!page.contains(needle), "the page references {needle:?}");
    }
    // The API itself still needs the key.
    let (status, _) = server.get("/v1/models").await;
    assert_eq!(status, 401);
    server.stop().await;
}
