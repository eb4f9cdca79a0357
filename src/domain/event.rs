//! Events: every state change of a ticket, persisted with the change, and the live-only deltas.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Comment, Ticket, TicketError, Usd};

/// Declares every event kind once: its constant in `kind`, its variant of `EventData` (the
/// serde tag), and `EventData::kind`. The kind is taken as a token tree, not a `literal`
/// fragment: utoipa's derive does not read a `literal` fragment in `#[serde(rename = ...)]` and
/// would document the variant's name instead (tests/openapi.rs catches that).
macro_rules! event_kinds {
    ($($(#[$attr:meta])* $constant:ident = $kind:tt => $variant:ident { $($fields:tt)* },)*) => {
        /// Event kinds: the stored, replayable ones and the live-only deltas.
        pub mod kind {
            $(pub const $constant: &str = $kind;)*

            /// The live-only kinds: never stored, no `seq`, no SSE id.
            pub fn is_delta(kind: &str) -> bool {
                matches!(kind, TEXT_DELTA | THINKING_DELTA | TOOL_CALL_DELTA)
            }

            /// The kinds after which a ticket's stream ends (when it is the ticket's latest event).
            pub fn is_final(kind: &str) -> bool {
                matches!(kind, TICKET_DONE | TICKET_FAILED | TICKET_CANCELLED)
            }
        }

        /// Every kind of event with its payload: `kind` names the variant, `data` holds its fields. This
        /// is where an event's shape is defined, and the OpenAPI document describes it from here (the
        /// live deltas, built per token, are written in the same shape by `events::hub::delta_data`).
        #[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
        #[serde(tag = "kind", content = "data")]
        pub enum EventData {
            $($(#[$attr])* #[serde(rename = $kind)] $variant { $($fields)* },)*
        }

        impl EventData {
            pub fn kind(&self) -> &'static str {
                match self {
                    $(EventData::$variant { .. } => kind::$constant,)*
                }
            }
        }
    };
}

event_kinds! {
    TICKET_CREATED = "ticket.created" => TicketCreated { ticket: Ticket },
    TICKET_STARTED = "ticket.started" => TicketStarted {
        agent: String,
        /// The ticket's `attempts` after this claim: 1 on the first.
        attempt: i32,
        /// The version of the agent this claim runs.
        #[schema(minimum = 1)]
        agent_version: Option<i32>,
    },
    TICKET_DONE = "ticket.done" => TicketDone {
        #[schema(value_type = Value)]
        result: Value,
    },
    TICKET_FAILED = "ticket.failed" => TicketFailed { error: TicketError },
    TICKET_CANCELLED = "ticket.cancelled" => TicketCancelled {},
    TICKET_WAITING = "ticket.waiting" => TicketWaiting {},
    TICKET_REQUEUED = "ticket.requeued" => TicketRequeued { reason: RequeueReason },
    TICKET_UPDATED = "ticket.updated" => TicketUpdated { ticket: Ticket },
    COMMENT_CREATED = "comment.created" => CommentCreated { comment: Comment },
    REQUEST_STARTED = "request.started" => RequestStarted { model: String },
    REQUEST_FINISHED = "request.finished" => RequestFinished {
        model: String,
        usage: TokenUsage,
        /// `end_turn`, `tool_use`, `max_tokens`, …
        stop_reason: String,
        /// What the request cost in US dollars at the price in force when it was sent; null when
        /// its model has no price (`unpriced`).
        #[serde(default)]
        #[schema(value_type = Option<f64>, required = true)]
        cost_usd: Option<Usd>,
        /// True when the model has no price: the cost is unknown (never counted as 0).
        #[serde(default)]
        #[schema(required = true)]
        unpriced: bool,
    },
    /// Sent before the wait.
    REQUEST_RETRIED = "request.retried" => RequestRetried {
        attempt: u32,
        max_attempts: u32,
        kind: String,
        message: String,
        delay_ms: u64,
    },
    REQUEST_FAILED = "request.failed" => RequestFailed { kind: String, message: String },
    /// The request waits for a slot of its provider (`max_concurrent` requests are in flight):
    /// sent when the wait begins, so a ticket that waits is seen to.
    REQUEST_QUEUED = "request.queued" => RequestQueued {
        provider: String,
        max_concurrent: u32,
        /// Requests holding a slot or waiting ahead of this one.
        ahead: i64,
    },
    TOOL_STARTED = "tool.started" => ToolStarted {
        tool_name: String,
        call_id: String,
        #[schema(value_type = Value)]
        input: Value,
    },
    TOOL_FINISHED = "tool.finished" => ToolFinished {
        tool_name: String,
        call_id: String,
        output: String,
    },
    TOOL_FAILED = "tool.failed" => ToolFailed {
        tool_name: String,
        call_id: String,
        kind: String,
        message: String,
    },
    /// A call of a tool that needs a person's approval: it waits instead of running.
    TOOL_APPROVAL_REQUESTED = "tool.approval_requested" => ToolApprovalRequested {
        tool_name: String,
        call_id: String,
        #[schema(value_type = Value)]
        input: Value,
        /// The signed links that answer it without an API token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approve_url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deny_url: Option<String>,
    },
    /// Nobody answered a call within its `approval_timeout_secs`: the desk answered it as
    /// `on_timeout` says (`deny`, `approve`; `fail` fails the ticket with `approval_expired`).
    TOOL_APPROVAL_EXPIRED = "tool.approval_expired" => ToolApprovalExpired {
        call_id: String,
        tool_name: String,
        decision: String,
    },
    /// The call runs with the ticket's next claim.
    TOOL_APPROVED = "tool.approved" => ToolApproved {
        tool_name: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The call does not run; the model gets an error result holding the reason.
    TOOL_DENIED = "tool.denied" => ToolDenied {
        tool_name: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The agent asked a person a question (`ask_human`); the ticket waits (`waiting_for: "human"`)
    /// until it is answered or expires.
    QUESTION_ASKED = "question.asked" => QuestionAsked {
        id: Uuid,
        call_id: String,
        question: String,
        #[schema(value_type = Option<Object>)]
        response_schema: Option<Value>,
        choices: Option<Vec<String>>,
        /// The signed link whose form answers it without an API token.
        answer_url: Option<String>,
        expires_at: Option<DateTime<Utc>>,
    },
    /// A person answered; the answer returns to the model as the call's result.
    QUESTION_ANSWERED = "question.answered" => QuestionAnswered {
        id: Uuid,
        call_id: String,
        #[schema(value_type = Value)]
        answer: Value,
        /// How it was answered: `api`, `link` or `comment`.
        by: String,
    },
    /// Nobody answered by its deadline: `on_timeout` `fail` fails the ticket (`question_expired`),
    /// `continue` tells the model that nobody answered.
    QUESTION_EXPIRED = "question.expired" => QuestionExpired {
        id: Uuid,
        call_id: String,
        on_timeout: String,
    },
    /// A replay with recorded tools made a call the original did not make: it returned "not in
    /// the recording" to the model and ran nothing.
    TOOL_REPLAY_MISMATCH = "tool.replay_mismatch" => ToolReplayMismatch {
        call_id: String,
        tool_name: String,
    },
    SCHEMA_RETRIED = "schema.retried" => SchemaRetried {
        attempt: i32,
        max_attempts: i32,
        message: String,
    },
    POLICY_VIOLATED = "policy.violated" => PolicyViolated { kind: String, limit: i64 },
    COMPACTION_STARTED = "compaction.started" => CompactionStarted { reason: String },
    COMPACTION_FINISHED = "compaction.finished" => CompactionFinished {
        reason: String,
        tokens_before: u64,
        tokens_after: u64,
    },
    COMPACTION_FAILED = "compaction.failed" => CompactionFailed { reason: String, message: String },
    CONTEXT_LIMIT_EXCEEDED = "context.limit_exceeded" => ContextLimitExceeded {
        estimated_tokens: u64,
        threshold_tokens: u64,
    },
    /// A request's worst case did not fit a money budget: the request was not sent and the ticket
    /// waits (`waiting_for: "budget"`) until the budget is raised or its period rolls over.
    BUDGET_EXHAUSTED = "budget.exhausted" => BudgetExhausted {
        /// `ticket` or `agent`.
        scope: String,
        /// The ticket's key or the agent's name.
        name: String,
        #[schema(value_type = f64)]
        limit_usd: Usd,
        /// What the budget has spent and reserved in its period.
        #[schema(value_type = f64)]
        spent_usd: Usd,
    },
    /// A budget's spending reached 50, 80 or 100 % of its limit (once each per period), on the
    /// ticket whose request crossed it.
    BUDGET_THRESHOLD = "budget.threshold" => BudgetThreshold {
        scope: String,
        name: String,
        percent: i32,
    },
    /// A money budget applies and the model has no price: the ticket waits
    /// (`waiting_for: "price"`) until one is set (`PUT /v1/prices/{model}`).
    BUDGET_UNPRICED = "budget.unpriced" => BudgetUnpriced { model: String },
    /// A schedule's fire time passed without a ticket: because this ticket (its previous one) was
    /// still unfinished (`overlap: skip`, reason `overlap`), or because the project had created
    /// its `tickets_per_day` (reason `quota`; an event of the project, with no ticket).
    SCHEDULE_SKIPPED = "schedule.skipped" => ScheduleSkipped {
        schedule_id: Uuid,
        scheduled_for: chrono::DateTime<chrono::Utc>,
        /// `overlap` or `quota`.
        reason: String,
    },
    /// A project reached one of its quotas (`tokens_per_day`, `cost_usd_per_day`,
    /// `cost_usd_per_month`): its tickets are not claimed and its requests not sent until the
    /// period rolls over or the quota is raised. Once per quota and period, an event of the
    /// project with no ticket.
    PROJECT_QUOTA_REACHED = "project.quota_reached" => ProjectQuotaReached {
        quota: String,
        /// Tokens for `tokens_per_day`, US dollars for the money quotas.
        #[schema(value_type = f64)]
        limit: Usd,
        #[schema(value_type = f64)]
        used: Usd,
    },
    /// Live-only: never stored, no `seq`, no SSE id.
    TEXT_DELTA = "text.delta" => TextDelta { delta: String },
    /// Live-only, like `text.delta`.
    THINKING_DELTA = "thinking.delta" => ThinkingDelta { delta: String },
    /// Live-only: a fragment of a tool call's arguments as the model writes them.
    TOOL_CALL_DELTA = "tool_call.delta" => ToolCallDelta {
        call_id: String,
        tool_name: String,
        delta: String,
    },
}

/// The members of `ticket.created`'s `ticket` (a `Ticket` as serde writes it), in their order. The
/// database builds a new ticket's `ticket.created` from this list in the statement that inserts
/// the ticket (`db::tickets`); the tests below check it against `Ticket`'s serialisation, and
/// `tests/created_event.rs` the SQL against the typed event.
pub const CREATED_TICKET_FIELDS: &[&str] = &[
    "id",
    "key",
    "task",
    "labels",
    "status",
    "agent",
    "reporter",
    "priority",
    "parent_id",
    "parent_key",
    "schema",
    "result",
    "error",
    "attempts",
    "max_attempts",
    "metadata",
    "deadline_secs",
    "deadline_at",
    "usage",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "pending_approvals",
    "pending_question",
    "budget_usd",
    "waiting_for",
    "agent_version",
];

/// The members of a new ticket's `usage`, in their order: nothing is estimated yet, so
/// `estimated` is absent (serde skips it while false).
pub const CREATED_USAGE_FIELDS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "requests",
    "tool_calls",
    "cost_usd",
    "unpriced",
];

/// An event as clients receive it in an SSE `data:` line. Its OpenAPI description is
/// `TicketEventSchema`, which spells out each kind's `data`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TicketEvent {
    /// Null for an event of the project that belongs to no ticket (`project.quota_reached`).
    pub ticket_id: Option<Uuid>,
    pub ticket_key: Option<String>,
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
    /// Null for an event of the project that belongs to no ticket (`project.quota_reached`).
    #[schema(required = true)]
    pub ticket_id: Option<Uuid>,
    #[schema(required = true)]
    pub ticket_key: Option<String>,
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
    /// Every call that waited for a person was answered (approvals, and a question's answer).
    Approval,
    /// The budget (or the price) it waited for is there: raised, rolled over, or set.
    Budget,
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

impl EventData {
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
            EventData::TicketStarted {
                agent: s(),
                attempt: 1,
                agent_version: Some(1),
            },
            EventData::TicketDone { result: json!(1) },
            EventData::TicketFailed {
                error: TicketError {
                    kind: crate::domain::FailureKind::LeaseLost,
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
                cost_usd: None,
                unpriced: true,
            },
            EventData::BudgetExhausted {
                scope: s(),
                name: s(),
                limit_usd: Usd::ZERO,
                spent_usd: Usd::ZERO,
            },
            EventData::BudgetThreshold {
                scope: s(),
                name: s(),
                percent: 50,
            },
            EventData::BudgetUnpriced { model: s() },
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
                approve_url: Some(s()),
                deny_url: Some(s()),
            },
            EventData::ToolApprovalExpired {
                call_id: s(),
                tool_name: s(),
                decision: s(),
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
            EventData::QuestionAsked {
                id: Uuid::nil(),
                call_id: s(),
                question: s(),
                response_schema: None,
                choices: None,
                answer_url: None,
                expires_at: None,
            },
            EventData::QuestionAnswered {
                id: Uuid::nil(),
                call_id: s(),
                answer: json!("yes"),
                by: s(),
            },
            EventData::QuestionExpired {
                id: Uuid::nil(),
                call_id: s(),
                on_timeout: s(),
            },
            EventData::ToolReplayMismatch {
                call_id: s(),
                tool_name: s(),
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
                reason: s(),
            },
            EventData::ProjectQuotaReached {
                quota: s(),
                limit: Usd::ZERO,
                used: Usd::ZERO,
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
    fn the_created_ticket_fields_are_the_tickets_serialisation() {
        let ticket = every_kind()
            .into_iter()
            .find_map(|event| match event {
                EventData::TicketCreated { ticket } => Some(ticket),
                _ => None,
            })
            .unwrap();
        let json = serde_json::to_value(&ticket).unwrap();
        let names = |value: &Value| value.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&json), CREATED_TICKET_FIELDS);
        assert_eq!(names(&json["usage"]), CREATED_USAGE_FIELDS);
    }

    #[test]
    fn new_event_takes_the_kind_from_the_payload() {
        let event = NewEvent::new(Some("alice"), EventData::RequestStarted { model: "m".into() });
        assert_eq!(event.kind, "request.started");
        assert_eq!(event.agent.as_deref(), Some("alice"));
        assert_eq!(event.data, r#"{"model":"m"}"#);
    }
}
