//! An OpenAI-compatible HTTP server for nextok: an [axum] [`Router`] over the facade's
//! continuous-batching [`Scheduler`], usable by any Rust program that wants to embed it (the
//! `nextok serve` command is one).
//!
//! # Contents
//! - [Endpoints](#endpoints)
//! - [Requests](#requests)
//! - [Seeds and reproducibility](#seeds-and-reproducibility)
//! - [Errors](#errors)
//! - [Metrics, and routing across replicas](#metrics-and-routing-across-replicas)
//! - [Example](#example)
//!
//! # Endpoints
//! | route | what |
//! |---|---|
//! | `POST /v1/chat/completions` | messages rendered with the model's chat template (content is always text: `<\|im_start\|>` in a message never becomes a control token) |
//! | `POST /v1/completions` | a raw prompt: a text, or a list of token ids |
//! | `GET /v1/models` | the one model served |
//! | `GET /health` | 503 while the model loads or the server shuts down, 200 `{"status":"ok"}` when ready; never needs a key |
//! | `GET /metrics` | Prometheus (OpenMetrics) text; needs the key only when [`ServerConfig::protect_metrics`] is set |
//! | `POST /tokenize`, `POST /detokenize` | `{"content": text}` (or `"prompt"`, or `"messages"`) to `{"tokens", "count", "max_model_len"}`, and `{"tokens"}` to `{"content"}` |
//!
//! Every generation runs through the [`Scheduler`]: concurrent requests share one forward pass
//! per step, and a request's tokens are the same bits whatever else runs beside it.
//!
//! # Requests
//! OpenAI's fields, with their names and meanings: `model`, `messages` / `prompt`, `max_tokens`
//! and `max_completion_tokens`, `temperature` (default 1), `top_p`, `seed`, `n`, `stop` (a text
//! or a list), `stream`, `stream_options.include_usage`, `logprobs` + `top_logprobs` (chat) or
//! `logprobs` (completions, a count), `presence_penalty`, `frequency_penalty`, `logit_bias`,
//! `response_format` (`text`, `json_object`, `json_schema`; output always follows the schema,
//! so `strict` may be either). The extensions llama.cpp and vLLM users send: `top_k`, `min_p`,
//! `repetition_penalty`, `min_tokens`, `ignore_eos`, `include_stop_str_in_output`, `grammar`
//! (GBNF), `regex`, `choice`. `user`, `store`, `metadata` and `service_tier` are accepted and
//! change nothing. A known field nextok does not implement (`tools`, `prompt_logprobs`, ...) and
//! an unknown field are 400s that name it: never silently ignored. Grammars and schemas are
//! compiled under [`ServerConfig::constraint_limits`], schemas read as the engine's
//! [`Engine::json_schema_options`](nextok::Engine::json_schema_options) say. Keywords a schema
//! holds that JSON Schema reads as annotations (unknown keywords and `format` names, other
//! drafts' keywords) are not enforced, and the response names them in its
//! `x-nextok-schema-ignored` header (`keyword at path` entries joined by `; `); an engine set
//! to strict refuses them with a 400 instead.
//!
//! Responses have OpenAI's shape (`id`, `object`, `created`, `model`, `choices`, `usage` with
//! `prompt_tokens_details.cached_tokens`), with `finish_reason` `stop` (an end token or a stop
//! sequence) or `length` (max tokens or the context window); beside it, each choice has
//! nextok's own `stop_reason` (`end_turn`, `max_tokens`, `stop_sequence`, `context_window`) and
//! `stop_sequence` (the one that matched, or null). Streams are Server-Sent Events: a first
//! chunk with the role (chat), content deltas of whole UTF-8 characters, a chunk with the
//! `finish_reason`, a usage chunk with empty `choices` when `stream_options.include_usage` is
//! set, then `data: [DONE]`. Stop sequences never reach a stream, however they are split over
//! tokens, and the deltas joined are the non-streamed answer.
//!
//! A client that disconnects, streaming or not, cancels its request: the scheduler frees its
//! sequence and KV blocks within one step.
//!
//! # Seeds and reproducibility
//! A request without `seed` gets a fresh random one, chosen here (the library below never takes
//! randomness from the operating system), and every response reports the seed it used in a
//! top-level `seed` field: send it back to get the same answer. Completion `i` of `n` draws with
//! `seed + i`. The same request with the same seed gives the same tokens whatever else the
//! server is doing.
//!
//! # Errors
//! OpenAI's envelope `{"error": {"message", "type", "param", "code"}}` ([`ApiError`]): 400 for
//! invalid parameters, malformed JSON and a prompt over the context window (the message gives
//! both counts; code `context_length_exceeded`); 401 for a missing or wrong key when
//! [`ServerConfig::api_key`] is set; 404 for an unknown route or model; 413 for a body over
//! [`ServerConfig::max_body_bytes`]; 429 with `Retry-After` when the scheduler's queue is full;
//! 503 with `Retry-After` while loading or shutting down. No request body produces a 500.
//!
//! # Metrics, and routing across replicas
//! `nextok_requests_running`, `nextok_requests_waiting`, `nextok_kv_cache_usage_ratio`
//! (gauges), `nextok_prompt_tokens_total`, `nextok_generation_tokens_total` (counters), and the
//! histograms `nextok_time_to_first_token_seconds`, `nextok_time_per_output_token_seconds`,
//! `nextok_request_duration_seconds`. Behind the Kubernetes Gateway API Inference Extension,
//! whose endpoint picker balances on a queue length and a KV-cache utilisation per server (vLLM's
//! `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc`), map those to
//! `nextok_requests_waiting` and `nextok_kv_cache_usage_ratio` (both are plain gauges; the ratio
//! is 0 to 1, as vLLM's is).
//!
//! # Example
//! A server embedded in a program: bind first (so that `/health` answers 503 while loading), then
//! load the model and hand the scheduler over.
//!
//! ```no_run
//! use nextok::{Engine, EngineOptions, Scheduler, SchedulerOptions};
//! use nextok_server::{Server, ServerConfig};
//! use std::sync::Arc;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::new(ServerConfig::new("SmolLM2-135M-Instruct"))?;
//! let router: axum::Router = server.router();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let serving = tokio::spawn(nextok_server::serve(listener, router, std::future::pending()));
//!
//! let engine = Arc::new(Engine::load("model.gguf", &EngineOptions::default())?);
//! server.set_ready(Arc::new(Scheduler::new(engine, SchedulerOptions::default())?))?;
//! serving.await??;
//! # Ok(())
//! # }
//! ```

mod error;
mod generate;
mod metrics;
mod request;
mod routes;

pub use error::{ApiError, Error};

use nextok::constraints::Limits;
use nextok::{Engine, Scheduler};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use axum::Router;

/// How the server behaves.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The model's id in `/v1/models`; a request naming another model is a 404.
    pub model_name: String,
    /// When set, every route but `/health` (and `/metrics`, unless
    /// [`ServerConfig::protect_metrics`]) needs `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// `/metrics` needs the key too.
    pub protect_metrics: bool,
    /// The largest request body, in bytes (default 8 MiB); a larger one is a 413.
    pub max_body_bytes: usize,
    /// Bounds on each request's grammar, schema or pattern (default [`Limits::DEFAULT`]).
    pub constraint_limits: Limits,
    /// The most tokens one completion may ask for, and the answer's length when a request gives
    /// none (default `None`: up to the context window).
    pub max_tokens_limit: Option<usize>,
}

impl ServerConfig {
    /// The default body limit: 8 MiB, room for long prompts and large schemas.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;

    /// The defaults, serving a model under `model_name`.
    pub fn new(model_name: impl Into<String>) -> Self {
        ServerConfig {
            model_name: model_name.into(),
            api_key: None,
            protect_metrics: false,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            constraint_limits: Limits::DEFAULT,
            max_tokens_limit: None,
        }
    }

    /// Sets [`ServerConfig::api_key`].
    pub fn with_api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key;
        self
    }

    /// Sets [`ServerConfig::protect_metrics`].
    pub fn with_protect_metrics(mut self, on: bool) -> Self {
        self.protect_metrics = on;
        self
    }

    /// Sets [`ServerConfig::max_body_bytes`].
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`ServerConfig::constraint_limits`].
    pub fn with_constraint_limits(mut self, limits: Limits) -> Self {
        self.constraint_limits = limits;
        self
    }

    /// Sets [`ServerConfig::max_tokens_limit`].
    pub fn with_max_tokens_limit(mut self, limit: Option<usize>) -> Self {
        self.max_tokens_limit = limit;
        self
    }

    fn validate(&self) -> Result<(), Error> {
        if self.model_name.is_empty() {
            return Err(Error::InvalidConfig {
                setting: "model_name",
                expected: "a non-empty name",
            });
        }
        if self.api_key.as_deref() == Some("") {
            return Err(Error::InvalidConfig {
                setting: "api_key",
                expected: "a non-empty key, or none",
            });
        }
        if self.max_body_bytes == 0 {
            return Err(Error::InvalidConfig {
                setting: "max_body_bytes",
                expected: "at least 1",
            });
        }
        if self.max_tokens_limit == Some(0) {
            return Err(Error::InvalidConfig {
                setting: "max_tokens_limit",
                expected: "at least 1, or none",
            });
        }
        Ok(())
    }
}

/// The model, once loaded.
pub(crate) struct Ready {
    pub scheduler: Arc<Scheduler>,
    pub engine: Arc<Engine>,
}

/// Everything the handlers share.
pub(crate) struct State {
    pub config: ServerConfig,
    pub ready: OnceLock<Ready>,
    pub draining: AtomicBool,
    pub metrics: metrics::Metrics,
    pub metrics_source: metrics::Source,
    /// Unix time the server was made: the model's `created` in `/v1/models`.
    pub created: u64,
}

impl State {
    /// The model, or the 503 that says why there is none yet.
    pub(crate) fn ready(&self) -> Result<&Ready, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable(
                "the server is shutting down: retry on another replica",
                "shutting_down",
                1,
            ));
        }
        self.ready
            .get()
            .ok_or_else(|| ApiError::unavailable("the model is loading", "model_loading", 5))
    }
}

/// A server: its [`Router`], and the switch from loading to ready.
///
/// Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct Server {
    state: Arc<State>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("model_name", &self.state.config.model_name)
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl Server {
    /// A server that is still loading: every route but `/health` and `/metrics` answers 503 until
    /// [`Server::set_ready`].
    pub fn new(config: ServerConfig) -> Result<Self, Error> {
        config.validate()?;
        let source: metrics::Source = Arc::new(OnceLock::new());
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Server {
            state: Arc::new(State {
                config,
                ready: OnceLock::new(),
                draining: AtomicBool::new(false),
                metrics: metrics::Metrics::new(source.clone()),
                metrics_source: source,
                created,
            }),
        })
    }

    /// A server over a scheduler that is ready now.
    pub fn with_scheduler(config: ServerConfig, scheduler: Arc<Scheduler>) -> Result<Self, Error> {
        let server = Server::new(config)?;
        server.set_ready(scheduler)?;
        Ok(server)
    }

    /// Hands the loaded model's scheduler over: from now on the server answers.
    pub fn set_ready(&self, scheduler: Arc<Scheduler>) -> Result<(), Error> {
        let engine = scheduler.engine().clone();
        let for_metrics = scheduler.clone();
        self.state
            .ready
            .set(Ready { scheduler, engine })
            .map_err(|_| Error::AlreadyReady)?;
        let _ = self
            .state
            .metrics_source
            .set(Box::new(move || metrics::snapshot(&for_metrics)));
        Ok(())
    }

    /// Whether the model is loaded.
    pub fn is_ready(&self) -> bool {
        self.state.ready.get().is_some()
    }

    /// The scheduler, once ready.
    pub fn scheduler(&self) -> Option<&Arc<Scheduler>> {
        self.state.ready.get().map(|r| &r.scheduler)
    }

    /// Starts shutting down: `/health` answers 503 (so that a load balancer stops sending
    /// requests) and new generations are refused with a 503; requests already running go on.
    /// Stopping them is [`Scheduler::shutdown`]'s job.
    pub fn begin_shutdown(&self) {
        self.state.draining.store(true, Ordering::SeqCst);
    }

    /// The routes, with the body limit, authentication and the JSON 404.
    pub fn router(&self) -> Router {
        routes::router(self.state.clone())
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting connections and
/// waits for the open ones to finish (bound that wait by ending their requests, e.g. with
/// [`Scheduler::shutdown`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
