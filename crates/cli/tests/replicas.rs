//! Two `kindle serve` replicas behind nginx on loopback (the configuration of
//! docs/deploy.md): requests spread over both, streams pass through unbuffered, and when one
//! replica is stopped (SIGTERM) under load every request still succeeds with the same greedy
//! text: the stopping replica finishes what it runs and answers 503 to new requests, which
//! nginx retries on the other; once it has exited, nginx's connection errors are retried too.
//!
//! Needs Debian's `nginx` (`.ci/run` installs it). Without it the test fails saying so;
//! `KINDLE_SKIP_NGINX=1` skips it instead (CI never sets it). `KINDLE_NGINX` overrides the
//! binary.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::server::{Served, http};
use serde_json::{Value, json};

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "The three primary colors are",
];
const MAX_TOKENS: usize = 8;

/// nginx in the foreground on a free port, killed on drop.
struct Nginx {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nginx_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KINDLE_NGINX") {
        return Some(PathBuf::from(path));
    }
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var_os("KINDLE_SKIP_NGINX").is_some() {
            eprintln!("replica test skipped (KINDLE_SKIP_NGINX is set)");
            return None;
        }
        panic!(
            "the replica test needs nginx; on Debian: apt-get install nginx (as .ci/run does), \
             or set KINDLE_SKIP_NGINX=1 to skip this test"
        );
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The load-balancing part of docs/deploy.md's configuration, for these upstreams.
fn nginx_conf(port: u16, upstreams: &[&str]) -> String {
    let servers: String = upstreams
        .iter()
        .map(|a| format!("        server {a} max_fails=1 fail_timeout=10s;\n"))
        .collect();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
error_log error.log info;
pid nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log access.log;
    client_body_temp_path body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    upstream kindle {{
        least_conn;
{servers}        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 4m;
        location / {{
            proxy_pass http://kindle;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }}
        location = /health {{
            proxy_pass http://kindle;
            proxy_next_upstream error timeout http_503;
        }}
    }}
}}
"#
    )
}

fn start_nginx(binary: &Path, upstreams: &[&str]) -> Nginx {
    let port = free_port();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nginx-{port}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(port, upstreams)).unwrap();
    let child = Command::new(binary)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
    let nginx = Nginx {
        child,
        addr: format!("127.0.0.1:{port}"),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&nginx.addr).is_err() {
        let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "nginx did not listen: {log}");
        std::thread::sleep(Duration::from_millis(50));
    }
    nginx
}

fn completion(addr: &str, prompt: &str) -> (u16, String) {
    let body = json!({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}).to_string();
    let (status, text) = http(addr, "POST", "/v1/completions", Some(&body));
    if status != 200 {
        return (status, text);
    }
    let value: Value = serde_json::from_str(&text).unwrap();
    (
        status,
        value["choices"][0]["text"].as_str().unwrap().to_string(),
    )
}

fn requests_answered(replica: &Served) -> f64 {
    let (_, metrics) = replica.get("/metrics");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("kindle_requests_total{status=\"200\"} "))
        .map(|v| v.parse::<f64>().unwrap())
        .sum()
}

#[test]
fn two_replicas_behind_nginx_survive_one_stopping_under_load() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let Some(nginx_bin) = nginx_binary() else {
        return; // KINDLE_SKIP_NGINX=1
    };
    let flags = [
        "--parallel",
        "4",
        "-c",
        "256",
        "-t",
        "1",
        "--drain-timeout",
        "30",
    ];
    let first = Served::start(&model, &flags);
    let second = Served::start(&model, &flags);
    let nginx = start_nginx(&nginx_bin, &[&first.addr, &second.addr]);

    // The greedy texts, from one replica directly.
    let expected: Vec<String> = PROMPTS
        .iter()
        .map(|p| {
            let (status, text) = completion(&second.addr, p);
            assert_eq!(status, 200, "{text}");
            text
        })
        .collect();

    // Through nginx: health, a stream passed through unbuffered to its [DONE].
    let (status, _) = http(&nginx.addr, "GET", "/health", None);
    assert_eq!(status, 200);
    let stream = json!({"prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0,
                        "stream": true})
    .to_string();
    let (status, events) = http(&nginx.addr, "POST", "/v1/completions", Some(&stream));
    assert_eq!(status, 200, "{events}");
    assert!(events.ends_with("data: [DONE]\n\n"), "{events}");

    // Load: 3 clients, 10 requests each, one after another; after the 6th answer the first
    // replica gets SIGTERM.
    let answered = AtomicUsize::new(0);
    let (results, stopped) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..3)
            .map(|c| {
                let (nginx, answered, expected) = (&nginx, &answered, &expected);
                scope.spawn(move || {
                    (0..10)
                        .map(|i| {
                            let k = (c + i) % PROMPTS.len();
                            let (status, text) = completion(&nginx.addr, PROMPTS[k]);
                            answered.fetch_add(1, Ordering::SeqCst);
                            (status, text == expected[k], text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        while answered.load(Ordering::SeqCst) < 6 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let served_by_first = requests_answered(&first);
        let (status, lines) = first.terminate();
        let results: Vec<_> = clients
            .into_iter()
            .flat_map(|c| c.join().expect("a client thread"))
            .collect();
        (results, (served_by_first, status, lines))
    });
    let (served_by_first, status, lines) = stopped;
    assert!(status.success(), "the stopped replica exits 0: {lines:?}");
    assert!(
        served_by_first > 0.0,
        "nginx sent the first replica nothing before it stopped"
    );
    assert_eq!(results.len(), 30);
    for (status, same, text) in &results {
        assert_eq!(
            *status, 200,
            "a request failed while a replica stopped: {text}"
        );
        assert!(
            same,
            "an answer differs from the replica's greedy text: {text:?}"
        );
    }
    // The survivor answered the rest.
    assert!(requests_answered(&second) >= 30.0 - served_by_first);
    let (status, _) = http(&nginx.addr, "GET", "/health", None);
    assert_eq!(status, 200, "health through nginx with one replica left");
    drop(nginx);
    let (status, lines) = second.terminate();
    assert!(status.success(), "{lines:?}");
}
