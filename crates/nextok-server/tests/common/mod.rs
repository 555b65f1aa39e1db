//! The real server on a free port, with the real default model (SmolLM2-135M-Instruct Q4_1,
//! found through `NEXTOK_MODEL` or the default path; a missing model fails the test, never skips
//! it), and helpers to talk to it over the socket.

#![allow(dead_code)]

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use nextok::{Engine, EngineOptions, Scheduler, SchedulerOptions};
use nextok_server::{Server, ServerConfig};
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The name the test servers serve the model under.
pub const MODEL: &str = "smollm2-test";

/// The real default model, loaded once per test binary.
pub fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(own_engine).clone()
}

/// The real default model loaded anew, for a test whose figures must be its own.
pub fn own_engine() -> Arc<Engine> {
    let path = nextok::default_model_path().expect("a cache folder for the default model");
    assert!(
        path.is_file(),
        "the default model is not at {}: run `cargo xtask fetch-model` or set NEXTOK_MODEL",
        path.display()
    );
    Arc::new(Engine::load(&path, &EngineOptions::default()).expect("the default model loads"))
}

/// A server running on its own runtime for the rest of the test binary.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The server (its scheduler, for figures).
    pub server: Server,
}

/// Starts a server with `config` over a fresh scheduler with `options`, on a free port.
pub fn start(config: ServerConfig, options: SchedulerOptions) -> TestServer {
    start_on(engine(), config, options)
}

/// [`start`] on an engine of the test's own (other schema options, ...).
pub fn start_on(
    engine: Arc<Engine>,
    config: ServerConfig,
    options: SchedulerOptions,
) -> TestServer {
    let scheduler = Arc::new(Scheduler::new(engine, options).expect("the scheduler starts"));
    let server = Server::with_scheduler(config, scheduler).expect("a valid configuration");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking socket");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let router = server.router();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            nextok_server::serve(listener, router, std::future::pending())
                .await
                .expect("the server runs");
        });
    });
    TestServer { url, server }
}

/// The server most tests share: default configuration and scheduler.
pub fn shared() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| start(ServerConfig::new(MODEL), SchedulerOptions::default()))
}

/// A client that opens a new connection per request, with a generous bound so that a hung
/// server fails the test instead of hanging it.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a client")
}

/// POSTs `body` and returns the status and the JSON answer.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = client()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let json = response.json().await.expect("a JSON body");
    (status, json)
}

/// GETs `url` and returns the status and the body as text.
pub async fn get(url: &str) -> (u16, String) {
    let response = client().get(url).send().await.expect("the server answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// POSTs a streaming request and returns every `data:` payload in order (`[DONE]` included).
pub async fn stream(url: &str, body: &Value) -> Vec<String> {
    let response = client()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(
        response.status().as_u16(),
        200,
        "a streamed request is accepted"
    );
    assert!(response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream")));
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while let Some(event) = events.next().await {
        out.push(event.expect("a well-formed event").data);
    }
    out
}

/// The value of a metric (a line `NAME VALUE`) in Prometheus text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// Polls `/metrics` until `done` holds, at most `tries` times a quarter of a second apart; the
/// last text either way. A bound on polling, not a timing assertion: the property is checked
/// on the text.
pub async fn metrics_until(url: &str, tries: usize, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..tries {
        text = get(&format!("{url}/metrics")).await.1;
        if done(&text) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    text
}

/// The concatenated content deltas of a streamed chat (choice `index`).
pub fn deltas(events: &[String], index: u64) -> String {
    let mut text = String::new();
    for e in events {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(e).expect("a JSON chunk");
        for c in v["choices"].as_array().into_iter().flatten() {
            if c["index"].as_u64() == Some(index) {
                if let Some(t) = c["delta"]["content"].as_str() {
                    text.push_str(t);
                }
                if let Some(t) = c["text"].as_str() {
                    text.push_str(t);
                }
            }
        }
    }
    text
}
