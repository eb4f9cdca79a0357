//! What one model request holds: the agent's role and the ticket's schema as the system prompt,
//! the transcript as messages, the agent's tools and settings; and the limits checked before it.

use super::transcript;
use crate::domain::{Agent, Comment, FailureKind, Ticket, TicketUsage, TokenUsage};
use crate::llm::{self, ModelRequest};
use crate::tools::ToolRegistry;

pub(super) fn build(agent: &Agent, tools: &ToolRegistry, ticket: &Ticket, comments: &[Comment]) -> ModelRequest {
    ModelRequest {
        model: agent.model.clone(),
        system: system_prompt(agent, ticket),
        messages: transcript::to_messages(comments),
        // Built once per tool by the registry; a request only clones them.
        tools: tools.specs(agent.tools.iter().map(String::as_str)),
        temperature: agent.temperature,
        max_tokens: agent.max_tokens.map(|m| m as u32),
        thinking_budget: agent.thinking_budget.map(|b| b as u32),
        tool_choice: llm::ToolChoice::parse(&agent.tool_choice),
    }
}

fn system_prompt(agent: &Agent, ticket: &Ticket) -> String {
    let role = if agent.role.trim().is_empty() {
        crate::domain::agent::DEFAULT_AGENT_ROLE
    } else {
        agent.role.as_str()
    };
    let mut prompt = format!("{role}\n\nYou are working on ticket {}.", ticket.key);
    // In the system prompt, not the transcript, so that compaction cannot drop it.
    if let Some(schema) = &ticket.schema {
        prompt.push_str("\n\nThe result you pass to close_ticket must match this JSON Schema:\n");
        prompt.push_str(&serde_json::to_string_pretty(schema).unwrap_or_default());
    }
    prompt
}

/// The requests a ticket may make when the agent sets no `max_turns`: a model that never
/// finishes stops here.
pub const DEFAULT_MAX_TURNS: i64 = 100;

/// The agent's limits, checked before each request: (kind, limit) of the first one reached.
pub(super) fn policy_violation(agent: &Agent, ticket: &Ticket) -> Option<(FailureKind, i64)> {
    let u = &ticket.usage;
    let max_turns = agent.max_turns.map_or(DEFAULT_MAX_TURNS, i64::from);
    if u.requests >= max_turns {
        return Some((FailureKind::MaxTurns, max_turns));
    }
    if let Some(max) = agent.max_input_tokens.filter(|max| u.input_tokens >= *max) {
        return Some((FailureKind::MaxInputTokens, max));
    }
    if let Some(max) = agent.max_output_tokens.filter(|max| u.output_tokens >= *max) {
        return Some((FailureKind::MaxOutputTokens, max));
    }
    None
}

/// Fills in the usage of a response whose provider reported none, estimated at about 4 characters
/// per token: the request's estimate as input, the text and tool arguments as output.
pub(super) fn estimate_usage(request: &ModelRequest, response: &mut llm::ModelResponse) {
    if response.usage_reported {
        return;
    }
    let output_chars = response.text.len() + response.tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>();
    response.usage = llm::Usage {
        input_tokens: super::window::estimate_tokens(request),
        output_tokens: (output_chars as u64).div_ceil(4),
        ..llm::Usage::default()
    };
}

/// A response's tokens as its `request.finished` event reports them; `estimated` when the
/// provider reported none.
pub(super) fn token_usage(usage: &llm::Usage, estimated: bool) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cache_read_tokens: usage.cache_read_tokens,
        cache_creation_tokens: usage.cache_creation_tokens,
        estimated,
    }
}

/// What `requests` responses with these tokens add to the ticket's counters.
pub(super) fn ticket_usage(usage: &llm::Usage, requests: i64, estimated: bool) -> TicketUsage {
    TicketUsage {
        estimated,
        input_tokens: usage.input_tokens as i64,
        output_tokens: usage.output_tokens as i64,
        cache_read_tokens: usage.cache_read_tokens as i64,
        cache_creation_tokens: usage.cache_creation_tokens as i64,
        requests,
        tool_calls: 0,
        ..TicketUsage::default()
    }
}
