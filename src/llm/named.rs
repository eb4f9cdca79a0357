//! Named providers: OpenAI-compatible or Anthropic endpoints defined through the API and stored in
//! the database, next to the two built-in ones configured from the environment.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{anthropic, openai, Provider};

/// What a named provider is built from. `api_key` and header values are templates: `${env:NAME}`
/// is replaced from the environment each time a request is sent, never before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `openai` or `anthropic`.
    pub kind: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub timeout_ms: u64,
}

impl ProviderConfig {
    pub fn build(&self) -> Arc<dyn Provider> {
        let timeout = Some(Duration::from_millis(self.timeout_ms));
        let (key, headers) = (self.api_key.clone(), self.headers.clone());
        if self.kind == "anthropic" {
            Arc::new(anthropic::Anthropic::new(self.base_url.clone(), key).with_extras(headers, timeout))
        } else {
            Arc::new(openai::OpenAi::new(self.base_url.clone(), key).with_extras(headers, timeout))
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

/// Replaces every `${env:NAME}` with the variable's value (empty when unset).
pub fn expand_env(template: &str) -> Cow<'_, str> {
    expand_with(template, |name| std::env::var(name).ok())
}

fn expand_with(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Cow<'_, str> {
    if !template.contains("${env:") {
        return Cow::Borrowed(template);
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${env:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 6..];
        match after.find('}') {
            Some(end) => {
                out.push_str(&lookup(&after[..end]).unwrap_or_default());
                rest = &after[end + 1..];
            }
            None => {
                // Unterminated: kept as written.
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_from_the_environment() {
        let lookup = |n: &str| (n == "KEY").then(|| "secret".to_string());
        assert_eq!(expand_with("plain", lookup), "plain");
        assert_eq!(expand_with("Bearer ${env:KEY}", lookup), "Bearer secret");
        assert_eq!(expand_with("${env:KEY}-${env:NONE}-x", lookup), "secret--x");
        assert_eq!(expand_with("a ${env:KEY", lookup), "a ${env:KEY");
    }
}
