//! The tools an agent calls: one [`Tool`] trait, a [`ToolRegistry`] that dispatches by name, the
//! built-in tools (one file each under `builtin/`), and the preparation of model-produced
//! arguments (JSON repair, coercion to the schema, validation) before a call runs.
//!
//! The finishers (`close_ticket`, `handover_ticket`) are split in two: their `call` checks every
//! input and returns a [`Finisher`] without writing anything, and the agent loop applies it with
//! [`apply_finisher`] in the transaction that also stores the step's comments. So an invalid call
//! changes nothing, and a valid one closes the ticket together with the transcript that led to it.
//! The other built-ins read directly, or write inside their own fenced transaction: a worker that
//! lost its claim never writes.

pub mod args;
pub mod builtin;
#[cfg(test)]
mod builtin_contract;
pub mod canned;
pub mod catalog;
pub mod coerce;
pub mod finish;
pub mod http;
pub mod placeholders;
pub mod prepare;
#[cfg(test)]
mod prepare_tests;
pub mod registry;
pub mod repair;

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db::claims::Fence;
use crate::domain::Ticket;

pub use builtin::{
    ALL_BUILTIN_TOOLS, ASK_HUMAN, BUILTIN_TOOLS, CLOSE_TICKET, HANDOVER_TICKET, MANAGE_TICKETS, READ_TICKETS,
};
pub use coerce::coerce_to_schema;
pub use finish::{apply_finisher, closed_output, Finisher};
pub use placeholders::substitute_parent;
pub use prepare::prepare_tool_input;
pub use registry::{run_builtin, Prepared, ToolRegistry};
pub use repair::repair_json;

/// A tool an agent can call. Built-in tools are types of this crate; tools defined at run time
/// (HTTP tools, MCP servers) are further implementations, registered in a [`ToolRegistry`].
///
/// `call` gets an input that was already repaired, coerced and validated against
/// [`input_schema`](Tool::input_schema); a tool still checks what would do harm, since the schema
/// is only as strict as the model's provider lets it be.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by; unique in a registry.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &str;

    /// The JSON Schema (draft 2020-12) of the input: a closed object.
    fn input_schema(&self) -> &Value;

    /// True when running a call writes nothing before the step commits (reads, and finishers,
    /// which the loop applies at commit): the loop may then store the model's response together
    /// with the results. A tool with side effects of its own says false, the default, so the
    /// response is stored before it runs.
    fn writes_nothing(&self) -> bool {
        false
    }

    /// True when a call must be approved by a person before it runs (see the approvals API).
    fn requires_approval(&self) -> bool {
        false
    }

    /// True for the built-in `ask_human`, whose call waits for a person's answer instead of running.
    fn asks_human(&self) -> bool {
        false
    }

    /// How long such a call waits for a person, by the tool's own setting (or its server's);
    /// None: the agent's setting decides.
    fn approval_deadline(&self) -> Option<crate::domain::tool::ApprovalDeadline> {
        None
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome;
}

/// What a call may use: the desk (its pool), the claim it runs under, and the cancel signal.
pub struct ToolContext<'a> {
    pub pool: &'a PgPool,
    /// The claim's fence: a tool's own writes check it before they commit.
    pub fence: Fence,
    /// The ticket being worked.
    pub ticket: &'a Ticket,
    /// The agent working it.
    pub agent: &'a str,
    /// The model's id of this call: unique in the ticket, the same when an approved call runs
    /// on a later claim (HTTP tools send it as `Idempotency-Key`).
    pub call_id: &'a str,
    /// Cancelled when the ticket is cancelled or the claim is lost; the loop also stops waiting
    /// for the call then, so only a tool that must clean up (a remote request, a child process)
    /// needs to watch it.
    pub cancel: CancellationToken,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// Goes back to the model as the tool result.
    Output(String),
    /// Goes back to the model as an error result (is_error), and is logged as `tool.failed` with
    /// `kind`.
    Failed { kind: ToolErrorKind, message: String },
    /// A validated finisher; the loop applies it with [`apply_finisher`] in the step's transaction.
    Finish(Finisher),
}

/// Why a call failed, as `tool.failed` events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// The arguments are missing, malformed or refused.
    InvalidInput,
    /// A close/handover result fails the ticket's result schema; the loop counts these as
    /// schema retries.
    ResultInvalid,
    /// A ticket the call names does not exist.
    NotFound,
    /// The call conflicts with the ticket's state, or the claim was lost.
    Conflict,
    /// No such tool, or not one this agent may use.
    UnknownTool,
    /// The store failed; the model may try again.
    Internal,
    /// A remote tool answered with a status other than 2xx.
    HttpStatus,
    /// A remote tool gave no answer in time.
    Timeout,
    /// A remote tool could not be reached (connection refused, reset, DNS, TLS).
    ConnectionFailed,
    /// The address guard refused the tool's address; nothing was sent.
    ForbiddenAddress,
    /// A person denied the call (approvals).
    Denied,
    /// A remote tool failed: its server said so (`isError`, a JSON-RPC error), or could not be
    /// reached, or the connection was lost during the call.
    Remote,
    /// A replay with recorded tools made a call the original did not make.
    ReplayMismatch,
}

impl ToolErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::InvalidInput => "invalid_input",
            ToolErrorKind::ResultInvalid => "result_invalid",
            ToolErrorKind::NotFound => "not_found",
            ToolErrorKind::Conflict => "conflict",
            ToolErrorKind::UnknownTool => "unknown_tool",
            ToolErrorKind::Internal => "internal",
            ToolErrorKind::HttpStatus => "http_status",
            ToolErrorKind::Timeout => "timeout",
            ToolErrorKind::ConnectionFailed => "connection_failed",
            ToolErrorKind::ForbiddenAddress => "forbidden_address",
            ToolErrorKind::Denied => "denied",
            ToolErrorKind::Remote => "remote",
            ToolErrorKind::ReplayMismatch => "replay_mismatch",
        }
    }

    pub fn parse(s: &str) -> Option<ToolErrorKind> {
        use ToolErrorKind::*;
        [
            InvalidInput,
            ResultInvalid,
            NotFound,
            Conflict,
            UnknownTool,
            Internal,
            HttpStatus,
            Timeout,
            ConnectionFailed,
            ForbiddenAddress,
            Denied,
            Remote,
            ReplayMismatch,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the name an event carries.
impl PartialEq<&str> for ToolErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A failed call's kind and message, for helpers that return early with `?`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFailure {
    pub kind: ToolErrorKind,
    pub message: String,
}

/// The message a failing store gives the model; the error itself goes to the log.
const STORE_UNAVAILABLE: &str = "the ticket store is unavailable; try again";

impl ToolFailure {
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        ToolFailure {
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidInput, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Conflict, message)
    }

    /// A store error: logged with `context`, reported to the model without details.
    pub fn internal(context: &str, err: &dyn fmt::Display) -> Self {
        tracing::warn!(error = %err, "{context}");
        Self::new(ToolErrorKind::Internal, STORE_UNAVAILABLE)
    }
}

impl From<ToolFailure> for ToolOutcome {
    fn from(failure: ToolFailure) -> Self {
        ToolOutcome::Failed {
            kind: failure.kind,
            message: failure.message,
        }
    }
}

impl From<Result<String, ToolFailure>> for ToolOutcome {
    fn from(result: Result<String, ToolFailure>) -> Self {
        match result {
            Ok(output) => ToolOutcome::Output(output),
            Err(failure) => failure.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_keep_their_event_names() {
        let kinds = [
            (ToolErrorKind::InvalidInput, "invalid_input"),
            (ToolErrorKind::ResultInvalid, "result_invalid"),
            (ToolErrorKind::NotFound, "not_found"),
            (ToolErrorKind::Conflict, "conflict"),
            (ToolErrorKind::UnknownTool, "unknown_tool"),
            (ToolErrorKind::Internal, "internal"),
            (ToolErrorKind::HttpStatus, "http_status"),
            (ToolErrorKind::Timeout, "timeout"),
            (ToolErrorKind::ConnectionFailed, "connection_failed"),
            (ToolErrorKind::ForbiddenAddress, "forbidden_address"),
            (ToolErrorKind::Denied, "denied"),
            (ToolErrorKind::Remote, "remote"),
        ];
        for (kind, name) in kinds {
            assert_eq!(kind.as_str(), name);
            assert_eq!(kind.to_string(), name);
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
            assert_eq!(kind, name);
        }
    }
}
