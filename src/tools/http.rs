//! HTTP tools: a tool defined through the API (`PUT /v1/tools/{name}`) whose call is one HTTP
//! request. `{field}` placeholders in the URL are filled from the input (URL-encoded) and taken
//! out of it; the rest goes as a JSON body (POST, PUT, PATCH) or as query parameters (GET,
//! DELETE). `${env:NAME}` templates in the URL and headers are expanded here, as the request is
//! built, and nowhere else: errors are written from the templates, never from the sent request.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::{Tool, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};
use crate::domain::HttpToolDef;
use crate::net::{expand_env, is_forbidden, AddressGuard};

/// How much of a response body is read; the rest is cut (a body this large is offloaded anyway).
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// How much of a failed response's body the model is shown.
const ERROR_BODY_BYTES: usize = 2 * 1024;

/// The one client every HTTP tool call goes through (connection reuse), with the address guard
/// built in. Cheap to clone.
#[derive(Clone)]
pub struct HttpToolClient {
    client: reqwest::Client,
    guard: AddressGuard,
}

impl HttpToolClient {
    pub fn new(guard: AddressGuard) -> HttpToolClient {
        let client = guard
            .client_builder()
            .user_agent(concat!("agentdesk/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a TLS backend and a resolver are available");
        HttpToolClient { client, guard }
    }

    /// The tool a definition describes, sending through this client.
    pub fn tool(&self, def: HttpToolDef) -> HttpTool {
        HttpTool {
            def,
            client: self.clone(),
        }
    }
}

pub struct HttpTool {
    def: HttpToolDef,
    client: HttpToolClient,
}

#[async_trait]
impl Tool for HttpTool {
    fn name(&self) -> &str {
        &self.def.name
    }

    fn description(&self) -> &str {
        &self.def.description
    }

    fn input_schema(&self) -> &Value {
        &self.def.input_schema
    }

    fn requires_approval(&self) -> bool {
        self.def.requires_approval
    }

    fn approval_deadline(&self) -> Option<crate::domain::tool::ApprovalDeadline> {
        crate::domain::tool::ApprovalDeadline::of(self.def.approval_timeout_secs, self.def.on_timeout)
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        let request = match self.request(ctx.call_id, input) {
            Ok(request) => request,
            Err(failure) => return failure.into(),
        };
        // Dropping the request future on cancel closes its connection: the server sees it go.
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => ToolFailure::new(ToolErrorKind::Internal, "the call was cancelled").into(),
            outcome = self.send(request) => outcome.into(),
        }
    }
}

impl HttpTool {
    /// The request a call sends. Err (nothing sent) for a missing placeholder value, a URL that
    /// does not parse once filled, or an address the guard refuses.
    fn request(&self, call_id: &str, input: &Value) -> Result<reqwest::RequestBuilder, ToolFailure> {
        let mut rest = match input {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let filled = fill_placeholders(&self.def.url, &mut rest)?;
        let url = reqwest::Url::parse(&expand_env(&filled)).map_err(|e| {
            ToolFailure::invalid(format!(
                "the tool's URL {:?} is not valid once filled: {e}",
                self.def.url
            ))
        })?;
        self.client
            .guard
            .check_url(&url)
            .map_err(|e| forbidden(&e.to_string()))?;
        let mut headers = HeaderMap::new();
        for (name, template) in &self.def.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ToolFailure::invalid(format!("invalid header name {name:?}")))?;
            // The message names the header, never the expanded value.
            let value = HeaderValue::from_str(&expand_env(template)).map_err(|_| {
                ToolFailure::invalid(format!("header {name} is not valid once its secrets are expanded"))
            })?;
            headers.insert(name, value);
        }
        if let Ok(key) = HeaderValue::from_str(call_id) {
            headers.insert("idempotency-key", key);
        }
        let method = reqwest::Method::from_bytes(self.def.method.as_str().as_bytes()).unwrap_or(reqwest::Method::POST);
        let builder = self
            .client
            .client
            .request(method, url)
            .headers(headers)
            .timeout(Duration::from_millis(self.def.timeout_ms.max(1) as u64));
        Ok(if self.def.method.has_body() {
            builder.json(&Value::Object(rest))
        } else {
            let query: Vec<(String, String)> = rest.into_iter().map(|(k, v)| (k, plain(&v))).collect();
            builder.query(&query)
        })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<String, ToolFailure> {
        let response = request.send().await.map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        let limit = if status.is_success() {
            MAX_BODY_BYTES
        } else {
            ERROR_BODY_BYTES
        };
        let (body, cut) = crate::net::bounded::read_prefix(response, limit)
            .await
            .map_err(|e| self.transport_failure(e))?;
        let mut text = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            return Err(ToolFailure::new(
                ToolErrorKind::HttpStatus,
                format!(
                    "{} {} answered HTTP {status}: {text}",
                    self.def.method.as_str(),
                    self.def.name
                ),
            ));
        }
        if cut {
            text.push_str(&format!("\n[cut: the response was longer than {MAX_BODY_BYTES} bytes]"));
        }
        Ok(text)
    }

    /// A request that got no (whole) answer. The error is shown without its URL, which may hold
    /// an expanded secret.
    fn transport_failure(&self, err: reqwest::Error) -> ToolFailure {
        if is_forbidden(&err) {
            let host = host_of(&self.def.url);
            return forbidden(&format!(
                "forbidden_address: {host} resolves to a loopback, private, link-local or metadata address \
                 (set AGENTDESK_ALLOW_PRIVATE_URLS=true to allow it)"
            ));
        }
        if err.is_timeout() {
            return ToolFailure::new(
                ToolErrorKind::Timeout,
                format!("{} got no answer within {} ms", self.def.name, self.def.timeout_ms),
            );
        }
        let err = err.without_url();
        let mut detail = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            detail = format!("{detail}: {s}");
            source = s.source();
        }
        ToolFailure::new(
            ToolErrorKind::ConnectionFailed,
            format!("{} could not reach {}: {detail}", self.def.name, host_of(&self.def.url)),
        )
    }
}

fn forbidden(message: &str) -> ToolFailure {
    ToolFailure::new(ToolErrorKind::ForbiddenAddress, message)
}

/// The host part of the URL template, for messages (a template is no secret).
fn host_of(template: &str) -> String {
    reqwest::Url::parse(template)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "the tool's host".into())
}

/// Replaces each `{field}` (letters, digits, `_`, `-`; not `${…}`) with the input's value,
/// percent-encoded, and removes the field from `input`.
pub fn fill_placeholders(template: &str, input: &mut Map<String, Value>) -> Result<String, ToolFailure> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let is_template = rest[..start].ends_with('$');
        let after = &rest[start + 1..];
        let end = after.find('}');
        let field = end.map(|e| &after[..e]).filter(|f| {
            !is_template && !f.is_empty() && f.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        });
        match (field, end) {
            (Some(field), Some(end)) => {
                out.push_str(&rest[..start]);
                let value = input.remove(field).filter(|v| !v.is_null()).ok_or_else(|| {
                    ToolFailure::invalid(format!("the input needs `{field}` (it is part of the URL)"))
                })?;
                out.push_str(&percent_encode(&plain(&value)));
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=start]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A value as text: a string as it is, anything else as JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Everything but the unreserved characters, encoded: safe in a path segment and a query.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled_encoded_and_taken_from_the_input() {
        let mut input = json!({"city": "São Paulo/x", "n": 3, "rest": true})
            .as_object()
            .unwrap()
            .clone();
        let url = fill_placeholders("https://h/{city}/n{n}?k=${env:KEY}&x={}", &mut input).unwrap();
        assert_eq!(url, "https://h/S%C3%A3o%20Paulo%2Fx/n3?k=${env:KEY}&x={}");
        assert_eq!(Value::Object(input), json!({"rest": true}));
        let mut empty = Map::new();
        let err = fill_placeholders("https://h/{id}", &mut empty).unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidInput);
        // A value holding a template is encoded, so it is never expanded.
        let mut sneaky = json!({"q": "${env:KEY}"}).as_object().unwrap().clone();
        let url = fill_placeholders("https://h/{q}", &mut sneaky).unwrap();
        assert_eq!(expand_env(&url), "https://h/%24%7Benv%3AKEY%7D");
    }
}
