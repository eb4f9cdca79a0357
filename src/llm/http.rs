//! HTTP plumbing shared by the providers: sending a request under the idle timeout, and the
//! classification of provider errors into [`LlmErrorKind`]s.

use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::Value;

use super::error::{LlmError, LlmErrorKind};
use super::wire::{Json, WireError};

/// How much of a provider's error body an error message keeps: enough for the part that says
/// what went wrong, which local servers put after long stack traces or validation details.
const MAX_BODY_IN_MESSAGE: usize = 2048;
/// How much of a provider's non-stream body is read at all (error bodies; the JSON some gateways
/// answer instead of a stream); the rest is left unread.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends the request and returns the response once it is known to be a successful event stream.
pub(crate) async fn send(
    provider: &'static str,
    rb: reqwest::RequestBuilder,
    idle: Duration,
    api_key: Option<&str>,
) -> Result<reqwest::Response, LlmError> {
    let resp = match tokio::time::timeout(idle, rb.send()).await {
        Err(_) => {
            return Err(LlmError::new(
                LlmErrorKind::StreamStalled,
                format!("{provider}: no response within {} ms", idle.as_millis()),
            ))
        }
        Ok(Err(e)) => return Err(send_error(provider, &e)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if !status.is_success() {
        let headers = resp.headers().clone();
        let body = read_error_body(resp, idle).await;
        return Err(classify_http(provider, status.as_u16(), Some(&headers), &body, api_key));
    }
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"));
    if is_json {
        // Some gateways answer 200 with a JSON error instead of a stream.
        let body = read_error_body(resp, idle).await;
        if body.trim().is_empty() {
            return Err(empty_response(provider));
        }
        if let Ok(v) = serde_json::from_str::<Value>(&body) {
            if v.get("error").is_some_and(|e| !e.is_null()) {
                return Err(classify_stream_error(provider, &v, api_key));
            }
        }
        return Err(LlmError::new(
            LlmErrorKind::ResponseMalformed,
            format!(
                "{provider}: expected an event stream, got JSON: {}",
                redact(&truncate(&body, MAX_BODY_IN_MESSAGE), api_key)
            ),
        ));
    }
    Ok(resp)
}

/// The start of a body that is not a stream (an error, mostly): enough to classify and show it,
/// never more, whatever the server sends; empty when it does not arrive in time.
async fn read_error_body(resp: reqwest::Response, idle: Duration) -> String {
    match tokio::time::timeout(idle, crate::net::bounded::read_prefix(resp, MAX_ERROR_BODY)).await {
        Ok(Ok((body, _))) => String::from_utf8_lossy(&body).into_owned(),
        _ => String::new(),
    }
}

/// A successful answer that holds nothing: no body, or no event in it.
pub(crate) fn empty_response(provider: &str) -> LlmError {
    LlmError::new(
        LlmErrorKind::EmptyResponse,
        format!("{provider}: the server answered 200 with an empty response (no events)"),
    )
}

fn send_error(provider: &str, e: &reqwest::Error) -> LlmError {
    // Everything that fails before a response arrives (refused, reset, DNS, TLS, connect
    // timeout) is a connection problem; the request can be sent again.
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    LlmError::new(
        LlmErrorKind::ConnectionFailed,
        format!("{provider}: request failed: {msg}"),
    )
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn redact(s: &str, api_key: Option<&str>) -> String {
    match api_key {
        Some(k) if k.len() >= 4 && s.contains(k) => s.replace(k, "[redacted]"),
        _ => s.to_string(),
    }
}

/// Retry hints: `retry-after-ms` (OpenAI), `Retry-After` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let v = get("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// The provider's own words about the error: `error.message` plus type/code when present.
#[derive(Debug, Default)]
pub(crate) struct ErrorInfo {
    message: Option<String>,
    etype: Option<String>,
    code: Option<String>,
    numeric_code: Option<u16>,
}

fn error_info(v: &Value) -> ErrorInfo {
    let err = v.get("error").unwrap_or(v);
    let s = |k: &str| {
        err.get(k)
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .filter(|x| !x.is_empty())
    };
    let message = match err {
        Value::String(m) => Some(m.clone()),
        _ => s("message").or_else(|| v.get("message").and_then(|m| m.as_str()).map(String::from)),
    };
    ErrorInfo {
        message,
        etype: s("type"),
        code: s("code"),
        numeric_code: err
            .get("code")
            .and_then(|c| c.as_u64())
            .and_then(|c| u16::try_from(c).ok()),
    }
}

impl ErrorInfo {
    /// A typed chunk's error value, read as [`error_info`] reads it from a `Value`; `top_message`
    /// is the chunk's own `message` string, the fallback when the error has none.
    pub fn from_wire(err: &Json<'_, WireError<'_>>, top_message: Option<&str>) -> ErrorInfo {
        match err {
            Json::Str(m) => ErrorInfo::message_only(Some(m)),
            Json::Obj(e) => ErrorInfo::from_object(e, top_message),
            _ => ErrorInfo::message_only(top_message),
        }
    }

    pub fn from_object(e: &WireError<'_>, top_message: Option<&str>) -> ErrorInfo {
        let s = |j: &Json<'_>| j.str().filter(|x| !x.is_empty()).map(str::to_string);
        ErrorInfo {
            message: s(&e.message).or_else(|| top_message.map(str::to_string)),
            etype: s(&e.kind),
            code: s(&e.code),
            numeric_code: e.code.u64().and_then(|c| u16::try_from(c).ok()),
        }
    }

    pub fn message_only(message: Option<&str>) -> ErrorInfo {
        ErrorInfo {
            message: message.map(str::to_string),
            ..ErrorInfo::default()
        }
    }
}

fn mentions_context_overflow(text: &str) -> bool {
    const MARKERS: [&str; 7] = [
        "context_length_exceeded",
        "context length",
        "context window",
        "prompt is too long",
        "maximum context",
        "context_window",
        "too many tokens",
    ];
    MARKERS.iter().any(|m| text.contains(m))
}

fn mentions_model_not_found(text: &str) -> bool {
    text.contains("model_not_found")
        || text.contains("not_found_error")
        || (text.contains("model") && (text.contains("not found") || text.contains("does not exist")))
}

/// Classifies a non-2xx HTTP answer.
pub(crate) fn classify_http(
    provider: &str,
    status: u16,
    headers: Option<&HeaderMap>,
    body: &str,
    api_key: Option<&str>,
) -> LlmError {
    let lower = body.to_lowercase();
    let kind = match status {
        429 | 529 => LlmErrorKind::RateLimited,
        401 => LlmErrorKind::AuthenticationFailed,
        403 => LlmErrorKind::PermissionDenied,
        404 => LlmErrorKind::ModelNotFound,
        500..=599 => LlmErrorKind::ServerError,
        400..=499 if mentions_context_overflow(&lower) => LlmErrorKind::ContextWindowExceeded,
        400..=499 if mentions_model_not_found(&lower) => LlmErrorKind::ModelNotFound,
        400..=499 => LlmErrorKind::BadRequest,
        _ => LlmErrorKind::ResponseMalformed,
    };
    let detail = serde_json::from_str::<Value>(body)
        .ok()
        .map(|v| error_info(&v))
        .and_then(|i| {
            let m = i.message?;
            Some(match i.etype.or(i.code) {
                Some(t) => format!("{t}: {m}"),
                None => m,
            })
        })
        .unwrap_or_else(|| body.trim().to_string());
    let message = if detail.is_empty() {
        format!("{provider} returned HTTP {status}")
    } else {
        format!(
            "{provider} returned HTTP {status}: {}",
            truncate(&detail, MAX_BODY_IN_MESSAGE)
        )
    };
    LlmError {
        kind,
        message: redact(&message, api_key),
        retry_after: headers.and_then(retry_after),
        status: Some(status),
        unfinished: false,
    }
}

/// Classifies an error object delivered inside a 200 stream (OpenAI `{"error":{..}}`, Anthropic
/// `{"type":"error","error":{..}}`), where only the error's type/code say what went wrong.
pub(crate) fn classify_stream_error(provider: &str, v: &Value, api_key: Option<&str>) -> LlmError {
    stream_error(provider, error_info(v), &v.to_string(), api_key)
}

/// Classifies a stream error from what the chunk said about it; `body` is the chunk's text.
pub(crate) fn stream_error(provider: &str, info: ErrorInfo, body: &str, api_key: Option<&str>) -> LlmError {
    if let Some(status) = info.numeric_code.filter(|c| (400..=599).contains(c)) {
        // vLLM and friends put the HTTP status they would have used in `code`.
        let mut e = classify_http(provider, status, None, body, api_key);
        e.status = None;
        return e;
    }
    let tags = format!(
        "{} {}",
        info.etype.as_deref().unwrap_or(""),
        info.code.as_deref().unwrap_or("")
    )
    .to_lowercase();
    let all = format!("{tags} {}", info.message.as_deref().unwrap_or("")).to_lowercase();
    let kind = if tags.contains("overloaded") || tags.contains("rate_limit") {
        LlmErrorKind::RateLimited
    } else if mentions_context_overflow(&all) {
        LlmErrorKind::ContextWindowExceeded
    } else if tags.contains("model_not_found") || tags.contains("not_found") {
        LlmErrorKind::ModelNotFound
    } else if tags.contains("authentication") || tags.contains("invalid_api_key") {
        LlmErrorKind::AuthenticationFailed
    } else if tags.contains("permission") {
        LlmErrorKind::PermissionDenied
    } else if tags.contains("invalid_request") || tags.contains("request_too_large") {
        LlmErrorKind::BadRequest
    } else {
        // api_error, server_error and anything unknown: the provider failed mid-answer, which
        // is usually transient.
        LlmErrorKind::ServerError
    };
    let label = info.etype.or(info.code).unwrap_or_else(|| "error".into());
    let message = format!(
        "{provider} stream error {label}: {}",
        truncate(info.message.as_deref().unwrap_or("(no message)"), MAX_BODY_IN_MESSAGE)
    );
    LlmError {
        kind,
        message: redact(&message, api_key),
        retry_after: None,
        status: None,
        unfinished: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn http_statuses() {
        let k = |s: u16, body: &str| classify_http("p", s, None, body, None).kind;
        assert_eq!(k(429, ""), LlmErrorKind::RateLimited);
        assert_eq!(k(529, ""), LlmErrorKind::RateLimited);
        assert_eq!(k(502, ""), LlmErrorKind::ServerError);
        assert_eq!(k(599, ""), LlmErrorKind::ServerError);
        assert_eq!(k(401, ""), LlmErrorKind::AuthenticationFailed);
        assert_eq!(k(403, ""), LlmErrorKind::PermissionDenied);
        assert_eq!(k(404, ""), LlmErrorKind::ModelNotFound);
        assert_eq!(
            k(400, r#"{"error":{"code":"model_not_found","message":"x"}}"#),
            LlmErrorKind::ModelNotFound
        );
        assert_eq!(
            k(
                413,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 1 > 0"}}"#
            ),
            LlmErrorKind::ContextWindowExceeded
        );
        assert_eq!(k(422, "nope"), LlmErrorKind::BadRequest);
    }

    #[test]
    fn message_is_redacted_and_truncated() {
        let body = format!(
            r#"{{"error":{{"message":"bad key sk-secret-123 {}","type":"invalid_request_error"}}}}"#,
            "x".repeat(2000)
        );
        let e = classify_http("openai", 401, None, &body, Some("sk-secret-123"));
        assert!(!e.message.contains("sk-secret-123"));
        assert!(e.message.contains("401"));
        assert!(e.message.len() < 2200);
        assert!(e.message.len() > 2000, "the body is kept up to 2 KB");
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        let when = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert("retry-after", HeaderValue::from_str(&when).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(25) && d <= Duration::from_secs(30));
        h.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
    }

    #[test]
    fn stream_errors() {
        let k = |v: Value| classify_stream_error("p", &v, None).kind;
        use serde_json::json;
        assert_eq!(
            k(json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})),
            LlmErrorKind::RateLimited
        );
        assert_eq!(
            k(json!({"type":"error","error":{"type":"api_error","message":"boom"}})),
            LlmErrorKind::ServerError
        );
        assert_eq!(
            k(json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}})),
            LlmErrorKind::ContextWindowExceeded
        );
        assert_eq!(
            k(json!({"type":"error","error":{"type":"invalid_request_error","message":"bad"}})),
            LlmErrorKind::BadRequest
        );
        assert_eq!(
            k(json!({"error":{"message":"slow down","type":"BadRequestError","code":429}})),
            LlmErrorKind::RateLimited
        );
    }
}
