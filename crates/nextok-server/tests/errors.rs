//! Every refusal over the socket: its status, OpenAI's envelope, and the field it names.

mod common;

use common::{client, engine, shared};
use serde_json::{json, Value};

/// Sends `body` (raw bytes) to `path` and returns the status, the headers' `Retry-After`, and
/// the envelope, checked for OpenAI's shape.
async fn refused(path: &str, body: Vec<u8>) -> (u16, Value) {
    let s = shared();
    let response = client()
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let v: Value = response.json().await.expect("a JSON error");
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    (status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_400s_that_name_the_field() {
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        serde_json::to_vec(&body).unwrap()
    };
    // (body, status, param, a word the message must hold)
    let cases: Vec<(Vec<u8>, u16, Value, &str)> = vec![
        (b"{".to_vec(), 400, Value::Null, "JSON"),
        (b"[1, 2]".to_vec(), 400, Value::Null, "object"),
        (
            chat(json!({"temperature": 5})),
            400,
            json!("temperature"),
            "temperature",
        ),
        (
            chat(json!({"temperature": "hot"})),
            400,
            json!("temperature"),
            "temperature",
        ),
        (chat(json!({"top_p": -1})), 400, json!("top_p"), "top_p"),
        // The stages of issue #16: the library's range checks, under the field's name.
        (
            chat(json!({"typical_p": 0})),
            400,
            json!("typical_p"),
            "typical_p",
        ),
        (
            chat(json!({"mirostat": 3})),
            400,
            json!("mirostat"),
            "mirostat",
        ),
        (
            chat(json!({"dry_base": 0.5})),
            400,
            json!("dry_base"),
            "dry_base",
        ),
        (
            chat(json!({"xtc_probability": "often"})),
            400,
            json!("xtc_probability"),
            "xtc_probability",
        ),
        (
            chat(json!({"tools": [{"type": "function"}]})),
            400,
            json!("tools"),
            "tools",
        ),
        (
            chat(json!({"stop_token_ids": [4000000000u32]})),
            400,
            json!("stop_token_ids"),
            "stop_token_ids",
        ),
        (
            chat(json!({"frobnicate": 1})),
            400,
            json!("frobnicate"),
            "frobnicate",
        ),
        (chat(json!({"prompt": "x"})), 400, json!("prompt"), "prompt"),
        (chat(json!({"n": 0})), 400, json!("n"), "n"),
        (chat(json!({"n": 100000})), 400, json!("n"), "n"),
        (
            chat(json!({"max_tokens": 0})),
            400,
            json!("max_tokens"),
            "max_tokens",
        ),
        (
            chat(json!({"max_tokens": -3})),
            400,
            json!("max_tokens"),
            "max_tokens",
        ),
        (chat(json!({"seed": -1})), 400, json!("seed"), "seed"),
        (
            chat(json!({"logit_bias": {"99999999": 1}})),
            400,
            json!("logit_bias"),
            "vocabulary",
        ),
        (
            chat(json!({"logit_bias": {"5": 1000}})),
            400,
            json!("logit_bias"),
            "-100",
        ),
        (
            chat(json!({"top_logprobs": 3})),
            400,
            json!("top_logprobs"),
            "logprobs",
        ),
        (
            chat(json!({"stop": ["a", ""]})),
            400,
            json!("stop"),
            "empty",
        ),
        (
            chat(json!({"regex": "[0-9]+", "choice": ["a"]})),
            400,
            json!("choice"),
            "only one",
        ),
        (chat(json!({"regex": "("})), 400, json!("regex"), "regex"),
        (
            chat(json!({"grammar": "root ::= (\"a\""})),
            400,
            json!("grammar"),
            "grammar",
        ),
        (
            chat(json!({"response_format": {"type": "xml"}})),
            400,
            json!("response_format"),
            "response_format",
        ),
        (
            chat(json!({"messages": []})),
            400,
            json!("messages"),
            "at least one",
        ),
        (
            chat(json!({"messages": [{"role": "tool", "content": "x"}]})),
            400,
            json!("messages"),
            "tool",
        ),
        (
            chat(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            ),
            400,
            json!("messages"),
            "image_url",
        ),
        (
            chat(json!({"messages": [{"role": "user", "content": "x", "name": "bob"}]})),
            400,
            json!("messages"),
            "name",
        ),
        (
            chat(json!({"messages": [{"role": "<|im_start|>user", "content": "x"}]})),
            400,
            json!("messages"),
            "role",
        ),
    ];
    for (body, status, param, word) in cases {
        let shown = String::from_utf8_lossy(&body).into_owned();
        let (got, v) = refused("/v1/chat/completions", body).await;
        assert_eq!(got, status, "{shown} -> {v}");
        assert_eq!(v["error"]["param"], param, "{shown} -> {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(word),
            "{shown} -> {v}"
        );
        assert_eq!(v["error"]["type"], "invalid_request_error", "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_context_window_is_a_400_with_both_counts() {
    let context = engine().context_window();
    let ids = vec![28_u32; context + 5];
    let body = serde_json::to_vec(&json!({ "prompt": ids, "max_tokens": 1 })).unwrap();
    let (status, v) = refused("/v1/completions", body).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["param"], "prompt");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&(context + 5).to_string()), "{message}");
    assert!(message.contains(&context.to_string()), "{message}");

    let body = serde_json::to_vec(&json!({ "prompt": ["a", "b"] })).unwrap();
    let (status, v) = refused("/v1/completions", body).await;
    assert_eq!(
        (status, v["error"]["param"].clone()),
        (400, json!("prompt"))
    );
    let body = serde_json::to_vec(&json!({ "prompt": [1, 999_999_999] })).unwrap();
    let (status, _) = refused("/v1/completions", body).await;
    assert_eq!(status, 400);
    let body = serde_json::to_vec(&json!({ "tokens": [1, 999_999_999] })).unwrap();
    let (status, v) = refused("/detokenize", body).await;
    assert_eq!(
        (status, v["error"]["param"].clone()),
        (400, json!("tokens"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_models_are_404s() {
    let s = shared();
    let response = client()
        .get(format!("{}/v1/nothing", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "not_found");

    let body = json!({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]});
    let (status, v) = refused("/v1/chat/completions", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(status, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    assert!(v["error"]["message"].as_str().unwrap().contains("gpt-4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_limit_are_413s_and_the_limit_is_at_least_4_mib() {
    // 9 MiB: past the default limit of 8 MiB.
    let mut big = b"{\"messages\": \"".to_vec();
    big.resize(9 << 20, b'a');
    big.extend_from_slice(b"\"}");
    let (status, v) = refused("/v1/chat/completions", big).await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["code"], "request_too_large");

    // 5 MiB of JSON whitespace around a small invalid body: read whole, then refused as invalid.
    let mut padded = vec![b' '; 5 << 20];
    padded.extend_from_slice(b"{\"messages\": 5}");
    let (status, v) = refused("/v1/chat/completions", padded).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "messages");
}
