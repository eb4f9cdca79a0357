//! Anthropic Messages API.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::ACCEPT;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::http::{self, ErrorInfo};
use super::named::expand_env;
use super::stream::{self, Flow, StreamParser};
use super::wire::{self, Json, Tag, WireError};
use super::{
    ContentBlock, Delta, LlmError, ModelRequest, ModelResponse, Provider, RequestBody, Role, StopReason, ToolCall,
    ToolChoice,
};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
/// The API requires max_tokens; used when the request leaves it open.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

const NAME: &str = "anthropic";

#[derive(Clone)]
pub struct Anthropic {
    base_url: String,
    /// A key, or a `${env:NAME}` template expanded per request.
    api_key: Option<String>,
    client: reqwest::Client,
    extras: http::Extras,
}

impl Anthropic {
    /// `base_url` without the version path, e.g. `https://api.anthropic.com`.
    pub fn new(base_url: String, api_key: Option<String>) -> Self {
        let mut base = http::trim_base_url(&base_url);
        // A base URL copied with its "/v1" would otherwise yield ".../v1/v1/messages".
        if let Some(stripped) = base.strip_suffix("/v1") {
            base = stripped.to_string();
        }
        Anthropic {
            base_url: base,
            api_key: api_key.filter(|k| !k.is_empty()),
            client: http::client(),
            extras: http::Extras::default(),
        }
    }

    /// Extra headers (templates) and an overall timeout for each request.
    pub fn with_extras(mut self, headers: Vec<(String, String)>, timeout: Option<Duration>) -> Self {
        self.extras = http::Extras {
            headers,
            timeout,
            ..self.extras
        };
        self
    }

    /// At most `n` model requests in flight to this provider across every process; None: no limit.
    pub fn with_max_concurrent(mut self, n: Option<u32>) -> Self {
        self.extras.max_concurrent = n;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn has_key(&self) -> bool {
        self.api_key.is_some()
    }
}

fn block_json(b: &ContentBlock) -> Option<Value> {
    Some(match b {
        ContentBlock::Text { text } if text.is_empty() => return None, // the API rejects empty text blocks
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse { id, name, input } => {
            // The API wants an object; repaired arguments may have come back as something else.
            let input = if input.is_object() { input.clone() } else { json!({}) };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            output,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": output,
            "is_error": is_error,
        }),
        // Sent back verbatim; without its signature the API would reject the whole request.
        ContentBlock::Thinking {
            text,
            signature: Some(sig),
        } => json!({"type": "thinking", "thinking": text, "signature": sig}),
        ContentBlock::Thinking { signature: None, .. } => return None,
    })
}

/// The request body for `POST {base}/v1/messages`.
fn request_body(req: &ModelRequest) -> RequestBody<Tool<'_>> {
    // Consecutive messages of one role are merged: the API wants strictly alternating turns, and
    // all tool results answering one assistant turn must sit in the next user turn.
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let blocks: Vec<Value> = m.content.iter().filter_map(block_json).collect();
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, content)) if *role == m.role => content.extend(blocks),
            _ => turns.push((m.role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut content)| {
            if role == Role::User {
                // tool_result blocks must come first in a user turn; stable sort keeps order.
                content.sort_by_key(|b| b.get("type").and_then(|t| t.as_str()) != Some("tool_result"));
            }
            json!({
                "role": match role { Role::User => "user", Role::Assistant => "assistant" },
                "content": content,
            })
        })
        .collect();

    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    if !req.system.is_empty() {
        body.insert("system".into(), json!(req.system));
    }
    body.insert("messages".into(), Value::Array(messages));
    let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if let Some(budget) = req.thinking_budget {
        // The API wants room for the answer beyond the thinking budget.
        max_tokens = max_tokens.max(budget.saturating_add(1024));
        body.insert("thinking".into(), json!({ "type": "enabled", "budget_tokens": budget }));
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    // Thinking requires the default temperature.
    if let Some(t) = req.temperature.filter(|_| req.thinking_budget.is_none()) {
        body.insert("temperature".into(), json!(t));
    }
    if !req.tools.is_empty() {
        let choice = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(json!({"type": "any"})),
            ToolChoice::None => Some(json!({"type": "none"})),
            ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
        };
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    }
    let tools = req
        .tools
        .iter()
        .map(|t| Tool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
        })
        .collect();
    RequestBody { fields: body, tools }
}

#[derive(serde::Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::value::RawValue,
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
            self.out.usage_reported |= u.is_some();
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
            self.out.usage_reported = true;
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

#[async_trait::async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
    }

    fn max_concurrent(&self) -> Option<u32> {
        self.extras.max_concurrent
    }

    async fn stream(
        &self,
        req: &ModelRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
        idle_timeout: Duration,
    ) -> Result<ModelResponse, LlmError> {
        let mut rb = self
            .client
            .post(format!("{}/v1/messages", self.base_url))
            .header("anthropic-version", API_VERSION)
            .header(ACCEPT, "text/event-stream")
            .json(&request_body(req));
        let key = self.api_key.as_deref().map(expand_env);
        if let Some(key) = &key {
            rb = rb.header("x-api-key", key.as_ref());
        }
        let rb = self.extras.apply(rb);
        let key = key.as_deref();
        stream::run(rb, idle_timeout, key, Parser::new(&req.model, key), on_delta).await
    }
}

#[cfg(test)]
mod tests;
