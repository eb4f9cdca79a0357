//! Agents: a role (system prompt), a model and the tools it may use. Routing follows labels.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Agent {
    pub name: String,
    /// The system prompt.
    pub role: String,
    /// `openai`, `anthropic` or a named provider (`/v1/providers`); null picks the configured
    /// built-in one (Anthropic first).
    pub provider: Option<String>,
    pub model: String,
    /// Labels of the tickets this agent takes (besides those labelled with its name).
    pub labels: Vec<String>,
    pub tools: Vec<String>,
    pub context_window: Option<i32>,
    pub max_turns: Option<i32>,
    pub max_input_tokens: Option<i64>,
    pub max_output_tokens: Option<i64>,
    pub max_schema_retries: i32,
    pub max_request_retries: i32,
    pub request_retry_delay_ms: i32,
    pub temperature: Option<f64>,
    pub max_tokens: Option<i32>,
    /// Extended thinking budget in tokens (Anthropic); null is off.
    pub thinking_budget: Option<i32>,
    /// `auto`, `required`, `none`, or the name of one of the agent's tools: which tool the model
    /// must call, sent with each request that offers tools.
    #[serde(default = "default_tool_choice")]
    pub tool_choice: String,
    /// How many tickets this agent works on at once, across all processes; null is no limit.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_concurrent: Option<i32>,
    /// The most this agent's requests may cost per UTC day, in US dollars; null is no limit.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, required = true)]
    pub budget_usd_per_day: Option<super::Usd>,
    /// How long a call of its tools waits for approval when the tool (or its MCP server) says
    /// nothing; null: for ever.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000, required = true)]
    pub approval_timeout_secs: Option<i32>,
    /// What the desk answers at that deadline: `deny` (default), `approve` or `fail`.
    #[serde(default)]
    #[schema(required = true)]
    pub on_timeout: Option<super::tool::OnTimeout>,
    /// How long a question it asks (`ask_human`) waits for an answer; null: for ever.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000, required = true)]
    pub question_timeout_secs: Option<i32>,
    /// What the desk does at that deadline: `fail` (default; kind `question_expired`) or
    /// `continue` (the model is told that nobody answered).
    #[serde(default)]
    #[schema(required = true)]
    pub on_question_timeout: Option<super::question::QuestionTimeout>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Its version: 1 when created, one more with each change of its settings (each kept, see
    /// `GET /v1/agents/{name}/versions`).
    #[serde(default = "first_version")]
    #[schema(minimum = 1)]
    pub version: i32,
}

fn first_version() -> i32 {
    1
}

pub fn default_tool_choice() -> String {
    "auto".into()
}

/// Agent names double as labels and appear in URLs: keep them simple.
pub fn is_valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The system prompt of the `default` agent, and of any agent whose role is blank.
pub const DEFAULT_AGENT_ROLE: &str = "You are an agent working a ticket. Do what the ticket asks. \
When you are done, call close_ticket with the result. If you need information only a human can give, \
ask for it in plain text without calling a tool; the ticket waits for their reply.";

/// The model an agent gets when it names none: the configured one, else the provider's default.
pub fn default_model(configured: Option<&str>, provider: Option<&str>) -> String {
    match (configured, provider) {
        (Some(m), _) => m.to_owned(),
        (None, Some("anthropic")) => "claude-sonnet-4-5".into(),
        _ => "gpt-4o-mini".into(),
    }
}

/// Whether some agent takes a ticket with these labels, by the rule the claim statement applies
/// (`db::claims::ROUTE`): a label naming an agent sends it to that agent; else an agent with no
/// labels takes unlabelled tickets, and an agent sharing a label takes a labelled one.
pub fn some_agent_takes(agents: &[(String, Vec<String>)], ticket_labels: &[String]) -> bool {
    if agents.iter().any(|(name, _)| ticket_labels.contains(name)) {
        return true;
    }
    agents.iter().any(|(_, labels)| {
        if ticket_labels.is_empty() {
            labels.is_empty()
        } else {
            labels.iter().any(|label| ticket_labels.contains(label))
        }
    })
}

#[cfg(test)]
mod routing_tests {
    use super::some_agent_takes;

    fn agents(list: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        list.iter()
            .map(|(name, labels)| (name.to_string(), labels.iter().map(|l| l.to_string()).collect()))
            .collect()
    }

    fn labels(list: &[&str]) -> Vec<String> {
        list.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn a_ticket_is_taken_by_name_by_a_shared_label_or_unlabelled_by_an_agent_without_labels() {
        let desk = agents(&[("default", &[]), ("researcher", &["research"])]);
        assert!(some_agent_takes(&desk, &labels(&[])));
        assert!(some_agent_takes(&desk, &labels(&["research", "x"])));
        assert!(some_agent_takes(&desk, &labels(&["default"])));
        assert!(!some_agent_takes(&desk, &labels(&["urgent"])));
        let labelled_only = agents(&[("researcher", &["research"])]);
        assert!(!some_agent_takes(&labelled_only, &labels(&[])));
        assert!(!some_agent_takes(&[], &labels(&[])));
    }
}
