//! The test MCP server over stdio, for the tests of servers run as child processes.

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    testkit::mcp_server::serve_stdio().await
}
