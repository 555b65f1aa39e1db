//! One streamed chat request, timed chunk by chunk, and a run of many at a fixed concurrency.

use crate::stats::{Report, RequestTiming};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Why a request did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The connection or the transfer failed.
    #[error("HTTP transfer failed: {0}")]
    Transfer(#[from] reqwest::Error),
    /// The server answered with an error status.
    #[error("the server answered {status}: {body}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The event stream could not be read as Server-Sent Events.
    #[error("bad event stream: {0}")]
    EventStream(String),
    /// An event's data was not JSON, or JSON of an unexpected shape.
    #[error("bad event data ({reason}): {data}")]
    Data {
        /// What was wrong.
        reason: String,
        /// The start of the data.
        data: String,
    },
    /// The stream ended without `data: [DONE]` or without a usage chunk.
    #[error("the stream ended without {0}")]
    Incomplete(&'static str),
    /// The request took longer than the limit.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct RequestSettings {
    /// The server's base URL (`http://127.0.0.1:8080`); `/v1/chat/completions` is appended.
    pub base_url: String,
    /// The `model` field.
    pub model: String,
    /// A bearer token, if the server wants one.
    pub api_key: Option<String>,
    /// `max_tokens`, with `ignore_eos` so that every answer has exactly this many tokens.
    pub max_tokens: u32,
    /// `temperature` (0 is greedy).
    pub temperature: f32,
    /// The longest a request may take, from sending to the end of its stream.
    pub timeout: Duration,
}

/// The body of one request: streamed, with usage, `ignore_eos`, and the request's own seed.
pub fn request_body(settings: &RequestSettings, prompt: &str, seed: u64) -> Value {
    json!({
        "model": settings.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "seed": seed,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// What one `data:` event of a chat stream brought.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    /// A chunk whose first choice's delta carries text.
    Text,
    /// A chunk without text (the role, the finish reason).
    Empty,
    /// The usage chunk: prompt and completion tokens.
    Usage {
        /// `usage.prompt_tokens`.
        prompt_tokens: u64,
        /// `usage.completion_tokens`.
        completion_tokens: u64,
    },
    /// `[DONE]`: the stream's end.
    Done,
}

/// Reads one event's data. An `error` object in the stream is a [`RequestError::Data`].
pub fn read_chunk(data: &str) -> Result<Chunk, RequestError> {
    let bad = |reason: &str| RequestError::Data {
        reason: reason.to_string(),
        data: data.chars().take(200).collect(),
    };
    if data.trim() == "[DONE]" {
        return Ok(Chunk::Done);
    }
    let v: Value = serde_json::from_str(data).map_err(|e| bad(&e.to_string()))?;
    if v.get("error").is_some() {
        return Err(bad("the server sent an error"));
    }
    let text = v["choices"]
        .as_array()
        .and_then(|c| c.first())
        .and_then(|c| c["delta"]["content"].as_str())
        .is_some_and(|t| !t.is_empty());
    if text {
        return Ok(Chunk::Text);
    }
    let usage = &v["usage"];
    if usage.is_object() {
        let count = |field: &str| {
            usage[field]
                .as_u64()
                .ok_or_else(|| bad(&format!("usage.{field} is not a count")))
        };
        return Ok(Chunk::Usage {
            prompt_tokens: count("prompt_tokens")?,
            completion_tokens: count("completion_tokens")?,
        });
    }
    Ok(Chunk::Empty)
}

/// Sends one streamed chat request on a new connection and times its chunks.
pub async fn timed_request(
    settings: &RequestSettings,
    prompt: &str,
    seed: u64,
) -> Result<RequestTiming, RequestError> {
    // A client of its own: an empty connection pool, so a new connection (llama-server drops
    // reused idle keep-alive connections, and each request should pay the same connection cost).
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .no_proxy()
        .build()?;
    let url = format!("{}/v1/chat/completions", settings.base_url);
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(request_body(settings, prompt, seed).to_string());
    if let Some(key) = &settings.api_key {
        request = request.bearer_auth(key);
    }
    let sent = Instant::now();
    let work = async {
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(RequestError::Status {
                status: status.as_u16(),
                body: body.chars().take(300).collect(),
            });
        }
        let mut timing = RequestTiming::default();
        let mut usage = false;
        let mut events = response.bytes_stream().eventsource();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| RequestError::EventStream(e.to_string()))?;
            let at = sent.elapsed().as_secs_f64();
            match read_chunk(&event.data)? {
                Chunk::Text => timing.chunks.push(at),
                Chunk::Empty => {}
                Chunk::Usage {
                    prompt_tokens,
                    completion_tokens,
                } => {
                    usage = true;
                    timing.prompt_tokens = prompt_tokens;
                    timing.output_tokens = completion_tokens;
                }
                Chunk::Done => {
                    timing.end = at;
                    return if usage {
                        Ok(timing)
                    } else {
                        Err(RequestError::Incomplete("a usage chunk"))
                    };
                }
            }
        }
        Err(RequestError::Incomplete("data: [DONE]"))
    };
    match tokio::time::timeout(settings.timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(RequestError::Timeout(settings.timeout)),
    }
}

/// The seed of request `index` at concurrency `concurrency`: the run's seed mixed with both
/// (SplitMix64's finaliser), so that requests differ but reruns agree.
pub fn request_seed(seed: u64, concurrency: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_add(concurrency.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(index.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `requests` requests with at most `concurrency` in flight: `concurrency` workers each take
/// the next request as soon as their last one ends. Returns the figures and the first few errors.
///
/// The prompts and the requests' seeds depend on the run's seed, the concurrency and the
/// request's index only, so a sweep `1,4,8,16` and four runs of one concurrency each send the
/// same requests.
pub async fn run_step(
    settings: &RequestSettings,
    seed: u64,
    requests: usize,
    concurrency: usize,
) -> (Report, Vec<String>) {
    let key = concurrency as u64;
    let next = std::cell::Cell::new(0usize);
    let start = Instant::now();
    let worker = || async {
        let mut done = Vec::new();
        loop {
            let index = next.get();
            if index >= requests {
                return done;
            }
            next.set(index + 1);
            let prompt = crate::prompts::prompt(seed, key, index as u64);
            let result = timed_request(settings, &prompt, request_seed(seed, key, index as u64));
            done.push(result.await);
        }
    };
    let workers: Vec<_> = (0..concurrency.max(1)).map(|_| worker()).collect();
    let results: Vec<Result<RequestTiming, RequestError>> = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let duration = start.elapsed().as_secs_f64();
    let mut completed = Vec::new();
    let mut errors = Vec::new();
    let mut failed = 0;
    for result in results {
        match result {
            Ok(timing) => completed.push(timing),
            Err(e) => {
                failed += 1;
                if errors.len() < 5 {
                    errors.push(e.to_string());
                }
            }
        }
    }
    (
        Report::new(concurrency, duration, &completed, failed),
        errors,
    )
}

/// The first model the server lists at `GET /v1/models`.
pub async fn first_model(base_url: &str, api_key: Option<&str>) -> Result<String, RequestError> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .no_proxy()
        .build()?;
    let mut request = client.get(format!("{base_url}/v1/models"));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        return Err(RequestError::Status {
            status: status.as_u16(),
            body: body.chars().take(300).collect(),
        });
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| RequestError::Data {
        reason: e.to_string(),
        data: body.chars().take(200).collect(),
    })?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| RequestError::Data {
            reason: "no model in data[0].id".into(),
            data: body.chars().take(200).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_text_empty_usage_or_done() {
        // The shapes of an OpenAI chat stream (llama-server's and nextok's alike).
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#;
        assert_eq!(read_chunk(role).unwrap(), Chunk::Empty);
        let empty = r#"{"choices":[{"index":0,"delta":{"content":""}}]}"#;
        assert_eq!(read_chunk(empty).unwrap(), Chunk::Empty);
        let text = r#"{"choices":[{"index":0,"delta":{"content":" the"}}]}"#;
        assert_eq!(read_chunk(text).unwrap(), Chunk::Text);
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
        assert_eq!(read_chunk(finish).unwrap(), Chunk::Empty);
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":61,"completion_tokens":64,"total_tokens":125}}"#;
        assert_eq!(
            read_chunk(usage).unwrap(),
            Chunk::Usage {
                prompt_tokens: 61,
                completion_tokens: 64
            }
        );
        assert_eq!(read_chunk("[DONE]").unwrap(), Chunk::Done);
        assert!(matches!(
            read_chunk(r#"{"error":{"message":"boom"}}"#),
            Err(RequestError::Data { .. })
        ));
        assert!(matches!(
            read_chunk("not json"),
            Err(RequestError::Data { .. })
        ));
        let bad_usage = r#"{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":2}}"#;
        assert!(matches!(
            read_chunk(bad_usage),
            Err(RequestError::Data { .. })
        ));
    }

    #[test]
    fn the_body_asks_for_a_stream_with_usage_and_fixed_length() {
        let settings = RequestSettings {
            base_url: "http://127.0.0.1:1".into(),
            model: "m".into(),
            api_key: None,
            max_tokens: 64,
            temperature: 0.0,
            timeout: Duration::from_secs(1),
        };
        let body = request_body(&settings, "hello", 9);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["seed"], 9);
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["content"], "hello");
    }

    #[test]
    fn request_seeds_differ_per_request_and_repeat_per_run() {
        let seeds: std::collections::BTreeSet<u64> =
            (0..64).map(|i| request_seed(1, 0, i)).collect();
        assert_eq!(seeds.len(), 64);
        assert_eq!(request_seed(1, 2, 3), request_seed(1, 2, 3));
        assert_ne!(request_seed(1, 2, 3), request_seed(1, 3, 2));
    }
}
