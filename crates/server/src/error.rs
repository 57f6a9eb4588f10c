//! Errors: [`ApiError`], what a client sees (OpenAI's JSON shape and an HTTP status), and
//! [`ServerError`], why the server itself could not start or run.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use thiserror::Error;

/// Why the server could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The engine thread could not be started.
    #[error("starting the engine thread: {0}")]
    EngineThread(#[source] std::io::Error),
    /// The listener failed.
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
    /// A setting is unusable (zero parallel sequences, zero context, ...).
    #[error("invalid server setting {name} = {value}: {expected}")]
    InvalidSetting {
        /// The setting, as its flag names it.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The model could not make the paged KV pool.
    #[error("making the KV pool of {blocks} blocks of {block_size} tokens: {message}")]
    Pool {
        /// Blocks asked for.
        blocks: usize,
        /// Tokens per block.
        block_size: usize,
        /// The model's error.
        message: String,
    },
}

/// An error response in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`
/// with an HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, if any.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, ...).
    pub code: Option<&'static str>,
    /// Seconds to wait before retrying (`Retry-After`, with 429 and 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: an invalid value of request field `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut error = Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message.into(),
        );
        error.param = Some(param.into());
        error.code = Some("invalid_value");
        error
    }

    /// 400: a request that is malformed as a whole (not JSON, not an object).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 `context_length_exceeded`.
    pub fn context_length(prompt_tokens: usize, context: usize, param: &str) -> Self {
        let mut error = Self::invalid(
            param,
            format!(
                "This model's maximum context length is {context} tokens. However, your prompt \
                 has {prompt_tokens} tokens, which leaves no room for a completion. Please reduce \
                 the length of the prompt."
            ),
        );
        error.code = Some("context_length_exceeded");
        error
    }

    /// 401: a missing or wrong API key.
    pub fn unauthorized() -> Self {
        let mut error = Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "Incorrect or missing API key. Send it as `Authorization: Bearer <key>`.",
        );
        error.code = Some("invalid_api_key");
        error
    }

    /// 404: an unknown model.
    pub fn unknown_model(model: &str, served: &str) -> Self {
        let mut error = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist. This server serves `{served}`."),
        );
        error.param = Some("model".into());
        error.code = Some("model_not_found");
        error
    }

    /// 404: an unknown endpoint.
    pub fn unknown_endpoint(method: &str, path: &str) -> Self {
        let mut error = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown endpoint: {method} {path}"),
        );
        error.code = Some("unknown_url");
        error
    }

    /// 405: a known endpoint with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        let mut error = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed on {path}"),
        );
        error.code = Some("method_not_allowed");
        error
    }

    /// 413: a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        let mut error = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than the limit of {limit} bytes."),
        );
        error.code = Some("request_too_large");
        error
    }

    /// 415: a body that is not declared as JSON.
    pub fn unsupported_media_type(got: Option<&str>) -> Self {
        let mut error = Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!(
                "Expected `Content-Type: application/json`, got {}.",
                got.map_or("none".to_string(), |t| format!("`{t}`"))
            ),
        );
        error.code = Some("unsupported_media_type");
        error
    }

    /// 429: the queue is full.
    pub fn queue_full(queue: usize) -> Self {
        let mut error = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!("The server is busy: {queue} requests are already waiting. Retry later."),
        );
        error.code = Some("queue_full");
        error.retry_after = Some(1);
        error
    }

    /// 503: the server is shutting down.
    pub fn draining() -> Self {
        let mut error = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The server is shutting down and accepts no new requests.",
        );
        error.code = Some("draining");
        error.retry_after = Some(1);
        error
    }

    /// 500: the model failed while running (never caused by the request's values).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body.
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
