//! Model servers as they are run, against the fake model server: provider capacity
//! (`max_concurrent`, across processes, in order, visible, cancellable), empty replies and streams
//! that end without a finish reason, tool schemas in the form grammar converters accept, and
//! compaction that makes room without the summariser.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::{assert_error, event_data, event_kinds, wait_status, KillOnDrop, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};
use tokio::time::Instant;

async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    (app, llm)
}

/// A local server that answers every request after `delay` with a close_ticket call.
fn slow_closer(llm: &FakeLlm, delay: Duration) {
    llm.set_reply(Reply::tool_call("close_ticket", json!({ "result": "done" })).first_byte_delay(delay));
}

/// Points the `default` agent at `provider`.
async fn default_agent(app: &TestApp, provider: &str, extra: Value) {
    let mut body = json!({ "provider": provider, "model": "local-model", "request_retry_delay_ms": 1 });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (code, agent) = app.put("/v1/agents/default", body).await;
    assert_eq!(code, StatusCode::OK, "{agent}");
}

async fn local_provider(app: &TestApp, llm: &FakeLlm, max_concurrent: Value) -> Value {
    let body = json!({ "kind": "openai", "base_url": llm.openai_base_url(), "max_concurrent": max_concurrent });
    let (code, provider) = app.put("/v1/providers/local", body).await;
    assert!(code.is_success(), "{provider}");
    provider
}

async fn create_all(app: &TestApp, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..n {
        let ticket = app.create_ticket(json!({ "task": format!("question {i}") })).await;
        keys.push(ticket["key"].as_str().unwrap().to_owned());
    }
    keys
}

#[tokio::test]
async fn max_concurrent_is_defined_shown_and_checked() {
    let (app, llm) = start().await;
    let provider = local_provider(&app, &llm, json!(2)).await;
    assert_eq!(provider["max_concurrent"], 2);
    assert_eq!(app.get("/v1/providers/local").await.1["max_concurrent"], 2);
    let provider = local_provider(&app, &llm, Value::Null).await;
    assert_eq!(provider["max_concurrent"], Value::Null);
    let url = llm.openai_base_url();
    for bad in [json!(0), json!(-1), json!(1025), json!("one"), json!(1.5)] {
        let body = json!({ "kind": "openai", "base_url": url, "max_concurrent": bad });
        let answer = app.put("/v1/providers/local", body).await;
        assert!(answer.0.is_client_error(), "{bad}: {answer:?}");
    }
    let body = json!({ "kind": "openai", "base_url": url, "max_concurrent": 0 });
    assert_error(
        &app.put("/v1/providers/local", body).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_eq!(
        app.get("/v1/providers/local").await.1["max_concurrent"],
        Value::Null,
        "unchanged"
    );
    // The built-in ones show their setting.
    assert_eq!(app.get("/v1/providers/openai").await.1["max_concurrent"], Value::Null);
    app.shutdown().await;
}

#[tokio::test]
async fn a_provider_with_max_concurrent_one_gets_one_request_at_a_time_in_order() {
    let (app, llm) = start().await;
    slow_closer(&llm, Duration::from_millis(150));
    local_provider(&app, &llm, json!(1)).await;
    default_agent(&app, "local", json!({})).await;
    let keys = create_all(&app, 6).await;
    let mut started = Vec::new();
    for key in &keys {
        let done = wait_status(&app, key, "done").await;
        started.push(done["started_at"].as_str().unwrap().to_owned());
        let kinds = event_kinds(&app, done["id"].as_str().unwrap()).await;
        assert!(!kinds.contains(&"request.retried".to_owned()), "{kinds:?}");
    }
    assert_eq!(llm.max_in_flight(), 1);
    assert_eq!(llm.request_count(), 6);
    // Waiting is visible: a `request.queued` event on the tickets that waited.
    let mut queued = Vec::new();
    for key in &keys {
        let ticket = app.get(&format!("/v1/tickets/{key}")).await.1;
        queued.extend(event_data(&app, ticket["id"].as_str().unwrap(), "request.queued").await);
    }
    assert!(!queued.is_empty(), "some ticket waited");
    for q in &queued {
        assert_eq!(q["provider"], "local");
        assert_eq!(q["max_concurrent"], 1);
        assert!(q["ahead"].as_i64().unwrap() >= 1, "{q}");
    }
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM provider_slots")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "every slot and place is given back");
    app.shutdown().await;
}

#[tokio::test]
async fn a_provider_without_a_limit_is_sent_requests_at_once() {
    let (app, llm) = start().await;
    slow_closer(&llm, Duration::from_millis(300));
    default_agent(&app, "openai", json!({})).await;
    for key in create_all(&app, 4).await {
        wait_status(&app, &key, "done").await;
    }
    assert!(llm.max_in_flight() >= 2, "{}", llm.max_in_flight());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM provider_slots")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "no capacity bookkeeping without a limit");
    app.shutdown().await;
}

#[tokio::test]
async fn the_built_in_provider_takes_its_limit_from_the_configuration() {
    let llm = FakeLlm::start().await;
    slow_closer(&llm, Duration::from_millis(100));
    let app = TestApp::spawn_with_llm(&llm, |c| c.openai_max_concurrent = Some(2)).await;
    assert_eq!(app.get("/v1/providers/openai").await.1["max_concurrent"], 2);
    default_agent(&app, "openai", json!({})).await;
    for key in create_all(&app, 6).await {
        wait_status(&app, &key, "done").await;
    }
    assert_eq!(llm.max_in_flight(), 2);
    app.shutdown().await;
}

/// A cancel ends a wait for a slot at once, and gives the place in line back.
#[tokio::test]
async fn a_cancel_ends_the_wait_for_a_slot_at_once() {
    let (app, llm) = start().await;
    local_provider(&app, &llm, json!(1)).await;
    default_agent(&app, "local", json!({})).await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "first" })).first_byte_delay(Duration::from_secs(3)));
    let first = app.create_ticket(json!({ "task": "the long one" })).await;
    assert!(llm.wait_for_requests(1, Duration::from_secs(10)).await);
    let second = app.create_ticket(json!({ "task": "the waiting one" })).await;
    let second_id = second["id"].as_str().unwrap();
    support::eventually("the second ticket to queue", Duration::from_secs(10), || async {
        (!event_data(&app, second_id, "request.queued").await.is_empty()).then_some(())
    })
    .await;
    let asked = Instant::now();
    let (code, _) = app.post(&format!("/v1/tickets/{second_id}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    wait_status(&app, second["key"].as_str().unwrap(), "cancelled").await;
    // Its row goes as the wait ends, long before the first request's three seconds are up.
    loop {
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM provider_slots WHERE ticket_id = $1")
            .bind(uuid::Uuid::parse_str(second_id).unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
        if rows == 0 {
            break;
        }
        assert!(asked.elapsed() < Duration::from_secs(2), "the place in line was kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(llm.request_count(), 1, "the cancelled ticket sent nothing");
    wait_status(&app, first["key"].as_str().unwrap(), "done").await;
    app.shutdown().await;
}

/// Two processes on one database (this one and a real `agentdesk worker`), one provider with
/// `max_concurrent: 1`: never two requests in flight, and every ticket done.
#[tokio::test]
async fn the_limit_holds_across_processes() {
    let llm = FakeLlm::start().await;
    slow_closer(&llm, Duration::from_millis(120));
    let app = TestApp::spawn_with_llm(&llm, |c| c.lease = Duration::from_secs(2)).await;
    local_provider(&app, &llm, json!(1)).await;
    default_agent(&app, "local", json!({})).await;
    let worker = Command::new(env!("CARGO_BIN_EXE_agentdesk"))
        .arg("worker")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", &app.database_url)
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("AGENTDESK_LEASE_SECS", "2")
        .env("AGENTDESK_WORKERS", "8")
        .env("AGENTDESK_DB_MAX_CONNECTIONS", "6")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start agentdesk worker");
    let _worker = KillOnDrop(worker);
    for key in create_all(&app, 12).await {
        wait_status(&app, &key, "done").await;
    }
    assert_eq!(llm.max_in_flight(), 1, "two requests were in flight at once");
    assert_eq!(llm.request_count(), 12);
    app.shutdown().await;
}

#[tokio::test]
async fn an_empty_reply_is_retried_twice_and_never_makes_the_ticket_wait() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_request_retries": 10 })).await;
    // A whole reply with nothing in it: a finish reason, but no text, thinking or call.
    llm.set_reply(Reply::text("").usage(10, 5));
    let ticket = app.create_ticket(json!({ "task": "anyone there?" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "empty_response", "{failed}");
    assert_eq!(llm.request_count(), 3);
    // What the empty replies reported they used counts, with every request.
    let usage = &failed["usage"];
    assert_eq!(
        (&usage["requests"], &usage["input_tokens"], &usage["output_tokens"]),
        (&json!(3), &json!(30), &json!(15)),
        "{usage}"
    );
    let id = failed["id"].as_str().unwrap();
    let retried = event_data(&app, id, "request.retried").await;
    assert_eq!(retried.len(), 2);
    assert!(retried
        .iter()
        .all(|r| r["kind"] == "empty_response" && r["max_attempts"] == 2));
    assert!(!event_kinds(&app, id).await.contains(&"ticket.waiting".to_owned()));

    // Blank text is no answer either; the next whole reply is.
    llm.push(Reply::text("  \n "));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "here" })));
    let ticket = app.create_ticket(json!({ "task": "and now?" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "here");
    app.shutdown().await;
}

#[tokio::test]
async fn a_stream_that_ends_without_a_finish_reason_is_sent_again() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_request_retries": 10 })).await;
    // What llama-cpp-python sends for a request it interrupts: some text, then [DONE] alone.
    llm.push(Reply::text("The answer is").without_finish());
    llm.push(Reply::tool_call("close_ticket", json!({ "result": 42 })));
    let ticket = app.create_ticket(json!({ "task": "six times seven" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], 42);
    let retried = event_data(&app, done["id"].as_str().unwrap(), "request.retried").await;
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["kind"], "stream_interrupted");

    // Every time: two retries, then the ticket fails; it never waits on the partial text.
    llm.set_reply(Reply::text("cut off").without_finish());
    let before = llm.request_count();
    let ticket = app.create_ticket(json!({ "task": "again" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "stream_interrupted", "{failed}");
    assert_eq!(llm.request_count() - before, 3);

    // Nothing before the end (a stream of [DONE] alone) is an empty reply, retried as one.
    llm.set_reply(Reply::text("").without_finish());
    let before = llm.request_count();
    let ticket = app.create_ticket(json!({ "task": "once more" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "empty_response", "{failed}");
    assert_eq!(llm.request_count() - before, 3);
    let retried = event_data(&app, failed["id"].as_str().unwrap(), "request.retried").await;
    assert!(retried.iter().all(|r| r["kind"] == "empty_response"), "{retried:?}");
    app.shutdown().await;
}

/// The schemas sent name a type everywhere: close_ticket's `result` (any value) with its types
/// spelled out, and an HTTP tool's annotation-only parameter likewise.
#[tokio::test]
async fn tool_schemas_are_sent_in_a_form_grammar_converters_accept() {
    let (app, llm) = start().await;
    let tool = json!({
        "description": "Look something up.",
        "url": "http://127.0.0.1:9/lookup",
        "input_schema": {
            "type": "object",
            "properties": { "query": { "description": "anything to look up" }, "n": { "type": "integer" } },
            "required": ["query"]
        }
    });
    let (code, body) = app.put("/v1/tools/lookup", tool).await;
    assert!(code.is_success(), "{body}");
    default_agent(&app, "openai", json!({ "tools": ["close_ticket", "lookup"] })).await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let sent = &llm.requests()[0].body["tools"];
    let params = |name: &str| {
        sent.as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == name)
            .map(|t| t["function"]["parameters"].clone())
            .unwrap()
    };
    let any = json!(["string", "number", "boolean", "object", "array"]);
    let close = params("close_ticket");
    assert_eq!(close["properties"]["result"]["type"], any, "{close}");
    assert!(close["properties"]["result"]["description"].is_string());
    let lookup = params("lookup");
    assert_eq!(lookup["properties"]["query"]["type"], any, "{lookup}");
    assert_eq!(lookup["properties"]["n"], json!({ "type": "integer" }));
    // What the API shows is the tool as defined.
    let shown = app.get("/v1/tools/lookup").await.1;
    assert_eq!(
        shown["input_schema"]["properties"]["query"],
        json!({ "description": "anything to look up" })
    );
    app.shutdown().await;
}

/// The summariser answers empty: the ticket is compacted without it and finishes.
#[tokio::test]
async fn an_empty_summary_compacts_without_the_summariser() {
    let (app, llm) = start().await;
    default_agent(
        &app,
        "openai",
        json!({ "context_window": 2048, "tool_choice": "close_ticket" }),
    )
    .await;
    // The first reply fills the window; the summariser then answers nothing.
    llm.push(Reply::tool_call("read_tickets", json!({ "key": "none" })).with_text(&"word ".repeat(1_400)));
    llm.push_for("Write the summary now.", Reply::text(""));
    llm.set_reply(Reply::tool_call("close_ticket", json!({ "result": "fine" })));
    let ticket = app.create_ticket(json!({ "task": "Keep this task." })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "fine");
    let id = done["id"].as_str().unwrap();
    // One compaction, finished without the summariser (not failed: it made room).
    assert!(event_data(&app, id, "compaction.failed").await.is_empty());
    assert_eq!(event_data(&app, id, "compaction.finished").await.len(), 1);
    let last = llm.requests().last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("Keep this task.") && last.contains("without a summary") && last.contains("empty summary"),
        "{last}"
    );
    assert!(
        !last.contains(&"word ".repeat(1_400)),
        "the long reply is left out or cut"
    );
    app.shutdown().await;
}

/// `context_window_exceeded` is for a task that alone leaves no room; its message gives the
/// sizes in plain digits.
#[tokio::test]
async fn a_request_whose_fixed_part_leaves_no_room_fails_naming_the_sizes() {
    let (app, llm) = start().await;
    let role = "Follow the house rules. ".repeat(300);
    default_agent(&app, "openai", json!({ "context_window": 2048, "role": role })).await;
    llm.set_reply(Reply::text("a summary"));
    let ticket = app.create_ticket(json!({ "task": "t".repeat(1_000) })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "context_window_exceeded", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("2048") && message.contains("250 tokens"), "{message}");
    app.shutdown().await;
}
