//! `/v1/chat/completions` and `/v1/completions`: a checked request goes to the scheduler, whose
//! events come back through a channel and are shaped into one response or a stream of chunks.
//!
//! The scheduler pushes events into a sink that sends them down an unbounded channel; the sink
//! returns false once the receiving side is gone, and the request's [`Cancel`] guard cancels it
//! when dropped: either way a client that disconnects frees its sequence within one step.

use crate::error::ApiError;
use crate::request::{self, Endpoint, Plan};
use crate::routes::body;
use crate::State;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State as Shared;
use axum::http::HeaderValue;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use nextok::{Completion, Engine, Event, Request, RequestId, Scheduler, Stop, TokenEvent};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// `POST /v1/chat/completions`.
pub(crate) async fn chat(
    Shared(state): Shared<Arc<State>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    respond(state, Endpoint::Chat, raw).await
}

/// `POST /v1/completions`.
pub(crate) async fn completions(
    Shared(state): Shared<Arc<State>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    respond(state, Endpoint::Completion, raw).await
}

/// Cancels its request when dropped, unless the request has ended.
struct Cancel {
    scheduler: Arc<Scheduler>,
    id: Option<RequestId>,
}

impl Cancel {
    /// The request has ended: nothing to cancel.
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            tracing::debug!(?id, "client gone: cancelling its request");
            self.scheduler.cancel(id);
        }
    }
}

/// A request on its way: the plan, its events, and the guard that cancels it.
struct Running {
    plan: Plan,
    events: UnboundedReceiver<Result<Event, nextok::Error>>,
    cancel: Cancel,
    shape: Shape,
    started: Instant,
}

async fn respond(
    state: Arc<State>,
    endpoint: Endpoint,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    match start(&state, endpoint, raw, started).await {
        Err(e) => e.into_response(),
        Ok(running) => {
            let ignored = ignored_header(&running.plan.ignored);
            let mut response = if running.plan.stream {
                stream(state, running).into_response()
            } else {
                match collect(&state, running).await {
                    Ok(body) => Json(body).into_response(),
                    Err(e) => return e.into_response(),
                }
            };
            if let Some(value) = ignored {
                response.headers_mut().insert(IGNORED_HEADER, value);
            }
            response
        }
    }
}

/// The response header that lists what a request's JSON Schema does not enforce: unknown
/// keywords and `format` names, other drafts' keywords (JSON Schema reads them as annotations;
/// `nextok serve --schema-strict` refuses them instead).
pub(crate) const IGNORED_HEADER: &str = "x-nextok-schema-ignored";

/// The most bytes [`IGNORED_HEADER`]'s value holds; entries past it are counted, not listed.
const IGNORED_HEADER_MAX: usize = 4096;

/// `keyword at path` entries joined by `; `, in visible ASCII (any other byte, `%` and `;` are
/// percent-encoded, so the list splits unambiguously), `None` when nothing was ignored.
fn ignored_header(ignored: &[String]) -> Option<HeaderValue> {
    use std::fmt::Write;
    let mut out = String::new();
    for (i, entry) in ignored.iter().enumerate() {
        let mut e = String::with_capacity(entry.len());
        for b in entry.bytes() {
            if (0x20..0x7f).contains(&b) && b != b'%' && b != b';' {
                e.push(b as char);
            } else {
                let _ = write!(e, "%{b:02X}");
            }
        }
        let sep = if out.is_empty() { "" } else { "; " };
        if out.len() + sep.len() + e.len() > IGNORED_HEADER_MAX {
            let _ = write!(out, "{sep}... {} more", ignored.len() - i);
            break;
        }
        out.push_str(sep);
        out.push_str(&e);
    }
    (!out.is_empty())
        .then(|| HeaderValue::from_str(&out).ok())
        .flatten()
}

/// Reads and checks the body, then submits the request.
async fn start(
    state: &Arc<State>,
    endpoint: Endpoint,
    raw: Result<Bytes, BytesRejection>,
    started: Instant,
) -> Result<Running, ApiError> {
    let bytes = body(raw, state.config.max_body_bytes)?;
    let ready = state.ready()?;
    let engine = ready.engine.clone();
    let scheduler = ready.scheduler.clone();
    // Tokenizing a long prompt and compiling a grammar take a while: off the async workers.
    let checking = state.clone();
    let plan = tokio::task::spawn_blocking(move || {
        let cx = request::Context {
            engine: &engine,
            model_name: &checking.config.model_name,
            limits: &checking.config.constraint_limits,
            max_tokens_limit: checking.config.max_tokens_limit,
        };
        request::parse(endpoint, &bytes, &cx)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the request check failed: {e}")))??;
    let (tx, rx) = unbounded_channel();
    let sink = Box::new(move |event: Result<Event, nextok::Error>| tx.send(event).is_ok());
    let id = scheduler.submit_with(
        Request {
            prompt: plan.prompt.clone(),
            options: plan.options.clone(),
        },
        sink,
    )?;
    let shape = Shape::new(state, &plan, ready.engine.clone());
    Ok(Running {
        plan,
        events: rx,
        cancel: Cancel {
            scheduler,
            id: Some(id),
        },
        shape,
        started,
    })
}

/// What a response reports besides the text: shared by whole answers and chunks.
struct Shape {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    seed: u64,
    logprobs: bool,
    /// End tokens are left out of log-probabilities (they are not text), unless `ignore_eos`
    /// made them ordinary tokens.
    hidden: Vec<u32>,
    engine: Arc<Engine>,
}

/// A response id: unique within the process, and unlikely to repeat across restarts.
fn response_id(endpoint: Endpoint) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let salt = getrandom::u64().unwrap_or(0) >> 32;
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completion => "cmpl",
    };
    format!("{prefix}-{salt:08x}{n:016x}")
}

impl Shape {
    fn new(state: &State, plan: &Plan, engine: Arc<Engine>) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Shape {
            endpoint: plan.endpoint,
            id: response_id(plan.endpoint),
            created,
            model: state.config.model_name.clone(),
            seed: plan.seed,
            logprobs: plan.logprobs,
            hidden: if plan.options.ignore_eos {
                Vec::new()
            } else {
                engine.end_tokens()
            },
            engine,
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "seed": self.seed,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }

    fn bytes(&self, id: u32) -> Vec<u8> {
        self.engine
            .tokenizer()
            .token_bytes(id)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// The tokens of `events` that log-probabilities report.
    fn reported<'t>(&self, events: &'t [TokenEvent]) -> Vec<&'t TokenEvent> {
        events
            .iter()
            .filter(|t| !self.hidden.contains(&t.id))
            .collect()
    }

    /// The `logprobs` of a choice or chunk for these tokens (`null` when not asked for);
    /// `offset` is the answer's length in bytes before them (for completions' `text_offset`).
    fn logprobs(&self, events: &[TokenEvent], offset: &mut usize) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let tokens = self.reported(events);
        match self.endpoint {
            Endpoint::Chat => json!({
                "content": tokens.iter().map(|t| {
                    let bytes = self.bytes(t.id);
                    json!({
                        "token": String::from_utf8_lossy(&bytes),
                        "logprob": t.raw_logprob,
                        "bytes": bytes,
                        "top_logprobs": t.top.iter().map(|a| json!({
                            "token": a.text,
                            "logprob": a.logprob,
                            "bytes": self.bytes(a.id),
                        })).collect::<Vec<_>>(),
                    })
                }).collect::<Vec<_>>(),
            }),
            Endpoint::Completion => {
                let mut texts = Vec::new();
                let mut offsets = Vec::new();
                for t in &tokens {
                    let bytes = self.bytes(t.id);
                    offsets.push(*offset);
                    *offset += bytes.len();
                    texts.push(String::from_utf8_lossy(&bytes).into_owned());
                }
                json!({
                    "tokens": texts,
                    "token_logprobs": tokens.iter().map(|t| t.raw_logprob).collect::<Vec<_>>(),
                    "top_logprobs": tokens.iter().map(|t| {
                        t.top.iter().map(|a| (a.text.clone(), json!(a.logprob)))
                            .collect::<serde_json::Map<String, Value>>()
                    }).collect::<Vec<_>>(),
                    "text_offset": offsets,
                })
            }
        }
    }

    /// The text of a choice or delta, in the endpoint's field.
    fn text_field(&self, text: &str) -> (&'static str, Value) {
        match self.endpoint {
            Endpoint::Chat => ("delta", json!({ "content": text })),
            Endpoint::Completion => ("text", json!(text)),
        }
    }
}

/// OpenAI's `finish_reason`, nextok's `stop_reason`, and the stop sequence that matched.
fn finish(stop: &Stop) -> (&'static str, &'static str, Value) {
    match stop {
        Stop::EndTurn { .. } => ("stop", "end_turn", Value::Null),
        Stop::StopSequence { text, .. } => ("stop", "stop_sequence", json!(text)),
        Stop::MaxTokens => ("length", "max_tokens", Value::Null),
        Stop::ContextWindow => ("length", "context_window", Value::Null),
        _ => ("stop", "other", Value::Null),
    }
}

/// The answer of a completion as the client sees it: with the stop sequence appended when
/// `include_stop_str_in_output` asks for it.
fn answer_text(plan: &Plan, c: &Completion) -> String {
    let mut text = c.text.clone();
    if plan.include_stop_str {
        if let Stop::StopSequence { text: s, .. } = &c.stop {
            text.push_str(s);
        }
    }
    text
}

/// `usage`, over all completions of a request.
fn usage(completions: &[&Completion]) -> Value {
    let prompt = completions.first().map_or(0, |c| c.usage.prompt_tokens);
    let cached = completions
        .first()
        .map_or(0, |c| c.usage.cached_prompt_tokens);
    let generated: usize = completions.iter().map(|c| c.usage.completion_tokens).sum();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": generated,
        "total_tokens": prompt + generated,
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

/// Observes the request's latency histograms once it has ended.
fn observe(state: &State, started: Instant, first: Option<Instant>, longest: usize) {
    let end = Instant::now();
    let m = &state.metrics;
    m.request_duration
        .observe(end.duration_since(started).as_secs_f64());
    if let Some(first) = first {
        m.time_to_first_token
            .observe(first.duration_since(started).as_secs_f64());
        if longest > 1 {
            m.time_per_output_token
                .observe(end.duration_since(first).as_secs_f64() / (longest - 1) as f64);
        }
    }
}

/// The request's end when the channel closed early: the scheduler stopped (shutting down).
fn ended_early() -> ApiError {
    ApiError::unavailable(
        "the request was stopped before it finished: the server is shutting down",
        "shutting_down",
        1,
    )
}

/// Waits for every completion and answers with all of them.
async fn collect(state: &State, mut r: Running) -> Result<Value, ApiError> {
    let n = r.plan.options.n;
    let mut tokens: Vec<Vec<TokenEvent>> = vec![Vec::new(); n];
    let mut done: Vec<Option<Completion>> = vec![None; n];
    let mut finished = 0;
    let mut first = None;
    while finished < n {
        match r.events.recv().await {
            None => return Err(ended_early()),
            Some(Err(e)) => {
                r.cancel.disarm();
                return Err(e.into());
            }
            Some(Ok(Event::Token(t))) => {
                first.get_or_insert_with(Instant::now);
                if r.plan.logprobs {
                    if let Some(list) = tokens.get_mut(t.index) {
                        list.push(t);
                    }
                }
            }
            Some(Ok(Event::Done(c))) => {
                let index = c.index;
                if let Some(slot) = done.get_mut(index) {
                    if slot.replace(*c).is_none() {
                        finished += 1;
                    }
                }
            }
        }
    }
    r.cancel.disarm();
    let completions: Vec<&Completion> = done.iter().flatten().collect();
    let longest = completions
        .iter()
        .map(|c| c.tokens.len())
        .max()
        .unwrap_or(0);
    observe(state, r.started, first, longest);
    let mut offset = 0;
    let choices = completions
        .iter()
        .map(|c| {
            let (finish_reason, stop_reason, stop_sequence) = finish(&c.stop);
            let text = answer_text(&r.plan, c);
            offset = 0;
            let events = tokens.get(c.index).map_or(&[][..], Vec::as_slice);
            let logprobs = r.shape.logprobs(events, &mut offset);
            let mut choice = json!({
                "index": c.index,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "stop_sequence": stop_sequence,
            });
            match r.plan.endpoint {
                Endpoint::Chat => {
                    choice["message"] = json!({ "role": "assistant", "content": text })
                }
                Endpoint::Completion => choice["text"] = json!(text),
            }
            choice
        })
        .collect();
    Ok(r.shape.envelope(false, choices, Some(usage(&completions))))
}

/// Where a stream stands.
struct StreamState {
    state: Arc<State>,
    running: Running,
    queue: std::collections::VecDeque<SseEvent>,
    /// Per completion: the text sent so far, and the bytes before the next token (completions'
    /// `text_offset`).
    sent: Vec<(String, usize)>,
    done: Vec<Option<Completion>>,
    finished: usize,
    first: Option<Instant>,
    over: bool,
}

fn data(value: &Value) -> SseEvent {
    SseEvent::default().data(value.to_string())
}

impl StreamState {
    fn chunk(&self, index: usize, field: (&'static str, Value), logprobs: Value) -> SseEvent {
        let shape = &self.running.shape;
        let mut choice = json!({ "index": index, "logprobs": logprobs, "finish_reason": null });
        choice[field.0] = field.1;
        data(&shape.envelope(true, vec![choice], None))
    }

    /// Turns one event of the scheduler into chunks.
    fn push(&mut self, event: Option<Result<Event, nextok::Error>>) {
        let shape = &self.running.shape;
        match event {
            None => {
                let e = ended_early();
                self.queue.push_back(data(&e.body()));
                self.close();
            }
            Some(Err(e)) => {
                self.running.cancel.disarm();
                self.queue.push_back(data(&ApiError::from(e).body()));
                self.close();
            }
            Some(Ok(Event::Token(t))) => {
                self.first.get_or_insert_with(Instant::now);
                let Some((sent, offset)) = self.sent.get_mut(t.index) else {
                    return;
                };
                sent.push_str(&t.text);
                let report = shape.logprobs && !shape.hidden.contains(&t.id);
                if t.text.is_empty() && !report {
                    return;
                }
                let mut off = *offset;
                let logprobs = shape.logprobs(std::slice::from_ref(&t), &mut off);
                *offset = off;
                let field = shape.text_field(&t.text);
                let chunk = self.chunk(t.index, field, logprobs);
                self.queue.push_back(chunk);
            }
            Some(Ok(Event::Done(c))) => {
                let index = c.index;
                let Some((sent, _)) = self.sent.get(index) else {
                    return;
                };
                // Whatever the answer holds beyond what was streamed (nothing, as the library
                // releases every character with a token; kept so that a stream can never end
                // shorter than the whole answer).
                let answer = answer_text(&self.running.plan, &c);
                let rest = answer.strip_prefix(sent.as_str()).unwrap_or_default();
                if !rest.is_empty() {
                    let field = shape.text_field(rest);
                    let chunk = self.chunk(index, field, Value::Null);
                    self.queue.push_back(chunk);
                }
                let (finish_reason, stop_reason, stop_sequence) = finish(&c.stop);
                let empty = match shape.endpoint {
                    Endpoint::Chat => ("delta", json!({})),
                    Endpoint::Completion => ("text", json!("")),
                };
                let mut choice = json!({
                    "index": index,
                    "logprobs": null,
                    "finish_reason": finish_reason,
                    "stop_reason": stop_reason,
                    "stop_sequence": stop_sequence,
                });
                choice[empty.0] = empty.1;
                self.queue
                    .push_back(data(&shape.envelope(true, vec![choice], None)));
                if let Some(slot) = self.done.get_mut(index) {
                    if slot.replace(*c).is_none() {
                        self.finished += 1;
                    }
                }
                if self.finished == self.running.plan.options.n {
                    self.running.cancel.disarm();
                    let completions: Vec<&Completion> = self.done.iter().flatten().collect();
                    let longest = completions
                        .iter()
                        .map(|c| c.tokens.len())
                        .max()
                        .unwrap_or(0);
                    observe(&self.state, self.running.started, self.first, longest);
                    if self.running.plan.include_usage {
                        let u = usage(&completions);
                        let chunk = self.running.shape.envelope(true, Vec::new(), Some(u));
                        self.queue.push_back(data(&chunk));
                    }
                    self.close();
                }
            }
        }
    }

    fn close(&mut self) {
        self.queue.push_back(SseEvent::default().data("[DONE]"));
        self.over = true;
    }
}

/// Streams the request's chunks as Server-Sent Events. Dropping the stream (the client went
/// away) drops the receiver and the guard, which cancels the request.
fn stream(state: Arc<State>, running: Running) -> impl IntoResponse {
    let n = running.plan.options.n;
    let mut s = StreamState {
        state,
        running,
        queue: Default::default(),
        sent: vec![(String::new(), 0); n],
        done: vec![None; n],
        finished: 0,
        first: None,
        over: false,
    };
    if s.running.plan.endpoint == Endpoint::Chat {
        for index in 0..n {
            let chunk = s.chunk(
                index,
                ("delta", json!({ "role": "assistant", "content": "" })),
                Value::Null,
            );
            s.queue.push_back(chunk);
        }
    }
    let events = futures_util::stream::unfold(s, |mut s| async move {
        loop {
            if let Some(event) = s.queue.pop_front() {
                return Some((Ok::<_, Infallible>(event), s));
            }
            if s.over {
                return None;
            }
            let event = s.running.events.recv().await;
            s.push(event);
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
