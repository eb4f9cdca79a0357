//! Why a ticket failed: the `kind` of its `error` and of its `ticket.failed` event.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The cause of a ticket's failure, written snake_case on the wire (`rate_limited`, `max_turns`,
/// `lease_lost`). The model's failure kinds come from `llm::LlmErrorKind`, which maps into these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    // The model request failed for good (after its retries).
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
    EmptyResponse,
    // The agent's limits.
    MaxTurns,
    MaxInputTokens,
    MaxOutputTokens,
    MaxSchemaRetries,
    OutputTruncated,
    InvalidToolInput,
    // The desk's own reasons.
    /// The ticket's agent was deleted while the ticket was queued or running.
    AgentMissing,
    LeaseLost,
    DeadlineExceeded,
    ApprovalExpired,
    QuestionExpired,
    /// A kind this build does not know, read back from a row written by another version; kept
    /// as it was written.
    #[serde(untagged)]
    Other(String),
}

impl FailureKind {
    pub fn as_str(&self) -> &str {
        match self {
            FailureKind::RateLimited => "rate_limited",
            FailureKind::ServerError => "server_error",
            FailureKind::ConnectionFailed => "connection_failed",
            FailureKind::StreamInterrupted => "stream_interrupted",
            FailureKind::StreamStalled => "stream_stalled",
            FailureKind::AuthenticationFailed => "authentication_failed",
            FailureKind::PermissionDenied => "permission_denied",
            FailureKind::ModelNotFound => "model_not_found",
            FailureKind::ContextWindowExceeded => "context_window_exceeded",
            FailureKind::ResponseMalformed => "response_malformed",
            FailureKind::BadRequest => "bad_request",
            FailureKind::ProviderUnconfigured => "provider_unconfigured",
            FailureKind::EmptyResponse => "empty_response",
            FailureKind::MaxTurns => "max_turns",
            FailureKind::MaxInputTokens => "max_input_tokens",
            FailureKind::MaxOutputTokens => "max_output_tokens",
            FailureKind::MaxSchemaRetries => "max_schema_retries",
            FailureKind::OutputTruncated => "output_truncated",
            FailureKind::InvalidToolInput => "invalid_tool_input",
            FailureKind::AgentMissing => "agent_missing",
            FailureKind::LeaseLost => "lease_lost",
            FailureKind::DeadlineExceeded => "deadline_exceeded",
            FailureKind::ApprovalExpired => "approval_expired",
            FailureKind::QuestionExpired => "question_expired",
            FailureKind::Other(kind) => kind,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureKind;

    #[test]
    fn kinds_are_written_as_their_names_and_unknown_ones_kept() {
        for kind in [
            FailureKind::RateLimited,
            FailureKind::MaxSchemaRetries,
            FailureKind::LeaseLost,
        ] {
            let written = serde_json::to_value(&kind).unwrap();
            assert_eq!(written, kind.as_str());
            assert_eq!(serde_json::from_value::<FailureKind>(written).unwrap(), kind);
        }
        let unknown: FailureKind = serde_json::from_value("from_a_later_version".into()).unwrap();
        assert_eq!(unknown, FailureKind::Other("from_a_later_version".into()));
        assert_eq!(serde_json::to_value(&unknown).unwrap(), "from_a_later_version");
    }
}
