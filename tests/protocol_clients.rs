//! The desk's MCP server and A2A agent driven by the official Python clients: the MCP Python SDK
//! (`mcp`) and the A2A SDK (`a2a-sdk`, protocol v1.0), from the virtualenv that
//! `.ci/protocol-clients.sh` builds. Each script in `tests/clients/` runs against a desk whose
//! agent works tickets with a fake model, and exits 0 when every check held.
//!
//! The interpreter comes from `AGENTDESK_CLIENTS_PYTHON`. The tests are `#[ignore]`d, since they
//! need that outside program: `AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh) cargo test
//! --test protocol_clients -- --ignored` runs them, as CI does.

mod support;

use std::time::Duration;

use serde_json::json;
use support::TestApp;
use testkit::fake_llm::FakeLlm;

const PYTHON_VAR: &str = "AGENTDESK_CLIENTS_PYTHON";
const TOKEN: &str = "clients-token";
const READ_TOKEN: &str = "clients-reader";

/// The clients' interpreter (`AGENTDESK_CLIENTS_PYTHON`).
fn python() -> String {
    std::env::var(PYTHON_VAR).unwrap_or_else(|_| {
        panic!("{PYTHON_VAR} is not set: run `{PYTHON_VAR}=$(bash .ci/protocol-clients.sh) cargo test --test protocol_clients -- --ignored`")
    })
}

/// The desk of `support::echo_desk`: `QUESTION` tasks wait, `nobody` tickets are never claimed.
async fn desk() -> (FakeLlm, TestApp) {
    support::echo_desk::start(TOKEN, READ_TOKEN, json!({"role": "Answers anything."}), |_| {}).await
}

/// Runs `tests/clients/<script>` with the desk's URL and tokens.
async fn run_client(script: &str, app: &TestApp, extra: &[&str]) {
    let python = python();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official Python clients: AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh)"]
async fn the_mcp_python_sdk_works_tickets_through_mcp() {
    let (_llm, app) = desk().await;
    run_client("mcp_client.py", &app, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official Python clients: AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh)"]
async fn the_a2a_sdk_works_tasks_over_json_rpc() {
    let (_llm, app) = desk().await;
    run_client("a2a_client.py", &app, &["JSONRPC"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official Python clients: AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh)"]
async fn the_a2a_sdk_works_tasks_over_http_json() {
    let (_llm, app) = desk().await;
    run_client("a2a_client.py", &app, &["HTTP+JSON"]).await;
}

/// Runs `examples/<script>` (the README's walk-throughs) with the desk's URL and token; its
/// standard output and error.
async fn run_example(script: &str, app: &TestApp) -> (String, String) {
    let python = python();
    let path = format!("{}/examples/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = tokio::process::Command::new(python);
    command.arg(&path).arg(&app.url).arg(TOKEN).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} took longer than 240 s"))
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{script} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// The README's MCP example runs as written, and its session ends cleanly (the SDK logs any
/// answer to `DELETE /mcp` but 200 or 204 as a failed termination).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official Python clients: AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh)"]
async fn the_readmes_mcp_example_runs_as_written() {
    let (_llm, app) = desk().await;
    let (stdout, stderr) = run_example("mcp_client.py", &app).await;
    assert!(stdout.contains("tools: create_ticket"), "{stdout}");
    assert!(stdout.contains(" done echo: What is the boiling point"), "{stdout}");
    assert!(!stderr.contains("termination failed"), "{stderr}");
}

/// The README's A2A example runs as written: the task streams to its completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official Python clients: AGENTDESK_CLIENTS_PYTHON=$(bash .ci/protocol-clients.sh)"]
async fn the_readmes_a2a_example_runs_as_written() {
    let (_llm, app) = desk().await;
    let (stdout, _) = run_example("a2a_client.py", &app).await;
    assert!(stdout.contains("TASK_STATE_COMPLETED"), "{stdout}");
    assert!(stdout.contains("echo: Summarise RFC 9110 in one line"), "{stdout}");
}
