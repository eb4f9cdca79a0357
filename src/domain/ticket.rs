//! Tickets: the unit of work an agent claims, works and closes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::failure::FailureKind;
use super::money::Usd;
use super::project::ProjectId;
use super::tool::{Approval, PendingApproval};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Todo,
    InProgress,
    Waiting,
    Done,
    Failed,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Todo,
        Status::InProgress,
        Status::Waiting,
        Status::Done,
        Status::Failed,
        Status::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Todo => "todo",
            Status::InProgress => "in_progress",
            Status::Waiting => "waiting",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// Finished tickets: a comment reopens them, retry re-queues failed and cancelled ones.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }

    /// Statuses a ticket may be edited in: nobody is working on it.
    pub fn is_editable(self) -> bool {
        matches!(self, Status::Todo | Status::Waiting)
    }
}

/// Token and call counts summed over every model request of a ticket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
pub struct TicketUsage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_creation_tokens: i64,
    /// Every request sent, failed ones and retries included.
    pub requests: i64,
    pub tool_calls: i64,
    /// What the requests cost, in US dollars, at the prices in force when each was sent; null
    /// when some request's model had no price (`unpriced`).
    #[serde(rename = "cost_usd", default, deserialize_with = "cost_or_zero")]
    #[schema(value_type = Option<f64>, required = true)]
    pub cost: Usd,
    /// True when some request's model had no price: its cost is unknown, and `cost_usd` is null.
    #[serde(default)]
    #[schema(required = true)]
    pub unpriced: bool,
    /// Present (true) once some of the counts were estimated because a provider reported no usage.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl TicketUsage {
    /// Both counts summed.
    pub fn plus(&self, other: &TicketUsage) -> TicketUsage {
        TicketUsage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cache_read_tokens: self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens: self.cache_creation_tokens + other.cache_creation_tokens,
            requests: self.requests + other.requests,
            tool_calls: self.tool_calls + other.tool_calls,
            cost: self.cost.plus(other.cost),
            unpriced: self.unpriced || other.unpriced,
            estimated: self.estimated || other.estimated,
        }
    }

    /// The cost as the API shows it: None when some request had no price.
    pub fn cost_usd(&self) -> Option<Usd> {
        (!self.unpriced).then_some(self.cost)
    }
}

/// `cost_usd` is read back as zero when null (`unpriced` says why).
fn cost_or_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
    Ok(Option::<Usd>::deserialize(d)?.unwrap_or_default())
}

impl Serialize for TicketUsage {
    /// As derived, but `cost_usd` is null when some request had no price.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("TicketUsage", 9)?;
        out.serialize_field("input_tokens", &self.input_tokens)?;
        out.serialize_field("output_tokens", &self.output_tokens)?;
        out.serialize_field("cache_read_tokens", &self.cache_read_tokens)?;
        out.serialize_field("cache_creation_tokens", &self.cache_creation_tokens)?;
        out.serialize_field("requests", &self.requests)?;
        out.serialize_field("tool_calls", &self.tool_calls)?;
        out.serialize_field("cost_usd", &self.cost_usd())?;
        out.serialize_field("unpriced", &self.unpriced)?;
        if self.estimated {
            out.serialize_field("estimated", &true)?;
        }
        out.end()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TicketError {
    /// Machine-readable cause, e.g. `rate_limited`, `max_turns`, `lease_lost`.
    #[schema(value_type = String)]
    pub kind: FailureKind,
    pub message: String,
}

/// Attempts a ticket gets when its creator names none (over the API, a schedule or a tool).
pub const DEFAULT_MAX_ATTEMPTS: i32 = 3;

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Ticket {
    pub id: Uuid,
    /// The project it belongs to (not shown: a client sees only its own project's tickets).
    #[serde(skip, default = "default_project")]
    pub project: ProjectId,
    /// `TICKET-<n>`: unique and increasing.
    #[schema(example = "TICKET-7")]
    pub key: String,
    /// Any JSON; usually a string.
    pub task: Value,
    pub labels: Vec<String>,
    pub status: Status,
    /// The agent that last claimed the ticket.
    pub agent: Option<String>,
    /// `user`, or the agent that created the ticket.
    pub reporter: String,
    /// Higher is claimed first; then oldest first.
    pub priority: i32,
    pub parent_id: Option<Uuid>,
    pub parent_key: Option<String>,
    /// JSON Schema (draft 2020-12) the result must satisfy.
    pub schema: Option<Value>,
    pub result: Option<Value>,
    pub error: Option<TicketError>,
    /// Claims that ended in a lost lease or an error.
    pub attempts: i32,
    pub max_attempts: i32,
    pub metadata: Value,
    /// Seconds after its creation when the ticket fails with `deadline_exceeded`, whatever it is
    /// doing; null is none.
    pub deadline_secs: Option<i32>,
    /// When the deadline passes (`created_at` + `deadline_secs`).
    pub deadline_at: Option<DateTime<Utc>>,
    pub usage: TicketUsage,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Tool calls of the last step that wait for a person's answer
    /// (`POST /v1/tickets/{ticket}/approvals/{call_id}`); the ticket is `waiting` until all are answered.
    #[serde(default)]
    #[schema(required = true)]
    pub pending_approvals: Vec<PendingApproval>,
    /// The question its agent asked with `ask_human` that waits for an answer
    /// (`POST /v1/tickets/{ticket}/questions/{id}`, its `answer_url`, or a comment); null otherwise.
    #[serde(default)]
    #[schema(required = true)]
    pub pending_question: Option<super::PendingQuestion>,
    /// Every call of the last step that needed an answer, answered or not, until the next claim
    /// runs them (internal: not shown).
    #[serde(skip)]
    pub approvals: Vec<Approval>,
    /// The most this ticket's requests may cost, in US dollars; null: no limit of its own.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, required = true)]
    pub budget_usd: Option<Usd>,
    /// Why a `waiting` ticket waits: `human` (a question), `approval` (calls waiting for a
    /// person), `budget` (a money budget has no room for its next request: it resumes when the
    /// budget is raised or its period rolls over), `price` (its model has no price and a money
    /// budget applies: it resumes when a price is set); null otherwise.
    #[serde(default)]
    #[schema(required = true)]
    pub waiting_for: Option<WaitingFor>,
    /// The version of its agent its latest claim ran, or the one it is pinned to (created with
    /// `agent` and `agent_version`); null before either.
    #[serde(default)]
    #[schema(required = true, minimum = 1)]
    pub agent_version: Option<i32>,
    /// Whether a claim runs `agent_version` rather than the agent's latest version.
    #[serde(skip)]
    pub version_pinned: bool,
    /// What this ticket replays, when it is a replay (internal: `metadata.replay_of` shows it).
    #[serde(skip)]
    pub replay: Option<Replay>,
}

/// How a replay runs: which ticket it replays, whether its tool calls are answered from that
/// ticket's recording, and the provider and model it runs with instead of its agent's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub of: Uuid,
    pub tools: ReplayTools,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Where a replay's tool calls get their results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplayTools {
    /// From the original's calls: a call equal to one of them returns its recorded output and
    /// runs nothing; any other returns "not in the recording".
    #[default]
    Recorded,
    /// The tools run again, for real.
    Live,
}

/// Why a ticket waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    Human,
    Approval,
    Budget,
    Price,
}

impl WaitingFor {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitingFor::Human => "human",
            WaitingFor::Approval => "approval",
            WaitingFor::Budget => "budget",
            WaitingFor::Price => "price",
        }
    }

    pub fn parse(s: &str) -> Option<WaitingFor> {
        [
            WaitingFor::Human,
            WaitingFor::Approval,
            WaitingFor::Budget,
            WaitingFor::Price,
        ]
        .into_iter()
        .find(|w| w.as_str() == s)
    }
}

impl Ticket {
    /// What the model reads as the ticket's task (its first user comment): a string task as it
    /// is, any other JSON pretty-printed.
    pub fn task_text(&self) -> String {
        match &self.task {
            Value::String(s) => s.clone(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        }
    }
}

fn default_project() -> ProjectId {
    ProjectId::DEFAULT
}

/// A ticket reference in a path: its id, or its key `PREFIX-<number>` (kept as written by the
/// desk, the prefix in capitals and the number without leading zeros, and as the number, which is
/// what the database indexes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TicketRef {
    Id(Uuid),
    Key { key: String, number: i64 },
}

impl TicketRef {
    /// Anything that is neither an id (a UUID in its usual hyphenated form, in either case) nor a
    /// key (`TICKET-<n>`, `OPS-<n>`: a project's key prefix in any case) names no ticket.
    pub fn parse(s: &str) -> Option<TicketRef> {
        if s.len() == 36 {
            return Uuid::try_parse(s).ok().map(TicketRef::Id);
        }
        let (prefix, number) = s.split_once('-')?;
        if !(1..=10).contains(&prefix.len()) || !prefix.bytes().all(|b| b.is_ascii_alphabetic()) {
            return None;
        }
        if number.is_empty() || number.len() > 18 || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let number: i64 = number.parse().ok()?;
        Some(TicketRef::Key {
            key: format!("{}-{number}", prefix.to_ascii_uppercase()),
            number,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_refs_parse_ids_and_keys_and_nothing_else() {
        let id = Uuid::now_v7();
        assert_eq!(TicketRef::parse(&id.to_string()), Some(TicketRef::Id(id)));
        let key = |k: &str| {
            let number = k.rsplit_once('-').unwrap().1.parse().unwrap();
            Some(TicketRef::Key { key: k.into(), number })
        };
        assert_eq!(TicketRef::parse("TICKET-42"), key("TICKET-42"));
        assert_eq!(TicketRef::parse("ticket-042"), key("TICKET-42"));
        assert_eq!(TicketRef::parse("Ticket-7"), key("TICKET-7"));
        assert_eq!(TicketRef::parse("ops-3"), key("OPS-3"));
        let upper = id.to_string().to_uppercase();
        assert_eq!(TicketRef::parse(&upper), Some(TicketRef::Id(id)));
        let other_spellings = [id.simple().to_string(), format!("{{{id}}}"), id.urn().to_string()];
        for bad in [
            "",
            "TICKET-",
            "TICKET-x",
            "42",
            "TICKET-99999999999999999999",
            "TICKETLONGER-1",
            "T1-1",
        ]
        .into_iter()
        .chain(other_spellings.iter().map(String::as_str))
        {
            assert_eq!(TicketRef::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn statuses_round_trip() {
        for status in Status::ALL {
            assert_eq!(Status::parse(status.as_str()), Some(status));
        }
        assert_eq!(Status::parse("doing"), None);
    }
}
