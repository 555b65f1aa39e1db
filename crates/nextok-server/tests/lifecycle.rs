//! Servers of their own (so that their figures are theirs alone): disconnects cancel, a full
//! queue is a 429, keys are checked, and 16 + 16 concurrent requests give each one's tokens.

mod common;

use common::{client, get, metric, metrics_until, own_engine, post, start, start_on, MODEL};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use nextok::SchedulerOptions;
use nextok_server::ServerConfig;
use serde_json::{json, Value};
use std::time::Duration;

/// A request that would run for a long time if nothing stopped it.
fn long(stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Count from one to ten thousand."}],
        "max_tokens": 4000,
        "ignore_eos": true,
        "temperature": 0,
        "stream": stream,
    })
}

fn idle(text: &str) -> bool {
    metric(text, "nextok_requests_running") == 0.0 && metric(text, "nextok_requests_waiting") == 0.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_frees_its_request() {
    let s = start(ServerConfig::new(MODEL), SchedulerOptions::default());
    let url = format!("{}/v1/chat/completions", s.url);

    // Streaming: read until the first content, then go away.
    let response = client().post(&url).json(&long(true)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut events = response.bytes_stream().eventsource();
    let mut contents = 0;
    while contents < 2 {
        let e = events.next().await.expect("the stream goes on").unwrap();
        let v: Value = serde_json::from_str(&e.data).unwrap();
        if v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            contents += 1;
        }
    }
    let text = get(&format!("{}/metrics", s.url)).await.1;
    assert_eq!(metric(&text, "nextok_requests_running"), 1.0, "{text}");
    drop(events);
    let text = metrics_until(&s.url, 120, idle).await;
    assert!(idle(&text), "the stream's request still runs:\n{text}");
    let generated = metric(&text, "nextok_generation_tokens_total");
    assert!(
        generated < 4000.0,
        "{generated} tokens: the request ran to its end"
    );

    // Not streaming: the client gives up after a moment and closes the connection.
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let gave_up = quick.post(&url).json(&long(false)).send().await;
    assert!(gave_up.is_err(), "4000 tokens do not come in 1.5 s");
    let text = metrics_until(&s.url, 120, |t| {
        idle(t) && metric(t, "nextok_generation_tokens_total") > generated
    })
    .await;
    assert!(
        idle(&text),
        "the request of the client that left still runs:\n{text}"
    );
    let more = metric(&text, "nextok_generation_tokens_total") - generated;
    assert!(
        more > 0.0 && more < 4000.0,
        "{more} tokens for the second request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_a_429_with_retry_after() {
    let options = SchedulerOptions {
        max_running: 1,
        max_waiting: 1,
        ..SchedulerOptions::default()
    };
    let s = start(ServerConfig::new(MODEL), options);
    let url = format!("{}/v1/chat/completions", s.url);
    // One request runs ...
    let response = client().post(&url).json(&long(true)).send().await.unwrap();
    let mut running = response.bytes_stream().eventsource();
    running.next().await.unwrap().unwrap();
    // (the first chunk, the assistant's role, comes before the scheduler takes the request in:
    // until it is admitted it is the one waiting, and a second request would find the queue
    // full, so the gauges are read first)
    let admitted = |t: &str| {
        metric(t, "nextok_requests_running") == 1.0 && metric(t, "nextok_requests_waiting") == 0.0
    };
    let text = metrics_until(&s.url, 480, admitted).await;
    assert!(
        admitted(&text),
        "the first request was not admitted:\n{text}"
    );
    // ... one waits ...
    let waiting_url = url.clone();
    let waiting = tokio::spawn(async move {
        let mut body = long(false);
        body["max_tokens"] = json!(4);
        post(&waiting_url, &body).await
    });
    let mut text = String::new();
    for _ in 0..480 {
        text = get(&format!("{}/metrics", s.url)).await.1;
        if metric(&text, "nextok_requests_waiting") == 1.0 || waiting.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if waiting.is_finished() {
        let (status, answer) = waiting.await.unwrap();
        panic!("the second request was answered while the first ran: {status} {answer}\n{text}");
    }
    assert_eq!(metric(&text, "nextok_requests_waiting"), 1.0, "{text}");
    // ... and the next one finds the queue full.
    let response = client()
        .post(&url)
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "queue_full");
    // The running one leaves; the waiting one then runs and answers.
    drop(running);
    let (status, answer) = waiting.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_guard_every_route_but_health_and_optionally_metrics() {
    for protect in [false, true] {
        let config = ServerConfig::new(MODEL)
            .with_api_key(Some("sekret".into()))
            .with_protect_metrics(protect);
        let s = start(config, SchedulerOptions::default());
        let c = client();
        let models = format!("{}/v1/models", s.url);
        let chat = format!("{}/v1/chat/completions", s.url);
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
        for key in [None, Some("wrong"), Some("sekre"), Some("sekret2")] {
            let mut get = c.get(&models);
            let mut post = c.post(&chat).json(&body);
            if let Some(k) = key {
                get = get.bearer_auth(k);
                post = post.bearer_auth(k);
            }
            for request in [get, post] {
                let r = request.send().await.unwrap();
                assert_eq!(r.status().as_u16(), 401, "key {key:?}");
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "invalid_api_key");
            }
        }
        let r = c.get(&models).bearer_auth("sekret").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let r = c
            .post(&chat)
            .bearer_auth("sekret")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(get(&format!("{}/health", s.url)).await.0, 200);
        let metrics = format!("{}/metrics", s.url);
        let open = c.get(&metrics).send().await.unwrap().status().as_u16();
        assert_eq!(open, if protect { 401 } else { 200 });
        let keyed = c.get(&metrics).bearer_auth("sekret").send().await.unwrap();
        assert_eq!(keyed.status().as_u16(), 200);
    }
}

/// The tokens and their log-probabilities (bit for bit, through JSON) of each request alone,
/// then of all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_greedy_and_sixteen_seeded_concurrent_requests_give_what_each_gives_alone() {
    let s = start(ServerConfig::new(MODEL), SchedulerOptions::default());
    let url = format!("{}/v1/chat/completions", s.url);
    let topics = [
        "cats", "rivers", "bread", "trains", "music", "snow", "chess", "bees", "maps", "tea",
        "clocks", "ships", "salt", "owls", "glass", "rain",
    ];
    let mut bodies = Vec::new();
    for (i, topic) in topics.iter().enumerate() {
        bodies.push(json!({
            "messages": [{"role": "user", "content": format!("Say something about {topic}.")}],
            "temperature": 0,
            "max_tokens": 8,
            "logprobs": true,
        }));
        bodies.push(json!({
            "messages": [{"role": "user", "content": format!("Tell a story about {topic}.")}],
            "temperature": 0.9,
            "seed": 100 + i,
            "max_tokens": 8,
            "logprobs": true,
        }));
    }
    let answer = |r: &Value| {
        (
            r["choices"][0]["message"]["content"].clone(),
            r["choices"][0]["logprobs"].clone(),
            r["usage"]["completion_tokens"].clone(),
        )
    };
    let mut alone = Vec::new();
    for body in &bodies {
        let (status, r) = post(&url, body).await;
        assert_eq!(status, 200, "{r}");
        alone.push(answer(&r));
    }
    let together = futures_util::future::join_all(bodies.iter().map(|b| post(&url, b))).await;
    for (i, ((status, r), expected)) in together.iter().zip(&alone).enumerate() {
        assert_eq!(*status, 200, "{r}");
        assert_eq!(
            &answer(r),
            expected,
            "request {i} changed beside the others"
        );
    }
}

/// The speculative decoding counters over HTTP: a greedy answer that copies its prompt keeps
/// drafted tokens (no more than were drafted, in at least one draft), and a server with
/// drafting off counts none. Each server is its own, so its figures are this request's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_drafted_and_accepted_tokens() {
    let body = json!({
        "messages": [{"role": "user", "content":
            "Repeat this line five times: the cat sat on the mat and the dog sat on the log."}],
        "max_tokens": 40,
        "ignore_eos": true,
        "temperature": 0,
    });
    let done = |t: &str| idle(t) && metric(t, "nextok_generation_tokens_total") == 40.0;
    for speculative in [true, false] {
        let s = start(
            ServerConfig::new(MODEL),
            SchedulerOptions {
                speculative,
                ..SchedulerOptions::default()
            },
        );
        let (status, r) = post(&format!("{}/v1/chat/completions", s.url), &body).await;
        assert_eq!(status, 200, "{r}");
        let text = metrics_until(&s.url, 120, done).await;
        assert!(done(&text), "{text}");
        let drafts = metric(&text, "nextok_spec_decode_num_drafts_total");
        let drafted = metric(&text, "nextok_spec_decode_num_draft_tokens_total");
        let accepted = metric(&text, "nextok_spec_decode_num_accepted_tokens_total");
        if speculative {
            assert!(accepted > 0.0, "{text}");
            assert!(drafted >= drafts && drafted >= accepted, "{text}");
        } else {
            assert_eq!((drafts, drafted, accepted), (0.0, 0.0, 0.0), "{text}");
        }
    }
}

/// A JSON Schema sent with two requests is compiled once, when the first arrives: the checks
/// and the completions' constraints take the grammar the engine kept (the grammar cache's
/// counters say so), and the second answer, and each of its two completions, is the first's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_sent_again_is_compiled_once() {
    let s = start_on(
        own_engine(),
        ServerConfig::new(MODEL),
        SchedulerOptions::default(),
    );
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "rainy": {"type": "boolean"}},
        "required": ["city", "rainy"],
        "additionalProperties": false
    });
    let body = json!({
        "messages": [{"role": "user", "content": "Name a city and say whether it is rainy."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
        "max_tokens": 24,
        "n": 2,
        "temperature": 0.8,
        "seed": 7,
    });
    let url = format!("{}/v1/chat/completions", s.url);
    let (status, first) = post(&url, &body).await;
    assert_eq!(status, 200, "{first}");
    let (status, second) = post(&url, &body).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(first["choices"], second["choices"]);
    for c in first["choices"].as_array().expect("choices") {
        let text = c["message"]["content"].as_str().expect("a text");
        let value: Value = serde_json::from_str(text).expect("JSON");
        assert!(value["rainy"].is_boolean(), "{text}");
    }
    let (_, text) = get(&format!("{}/metrics", s.url)).await;
    // Per request: the server's check, the engine's check at submission, one constraint per
    // completion; all but the very first take the kept grammar.
    assert_eq!(
        metric(&text, "nextok_grammar_cache_misses_total"),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "nextok_grammar_cache_hits_total"),
        7.0,
        "{text}"
    );
}
