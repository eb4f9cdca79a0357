//! Secrets in definitions (provider keys, tool and MCP headers): `${env:NAME}` templates, stored
//! and shown as written and replaced from the service's environment only when a request is sent.
//! The expanded value lives in the outgoing request alone: never stored, logged or returned.

use std::borrow::Cow;

/// Replaces every `${env:NAME}` with the variable's value (empty when unset).
pub fn expand_env(template: &str) -> Cow<'_, str> {
    expand_with(template, |name| std::env::var(name).ok())
}

/// The variables of the `${env:NAME}` templates in these texts that the environment does not set
/// (or sets empty), each once, in order: a definition that names one sends an empty secret.
pub fn unset_env_vars<'a>(templates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    unset_with(templates, |name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

fn unset_with<'a>(templates: impl IntoIterator<Item = &'a str>, is_set: impl Fn(&str) -> bool) -> Vec<String> {
    let mut unset: Vec<String> = vec![];
    for template in templates {
        let mut rest = template;
        while let Some(start) = rest.find("${env:") {
            let after = &rest[start + 6..];
            let Some(end) = after.find('}') else { break };
            let name = &after[..end];
            if !is_set(name) && !unset.iter().any(|u| u == name) {
                unset.push(name.to_owned());
            }
            rest = &after[end + 1..];
        }
    }
    unset
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
    fn unset_variables_are_named_once_in_order() {
        let set = |name: &str| name == "KEY";
        assert_eq!(
            unset_with(["Bearer ${env:KEY}", "${env:B}-${env:A}-${env:B}", "${env:OPEN"], set),
            ["B", "A"]
        );
        assert!(unset_with(["plain", "${env:KEY}"], set).is_empty());
    }

    #[test]
    fn templates_expand_from_the_environment() {
        let lookup = |n: &str| (n == "KEY").then(|| "secret".to_string());
        assert_eq!(expand_with("plain", lookup), "plain");
        assert_eq!(expand_with("Bearer ${env:KEY}", lookup), "Bearer secret");
        assert_eq!(expand_with("${env:KEY}-${env:NONE}-x", lookup), "secret--x");
        assert_eq!(expand_with("a ${env:KEY", lookup), "a ${env:KEY");
    }
}
