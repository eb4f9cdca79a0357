//! One connection to one MCP server: the transport (streamable HTTP through the guarded client,
//! or a child process over stdio), the protocol lifecycle (the 2026 `server/discover`, falling
//! back to the `initialize` handshake of the 2025 revisions), and the tool listing.

use std::collections::{BTreeMap, HashMap};

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientCacheConfig, ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};

use super::http_client::GuardedHttp;
use crate::domain::McpTransport;
use crate::net::expand_env;
use crate::net::guard::AddressGuard;

/// The revision asked for in the `initialize` handshake (a server may answer with an older one).
pub(crate) const LEGACY_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;
/// The longest a connection (handshake included) may take, whatever the server's call timeout.
const MAX_CONNECT: Duration = Duration::from_secs(30);

/// Values that `${env:…}` templates expanded to: they are cut out of every error message, since
/// a transport error may quote a URL or a header.
#[derive(Default)]
pub(crate) struct Secrets(Vec<String>);

impl Secrets {
    fn expand(&mut self, template: &str) -> String {
        let expanded = expand_env(template).into_owned();
        if expanded != template {
            // Whatever the templates put in, longer than a trivial value.
            let mut rest = template;
            while let Some(start) = rest.find("${env:") {
                let after = &rest[start + 6..];
                let Some(end) = after.find('}') else { break };
                if let Ok(value) = std::env::var(&after[..end]) {
                    if value.len() >= 4 {
                        self.0.push(value);
                    }
                }
                rest = &after[end + 1..];
            }
        }
        expanded
    }

    /// `message` with every expanded value replaced by `***`.
    pub fn redact(&self, message: &str) -> String {
        let mut out = message.to_owned();
        for secret in &self.0 {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }
}

/// An error and its sources, each once.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = e.source();
    }
    message
}

/// A transport's error as a person reads it (rmcp's wrappers name Rust types, and hide the
/// HTTP client's error from the source chain).
pub(crate) fn transport_text(err: &(dyn std::error::Error + 'static)) -> String {
    if let Some(StreamableHttpError::Client(inner)) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return format!("cannot reach the server: {}", chain(inner));
    }
    chain(err)
}

/// A failure to connect, as the server's status shows it (never holding a secret).
fn describe_error(err: &ClientInitializeError, secrets: &Secrets) -> String {
    let mut message = match err {
        ClientInitializeError::TransportError { error, .. } => transport_text(&*error.error),
        other => chain(other),
    };
    // The guard's refusal leads, whatever wrapped it.
    if let Some(at) = message.find("forbidden_address:") {
        message = message[at..].to_owned();
    }
    secrets.redact(&message)
}

fn lifecycle() -> ClientLifecycleMode {
    // The stateless 2026 revision first; a 2025 server answers the probe with an error and gets
    // the `initialize` handshake of its revision (negotiated down from 2025-11-25).
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(LEGACY_VERSION),
    }
}

/// Runs the lifecycle on a transport from `make`; a server that answers the 2026 probe with
/// only 2025 revisions gets the `initialize` handshake on a fresh transport.
async fn handshake<H, T, E, A>(
    handler: H,
    make: impl Fn() -> Result<T, String>,
    secrets: &Secrets,
) -> Result<RunningService<RoleClient, H>, String>
where
    H: ClientHandler + Clone,
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match handler.clone().serve_with_lifecycle(make()?, lifecycle()).await {
        Ok(running) => Ok(running),
        Err(ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. })
            if !server_supported.is_empty() && server_supported.iter().all(|v| v.has_initialize()) =>
        {
            handler
                .serve_with_lifecycle(make()?, ClientLifecycleMode::Initialize)
                .await
                .map_err(|e| describe_error(&e, secrets))
        }
        Err(e) => Err(describe_error(&e, secrets)),
    }
}

/// Connects and completes the lifecycle. Err is the status to show, secrets cut out; Ok holds
/// the values the templates expanded to, to cut out of the connection's later errors.
pub(crate) async fn connect<H: ClientHandler + Clone>(
    transport: &McpTransport,
    guard: AddressGuard,
    http: &reqwest::Client,
    handler: H,
) -> Result<(RunningService<RoleClient, H>, Secrets), String> {
    let mut secrets = Secrets::default();
    let connecting = async {
        match transport {
            McpTransport::Http { url, headers } => {
                let url = secrets.expand(url);
                let parsed = reqwest::Url::parse(&url).map_err(|e| format!("invalid url: {e}"))?;
                guard.check_url(&parsed).map_err(|e| e.to_string())?;
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name =
                        HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid header name {name:?}"))?;
                    let value = HeaderValue::from_str(&secrets.expand(value))
                        .map_err(|_| format!("the value of header {name} is not a valid header value"))?;
                    custom.insert(name, value);
                }
                let make = || {
                    let config =
                        StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom.clone());
                    Ok(StreamableHttpClientTransport::with_client(
                        GuardedHttp(http.clone()),
                        config,
                    ))
                };
                handshake(handler, make, &secrets).await
            }
            McpTransport::Stdio { command, args, env } => {
                let env: BTreeMap<&String, String> = env.iter().map(|(k, v)| (k, secrets.expand(v))).collect();
                let make = || {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).envs(&env).kill_on_drop(true);
                    let (child, _) = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
                    Ok(child)
                };
                handshake(handler, make, &secrets).await
            }
        }
    };
    let running = tokio::time::timeout(MAX_CONNECT, connecting)
        .await
        .map_err(|_| format!("no answer to the MCP handshake within {} s", MAX_CONNECT.as_secs()))
        .and_then(|connected| connected)?;
    // Every listing asks the server: a re-listing must see the change it was asked for.
    running
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok((running, secrets))
}
