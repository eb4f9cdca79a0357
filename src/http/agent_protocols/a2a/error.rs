//! A2A's errors, and how each binding writes them: JSON-RPC error objects (always with HTTP 200,
//! as clients expect) and `google.rpc.Status` bodies with the matching HTTP status for HTTP+JSON.
//! Both carry a `google.rpc.ErrorInfo` whose `reason` names the error.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::http::error::ApiError;

#[derive(Debug)]
pub enum A2aError {
    TaskNotFound(String),
    TaskNotCancelable(String),
    UnsupportedOperation(String),
    PushNotificationNotSupported,
    VersionNotSupported(String),
    InvalidParams(String),
    InvalidRequest(String),
    MethodNotFound(String),
    Parse(String),
    /// The desk's own refusals (a missing or read-only token) and outages keep their HTTP status.
    Api(ApiError),
}

impl From<ApiError> for A2aError {
    fn from(err: ApiError) -> A2aError {
        match err {
            ApiError::NotFound(message) => A2aError::TaskNotFound(message),
            ApiError::BadRequest(message) | ApiError::Validation(message) | ApiError::Conflict(message) => {
                A2aError::InvalidParams(message)
            }
            other => A2aError::Api(other),
        }
    }
}

impl From<crate::transitions::DeskError> for A2aError {
    fn from(err: crate::transitions::DeskError) -> A2aError {
        ApiError::from(err).into()
    }
}

impl From<sqlx::Error> for A2aError {
    fn from(err: sqlx::Error) -> A2aError {
        A2aError::Api(err.into())
    }
}

impl A2aError {
    /// (JSON-RPC code, HTTP status, gRPC status name, ErrorInfo reason)
    fn parts(&self) -> (i64, StatusCode, &'static str, &'static str) {
        match self {
            A2aError::TaskNotFound(_) => (-32001, StatusCode::NOT_FOUND, "NOT_FOUND", "TASK_NOT_FOUND"),
            // 409, as the specification's table of error mappings has it.
            A2aError::TaskNotCancelable(_) => (
                -32002,
                StatusCode::CONFLICT,
                "FAILED_PRECONDITION",
                "TASK_NOT_CANCELABLE",
            ),
            A2aError::UnsupportedOperation(_) => (
                -32004,
                StatusCode::BAD_REQUEST,
                "FAILED_PRECONDITION",
                "UNSUPPORTED_OPERATION",
            ),
            A2aError::PushNotificationNotSupported => (
                -32003,
                StatusCode::BAD_REQUEST,
                "FAILED_PRECONDITION",
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            A2aError::VersionNotSupported(_) => (
                -32009,
                StatusCode::BAD_REQUEST,
                "FAILED_PRECONDITION",
                "VERSION_NOT_SUPPORTED",
            ),
            A2aError::InvalidParams(_) => (-32602, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "INVALID_PARAMS"),
            A2aError::InvalidRequest(_) => (-32600, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "INVALID_REQUEST"),
            A2aError::MethodNotFound(_) => (-32601, StatusCode::NOT_FOUND, "NOT_FOUND", "METHOD_NOT_FOUND"),
            A2aError::Parse(_) => (-32700, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "PARSE_ERROR"),
            A2aError::Api(err) => (-32603, err.status(), "INTERNAL", "INTERNAL_ERROR"),
        }
    }

    pub fn message(&self) -> String {
        match self {
            A2aError::TaskNotFound(m)
            | A2aError::TaskNotCancelable(m)
            | A2aError::UnsupportedOperation(m)
            | A2aError::VersionNotSupported(m)
            | A2aError::InvalidParams(m)
            | A2aError::InvalidRequest(m)
            | A2aError::MethodNotFound(m)
            | A2aError::Parse(m) => m.clone(),
            A2aError::PushNotificationNotSupported => {
                "push notifications are not supported: stream the task, or use the desk's webhooks".into()
            }
            A2aError::Api(err) => err.to_string(),
        }
    }

    /// Answered as HTTP errors on both bindings: a missing or read-only token, a body too large.
    pub fn is_http_level(&self) -> bool {
        matches!(self, A2aError::Api(err) if http_level(err))
    }

    fn error_info(&self) -> Value {
        let (_, _, _, reason) = self.parts();
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
        })
    }

    /// The JSON-RPC `error` object.
    pub fn rpc_error(&self) -> Value {
        let (code, ..) = self.parts();
        json!({"code": code, "message": self.message(), "data": [self.error_info()]})
    }

    /// The `google.rpc.Status` body of the HTTP+JSON binding.
    pub fn status_body(&self) -> Value {
        let (_, status, grpc, _) = self.parts();
        json!({"error": {
            "code": status.as_u16(),
            "status": grpc,
            "message": self.message(),
            "details": [self.error_info()],
        }})
    }

    pub fn http_status(&self) -> StatusCode {
        self.parts().1
    }
}

/// The HTTP+JSON form; the desk's own refusals keep the desk's error body (and
/// `WWW-Authenticate` on a 401).
impl IntoResponse for A2aError {
    fn into_response(self) -> Response {
        match self {
            A2aError::Api(err) if http_level(&err) => err.into_response(),
            other => (other.http_status(), Json(other.status_body())).into_response(),
        }
    }
}

fn http_level(err: &ApiError) -> bool {
    matches!(
        err,
        ApiError::Unauthorized | ApiError::Forbidden(_) | ApiError::PayloadTooLarge
    )
}
