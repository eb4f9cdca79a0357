//! A real MCP server for the tests, written with `rmcp`'s server side: served over streamable
//! HTTP on loopback (sessions of the 2025 revisions, or the stateless 2026-07-28 revision) or
//! over stdio by the `mcp-stdio-server` binary.
//!
//! Its tools: `echo {text}`, `fail` (an `isError` result), `slow {ms}`, `hang` (until cancelled;
//! counts the cancellations it saw), `huge {bytes}`, `add_tool` (adds `extra` and tells the client
//! its tools changed), `pid` (the serving process's id) and `exit` (ends the process: a dying
//! stdio server).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

/// What a test can see of the server's side.
#[derive(Default)]
pub struct McpServerState {
    /// `add_tool` was called: `extra` is listed.
    pub extra: AtomicBool,
    /// `hang` calls that saw their cancellation (`notifications/cancelled`).
    pub cancelled: AtomicUsize,
    /// `hang` calls started.
    pub hanging: AtomicUsize,
    /// `tools/list` requests answered.
    pub listings: AtomicUsize,
    /// `tools/call` requests answered, of any tool.
    pub calls: AtomicUsize,
    /// Every request's `Authorization` header, as received (HTTP only).
    pub authorization: Mutex<Vec<String>>,
    /// Every request's `MCP-Protocol-Version` header (HTTP only).
    pub protocol_versions: Mutex<Vec<String>>,
    /// Every request's `Mcp-Session-Id` header (HTTP only).
    pub session_ids: Mutex<Vec<String>>,
}

/// The server's tools, with the newest protocol revision it speaks.
#[derive(Clone)]
pub struct TestTools {
    pub state: Arc<McpServerState>,
    pub newest: ProtocolVersion,
}

impl TestTools {
    pub fn new(newest: ProtocolVersion) -> Self {
        TestTools {
            state: Arc::default(),
            newest,
        }
    }
}

fn schema(properties: Value, required: &[&str]) -> Map<String, Value> {
    match json!({"type": "object", "properties": properties, "required": required}) {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s)])
}

impl ServerHandler for TestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("testkit-mcp", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&self.newest))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.state.listings.fetch_add(1, Ordering::SeqCst);
        let none = || schema(json!({}), &[]);
        let mut tools = vec![
            Tool::new(
                "echo",
                "Says the text back",
                schema(json!({"text": {"type": "string"}}), &["text"]),
            ),
            Tool::new("fail", "Always fails", none()),
            Tool::new(
                "slow",
                "Answers after ms milliseconds",
                schema(json!({"ms": {"type": "integer"}}), &["ms"]),
            ),
            Tool::new("hang", "Never answers", none()),
            Tool::new(
                "huge",
                "Returns bytes bytes of text",
                schema(json!({"bytes": {"type": "integer"}}), &["bytes"]),
            ),
            Tool::new("add_tool", "Adds the tool extra", none()),
            Tool::new("pid", "The server's process id", none()),
            Tool::new("exit", "Ends the server process", none()),
        ];
        if self.state.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new("extra", "Added at run time", none()));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        self.state.calls.fetch_add(1, Ordering::SeqCst);
        let result = match request.name.as_ref() {
            "echo" => text(args.get("text").and_then(Value::as_str).unwrap_or_default()),
            "fail" => CallToolResult::error(vec![ContentBlock::text("it failed on purpose")]),
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text("done")
            }
            "hang" => {
                self.state.hanging.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = context.ct.cancelled() => {
                        self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                        text("cancelled")
                    }
                    _ = tokio::time::sleep(Duration::from_secs(3600)) => text("woke"),
                }
            }
            "huge" => text("x".repeat(args.get("bytes").and_then(Value::as_u64).unwrap_or(0) as usize)),
            "add_tool" => {
                self.state.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("added")
            }
            "extra" if self.state.extra.load(Ordering::SeqCst) => text("extra"),
            "pid" => text(std::process::id().to_string()),
            "exit" => std::process::exit(3),
            other => return Err(ErrorData::invalid_params(format!("no tool {other:?}"), None)),
        };
        Ok(result.into())
    }
}

/// An MCP server on a loopback port; stops when dropped.
pub struct McpHttpServer {
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    pub state: Arc<McpServerState>,
    stop: CancellationToken,
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn header(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

impl McpHttpServer {
    /// Speaks revisions up to `newest`; `sessions`: the 2025 revisions' `Mcp-Session-Id`
    /// sessions (false: every request stands alone).
    pub async fn start(newest: ProtocolVersion, sessions: bool) -> McpHttpServer {
        let tools = TestTools::new(newest);
        let state = tools.state.clone();
        let stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(sessions)
            .with_cancellation_token(stop.child_token());
        let router = if sessions {
            let service = StreamableHttpService::new(
                move || Ok(tools.clone()),
                Arc::new(LocalSessionManager::default()),
                config,
            );
            axum::Router::new().nest_service("/mcp", service)
        } else {
            let service = StreamableHttpService::new(
                move || Ok(tools.clone()),
                Arc::new(NeverSessionManager::default()),
                config,
            );
            axum::Router::new().nest_service("/mcp", service)
        };
        let seen = state.clone();
        let router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let seen = seen.clone();
                async move {
                    let headers = request.headers();
                    let lists = [
                        ("authorization", &seen.authorization),
                        ("mcp-protocol-version", &seen.protocol_versions),
                        ("mcp-session-id", &seen.session_ids),
                    ];
                    for (name, list) in lists {
                        if let Some(value) = header(headers, name) {
                            list.lock().unwrap().push(value);
                        }
                    }
                    next.run(request).await
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(until.cancelled_owned())
                .await;
        });
        McpHttpServer { url, state, stop }
    }
}

/// Serves the tools over stdin/stdout until the client goes away (the `mcp-stdio-server` binary).
pub async fn serve_stdio() -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let running = TestTools::new(ProtocolVersion::V_2025_11_25)
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}

/// The path of the `mcp-stdio-server` binary, built beside the test binaries.
pub fn stdio_server_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/debug/deps/<test> → target/debug/mcp-stdio-server
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("mcp-stdio-server")
}
