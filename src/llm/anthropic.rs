//! Anthropic Messages API.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::endpoint::{HttpProvider, KeyHeader, WireFormat};
use super::error::LlmError;
use super::http::{self, ErrorInfo};
use super::stream::{self, Flow, StreamParser};
use super::types::{Delta, Message, ModelRequest, ModelResponse, Role, StopReason, ToolCall, ToolChoice, ToolSpec};
use super::wire::{self, Json, Tag, WireError};
use crate::domain::ContentBlock;

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
/// The API requires max_tokens; used when the request leaves it open.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

const NAME: &str = "anthropic";

/// An Anthropic provider; its `base_url` is without the version path, e.g.
/// `https://api.anthropic.com`.
pub type Anthropic = HttpProvider<Messages>;

/// The Messages API wire format.
pub struct Messages;

impl WireFormat for Messages {
    const NAME: &'static str = NAME;
    const PATH: &'static str = "/v1/messages";
    const HEADERS: &'static [(&'static str, &'static str)] = &[("anthropic-version", API_VERSION)];
    const KEY_HEADER: KeyHeader = KeyHeader::Named("x-api-key");

    /// A base URL copied with its "/v1" would otherwise yield ".../v1/v1/messages".
    fn base_url(trimmed: String) -> String {
        match trimmed.strip_suffix("/v1") {
            Some(stripped) => stripped.to_string(),
            None => trimmed,
        }
    }

    fn body(req: &ModelRequest) -> impl Serialize + '_ {
        let thinking = req.thinking_budget.map(|budget| Thinking {
            kind: "enabled",
            budget_tokens: budget,
        });
        let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if let Some(budget) = req.thinking_budget {
            // The API wants room for the answer beyond the thinking budget.
            max_tokens = max_tokens.max(budget.saturating_add(1024));
        }
        Request {
            model: &req.model,
            system: Some(req.system.as_str()).filter(|s| !s.is_empty()),
            messages: turns(&req.messages),
            thinking,
            max_tokens,
            stream: true,
            // Thinking requires the default temperature.
            temperature: req.temperature.filter(|_| req.thinking_budget.is_none()),
            tool_choice: tool_choice(req),
            tools: req.tools.iter().map(tool).collect(),
        }
    }

    fn parser<'k>(model: &str, api_key: Option<&'k str>) -> impl StreamParser + 'k {
        Parser::new(model, api_key)
    }
}

/// The request body for `POST {base}/v1/messages`.
#[derive(Serialize)]
struct Request<'r> {
    model: &'r str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'r str>,
    messages: Vec<Turn<'r>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'r>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'r>>,
}

#[derive(Serialize)]
struct Turn<'r> {
    role: &'static str,
    content: Vec<WireBlock<'r>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'r> {
    Text {
        text: &'r str,
    },
    ToolUse {
        id: &'r str,
        name: &'r str,
        input: &'r Value,
    },
    ToolResult {
        tool_use_id: &'r str,
        content: &'r str,
        is_error: bool,
    },
    Thinking {
        thinking: &'r str,
        signature: &'r str,
    },
}

/// `{"type": "enabled", "budget_tokens": ..}`.
#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum WireToolChoice<'r> {
    /// Some tool, the model picks which.
    Any,
    None,
    Tool {
        name: &'r str,
    },
}

#[derive(Serialize)]
struct Tool<'r> {
    name: &'r str,
    description: &'r str,
    input_schema: &'r RawValue,
}

/// Sent for a tool call whose input is not an object.
static EMPTY_INPUT: LazyLock<Value> = LazyLock::new(|| Value::Object(Map::new()));

fn block(b: &ContentBlock) -> Option<WireBlock<'_>> {
    Some(match b {
        ContentBlock::Text { text } if text.is_empty() => return None, // the API rejects empty text blocks
        ContentBlock::Text { text } => WireBlock::Text { text },
        ContentBlock::ToolUse { id, name, input } => WireBlock::ToolUse {
            id,
            name,
            // The API wants an object; repaired arguments may have come back as something else.
            input: if input.is_object() { input } else { &EMPTY_INPUT },
        },
        ContentBlock::ToolResult {
            tool_use_id,
            output,
            is_error,
        } => WireBlock::ToolResult {
            tool_use_id,
            content: output,
            is_error: *is_error,
        },
        // Sent back verbatim; without its signature the API would reject the whole request.
        ContentBlock::Thinking {
            text,
            signature: Some(sig),
        } => WireBlock::Thinking {
            thinking: text,
            signature: sig,
        },
        ContentBlock::Thinking { signature: None, .. } => return None,
    })
}

/// Consecutive messages of one role are merged: the API wants strictly alternating turns, and
/// all tool results answering one assistant turn must sit in the next user turn.
fn turns(messages: &[Message]) -> Vec<Turn<'_>> {
    let mut turns: Vec<(Role, Vec<WireBlock<'_>>)> = Vec::new();
    for m in messages {
        let blocks: Vec<WireBlock<'_>> = m.content.iter().filter_map(block).collect();
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, content)) if *role == m.role => content.extend(blocks),
            _ => turns.push((m.role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut content)| {
            if role == Role::User {
                // tool_result blocks must come first in a user turn; stable sort keeps order.
                content.sort_by_key(|b| !matches!(b, WireBlock::ToolResult { .. }));
            }
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            Turn { role, content }
        })
        .collect()
}

/// Sent only with tools, and never for `Auto` (the default).
fn tool_choice(req: &ModelRequest) -> Option<WireToolChoice<'_>> {
    if req.tools.is_empty() {
        return None;
    }
    match &req.tool_choice {
        ToolChoice::Auto => None,
        ToolChoice::Required => Some(WireToolChoice::Any),
        ToolChoice::None => Some(WireToolChoice::None),
        ToolChoice::Tool(name) => Some(WireToolChoice::Tool { name }),
    }
}

fn tool(t: &ToolSpec) -> Tool<'_> {
    Tool {
        name: &t.name,
        description: &t.description,
        input_schema: &t.input_schema,
    }
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

/// The `type` of a stream event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum EventType {
    MessageStart,
    ContentBlockStart,
    ContentBlockDelta,
    ContentBlockStop,
    MessageDelta,
    MessageStop,
    Ping,
    Error,
    /// Event types added after this code was written.
    #[serde(other)]
    Unknown,
}

/// One stream event. The fields of all event types are optional here because the type is only
/// known once the event is read (and comes from the SSE `event:` field when the data lacks it).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: Tag<EventType>,
    /// Which content block a content_block_* event is about.
    #[serde(borrow)]
    index: Json<'a>,
    /// message_start's message; an error event without an error object may carry its text here.
    #[serde(borrow)]
    message: Json<'a, MessageStart<'a>>,
    #[serde(borrow)]
    content_block: Json<'a, BlockStart<'a>>,
    /// content_block_delta's block delta, or message_delta's message delta.
    #[serde(borrow)]
    delta: Json<'a, EventDelta<'a>>,
    #[serde(borrow)]
    usage: Json<'a, WireUsage<'a>>,
    #[serde(borrow)]
    error: Json<'a, WireError<'a>>,
    #[serde(borrow)]
    code: Json<'a>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct MessageStart<'a> {
    #[serde(borrow)]
    model: Json<'a>,
    #[serde(borrow)]
    usage: Json<'a, WireUsage<'a>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BlockType {
    Text,
    ToolUse,
    Thinking,
    /// redacted_thinking, server tools and future block types: kept out of the response.
    #[serde(other)]
    Other,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct BlockStart<'a> {
    #[serde(rename = "type")]
    kind: Tag<BlockType>,
    #[serde(borrow)]
    text: Json<'a>,
    #[serde(borrow)]
    id: Json<'a>,
    #[serde(borrow)]
    name: Json<'a>,
    #[serde(borrow)]
    thinking: Json<'a>,
    #[serde(borrow)]
    signature: Json<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum DeltaType {
    TextDelta,
    ThinkingDelta,
    SignatureDelta,
    InputJsonDelta,
    #[serde(other)]
    Other,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct EventDelta<'a> {
    #[serde(rename = "type")]
    kind: Tag<DeltaType>,
    #[serde(borrow)]
    text: Json<'a>,
    #[serde(borrow)]
    thinking: Json<'a>,
    #[serde(borrow)]
    signature: Json<'a>,
    #[serde(borrow)]
    partial_json: Json<'a>,
    /// message_delta only.
    #[serde(borrow)]
    stop_reason: Json<'a>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct WireUsage<'a> {
    #[serde(borrow)]
    input_tokens: Json<'a>,
    #[serde(borrow)]
    output_tokens: Json<'a>,
    #[serde(borrow)]
    cache_read_input_tokens: Json<'a>,
    #[serde(borrow)]
    cache_creation_input_tokens: Json<'a>,
}

enum Block {
    Text,
    ToolUse(ToolCall),
    Thinking { text: String, signature: Option<String> },
    Other,
}

/// Accumulates the events of one response.
struct Parser<'k> {
    api_key: Option<&'k str>,
    out: ModelResponse,
    /// By the index the server gives each content block.
    blocks: BTreeMap<u64, Block>,
    stop: Option<StopReason>,
}

impl<'k> Parser<'k> {
    fn new(model: &str, api_key: Option<&'k str>) -> Self {
        Parser {
            api_key,
            out: ModelResponse {
                model: model.to_string(),
                ..Default::default()
            },
            blocks: BTreeMap::new(),
            stop: None,
        }
    }

    fn message_start(&mut self, msg: &MessageStart<'_>) {
        if let Some(m) = msg.model.str() {
            self.out.model = m.to_string();
        }
        if !matches!(msg.usage, Json::Missing) {
            // Present but not an object: every count reads as 0.
            let u = msg.usage.obj();
            // An object without a count (`{}`, or zeros) reports nothing.
            self.out.usage_reported |= u.is_some_and(|u| {
                [u.input_tokens.u64(), u.output_tokens.u64()]
                    .iter()
                    .any(|n| n.unwrap_or(0) > 0)
            });
            let usage = &mut self.out.usage;
            usage.input_tokens = u.and_then(|u| u.input_tokens.u64()).unwrap_or(0);
            usage.cache_read_tokens = u.and_then(|u| u.cache_read_input_tokens.u64()).unwrap_or(0);
            usage.cache_creation_tokens = u.and_then(|u| u.cache_creation_input_tokens.u64()).unwrap_or(0);
            usage.output_tokens = u.and_then(|u| u.output_tokens.u64()).unwrap_or(0);
        }
    }

    fn block_start(&mut self, cb: Option<&BlockStart<'_>>, on_delta: &mut (dyn FnMut(Delta) + Send)) -> Block {
        let Some(cb) = cb else { return Block::Other };
        let s = |field: &Json<'_>| field.str().unwrap_or("").to_string();
        match cb.kind.0 {
            Some(BlockType::Text) => {
                let t = cb.text.str().unwrap_or("");
                if !t.is_empty() {
                    self.out.text.push_str(t);
                    on_delta(Delta::Text(t.to_string()));
                }
                Block::Text
            }
            Some(BlockType::ToolUse) => Block::ToolUse(ToolCall {
                id: s(&cb.id),
                name: s(&cb.name),
                // The start event carries `input: {}`; the real input streams as
                // input_json_delta fragments.
                arguments: String::new(),
            }),
            Some(BlockType::Thinking) => {
                let t = s(&cb.thinking);
                if !t.is_empty() {
                    on_delta(Delta::Thinking(t.clone()));
                }
                Block::Thinking {
                    text: t,
                    signature: cb.signature.str().filter(|x| !x.is_empty()).map(String::from),
                }
            }
            Some(BlockType::Other) | None => Block::Other,
        }
    }

    fn block_delta(&mut self, index: u64, d: Option<&EventDelta<'_>>, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        let Some(d) = d else { return };
        match (d.kind.0, self.blocks.get_mut(&index)) {
            (Some(DeltaType::TextDelta), _) => {
                let t = d.text.str().unwrap_or("");
                if !t.is_empty() {
                    self.out.text.push_str(t);
                    on_delta(Delta::Text(t.to_string()));
                }
            }
            (Some(DeltaType::InputJsonDelta), Some(Block::ToolUse(call))) => {
                let fragment = d.partial_json.str().unwrap_or("");
                if !fragment.is_empty() {
                    call.arguments.push_str(fragment);
                    on_delta(Delta::ToolCall {
                        call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        delta: fragment.to_string(),
                    });
                }
            }
            (Some(DeltaType::ThinkingDelta), Some(Block::Thinking { text, .. })) => {
                let t = d.thinking.str().unwrap_or("");
                if !t.is_empty() {
                    text.push_str(t);
                    on_delta(Delta::Thinking(t.to_string()));
                }
            }
            (Some(DeltaType::SignatureDelta), Some(Block::Thinking { signature, .. })) => {
                let sig = d.signature.str().unwrap_or("");
                match signature {
                    Some(existing) => existing.push_str(sig),
                    None => *signature = Some(sig.to_string()),
                }
            }
            _ => {}
        }
    }

    fn message_delta(&mut self, ev: &Event<'_>) {
        if let Some(r) = ev.delta.obj().and_then(|d| d.stop_reason.str()) {
            self.stop = Some(stop_reason(r));
        }
        if let Some(u) = ev.usage.obj() {
            self.out.usage_reported |= [u.output_tokens.u64(), u.input_tokens.u64()]
                .iter()
                .any(|n| n.unwrap_or(0) > 0);
            // Cumulative counts: the last one is the total.
            let usage = &mut self.out.usage;
            for (field, value) in [
                (&mut usage.output_tokens, &u.output_tokens),
                (&mut usage.input_tokens, &u.input_tokens),
                (&mut usage.cache_read_tokens, &u.cache_read_input_tokens),
                (&mut usage.cache_creation_tokens, &u.cache_creation_input_tokens),
            ] {
                if let Some(n) = value.u64() {
                    *field = n;
                }
            }
        }
    }

    /// An `error` event: `{"type":"error","error":{"type":..,"message":..}}`.
    fn error(&self, chunk: &Json<'_, Event<'_>>, data: &str) -> LlmError {
        let info = match chunk {
            Json::Obj(ev) if !matches!(ev.error, Json::Missing) => ErrorInfo::from_wire(&ev.error, ev.message.str()),
            Json::Obj(ev) => {
                // Without an error object the event itself is read as one.
                let own = WireError {
                    message: ev.message.str().map_or(Json::Missing, |m| Json::Str(m.into())),
                    kind: match ev.kind.0 {
                        Some(_) => Json::Str("error".into()),
                        None => Json::Missing,
                    },
                    code: ev.code.clone(),
                };
                ErrorInfo::from_object(&own, ev.message.str())
            }
            Json::Str(m) => ErrorInfo::message_only(Some(m)),
            _ => ErrorInfo::default(),
        };
        http::stream_error(NAME, info, data, self.api_key)
    }
}

impl StreamParser for Parser<'_> {
    const PROVIDER: &'static str = NAME;
    type Chunk<'a> = Json<'a, Event<'a>>;

    fn on_chunk(
        &mut self,
        event: Option<&str>,
        chunk: Json<'_, Event<'_>>,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, LlmError> {
        let ev = chunk.obj();
        // The data's own `type` wins; the SSE event name stands in when the data has none.
        let kind = match ev.and_then(|ev| ev.kind.0) {
            Some(kind) => kind,
            None => event.and_then(wire::tag).unwrap_or(EventType::Unknown),
        };
        let index = || ev.and_then(|ev| ev.index.u64()).unwrap_or(0);
        match kind {
            EventType::MessageStart => {
                if let Some(msg) = ev.and_then(|ev| ev.message.obj()) {
                    self.message_start(msg);
                }
            }
            EventType::ContentBlockStart => {
                let block = self.block_start(ev.and_then(|ev| ev.content_block.obj()), on_delta);
                self.blocks.insert(index(), block);
            }
            EventType::ContentBlockDelta => self.block_delta(index(), ev.and_then(|ev| ev.delta.obj()), on_delta),
            EventType::MessageDelta => {
                if let Some(ev) = ev {
                    self.message_delta(ev);
                }
            }
            EventType::MessageStop => return Ok(Flow::Stop),
            EventType::Error => return Err(self.error(&chunk, data)),
            EventType::ContentBlockStop | EventType::Ping | EventType::Unknown => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(self, stopped: bool) -> Result<ModelResponse, LlmError> {
        if !stopped {
            let nothing = self.out.text.trim().is_empty()
                && self
                    .blocks
                    .values()
                    .all(|block| matches!(block, Block::Text | Block::Other));
            if nothing {
                // Nothing came: an empty reply, whether or not the stream was whole.
                return Err(super::error::empty_reply(NAME));
            }
            return Err(stream::interrupted(NAME, "message_stop"));
        }
        let Parser {
            mut out, blocks, stop, ..
        } = self;
        for (_, block) in blocks {
            match block {
                Block::ToolUse(call) => out.tool_calls.push(call),
                Block::Thinking { text, signature } => out.thinking.push(ContentBlock::Thinking { text, signature }),
                Block::Text | Block::Other => {}
            }
        }
        out.stop_reason = stop.unwrap_or(if out.tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
