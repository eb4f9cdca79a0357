//! The value a `${env:…}` template of an MCP server expands to never reaches a log line, at any
//! level, whether the server answers or cannot be reached. Its own test binary, since it installs
//! the process's log subscriber.

mod support;

use rmcp::model::ProtocolVersion;
use serde_json::json;
use support::logs::CapturedLogs;
use support::{StatusCode, TestApp};
use testkit::mcp_server::McpHttpServer;

#[tokio::test]
async fn expanded_mcp_secrets_are_never_logged() {
    const SECRET: &str = "s3cret-logged-mcp-token-5521";
    assert_eq!(
        std::env::var("AGENTDESK_TEST_MCP_LOG_SECRET").as_deref(),
        Ok(SECRET),
        "see .cargo/config.toml"
    );
    let logs = CapturedLogs::install("debug");

    let app = TestApp::spawn_with(|c| c.mcp_allow_private = Some(true)).await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    let (status, view) = app
        .put(
            "/v1/mcp-servers/logged",
            json!({"url": server.url, "headers": {"Authorization": "Bearer ${env:AGENTDESK_TEST_MCP_LOG_SECRET}"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(view["status"], "ok");
    let (status, view) = app
        .put(
            "/v1/mcp-servers/gone",
            json!({"url": "http://127.0.0.1:1/mcp?key=${env:AGENTDESK_TEST_MCP_LOG_SECRET}",
                   "headers": {"X-Key": "${env:AGENTDESK_TEST_MCP_LOG_SECRET}"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_ne!(view["status"], "ok");
    app.post("/v1/mcp-servers/gone/refresh", json!({})).await;

    let text = logs.text();
    assert!(text.contains("MCP server unavailable"), "the failure was logged");
    assert!(!text.contains(SECRET), "a log line holds the secret");
}
