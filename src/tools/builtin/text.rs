//! Text shaping shared by the built-in tools' outputs and messages.

use serde_json::Value;

/// A task or result as text: strings as they are, anything else as compact JSON.
pub(super) fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Cuts `s` to `max` characters (not bytes), marking the cut.
pub(super) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((at, _)) => format!("{}… ({} chars in all)", &s[..at], s.chars().count()),
    }
}

/// Whitespace runs (newlines included) collapsed to one space, then cut to `max` characters, so
/// each ticket stays on its own line.
pub(super) fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        None => flat,
        Some((at, _)) => format!("{}…", &flat[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clip_counts_characters_not_bytes() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("héllo", 2), "hé… (5 chars in all)");
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\n\n b\tc", 100), "a b c");
        assert_eq!(one_line(&"ж".repeat(150), 100), format!("{}…", "ж".repeat(100)));
    }

    #[test]
    fn value_text_shows_strings_bare() {
        assert_eq!(value_text(&json!("x")), "x");
        assert_eq!(value_text(&json!({"a": 1})), "{\"a\":1}");
    }
}
