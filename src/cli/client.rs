//! A small JSON client of the agentdesk API: the base URL, the bearer token, and errors that say
//! what went wrong in one line (the API's own message, or which URL could not be reached).

use std::fmt;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::exit;

#[derive(Debug)]
pub enum CliError {
    /// A bad argument or file.
    Usage(String),
    /// The API answered with an error.
    Api {
        status: StatusCode,
        code: String,
        message: String,
    },
    /// The service could not be reached (or stopped answering).
    Connection { url: String, detail: String },
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => exit::USAGE,
            CliError::Api { .. } => exit::API,
            CliError::Connection { .. } => exit::CONNECTION,
        }
    }

    /// The API's answer was 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CliError::Api { status, .. } if *status == StatusCode::NOT_FOUND)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(message) => f.write_str(message),
            CliError::Api { status, code, message } => write!(f, "{message} ({code}, HTTP {})", status.as_u16()),
            CliError::Connection { url, detail } => write!(
                f,
                "cannot reach the agentdesk service at {url} ({detail}); is it running? set --url or AGENTDESK_URL"
            ),
        }
    }
}

impl std::error::Error for CliError {}

#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    /// Sent as `AgentDesk-Project`.
    project: Option<String>,
    http: reqwest::Client,
    /// Without an overall timeout, for event streams.
    stream_http: reqwest::Client,
}

impl Client {
    pub fn new(base_url: &str, token: Option<&str>) -> Result<Client, CliError> {
        let base = base_url.trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base).map_err(|e| CliError::Usage(format!("--url {base_url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(CliError::Usage(format!("--url {base_url:?}: use an http or https URL")));
        }
        let build = |timeout: Option<Duration>| {
            let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
            if let Some(t) = timeout {
                builder = builder.timeout(t);
            }
            builder
                .build()
                .map_err(|e| CliError::Usage(format!("cannot build an HTTP client: {e}")))
        };
        Ok(Client {
            base,
            token: token.map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned),
            project: None,
            http: build(Some(Duration::from_secs(60)))?,
            stream_http: build(None)?,
        })
    }

    /// Acts in `project` (None: the token's own, else `default`).
    pub fn in_project(mut self, project: Option<&str>) -> Client {
        self.project = project.map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The project it acts in, when one was named.
    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    fn request(&self, http: &reqwest::Client, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut builder = http.request(method, format!("{}{path}", self.base));
        if let Some(project) = &self.project {
            builder = builder.header("AgentDesk-Project", project);
        }
        match &self.token {
            Some(t) => builder.bearer_auth(t),
            None => builder,
        }
    }

    /// A request whose answer is read as JSON; a non-2xx answer is `CliError::Api`.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        let mut request = self.request(&self.http, method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.connection_error(&e))?;
        let status = response.status();
        // What the service warns of (a ticket no agent takes), on standard error so that scripts
        // reading the output are not disturbed.
        if let Some(warning) = response.headers().get("agentdesk-warning") {
            eprintln!("warning: {}", String::from_utf8_lossy(warning.as_bytes()));
        }
        let bytes = response.bytes().await.map_err(|e| self.connection_error(&e))?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        if status.is_success() {
            Ok(value)
        } else {
            Err(api_error(status, &value))
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::PUT, path, Some(body)).await
    }

    /// Opens an event stream; a non-2xx answer is `CliError::Api`.
    pub async fn open_stream(&self, path: &str, last_event_id: Option<&str>) -> Result<reqwest::Response, CliError> {
        let mut request = self
            .request(&self.stream_http, Method::GET, path)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.map_err(|e| self.connection_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = response.bytes().await.unwrap_or_default();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Err(api_error(status, &value))
    }

    pub fn connection_error(&self, err: &reqwest::Error) -> CliError {
        CliError::Connection {
            url: self.base.clone(),
            detail: describe(err),
        }
    }
}

/// The innermost cause reads best ("Connection refused (os error 111)").
fn describe(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        return "timed out".into();
    }
    let mut source: &dyn std::error::Error = err;
    while let Some(inner) = source.source() {
        source = inner;
    }
    source.to_string()
}

fn api_error(status: StatusCode, body: &Value) -> CliError {
    let error = &body["error"];
    let message = match (error["message"].as_str(), body.as_str()) {
        (Some(m), _) => m.to_owned(),
        (None, Some(text)) if !text.trim().is_empty() => text.trim().chars().take(300).collect(),
        _ => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    CliError::Api {
        status,
        code: error["code"].as_str().unwrap_or("error").to_owned(),
        message,
    }
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
