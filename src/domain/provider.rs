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
    /// `openai` and `anthropic`, configured from the environment (read-only here).
    pub builtin: bool,
    /// Whether the provider can be used: always for defined ones; built-in ones need their
    /// environment variables.
    pub configured: bool,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl ProviderDef {
    /// What the model client is built from.
    pub fn config(&self) -> crate::llm::named::ProviderConfig {
        crate::llm::named::ProviderConfig {
            kind: self.kind.as_str().to_owned(),
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_PROVIDER_TIMEOUT_MS).max(1) as u64,
        }
    }
}
