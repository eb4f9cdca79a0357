//! OpenAI chat completions (and the many servers that copy it: vLLM, Ollama, LM Studio …).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::endpoint::{HttpProvider, KeyHeader, WireFormat};
use super::error::LlmError;
use super::http::{self, ErrorInfo};
use super::stream::{self, Flow, StreamParser};
use super::types::{
    Delta, Message, ModelRequest, ModelResponse, Role, StopReason, ToolCall, ToolChoice, ToolSpec, Usage,
};
use super::wire::{Json, List, WireError};
use crate::domain::ContentBlock;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const NAME: &str = "openai";

/// An OpenAI-compatible provider; its `base_url` includes the version path, e.g.
/// `https://api.openai.com/v1`.
pub type OpenAi = HttpProvider<ChatCompletions>;

/// The chat completions wire format.
pub struct ChatCompletions;

impl WireFormat for ChatCompletions {
    const NAME: &'static str = NAME;
    const PATH: &'static str = "/chat/completions";
    const KEY_HEADER: KeyHeader = KeyHeader::Bearer;

    fn body(req: &ModelRequest) -> impl Serialize + '_ {
        let mut messages = Vec::new();
        if !req.system.is_empty() {
            messages.push(ChatMessage::System { content: &req.system });
        }
        for m in &req.messages {
            map_message(m, &mut messages);
        }
        Request {
            model: &req.model,
            messages,
            stream: true,
            stream_options: StreamOptions { include_usage: true },
            temperature: req.temperature,
            max_tokens: req.max_tokens,
            tool_choice: tool_choice(req),
            tools: req.tools.iter().map(tool).collect(),
        }
    }

    fn parser<'k>(model: &str, api_key: Option<&'k str>) -> impl StreamParser + 'k {
        Parser::new(model, api_key)
    }
}

/// The request body for `POST {base}/chat/completions`.
#[derive(Serialize)]
struct Request<'r> {
    model: &'r str,
    messages: Vec<ChatMessage<'r>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'r>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'r>>,
}

#[derive(Serialize)]
struct StreamOptions {
    /// The last chunk then carries the usage.
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage<'r> {
    System {
        content: &'r str,
    },
    User {
        content: String,
    },
    Tool {
        tool_call_id: &'r str,
        content: &'r str,
    },
    Assistant {
        /// An empty string, never null: some servers (llama-cpp-python) refuse null content.
        content: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'r>>,
    },
}

#[derive(Serialize)]
struct WireToolCall<'r> {
    id: &'r str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CalledFunction<'r>,
}

#[derive(Serialize)]
struct CalledFunction<'r> {
    name: &'r str,
    /// The arguments as JSON text.
    arguments: String,
}

/// `"required"`, `"none"`, or `{"type": "function", "function": {"name": ..}}`.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'r> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: FunctionName<'r>,
    },
}

#[derive(Serialize)]
struct FunctionName<'r> {
    name: &'r str,
}

#[derive(Serialize)]
struct Tool<'r> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'r>,
}

#[derive(Serialize)]
struct Function<'r> {
    name: &'r str,
    description: &'r str,
    parameters: &'r RawValue,
}

/// Sent only with tools, and never for `Auto` (the default).
fn tool_choice(req: &ModelRequest) -> Option<WireToolChoice<'_>> {
    if req.tools.is_empty() {
        return None;
    }
    match &req.tool_choice {
        ToolChoice::Auto => None,
        ToolChoice::Required => Some(WireToolChoice::Mode("required")),
        ToolChoice::None => Some(WireToolChoice::Mode("none")),
        ToolChoice::Tool(name) => Some(WireToolChoice::Function {
            kind: "function",
            function: FunctionName { name },
        }),
    }
}

fn tool(t: &ToolSpec) -> Tool<'_> {
    Tool {
        kind: "function",
        function: Function {
            name: &t.name,
            description: &t.description,
            parameters: &t.input_schema,
        },
    }
}

fn map_message<'r>(m: &'r Message, out: &mut Vec<ChatMessage<'r>>) {
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
                    out.push(ChatMessage::Tool {
                        tool_call_id: tool_use_id,
                        content: output,
                    });
                }
            }
            if !text.is_empty() {
                out.push(ChatMessage::User { content: text });
            }
        }
        Role::Assistant => {
            let tool_calls: Vec<WireToolCall<'_>> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, name, input } => Some(WireToolCall {
                        id,
                        kind: "function",
                        function: CalledFunction {
                            name,
                            arguments: input.to_string(),
                        },
                    }),
                    _ => None,
                })
                .collect();
            // Thinking blocks are dropped: chat completions has no way to send them back.
            if text.is_empty() && tool_calls.is_empty() {
                return;
            }
            out.push(ChatMessage::Assistant {
                content: text,
                tool_calls,
            });
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
        // An object without a count (`{}`, or zeros: no request is free of input) reports nothing.
        let counted = |u: &&WireUsage<'_>| {
            [u.prompt_tokens.u64(), u.completion_tokens.u64()]
                .iter()
                .any(|n| n.unwrap_or(0) > 0)
        };
        if let Some(u) = chunk.usage.obj().filter(counted) {
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
            if out.text.trim().is_empty() && out.thinking.is_empty() && calls.is_empty() {
                // Nothing came: an empty reply, whether or not the stream was whole.
                return Err(super::error::empty_reply(NAME));
            }
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

#[cfg(test)]
mod tests;
