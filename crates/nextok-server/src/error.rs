//! Errors: the library's own ([`Error`]) and what a client sees ([`ApiError`], OpenAI's envelope).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// What can go wrong when setting a [`Server`](crate::Server) up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// [`Server::set_ready`](crate::Server::set_ready) was called a second time.
    #[error("the server already has its model: set_ready may be called once")]
    AlreadyReady,
    /// A configuration value out of its range.
    #[error("invalid server setting `{setting}`: it must be {expected}")]
    InvalidConfig {
        /// The field of [`ServerConfig`](crate::ServerConfig).
        setting: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

/// An error as the client sees it: an HTTP status and OpenAI's envelope
/// `{"error": {"message", "type", "param", "code"}}`.
///
/// Every refusal of a request is one of these; the status says whose fault it is (4xx: the
/// request's; 429 and 503: come back later, with `Retry-After`; 500: the server's, never caused by
/// what a request holds).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// One sentence for a person: what was wrong and what to do.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, ...).
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed (sent as `Retry-After`).
    pub retry_after_s: Option<u32>,
}

impl ApiError {
    /// A 400 for an invalid request, naming the field at fault when there is one.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: None,
            retry_after_s: None,
        }
    }

    /// A 400 for a field that the OpenAI API knows and nextok does not implement.
    pub fn unsupported(field: &str, why: &str) -> Self {
        ApiError {
            code: Some("unsupported_parameter"),
            ..ApiError::invalid(
                format!("`{field}` is not supported by nextok{why}"),
                Some(field),
            )
        }
    }

    /// A 404.
    pub fn not_found(message: impl Into<String>, code: &'static str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: Some(code),
            ..ApiError::invalid(message, None)
        }
    }

    /// A 401: a key is required and this one is missing or wrong.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "a valid API key is required: send `Authorization: Bearer KEY`".into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
            retry_after_s: None,
        }
    }

    /// A 503 with `Retry-After`: the model is loading or the server is shutting down.
    pub fn unavailable(message: impl Into<String>, code: &'static str, retry_after_s: u32) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "unavailable_error",
            param: None,
            code: Some(code),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// A 500: something failed that no request can cause (a model file that fails to run).
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after_s: None,
        }
    }

    /// The envelope's JSON, as sent in a body or in a stream's error event.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<nextok::Error> for ApiError {
    /// The status of a library error: what the request asked for is a 400 (bad options, a prompt
    /// over the context window, a grammar past its limits), a full queue a 429, a scheduler that
    /// has shut down a 503; only a failure of the model itself is a 500.
    fn from(e: nextok::Error) -> Self {
        use nextok::Error as E;
        let message = e.to_string();
        match e {
            E::ContextWindowExceeded { .. } => ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::invalid(message, Some("messages"))
            },
            E::InvalidOption { option, .. } | E::OutOfRange { option, .. } => {
                ApiError::invalid(message, Some(option))
            }
            E::Sampling(nextok::sampling::Error::InvalidParam { name, .. }) => {
                ApiError::invalid(message, Some(name))
            }
            E::Constraint(_) => ApiError::invalid(message, Some("response_format")),
            E::Stopping(_) => ApiError::invalid(message, Some("stop")),
            E::QueueFull { .. } => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message,
                kind: "rate_limit_error",
                param: None,
                code: Some("queue_full"),
                retry_after_s: Some(1),
            },
            E::SchedulerShutDown => ApiError::unavailable(message, "shutting_down", 1),
            E::ExceedsKvBudget { .. } => ApiError {
                code: Some("exceeds_kv_budget"),
                ..ApiError::invalid(message, Some("max_tokens"))
            },
            E::EmptyPrompt
            | E::TokenOutOfRange { .. }
            | E::SpecialTextInRole { .. }
            | E::NoChatTemplate
            | E::Tokenizer(_)
            | E::Sampling(_) => ApiError::invalid(message, None),
            _ => {
                tracing::error!(error = %message, "a request failed inside the library");
                ApiError::internal(message)
            }
        }
    }
}
