//! The document's schemas for values the desk checks beyond their type, written by hand where
//! the derive cannot say it: header maps sent on a client's behalf (HTTP tools, providers, MCP
//! servers), http(s) URLs, labels, tasks, webhook event patterns and secrets, a tool's input
//! schema. A value that matches its schema passes the check (the tests hold each pattern
//! against its check).

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use utoipa::openapi::schema::Schema;

/// A header name: one or more of HTTP's token characters.
const NAME_PATTERN: &str = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$";
/// A header value: anything but control characters (a tab is allowed).
const VALUE_PATTERN: &str = r"^[^\u0000-\u0008\u000a-\u001f\u007f]*$";

/// `Err` names the first header that cannot be sent.
pub fn check(headers: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in headers {
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("invalid header name {name:?}"));
        }
        if HeaderValue::from_str(value).is_err() {
            return Err(format!("invalid value for header {name:?}"));
        }
    }
    Ok(())
}

/// A schema written as JSON, for what the derive cannot say. A part utoipa's model cannot hold
/// would make it fall back to the default schema without a word, so the tests check that each
/// one below comes out as it was written.
fn from_json(json: Value) -> Schema {
    serde_json::from_value(json).unwrap_or_default()
}

fn header_map_json() -> Value {
    json!({
        "type": "object",
        "propertyNames": {"type": "string", "pattern": NAME_PATTERN},
        "additionalProperties": {"type": "string", "pattern": VALUE_PATTERN},
    })
}

/// The document's schema of a header map.
pub fn header_map() -> Schema {
    from_json(header_map_json())
}

/// An http(s) URL with a host (a name or an IPv4 address) and no white space: a subset of what
/// the URL checks accept. A name's last label starts with a letter, as a numeric one would be
/// read as an IPv4 address; the port is at most 65535.
const URL_PATTERN: &str = concat!(
    r"^https?://(([A-Za-z0-9-]+\.)*[A-Za-z][A-Za-z0-9-]*",
    r"|((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]))",
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
    r"([/?#][^\s]*)?$"
);

/// `Err` when a URL is longer than every URL's schema allows.
pub fn check_url_length(url: &str) -> Result<(), String> {
    let max = crate::domain::webhook::MAX_URL_LEN;
    if url.len() > max {
        Err(format!("url is longer than {max} characters"))
    } else {
        Ok(())
    }
}

fn url_json(types: Value, description: &str, example: &str) -> Value {
    json!({
        "type": types,
        "description": description,
        "maxLength": crate::domain::webhook::MAX_URL_LEN,
        "pattern": URL_PATTERN,
        "example": example,
    })
}

/// A webhook's URL.
pub fn webhook_url() -> Schema {
    from_json(url_json("string".into(), WEBHOOK_URL, "https://example.com/hook"))
}

/// The same, where null means "leave it as it is".
pub fn optional_webhook_url() -> Schema {
    from_json(url_json(
        json!(["string", "null"]),
        WEBHOOK_URL,
        "https://example.com/hook",
    ))
}

const WEBHOOK_URL: &str = "Where events are POSTed: an http or https URL.";

/// An HTTP tool's URL.
pub fn tool_url() -> Schema {
    let description = "An http(s) URL; may hold `{field}` placeholders filled from the input (URL-encoded) \
                       and `${env:NAME}` templates expanded at call time.";
    from_json(url_json(
        "string".into(),
        description,
        "https://api.example.com/weather/{city}",
    ))
}

/// An MCP server's URL.
pub fn mcp_server_url() -> Schema {
    let description = "The server's streamable HTTP endpoint, http(s); may hold `${env:NAME}` templates.";
    from_json(url_json("string".into(), description, "https://mcp.example.com/mcp"))
}

/// A provider's base URL.
pub fn provider_base_url() -> Schema {
    let description = "An http(s) URL. OpenAI: with the version path (`http://127.0.0.1:8000/v1`); Anthropic: without.";
    from_json(url_json("string".into(), description, "http://127.0.0.1:8000/v1"))
}

/// A label: 1 to 100 characters, not all blank, without control characters.
const LABEL_PATTERN: &str =
    r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$";

fn labels_json(types: Value) -> Value {
    json!({
        "type": types, "maxItems": crate::transitions::MAX_LABELS,
        "items": {"type": "string", "minLength": 1, "maxLength": crate::transitions::MAX_LABEL_LEN,
                  "pattern": LABEL_PATTERN}
    })
}

/// Labels: at most 50, each 1 to 100 characters without control characters.
pub fn labels() -> Schema {
    from_json(labels_json("array".into()))
}

const WEBHOOK_LABELS: &str = "Only events of tickets with one of these labels; empty or omitted: every ticket.";

/// A webhook's labels.
pub fn webhook_labels() -> Schema {
    let mut json = labels_json("array".into());
    json["description"] = WEBHOOK_LABELS.into();
    from_json(json)
}

/// The same, where null means "leave them as they are".
pub fn optional_webhook_labels() -> Schema {
    let mut json = labels_json(json!(["array", "null"]));
    json["description"] = WEBHOOK_LABELS.into();
    from_json(json)
}

fn task_json() -> Value {
    json!({
        "description": "Any JSON but null or a blank string; usually a string.",
        "anyOf": [
            {"type": "string", "pattern": "\\S"},
            {"type": ["object", "array", "number", "boolean"]}
        ],
        "example": "Summarise yesterday's failed builds",
    })
}

/// A task: any JSON but null or a blank string.
pub fn task() -> Schema {
    from_json(task_json())
}

fn tool_input_schema_json() -> Value {
    json!({
        "type": ["object", "null"],
        "description": "A JSON Schema (draft 2020-12) of `\"type\": \"object\"`; default `{\"type\": \"object\"}`.",
        "required": ["type"],
        "properties": {"type": {"type": "string", "enum": ["object"]}},
        "example": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    })
}

/// An HTTP tool's input schema: an object schema, or null for the default.
pub fn tool_input_schema() -> Schema {
    from_json(tool_input_schema_json())
}

/// An event kind, or a prefix ending in `*`: at most 100 characters.
const EVENT_PATTERN: &str = r"^([a-z0-9._]{1,100}|[a-z0-9._]{0,99}\*)$";

fn event_patterns_json(types: Value) -> Value {
    json!({
        "type": types, "maxItems": crate::domain::webhook::MAX_PATTERNS,
        "description": "Event kinds to deliver (`ticket.done`), or prefixes ending in `*` (`tool.*`); empty or omitted: every kind.",
        "items": {"type": "string", "pattern": EVENT_PATTERN},
    })
}

/// A webhook's event patterns: kinds (`ticket.done`) or prefixes ending in `*`.
pub fn event_patterns() -> Schema {
    from_json(event_patterns_json("array".into()))
}

/// The same, where null means "leave them as they are".
pub fn optional_event_patterns() -> Schema {
    from_json(event_patterns_json(json!(["array", "null"])))
}

/// `whsec_` and the canonical base64 (padded) of 24 to 64 bytes: 8 to 20 groups of four
/// characters and an optional last group, or 21 groups and a last group of one byte.
const SECRET_PATTERN: &str = concat!(
    r"^whsec_((?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=|[A-Za-z0-9+/][AQgw]==)?",
    r"|(?:[A-Za-z0-9+/]{4}){21}[A-Za-z0-9+/][AQgw]==)$"
);

fn secret_json() -> Value {
    json!({
        "type": ["string", "null"],
        "description": "`whsec_` and the base64 of 24 to 64 bytes; omitted: one is generated (32 random bytes).",
        "pattern": SECRET_PATTERN,
    })
}

/// A webhook's signing secret, or null to have one generated.
pub fn webhook_secret() -> Schema {
    from_json(secret_json())
}

fn requires_approval_json() -> Value {
    json!({"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "string", "minLength": 1}}]})
}

/// All of an MCP server's tools, none, or those named (not empty).
pub fn requires_approval() -> Schema {
    from_json(requires_approval_json())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every schema comes out of utoipa's model as it was written.
    #[test]
    fn hand_written_schemas_survive_the_model() {
        for json in [
            header_map_json(),
            url_json("string".into(), "d", "https://x/"),
            url_json(json!(["string", "null"]), "d", "https://x/"),
            labels_json("array".into()),
            labels_json(json!(["array", "null"])),
            task_json(),
            tool_input_schema_json(),
            requires_approval_json(),
            event_patterns_json("array".into()),
            event_patterns_json(json!(["array", "null"])),
            secret_json(),
        ] {
            assert_eq!(serde_json::to_value(from_json(json.clone())).unwrap(), json);
        }
    }

    /// A secret matches the pattern exactly when the webhook check takes it.
    #[test]
    fn the_secret_pattern_is_what_the_check_takes() {
        use base64::engine::general_purpose::STANDARD;
        use base64::Engine;
        let pattern = regex::Regex::new(SECRET_PATTERN).unwrap();
        let mut samples: Vec<String> = (0..70)
            .map(|n| format!("whsec_{}", STANDARD.encode(vec![0xa5u8; n])))
            .collect();
        samples.extend(["whsec_", "whsec_abc", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"].map(String::from));
        // Non-canonical last bits, a missing pad, a stray character.
        samples.push(format!("whsec_{}B=", "A".repeat(34)));
        samples.push(format!("whsec_{}AB", "A".repeat(30)));
        samples.push(format!("whsec_{}!", "A".repeat(32)));
        for secret in &samples {
            let checked = crate::domain::webhook::secret_key(secret).is_ok();
            assert_eq!(pattern.is_match(secret), checked, "{secret}");
        }
    }

    /// An event pattern matches exactly when the webhook check takes it.
    #[test]
    fn the_event_pattern_is_what_the_check_takes() {
        let pattern = regex::Regex::new(EVENT_PATTERN).unwrap();
        let long = "a".repeat(100);
        let too_long = "a".repeat(101);
        let star = format!("{}*", "a".repeat(99));
        let long_star = format!("{}*", "a".repeat(100));
        for p in [
            "ticket.done",
            "tool.*",
            "*",
            "tool_call.delta",
            "",
            "Ticket.done",
            "a*b",
            "**",
            "a-b",
            "é",
        ]
        .into_iter()
        .chain([&long, &too_long, &star, &long_star].map(String::as_str))
        {
            let checked = crate::domain::webhook::check_pattern(p).is_ok();
            assert_eq!(pattern.is_match(p), checked, "{p}");
        }
    }

    /// What the URL pattern allows parses as an http(s) URL with a host.
    #[test]
    fn urls_the_schema_allows_parse() {
        let pattern = regex::Regex::new(URL_PATTERN).unwrap();
        for url in [
            "https://api.example.com/v1",
            "http://a:65535/x?y#z",
            "http://a-b.c0",
            "https://x/{city}",
            "http://127.0.0.1:8000/v1",
        ] {
            assert!(pattern.is_match(url), "{url}");
            let parsed = reqwest::Url::parse(url).unwrap();
            assert!(parsed.host_str().is_some_and(|h| !h.is_empty()), "{url}");
        }
        for url in [
            "",
            "ftp://a",
            "http://1.2.3.999",
            "http://1.2.3",
            "http://01.2.3.4",
            "http://a:65536",
            "http://a b",
            "http://",
            "https://[::1]/",
        ] {
            assert!(!pattern.is_match(url), "{url}");
        }
    }

    /// The patterns accept exactly what `check` does.
    #[test]
    fn the_schema_says_what_the_check_accepts() {
        let name = regex::Regex::new(NAME_PATTERN).unwrap();
        let value = regex::Regex::new(VALUE_PATTERN).unwrap();
        for n in [
            "x-api-key",
            "X_Y",
            "a.b",
            "!#$%&'*+-.^_`|~",
            "",
            "a b",
            "a:b",
            "é",
            "a\n",
            "(a)",
        ] {
            let checked = check(&BTreeMap::from([(n.to_owned(), String::new())])).is_ok();
            assert_eq!(name.is_match(n), checked, "name {n:?}");
        }
        for v in [
            "",
            "Bearer ${env:KEY}",
            "a\tb",
            "é",
            "a\nb",
            "a\rb",
            "\u{7f}",
            "\u{0}",
            "\u{1f}",
            "~",
        ] {
            let checked = check(&BTreeMap::from([("x".to_owned(), v.to_owned())])).is_ok();
            assert_eq!(value.is_match(v), checked, "value {v:?}");
        }
    }
}
