//! MCP servers: the API, every protocol revision against a real MCP server (testkit's, written
//! with rmcp's server side), tools that fail, time out, hang or return a lot, servers that change
//! their tools or speak malformed JSON-RPC, the address guard, and secrets that never leak.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agentdesk::db;
use agentdesk::domain::{ProjectId, Ticket};

const DEFAULT: ProjectId = ProjectId::DEFAULT;
use agentdesk::mcp_client::McpHub;
use agentdesk::tools::{Tool, ToolContext, ToolErrorKind, ToolOutcome};
use axum::response::IntoResponse;
use rmcp::model::ProtocolVersion;
use serde_json::{json, Value};
use support::{assert_error, StatusCode, TestApp};
use testkit::mcp_server::McpHttpServer;
use tokio_util::sync::CancellationToken;

async fn app() -> TestApp {
    TestApp::spawn_with(|c| c.mcp_allow_private = Some(true)).await
}

fn hub(app: &TestApp) -> &McpHub {
    &app.app().mcp
}

async fn ticket(app: &TestApp) -> Ticket {
    let created = app.create_ticket(json!({"task": "use the tools"})).await;
    let id = created["id"].as_str().unwrap().parse().unwrap();
    db::tickets::find_by_id(&app.pool, id).await.unwrap().unwrap()
}

async fn call(app: &TestApp, tool: &Arc<dyn Tool>, input: Value, cancel: CancellationToken) -> ToolOutcome {
    let ticket = ticket(app).await;
    let ctx = ToolContext {
        pool: &app.pool,
        fence: db::claims::Fence {
            ticket_id: ticket.id,
            generation: 0,
        },
        ticket: &ticket,
        agent: "default",
        call_id: "call_test",
        cancel,
    };
    tool.call(&ctx, &input).await
}

async fn tool(app: &TestApp, name: &str) -> Arc<dyn Tool> {
    let mut tools = hub(app).resolve(DEFAULT, name).await;
    assert_eq!(tools.len(), 1, "{name} resolves to one tool");
    tools.remove(0)
}

async fn put_server(app: &TestApp, name: &str, body: Value) -> Value {
    let (status, view) = app.put(&format!("/v1/mcp-servers/{name}"), body).await;
    assert!(
        status == StatusCode::CREATED || status == StatusCode::OK,
        "{status}: {view}"
    );
    view
}

fn tool_names(view: &Value) -> Vec<String> {
    view["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["qualified_name"].as_str().unwrap().to_owned())
        .collect()
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let check = || {
        let checked = check();
        async { checked.await.then_some(()) }
    };
    support::eventually(what, Duration::from_secs(10), check).await
}

#[tokio::test]
async fn servers_are_defined_read_replaced_and_deleted_through_the_api() {
    let app = app().await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;

    let (status, view) = app
        .put(
            "/v1/mcp-servers/files",
            json!({"url": server.url, "timeout_ms": 5000, "requires_approval": ["exit"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(view["status"], "ok");
    assert_eq!(view["source"], "api");
    assert!(tool_names(&view).contains(&"files__echo".to_string()));
    let exit = view["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "exit")
        .unwrap();
    assert_eq!(exit["requires_approval"], true);

    let (status, got) = app.get("/v1/mcp-servers/files").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["tools"], view["tools"]);
    let (_, list) = app.get("/v1/mcp-servers").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, page) = app.get("/v1/mcp-servers?limit=1").await;
    assert_eq!(
        (page["items"][0]["name"].as_str(), &page["next_cursor"]),
        (Some("files"), &Value::Null)
    );
    for bad in ["limit=0", "cursor=zzz"] {
        support::assert_error(
            &app.get(&format!("/v1/mcp-servers?{bad}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }

    assert!(hub(&app).knows(DEFAULT, "mcp:files"));
    assert!(hub(&app).knows(DEFAULT, "files__echo"));
    assert!(!hub(&app).knows(DEFAULT, "mcp:nope"));
    assert!(!hub(&app).knows(DEFAULT, "nope__echo"));
    assert!(!hub(&app).knows(DEFAULT, "files"));
    // An agent may name the server's listed tools, not others of a server whose listing is known.
    let (status, body) = app
        .put(
            "/v1/agents/filer",
            json!({"tools": ["close_ticket", "files__echo", "mcp:files"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let unlisted = app
        .put("/v1/agents/filer", json!({"tools": ["close_ticket", "files__nosuch"]}))
        .await;
    assert_error(&unlisted, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert!(unlisted.1["error"]["message"]
        .as_str()
        .unwrap()
        .contains("files__nosuch"));
    let all = hub(&app).resolve(DEFAULT, "mcp:files").await;
    assert_eq!(all.len(), 8);
    assert!(all.iter().any(|t| t.name() == "files__exit" && t.requires_approval()));
    assert!(all.iter().any(|t| t.name() == "files__echo" && !t.requires_approval()));

    // Replaced: the new definition applies at once.
    let (status, replaced) = app
        .put(
            "/v1/mcp-servers/files",
            json!({"url": server.url, "requires_approval": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["timeout_ms"], 60000);
    let echo = tool(&app, "files__echo").await;
    assert!(echo.requires_approval());

    let (status, _) = app.delete("/v1/mcp-servers/files").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_error(
        &app.get("/v1/mcp-servers/files").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.delete("/v1/mcp-servers/files").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert!(!hub(&app).knows(DEFAULT, "mcp:files"));
    assert!(hub(&app).resolve(DEFAULT, "files__echo").await.is_empty());
    // A tool resolved before the server went is missing now, not a crash.
    let gone = call(&app, &echo, json!({"text": "x"}), CancellationToken::new()).await;
    assert!(
        matches!(
            gone,
            ToolOutcome::Failed {
                kind: ToolErrorKind::UnknownTool,
                ..
            }
        ),
        "{gone:?}"
    );
}

#[tokio::test]
async fn bad_bodies_and_names_are_422() {
    let app = app().await;
    let bad = [
        ("bad name", json!({"url": "http://127.0.0.1:1/mcp"})),
        (
            "a-name-that-is-much-longer-than-32",
            json!({"url": "http://127.0.0.1:1/mcp"}),
        ),
        ("ok", json!({})),
        ("ok", json!({"url": "ftp://example.com/mcp"})),
        ("ok", json!({"url": "not a url"})),
        ("ok", json!({"url": format!("https://e.com/{}", "a".repeat(2048))})),
        ("ok", json!({"url": "http://example.com/mcp", "timeout_ms": 5})),
        (
            "ok",
            json!({"url": "http://example.com/mcp", "headers": {"bad header": "x"}}),
        ),
        (
            "ok",
            json!({"url": "http://example.com/mcp", "requires_approval": "sometimes"}),
        ),
        ("ok", json!({"url": "http://example.com/mcp", "command": "rm"})),
    ];
    for (name, body) in bad {
        let answer = app
            .put(&format!("/v1/mcp-servers/{}", name.replace(' ', "%20")), body.clone())
            .await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let (_, list) = app.get("/v1/mcp-servers").await;
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn tools_work_on_every_protocol_revision_and_session_style() {
    let app = app().await;
    let cases = [
        ("v0618", ProtocolVersion::V_2025_06_18, true),
        ("v1125", ProtocolVersion::V_2025_11_25, true),
        ("v1125s", ProtocolVersion::V_2025_11_25, false),
        ("v0728", ProtocolVersion::V_2026_07_28, false),
    ];
    for (name, version, sessions) in cases {
        let server = McpHttpServer::start(version.clone(), sessions).await;
        let view = put_server(&app, name, json!({"url": server.url})).await;
        assert_eq!(view["status"], "ok", "{name}: {view}");
        let echo = tool(&app, &format!("{name}__echo")).await;
        let out = call(
            &app,
            &echo,
            json!({"text": format!("hello {name}")}),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(out, ToolOutcome::Output(format!("hello {name}")), "{name}");
        // A second call reuses the connection.
        let out = call(&app, &echo, json!({"text": "again"}), CancellationToken::new()).await;
        assert_eq!(out, ToolOutcome::Output("again".into()), "{name}");

        let session_ids = server.state.session_ids.lock().unwrap().clone();
        let versions = server.state.protocol_versions.lock().unwrap().clone();
        if sessions {
            assert!(!session_ids.is_empty(), "{name}: the session's id was sent back");
            assert!(
                session_ids.iter().all(|id| id == &session_ids[0]),
                "{name}: one session"
            );
        }
        if version == ProtocolVersion::V_2026_07_28 {
            assert!(session_ids.is_empty(), "{name}: the stateless revision has no sessions");
            assert!(versions.iter().all(|v| v == "2026-07-28"), "{name}: {versions:?}");
        } else {
            assert!(versions.contains(&version.to_string()), "{name}: {versions:?}");
        }
    }
}

#[tokio::test]
async fn failing_slow_hanging_and_huge_tools_are_tool_results() {
    let app = app().await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    put_server(&app, "t", json!({"url": server.url, "timeout_ms": 500})).await;

    let out = call(&app, &tool(&app, "t__fail").await, json!({}), CancellationToken::new()).await;
    assert!(
        matches!(&out, ToolOutcome::Failed { kind: ToolErrorKind::Remote, message } if message.contains("failed on purpose")),
        "{out:?}"
    );

    let started = std::time::Instant::now();
    let out = call(
        &app,
        &tool(&app, "t__slow").await,
        json!({"ms": 5000}),
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(
            out,
            ToolOutcome::Failed {
                kind: ToolErrorKind::Timeout,
                ..
            }
        ),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let out = call(
        &app,
        &tool(&app, "t__slow").await,
        json!({"ms": 10}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(out, ToolOutcome::Output("done".into()));

    // A hanging call stops when cancelled, and the server hears of it.
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let state = server.state.clone();
    tokio::spawn(async move {
        while state.hanging.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.cancel();
    });
    put_server(&app, "t", json!({"url": server.url, "timeout_ms": 60000})).await;
    let started = std::time::Instant::now();
    let out = call(&app, &tool(&app, "t__hang").await, json!({}), cancel).await;
    assert!(matches!(out, ToolOutcome::Failed { .. }), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    eventually("the server to see the cancellation", || {
        let n = server.state.cancelled.load(Ordering::SeqCst);
        async move { n == 1 }
    })
    .await;

    let out = call(
        &app,
        &tool(&app, "t__huge").await,
        json!({"bytes": 2_000_000}),
        CancellationToken::new(),
    )
    .await;
    match out {
        ToolOutcome::Output(text) => assert_eq!(text.len(), 2_000_000),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_changed_tool_list_is_listed_again() {
    let app = app().await;
    // Told by the server (a session's notification).
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    put_server(&app, "live", json!({"url": server.url})).await;
    assert!(hub(&app).resolve(DEFAULT, "live__extra").await.is_empty());
    let out = call(
        &app,
        &tool(&app, "live__add_tool").await,
        json!({}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(out, ToolOutcome::Output("added".into()));
    eventually("the new tool to be listed", || async {
        !hub(&app).resolve(DEFAULT, "live__extra").await.is_empty()
    })
    .await;
    let (_, view) = app.get("/v1/mcp-servers/live").await;
    assert!(tool_names(&view).contains(&"live__extra".to_string()), "{view}");

    // On demand, for a stateless server that cannot tell.
    let stateless = McpHttpServer::start(ProtocolVersion::V_2026_07_28, false).await;
    let view = put_server(&app, "still", json!({"url": stateless.url})).await;
    assert!(!tool_names(&view).contains(&"still__extra".to_string()));
    stateless.state.extra.store(true, Ordering::SeqCst);
    let (status, view) = app.post("/v1/mcp-servers/still/refresh", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(tool_names(&view).contains(&"still__extra".to_string()), "{view}");
    assert_eq!(hub(&app).resolve(DEFAULT, "still__extra").await.len(), 1);
    assert_error(
        &app.post("/v1/mcp-servers/nope/refresh", json!({})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

/// A server answering every POST with `answer(method)`.
async fn scripted_server(answer: fn(&Value) -> axum::response::Response) -> String {
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            answer(&message)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

fn json_answer(body: String) -> axum::response::Response {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Speaks the 2025-06-18 revision properly until a tool is called, then answers garbage.
fn garbage_on_call(message: &Value) -> axum::response::Response {
    let id = message["id"].clone();
    match message["method"].as_str() {
        Some("initialize") => json_answer(
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "1"}}})
            .to_string(),
        ),
        Some("tools/list") => json_answer(
            json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "broken", "inputSchema": {"type": "object"}}]}})
            .to_string(),
        ),
        Some("tools/call") => json_answer("{\"jsonrpc\": \"2.0\", \"id\": ".into()),
        Some(method) if message.get("id").is_some() => json_answer(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no {method}")}})
                .to_string(),
        ),
        _ => axum::http::StatusCode::ACCEPTED.into_response(),
    }
}

#[tokio::test]
async fn malformed_json_rpc_is_an_error_not_a_crash() {
    let app = app().await;
    let url = scripted_server(|_| json_answer("this is not JSON-RPC".into())).await;
    let view = put_server(&app, "garbled", json!({"url": url})).await;
    assert_ne!(view["status"], "ok");
    assert_ne!(view["status"], "pending");
    assert!(hub(&app).resolve(DEFAULT, "mcp:garbled").await.is_empty());

    let url = scripted_server(garbage_on_call).await;
    let view = put_server(&app, "half", json!({"url": url, "timeout_ms": 2000})).await;
    assert_eq!(view["status"], "ok", "{view}");
    let out = call(
        &app,
        &tool(&app, "half__broken").await,
        json!({}),
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(
            out,
            ToolOutcome::Failed {
                kind: ToolErrorKind::Remote | ToolErrorKind::Timeout,
                ..
            }
        ),
        "{out:?}"
    );
    // The service still answers.
    let (status, _) = app.get("/v1/mcp-servers").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_inward_address_is_refused_and_nothing_is_sent() {
    let app = TestApp::spawn_with(|c| c.mcp_allow_private = Some(false)).await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    let view = put_server(&app, "inside", json!({"url": server.url})).await;
    assert!(
        view["status"].as_str().unwrap().starts_with("forbidden_address"),
        "{view}"
    );
    let localhost = server.url.replace("127.0.0.1", "localhost");
    let view = put_server(&app, "named", json!({"url": localhost})).await;
    assert!(
        view["status"].as_str().unwrap().starts_with("forbidden_address"),
        "{view}"
    );
    assert!(hub(&app).resolve(DEFAULT, "mcp:inside").await.is_empty());
    assert_eq!(server.state.listings.load(Ordering::SeqCst), 0);
    assert!(server.state.protocol_versions.lock().unwrap().is_empty());
}

/// A template may stand for the host as well: it is expanded when connecting, and shown as written.
#[tokio::test]
async fn a_url_template_may_name_the_host() {
    let app = app().await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    // AGENTDESK_TEST_MCP_HOST is 127.0.0.1 (.cargo/config.toml).
    let port = server.url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let templated = format!("http://${{env:AGENTDESK_TEST_MCP_HOST}}:{port}/mcp");
    let view = put_server(&app, "hosted", json!({ "url": templated })).await;
    assert_eq!(
        (view["status"].as_str(), view["url"].as_str()),
        (Some("ok"), Some(templated.as_str()))
    );
}

#[tokio::test]
async fn expanded_secrets_never_leak() {
    const SECRET: &str = "s3cret-mcp-token-9731";
    assert_eq!(
        std::env::var("AGENTDESK_TEST_MCP_SECRET").as_deref(),
        Ok(SECRET),
        "see .cargo/config.toml"
    );
    let app = app().await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    let view = put_server(
        &app,
        "secret",
        json!({"url": server.url, "headers": {"Authorization": "Bearer ${env:AGENTDESK_TEST_MCP_SECRET}"}}),
    )
    .await;
    assert_eq!(view["status"], "ok");
    assert!(server
        .state
        .authorization
        .lock()
        .unwrap()
        .iter()
        .all(|h| h == &format!("Bearer {SECRET}")));
    assert!(!server.state.authorization.lock().unwrap().is_empty());
    assert_eq!(
        view["headers"]["Authorization"],
        "Bearer ${env:AGENTDESK_TEST_MCP_SECRET}"
    );

    // A server that cannot be reached, its secret in the URL and a header.
    let view = put_server(
        &app,
        "unreachable",
        json!({"url": "http://127.0.0.1:1/mcp?key=${env:AGENTDESK_TEST_MCP_SECRET}",
               "headers": {"X-Key": "${env:AGENTDESK_TEST_MCP_SECRET}"}}),
    )
    .await;
    assert_ne!(view["status"], "ok");
    let out = call(
        &app,
        &tool(&app, "secret__fail").await,
        json!({}),
        CancellationToken::new(),
    )
    .await;
    assert!(!format!("{out:?}").contains(SECRET));

    for path in [
        "/v1/mcp-servers",
        "/v1/mcp-servers/secret",
        "/v1/mcp-servers/unreachable",
    ] {
        let (_, body) = app.get(path).await;
        assert!(!body.to_string().contains(SECRET), "{path}: {body}");
    }
    let (_, body) = app.post("/v1/mcp-servers/unreachable/refresh", json!({})).await;
    assert!(!body.to_string().contains(SECRET), "{body}");
    let stored: Vec<String> = sqlx::query_scalar("SELECT row_to_json(m)::text FROM mcp_servers m")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|row| !row.contains(SECRET)), "{stored:?}");
}

#[tokio::test]
async fn config_file_servers_are_listed_and_read_only() {
    let server = McpHttpServer::start(ProtocolVersion::V_2025_06_18, true).await;
    let dir = std::env::temp_dir().join(format!("agentdesk-mcp-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {"cfg": {"url": server.url, "headers": {"X-Team": "desk"}}}}).to_string(),
    )
    .unwrap();
    let app = TestApp::spawn_with(|c| {
        c.mcp_allow_private = Some(true);
        c.mcp_config = Some(file.clone());
    })
    .await;
    assert!(hub(&app).knows(DEFAULT, "mcp:cfg"));
    assert_eq!(hub(&app).resolve(DEFAULT, "mcp:cfg").await.len(), 8);
    let (_, list) = app.get("/v1/mcp-servers").await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["source"], "config");
    assert_eq!(items[0]["status"], "ok");
    assert_eq!(items[0]["headers"]["X-Team"], "desk");
    assert!(tool_names(&items[0]).contains(&"cfg__echo".to_string()));
    assert_error(
        &app.put("/v1/mcp-servers/cfg", json!({"url": server.url})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
    assert_error(
        &app.delete("/v1/mcp-servers/cfg").await,
        StatusCode::CONFLICT,
        "conflict",
    );
    let (status, view) = app.post("/v1/mcp-servers/cfg/refresh", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["status"], "ok");
    let _ = std::fs::remove_dir_all(&dir);
}
