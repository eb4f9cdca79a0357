//! The desk's MCP server and A2A agent driven by the official Python clients: the MCP Python SDK
//! (`mcp`) and the A2A SDK (`a2a-sdk`, protocol v1.0), from the virtualenv that
//! `.ci/protocol-clients.sh` builds. Each script in `tests/clients/` runs against a desk whose
//! agent works tickets with a fake model, and exits 0 when every check held.
//!
//! The interpreter comes from `AGENTDESK_CLIENTS_PYTHON`; without it every test here is skipped
//! with a note (CI sets it).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::TestApp;
use testkit::fake_llm::{FakeLlm, Reply};

const PYTHON_VAR: &str = "AGENTDESK_CLIENTS_PYTHON";
const TOKEN: &str = "clients-token";
const READ_TOKEN: &str = "clients-reader";

/// The last user message's text in an OpenAI chat request.
fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// The model of these tests: a task containing `QUESTION` gets a question back (the ticket
/// waits); anything else is closed with `echo: <the last user message>`.
async fn desk() -> (FakeLlm, TestApp) {
    let llm = FakeLlm::start().await;
    llm.set_responder(|body| {
        let text = last_user_text(body);
        if text.contains("QUESTION") {
            Reply::text("Which colour should it be?")
        } else {
            Reply::tool_call("close_ticket", json!({"result": format!("echo: {text}")}))
        }
    });
    let app = TestApp::spawn_with_llm(&llm, |c| {
        c.api_tokens = vec![TOKEN.into(), format!("read:{READ_TOKEN}")];
    })
    .await;
    let agent = json!({"provider": "openai", "model": "m", "role": "Answers anything.",
                       "tools": ["close_ticket"]});
    let (code, body) = app.put("/v1/agents/echo", agent).await;
    assert!(code.is_success(), "{body}");
    (llm, app)
}

/// Runs `tests/clients/<script>` with the desk's URL and tokens; None when no interpreter is set.
async fn run_client(script: &str, app: &TestApp, extra: &[&str]) -> Option<()> {
    let Ok(python) = std::env::var(PYTHON_VAR) else {
        eprintln!("SKIPPED: {PYTHON_VAR} is not set (run .ci/protocol-clients.sh to build the clients' virtualenv)");
        return None;
    };
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = tokio::process::Command::new(python);
    command.arg(&path).arg(&app.url).arg(TOKEN).arg(READ_TOKEN).args(extra);
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} took longer than 240 s"))
        .expect("run the client script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} {extra:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    eprintln!("{stdout}");
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_python_sdk_works_tickets_through_mcp() {
    let (_llm, app) = desk().await;
    run_client("mcp_client.py", &app, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_works_tasks_over_json_rpc() {
    let (_llm, app) = desk().await;
    run_client("a2a_client.py", &app, &["JSONRPC"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_works_tasks_over_http_json() {
    let (_llm, app) = desk().await;
    run_client("a2a_client.py", &app, &["HTTP+JSON"]).await;
}
