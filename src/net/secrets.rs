//! Secrets in definitions (provider keys, tool and MCP headers): `${env:NAME}` templates, stored
//! and shown as written and replaced from the service's environment only when a request is sent.
//! The expanded value lives in the outgoing request alone: never stored, logged or returned.

use std::borrow::Cow;

/// Replaces every `${env:NAME}` with the variable's value (empty when unset).
pub fn expand_env(template: &str) -> Cow<'_, str> {
    expand_with(template, |name| std::env::var(name).ok())
}

pub(crate) fn expand_with(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Cow<'_, str> {
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
