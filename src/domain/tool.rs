//! Tools defined at run time (HTTP tools) and the approvals of tool calls that wait for a person.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A call of an HTTP tool waits at most this long by default.
pub const DEFAULT_HTTP_TOOL_TIMEOUT_MS: i64 = 30_000;
pub const MIN_HTTP_TOOL_TIMEOUT_MS: i64 = 100;
pub const MAX_HTTP_TOOL_TIMEOUT_MS: i64 = 600_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    #[default]
    Post,
    Put,
    Patch,
    Delete,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }

    pub fn parse(s: &str) -> Option<HttpMethod> {
        [
            HttpMethod::Get,
            HttpMethod::Post,
            HttpMethod::Put,
            HttpMethod::Patch,
            HttpMethod::Delete,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    /// Whether the input goes as a JSON body (else as query parameters).
    pub fn has_body(self) -> bool {
        matches!(self, HttpMethod::Post | HttpMethod::Put | HttpMethod::Patch)
    }
}

/// An HTTP tool as defined with `PUT /v1/tools/{name}`. Secrets stay templates (`${env:NAME}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HttpToolDef {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the input.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// May hold `{field}` placeholders, filled from the input (URL-encoded).
    pub url: String,
    pub method: HttpMethod,
    /// Values may hold `${env:NAME}` templates, expanded only when a call is sent.
    pub headers: BTreeMap<String, String>,
    pub timeout_ms: i64,
    /// A call waits for a person's approval (`POST /v1/tickets/{ticket}/approvals/{call_id}`).
    pub requires_approval: bool,
    /// How long a call waits for approval before the desk answers `on_timeout`; null: for ever.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000, required = true)]
    pub approval_timeout_secs: Option<i32>,
    /// `deny` (default), `approve` or `fail`.
    #[serde(default)]
    #[schema(required = true)]
    pub on_timeout: Option<OnTimeout>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// HTTP tool names: 1 to 64 letters, digits, `_` or `-` (they are sent to models as tool names).
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// A person's answer to a call that waits for approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Denied,
}

/// What the desk answers for a call nobody approved or denied in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Denied: the model is told nobody approved it.
    #[default]
    Deny,
    /// Approved: it runs.
    Approve,
    /// The ticket fails (`approval_expired`).
    Fail,
}

impl OnTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Deny => "deny",
            OnTimeout::Approve => "approve",
            OnTimeout::Fail => "fail",
        }
    }

    pub fn parse(s: &str) -> Option<OnTimeout> {
        match s {
            "deny" => Some(OnTimeout::Deny),
            "approve" => Some(OnTimeout::Approve),
            "fail" => Some(OnTimeout::Fail),
            _ => None,
        }
    }
}

/// How long a call waits for a person, and what happens then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApprovalDeadline {
    pub secs: i32,
    pub on_timeout: OnTimeout,
}

impl ApprovalDeadline {
    /// From stored settings: none without a timeout.
    pub fn of(secs: Option<i32>, on_timeout: Option<OnTimeout>) -> Option<ApprovalDeadline> {
        Some(ApprovalDeadline {
            secs: secs?,
            on_timeout: on_timeout.unwrap_or_default(),
        })
    }
}

/// The longest wait for an approval or an answer: a year.
pub const MAX_APPROVAL_TIMEOUT_SECS: i32 = 31_536_000;

/// A tool call of a ticket's last step that waits for, or got, a person's answer (stored in the
/// ticket's `approvals` column until the next claim runs it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub call_id: String,
    pub tool_name: String,
    pub input: Value,
    #[serde(default)]
    pub decision: Option<Decision>,
    #[serde(default)]
    pub reason: Option<String>,
    /// When the desk answers it by itself (`on_timeout`), if nobody has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<OnTimeout>,
    /// The signed links that answer it without a token (`domain::link`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_url: Option<String>,
    /// Set on an `ask_human` call: the question it waits on a person to answer (its decision is
    /// `Approved` once answered, `Denied` when it expired and the model goes on without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<super::question::Question>,
    /// The person's answer to the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

impl Approval {
    /// Still waits for a person.
    pub fn is_pending(&self) -> bool {
        self.decision.is_none()
    }

    /// An `ask_human` call rather than a call that waits for approval.
    pub fn is_question(&self) -> bool {
        self.question.is_some()
    }
}

/// A call that waits for a person, as a ticket shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingApproval {
    pub call_id: String,
    pub tool_name: String,
    #[schema(value_type = Object)]
    pub input: Value,
    /// Opens a page that approves it, without an API token; works once, while it waits.
    #[serde(default)]
    #[schema(required = true)]
    pub approve_url: Option<String>,
    /// The same, denying it.
    #[serde(default)]
    #[schema(required = true)]
    pub deny_url: Option<String>,
    /// When the desk answers it by itself (its `on_timeout`); null: it waits for ever.
    #[serde(default)]
    #[schema(required = true)]
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<&Approval> for PendingApproval {
    fn from(a: &Approval) -> Self {
        PendingApproval {
            call_id: a.call_id.clone(),
            tool_name: a.tool_name.clone(),
            input: a.input.clone(),
            approve_url: a.approve_url.clone(),
            deny_url: a.deny_url.clone(),
            expires_at: a.expires_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_and_methods() {
        assert!(is_valid_tool_name("weather_v2-x"));
        for bad in ["", "a.b", "a b", "é", &"x".repeat(65)] {
            assert!(!is_valid_tool_name(bad), "{bad}");
        }
        assert_eq!(HttpMethod::parse("PATCH"), Some(HttpMethod::Patch));
        assert_eq!(HttpMethod::parse("get"), None);
        assert_eq!(serde_json::to_value(HttpMethod::Delete).unwrap(), "DELETE");
        assert!(HttpMethod::Post.has_body() && !HttpMethod::Get.has_body());
    }
}
