//! The API's error type: one enum, turned into `{"error": {"code", "message"}}` only here.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the request body is larger than 1 MiB")]
    PayloadTooLarge,
    #[error("the request's headers are larger than 32 KiB")]
    HeadersTooLarge,
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Validation(String),
    /// Over a rate limit: the caller adds `Retry-After` and the `RateLimit-*` headers.
    #[error("{0}")]
    RateLimited(String),
    /// Over a quota until the period's end, in seconds (`Retry-After`).
    #[error("{0}")]
    QuotaExceeded(String, u64),
    #[error("the database is unavailable; try again shortly")]
    Unavailable,
    #[error("the request took longer than {0} s; try again (a create with the same Idempotency-Key is not repeated)")]
    TimedOut(f64),
    #[error("internal error")]
    Internal,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`, `payload_too_large`,
    /// `headers_too_large`, `unsupported_media_type`, `validation_failed`, `rate_limited`,
    /// `quota_exceeded`, `unavailable`, `timeout` or `internal`.
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited(_) | ApiError::QuotaExceeded(..) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable | ApiError::TimedOut(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge => "payload_too_large",
            ApiError::HeadersTooLarge => "headers_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Validation(_) => "validation_failed",
            ApiError::RateLimited(_) => "rate_limited",
            ApiError::QuotaExceeded(..) => "quota_exceeded",
            ApiError::Unavailable => "unavailable",
            ApiError::TimedOut(_) => "timeout",
            ApiError::Internal => "internal",
        }
    }

    pub fn ticket_not_found(reference: &str) -> ApiError {
        ApiError::NotFound(format!("no ticket {reference:?}"))
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> ApiError {
        // The message stays in the log: SQL and connection details never reach a client.
        if crate::db::is_unavailable(&err) {
            tracing::warn!(error = %err, "database unavailable");
            if crate::db::is_connection_lost(&err) {
                crate::db::note_connection_loss();
            }
            ApiError::Unavailable
        } else {
            tracing::error!(error = %err, "database error");
            ApiError::Internal
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
            },
        };
        let mut response = (self.status(), Json(body)).into_response();
        if let ApiError::QuotaExceeded(_, retry_after) = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(*retry_after),
            );
        }
        if matches!(self, ApiError::Unauthorized) {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// How much of a plain-text error body is kept as the message.
const PLAIN_ERROR_LIMIT: usize = 16 * 1024;

/// Puts every error answered in plain text into the API's shape. The desk's own handlers answer
/// `ApiError`s, and `/v1` reads its input with extractors that do too; the layers under the agent
/// protocols' handlers do not: axum's extractors on the `/a2a` routes (a body over 1 MiB) and
/// rmcp's transport on `/mcp` (a missing `Accept`, an unknown session) write a line of text, and
/// a client reading `error.code` should not have to know which layer refused it. Layered on those
/// routers only, so `/v1`'s requests do not pass through it. The status and the other headers
/// (`Allow`, `WWW-Authenticate`, `Retry-After`) are kept; a 5xx never passes its text on.
pub async fn plain_errors_in_api_shape(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_none_or(|value| value.as_bytes().starts_with(b"text/plain"));
    if !plain || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, PLAIN_ERROR_LIMIT).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = if status.is_server_error() || text.trim().is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        text.trim().to_owned()
    };
    let shaped = (
        status,
        Json(ErrorBody {
            error: ErrorDetail {
                code: code_of(status),
                message,
            },
        }),
    )
        .into_response();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, shaped.into_body())
}

/// The code of an error that only has a status.
fn code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        406 => "not_acceptable",
        408 => "timeout",
        409 => "conflict",
        411 => "length_required",
        413 => "payload_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        422 => "validation_failed",
        429 => "too_many_requests",
        431 => "headers_too_large",
        501 => "not_implemented",
        503 => "unavailable",
        _ if status.is_client_error() => "client_error",
        _ => "internal",
    }
}
