//! OpenAI chat completions (and the many servers that copy it: vLLM, Ollama, LM Studio …).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::ACCEPT;
use serde_json::{json, Map, Value};

use super::http::{self, EventStream};
use super::{
    ContentBlock, Delta, LlmError, Message, ModelRequest, ModelResponse, Provider, RequestBody, Role, StopReason,
    ToolCall, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const NAME: &str = "openai";

pub struct OpenAi {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
}

impl OpenAi {
    /// `base_url` includes the version path, e.g. `https://api.openai.com/v1`.
    pub fn new(base_url: String, api_key: Option<String>) -> Self {
        OpenAi {
            base_url: http::trim_base_url(&base_url),
            api_key: api_key.filter(|k| !k.is_empty()),
            client: http::client(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

/// The request body for `POST {base}/chat/completions`.
fn request_body(req: &ModelRequest) -> RequestBody<Tool<'_>> {
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        map_message(m, &mut messages);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(n) = req.max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    let tools = req
        .tools
        .iter()
        .map(|t| Tool {
            kind: "function",
            function: Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
        })
        .collect();
    RequestBody { fields: body, tools }
}

#[derive(serde::Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(serde::Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::value::RawValue,
}

fn map_message(m: &Message, out: &mut Vec<Value>) {
    let text: Vec<&str> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let text = text.join("\n\n");
    match m.role {
        Role::User => {
            // Tool results must directly follow the assistant message that made the calls, so
            // they go before any text of the same user turn.
            for b in &m.content {
                if let ContentBlock::ToolResult {
                    tool_use_id, output, ..
                } = b
                {
                    out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": output}));
                }
            }
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        Role::Assistant => {
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, name, input } => Some(json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": input.to_string()},
                    })),
                    _ => None,
                })
                .collect();
            // Thinking blocks are dropped: chat completions has no way to send them back.
            if text.is_empty() && calls.is_empty() {
                return;
            }
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            msg.insert(
                "content".into(),
                if text.is_empty() { Value::Null } else { json!(text) },
            );
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
        }
    }
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_u64()
}

#[async_trait::async_trait]
impl Provider for OpenAi {
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
            .post(format!("{}/chat/completions", self.base_url))
            .header(ACCEPT, "text/event-stream")
            .json(&request_body(req));
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        let key = self.api_key.as_deref();
        let resp = http::send(NAME, rb, idle_timeout, key).await?;
        let mut events = EventStream::new(NAME, resp, idle_timeout);

        let mut out = ModelResponse {
            model: req.model.clone(),
            ..Default::default()
        };
        let mut calls: BTreeMap<u64, ToolCall> = BTreeMap::new();
        let mut finish: Option<StopReason> = None;
        let mut done = false;

        while let Some(ev) = events.next().await? {
            let data = ev.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                done = true;
                events.drain().await;
                break;
            }
            let v = http::parse_json(NAME, data)?;
            if v.get("error").is_some_and(|e| !e.is_null()) {
                return Err(http::classify_stream_error(NAME, &v, key));
            }
            if let Some(m) = v.get("model").and_then(|m| m.as_str()) {
                if !m.is_empty() {
                    out.model = m.to_string();
                }
            }
            if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                out.usage = Usage {
                    input_tokens: u64_at(u, &["prompt_tokens"]).unwrap_or(0),
                    output_tokens: u64_at(u, &["completion_tokens"]).unwrap_or(0),
                    cache_read_tokens: u64_at(u, &["prompt_tokens_details", "cached_tokens"]).unwrap_or(0),
                    cache_creation_tokens: 0,
                };
            }
            let Some(choices) = v.get("choices").and_then(|c| c.as_array()) else {
                continue;
            };
            for choice in choices {
                if choice.get("index").and_then(|i| i.as_u64()).unwrap_or(0) != 0 {
                    continue;
                }
                if let Some(delta) = choice.get("delta") {
                    if let Some(t) = delta.get("content").and_then(|c| c.as_str()) {
                        if !t.is_empty() {
                            out.text.push_str(t);
                            on_delta(Delta::Text(t.to_string()));
                        }
                    }
                    let reasoning = delta
                        .get("reasoning_content")
                        .and_then(|c| c.as_str())
                        .or_else(|| delta.get("reasoning").and_then(|c| c.as_str()));
                    if let Some(t) = reasoning {
                        if !t.is_empty() {
                            on_delta(Delta::Thinking(t.to_string()));
                        }
                    }
                    if let Some(tcs) = delta.get("tool_calls").and_then(|c| c.as_array()) {
                        for (pos, tc) in tcs.iter().enumerate() {
                            let index = tc.get("index").and_then(|i| i.as_u64()).unwrap_or(pos as u64);
                            let entry = calls.entry(index).or_insert_with(|| ToolCall {
                                id: String::new(),
                                name: String::new(),
                                arguments: String::new(),
                            });
                            if let Some(id) = tc.get("id").and_then(|i| i.as_str()) {
                                if !id.is_empty() {
                                    entry.id = id.to_string();
                                }
                            }
                            let func = tc.get("function");
                            if let Some(name) = func.and_then(|f| f.get("name")).and_then(|n| n.as_str()) {
                                if entry.name.is_empty() {
                                    entry.name = name.to_string();
                                }
                            }
                            match func.and_then(|f| f.get("arguments")) {
                                Some(Value::String(a)) => entry.arguments.push_str(a),
                                // Some servers send the arguments as an object in one go.
                                Some(a @ Value::Object(_)) => entry.arguments.push_str(&a.to_string()),
                                _ => {}
                            }
                        }
                    }
                }
                if let Some(f) = choice.get("finish_reason").and_then(|f| f.as_str()) {
                    finish = Some(stop_reason(f));
                }
            }
        }

        if !done && finish.is_none() {
            return Err(http::interrupted(NAME, "a finish_reason or [DONE]"));
        }
        out.tool_calls = calls
            .into_iter()
            .map(|(index, mut c)| {
                if c.id.is_empty() {
                    // Some local servers omit ids; the transcript still needs them to pair results.
                    c.id = format!("call_{index}");
                }
                c
            })
            .collect();
        out.stop_reason = match finish {
            // Some OpenAI-compatible servers report "stop" even when they called tools.
            Some(StopReason::EndTurn) | None if !out.tool_calls.is_empty() => StopReason::ToolUse,
            Some(r) => r,
            None => StopReason::EndTurn,
        };
        Ok(out)
    }
}
