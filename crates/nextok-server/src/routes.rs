//! The routes, authentication, and every endpoint that needs only the engine.

use crate::error::ApiError;
use crate::State;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State as Shared};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nextok::tokenizer::EncodeOptions;
use nextok::Prompt;
use serde_json::{json, Value};
use std::sync::Arc;

/// Every route, behind the body limit; all but `/health` (and `/metrics` unless protected) behind
/// the key when one is set.
pub(crate) fn router(state: Arc<State>) -> Router {
    let mut keyed = Router::new()
        .route("/v1/chat/completions", post(crate::generate::chat))
        .route("/v1/completions", post(crate::generate::completions))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize));
    let mut open = Router::new().route("/health", get(health));
    if state.config.protect_metrics {
        keyed = keyed.route("/metrics", get(metrics));
    } else {
        open = open.route("/metrics", get(metrics));
    }
    let keyed = keyed.route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let limit = state.config.max_body_bytes;
    keyed
        .merge(open)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Lets a request through when no key is set or it carries `Authorization: Bearer KEY`.
async fn authenticate(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| same(g.as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Compares two keys in time that depends only on their lengths, not on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(
        format!(
            "no route {} {}: see /v1/chat/completions, /v1/completions, /v1/models, /health, \
             /metrics, /tokenize, /detokenize",
            request.method(),
            request.uri().path()
        ),
        "not_found",
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: Some("method_not_allowed"),
        ..ApiError::invalid(
            format!(
                "{} is not allowed on {}",
                request.method(),
                request.uri().path()
            ),
            None,
        )
    }
}

/// The body, or the error that says why it could not be read (413 past the limit).
pub(crate) fn body(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: Some("request_too_large"),
                ..ApiError::invalid(
                    format!("the body is larger than this server's limit of {limit} bytes"),
                    None,
                )
            }
        } else {
            ApiError::invalid(format!("the body could not be read: {rejection}"), None)
        }
    })
}

async fn health(Shared(state): Shared<Arc<State>>) -> Response {
    match state.ready() {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn models(Shared(state): Shared<Arc<State>>) -> Result<Json<Value>, ApiError> {
    let ready = state.ready()?;
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": state.config.model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "nextok",
            "max_model_len": ready.engine.context_window(),
        }],
    })))
}

async fn metrics(Shared(state): Shared<Arc<State>>) -> Response {
    match state.metrics.render() {
        Ok(text) => {
            let mut response = text.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        Err(_) => ApiError::internal("the metrics could not be written").into_response(),
    }
}

/// `/tokenize`: `{"content": text}` (llama.cpp) or `{"prompt": text}` (vLLM), with
/// `add_special` / `add_special_tokens` (the BOS the model wants; default true); or
/// `{"messages": [...]}`, rendered with the chat template as `/v1/chat/completions` would.
async fn tokenize(
    Shared(state): Shared<Arc<State>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(raw, state.config.max_body_bytes)?;
    let ready = state.ready()?;
    let engine = &ready.engine;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}"), None))?;
    let Value::Object(object) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None));
    };
    if let Some(key) = object.keys().find(|k| {
        !matches!(
            k.as_str(),
            "content" | "prompt" | "messages" | "add_special" | "add_special_tokens" | "model"
        )
    }) {
        return Err(ApiError::invalid(
            format!("unknown field `{key}`"),
            Some(key),
        ));
    }
    if let Some(m) = object.get("model").and_then(Value::as_str) {
        check_model(&state, m)?;
    }
    let add_special = match object
        .get("add_special")
        .or_else(|| object.get("add_special_tokens"))
    {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid(
                "`add_special` must be true or false",
                Some("add_special"),
            ))
        }
    };
    let text = object.get("content").or_else(|| object.get("prompt"));
    let tokens = match (text, object.get("messages")) {
        (Some(Value::String(t)), None) => {
            let bos = add_special && engine.tokenizer().add_bos_by_default();
            engine
                .tokenizer()
                .encode(t, EncodeOptions::plain().with_bos(bos))
                .map_err(|e| ApiError::from(nextok::Error::from(e)))?
        }
        (None, Some(Value::Array(messages))) => {
            let messages = crate::request::chat_messages(messages)?;
            engine
                .encode_prompt(&Prompt::Chat(messages))
                .map_err(ApiError::from)?
        }
        _ => {
            return Err(ApiError::invalid(
                "give one of `content` (a text) or `messages` (a list of chat messages)",
                Some("content"),
            ))
        }
    };
    Ok(Json(json!({
        "tokens": tokens,
        "count": tokens.len(),
        "max_model_len": engine.context_window(),
    })))
}

/// `/detokenize`: `{"tokens": [ids]}` to `{"content": text}` (special tokens kept as their text).
async fn detokenize(
    Shared(state): Shared<Arc<State>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(raw, state.config.max_body_bytes)?;
    let ready = state.ready()?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Detokenize {
        tokens: Vec<u32>,
        #[allow(dead_code)] // Accepted as vLLM's clients send it; the one model is checked below.
        model: Option<String>,
    }
    let request: Detokenize = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::invalid(format!("the body is not a detokenize request: {e}"), None)
    })?;
    if let Some(m) = &request.model {
        check_model(&state, m)?;
    }
    let vocab = ready.engine.vocab_size();
    if let Some(&id) = request.tokens.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::invalid(
            format!("token id {id} is outside the vocabulary of {vocab} tokens"),
            Some("tokens"),
        ));
    }
    let content = ready
        .engine
        .tokenizer()
        .decode(&request.tokens, false)
        .map_err(|e| ApiError::from(nextok::Error::from(e)))?;
    Ok(Json(json!({ "content": content })))
}

/// A 404 unless `model` is the one served.
pub(crate) fn check_model(state: &State, model: &str) -> Result<(), ApiError> {
    if model == state.config.model_name {
        return Ok(());
    }
    Err(ApiError::not_found(
        format!(
            "the model `{model}` does not exist: this server serves `{}` (see /v1/models)",
            state.config.model_name
        ),
        "model_not_found",
    ))
}
