//! Every retry and every failed model request logs one warn line with what an operator needs to
//! find the cause: ticket, agent, model, provider, status, kind and a body excerpt. Its own test
//! binary, since it installs the process's log subscriber.

mod support;

use serde_json::json;
use support::logs::CapturedLogs;
use support::{wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

fn warn_lines(logs: &CapturedLogs) -> Vec<String> {
    logs.text()
        .lines()
        .filter(|l| l.contains("WARN"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_retry_and_a_failed_request_each_log_one_warn_line_with_their_cause() {
    let logs = CapturedLogs::install("warn");

    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    let agent = json!({ "provider": "openai", "model": "local-model", "max_request_retries": 1,
                        "request_retry_delay_ms": 1 });
    let (code, body) = app.put("/v1/agents/default", agent).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    llm.push(Reply::status(503).with_error_body("upstream is warming up"));
    llm.push(Reply::status(500).with_error_body("CUDA out of memory"));
    let ticket = app.create_ticket(json!({ "task": "fails twice" })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "failed").await;

    let lines: Vec<String> = warn_lines(&logs).into_iter().filter(|l| l.contains(key)).collect();
    assert_eq!(
        lines.len(),
        2,
        "one line for the retry, one for the failure: {lines:#?}"
    );
    for (line, (status, body)) in lines.iter().zip([("503", "warming up"), ("500", "CUDA out of memory")]) {
        for needle in ["agent=default", "model=local-model", "provider=openai", status, body] {
            assert!(line.contains(needle), "{needle:?} missing in {line}");
        }
    }
    app.shutdown().await;
}
