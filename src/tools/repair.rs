//! Best-effort repair of tool-call arguments. Models stream arguments token
//! by token and regularly stop mid-value (output limits) or wrap them in a
//! markdown fence; rejecting such calls outright wastes a whole turn, so we
//! recover as much of the intended object as possible and let schema
//! validation decide whether what is left is usable.

use serde_json::{Map, Value};

/// Repairs tool-call arguments that arrived truncated or malformed: closes open strings, arrays and objects (in the right nesting order), fills a dangling `"key":` with null, drops a dangling `"key"` without colon, removes trailing commas, strips a ```json fence, and if the text still does not parse, keeps the longest valid prefix of complete top-level pairs; an empty or hopeless input gives `{}`. Returns the value and whether a repair was needed.
///
/// Empty (or whitespace-only) input is how several providers encode "no
/// arguments", so it yields `{}` without counting as a repair. A JSON string
/// that itself holds an object (double-encoded arguments) is decoded.
pub fn repair_json(raw: &str) -> (Value, bool) {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return (Value::Object(Map::new()), false);
    }
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        if let Value::String(inner) = &value {
            let inner = inner.trim();
            if inner.starts_with('{') {
                return (repair_json(inner).0, true);
            }
        }
        return (value, false);
    }
    // Trailing whitespace may belong to a string that was cut off.
    let text = strip_fence(raw.trim_start());
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return (value, true);
    }
    let Some(closed) = close_json(text) else {
        return (Value::Object(Map::new()), true);
    };
    if let Ok(value) = serde_json::from_str::<Value>(&closed) {
        return (value, true);
    }
    (longest_valid_prefix(&closed), true)
}

/// Removes a leading ```` ``` ```` / ```` ```json ```` line and a trailing fence.
/// The closing fence is optional because truncation usually cuts it off.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = match rest.find('\n') {
        Some(nl) => &rest[nl + 1..],
        // "```json{...}" on a single line: skip the language tag.
        None => rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric()),
    };
    match body.trim_end().strip_suffix("```") {
        Some(inner) => inner.trim(),
        None => body.trim_start(),
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Object,
    Array,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Expect {
    /// Just after `{` or `[`: a key/value or the closer.
    First,
    /// After a comma in an object.
    Key,
    /// After a key.
    Colon,
    /// After a colon, or after a comma in an array.
    Value,
    /// After a complete value (or key/value pair).
    Next,
}

#[derive(Debug)]
struct Frame {
    kind: Kind,
    expect: Expect,
    /// Output position of the pending comma, so a trailing one can be cut.
    comma_at: Option<usize>,
    /// Output position where the current key starts (including its comma),
    /// so a key that never got a value can be dropped.
    key_at: usize,
}

impl Frame {
    fn closer(&self) -> char {
        match self.kind {
            Kind::Object => '}',
            Kind::Array => ']',
        }
    }
}

/// Re-emits `text` as balanced JSON. Returns `None` when there is no object
/// or array to recover at all.
fn close_json(text: &str) -> Option<String> {
    let start = text.find(['{', '['])?;
    let mut out = String::with_capacity(text.len() + 16);
    let mut stack: Vec<Frame> = Vec::new();
    let mut chars = text[start..].chars().peekable();
    let mut bare = String::new();

    while let Some(c) = chars.next() {
        if !bare.is_empty() && is_delimiter(c) {
            let token = std::mem::take(&mut bare);
            emit_bare(&mut out, &mut stack, &token, false);
        }
        match c {
            '"' => {
                let is_key = begin_token(&mut out, &mut stack);
                let string_at = out.len();
                let closed = copy_string(&mut chars, &mut out);
                if let Some(top) = stack.last_mut() {
                    if is_key {
                        top.key_at = top.comma_at.unwrap_or(string_at);
                        top.expect = Expect::Colon;
                    } else {
                        top.expect = Expect::Next;
                    }
                }
                if !closed {
                    break;
                }
            }
            '{' | '[' => {
                if let Some(top) = stack.last() {
                    if top.kind == Kind::Object && matches!(top.expect, Expect::First | Expect::Key | Expect::Next) {
                        // A container cannot be a key; the text is too broken
                        // to guess further, keep what came before.
                        break;
                    }
                    begin_token(&mut out, &mut stack);
                }
                if let Some(top) = stack.last_mut() {
                    top.expect = Expect::Next;
                }
                out.push(c);
                stack.push(Frame {
                    kind: if c == '{' { Kind::Object } else { Kind::Array },
                    expect: Expect::First,
                    comma_at: None,
                    key_at: out.len(),
                });
            }
            '}' | ']' => {
                let kind = if c == '}' { Kind::Object } else { Kind::Array };
                // A closer for an outer container also closes the inner ones
                // the model forgot; a closer matching nothing is dropped.
                if !stack.iter().any(|f| f.kind == kind) {
                    continue;
                }
                while let Some(frame) = stack.pop() {
                    finish_frame(&mut out, &frame);
                    out.push(frame.closer());
                    if frame.kind == kind {
                        break;
                    }
                }
                if stack.is_empty() {
                    return Some(out);
                }
            }
            ',' => {
                let top = stack.last_mut().expect("stack is non-empty inside the loop");
                // Doubled or leading commas carry no information: only a
                // comma after a complete value is kept.
                if top.expect == Expect::Next {
                    top.comma_at = Some(out.len());
                    out.push(',');
                    top.expect = match top.kind {
                        Kind::Object => Expect::Key,
                        Kind::Array => Expect::Value,
                    };
                }
            }
            ':' => {
                let top = stack.last_mut().expect("stack is non-empty inside the loop");
                if top.expect == Expect::Colon {
                    out.push(':');
                    top.expect = Expect::Value;
                }
            }
            c if c.is_whitespace() => {
                if bare.is_empty() {
                    out.push(c);
                }
            }
            c => bare.push(c),
        }
    }

    if !bare.is_empty() {
        emit_bare(&mut out, &mut stack, &bare, true);
    }
    while let Some(frame) = stack.pop() {
        finish_frame(&mut out, &frame);
        out.push(frame.closer());
    }
    Some(out)
}

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ':' | '{' | '}' | '[' | ']' | '"')
}

/// Prepares the output for a new token (string, bare word or container) and
/// reports whether it sits in key position. Inserts a missing comma or colon
/// when the model left one out between two tokens.
fn begin_token(out: &mut String, stack: &mut [Frame]) -> bool {
    let Some(top) = stack.last_mut() else {
        return false;
    };
    match top.expect {
        Expect::Next => {
            top.comma_at = Some(out.len());
            out.push(',');
            top.kind == Kind::Object
        }
        Expect::Colon => {
            out.push(':');
            false
        }
        Expect::First | Expect::Key => top.kind == Kind::Object,
        Expect::Value => false,
    }
}

/// Copies a string body (the opening quote is already consumed) into `out`,
/// fixing what JSON forbids inside strings. Returns false when the input
/// ended inside the string; the string is then closed at a safe point.
fn copy_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) -> bool {
    out.push('"');
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                return true;
            }
            '\\' => match chars.next() {
                None => break, // dangling backslash: drop it
                Some(e @ ('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't')) => {
                    out.push('\\');
                    out.push(e);
                }
                Some('u') => {
                    let mut hex = String::new();
                    while hex.len() < 4 {
                        match chars.peek() {
                            Some(h) if h.is_ascii_hexdigit() => {
                                hex.push(*h);
                                chars.next();
                            }
                            _ => break,
                        }
                    }
                    if hex.len() == 4 {
                        out.push_str("\\u");
                        out.push_str(&hex);
                    } else if chars.peek().is_none() {
                        break; // truncated escape: drop it
                    } else {
                        out.push_str("\\\\u");
                        out.push_str(&hex);
                    }
                }
                // Unknown escape such as `\x`: keep the backslash literally.
                Some(other) => {
                    out.push_str("\\\\");
                    push_string_char(out, other);
                }
            },
            c => push_string_char(out, c),
        }
    }
    out.push('"');
    false
}

fn push_string_char(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

/// Emits an unquoted token: a number or literal as is, Python-style literals
/// translated, anything else quoted. At the end of input a cut-off literal or
/// number is completed or trimmed.
fn emit_bare(out: &mut String, stack: &mut [Frame], token: &str, at_end: bool) {
    let Some(top) = stack.last() else {
        return;
    };
    let in_key_position = matches!(top.expect, Expect::First | Expect::Key | Expect::Next) && top.kind == Kind::Object;
    let token = if in_key_position {
        Some(quote(token))
    } else {
        normalize_scalar(token, at_end)
    };
    let Some(token) = token else {
        // Nothing usable (e.g. a lone "-" cut off at the end): the value is
        // missing and the end-of-input handling decides what that means.
        return;
    };
    let is_key = begin_token(out, stack);
    let string_at = out.len();
    out.push_str(&token);
    let top = stack.last_mut().expect("checked above");
    if is_key {
        top.key_at = top.comma_at.unwrap_or(string_at);
        top.expect = Expect::Colon;
    } else {
        top.expect = Expect::Next;
    }
}

fn normalize_scalar(token: &str, at_end: bool) -> Option<String> {
    match token {
        "True" => return Some("true".into()),
        "False" => return Some("false".into()),
        "None" => return Some("null".into()),
        _ => {}
    }
    if is_json_scalar(token) {
        return Some(token.to_string());
    }
    if at_end {
        for literal in ["true", "false", "null"] {
            if literal.starts_with(token) {
                return Some(literal.to_string());
            }
        }
        if token.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            let trimmed = token.trim_end_matches(['.', 'e', 'E', '+', '-']);
            return is_json_scalar(trimmed).then(|| trimmed.to_string());
        }
    }
    Some(quote(token))
}

fn is_json_scalar(token: &str) -> bool {
    matches!(
        serde_json::from_str::<Value>(token),
        Ok(Value::Number(_) | Value::Bool(_) | Value::Null)
    )
}

fn quote(token: &str) -> String {
    Value::String(token.to_string()).to_string()
}

/// Makes the innermost open container well-formed before its closer is
/// appended: no trailing comma, no key without a value.
fn finish_frame(out: &mut String, frame: &Frame) {
    match frame.expect {
        Expect::First | Expect::Next => trim_trailing_ws(out),
        Expect::Key => {
            out.truncate(frame.comma_at.unwrap_or(out.len()));
            trim_trailing_ws(out);
        }
        Expect::Value if frame.kind == Kind::Array => {
            out.truncate(frame.comma_at.unwrap_or(out.len()));
            trim_trailing_ws(out);
        }
        Expect::Value => {
            trim_trailing_ws(out);
            out.push_str(" null");
        }
        Expect::Colon => {
            out.truncate(frame.key_at);
            trim_trailing_ws(out);
        }
    }
}

fn trim_trailing_ws(out: &mut String) {
    out.truncate(out.trim_end().len());
}

/// Last resort: the longest prefix of complete top-level members that
/// parses, or an empty object.
fn longest_valid_prefix(closed: &str) -> Value {
    let closer = match closed.chars().next() {
        Some('[') => ']',
        _ => '}',
    };
    let mut cuts = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in closed.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => cuts.push(i),
            _ => {}
        }
    }
    for &cut in cuts.iter().rev() {
        let candidate = format!("{}{}", &closed[..cut], closer);
        if let Ok(value) = serde_json::from_str::<Value>(&candidate) {
            return value;
        }
    }
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn repaired(raw: &str) -> Value {
        let (value, was_repaired) = repair_json(raw);
        assert!(was_repaired, "expected a repair for {raw:?}");
        value
    }

    #[test]
    fn valid_json_is_untouched() {
        assert_eq!(repair_json(r#"{"a": 1}"#), (json!({"a": 1}), false));
        assert_eq!(repair_json("  [1, 2]\n"), (json!([1, 2]), false));
    }

    #[test]
    fn empty_input_is_an_empty_object() {
        assert_eq!(repair_json(""), (json!({}), false));
        assert_eq!(repair_json("  \n"), (json!({}), false));
    }

    #[test]
    fn truncated_string_is_closed() {
        assert_eq!(repaired(r#"{"result": "hel"#), json!({"result": "hel"}));
    }

    #[test]
    fn truncated_array_is_closed() {
        assert_eq!(repaired(r#"{"a": [1, 2"#), json!({"a": [1, 2]}));
        assert_eq!(repaired(r#"{"a": [1, 2,"#), json!({"a": [1, 2]}));
        assert_eq!(repaired(r#"{"a": ["x", "y"#), json!({"a": ["x", "y"]}));
    }

    #[test]
    fn trailing_commas_are_removed() {
        assert_eq!(repaired(r#"{"a": 1,}"#), json!({"a": 1}));
        assert_eq!(
            repaired(r#"{"a": [1, 2, ], "b": {"c": 3,},}"#),
            json!({"a": [1, 2], "b": {"c": 3}})
        );
        assert_eq!(repaired(r#"{"a": 1,"#), json!({"a": 1}));
    }

    #[test]
    fn dangling_key_with_colon_gets_null() {
        assert_eq!(repaired(r#"{"a":"#), json!({"a": null}));
        assert_eq!(repaired(r#"{"x": 1, "a":  "#), json!({"x": 1, "a": null}));
    }

    #[test]
    fn dangling_key_without_colon_is_dropped() {
        assert_eq!(repaired(r#"{"x": 1, "a""#), json!({"x": 1}));
        assert_eq!(repaired(r#"{"x": 1, "a"#), json!({"x": 1}));
        assert_eq!(repaired(r#"{"a"#), json!({}));
    }

    #[test]
    fn nested_containers_close_in_order() {
        assert_eq!(repaired(r#"{"a": {"b": "c"#), json!({"a": {"b": "c"}}));
        assert_eq!(
            repaired(r#"{"a": [{"b": [1, {"c": "d"#),
            json!({"a": [{"b": [1, {"c": "d"}]}]})
        );
    }

    #[test]
    fn truncated_literals_and_numbers_are_completed() {
        assert_eq!(repaired(r#"{"a": tr"#), json!({"a": true}));
        assert_eq!(repaired(r#"{"a": nu"#), json!({"a": null}));
        assert_eq!(repaired(r#"{"a": 3."#), json!({"a": 3}));
        assert_eq!(repaired(r#"{"a": 1e"#), json!({"a": 1}));
        assert_eq!(repaired(r#"{"a": -"#), json!({"a": null}));
        assert_eq!(repaired(r#"{"a": [1, -"#), json!({"a": [1]}));
    }

    #[test]
    fn truncated_escapes_are_dropped() {
        assert_eq!(repaired(r#"{"a": "x\"#), json!({"a": "x"}));
        assert_eq!(repaired(r#"{"a": "x\u00"#), json!({"a": "x"}));
        assert_eq!(repaired(r#"{"a": "say \"hi"#), json!({"a": "say \"hi"}));
    }

    #[test]
    fn raw_control_characters_in_strings_are_escaped() {
        assert_eq!(
            repaired("{\"a\": \"line1\nline2\ttab\"}"),
            json!({"a": "line1\nline2\ttab"})
        );
    }

    #[test]
    fn fenced_json_is_unwrapped() {
        assert_eq!(repaired("```json\n{\"a\": 1}\n```"), json!({"a": 1}));
        assert_eq!(repaired("```\n{\"a\": 1}\n```"), json!({"a": 1}));
        // The closing fence is usually the first thing truncation removes.
        assert_eq!(repaired("```json\n{\"a\": \"b"), json!({"a": "b"}));
        // Fences inside string values are content, not markup.
        assert_eq!(
            repaired("```json\n{\"a\": \"```rust\\ncode\\n```\"}\n```"),
            json!({"a": "```rust\ncode\n```"})
        );
    }

    #[test]
    fn surrounding_prose_is_ignored() {
        assert_eq!(repaired("Here you go: {\"a\": 1} hope it helps"), json!({"a": 1}));
    }

    #[test]
    fn garbage_gives_empty_object() {
        assert_eq!(repaired("not json at all"), json!({}));
        assert_eq!(repaired("}}}"), json!({}));
    }

    #[test]
    fn missing_separators_and_python_literals() {
        assert_eq!(repaired(r#"{"a": 1 "b": 2}"#), json!({"a": 1, "b": 2}));
        assert_eq!(repaired(r#"{"a" 1}"#), json!({"a": 1}));
        assert_eq!(repaired(r#"{"a": True, "b": None}"#), json!({"a": true, "b": null}));
        assert_eq!(repaired(r#"{a: 1}"#), json!({"a": 1}));
        assert_eq!(repaired(r#"{"status": open}"#), json!({"status": "open"}));
    }

    #[test]
    fn mismatched_closers() {
        assert_eq!(repaired(r#"{"a": [1, 2}"#), json!({"a": [1, 2]}));
        assert_eq!(repaired(r#"{"a": 1]}"#), json!({"a": 1}));
    }

    #[test]
    fn invalid_member_falls_back_to_longest_valid_prefix() {
        // A lone surrogate escape is well-formed text but not a valid string.
        assert_eq!(
            repaired(r#"{"a": 1, "b": "ok", "c": "\ud800", "d": 4}"#),
            json!({"a": 1, "b": "ok"})
        );
        assert_eq!(repaired(r#"{"c": "\ud800"}"#), json!({}));
    }

    #[test]
    fn double_encoded_object_is_decoded() {
        assert_eq!(repaired(r#""{\"a\": 1}""#), json!({"a": 1}));
        assert_eq!(repair_json(r#""just text""#), (json!("just text"), false));
    }

    #[test]
    fn unicode_survives() {
        assert_eq!(repaired(r#"{"a": "héllo ✓ "#), json!({"a": "héllo ✓ "}));
    }

    #[test]
    fn edge_cases_do_not_lose_structure() {
        assert_eq!(repaired("{"), json!({}));
        assert_eq!(repaired("["), json!([]));
        assert_eq!(repaired(r#"{"a": {"#), json!({"a": {}}));
        assert_eq!(repaired(r#"{"a": ["#), json!({"a": []}));
        assert_eq!(repaired(r#"{,}"#), json!({}));
        assert_eq!(repaired(r#"{"a": 1,, "b": 2}"#), json!({"a": 1, "b": 2}));
        assert_eq!(repaired(r#"{"a": "x"}}}"#), json!({"a": "x"}));
        assert_eq!(repaired(r#"{"a": {"b": 1}, "c""#), json!({"a": {"b": 1}}));
        assert_eq!(repaired(r#"{{"a": 1}}"#), json!({}));
    }

    #[test]
    fn every_prefix_of_a_document_repairs_to_an_object() {
        let full = r#"{"result": {"items": [1, -2.5e3, true, null, "a\"b\\c\u00e9"], "note": "x, y: {z}"}, "n": 42}"#;
        for end in (1..full.len()).filter(|&i| full.is_char_boundary(i)) {
            let (value, was_repaired) = repair_json(&full[..end]);
            assert!(was_repaired, "{end}");
            assert!(value.is_object(), "prefix {:?} gave {value}", &full[..end]);
        }
        assert!(!repair_json(full).1);
    }
}
