//! Model providers by name: the built-in `openai` and `anthropic` (from the environment) and the
//! ones defined through the API.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The names configured from the environment; they cannot be defined through the API.
pub const BUILTIN_PROVIDERS: [&str; 2] = ["openai", "anthropic"];

pub const DEFAULT_PROVIDER_TIMEOUT_MS: i64 = 600_000;
pub const MIN_PROVIDER_TIMEOUT_MS: i64 = 1_000;
pub const MAX_PROVIDER_TIMEOUT_MS: i64 = 3_600_000;
/// The largest `max_concurrent` a provider takes.
pub const MAX_PROVIDER_CONCURRENCY: i64 = 1_024;

/// The wire format a provider speaks: `openai` (chat completions, and the many servers copying
/// it: vLLM, Ollama, llama.cpp, LM Studio, LiteLLM) or `anthropic` (Messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Openai,
    Anthropic,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    pub fn parse(s: &str) -> Option<ProviderKind> {
        match s {
            "openai" => Some(ProviderKind::Openai),
            "anthropic" => Some(ProviderKind::Anthropic),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderDef {
    pub name: String,
    pub kind: ProviderKind,
    /// OpenAI: including the version path (`http://127.0.0.1:8000/v1`); Anthropic: without it.
    pub base_url: String,
    /// As given: `${env:NAME}` is replaced from the service's environment only when a request is
    /// sent, and never shown expanded. Built-in providers show the variable they read.
    pub api_key: Option<String>,
    /// Extra request headers; values may hold `${env:NAME}` templates.
    pub headers: BTreeMap<String, String>,
    /// Overall limit of one model request, in milliseconds (built-in providers: null, no limit
    /// beyond the stream's idle timeout).
    pub timeout_ms: Option<i64>,
    /// Model requests in flight to this provider at most, across every process of the desk
    /// (1 to 1024); requests beyond wait their turn in order of arrival. Null: no limit. Built-in
    /// providers show `AGENTDESK_{OPENAI,ANTHROPIC}_MAX_CONCURRENT`.
    #[schema(minimum = 1, maximum = 1024)]
    pub max_concurrent: Option<i64>,
    /// `openai` and `anthropic`, configured from the environment (read-only here).
    pub builtin: bool,
    /// Whether the provider can be used: always for defined ones; built-in ones need their
    /// environment variables.
    pub configured: bool,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}
