//! OpenAI chat completions (and the many servers that copy it: vLLM, Ollama, LM Studio …).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::ACCEPT;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::http::{self, ErrorInfo};
use super::named::expand_env;
use super::stream::{self, Flow, StreamParser};
use super::wire::{Json, List, WireError};
use super::{
    ContentBlock, Delta, LlmError, Message, ModelRequest, ModelResponse, Provider, RequestBody, Role, StopReason,
    ToolCall, ToolChoice, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const NAME: &str = "openai";

#[derive(Clone)]
pub struct OpenAi {
    base_url: String,
    /// A key, or a `${env:NAME}` template expanded per request.
    api_key: Option<String>,
    client: reqwest::Client,
    extras: http::Extras,
}

impl OpenAi {
    /// `base_url` includes the version path, e.g. `https://api.openai.com/v1`.
    pub fn new(base_url: String, api_key: Option<String>) -> Self {
        OpenAi {
            base_url: http::trim_base_url(&base_url),
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
    if !req.tools.is_empty() {
        let choice = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(json!("required")),
            ToolChoice::None => Some(json!("none")),
            ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
        };
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
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
            // An empty string, never null: some servers (llama-cpp-python) refuse null content.
            msg.insert("content".into(), json!(text));
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

/// One `chat.completion.chunk` event. Every field is optional; a chunk that is not a JSON object
/// carries nothing.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Chunk<'a> {
    #[serde(borrow)]
    model: Json<'a>,
    #[serde(borrow)]
    choices: List<Json<'a, Choice<'a>>>,
    #[serde(borrow)]
    usage: Json<'a, WireUsage<'a>>,
    /// `{"error": {..}}` (or a bare string) in place of a chunk: the request failed mid-stream.
    #[serde(borrow)]
    error: Json<'a, WireError<'a>>,
    /// Read only for an error without a message of its own.
    #[serde(borrow)]
    message: Json<'a>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Choice<'a> {
    #[serde(borrow)]
    index: Json<'a>,
    #[serde(borrow)]
    delta: Json<'a, ChoiceDelta<'a>>,
    #[serde(borrow)]
    finish_reason: Json<'a>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ChoiceDelta<'a> {
    #[serde(borrow)]
    content: Json<'a>,
    /// Reasoning text: `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama).
    #[serde(borrow)]
    reasoning_content: Json<'a>,
    #[serde(borrow)]
    reasoning: Json<'a>,
    #[serde(borrow)]
    tool_calls: List<Json<'a, ToolCallDelta<'a>>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ToolCallDelta<'a> {
    #[serde(borrow)]
    index: Json<'a>,
    #[serde(borrow)]
    id: Json<'a>,
    #[serde(borrow)]
    function: Json<'a, FunctionDelta<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct FunctionDelta<'a> {
    #[serde(borrow)]
    name: Json<'a>,
    /// A fragment of the JSON text; some servers send the whole arguments object in one go.
    #[serde(borrow)]
    arguments: Json<'a, Value>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct WireUsage<'a> {
    #[serde(borrow)]
    prompt_tokens: Json<'a>,
    #[serde(borrow)]
    completion_tokens: Json<'a>,
    #[serde(borrow)]
    prompt_tokens_details: Json<'a, PromptTokensDetails<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct PromptTokensDetails<'a> {
    #[serde(borrow)]
    cached_tokens: Json<'a>,
}

/// Accumulates the chunks of one response.
struct Parser<'k> {
    api_key: Option<&'k str>,
    out: ModelResponse,
    /// By the index the server gives each call.
    calls: BTreeMap<u64, ToolCall>,
    finish: Option<StopReason>,
}

impl<'k> Parser<'k> {
    fn new(model: &str, api_key: Option<&'k str>) -> Self {
        Parser {
            api_key,
            out: ModelResponse {
                model: model.to_string(),
                ..Default::default()
            },
            calls: BTreeMap::new(),
            finish: None,
        }
    }

    fn on_delta(&mut self, delta: &ChoiceDelta<'_>, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        if let Some(t) = delta.content.str().filter(|t| !t.is_empty()) {
            self.out.text.push_str(t);
            on_delta(Delta::Text(t.to_string()));
        }
        let reasoning = delta.reasoning_content.str().or_else(|| delta.reasoning.str());
        if let Some(t) = reasoning.filter(|t| !t.is_empty()) {
            on_delta(Delta::Thinking(t.to_string()));
        }
        for (pos, tc) in delta.tool_calls.0.iter().enumerate() {
            let tc = tc.obj();
            let index = tc.and_then(|tc| tc.index.u64()).unwrap_or(pos as u64);
            let entry = self.calls.entry(index).or_insert_with(|| ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            let Some(tc) = tc else { continue };
            if let Some(id) = tc.id.str().filter(|id| !id.is_empty()) {
                entry.id = id.to_string();
            }
            let Some(func) = tc.function.obj() else { continue };
            if let Some(name) = func.name.str() {
                if entry.name.is_empty() {
                    entry.name = name.to_string();
                }
            }
            let fragment = match &func.arguments {
                Json::Str(a) => a.to_string(),
                Json::Obj(a) => a.to_string(),
                _ => continue,
            };
            if fragment.is_empty() {
                continue;
            }
            entry.arguments.push_str(&fragment);
            let call_id = if entry.id.is_empty() {
                // As `finish` names a call the server gave no id.
                format!("call_{index}")
            } else {
                entry.id.clone()
            };
            on_delta(Delta::ToolCall {
                call_id,
                tool_name: entry.name.clone(),
                delta: fragment,
            });
        }
    }
}

impl StreamParser for Parser<'_> {
    const PROVIDER: &'static str = NAME;
    const END_MARKER: Option<&'static str> = Some("[DONE]");
    type Chunk<'a> = Json<'a, Chunk<'a>>;

    fn on_chunk(
        &mut self,
        _event: Option<&str>,
        chunk: Json<'_, Chunk<'_>>,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, LlmError> {
        let Json::Obj(chunk) = chunk else {
            return Ok(Flow::Continue);
        };
        if chunk.error.is_set() {
            let info = ErrorInfo::from_wire(&chunk.error, chunk.message.str());
            return Err(http::stream_error(NAME, info, data, self.api_key));
        }
        if let Some(m) = chunk.model.str().filter(|m| !m.is_empty()) {
            if self.out.model != m {
                self.out.model = m.to_string();
            }
        }
        if let Some(u) = chunk.usage.obj() {
            self.out.usage_reported = true;
            self.out.usage = Usage {
                input_tokens: u.prompt_tokens.u64().unwrap_or(0),
                output_tokens: u.completion_tokens.u64().unwrap_or(0),
                cache_read_tokens: u
                    .prompt_tokens_details
                    .obj()
                    .and_then(|d| d.cached_tokens.u64())
                    .unwrap_or(0),
                cache_creation_tokens: 0,
            };
        }
        // Only the first choice is ours: n is never set above 1.
        for choice in chunk.choices.0.iter().filter_map(Json::obj) {
            if choice.index.u64().unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta.obj() {
                self.on_delta(delta, on_delta);
            }
            if let Some(f) = choice.finish_reason.str() {
                self.finish = Some(stop_reason(f));
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(self, stopped: bool) -> Result<ModelResponse, LlmError> {
        let Parser {
            mut out, calls, finish, ..
        } = self;
        if finish.is_none() {
            // Without a finish_reason the reply is not known to be whole, even after [DONE]:
            // llama-cpp-python ends a request it interrupts with [DONE] alone.
            let what = if stopped {
                "a finish_reason ([DONE] came without one)"
            } else {
                "a finish_reason or [DONE]"
            };
            return Err(stream::interrupted(NAME, what));
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

#[async_trait::async_trait]
impl Provider for OpenAi {
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
            .post(format!("{}/chat/completions", self.base_url))
            .header(ACCEPT, "text/event-stream")
            .json(&request_body(req));
        let key = self.api_key.as_deref().map(expand_env);
        if let Some(key) = &key {
            rb = rb.bearer_auth(key);
        }
        let rb = self.extras.apply(rb);
        let key = key.as_deref();
        stream::run(rb, idle_timeout, key, Parser::new(&req.model, key), on_delta).await
    }
}

#[cfg(test)]
mod tests;
