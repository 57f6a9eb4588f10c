//! What the HTTP handlers share: the application state, reading a request's JSON body and
//! writing a JSON response.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::codec::TextCodec;
use crate::config::ServerConfig;
use crate::engine::EngineHandle;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::request::{Object, parse_object};

/// What every handler shares.
pub struct AppState<C: TextCodec> {
    /// The tokenizer and chat template.
    pub codec: Arc<C>,
    /// The engine thread.
    pub engine: EngineHandle,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The settings.
    pub config: ServerConfig,
    /// Set on shutdown: new requests get 503.
    pub draining: Arc<AtomicBool>,
    /// When the server started (the model's `created`).
    pub started: u64,
    /// With a draft model: how it drafts unless a request says otherwise.
    pub draft: Option<crate::draft::DraftDefaults>,
}

pub(crate) type Shared<C> = Arc<AppState<C>>;

/// A JSON body with its content type.
pub(crate) fn json_response(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The JSON object of a request: content type checked, body read within its limit.
pub(crate) async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Object, ApiError> {
    // A header that is not visible ASCII is named as the bytes it is (not as none).
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = content_type.as_deref().is_some_and(|t| {
        let essence = t.split(';').next().unwrap_or("").trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if !is_json {
        return Err(ApiError::unsupported_media_type(content_type.as_deref()));
    }
    let bytes: Bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|error| body_error(&error, limit))?;
    parse_object(&bytes)
}

/// A failed body read: over the limit (413), too slow (408), or broken (400).
fn body_error(error: &axum::Error, limit: usize) -> ApiError {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("length limit") {
        ApiError::too_large(limit)
    } else if lower.contains("timed out") || lower.contains("timeout") {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: "The request body was not received in time.".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("timeout"),
            retry_after: None,
        }
    } else {
        ApiError::bad_request(format!("Could not read the request body: {text}"))
    }
}
