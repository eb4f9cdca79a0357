//! Events: every state change of a ticket, persisted with the change, and the live-only deltas.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// Event kinds that are stored and replayable.
pub mod kind {
    pub const TICKET_CREATED: &str = "ticket.created";
    pub const TICKET_STARTED: &str = "ticket.started";
    pub const TICKET_DONE: &str = "ticket.done";
    pub const TICKET_FAILED: &str = "ticket.failed";
    pub const TICKET_CANCELLED: &str = "ticket.cancelled";
    pub const TICKET_WAITING: &str = "ticket.waiting";
    pub const TICKET_REQUEUED: &str = "ticket.requeued";
    pub const TICKET_UPDATED: &str = "ticket.updated";
    pub const COMMENT_CREATED: &str = "comment.created";
    pub const REQUEST_STARTED: &str = "request.started";
    pub const REQUEST_FINISHED: &str = "request.finished";
    pub const REQUEST_RETRIED: &str = "request.retried";
    pub const REQUEST_FAILED: &str = "request.failed";
    pub const TOOL_STARTED: &str = "tool.started";
    pub const TOOL_FINISHED: &str = "tool.finished";
    pub const TOOL_FAILED: &str = "tool.failed";
    pub const SCHEMA_RETRIED: &str = "schema.retried";
    pub const POLICY_VIOLATED: &str = "policy.violated";
    pub const COMPACTION_STARTED: &str = "compaction.started";
    pub const COMPACTION_FINISHED: &str = "compaction.finished";
    pub const COMPACTION_FAILED: &str = "compaction.failed";
    pub const CONTEXT_LIMIT_EXCEEDED: &str = "context.limit_exceeded";
    /// Live-only: never stored, no `seq`, no SSE id.
    pub const TEXT_DELTA: &str = "text.delta";
    pub const THINKING_DELTA: &str = "thinking.delta";

    /// The kinds after which a ticket's stream ends (when it is the ticket's latest event).
    pub fn is_final(kind: &str) -> bool {
        matches!(kind, TICKET_DONE | TICKET_FAILED | TICKET_CANCELLED)
    }
}

/// An event as clients receive it in an SSE `data:` line.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TicketEvent {
    pub ticket_id: Uuid,
    pub ticket_key: String,
    /// The ticket's event sequence number (1, 2, 3 … without gaps); null for live-only deltas.
    pub seq: Option<i64>,
    pub kind: String,
    pub agent: Option<String>,
    pub at: DateTime<Utc>,
    // JSON text: read from the log and written to streams without being parsed into a tree and
    // encoded again.
    #[schema(value_type = Value)]
    pub data: Box<RawValue>,
}

/// An event to append to a ticket's log, in the transaction of the change it describes.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: &'static str,
    pub agent: Option<String>,
    pub data: Value,
}

impl NewEvent {
    pub fn new(kind: &'static str, agent: Option<&str>, data: Value) -> Self {
        NewEvent {
            kind,
            agent: agent.map(str::to_owned),
            data,
        }
    }
}
