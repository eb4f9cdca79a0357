//! The Anthropic provider in the agent loop, thinking blocks, compaction and large tool outputs,
//! against a fake model server speaking the Anthropic Messages streaming wire format.

mod support;

use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::llm::anthropic::Anthropic;
use agentdesk::llm::openai::OpenAi;
use agentdesk::llm::Providers;
use serde_json::{json, Value};
use support::{event_data, event_kinds, position, wait_status};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);
/// What every summariser request ends with.
const SUMMARISER_KEY: &str = "Write the summary now.";

fn anthropic(llm: &FakeLlm) -> Anthropic {
    Anthropic::new(llm.anthropic_base_url(), Some("test-key".into()))
}

/// The service with only the Anthropic provider, pointed at a fake model server.
async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let providers = Providers::new(None, Some(anthropic(&llm)));
    let app = TestApp::spawn_full(Mode::Serve, providers, |_| {}).await;
    (app, llm)
}

/// The service with both providers configured.
async fn start_with_both() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let providers = Providers::new(Some(OpenAi::new(llm.openai_base_url(), None)), Some(anthropic(&llm)));
    let app = TestApp::spawn_full(Mode::Serve, providers, |_| {}).await;
    (app, llm)
}

/// Replaces the default agent (fields left out take their defaults), with fast retries.
async fn set_default_agent(app: &TestApp, mut agent: Value) {
    agent["request_retry_delay_ms"] = json!(1);
    let (code, body) = app.put("/v1/agents/default", agent).await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

fn positions(kinds: &[String], kind: &str) -> Vec<usize> {
    kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == kind)
        .map(|(i, _)| i)
        .collect()
}

/// About `chars` characters of an incident write-up, in many distinct lines.
fn incident_report(chars: usize) -> String {
    const LINES: [&str; 8] = [
        "The checkout service returned HTTP 502 for a growing share of requests after the 14:05 deploy.",
        "Grafana showed p99 latency on payments-api climbing from 180 ms to 4.2 s within six minutes.",
        "The on-call engineer rolled back build 8841, but error rates stayed above 12 percent.",
        "Connection pool saturation on the orders database (max 200) matched the start of the errors.",
        "A retry storm from the mobile client, version 5.3.1, tripled the request rate to the gateway.",
        "Customer support reported duplicate charges for at least 37 orders placed between 14:10 and 14:40.",
        "The CDN health checks for eu-west-2 flapped, moving traffic to us-east-1 twice in ten minutes.",
        "Redis memory use on the session cluster hit 93 percent and evictions started at 14:22.",
    ];
    let mut text = String::from("Incident INC-4711: write the post-incident review.\n");
    let mut i = 0;
    while text.len() < chars {
        text.push_str(&format!("[{:04}] {}\n", i, LINES[i % LINES.len()]));
        i += 1;
    }
    text
}

/// A summary long enough to count as one.
fn summary() -> String {
    "SUMMARY-MARKER: The task is the post-incident review of INC-4711 (checkout 502s after the 14:05 deploy). \
     Known so far: payments-api p99 rose to 4.2 s, rollback of build 8841 did not help, the orders database \
     pool (max 200) saturated, mobile client 5.3.1 caused a retry storm, 37 orders were charged twice, and \
     Redis session memory reached 93 percent. Next step: write the review and close the ticket."
        .to_owned()
}

/// The texts of every block of a ticket's comments, as JSON.
async fn comments(app: &TestApp, key: &str) -> Vec<Value> {
    app.list_all(&format!("/v1/tickets/{key}/comments")).await
}

#[tokio::test]
async fn a_ticket_on_an_anthropic_agent_streams_thinking_and_text_live_and_counts_cache_tokens() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": "rolled back" }))
            .with_thinking("The deploy at 14:05 is the likely cause.", "sig-live")
            .with_text("Rolling back the deploy.")
            .usage(120, 30)
            .cache_tokens(40, 7)
            .first_byte_delay(Duration::from_millis(300))
            .chunk_delay(Duration::from_millis(20)),
    );
    let ticket = app.create_ticket(json!({ "task": "Fix checkout" })).await;
    let key = ticket["key"].as_str().unwrap();
    let mut stream = app.sse(&format!("/v1/tickets/{key}/events"), None).await;
    let events = stream.collect_until(|e| e.kind() == "ticket.done", WAIT).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.kind()).collect();
    let thinking: String = events
        .iter()
        .filter(|e| e.kind() == "thinking.delta")
        .map(|e| e.data["data"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        thinking, "The deploy at 14:05 is the likely cause.",
        "thinking streams whole and the signature adds nothing: {kinds:?}"
    );
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "text.delta")
        .map(|e| e.data["data"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Rolling back the deploy.");
    let deltas: Vec<_> = events.iter().filter(|e| e.kind().ends_with(".delta")).collect();
    assert!(deltas.iter().all(|e| e.id.is_none() && e.data["seq"].is_null()));
    let last_thinking = kinds.iter().rposition(|k| *k == "thinking.delta").unwrap();
    let first_text = kinds.iter().position(|k| *k == "text.delta").unwrap();
    let finished = kinds.iter().position(|k| *k == "request.finished").unwrap();
    assert!(last_thinking < first_text && first_text < finished, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"ticket.done"));

    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "rolled back");
    assert_eq!(done["usage"]["input_tokens"], 120);
    assert_eq!(done["usage"]["output_tokens"], 30);
    assert_eq!(done["usage"]["cache_read_tokens"], 40);
    assert_eq!(done["usage"]["cache_creation_tokens"], 7);

    let request = &llm.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("test-key"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.body["stream"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn a_thinking_block_is_stored_with_its_signature_and_sent_back_verbatim_before_the_tool_use() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    let thought = "I should look at the open tickets first.";
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "list" })).with_thinking(thought, "sig-1"));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "seen" })));
    let ticket = app.create_ticket(json!({ "task": "Look around" })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "done").await;

    let stored = comments(&app, key).await;
    let assistant = stored
        .iter()
        .find(|c| c["author"] == "assistant")
        .expect("an assistant comment");
    assert_eq!(
        assistant["content"][0],
        json!({ "type": "thinking", "text": thought, "signature": "sig-1" })
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let turn = messages
        .iter()
        .position(|m| m["role"] == "assistant")
        .expect("the assistant turn is sent back");
    let content = &messages[turn]["content"];
    assert_eq!(
        content[0],
        json!({ "type": "thinking", "thinking": thought, "signature": "sig-1" })
    );
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "read_tickets");
    let call_id = content[1]["id"].as_str().unwrap();
    let results = &messages[turn + 1];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["type"], "tool_result");
    assert_eq!(results["content"][0]["tool_use_id"], call_id);
    app.shutdown().await;
}

#[tokio::test]
async fn consecutive_tool_results_go_back_in_one_user_turn() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    llm.push(Reply::tool_calls(vec![
        ("read_tickets", json!({ "action": "list" })),
        ("read_tickets", json!({ "action": "search", "query": "checkout" })),
    ]));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "seen" })));
    let ticket = app.create_ticket(json!({ "task": "Look around" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let messages = llm.requests()[1].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    let results: Vec<&str> = messages[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["tool_result", "tool_result"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_mid_stream_overloaded_error_and_a_529_are_retried_as_rate_limits() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    llm.push(Reply::error_event("overloaded_error"));
    llm.push(Reply::status(529));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let retried = event_data(&app, done["id"].as_str().unwrap(), "request.retried").await;
    let kinds: Vec<&Value> = retried.iter().map(|r| &r["kind"]).collect();
    assert_eq!(kinds, [&json!("rate_limited"), &json!("rate_limited")]);
    assert_eq!(llm.request_count(), 3);
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_without_a_provider_uses_anthropic_when_both_are_configured() {
    let (app, llm) = start_with_both().await;
    let (_, agent) = app.get("/v1/agents/default").await;
    assert!(agent["provider"].is_null(), "{agent}");
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_naming_an_unconfigured_provider_fails_its_ticket_with_a_clear_kind() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "openai", "model": "gpt-4o-mini" })).await;
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "provider_unconfigured");
    assert!(
        failed["error"]["message"].as_str().unwrap().contains("openai"),
        "{failed}"
    );
    assert_eq!(llm.request_count(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_task_too_large_for_a_small_window_is_summarised_before_the_first_request() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 4096, "tools": ["close_ticket"] }),
    )
    .await;
    let task = incident_report(14_000);
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()).usage(2_100, 150));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "review written" })).usage(300, 20));
    let ticket = app.create_ticket(json!({ "task": task })).await;
    let key = ticket["key"].as_str().unwrap();
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, key, "done").await;

    let kinds = event_kinds(&app, id).await;
    let exceeded = position(&kinds, "context.limit_exceeded");
    let started = position(&kinds, "compaction.started");
    let finished = position(&kinds, "compaction.finished");
    let request = position(&kinds, "request.started");
    assert!(
        exceeded < started && started < finished && finished < request,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"compaction.failed".to_owned()));

    let limit = &event_data(&app, id, "context.limit_exceeded").await[0];
    assert_eq!(limit["threshold_tokens"], 3072);
    let estimated = limit["estimated_tokens"].as_u64().unwrap();
    assert!(estimated >= 2_000, "{limit}");
    assert_eq!(
        event_data(&app, id, "compaction.started").await[0]["reason"],
        "blocking"
    );
    let finished = &event_data(&app, id, "compaction.finished").await[0];
    let before = finished["tokens_before"].as_u64().unwrap();
    let after = finished["tokens_after"].as_u64().unwrap();
    assert_eq!(before, estimated);
    assert!(after < before && after < 3072, "{finished}");

    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "the summariser, then the model once");
    let summariser = &requests[0].body;
    assert!(summariser.get("tools").is_none(), "the summariser gets no tools");
    assert!(summariser.to_string().contains("INC-4711"));
    let next = requests[1].body["messages"].to_string();
    assert!(next.contains("SUMMARY-MARKER"), "{next}");
    assert!(!next.contains("[0003]"), "the task itself is gone: {next}");
    assert!(requests[1].body.get("tools").is_some());

    let stored = comments(&app, key).await;
    let users: Vec<&Value> = stored
        .iter()
        .filter(|c| c["author"] == "user" && c["content"][0]["type"] == "text")
        .collect();
    assert_eq!(users.len(), 1, "one user comment holds the summary: {stored:?}");
    let text = users[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("SUMMARY-MARKER") && text.len() >= 200);
    assert!(!serde_json::to_string(&stored).unwrap().contains("[0003]"));

    assert_eq!(done["usage"]["requests"], 2, "the summariser request counts");
    assert_eq!(done["usage"]["input_tokens"], 2_400);
    assert_eq!(done["usage"]["output_tokens"], 170);
    app.shutdown().await;
}

#[tokio::test]
async fn a_transcript_grown_past_the_proactive_threshold_is_compacted_before_the_next_request() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 40000, "tools": ["read_tickets", "close_ticket"] }),
    )
    .await;
    let big = app
        .create_ticket(json!({ "task": incident_report(32_000), "labels": ["elsewhere"] }))
        .await;
    llm.push(Reply::tool_call(
        "read_tickets",
        json!({ "action": "get", "key": big["key"] }),
    ));
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "Review the big incident" })).await;
    let id = ticket["id"].as_str().unwrap();
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;

    let kinds = event_kinds(&app, id).await;
    assert!(!kinds.contains(&"context.limit_exceeded".to_owned()), "{kinds:?}");
    let requests_started = positions(&kinds, "request.started");
    assert_eq!(requests_started.len(), 2, "{kinds:?}");
    let started = position(&kinds, "compaction.started");
    let finished = position(&kinds, "compaction.finished");
    assert!(
        requests_started[0] < started && finished < requests_started[1],
        "{kinds:?}"
    );
    assert_eq!(
        event_data(&app, id, "compaction.started").await[0]["reason"],
        "proactive"
    );
    let data = &event_data(&app, id, "compaction.finished").await[0];
    assert!(data["tokens_before"].as_u64().unwrap() >= 7_000, "{data}");
    assert!(data["tokens_after"].as_u64().unwrap() < 7_000, "{data}");

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].body.get("tools").is_none());
    let last = requests[2].body["messages"].to_string();
    assert!(last.contains("SUMMARY-MARKER") && !last.contains("[0100]"));
    app.shutdown().await;
}

#[tokio::test]
async fn a_context_overflow_from_the_provider_compacts_and_the_request_is_sent_again() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic", "context_window": 200000 })).await;
    llm.push(Reply::context_overflow());
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(2_000) })).await;
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "ok");
    let started = event_data(&app, id, "compaction.started").await;
    assert_eq!(started, [json!({ "reason": "reactive" })]);
    let kinds = event_kinds(&app, id).await;
    assert!(position(&kinds, "compaction.finished") < position(&kinds, "request.finished"));
    assert!(!kinds.contains(&"request.failed".to_owned()), "{kinds:?}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].body.get("tools").is_none());
    assert!(requests[2].body["messages"].to_string().contains("SUMMARY-MARKER"));
    app.shutdown().await;
}

/// The provider counts tokens its own way: an overflow right after a compaction makes room
/// without the summariser (the oldest comments left out, a note in their place) and sends again.
#[tokio::test]
async fn a_second_overflow_right_after_compaction_makes_room_without_the_summariser() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic", "context_window": 200000 })).await;
    llm.push(Reply::context_overflow());
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()));
    llm.push(Reply::context_overflow());
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(2_000) })).await;
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "ok");
    // Two compactions, each started and finished: the summary, then room made without it.
    let kinds = event_kinds(&app, id).await;
    let compactions: Vec<&str> = kinds
        .iter()
        .filter(|k| k.starts_with("compaction."))
        .map(String::as_str)
        .collect();
    assert_eq!(
        compactions,
        [
            "compaction.started",
            "compaction.finished",
            "compaction.started",
            "compaction.finished"
        ]
    );
    assert_eq!(llm.request_count(), 4);
    let last = llm.requests()[3].body["messages"].to_string();
    assert!(last.contains("without a summary"), "{last}");
    assert!(
        last.contains("INC-4711") || last.contains("checkout"),
        "the task is kept: {last}"
    );
    app.shutdown().await;
}

/// A provider that reports a full window whatever is sent: a few rounds of making room, then the
/// ticket fails with the sizes in its message.
#[tokio::test]
async fn a_provider_that_always_overflows_fails_the_ticket_after_a_few_rounds() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic", "context_window": 200000 })).await;
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()));
    llm.set_reply(Reply::context_overflow());
    let ticket = app.create_ticket(json!({ "task": incident_report(2_000) })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "context_window_exceeded");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("context still exceeds window after compaction"),
        "{failed}"
    );
    assert!(message.contains("200000"), "the window in plain digits: {message}");
    // The first request, the summariser, and three more.
    let sent = llm.request_count();
    // Its loop has ended: whatever it would send is sent by now.
    app.wait_idle().await;
    assert_eq!(llm.request_count(), sent, "nothing more is sent");
    assert_eq!(sent, 5);
    app.shutdown().await;
}

/// The summariser is asked once; when it fails, the ticket is compacted without it (the long
/// task's middle cut to a quarter of the window, a note saying so) and the work goes on.
#[tokio::test]
async fn a_failing_summariser_is_not_retried_and_the_ticket_is_compacted_without_it() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 4096, "tools": ["close_ticket"] }),
    )
    .await;
    llm.push_for(SUMMARISER_KEY, Reply::status(500));
    llm.push_for(SUMMARISER_KEY, Reply::text(&summary()));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "reviewed" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(14_000) })).await;
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "reviewed");
    let kinds = event_kinds(&app, id).await;
    // One compaction: started, then finished (without the summariser); it did not fail.
    assert!(position(&kinds, "compaction.started") < position(&kinds, "compaction.finished"));
    assert!(!kinds.contains(&"compaction.failed".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"request.retried".to_owned()), "{kinds:?}");
    let finished = event_data(&app, id, "compaction.finished").await;
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["reason"], "blocking");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "the summariser once, then the model");
    let sent = requests[1].body["messages"].to_string();
    assert!(
        sent.contains("without a summary") && sent.contains("the middle of the task cut"),
        "{sent}"
    );
    assert!(sent.contains("left out"), "the cut is marked: {sent}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_with_an_unknown_model_and_no_window_never_compacts() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "model": "local-llama-3", "tools": ["close_ticket"] }),
    )
    .await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(40_000) })).await;
    let id = ticket["id"].as_str().unwrap();
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let kinds = event_kinds(&app, id).await;
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("compaction.") || k == "context.limit_exceeded"),
        "{kinds:?}"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body["messages"].to_string().contains("[0300]"));
    app.shutdown().await;
}

/// The tool_result blocks of a request body, by tool_use_id.
fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().unwrap().iter())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let content = match &b["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (b["tool_use_id"].as_str().unwrap().to_owned(), content)
        })
        .collect()
}

async fn get_text(app: &TestApp, path: &str) -> (StatusCode, Option<String>, String) {
    let response = app.request(reqwest::Method::GET, path).send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    (status, content_type, response.text().await.unwrap())
}

#[tokio::test]
async fn a_large_tool_output_is_stored_whole_and_the_model_sees_a_stub_with_a_preview() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    let task = incident_report(60_000);
    let big = app
        .create_ticket(json!({ "task": task, "labels": ["elsewhere"] }))
        .await;
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "get", "key": big["key"] })).with_call_id("call_big"));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "read" })));
    let ticket = app.create_ticket(json!({ "task": "Read the big ticket" })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "done").await;

    let (status, content_type, full) = get_text(&app, &format!("/v1/tickets/{key}/outputs/call_big")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.unwrap().starts_with("text/plain"));
    assert!(full.contains(&task), "the whole output is stored");

    let results = tool_results(&llm.requests()[1].body);
    assert_eq!(results.len(), 1);
    let (id, stub) = &results[0];
    assert_eq!(id, "call_big");
    assert!(stub.starts_with("<persisted-output>"), "{stub}");
    assert!(stub.ends_with("</persisted-output>"), "{stub}");
    assert!(stub.contains(&format!("({} bytes)", full.len())), "{stub}");
    assert!(stub.contains(&format!("/v1/tickets/{key}/outputs/call_big")));
    let preview = stub
        .split_once("Preview:\n")
        .unwrap()
        .1
        .strip_suffix("\n</persisted-output>")
        .unwrap();
    assert!(!preview.is_empty() && preview.len() <= 2048, "{}", preview.len());
    assert!(full.starts_with(preview));
    assert_eq!(full.as_bytes()[preview.len()], b'\n', "the preview ends at a line end");
    assert!(stub.len() < 3_000);

    let (status, _, _) = get_text(&app, &format!("/v1/tickets/{key}/outputs/call_nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    app.shutdown().await;
}

#[tokio::test]
async fn outputs_of_one_step_over_two_hundred_kilobytes_stub_the_largest_first() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": "anthropic" })).await;
    // Each output fits alone; together they pass 200 KB, and dropping the largest is enough.
    let sizes = [40_000, 48_000, 44_000, 42_000, 46_000];
    let mut calls = vec![];
    for size in sizes {
        let big = app
            .create_ticket(json!({ "task": incident_report(size), "labels": ["elsewhere"] }))
            .await;
        calls.push(("read_tickets", json!({ "action": "get", "key": big["key"] })));
    }
    llm.push(Reply::tool_calls(calls));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "read" })));
    let ticket = app.create_ticket(json!({ "task": "Read them all" })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "done").await;

    let results = tool_results(&llm.requests()[1].body);
    assert_eq!(results.len(), 5);
    let stubbed: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| r.starts_with("<persisted-output>"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stubbed, [1], "only the largest is stubbed");
    for (i, (_, r)) in results.iter().enumerate() {
        if i != 1 {
            assert!(r.len() > 39_000, "output {i} is shown whole");
        }
    }
    let (status, _, full) = get_text(&app, &format!("/v1/tickets/{key}/outputs/{}", results[1].0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(full.len() > 48_000);
    let (status, _, _) = get_text(&app, &format!("/v1/tickets/{key}/outputs/{}", results[0].0)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "an output shown whole is not stored");
    app.shutdown().await;
}

#[tokio::test]
async fn a_comment_posted_while_the_summariser_runs_survives_the_compaction() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 4096, "tools": ["close_ticket"] }),
    )
    .await;
    llm.push_for(
        SUMMARISER_KEY,
        Reply::text(&summary()).first_byte_delay(Duration::from_millis(800)),
    );
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(14_000) })).await;
    let key = ticket["key"].as_str().unwrap();
    assert!(llm.wait_for_requests(1, WAIT).await);
    app.comment(key, "HUMAN-NOTE: the duplicate charges were refunded at 15:10.")
        .await;
    wait_status(&app, key, "done").await;

    let stored = serde_json::to_string(&comments(&app, key).await).unwrap();
    assert!(stored.contains("HUMAN-NOTE"), "the late comment was kept: {stored}");
    assert!(stored.contains("SUMMARY-MARKER") && !stored.contains("[0003]"));
    let next = llm.requests()[1].body["messages"].to_string();
    assert!(next.contains("HUMAN-NOTE") && next.contains("SUMMARY-MARKER"), "{next}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_failed_proactive_compaction_is_reported_and_the_work_goes_on() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 40000, "tools": ["read_tickets", "close_ticket"] }),
    )
    .await;
    let big = app
        .create_ticket(json!({ "task": incident_report(32_000), "labels": ["elsewhere"] }))
        .await;
    llm.push(Reply::tool_call(
        "read_tickets",
        json!({ "action": "get", "key": big["key"] }),
    ));
    llm.push_for(SUMMARISER_KEY, Reply::status(500));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "Review the big incident" })).await;
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "ok");
    let failed = event_data(&app, id, "compaction.failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["reason"], "proactive");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests[2].body["messages"].to_string().contains("[0100]"),
        "the transcript is sent as it was"
    );
    app.shutdown().await;
}

/// A summary that does not fit is itself made to fit without the summariser: the task's middle is
/// cut to a quarter of the window, the summary's middle to what is left, and the work goes on.
#[tokio::test]
async fn a_summary_that_does_not_fit_is_cut_and_the_work_goes_on() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "provider": "anthropic", "context_window": 4096, "tools": ["close_ticket"] }),
    )
    .await;
    llm.push_for(SUMMARISER_KEY, Reply::text(&incident_report(14_000)));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "reviewed" })));
    let ticket = app.create_ticket(json!({ "task": incident_report(14_000) })).await;
    let id = ticket["id"].as_str().unwrap();
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "reviewed");
    // One compaction: one started, one finished, whose estimate is below the blocking threshold.
    assert_eq!(event_data(&app, id, "compaction.started").await.len(), 1);
    let finished = event_data(&app, id, "compaction.finished").await;
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert!(finished[0]["tokens_after"].as_u64().unwrap() < 3_072, "{finished:?}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "the summariser, then the model");
    let sent = requests[1].body.to_string();
    assert!(sent.len() < 4096 * 4, "{} bytes sent", sent.len());
    assert!(sent.contains("the summary did not fit"), "{sent}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_with_a_thinking_budget_asks_claude_for_extended_thinking() {
    let (app, llm) = start().await;
    let (code, body) = app.put("/v1/agents/default", json!({ "thinking_budget": 100 })).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    set_default_agent(&app, json!({ "thinking_budget": 2048, "temperature": 0.5 })).await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })).with_thinking("Let me see.", "sig-t"));
    let ticket = app.create_ticket(json!({ "task": "think first" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let body = &llm.requests()[0].body;
    assert_eq!(body["thinking"], json!({ "type": "enabled", "budget_tokens": 2048 }));
    assert!(
        body["max_tokens"].as_u64().unwrap() > 2048,
        "room for the answer beyond the budget"
    );
    assert!(
        body.get("temperature").is_none(),
        "thinking requires the default temperature"
    );
    app.shutdown().await;
}
