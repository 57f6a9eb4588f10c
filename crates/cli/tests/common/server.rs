//! `kindle serve` as a child process on a free loopback port, and a minimal HTTP/1.1 client
//! for the tests that talk to it (the server itself is axum; this is only the tests' side).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A ChatML template that lists the request's tools and renders earlier calls and results in
/// the Hermes format (as Qwen's templates do).
pub const TOOLS_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nTools:\
    {% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n\
    Call one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.<|im_end|>\n{% endif %}\
    {% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
    {% for call in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ call.function.name }}\", \
    \"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>{% endfor %}\
    <|im_end|>\n{% endfor %}<|im_start|>assistant\n";

/// A running `kindle serve`.
pub struct Served {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The line it printed its address in.
    pub banner: String,
    /// What it printed to standard error (behind a lock so that request threads can share a
    /// `&Served`).
    stderr: Mutex<mpsc::Receiver<String>>,
}

impl Served {
    /// Start `kindle serve -m model --port 0 extra...` and wait (up to 2 minutes) for the line
    /// that names its address.
    pub fn start(model: &Path, extra: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kindle"))
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(["--port", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kindle serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        return Served {
                            child,
                            addr: addr.to_string(),
                            banner: line.clone(),
                            stderr: Mutex::new(rx),
                        };
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("kindle serve did not print its address in time");
                }
            }
        }
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// POST JSON; the status and the parsed answer.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = http(&self.addr, "POST", path, Some(&body.to_string()));
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path}: {status} with non-JSON {text:?}: {e}"));
        (status, value)
    }

    /// POST JSON asking for a stream; the status and each server-sent event's data.
    pub fn post_stream(&self, path: &str, body: &Value) -> (u16, Vec<String>) {
        let (status, text) = http(&self.addr, "POST", path, Some(&body.to_string()));
        let events = text
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .map(str::to_string)
            .collect();
        (status, events)
    }

    /// GET; the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        http(&self.addr, "GET", path, None)
    }

    /// Send SIGTERM and wait for the process to exit.
    pub fn terminate(mut self) -> (ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("running kill");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for kindle serve") {
                let lines: Vec<String> = self
                    .stderr
                    .lock()
                    .map(|rx| rx.try_iter().collect())
                    .unwrap_or_default();
                return (status, lines);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("kindle serve did not exit within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange with `Connection: close`; the status and the body (chunked
/// transfer decoded).
pub fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connecting to kindle serve");
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .expect("a read timeout");
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("sending");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reading the answer");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a header block");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

/// The text of `kindle generate --json ARGS... PROMPT` (what a server's greedy reply is
/// checked against).
pub fn generated_text(args: &[&str], prompt: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kindle"))
        .args(["generate", "--json"])
        .args(args)
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
