//! The provider-independent side of a model call: the request, the streamed deltas and the
//! response every wire format is read into.

use std::sync::Arc;

use super::grammar_safe;
use crate::domain::ContentBlock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Clone, Debug)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

/// A tool offered to the model. The description and the schema (as JSON text) are shared: the same
/// built-in tools go into every request, so a request clones pointers and copies text.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: String,
    pub description: Arc<str>,
    pub input_schema: Arc<serde_json::value::RawValue>,
}

impl ToolSpec {
    /// The schema is sent in the form grammar converters accept (`grammar_safe`).
    pub fn new(name: &str, description: &str, input_schema: &serde_json::Value) -> ToolSpec {
        let sent = grammar_safe::grammar_safe(input_schema);
        // A `Value` always serialises.
        let schema = serde_json::value::to_raw_value(&sent).expect("a JSON value serialises");
        ToolSpec {
            name: name.to_owned(),
            description: description.into(),
            input_schema: schema.into(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Extended thinking (Anthropic): the token budget for the model's reasoning; None is off.
    pub thinking_budget: Option<u32>,
    /// Sent only when the request has tools, and never for `Auto` (the providers' default).
    pub tool_choice: ToolChoice,
}

/// Which tool the model must call, in the agent's words; each provider sends it in its own form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Auto,
    /// Some tool, the model picks which.
    Required,
    None,
    /// This tool.
    Tool(String),
}

impl ToolChoice {
    /// `auto`, `required`, `none`, or any other text as a tool's name.
    pub fn parse(s: &str) -> ToolChoice {
        match s {
            "auto" | "" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            name => ToolChoice::Tool(name.to_owned()),
        }
    }
}

/// An incremental piece of model output, forwarded to the caller as soon as it arrives.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    Text(String),
    Thinking(String),
    /// A fragment of a tool call's arguments (JSON text) as it arrives, with the call it belongs to.
    ToolCall {
        call_id: String,
        tool_name: String,
        delta: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Raw JSON text as streamed; may be truncated or malformed (e.g. when the output hit
    /// max_tokens), so it is left to the caller to parse and repair.
    pub arguments: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_creation_tokens += other.cache_creation_tokens;
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub enum StopReason {
    #[default]
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    Other(String),
}

impl StopReason {
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::Refusal => "refusal",
            StopReason::Other(s) => s,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ModelResponse {
    pub text: String,
    /// Thinking blocks with their signatures, in stream order, to be sent back verbatim.
    pub thinking: Vec<ContentBlock>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop_reason: StopReason,
    pub model: String,
    /// Whether the provider reported any usage (some local servers never do).
    pub usage_reported: bool,
}

impl ModelResponse {
    /// No text (blank counts as none), no thinking and no tool call: nothing to act on, and never
    /// a question for humans.
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty() && self.thinking.is_empty() && self.tool_calls.is_empty()
    }
}
