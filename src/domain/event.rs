//! Events: every state change of a ticket, persisted with the change, and the live-only deltas.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Comment, Ticket, TicketError};

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
    pub const REQUEST_QUEUED: &str = "request.queued";
    pub const REQUEST_FAILED: &str = "request.failed";
    pub const TOOL_STARTED: &str = "tool.started";
    pub const TOOL_FINISHED: &str = "tool.finished";
    pub const TOOL_FAILED: &str = "tool.failed";
    pub const TOOL_APPROVAL_REQUESTED: &str = "tool.approval_requested";
    pub const TOOL_APPROVED: &str = "tool.approved";
    pub const TOOL_DENIED: &str = "tool.denied";
    pub const SCHEMA_RETRIED: &str = "schema.retried";
    pub const POLICY_VIOLATED: &str = "policy.violated";
    pub const COMPACTION_STARTED: &str = "compaction.started";
    pub const COMPACTION_FINISHED: &str = "compaction.finished";
    pub const COMPACTION_FAILED: &str = "compaction.failed";
    pub const CONTEXT_LIMIT_EXCEEDED: &str = "context.limit_exceeded";
    pub const SCHEDULE_SKIPPED: &str = "schedule.skipped";
    /// Live-only: never stored, no `seq`, no SSE id.
    pub const TEXT_DELTA: &str = "text.delta";
    pub const THINKING_DELTA: &str = "thinking.delta";
    pub const TOOL_CALL_DELTA: &str = "tool_call.delta";

    /// The live-only kinds.
    pub fn is_delta(kind: &str) -> bool {
        matches!(kind, TEXT_DELTA | THINKING_DELTA | TOOL_CALL_DELTA)
    }

    /// The kinds after which a ticket's stream ends (when it is the ticket's latest event).
    pub fn is_final(kind: &str) -> bool {
        matches!(kind, TICKET_DONE | TICKET_FAILED | TICKET_CANCELLED)
    }
}

/// An event as clients receive it in an SSE `data:` line. Its OpenAPI description is
/// `TicketEventSchema`, which spells out each kind's `data`.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    pub data: Box<RawValue>,
}

/// An event as clients receive it in an SSE `data:` line: the ticket it belongs to, its place in
/// the ticket's log, and its `kind` with that kind's `data`.
#[derive(Serialize, ToSchema)]
#[schema(as = TicketEvent)]
pub struct TicketEventSchema {
    pub ticket_id: Uuid,
    pub ticket_key: String,
    /// The ticket's event sequence number (1, 2, 3 … without gaps); null for live-only deltas.
    pub seq: Option<i64>,
    pub agent: Option<String>,
    pub at: DateTime<Utc>,
    #[serde(flatten)]
    pub event: EventData,
}

/// An event to append to a ticket's log, in the transaction of the change it describes. Its data
/// is serialised once, here, from the typed payload: the log stores that text and the streams send
/// it as read.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: &'static str,
    pub agent: Option<String>,
    /// The payload as JSON text.
    pub data: String,
}

impl NewEvent {
    pub fn new(agent: Option<&str>, event: EventData) -> Self {
        NewEvent {
            kind: event.kind(),
            agent: agent.map(str::to_owned),
            data: event.data_json(),
        }
    }
}

/// Why a ticket went back to `todo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequeueReason {
    /// The worker's lease expired (an attempt was spent).
    LeaseLost,
    /// The worker shut down cleanly.
    Shutdown,
    /// A comment arrived on a waiting or finished ticket.
    Comment,
    /// `POST /v1/tickets/{ticket}/retry`.
    Retry,
    /// Every call that waited for approval was answered.
    Approval,
}

/// Tokens of one model response, as the provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    /// Present (true) when the provider reported no usage and these counts are estimated at
    /// about 4 characters per token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

/// Every kind of event with its payload: `kind` names the variant, `data` holds its fields. This
/// is where an event's shape is defined, and the OpenAPI document describes it from here (the
/// live deltas, built per token, are written in the same shape by `events::hub::delta_data`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", content = "data")]
pub enum EventData {
    #[serde(rename = "ticket.created")]
    TicketCreated { ticket: Ticket },
    #[serde(rename = "ticket.started")]
    TicketStarted {
        agent: String,
        /// The ticket's `attempts` after this claim: 1 on the first.
        attempt: i32,
    },
    #[serde(rename = "ticket.done")]
    TicketDone {
        #[schema(value_type = Value)]
        result: Value,
    },
    #[serde(rename = "ticket.failed")]
    TicketFailed { error: TicketError },
    #[serde(rename = "ticket.cancelled")]
    TicketCancelled {},
    #[serde(rename = "ticket.waiting")]
    TicketWaiting {},
    #[serde(rename = "ticket.requeued")]
    TicketRequeued { reason: RequeueReason },
    #[serde(rename = "ticket.updated")]
    TicketUpdated { ticket: Ticket },
    #[serde(rename = "comment.created")]
    CommentCreated { comment: Comment },
    #[serde(rename = "request.started")]
    RequestStarted { model: String },
    #[serde(rename = "request.finished")]
    RequestFinished {
        model: String,
        usage: TokenUsage,
        /// `end_turn`, `tool_use`, `max_tokens`, …
        stop_reason: String,
    },
    /// Sent before the wait.
    #[serde(rename = "request.retried")]
    RequestRetried {
        attempt: u32,
        max_attempts: u32,
        kind: String,
        message: String,
        delay_ms: u64,
    },
    #[serde(rename = "request.failed")]
    RequestFailed { kind: String, message: String },
    /// The request waits for a slot of its provider (`max_concurrent` requests are in flight):
    /// sent when the wait begins, so a ticket that waits is seen to.
    #[serde(rename = "request.queued")]
    RequestQueued {
        provider: String,
        max_concurrent: u32,
        /// Requests holding a slot or waiting ahead of this one.
        ahead: i64,
    },
    #[serde(rename = "tool.started")]
    ToolStarted {
        tool_name: String,
        call_id: String,
        #[schema(value_type = Value)]
        input: Value,
    },
    #[serde(rename = "tool.finished")]
    ToolFinished {
        tool_name: String,
        call_id: String,
        output: String,
    },
    #[serde(rename = "tool.failed")]
    ToolFailed {
        tool_name: String,
        call_id: String,
        kind: String,
        message: String,
    },
    /// A call of a tool that needs a person's approval: it waits instead of running.
    #[serde(rename = "tool.approval_requested")]
    ToolApprovalRequested {
        tool_name: String,
        call_id: String,
        #[schema(value_type = Value)]
        input: Value,
    },
    /// The call runs with the ticket's next claim.
    #[serde(rename = "tool.approved")]
    ToolApproved {
        tool_name: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The call does not run; the model gets an error result holding the reason.
    #[serde(rename = "tool.denied")]
    ToolDenied {
        tool_name: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    #[serde(rename = "schema.retried")]
    SchemaRetried {
        attempt: i32,
        max_attempts: i32,
        message: String,
    },
    #[serde(rename = "policy.violated")]
    PolicyViolated { kind: String, limit: i64 },
    #[serde(rename = "compaction.started")]
    CompactionStarted { reason: String },
    #[serde(rename = "compaction.finished")]
    CompactionFinished {
        reason: String,
        tokens_before: u64,
        tokens_after: u64,
    },
    #[serde(rename = "compaction.failed")]
    CompactionFailed { reason: String, message: String },
    #[serde(rename = "context.limit_exceeded")]
    ContextLimitExceeded {
        estimated_tokens: u64,
        threshold_tokens: u64,
    },
    /// A schedule's fire time passed without a ticket because this ticket (its previous one) was
    /// still unfinished (`overlap: skip`).
    #[serde(rename = "schedule.skipped")]
    ScheduleSkipped {
        schedule_id: Uuid,
        scheduled_for: chrono::DateTime<chrono::Utc>,
    },
    /// Live-only: never stored, no `seq`, no SSE id.
    #[serde(rename = "text.delta")]
    TextDelta { delta: String },
    /// Live-only, like `text.delta`.
    #[serde(rename = "thinking.delta")]
    ThinkingDelta { delta: String },
    /// Live-only: a fragment of a tool call's arguments as the model writes them.
    #[serde(rename = "tool_call.delta")]
    ToolCallDelta {
        call_id: String,
        tool_name: String,
        delta: String,
    },
}

impl EventData {
    pub fn kind(&self) -> &'static str {
        match self {
            EventData::TicketCreated { .. } => kind::TICKET_CREATED,
            EventData::TicketStarted { .. } => kind::TICKET_STARTED,
            EventData::TicketDone { .. } => kind::TICKET_DONE,
            EventData::TicketFailed { .. } => kind::TICKET_FAILED,
            EventData::TicketCancelled {} => kind::TICKET_CANCELLED,
            EventData::TicketWaiting {} => kind::TICKET_WAITING,
            EventData::TicketRequeued { .. } => kind::TICKET_REQUEUED,
            EventData::TicketUpdated { .. } => kind::TICKET_UPDATED,
            EventData::CommentCreated { .. } => kind::COMMENT_CREATED,
            EventData::RequestStarted { .. } => kind::REQUEST_STARTED,
            EventData::RequestFinished { .. } => kind::REQUEST_FINISHED,
            EventData::RequestRetried { .. } => kind::REQUEST_RETRIED,
            EventData::RequestFailed { .. } => kind::REQUEST_FAILED,
            EventData::RequestQueued { .. } => kind::REQUEST_QUEUED,
            EventData::ToolStarted { .. } => kind::TOOL_STARTED,
            EventData::ToolFinished { .. } => kind::TOOL_FINISHED,
            EventData::ToolFailed { .. } => kind::TOOL_FAILED,
            EventData::ToolApprovalRequested { .. } => kind::TOOL_APPROVAL_REQUESTED,
            EventData::ToolApproved { .. } => kind::TOOL_APPROVED,
            EventData::ToolDenied { .. } => kind::TOOL_DENIED,
            EventData::SchemaRetried { .. } => kind::SCHEMA_RETRIED,
            EventData::PolicyViolated { .. } => kind::POLICY_VIOLATED,
            EventData::CompactionStarted { .. } => kind::COMPACTION_STARTED,
            EventData::CompactionFinished { .. } => kind::COMPACTION_FINISHED,
            EventData::CompactionFailed { .. } => kind::COMPACTION_FAILED,
            EventData::ContextLimitExceeded { .. } => kind::CONTEXT_LIMIT_EXCEEDED,
            EventData::ScheduleSkipped { .. } => kind::SCHEDULE_SKIPPED,
            EventData::TextDelta { .. } => kind::TEXT_DELTA,
            EventData::ThinkingDelta { .. } => kind::THINKING_DELTA,
            EventData::ToolCallDelta { .. } => kind::TOOL_CALL_DELTA,
        }
    }

    /// The payload alone (the event's `data`) as JSON text.
    pub fn data_json(&self) -> String {
        // Serialised whole, the enum is `{"kind":"<kind>","data":<payload>}` (serde writes the tag
        // first, then the content); the payload is what follows the first `","data":` (a quote
        // inside the kind would be escaped) up to the last brace. One serialisation, no tree.
        const DATA: &str = r#"","data":"#;
        let mut text = serde_json::to_string(self).unwrap_or_default();
        match text.find(DATA) {
            // Cut in place: no second copy of the payload.
            Some(at) if text.ends_with('}') => {
                text.pop();
                text.drain(..at + DATA.len());
                text
            }
            // Unreachable for these types (every map key is a string, the tag comes first): an
            // empty payload rather than a panic or a corrupt log.
            _ => "{}".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_serde_tag_is_the_kind_and_data_json_is_the_payload() {
        let events = [
            EventData::TicketCancelled {},
            EventData::TicketRequeued {
                reason: RequeueReason::LeaseLost,
            },
            EventData::RequestRetried {
                attempt: 1,
                max_attempts: 3,
                kind: "rate_limited".into(),
                message: "slow down \"now\"".into(),
                delay_ms: 500,
            },
            EventData::ToolStarted {
                tool_name: "close_ticket".into(),
                call_id: "c1".into(),
                input: json!({"result": {"n": [1, 2]}}),
            },
            EventData::ContextLimitExceeded {
                estimated_tokens: 10,
                threshold_tokens: 5,
            },
            EventData::TextDelta { delta: "hé}".into() },
            EventData::ToolCallDelta {
                call_id: "c1".into(),
                tool_name: "close_ticket".into(),
                delta: r#"{"result": "#.into(),
            },
        ];
        for event in events {
            let whole = serde_json::to_value(&event).unwrap();
            assert_eq!(whole["kind"], event.kind());
            let data: Value = serde_json::from_str(&event.data_json()).unwrap();
            assert_eq!(data, whole["data"], "{}", event.kind());
        }
        assert_eq!(EventData::TicketWaiting {}.data_json(), "{}");
        assert_eq!(
            EventData::RequestRetried {
                attempt: 2,
                max_attempts: 10,
                kind: "overloaded".into(),
                message: "m".into(),
                delay_ms: 7
            }
            .data_json(),
            r#"{"attempt":2,"max_attempts":10,"kind":"overloaded","message":"m","delay_ms":7}"#
        );
    }

    /// One event of every kind.
    fn every_kind() -> Vec<EventData> {
        let now = chrono::Utc::now();
        let ticket: Ticket = serde_json::from_value(json!({
            "id": Uuid::nil(), "key": "TICKET-1", "task": "t", "labels": [], "status": "todo", "agent": null,
            "reporter": "user", "priority": 0, "parent_id": null, "parent_key": null, "schema": null,
            "result": null, "error": null, "attempts": 0, "max_attempts": 3, "metadata": {},
            "usage": super::super::TicketUsage::default(), "created_at": now, "updated_at": now, "started_at": null,
            "finished_at": null
        }))
        .unwrap();
        let comment: Comment = serde_json::from_value(json!({
            "id": Uuid::nil(), "ticket_id": Uuid::nil(), "seq": 1, "author": "user", "agent": null,
            "content": [{"type": "text", "text": "hi"}], "created_at": now
        }))
        .unwrap();
        let s = String::new;
        vec![
            EventData::TicketCreated { ticket: ticket.clone() },
            EventData::TicketStarted { agent: s(), attempt: 1 },
            EventData::TicketDone { result: json!(1) },
            EventData::TicketFailed {
                error: TicketError {
                    kind: s(),
                    message: s(),
                },
            },
            EventData::TicketCancelled {},
            EventData::TicketWaiting {},
            EventData::TicketRequeued {
                reason: RequeueReason::Retry,
            },
            EventData::TicketUpdated { ticket },
            EventData::CommentCreated { comment },
            EventData::RequestStarted { model: s() },
            EventData::RequestFinished {
                model: s(),
                usage: TokenUsage::default(),
                stop_reason: s(),
            },
            EventData::RequestRetried {
                attempt: 1,
                max_attempts: 1,
                kind: s(),
                message: s(),
                delay_ms: 1,
            },
            EventData::RequestFailed {
                kind: s(),
                message: s(),
            },
            EventData::ToolStarted {
                tool_name: s(),
                call_id: s(),
                input: json!({}),
            },
            EventData::ToolFinished {
                tool_name: s(),
                call_id: s(),
                output: s(),
            },
            EventData::ToolFailed {
                tool_name: s(),
                call_id: s(),
                kind: s(),
                message: s(),
            },
            EventData::ToolApprovalRequested {
                tool_name: s(),
                call_id: s(),
                input: json!({}),
            },
            EventData::ToolApproved {
                tool_name: s(),
                call_id: s(),
                reason: None,
            },
            EventData::ToolDenied {
                tool_name: s(),
                call_id: s(),
                reason: Some(s()),
            },
            EventData::SchemaRetried {
                attempt: 1,
                max_attempts: 1,
                message: s(),
            },
            EventData::PolicyViolated { kind: s(), limit: 1 },
            EventData::CompactionStarted { reason: s() },
            EventData::CompactionFinished {
                reason: s(),
                tokens_before: 1,
                tokens_after: 1,
            },
            EventData::CompactionFailed {
                reason: s(),
                message: s(),
            },
            EventData::ContextLimitExceeded {
                estimated_tokens: 1,
                threshold_tokens: 1,
            },
            EventData::RequestQueued {
                provider: s(),
                max_concurrent: 1,
                ahead: 1,
            },
            EventData::ScheduleSkipped {
                schedule_id: Uuid::nil(),
                scheduled_for: now,
            },
            EventData::TextDelta { delta: s() },
            EventData::ThinkingDelta { delta: s() },
        ]
    }

    #[test]
    fn every_kind_serialises_with_its_kind_as_the_tag() {
        let events = every_kind();
        let kinds: std::collections::HashSet<&str> = events.iter().map(EventData::kind).collect();
        assert_eq!(kinds.len(), events.len(), "one event per kind");
        for event in &events {
            let whole = serde_json::to_value(event).unwrap();
            assert_eq!(whole["kind"], event.kind());
            let data: Value = serde_json::from_str(&event.data_json()).unwrap();
            assert_eq!(data, whole["data"], "{}", event.kind());
        }
    }

    #[test]
    fn new_event_takes_the_kind_from_the_payload() {
        let event = NewEvent::new(Some("alice"), EventData::RequestStarted { model: "m".into() });
        assert_eq!(event.kind, "request.started");
        assert_eq!(event.agent.as_deref(), Some("alice"));
        assert_eq!(event.data, r#"{"model":"m"}"#);
    }
}
