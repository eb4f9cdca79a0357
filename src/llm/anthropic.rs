//! Anthropic Messages API.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::ACCEPT;
use serde_json::{json, Map, Value};

use super::http::{self, EventStream};
use super::{
    ContentBlock, Delta, LlmError, ModelRequest, ModelResponse, Provider, RequestBody, Role, StopReason, ToolCall,
};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
/// The API requires max_tokens; used when the request leaves it open.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

const NAME: &str = "anthropic";

pub struct Anthropic {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
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
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
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

enum Block {
    Text,
    ToolUse(ToolCall),
    Thinking { text: String, signature: Option<String> },
    Other,
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64())
}

#[async_trait::async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
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
        if let Some(key) = &self.api_key {
            rb = rb.header("x-api-key", key);
        }
        let key = self.api_key.as_deref();
        let resp = http::send(NAME, rb, idle_timeout, key).await?;
        let mut events = EventStream::new(NAME, resp, idle_timeout);

        let mut out = ModelResponse {
            model: req.model.clone(),
            ..Default::default()
        };
        let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
        let mut stop: Option<StopReason> = None;
        let mut finished = false;

        while let Some(ev) = events.next().await? {
            let data = ev.data.trim();
            if data.is_empty() {
                continue;
            }
            let v = http::parse_json(NAME, data)?;
            let etype = v
                .get("type")
                .and_then(|t| t.as_str())
                .or(ev.event.as_deref())
                .unwrap_or("");
            match etype {
                "message_start" => {
                    let msg = v.get("message").unwrap_or(&Value::Null);
                    if let Some(m) = msg.get("model").and_then(|m| m.as_str()) {
                        out.model = m.to_string();
                    }
                    if let Some(u) = msg.get("usage") {
                        out.usage.input_tokens = u64_of(u, "input_tokens").unwrap_or(0);
                        out.usage.cache_read_tokens = u64_of(u, "cache_read_input_tokens").unwrap_or(0);
                        out.usage.cache_creation_tokens = u64_of(u, "cache_creation_input_tokens").unwrap_or(0);
                        out.usage.output_tokens = u64_of(u, "output_tokens").unwrap_or(0);
                    }
                }
                "content_block_start" => {
                    let index = u64_of(&v, "index").unwrap_or(0);
                    let cb = v.get("content_block").unwrap_or(&Value::Null);
                    let s = |k: &str| cb.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
                    let block = match cb.get("type").and_then(|t| t.as_str()) {
                        Some("text") => {
                            let t = s("text");
                            if !t.is_empty() {
                                out.text.push_str(&t);
                                on_delta(Delta::Text(t));
                            }
                            Block::Text
                        }
                        Some("tool_use") => Block::ToolUse(ToolCall {
                            id: s("id"),
                            name: s("name"),
                            // The start event carries `input: {}`; the real input streams as
                            // input_json_delta fragments.
                            arguments: String::new(),
                        }),
                        Some("thinking") => {
                            let t = s("thinking");
                            if !t.is_empty() {
                                on_delta(Delta::Thinking(t.clone()));
                            }
                            Block::Thinking {
                                text: t,
                                signature: cb
                                    .get("signature")
                                    .and_then(|x| x.as_str())
                                    .filter(|x| !x.is_empty())
                                    .map(String::from),
                            }
                        }
                        _ => Block::Other,
                    };
                    blocks.insert(index, block);
                }
                "content_block_delta" => {
                    let index = u64_of(&v, "index").unwrap_or(0);
                    let d = v.get("delta").unwrap_or(&Value::Null);
                    let s = |k: &str| d.get(k).and_then(|x| x.as_str()).unwrap_or("");
                    match (d.get("type").and_then(|t| t.as_str()), blocks.get_mut(&index)) {
                        (Some("text_delta"), _) => {
                            let t = s("text");
                            if !t.is_empty() {
                                out.text.push_str(t);
                                on_delta(Delta::Text(t.to_string()));
                            }
                        }
                        (Some("input_json_delta"), Some(Block::ToolUse(call))) => {
                            call.arguments.push_str(s("partial_json"));
                        }
                        (Some("thinking_delta"), Some(Block::Thinking { text, .. })) => {
                            let t = s("thinking");
                            if !t.is_empty() {
                                text.push_str(t);
                                on_delta(Delta::Thinking(t.to_string()));
                            }
                        }
                        (Some("signature_delta"), Some(Block::Thinking { signature, .. })) => {
                            let sig = s("signature");
                            match signature {
                                Some(existing) => existing.push_str(sig),
                                None => *signature = Some(sig.to_string()),
                            }
                        }
                        _ => {}
                    }
                }
                "message_delta" => {
                    if let Some(r) = v
                        .get("delta")
                        .and_then(|d| d.get("stop_reason"))
                        .and_then(|r| r.as_str())
                    {
                        stop = Some(stop_reason(r));
                    }
                    if let Some(u) = v.get("usage") {
                        // Cumulative counts: the last one is the total.
                        if let Some(n) = u64_of(u, "output_tokens") {
                            out.usage.output_tokens = n;
                        }
                        if let Some(n) = u64_of(u, "input_tokens") {
                            out.usage.input_tokens = n;
                        }
                        if let Some(n) = u64_of(u, "cache_read_input_tokens") {
                            out.usage.cache_read_tokens = n;
                        }
                        if let Some(n) = u64_of(u, "cache_creation_input_tokens") {
                            out.usage.cache_creation_tokens = n;
                        }
                    }
                }
                "message_stop" => {
                    finished = true;
                    events.drain().await;
                    break;
                }
                "error" => return Err(http::classify_stream_error(NAME, &v, key)),
                _ => {} // ping, content_block_stop and future event types
            }
        }

        if !finished {
            return Err(http::interrupted(NAME, "message_stop"));
        }
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
