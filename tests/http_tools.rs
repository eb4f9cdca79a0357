//! HTTP tools end to end: the API defines them, an agent names them, the fake model calls them,
//! and a real tool server on loopback answers (or fails, hangs, times out, sends a huge body).

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};
use support::logs::CapturedLogs;
use support::tool_server::{wait_flag, HangingServer, ToolServer, HUGE_BYTES};
use support::{assert_error, event_data, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// The value of `${env:HTTP_TOOLS_TEST_SECRET}`.
const SECRET: &str = "zq-very-secret-7731";

/// Every test calls this first: the process's log capture, and a check that the secrets the
/// tools read are in the environment (`.cargo/config.toml` sets them for the tests).
fn logs() -> &'static CapturedLogs {
    static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
    LOGS.get_or_init(|| {
        assert_eq!(
            std::env::var("HTTP_TOOLS_TEST_SECRET").as_deref(),
            Ok(SECRET),
            "see .cargo/config.toml"
        );
        assert_eq!(
            std::env::var("HTTP_TOOLS_TEST_WEATHER_TOKEN").as_deref(),
            Ok("s3cr3t-weather")
        );
        CapturedLogs::install("debug")
    })
}

/// The app (workers on the fake model) with private addresses allowed, as loopback tools need.
async fn start() -> (TestApp, FakeLlm) {
    logs();
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.allow_private_urls = true).await;
    (app, llm)
}

/// An agent `tooler` (tickets labelled `tooler`) with these tools.
async fn agent(app: &TestApp, tools: &[&str]) {
    let body = json!({"provider": "openai", "model": "test-model", "labels": ["tooler"], "tools": tools,
                      "max_request_retries": 0});
    let (code, body) = app.put("/v1/agents/tooler", body).await;
    assert!(code.is_success(), "{body}");
}

async fn put_tool(app: &TestApp, name: &str, body: Value) -> Value {
    let (code, body) = app.put(&format!("/v1/tools/{name}"), body).await;
    assert!(code.is_success(), "{body}");
    body
}

async fn ticket(app: &TestApp) -> (String, String) {
    let t = app
        .create_ticket(json!({"task": "use the tool", "labels": ["tooler"]}))
        .await;
    (
        t["key"].as_str().unwrap().to_owned(),
        t["id"].as_str().unwrap().to_owned(),
    )
}

fn close() -> Reply {
    Reply::tool_call("close_ticket", json!({"result": "ok"}))
}

/// The tool result the model got for `call_id` in its request after the call.
fn result_sent_to_model(llm: &FakeLlm, call_id: &str) -> String {
    for request in llm.requests() {
        for m in request.body["messages"].as_array().unwrap() {
            if m["role"] == "tool" && m["tool_call_id"] == call_id {
                return m["content"].as_str().unwrap_or_default().to_owned();
            }
        }
    }
    panic!("no tool result for {call_id} was sent to the model")
}

#[tokio::test]
async fn a_get_tool_fills_placeholders_sends_the_rest_as_query_and_expands_secrets_at_call_time() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"},
                        "days": {"type": "integer"}}, "required": ["city"]});
    let defined = put_tool(
        &app,
        "weather",
        json!({"description": "Weather for a city", "input_schema": schema, "method": "GET",
               "url": server.url("/weather/{city}"),
               "headers": {"Authorization": "Bearer ${env:HTTP_TOOLS_TEST_WEATHER_TOKEN}", "X-Plain": "p"}}),
    )
    .await;
    assert_eq!(
        defined["headers"]["Authorization"],
        "Bearer ${env:HTTP_TOOLS_TEST_WEATHER_TOKEN}"
    );
    agent(&app, &["close_ticket", "weather"]).await;
    llm.push(
        Reply::tool_call(
            "weather",
            json!({"city": "São Paulo/Centro", "units": "metric", "days": 3}),
        )
        .with_call_id("call_w"),
    );
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.method, "GET");
    assert_eq!(sent.path, "/weather/S%C3%A3o%20Paulo%2FCentro");
    let mut query: Vec<&str> = sent.query.split('&').collect();
    query.sort();
    assert_eq!(
        query,
        ["days=3", "units=metric"],
        "the placeholder's field is not repeated"
    );
    assert_eq!(sent.headers["authorization"], "Bearer s3cr3t-weather");
    assert_eq!(sent.headers["x-plain"], "p");
    assert_eq!(sent.headers["idempotency-key"], "call_w");
    assert!(sent.body.is_empty());

    let finished = event_data(&app, &id, "tool.finished").await;
    let output: Value = serde_json::from_str(finished[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["path"], "/weather/S%C3%A3o%20Paulo%2FCentro");
    assert!(result_sent_to_model(&llm, "call_w").contains("units=metric"));
    // The model was offered the tool with its schema.
    let offered = &llm.requests()[0].body["tools"];
    let weather = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "weather")
        .unwrap();
    assert_eq!(weather["function"]["description"], "Weather for a city");
}

#[tokio::test]
async fn a_post_tool_sends_the_input_less_placeholders_as_a_json_body() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    put_tool(
        &app,
        "order",
        json!({"description": "Place an order", "url": server.url("/orders/{shop}"),
               "input_schema": {"type": "object", "properties": {"shop": {"type": "string"},
                   "item": {"type": "string"}, "qty": {"type": "integer"}}}}),
    )
    .await;
    agent(&app, &["close_ticket", "order"]).await;
    llm.push(Reply::tool_call("order", json!({"shop": "north", "item": "tea", "qty": 2})).with_call_id("call_o"));
    llm.push(close());
    let (key, _) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let sent = &server.requests()[0];
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/orders/north"));
    assert_eq!(
        serde_json::from_str::<Value>(&sent.body).unwrap(),
        json!({"item": "tea", "qty": 2})
    );
    assert_eq!(sent.headers["content-type"], "application/json");
    assert_eq!(sent.headers["idempotency-key"], "call_o");
}

#[tokio::test]
async fn a_failing_status_and_a_timeout_are_error_results_and_tool_failed() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    put_tool(&app, "broken", json!({"url": server.url("/fail"), "method": "GET"})).await;
    put_tool(
        &app,
        "sluggish",
        json!({"url": server.url("/slow"), "method": "GET", "timeout_ms": 300}),
    )
    .await;
    agent(&app, &["close_ticket", "broken", "sluggish"]).await;
    llm.push(Reply::tool_calls(vec![("broken", json!({})), ("sluggish", json!({}))]).with_call_id("call_s"));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    let started = std::time::Instant::now();
    wait_status(&app, &key, "done").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the timeout cut the slow call"
    );

    let failed = event_data(&app, &id, "tool.failed").await;
    assert_eq!(failed.len(), 2, "{failed:?}");
    let broken = failed.iter().find(|f| f["tool_name"] == "broken").unwrap();
    assert_eq!(broken["kind"], "http_status");
    let message = broken["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("boom: the database is down"),
        "{message}"
    );
    let slow = failed.iter().find(|f| f["tool_name"] == "sluggish").unwrap();
    assert_eq!(slow["kind"], "timeout");
    assert!(slow["message"].as_str().unwrap().contains("300 ms"));
    // Both went back to the model as error results, and the loop went on.
    assert!(result_sent_to_model(&llm, "call_s").contains("300 ms"));
    let comments = app.list_all(&format!("/v1/tickets/{key}/comments")).await;
    let errors: Vec<&Value> = comments
        .iter()
        .flat_map(|c| c["content"].as_array().unwrap())
        .filter(|b| b["type"] == "tool_result" && b["is_error"] == true)
        .collect();
    assert_eq!(errors.len(), 2);
}

#[tokio::test]
async fn cancelling_the_ticket_closes_a_hanging_call() {
    let (app, llm) = start().await;
    let mut hanging = HangingServer::start().await;
    put_tool(
        &app,
        "hang",
        json!({"url": format!("http://{}/wait", hanging.addr), "timeout_ms": 600000}),
    )
    .await;
    agent(&app, &["close_ticket", "hang"]).await;
    llm.push(Reply::tool_call("hang", json!({})));
    let (key, _) = ticket(&app).await;
    assert!(
        wait_flag(&mut hanging.received, Duration::from_secs(20)).await,
        "the call was sent"
    );
    let (code, body) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(
        wait_flag(&mut hanging.closed, Duration::from_secs(2)).await,
        "the tool server saw the connection dropped"
    );
    wait_status(&app, &key, "cancelled").await;
}

#[tokio::test]
async fn a_huge_body_is_offloaded_like_any_large_output() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    put_tool(&app, "dump", json!({"url": server.url("/huge"), "method": "GET"})).await;
    agent(&app, &["close_ticket", "dump"]).await;
    llm.push(Reply::tool_call("dump", json!({})).with_call_id("call_big"));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let finished = event_data(&app, &id, "tool.finished").await;
    let shown = finished[0]["output"].as_str().unwrap();
    assert!(shown.starts_with("<persisted-output>"), "{}", &shown[..100]);
    assert!(shown.contains(&format!("/v1/tickets/{key}/outputs/call_big")));
    let whole = app
        .request(reqwest::Method::GET, &format!("/v1/tickets/{key}/outputs/call_big"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(whole.len(), HUGE_BYTES / 14 * 14);
    assert!(result_sent_to_model(&llm, "call_big").contains("<persisted-output>"));
}

#[tokio::test]
async fn the_address_guard_refuses_loopback_and_sends_nothing() {
    logs();
    let llm = FakeLlm::start().await;
    // The default: private addresses are refused.
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    let server = ToolServer::start().await;
    put_tool(&app, "inward", json!({"url": server.url("/x")})).await;
    let by_name = format!("http://localhost:{}/x", server.addr.port());
    put_tool(&app, "inward_by_name", json!({"url": by_name})).await;
    agent(&app, &["close_ticket", "inward", "inward_by_name"]).await;
    llm.push(Reply::tool_calls(vec![
        ("inward", json!({})),
        ("inward_by_name", json!({})),
    ]));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let failed = event_data(&app, &id, "tool.failed").await;
    assert_eq!(failed.len(), 2);
    for f in &failed {
        assert_eq!(f["kind"], "forbidden_address", "{f}");
        assert!(f["message"].as_str().unwrap().contains("AGENTDESK_ALLOW_PRIVATE_URLS"));
    }
    assert!(server.requests().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn agents_name_defined_tools_only() {
    let (app, _llm) = start().await;
    let (code, body) = app
        .put("/v1/agents/a", json!({"tools": ["close_ticket", "weather"]}))
        .await;
    assert_error(&(code, body), StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    for mcp in ["mcp:github", "github__create_issue"] {
        let answer = app.put("/v1/agents/a", json!({"tools": [mcp]})).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    put_tool(&app, "weather", json!({"url": "https://api.example.com/w"})).await;
    let (code, body) = app
        .put("/v1/agents/a", json!({"tools": ["close_ticket", "weather"]}))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(body["tools"], json!(["close_ticket", "weather"]));
    let (code, body) = app
        .put("/v1/agents/a", json!({"tools": ["weather"], "tool_choice": "weather"}))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_tool_removed_later_is_missing_to_the_model_not_a_crash() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    put_tool(&app, "gone", json!({"url": server.url("/x")})).await;
    agent(&app, &["close_ticket", "gone"]).await;
    let (code, _) = app.delete("/v1/tools/gone").await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    llm.push(Reply::tool_call("gone", json!({})).with_call_id("call_gone"));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let failed = event_data(&app, &id, "tool.failed").await;
    assert_eq!(failed[0]["kind"], "unknown_tool");
    assert!(result_sent_to_model(&llm, "call_gone").contains("no tool named"));
    let offered = &llm.requests()[0].body["tools"];
    assert!(offered
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["function"]["name"] != "gone"));
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn tool_definitions_are_validated_listed_and_deleted() {
    logs();
    let app = TestApp::spawn().await;
    let ok = json!({"url": "https://api.example.com/{id}", "input_schema": {"type": "object"}});
    let bad = [
        ("has space", ok.clone()),
        ("close_ticket", ok.clone()),
        ("a__b", ok.clone()),
        ("t", json!({"url": "not a url"})),
        ("t", json!({"url": "ftp://example.com/x"})),
        ("t", json!({"url": format!("https://e.com/{}", "a".repeat(2048))})),
        ("t", json!({"url": "https://e.com", "method": "TRACE"})),
        ("t", json!({"url": "https://e.com", "timeout_ms": 5})),
        ("t", json!({"url": "https://e.com", "timeout_ms": 600001})),
        ("t", json!({"url": "https://e.com", "input_schema": {"type": "string"}})),
        (
            "t",
            json!({"url": "https://e.com", "input_schema": {"type": "object", "properties": {"a": {"type": 5}}}}),
        ),
        ("t", json!({"url": "https://e.com", "headers": {"bad header": "x"}})),
        (
            "t",
            json!({"url": "https://e.com", "headers": {"Idempotency-Key": "x"}}),
        ),
        ("t", json!({"url": "https://e.com", "surprise": true})),
        ("t", json!({"method": "GET"})),
    ];
    for (name, body) in bad {
        let answer = app.put(&format!("/v1/tools/{name}"), body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let (code, created) = app.put("/v1/tools/b-tool", ok.clone()).await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(created["method"], "POST");
    assert_eq!(created["timeout_ms"], 30000);
    assert_eq!(created["requires_approval"], false);
    let (code, _) = app.put("/v1/tools/b-tool", ok.clone()).await;
    assert_eq!(code, StatusCode::OK);
    app.put("/v1/tools/a_tool", ok.clone()).await;
    let (code, page) = app.get("/v1/tools?limit=1").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(page["items"][0]["name"], "a_tool");
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, next) = app.get(&format!("/v1/tools?limit=1&cursor={cursor}")).await;
    assert_eq!(next["items"][0]["name"], "b-tool");
    assert!(next["next_cursor"].is_null());
    let (code, got) = app.get("/v1/tools/b-tool").await;
    assert_eq!(
        (code, got["url"].as_str()),
        (StatusCode::OK, Some("https://api.example.com/{id}"))
    );
    assert_eq!(app.delete("/v1/tools/b-tool").await.0, StatusCode::NO_CONTENT);
    assert_error(
        &app.delete("/v1/tools/b-tool").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(&app.get("/v1/tools/b-tool").await, StatusCode::NOT_FOUND, "not_found");
}

/// The expanded value of a `${env:…}` template appears nowhere: not in the database (every table
/// dumped as text), the events, the API's responses, or the logs, on success and on failures.
#[tokio::test]
async fn secrets_never_leak() {
    let (app, llm) = start().await;
    let server = ToolServer::start().await;
    let header = json!({"Authorization": "Bearer ${env:HTTP_TOOLS_TEST_SECRET}"});
    // (The tool server echoes the query of /x, so only the failing tools carry the secret in it.)
    put_tool(&app, "ok_tool", json!({"url": server.url("/x"), "headers": header})).await;
    put_tool(
        &app,
        "fail_tool",
        json!({"url": server.url("/fail?k=${env:HTTP_TOOLS_TEST_SECRET}"), "headers": header}),
    )
    .await;
    // A closed port: a connection error, whose message must not carry the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    put_tool(
        &app,
        "down_tool",
        json!({"url": format!("http://{closed}/?k=${{env:HTTP_TOOLS_TEST_SECRET}}"),
                                       "headers": header}),
    )
    .await;
    agent(&app, &["close_ticket", "ok_tool", "fail_tool", "down_tool"]).await;
    llm.push(Reply::tool_calls(vec![
        ("ok_tool", json!({"a": 1})),
        ("fail_tool", json!({})),
        ("down_tool", json!({})),
    ]));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent
        .iter()
        .all(|r| r.headers["authorization"] == format!("Bearer {SECRET}")));
    let fail = sent.iter().find(|r| r.path == "/fail").unwrap();
    assert_eq!(fail.query, format!("k={SECRET}"), "the URL's template was expanded");
    let failed = event_data(&app, &id, "tool.failed").await;
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed.iter().any(|f| f["kind"] == "connection_failed"));

    // The database, every table as text.
    let tables: Vec<String> = sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(tables.contains(&"events".to_string()) && tables.contains(&"http_tools".to_string()));
    for table in tables {
        let rows: Vec<String> = sqlx::query_scalar(&format!("SELECT t::text FROM \"{table}\" t"))
            .fetch_all(&app.pool)
            .await
            .unwrap();
        for row in rows {
            assert!(!row.contains(SECRET), "table {table} holds the secret: {row}");
        }
    }
    // The API's answers.
    for path in [
        "/v1/tools".to_string(),
        "/v1/tools/ok_tool".to_string(),
        format!("/v1/tickets/{key}"),
        format!("/v1/tickets/{key}/comments"),
        "/v1/agents/tooler".to_string(),
    ] {
        let (_, body) = app.get(&path).await;
        assert!(!body.to_string().contains(SECRET), "{path}: {body}");
    }
    let events = app
        .request(reqwest::Method::GET, &format!("/v1/tickets/{key}/events"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(events.contains("tool.failed") && !events.contains(SECRET));
    // What the model was told.
    for request in llm.requests() {
        assert!(!request.body.to_string().contains(SECRET));
    }
    // The logs (debug level, every module).
    let logged = logs().text();
    assert!(logged.contains(&key), "the logs were captured");
    assert!(!logged.contains(SECRET), "a log line holds the secret");
}
