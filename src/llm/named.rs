//! Named providers: OpenAI-compatible or Anthropic endpoints defined through the API and stored in
//! the database, next to the two built-in ones configured from the environment.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::provider::Provider;
use super::{anthropic, openai};
use crate::domain::provider::{ProviderDef, ProviderKind, DEFAULT_PROVIDER_TIMEOUT_MS};

/// What a named provider is built from. `api_key` and header values are templates: `${env:NAME}`
/// is replaced from the environment each time a request is sent, never before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfig {
    /// The wire format.
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub timeout_ms: u64,
    pub max_concurrent: Option<u32>,
}

impl From<&ProviderDef> for ProviderConfig {
    /// What the model client of a provider defined over the API is built from.
    fn from(def: &ProviderDef) -> Self {
        ProviderConfig {
            kind: def.kind,
            base_url: def.base_url.clone(),
            api_key: def.api_key.clone(),
            headers: def.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout_ms: def.timeout_ms.unwrap_or(DEFAULT_PROVIDER_TIMEOUT_MS).max(1) as u64,
            max_concurrent: def.max_concurrent.and_then(|n| u32::try_from(n).ok()),
        }
    }
}

impl ProviderConfig {
    pub fn build(&self) -> Arc<dyn Provider> {
        let timeout = Some(Duration::from_millis(self.timeout_ms));
        let (key, headers) = (self.api_key.clone(), self.headers.clone());
        let limit = self.max_concurrent;
        match self.kind {
            ProviderKind::Anthropic => {
                let provider = anthropic::Anthropic::new(self.base_url.clone(), key).with_extras(headers, timeout);
                Arc::new(provider.with_max_concurrent(limit))
            }
            ProviderKind::Openai => {
                let provider = openai::OpenAi::new(self.base_url.clone(), key).with_extras(headers, timeout);
                Arc::new(provider.with_max_concurrent(limit))
            }
        }
    }
}

/// Providers built from definitions, by name; a changed definition builds a new one.
#[derive(Clone, Default)]
pub(super) struct Cache(Arc<Mutex<HashMap<String, Built>>>);

/// A provider with the definition it was built from.
type Built = (ProviderConfig, Arc<dyn Provider>);

impl Cache {
    pub(super) fn get(&self, name: &str, config: &ProviderConfig) -> Arc<dyn Provider> {
        let mut built = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, p)) = built.get(name) {
            if c == config {
                return p.clone();
            }
        }
        let provider = config.build();
        built.insert(name.to_owned(), (config.clone(), provider.clone()));
        provider
    }
}
