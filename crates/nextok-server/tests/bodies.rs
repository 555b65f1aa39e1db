//! The Router in-process (`tower::ServiceExt::oneshot`): arbitrary JSON and mutated valid bodies
//! never produce a 500 or a panic, and a server still loading answers 503.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{engine, MODEL};
use http_body_util::BodyExt;
use nextok::{Scheduler, SchedulerOptions};
use nextok_server::{Router, Server, ServerConfig};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

/// A runtime and a ready router whose answers are at most 2 tokens long, so that the bodies that
/// are valid cost little to run.
fn fixture() -> &'static (tokio::runtime::Runtime, Router) {
    static FIXTURE: OnceLock<(tokio::runtime::Runtime, Router)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let scheduler = Arc::new(Scheduler::new(engine(), SchedulerOptions::default()).unwrap());
        let config = ServerConfig::new(MODEL).with_max_tokens_limit(Some(2));
        let router = Server::with_scheduler(config, scheduler).unwrap().router();
        (runtime, router)
    })
}

/// Sends `body` to `path` in-process and returns the status and the whole body.
fn send(router: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let runtime = &fixture().0;
    runtime.block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, bytes.to_vec())
    })
}

/// Every known field's name, and some that are not, so that mutations hit real fields.
const KEYS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "n",
    "stop",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "response_format",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "include_stop_str_in_output",
    "grammar",
    "regex",
    "choice",
    "logprobs",
    "top_logprobs",
    "tools",
    "stop_token_ids",
    "echo",
    "best_of",
    "user",
    "content",
    "tokens",
    "role",
    "type",
    "json_schema",
    "schema",
    "include_usage",
    "",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|x| json!(x)),
        prop_oneof![
            Just(0.0),
            Just(1.0),
            Just(2.0),
            Just(-0.5),
            Just(1e300),
            Just(0.5)
        ]
        .prop_map(|x: f64| json!(x)),
        "[a-z<>|{}\\[\\]()*+?:=\" ]{0,12}".prop_map(Value::String),
        prop::sample::select(KEYS).prop_map(|k| json!(k)),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(KEYS).prop_map(String::from),
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn valid_chat() -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "temperature": 0.7,
        "seed": 1,
        "max_tokens": 2,
        "stop": ["\n"],
    })
}

fn valid_completion() -> Value {
    json!({ "prompt": "Once upon", "max_tokens": 2, "logprobs": 2, "seed": 4 })
}

/// A valid body with one field replaced by an arbitrary value, added, or removed.
fn mutated() -> impl Strategy<Value = (bool, Value)> {
    (
        any::<bool>(),
        prop::sample::select(KEYS),
        json_value(),
        any::<bool>(),
    )
        .prop_map(|(chat, key, value, remove)| {
            let mut body = if chat {
                valid_chat()
            } else {
                valid_completion()
            };
            let object = body.as_object_mut().unwrap();
            if remove {
                object.remove(key);
            } else {
                object.insert(key.to_string(), value);
            }
            (chat, body)
        })
}

/// A refusal is OpenAI's envelope and never a 500; an answer is JSON or an event stream.
fn check(status: StatusCode, body: &[u8], sent: &str) {
    assert!(
        !status.is_server_error(),
        "{status} for {sent}: {}",
        String::from_utf8_lossy(body)
    );
    if status.is_client_error() {
        let v: Value = serde_json::from_slice(body).expect("a JSON error");
        assert!(v["error"]["message"].is_string(), "{sent} -> {v}");
    } else if !body.starts_with(b"data:") {
        let v: Value = serde_json::from_slice(body).expect("a JSON answer");
        assert!(v.is_object(), "{sent} -> {v}");
    }
}

const PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/tokenize",
    "/detokenize",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_is_never_a_500(value in json_value(), path in prop::sample::select(PATHS)) {
        let router = &fixture().1;
        let sent = value.to_string();
        let (status, body) = send(router, path, sent.clone().into_bytes());
        check(status, &body, &sent);
    }

    #[test]
    fn arbitrary_bytes_are_never_a_500(bytes in prop::collection::vec(any::<u8>(), 0..64), path in prop::sample::select(PATHS)) {
        let router = &fixture().1;
        let (status, body) = send(router, path, bytes.clone());
        check(status, &body, &String::from_utf8_lossy(&bytes));
        prop_assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn mutated_valid_bodies_are_never_a_500((chat, value) in mutated()) {
        let router = &fixture().1;
        let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
        let sent = value.to_string();
        let (status, body) = send(router, path, sent.clone().into_bytes());
        check(status, &body, &sent);
    }
}

#[test]
fn the_unmutated_bodies_are_answered() {
    let router = &fixture().1;
    for (path, body) in [
        ("/v1/chat/completions", valid_chat()),
        ("/v1/completions", valid_completion()),
    ] {
        let (status, bytes) = send(router, path, body.to_string().into_bytes());
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= 2);
    }
}

#[test]
fn a_server_still_loading_answers_503_with_retry_after_but_serves_metrics() {
    let server = Server::new(ServerConfig::new(MODEL)).unwrap();
    let router = server.router();
    let runtime = &fixture().0;
    runtime.block_on(async {
        for (method, path) in [
            ("GET", "/health"),
            ("GET", "/v1/models"),
            ("POST", "/v1/chat/completions"),
            ("POST", "/tokenize"),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(Body::from("{}"))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{path}");
            assert!(response.headers().contains_key("retry-after"), "{path}");
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["error"]["code"], "model_loading", "{path}");
        }
        let request = Request::get("/metrics").body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert_eq!(common::metric(&text, "nextok_requests_running"), 0.0);
    });
    // Once ready it answers; a second hand-over is refused.
    let scheduler = Arc::new(Scheduler::new(engine(), SchedulerOptions::default()).unwrap());
    server.set_ready(scheduler.clone()).unwrap();
    assert!(server.is_ready());
    assert_eq!(
        server.set_ready(scheduler),
        Err(nextok_server::Error::AlreadyReady)
    );
    runtime.block_on(async {
        let request = Request::get("/health").body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    });
    server.begin_shutdown();
    runtime.block_on(async {
        let request = Request::get("/health").body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    });
}
