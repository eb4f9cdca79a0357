//! Every retry and every failed model request logs one warn line with what an operator needs to
//! find the cause: ticket, agent, model, provider, status, kind and a body excerpt. Its own test
//! binary, since it installs the process's log subscriber.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use support::{wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// Log output kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn warn_lines(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains("WARN")).map(str::to_owned).collect()
    }
}

#[tokio::test]
async fn a_retry_and_a_failed_request_each_log_one_warn_line_with_their_cause() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

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

    let lines: Vec<String> = logs.warn_lines().into_iter().filter(|l| l.contains(key)).collect();
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
