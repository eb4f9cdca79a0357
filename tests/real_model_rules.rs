//! What real (often small, local) models need from the loop, against the fake model server
//! scripted to behave like them: replies cut at the output limit, endless invalid tool calls, no
//! `max_turns`, small context windows, slow tool calls streamed live, and a cancel mid-stream.

mod support;

use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::llm::anthropic::Anthropic;
use agentdesk::llm::openai::OpenAi;
use agentdesk::llm::Providers;
use serde_json::{json, Value};
use support::{event_data, event_kinds, position, wait_status, SseEvent};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);
/// What every summariser request ends with.
const SUMMARISER_KEY: &str = "Write the summary now.";

/// The service with both providers pointed at one fake model server (OpenAI is the default
/// agent's unless it names one).
async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let providers = Providers::new(
        Some(OpenAi::new(llm.openai_base_url(), None)),
        Some(Anthropic::new(llm.anthropic_base_url(), Some("k".into()))),
    );
    let app = TestApp::spawn_full(Mode::Serve, providers, |_| {}).await;
    (app, llm)
}

async fn set_default_agent(app: &TestApp, mut agent: Value) {
    agent["request_retry_delay_ms"] = json!(1);
    agent["provider"] = agent.get("provider").cloned().unwrap_or(json!("openai"));
    let (code, body) = app.put("/v1/agents/default", agent).await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

async fn comments(app: &TestApp, key: &str) -> Vec<Value> {
    app.list_all(&format!("/v1/tickets/{key}/comments")).await
}

fn text_of(comment: &Value) -> String {
    comment["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_reply_cut_at_the_output_limit_is_continued_and_a_normal_step_resets_the_count() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "max_schema_retries": 1 })).await;
    llm.push(Reply::text("The first half of the answer").with_stop_reason("length"));
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "list" })));
    llm.push(Reply::text("More of it").with_stop_reason("length"));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "whole answer" })));
    let ticket = app.create_ticket(json!({ "task": "Write a long answer." })).await;
    let key = ticket["key"].as_str().unwrap();
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "whole answer");
    let kinds = event_kinds(&app, done["id"].as_str().unwrap()).await;
    assert!(!kinds.contains(&"ticket.waiting".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"policy.violated".to_owned()), "{kinds:?}");
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    assert_eq!(finished[0]["stop_reason"], "max_tokens");

    let second = llm.requests()[1].body["messages"].to_string();
    assert!(second.contains("The first half of the answer"), "{second}");
    assert!(second.contains("cut off at the output limit"), "{second}");
    let stored = comments(&app, key).await;
    assert_eq!(stored[1]["author"], "assistant");
    assert_eq!(text_of(&stored[1]), "The first half of the answer");
    assert!(text_of(&stored[2]).contains("cut off at the output limit"));
    app.shutdown().await;
}

#[tokio::test]
async fn replies_cut_at_the_output_limit_too_often_in_a_row_fail_the_ticket_with_output_truncated() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "max_schema_retries": 2, "provider": "anthropic" })).await;
    llm.set_responder(|_| Reply::text("and so on").with_stop_reason("max_tokens"));
    let ticket = app.create_ticket(json!({ "task": "Never stop." })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "output_truncated", "{failed}");
    assert_eq!(llm.request_count(), 3, "the first reply and two continuations");
    let id = failed["id"].as_str().unwrap();
    let violated = event_data(&app, id, "policy.violated").await;
    assert_eq!(violated, [json!({ "kind": "max_schema_retries", "limit": 2 })]);
    let kinds = event_kinds(&app, id).await;
    assert!(position(&kinds, "policy.violated") < position(&kinds, "ticket.failed"));
    app.shutdown().await;
}

#[tokio::test]
async fn endless_invalid_tool_input_fails_the_ticket_with_invalid_tool_input() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "max_schema_retries": 2 })).await;
    // A small model answering every request with `{}` for a tool with required fields.
    llm.set_responder(|_| Reply::raw_tool_call("handover_ticket", "{}"));
    let ticket = app.create_ticket(json!({ "task": "Hand this over." })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "invalid_tool_input", "{failed}");
    assert_eq!(llm.request_count(), 3);
    let id = failed["id"].as_str().unwrap();
    let tool_failed = event_data(&app, id, "tool.failed").await;
    assert_eq!(tool_failed.len(), 3);
    assert!(
        tool_failed.iter().all(|f| f["kind"] == "invalid_input"),
        "{tool_failed:?}"
    );
    let violated = event_data(&app, id, "policy.violated").await;
    assert_eq!(violated, [json!({ "kind": "max_schema_retries", "limit": 2 })]);
    assert_eq!(event_kinds(&app, id).await.last().unwrap(), "ticket.failed");
    app.shutdown().await;
}

#[tokio::test]
async fn a_successful_call_resets_the_invalid_input_count() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "max_schema_retries": 1 })).await;
    llm.push(Reply::raw_tool_call("handover_ticket", "{}"));
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "list" })));
    llm.push(Reply::raw_tool_call("no_such_tool", "{}"));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "made it" })));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "made it");
    assert_eq!(llm.request_count(), 4);
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_without_max_turns_stops_at_100_requests() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({})).await;
    llm.set_responder(|_| Reply::tool_call("read_tickets", json!({ "action": "list" })));
    let ticket = app.create_ticket(json!({ "task": "loop forever" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "max_turns");
    let violated = event_data(&app, failed["id"].as_str().unwrap(), "policy.violated").await;
    assert_eq!(violated, [json!({ "kind": "max_turns", "limit": 100 })]);
    assert_eq!(llm.request_count(), 100);
    let (_, agent) = app.get("/v1/agents/default").await;
    assert_eq!(
        agent["max_turns"],
        Value::Null,
        "the default applies without being stored"
    );
    app.shutdown().await;
}

/// A task of `chars` characters whose lines are numbered `[0000]`, `[0001]` …
fn long_text(chars: usize) -> String {
    let mut text = String::from("Incident INC-4711: write the review.\n");
    let mut i = 0;
    while text.len() < chars {
        text.push_str(&format!(
            "[{i:04}] The checkout service returned HTTP 502 after the deploy.\n"
        ));
        i += 1;
    }
    text
}

const SUMMARY: &str = "SUMMARY-MARKER: the review of INC-4711 is under way; next, close the ticket.";

#[tokio::test]
async fn a_small_task_is_kept_verbatim_through_compaction_in_a_4096_window() {
    let (app, llm) = start().await;
    set_default_agent(
        &app,
        json!({ "context_window": 4096, "tools": ["read_tickets", "close_ticket"] }),
    )
    .await;
    let big = app
        .create_ticket(json!({ "task": long_text(14_000), "labels": ["elsewhere"] }))
        .await;
    llm.push(Reply::tool_call(
        "read_tickets",
        json!({ "action": "get", "key": big["key"] }),
    ));
    llm.push_for(SUMMARISER_KEY, Reply::text(SUMMARY));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "Say hi." })).await;
    let key = ticket["key"].as_str().unwrap();
    let id = ticket["id"].as_str().unwrap();
    wait_status(&app, key, "done").await;

    let limit = &event_data(&app, id, "context.limit_exceeded").await[0];
    assert_eq!(limit["threshold_tokens"], 3072, "a 4096 window keeps a quarter free");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let summariser = &requests[1].body;
    assert_eq!(
        summariser["max_tokens"], 1024,
        "the summariser answers within the reserve"
    );
    let summariser_chars = summariser["messages"].to_string().len() + summariser["system"].to_string().len();
    assert!(summariser_chars / 4 <= 3072 + 100, "{summariser_chars}");
    let last = requests[2].body["messages"].to_string();
    let (task, summary) = (last.find("Say hi.").unwrap(), last.find("SUMMARY-MARKER").unwrap());
    assert!(task < summary, "the task, then the summary: {last}");
    assert!(!last.contains("[0100]"));

    let stored = comments(&app, key).await;
    assert_eq!(stored[0]["seq"], 1);
    assert_eq!(text_of(&stored[0]), "Say hi.");
    assert!(text_of(&stored[1]).contains("SUMMARY-MARKER"), "{stored:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_short_task_on_a_2048_window_is_sent_without_compaction() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "context_window": 2048, "tools": ["close_ticket"] })).await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "hi" })));
    let ticket = app.create_ticket(json!({ "task": "Say hi." })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let kinds = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("compaction.") || k == "context.limit_exceeded"),
        "{kinds:?}"
    );
    assert_eq!(llm.request_count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_task_larger_than_a_quarter_of_the_window_is_summarised_with_the_rest() {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "context_window": 4096, "tools": ["close_ticket"] })).await;
    llm.push_for(SUMMARISER_KEY, Reply::text(SUMMARY));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": long_text(14_000) })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "done").await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "the summariser, then the model");
    assert!(requests[0].body.to_string().contains("[0003]"));
    let next = requests[1].body["messages"].to_string();
    assert!(next.contains("SUMMARY-MARKER") && !next.contains("[0003]"), "{next}");
    app.shutdown().await;
}

async fn tool_call_deltas_stream_live(provider: &str) {
    let (app, llm) = start().await;
    set_default_agent(&app, json!({ "provider": provider })).await;
    let result = "a long result written slowly by a small model";
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": result }))
            .with_call_id("call_slow")
            .chunk_delay(Duration::from_millis(150)),
    );
    let ticket = app.create_ticket(json!({ "task": "Write it." })).await;
    let key = ticket["key"].as_str().unwrap();
    let mut stream = app.sse(&format!("/v1/tickets/{key}/events"), None).await;
    let events = stream.collect_until(|e| e.kind() == "ticket.done", WAIT).await;
    let deltas: Vec<&SseEvent> = events.iter().filter(|e| e.kind() == "tool_call.delta").collect();
    assert!(
        deltas.len() >= 2,
        "{provider}: the arguments stream in pieces: {events:?}"
    );
    assert!(deltas.iter().all(|e| e.id.is_none() && e.data["seq"].is_null()));
    assert!(deltas
        .iter()
        .all(|e| e.data["data"]["call_id"] == "call_slow" && e.data["data"]["tool_name"] == "close_ticket"));
    let arguments: String = deltas
        .iter()
        .map(|e| e.data["data"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({ "result": result })
    );
    let first = events.iter().position(|e| e.kind() == "tool_call.delta").unwrap();
    let finished = events.iter().position(|e| e.kind() == "request.finished").unwrap();
    assert!(first < finished, "{provider}: deltas come while the model writes");
    // Never stored.
    let kinds = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
    assert!(!kinds.iter().any(|k| k.ends_with(".delta")), "{kinds:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn tool_call_arguments_stream_live_from_openai() {
    tool_call_deltas_stream_live("openai").await;
}

#[tokio::test]
async fn tool_call_arguments_stream_live_from_anthropic() {
    tool_call_deltas_stream_live("anthropic").await;
}

#[tokio::test]
async fn a_cancel_mid_stream_keeps_the_text_already_streamed() {
    let (app, llm) = start().await;
    llm.push(Reply::text("Partial words shown, then the rest never comes").chunk_delay(Duration::from_millis(400)));
    let ticket = app.create_ticket(json!({ "task": "slow" })).await;
    let key = ticket["key"].as_str().unwrap();
    let id = ticket["id"].as_str().unwrap();
    let mut stream = app.sse(&format!("/v1/tickets/{key}/events"), None).await;
    let seen = stream.collect_until(|e| e.kind() == "text.delta", WAIT).await;
    let shown = seen.last().unwrap().data["data"]["delta"].as_str().unwrap().to_owned();
    let (code, _) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK);

    let kept = support::eventually("the streamed text to be kept", WAIT, || async {
        let stored = comments(&app, key).await;
        stored.iter().find(|c| c["author"] == "assistant").cloned()
    })
    .await;
    let text = text_of(&kept);
    assert!(text.starts_with(&shown), "{text:?} / {shown:?}");
    assert!(!text.contains("never comes"), "only what was streamed: {text:?}");
    assert_eq!(kept["agent"], "default");
    let kinds = event_kinds(&app, id).await;
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["ticket.cancelled", "comment.created"],
        "{kinds:?}"
    );
    assert_eq!(wait_status(&app, key, "cancelled").await["status"], "cancelled");
    // A stream read now, from the start or from the cancel on, sends the kept text and ends.
    let cancelled_seq = (kinds.len() - 1).to_string();
    for from in [None, Some(cancelled_seq.as_str())] {
        let mut late = app.sse(&format!("/v1/tickets/{key}/events"), from).await;
        let sent = late.collect_for(Duration::from_secs(3)).await;
        assert!(late.ended(), "the stream from {from:?} ended");
        assert_eq!(sent.last().unwrap().kind(), "comment.created", "{from:?}");
    }
    // The stream that watched the cancel ended too, with or without the kept text.
    stream.collect_for(Duration::from_secs(3)).await;
    assert!(stream.ended(), "the watching stream ended");

    // A retry continues from it.
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "done" })));
    app.post(&format!("/v1/tickets/{key}/retry"), json!({})).await;
    wait_status(&app, key, "done").await;
    assert!(llm.requests()[1].body["messages"].to_string().contains(&shown));
    app.shutdown().await;
}

/// Claims the one claimable ticket as a worker would (the app runs no worker).
async fn claim(app: &TestApp) -> agentdesk::db::claims::Fence {
    agentdesk::db::claims::register_worker(&app.pool, "test-worker", Duration::from_secs(30))
        .await
        .unwrap();
    let claims = agentdesk::transitions::claims::claim_batch(&mut app.pool.acquire().await.unwrap(), 1, "test-worker")
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    claims[0].fence()
}

#[tokio::test]
async fn streamed_text_is_stored_after_its_claims_cancel_and_never_after_a_lost_claim() {
    use agentdesk::db::claims::store_cancelled_output;
    use agentdesk::domain::ContentBlock;
    use agentdesk::transitions::claims::reap_expired;
    let app = TestApp::spawn().await;
    let content = [ContentBlock::text("partial")];
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let key = ticket["key"].as_str().unwrap();

    // Still held: not a cancel.
    let fence = claim(&app).await;
    assert!(!store_cancelled_output(&app.pool, fence, "default", &content)
        .await
        .unwrap());

    // Lost (reaped), then cancelled: the generation is one up, but the claim did not end by the cancel.
    sqlx::query("UPDATE tickets SET lease_expires_at = now() - interval '1 second' WHERE key = $1")
        .bind(key)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(reap_expired(&app.pool, 10).await.unwrap(), 1);
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert!(!store_cancelled_output(&app.pool, fence, "default", &content)
        .await
        .unwrap());
    assert!(!comments(&app, key).await.iter().any(|c| c["author"] == "assistant"));

    // Claimed again and cancelled while held: kept once.
    app.post(&format!("/v1/tickets/{key}/retry"), json!({})).await;
    let fence = claim(&app).await;
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert!(store_cancelled_output(&app.pool, fence, "default", &content)
        .await
        .unwrap());
    let stored = comments(&app, key).await;
    assert_eq!(stored.iter().filter(|c| c["author"] == "assistant").count(), 1);
    // A claim older than the cancelled one is not that cancel's.
    let older = agentdesk::db::claims::Fence {
        generation: fence.generation - 1,
        ..fence
    };
    assert!(!store_cancelled_output(&app.pool, older, "default", &content)
        .await
        .unwrap());
    app.shutdown().await;
}
