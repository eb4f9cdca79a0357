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
    Validation(String),
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
    /// `headers_too_large`, `validation_failed`, `unavailable`, `timeout` or `internal`.
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
            ApiError::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
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
            ApiError::Validation(_) => "validation_failed",
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
