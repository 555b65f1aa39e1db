//! The real server, over the socket, with the real model: every endpoint, the answer's shape and
//! numbers against the library's own, streams against whole answers, stop sequences, constrained
//! output, seeds and `n`.

mod common;

use common::{deltas, engine, get, post, shared, stream, MODEL};
use nextok::constraints::JsonOptions;
use nextok::sampling::SamplingParams;
use nextok::tokenizer::{EncodeOptions, Message};
use nextok::{Completion, Engine, GenerateOptions, Prompt, Stop};
use serde_json::{json, Value};

/// The library's own answer to a chat (one completion).
fn library_chat(user: &str, options: &GenerateOptions) -> Completion {
    let engine = engine();
    let prompt = Prompt::Chat(vec![Message::user(user)]);
    let mut generation = engine.generate(&prompt, options).expect("a valid request");
    let mut completions = generation
        .collect_completions()
        .expect("the generation runs");
    assert_eq!(completions.len(), 1);
    completions.remove(0)
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ..GenerateOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_models_tokenize_detokenize_and_metrics_answer() {
    let s = shared();
    let engine = engine();
    let (status, body) = get(&format!("{}/health", s.url)).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"status": "ok"})
    );

    let (status, body) = get(&format!("{}/v1/models", s.url)).await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["max_model_len"], engine.context_window());

    let text = "Hello world, <|im_start|> stays text";
    let (status, t) = post(&format!("{}/tokenize", s.url), &json!({ "content": text })).await;
    assert_eq!(status, 200);
    let bos = engine.tokenizer().add_bos_by_default();
    let expected = engine
        .tokenizer()
        .encode(text, EncodeOptions::plain().with_bos(bos))
        .unwrap();
    assert_eq!(t["tokens"], json!(expected));
    assert_eq!(t["count"], expected.len());
    // Special-token text is text: no control token comes out of it.
    let im_start = engine.tokenizer().token_id("<|im_start|>").unwrap();
    assert!(!expected.contains(&im_start));

    let messages = json!([{"role": "user", "content": "Hi there"}]);
    let (status, t) = post(
        &format!("{}/tokenize", s.url),
        &json!({ "messages": messages }),
    )
    .await;
    assert_eq!(status, 200);
    let chat = engine
        .encode_prompt(&Prompt::Chat(vec![Message::user("Hi there")]))
        .unwrap();
    assert_eq!(t["tokens"], json!(chat));

    let (status, d) = post(
        &format!("{}/detokenize", s.url),
        &json!({ "tokens": engine.tokenizer().encode("Hello world", EncodeOptions::plain()).unwrap() }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(d["content"], "Hello world");

    let (status, text) = get(&format!("{}/metrics", s.url)).await;
    assert_eq!(status, 200);
    for name in [
        "nextok_requests_running",
        "nextok_requests_waiting",
        "nextok_kv_cache_usage_ratio",
        "nextok_prompt_tokens_total",
        "nextok_generation_tokens_total",
    ] {
        let v = common::metric(&text, name);
        assert!(v >= 0.0, "{name} = {v}");
    }
    for name in [
        "nextok_time_to_first_token_seconds",
        "nextok_time_per_output_token_seconds",
        "nextok_request_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} histogram")),
            "no histogram {name} in:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_chat_is_the_librarys_answer_with_its_usage() {
    let s = shared();
    let user = "What is the capital of France?";
    let expected = library_chat(user, &greedy(24));
    let (status, r) = post(
        &format!("{}/v1/chat/completions", s.url),
        &json!({
            "model": MODEL,
            "messages": [{"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": 24,
            "logprobs": true,
            "top_logprobs": 2,
        }),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "chat.completion");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["model"], MODEL);
    assert!(r["created"].as_u64().unwrap() > 1_600_000_000);
    assert!(r["seed"].is_u64());
    let choice = &r["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], expected.text.as_str());
    let (finish, reason) = match expected.stop {
        Stop::EndTurn { .. } => ("stop", "end_turn"),
        Stop::MaxTokens => ("length", "max_tokens"),
        ref other => panic!("unexpected stop {other:?}"),
    };
    assert_eq!(choice["finish_reason"], finish);
    assert_eq!(choice["stop_reason"], reason);
    assert_eq!(choice["stop_sequence"], Value::Null);

    let usage = &r["usage"];
    let prompt = engine()
        .encode_prompt(&Prompt::Chat(vec![Message::user(user)]))
        .unwrap();
    assert_eq!(usage["prompt_tokens"], prompt.len());
    assert_eq!(usage["completion_tokens"], expected.usage.completion_tokens);
    assert_eq!(
        usage["total_tokens"],
        prompt.len() + expected.usage.completion_tokens
    );
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            <= prompt.len() as u64
    );

    // The same request again finds its prompt's blocks in the prefix cache, and answers the
    // same.
    let (_, again) = post(
        &format!("{}/v1/chat/completions", s.url),
        &json!({
            "messages": [{"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": 24,
        }),
    )
    .await;
    assert_eq!(again["choices"][0]["message"], choice["message"]);
    assert!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // One log-probability per token of the answer (the end token is not text), each with its
    // two best alternatives, the first of which is the greedy choice itself.
    let content = choice["logprobs"]["content"].as_array().unwrap();
    let end = engine().end_tokens();
    let visible: Vec<u32> = expected
        .tokens
        .iter()
        .copied()
        .filter(|t| !end.contains(t))
        .collect();
    assert_eq!(content.len(), visible.len());
    for (entry, &id) in content.iter().zip(&visible) {
        let bytes = engine().tokenizer().token_bytes(id).unwrap().to_vec();
        assert_eq!(entry["bytes"], json!(bytes));
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        assert_eq!(top[0]["logprob"], entry["logprob"]);
        assert!(entry["logprob"].as_f64().unwrap() <= 0.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_the_whole_answer_in_chunks_then_usage_then_done() {
    let s = shared();
    for endpoint in ["chat", "completions"] {
        let mut body = json!({
            "temperature": 0.9,
            "top_p": 0.95,
            "seed": 1234,
            "max_tokens": 20,
        });
        let url = if endpoint == "chat" {
            body["messages"] = json!([{"role": "user", "content": "Tell me about the sea."}]);
            format!("{}/v1/chat/completions", s.url)
        } else {
            body["prompt"] = json!("The sea is");
            format!("{}/v1/completions", s.url)
        };
        let (status, whole) = post(&url, &body).await;
        assert_eq!(status, 200, "{whole}");
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let events = stream(&url, &body).await;
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let object = if endpoint == "chat" {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        for c in &chunks {
            assert_eq!(c["object"], object);
            assert_eq!(c["seed"], 1234);
            assert_eq!(c["id"], chunks[0]["id"]);
        }
        if endpoint == "chat" {
            assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        }
        // The usage chunk comes last, with empty choices and the whole answer's usage.
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        // (The cached prompt tokens may differ: the stream's prompt was computed once before.)
        for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(usage["usage"][field], whole["usage"][field], "{field}");
        }
        let cached = &usage["usage"]["prompt_tokens_details"]["cached_tokens"];
        assert!(cached.as_u64().unwrap() <= usage["usage"]["prompt_tokens"].as_u64().unwrap());
        // One chunk carries the finish reason, the whole answer's.
        let finishing: Vec<&Value> = chunks
            .iter()
            .filter(|c| !c["choices"][0]["finish_reason"].is_null())
            .collect();
        assert_eq!(finishing.len(), 1);
        assert_eq!(
            finishing[0]["choices"][0]["finish_reason"],
            whole["choices"][0]["finish_reason"]
        );
        let text = if endpoint == "chat" {
            whole["choices"][0]["message"]["content"].as_str().unwrap()
        } else {
            whole["choices"][0]["text"].as_str().unwrap()
        };
        assert!(!text.is_empty());
        assert_eq!(deltas(&events, 0), text, "{endpoint}: streamed != whole");
    }
}

/// A stop text made of the end of one token and the start of the next, so that no single token
/// holds it: the stream must neither show its first half nor anything after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_sequence_split_over_tokens_never_reaches_the_stream() {
    let s = shared();
    let user = "Write three sentences about mountains.";
    let full = library_chat(user, &greedy(48));
    let tok = engine();
    let pieces: Vec<Vec<u8>> = full
        .tokens
        .iter()
        .map(|&t| tok.tokenizer().token_bytes(t).unwrap().to_vec())
        .collect();
    // The first boundary between two ASCII, non-blank tokens of at least 3 bytes each.
    let mut at = 0;
    let mut stop = None;
    for w in pieces.windows(2) {
        at += w[0].len();
        let ok = |p: &[u8]| p.len() >= 3 && p.iter().all(|b| b.is_ascii_alphanumeric());
        if ok(&w[0]) && ok(&w[1]) {
            let text = String::from_utf8([&w[0][w[0].len() - 2..], &w[1][..2]].concat()).unwrap();
            stop = Some((text, at));
            break;
        }
    }
    let (stop, _) = stop.expect("two adjacent word-piece tokens in the answer");
    let cut = full
        .text
        .find(&stop)
        .expect("the stop text is in the answer");
    let expected = &full.text[..cut];

    let url = format!("{}/v1/chat/completions", s.url);
    for include in [false, true] {
        let body = json!({
            "messages": [{"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": 48,
            "stop": [stop.clone(), "never appears §§"],
            "stream": true,
            "include_stop_str_in_output": include,
        });
        let events = stream(&url, &body).await;
        let streamed = deltas(&events, 0);
        if include {
            assert_eq!(streamed, format!("{expected}{stop}"));
        } else {
            // Not a byte of the stop text, nor anything after it.
            assert_eq!(streamed, expected);
        }
        let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        assert_eq!(last["choices"][0]["stop_reason"], "stop_sequence");
        assert_eq!(last["choices"][0]["stop_sequence"], stop.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constrained_answers_follow_their_schema_pattern_or_choices() {
    let s = shared();
    let url = format!("{}/v1/chat/completions", s.url);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let (status, r) = post(
        &url,
        &json!({
            "messages": [{"role": "user", "content": "Describe a person as JSON."}],
            "temperature": 0,
            "max_tokens": 48,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}},
        }),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let content = r["choices"][0]["message"]["content"].as_str().unwrap();
    let person: Value = serde_json::from_str(content).expect("the answer is JSON");
    let object = person.as_object().expect("an object");
    assert_eq!(object.len(), 2, "{content}");
    assert!(object["name"].as_str().unwrap().chars().count() <= 12);
    assert!((0..=120).contains(&object["age"].as_i64().unwrap()));

    let (status, r) = post(
        &url,
        &json!({
            "messages": [{"role": "user", "content": "Pick a number."}],
            "temperature": 0.8,
            "seed": 3,
            "max_tokens": 8,
            "regex": "[0-9]{3}",
        }),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let digits = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()),
        "{digits}"
    );

    let (status, r) = post(
        &url,
        &json!({
            "messages": [{"role": "user", "content": "Is the sky blue?"}],
            "max_tokens": 8,
            "choice": ["yes", "no"],
        }),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let answer = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer == "yes" || answer == "no", "{answer}");
}

/// A schema with an unknown keyword (`x-internal`) and an unknown `format` name (`url`):
/// annotations in JSON Schema, so the answer is served and the header names both; a server
/// whose engine reads schemas strictly refuses the request, naming the keyword.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keywords_a_schema_does_not_enforce_are_named_or_refused_when_strict() {
    let schema = json!({
        "type": "object",
        "x-internal": true,
        "properties": {"site": {"type": "string", "format": "url", "maxLength": 6}},
        "required": ["site"],
        "additionalProperties": false
    });
    let body = json!({
        "messages": [{"role": "user", "content": "A website as JSON."}],
        "temperature": 0,
        "max_tokens": 16,
        "response_format": {"type": "json_schema", "json_schema": {"name": "site", "schema": schema}},
    });
    let url = format!("{}/v1/chat/completions", shared().url);
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = json!(stream);
        let response = common::client()
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 200, "stream: {stream}");
        let header = response
            .headers()
            .get("x-nextok-schema-ignored")
            .expect("the ignored keywords are named")
            .to_str()
            .expect("visible ASCII");
        let mut entries: Vec<&str> = header.split("; ").collect();
        entries.sort_unstable();
        assert_eq!(
            entries,
            [r#"format "url" at #/properties/site"#, "x-internal at #"],
            "stream: {stream}"
        );
        let text = response.text().await.expect("a body");
        if !stream {
            let r: Value = serde_json::from_str(&text).expect("a JSON body");
            let content = r["choices"][0]["message"]["content"].as_str().unwrap();
            let answer: Value = serde_json::from_str(content).expect("the answer is JSON");
            assert!(
                answer["site"].as_str().unwrap().chars().count() <= 6,
                "{content}"
            );
        }
    }
    // A schema with nothing to ignore gets no header.
    let mut plain = body.clone();
    plain["response_format"]["json_schema"]["schema"] = json!({"type": "boolean"});
    let response = common::client()
        .post(&url)
        .json(&plain)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("x-nextok-schema-ignored").is_none());

    let mut strict = Engine::load(
        nextok::default_model_path().expect("a cache folder"),
        &nextok::EngineOptions::default(),
    )
    .expect("the default model loads");
    strict.set_json_schema_options(JsonOptions::default().with_strict(true));
    let server = common::start_on(
        std::sync::Arc::new(strict),
        nextok_server::ServerConfig::new(MODEL),
        nextok::SchedulerOptions::default(),
    );
    let (status, r) = post(&format!("{}/v1/chat/completions", server.url), &body).await;
    assert_eq!(status, 400, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("x-internal"), "{message}");
    assert_eq!(r["error"]["param"], "response_format");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_are_reported_and_reproduce_and_n_draws_seed_plus_i() {
    let s = shared();
    let url = format!("{}/v1/chat/completions", s.url);
    let body = json!({
        "messages": [{"role": "user", "content": "Name a colour."}],
        "temperature": 1.0,
        "max_tokens": 8,
    });
    let (_, a) = post(&url, &body).await;
    let (_, b) = post(&url, &body).await;
    let seed_a = a["seed"].as_u64().expect("a seed is reported");
    let seed_b = b["seed"].as_u64().expect("a seed is reported");
    assert_ne!(seed_a, seed_b, "two requests without a seed get two seeds");
    assert!(seed_a < 1 << 53);
    let mut again = body.clone();
    again["seed"] = json!(seed_a);
    let (_, c) = post(&url, &again).await;
    assert_eq!(c["seed"], seed_a);
    assert_eq!(
        c["choices"], a["choices"],
        "the reported seed reproduces the answer"
    );

    let mut n = body.clone();
    n["n"] = json!(2);
    n["seed"] = json!(50);
    let (status, both) = post(&url, &n).await;
    assert_eq!(status, 200, "{both}");
    assert_eq!(both["choices"].as_array().unwrap().len(), 2);
    let mut generated = 0;
    for i in 0..2u64 {
        let mut one = body.clone();
        one["seed"] = json!(50 + i);
        let (_, single) = post(&url, &one).await;
        let choice = &both["choices"][i as usize];
        assert_eq!(choice["index"], i);
        assert_eq!(
            choice["message"]["content"],
            single["choices"][0]["message"]["content"]
        );
        assert_eq!(
            single["usage"]["prompt_tokens"],
            both["usage"]["prompt_tokens"]
        );
        generated += single["usage"]["completion_tokens"].as_u64().unwrap();
    }
    // Usage counts the prompt once and every completion's tokens.
    assert_eq!(both["usage"]["completion_tokens"], generated);
    assert_eq!(
        both["usage"]["total_tokens"],
        both["usage"]["prompt_tokens"].as_u64().unwrap() + generated
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stages_of_other_libraries_are_accepted_and_reproduce_by_seed() {
    // transformers', llama.cpp's and vLLM's field names (issue #16); the same seed gives the
    // same answer with the stateful (mirostat) and drawing (XTC) stages on.
    let s = shared();
    let url = format!("{}/v1/chat/completions", s.url);
    let body = json!({
        "messages": [{"role": "user", "content": "Count: one two one two"}],
        "max_tokens": 8,
        "seed": 5,
        "temperature": 0.9,
        "typical_p": 0.95,
        "min_tokens_to_keep": 2,
        "epsilon_cutoff": 3e-4,
        "eta_cutoff": 3e-4,
        "no_repeat_ngram_size": 4,
        "dry_multiplier": 0.8,
        "dry_sequence_breakers": ["\n"],
        "xtc_probability": 0.5,
        "xtc_threshold": 0.1,
        "top_n_sigma": 2.0,
        "mirostat": 2,
        "mirostat_tau": 4.0,
        "dynatemp_range": 0.2,
    });
    let (status, a) = post(&url, &body).await;
    assert_eq!(status, 200, "{a}");
    assert!(
        a["usage"]["completion_tokens"].as_u64().unwrap() >= 1,
        "{a}"
    );
    let (_, b) = post(&url, &body).await;
    assert_eq!(a["choices"], b["choices"]);
}
