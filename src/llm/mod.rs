//! Model providers behind one streaming interface.
//!
//! Each provider speaks its own wire format (OpenAI chat completions, Anthropic Messages) and
//! normalises the stream into a [`ModelResponse`]; failures are normalised into [`LlmError`]
//! kinds so the caller can decide on retries without knowing which provider it talked to.

pub mod anthropic;
pub mod grammar_safe;
mod http;
pub mod named;
pub mod openai;
mod sse;
mod stream;
mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

pub use crate::domain::ContentBlock;

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

/// A provider's request body: its fields, then its tools in the provider's shape, serialised from
/// the shared schemas instead of being copied into the JSON tree first.
#[derive(serde::Serialize)]
struct RequestBody<T> {
    #[serde(flatten)]
    fields: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<T>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlmErrorKind {
    RateLimited,
    ServerError,
    ConnectionFailed,
    StreamInterrupted,
    StreamStalled,
    AuthenticationFailed,
    PermissionDenied,
    ModelNotFound,
    ContextWindowExceeded,
    ResponseMalformed,
    BadRequest,
    ProviderUnconfigured,
    /// A 200 answer with no events at all, or a reply with nothing in it.
    EmptyResponse,
}

impl LlmErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LlmErrorKind::RateLimited => "rate_limited",
            LlmErrorKind::ServerError => "server_error",
            LlmErrorKind::ConnectionFailed => "connection_failed",
            LlmErrorKind::StreamInterrupted => "stream_interrupted",
            LlmErrorKind::StreamStalled => "stream_stalled",
            LlmErrorKind::AuthenticationFailed => "authentication_failed",
            LlmErrorKind::PermissionDenied => "permission_denied",
            LlmErrorKind::ModelNotFound => "model_not_found",
            LlmErrorKind::ContextWindowExceeded => "context_window_exceeded",
            LlmErrorKind::ResponseMalformed => "response_malformed",
            LlmErrorKind::BadRequest => "bad_request",
            LlmErrorKind::ProviderUnconfigured => "provider_unconfigured",
            LlmErrorKind::EmptyResponse => "empty_response",
        }
    }

    /// Transient failures: the same request may succeed when sent again later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            LlmErrorKind::RateLimited
                | LlmErrorKind::ServerError
                | LlmErrorKind::ConnectionFailed
                | LlmErrorKind::StreamInterrupted
                | LlmErrorKind::StreamStalled
                | LlmErrorKind::EmptyResponse
        )
    }
}

impl fmt::Display for LlmErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct LlmError {
    pub kind: LlmErrorKind,
    pub message: String,
    pub retry_after: Option<Duration>,
    pub status: Option<u16>,
    /// The stream ended cleanly but without the model's finish reason: the server stopped
    /// generating (llama-cpp-python does so when another request arrives). What was shown is
    /// not an answer, so the request is sent again even after output (see `agent::model_call`).
    pub unfinished: bool,
}

impl LlmError {
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        LlmError {
            kind,
            message: message.into(),
            retry_after: None,
            status: None,
            unfinished: false,
        }
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for LlmError {}

#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// "openai" | "anthropic"
    fn name(&self) -> &'static str;

    /// Model requests in flight to this provider at most, across every process of the desk
    /// (`max_concurrent`); None: no limit.
    fn max_concurrent(&self) -> Option<u32> {
        None
    }

    /// Streams one model response. Each text, thinking and tool-call argument delta is passed to
    /// `on_delta` as it arrives.
    /// A stream silent for `idle_timeout` between chunks (or before the first) fails with StreamStalled.
    /// Dropping the future aborts the HTTP request (that is how cancel works).
    async fn stream(
        &self,
        req: &ModelRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
        idle_timeout: Duration,
    ) -> Result<ModelResponse, LlmError>;
}

/// A complete reply with nothing in it: no text, no thinking, no tool call.
pub fn empty_reply(provider: &str) -> LlmError {
    LlmError::new(
        LlmErrorKind::EmptyResponse,
        format!("{provider}: the model's reply was empty (no text, no thinking, no tool call)"),
    )
}

/// The start of `s`, at most `max` bytes (on a char boundary), for log lines.
pub fn excerpt(s: &str, max: usize) -> String {
    http::truncate(s, max)
}

const BACKOFF_CAP: Duration = Duration::from_secs(32);

/// base·2^(attempt−1) plus 0–25 % jitter, capped at 32 s with the jitter included; a Retry-After
/// hint wins over cap and jitter (the provider knows when its limit resets). `attempt` is 1-based.
pub fn backoff_delay(attempt: u32, base: Duration, retry_after: Option<Duration>) -> Duration {
    if let Some(hint) = retry_after {
        return hint;
    }
    let exp = attempt.max(1) - 1;
    let factor = 1u32.checked_shl(exp.min(31)).unwrap_or(u32::MAX);
    let delay = base.saturating_mul(factor).min(BACKOFF_CAP);
    let jitter: f64 = rand::rng().random_range(0.0..=0.25);
    (delay + delay.mul_f64(jitter)).min(BACKOFF_CAP)
}

/// Known context windows: claude-* 200_000, gpt-4o*/gpt-4o-mini 128_000, gpt-4.1* 1_047_576,
/// gpt-5* 400_000, o1/o3/o4* 200_000, mistral-large* 131_072; unknown None.
pub fn known_context_window(model: &str) -> Option<u32> {
    // Routers and local servers often prefix the vendor ("openai/gpt-4o"); the window is the
    // model's own.
    let m = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let m = m.as_str();
    if m.starts_with("claude-") {
        Some(200_000)
    } else if m.starts_with("gpt-4o") {
        Some(128_000)
    } else if m.starts_with("gpt-4.1") {
        Some(1_047_576)
    } else if m.starts_with("gpt-5") {
        Some(400_000)
    } else if ["o1", "o3", "o4"]
        .iter()
        .any(|p| m == *p || m.starts_with(&format!("{p}-")))
    {
        Some(200_000)
    } else if m.starts_with("mistral-large") {
        Some(131_072)
    } else {
        None
    }
}

/// The configured providers.
#[derive(Clone, Default)]
pub struct Providers {
    openai: Option<Arc<openai::OpenAi>>,
    anthropic: Option<Arc<anthropic::Anthropic>>,
    /// Named providers built from their stored definitions, kept while the definition is unchanged
    /// so their connections are reused.
    named: named::Cache,
    /// The built-in providers' `max_concurrent` (openai, anthropic).
    limits: (Option<u32>, Option<u32>),
}

impl fmt::Debug for Providers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Deliberately terse: the providers hold API keys.
        f.debug_struct("Providers")
            .field("openai", &self.openai.is_some())
            .field("anthropic", &self.anthropic.is_some())
            .finish()
    }
}

impl Providers {
    /// The built-in providers the configuration sets up: `openai` (base URL default
    /// https://api.openai.com/v1) and `anthropic` (https://api.anthropic.com), each when its key
    /// or its base URL is set (local servers such as vLLM or Ollama need no key).
    pub fn from_config(config: &crate::config::Config) -> Self {
        let openai = config.openai.is_configured().then(|| {
            let base = config.openai.base_url.clone();
            openai::OpenAi::new(
                base.unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_string()),
                config.openai.api_key.clone(),
            )
        });
        let anthropic = config.anthropic.is_configured().then(|| {
            let base = config.anthropic.base_url.clone();
            anthropic::Anthropic::new(
                base.unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_string()),
                config.anthropic.api_key.clone(),
            )
        });
        Providers::new(openai, anthropic)
    }

    pub fn new(openai: Option<openai::OpenAi>, anthropic: Option<anthropic::Anthropic>) -> Self {
        Providers {
            openai: openai.map(Arc::new),
            anthropic: anthropic.map(Arc::new),
            named: named::Cache::default(),
            limits: (None, None),
        }
    }

    /// The provider a stored definition describes (built once per definition).
    pub fn named(&self, name: &str, config: &named::ProviderConfig) -> Arc<dyn Provider> {
        self.named.get(name, config)
    }

    /// Limits the built-in providers' requests in flight across every process
    /// (`AGENTDESK_{OPENAI,ANTHROPIC}_MAX_CONCURRENT`); None: no limit.
    pub fn with_max_concurrent(mut self, openai: Option<u32>, anthropic: Option<u32>) -> Self {
        self.openai = self
            .openai
            .map(|p| Arc::new(Arc::unwrap_or_clone(p).with_max_concurrent(openai)));
        self.anthropic = self
            .anthropic
            .map(|p| Arc::new(Arc::unwrap_or_clone(p).with_max_concurrent(anthropic)));
        self.limits = (openai, anthropic);
        self
    }

    /// A built-in provider's `max_concurrent`, whether or not it is configured.
    pub fn builtin_max_concurrent(&self, name: &str) -> Option<u32> {
        match name {
            "openai" => self.limits.0,
            "anthropic" => self.limits.1,
            _ => None,
        }
    }

    /// A built-in provider as configured from the environment: its base URL and whether a key is
    /// set; None when it is not configured.
    pub fn builtin(&self, name: &str) -> Option<(&str, bool)> {
        match name {
            "openai" => self.openai.as_ref().map(|p| (p.base_url(), p.has_key())),
            "anthropic" => self.anthropic.as_ref().map(|p| (p.base_url(), p.has_key())),
            _ => None,
        }
    }

    /// `name` None → detection: anthropic if configured, else openai.
    pub fn get(&self, name: Option<&str>) -> Result<Arc<dyn Provider>, LlmError> {
        match name {
            None => match self.detected() {
                Some(n) => self.get(Some(n)),
                None => Err(LlmError::new(
                    LlmErrorKind::ProviderUnconfigured,
                    "no model provider is configured: set OPENAI_API_KEY, OPENAI_BASE_URL (an \
                     OpenAI-compatible server such as Ollama, llama.cpp or vLLM; a local one needs no \
                     key) or ANTHROPIC_API_KEY where the workers run",
                )),
            },
            Some("openai") => match &self.openai {
                Some(p) => Ok(p.clone() as Arc<dyn Provider>),
                None => Err(LlmError::new(
                    LlmErrorKind::ProviderUnconfigured,
                    "provider 'openai' is not configured: set OPENAI_API_KEY, or OPENAI_BASE_URL for an \
                     OpenAI-compatible server (a local one needs no key), where the workers run",
                )),
            },
            Some("anthropic") => match &self.anthropic {
                Some(p) => Ok(p.clone() as Arc<dyn Provider>),
                None => Err(LlmError::new(
                    LlmErrorKind::ProviderUnconfigured,
                    "provider 'anthropic' is not configured: set ANTHROPIC_API_KEY",
                )),
            },
            Some(other) => Err(LlmError::new(
                LlmErrorKind::ProviderUnconfigured,
                format!("unknown provider '{other}': expected 'openai' or 'anthropic'"),
            )),
        }
    }

    /// Which provider `get(None)` would use.
    pub fn detected(&self) -> Option<&'static str> {
        if self.anthropic.is_some() {
            Some("anthropic")
        } else if self.openai.is_some() {
            Some("openai")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let base = Duration::from_millis(500);
        for attempt in 1..=12u32 {
            let raw = base
                .saturating_mul(1 << (attempt - 1).min(20))
                .min(Duration::from_secs(32));
            for _ in 0..50 {
                let d = backoff_delay(attempt, base, None);
                assert!(d >= raw, "attempt {attempt}: {d:?} < {raw:?}");
                assert!(d <= raw.mul_f64(1.25), "attempt {attempt}: {d:?} too large");
                assert!(d <= Duration::from_secs(32), "attempt {attempt}: {d:?} over the cap");
            }
        }
        assert!(backoff_delay(100, base, None) <= Duration::from_secs(40));
        for _ in 0..200 {
            assert!(backoff_delay(7, Duration::from_secs(1), None) <= Duration::from_secs(32));
            assert!(backoff_delay(100, base, None) <= Duration::from_secs(32));
        }
        assert!(backoff_delay(0, base, None) >= base);
    }

    #[test]
    fn backoff_retry_after_wins() {
        let hint = Duration::from_secs(90);
        assert_eq!(backoff_delay(1, Duration::from_secs(1), Some(hint)), hint);
        assert_eq!(
            backoff_delay(9, Duration::from_secs(1), Some(Duration::from_millis(1))),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn context_windows() {
        assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_context_window("gpt-4o"), Some(128_000));
        assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_context_window("gpt-5-mini"), Some(400_000));
        assert_eq!(known_context_window("o3-mini"), Some(200_000));
        assert_eq!(known_context_window("o1"), Some(200_000));
        assert_eq!(known_context_window("mistral-large-latest"), Some(131_072));
        assert_eq!(known_context_window("openai/gpt-4o"), Some(128_000));
        assert_eq!(known_context_window("llama3.1:8b"), None);
        assert_eq!(known_context_window("o10"), None);
    }

    #[test]
    fn providers_detection() {
        let none = Providers::new(None, None);
        assert_eq!(none.detected(), None);
        assert_eq!(none.get(None).err().unwrap().kind, LlmErrorKind::ProviderUnconfigured);
        let err = none.get(Some("anthropic")).err().unwrap();
        assert_eq!(
            err.message,
            "provider 'anthropic' is not configured: set ANTHROPIC_API_KEY"
        );

        let oa = Providers::new(Some(openai::OpenAi::new("http://localhost:1/v1".into(), None)), None);
        assert_eq!(oa.detected(), Some("openai"));
        assert_eq!(oa.get(None).unwrap().name(), "openai");

        let both = Providers::new(
            Some(openai::OpenAi::new("http://localhost:1/v1".into(), None)),
            Some(anthropic::Anthropic::new("http://localhost:1".into(), Some("k".into()))),
        );
        assert_eq!(both.detected(), Some("anthropic"));
        assert_eq!(both.get(None).unwrap().name(), "anthropic");
        assert_eq!(both.get(Some("openai")).unwrap().name(), "openai");
    }
}
