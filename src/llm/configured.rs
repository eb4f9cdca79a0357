//! The configured providers: the two built-in ones set up from the environment, and the named
//! ones defined through the API.

use std::fmt;
use std::sync::Arc;

use super::error::{LlmError, LlmErrorKind};
use super::provider::Provider;
use super::{anthropic, named, openai};
use crate::domain::provider::ProviderKind;

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
            .with_http2(config.openai.http2)
        });
        let anthropic = config.anthropic.is_configured().then(|| {
            let base = config.anthropic.base_url.clone();
            anthropic::Anthropic::new(
                base.unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_string()),
                config.anthropic.api_key.clone(),
            )
            .with_http2(config.anthropic.http2)
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
        match ProviderKind::parse(name)? {
            ProviderKind::Openai => self.limits.0,
            ProviderKind::Anthropic => self.limits.1,
        }
    }

    /// A built-in provider as configured from the environment: its base URL and whether a key is
    /// set; None when it is not configured.
    pub fn builtin(&self, name: &str) -> Option<(&str, bool)> {
        match ProviderKind::parse(name)? {
            ProviderKind::Openai => self.openai.as_ref().map(|p| (p.base_url(), p.has_key())),
            ProviderKind::Anthropic => self.anthropic.as_ref().map(|p| (p.base_url(), p.has_key())),
        }
    }

    /// A built-in provider, when it is configured.
    fn configured(&self, kind: ProviderKind) -> Option<Arc<dyn Provider>> {
        match kind {
            ProviderKind::Openai => self.openai.clone().map(|p| p as Arc<dyn Provider>),
            ProviderKind::Anthropic => self.anthropic.clone().map(|p| p as Arc<dyn Provider>),
        }
    }

    /// `name` None → detection: anthropic if configured, else openai.
    pub fn get(&self, name: Option<&str>) -> Result<Arc<dyn Provider>, LlmError> {
        let kind = match name {
            None => self.detected_kind().ok_or_else(|| {
                LlmError::new(
                    LlmErrorKind::ProviderUnconfigured,
                    "no model provider is configured: set OPENAI_API_KEY, OPENAI_BASE_URL (an \
                     OpenAI-compatible server such as Ollama, llama.cpp or vLLM; a local one needs no \
                     key) or ANTHROPIC_API_KEY where the workers run",
                )
            })?,
            Some(name) => ProviderKind::parse(name).ok_or_else(|| {
                LlmError::new(
                    LlmErrorKind::ProviderUnconfigured,
                    format!("unknown provider '{name}': expected 'openai' or 'anthropic'"),
                )
            })?,
        };
        self.configured(kind).ok_or_else(|| {
            let how = match kind {
                ProviderKind::Openai => {
                    "set OPENAI_API_KEY, or OPENAI_BASE_URL for an OpenAI-compatible server (a local \
                     one needs no key), where the workers run"
                }
                ProviderKind::Anthropic => "set ANTHROPIC_API_KEY",
            };
            LlmError::new(
                LlmErrorKind::ProviderUnconfigured,
                format!("provider '{}' is not configured: {how}", kind.as_str()),
            )
        })
    }

    /// Which provider `get(None)` would use.
    pub fn detected(&self) -> Option<&'static str> {
        self.detected_kind().map(ProviderKind::as_str)
    }

    fn detected_kind(&self) -> Option<ProviderKind> {
        if self.anthropic.is_some() {
            Some(ProviderKind::Anthropic)
        } else if self.openai.is_some() {
            Some(ProviderKind::Openai)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
