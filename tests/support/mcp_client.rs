//! The official Rust SDK's MCP client (rmcp) over streamable HTTP, pointed at a test desk's `/mcp`.

use agentdesk::mcp_client::http_client::GuardedHttp;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Map, Value};

use super::TestApp;

pub type Client = RunningService<RoleClient, ClientConfig>;

fn transport(app: &TestApp, token: Option<&str>) -> StreamableHttpClientTransport<GuardedHttp> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.url));
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    StreamableHttpClientTransport::with_client(GuardedHttp(reqwest::Client::new()), config)
}

/// A client of `revision`: the `initialize` handshake for the 2025 ones, `server/discover` for
/// 2026-07-28.
pub async fn connect(app: &TestApp, token: Option<&str>, revision: ProtocolVersion) -> Result<Client, String> {
    let mut info = ClientConfig::default();
    info.protocol_version = revision.clone();
    info.client_info = Implementation::new("agentdesk-tests", "1");
    let lifecycle = if revision.has_initialize() {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![revision],
        }
    };
    info.serve_with_lifecycle(transport(app, token), lifecycle)
        .await
        .map_err(|e| e.to_string())
}

pub fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("arguments are an object")
}

pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}
