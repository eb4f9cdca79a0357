//! Model call failures, normalised into kinds so the caller can decide on retries without
//! knowing which provider it talked to.

use std::fmt;
use std::time::Duration;

use crate::domain::FailureKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlmErrorKind {
    RateLimited,
    ServerError,
    ConnectionFailed,
    StreamInterrupted,
    StreamStalled,
    AuthenticationFailed,
    PermissionDenied,
    ModelNotFound,
    ContextWindowExceeded,
    ResponseMalformed,
    BadRequest,
    ProviderUnconfigured,
    /// A 200 answer with no events at all, or a reply with nothing in it.
    EmptyResponse,
}

impl LlmErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LlmErrorKind::RateLimited => "rate_limited",
            LlmErrorKind::ServerError => "server_error",
            LlmErrorKind::ConnectionFailed => "connection_failed",
            LlmErrorKind::StreamInterrupted => "stream_interrupted",
            LlmErrorKind::StreamStalled => "stream_stalled",
            LlmErrorKind::AuthenticationFailed => "authentication_failed",
            LlmErrorKind::PermissionDenied => "permission_denied",
            LlmErrorKind::ModelNotFound => "model_not_found",
            LlmErrorKind::ContextWindowExceeded => "context_window_exceeded",
            LlmErrorKind::ResponseMalformed => "response_malformed",
            LlmErrorKind::BadRequest => "bad_request",
            LlmErrorKind::ProviderUnconfigured => "provider_unconfigured",
            LlmErrorKind::EmptyResponse => "empty_response",
        }
    }

    /// Transient failures: the same request may succeed when sent again later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            LlmErrorKind::RateLimited
                | LlmErrorKind::ServerError
                | LlmErrorKind::ConnectionFailed
                | LlmErrorKind::StreamInterrupted
                | LlmErrorKind::StreamStalled
                | LlmErrorKind::EmptyResponse
        )
    }
}

/// A model request that failed for good fails its ticket with the same kind.
impl From<LlmErrorKind> for FailureKind {
    fn from(kind: LlmErrorKind) -> FailureKind {
        match kind {
            LlmErrorKind::RateLimited => FailureKind::RateLimited,
            LlmErrorKind::ServerError => FailureKind::ServerError,
            LlmErrorKind::ConnectionFailed => FailureKind::ConnectionFailed,
            LlmErrorKind::StreamInterrupted => FailureKind::StreamInterrupted,
            LlmErrorKind::StreamStalled => FailureKind::StreamStalled,
            LlmErrorKind::AuthenticationFailed => FailureKind::AuthenticationFailed,
            LlmErrorKind::PermissionDenied => FailureKind::PermissionDenied,
            LlmErrorKind::ModelNotFound => FailureKind::ModelNotFound,
            LlmErrorKind::ContextWindowExceeded => FailureKind::ContextWindowExceeded,
            LlmErrorKind::ResponseMalformed => FailureKind::ResponseMalformed,
            LlmErrorKind::BadRequest => FailureKind::BadRequest,
            LlmErrorKind::ProviderUnconfigured => FailureKind::ProviderUnconfigured,
            LlmErrorKind::EmptyResponse => FailureKind::EmptyResponse,
        }
    }
}

impl fmt::Display for LlmErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct LlmError {
    pub kind: LlmErrorKind,
    pub message: String,
    pub retry_after: Option<Duration>,
    pub status: Option<u16>,
    /// The stream ended cleanly but without the model's finish reason: the server stopped
    /// generating (llama-cpp-python does so when another request arrives). What was shown is
    /// not an answer, so the request is sent again even after output (see `agent::model_call`).
    pub unfinished: bool,
}

impl LlmError {
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        LlmError {
            kind,
            message: message.into(),
            retry_after: None,
            status: None,
            unfinished: false,
        }
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for LlmError {}

/// A complete reply with nothing in it: no text, no thinking, no tool call.
pub fn empty_reply(provider: &str) -> LlmError {
    LlmError::new(
        LlmErrorKind::EmptyResponse,
        format!("{provider}: the model's reply was empty (no text, no thinking, no tool call)"),
    )
}

#[cfg(test)]
mod tests {
    use super::{FailureKind, LlmErrorKind};

    #[test]
    fn a_model_failure_fails_the_ticket_under_its_own_name() {
        for kind in [
            LlmErrorKind::RateLimited,
            LlmErrorKind::ServerError,
            LlmErrorKind::ConnectionFailed,
            LlmErrorKind::StreamInterrupted,
            LlmErrorKind::StreamStalled,
            LlmErrorKind::AuthenticationFailed,
            LlmErrorKind::PermissionDenied,
            LlmErrorKind::ModelNotFound,
            LlmErrorKind::ContextWindowExceeded,
            LlmErrorKind::ResponseMalformed,
            LlmErrorKind::BadRequest,
            LlmErrorKind::ProviderUnconfigured,
            LlmErrorKind::EmptyResponse,
        ] {
            assert_eq!(FailureKind::from(kind).as_str(), kind.as_str());
        }
    }
}
