//! The worker pool and the agent loop against a fake model server speaking the OpenAI streaming
//! wire format: claims, steps, tools, humans in the loop, cancel, retries and faults.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{event_data, event_kinds, eventually, position, wait_status};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

async fn start(configure: impl FnOnce(&mut agentdesk::config::Config)) -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, configure).await;
    (app, llm)
}

/// Every `comment.created` event of a ticket carries its comment exactly as the API lists it
/// (a step's comments and their events are written in one statement, `seq` spliced in there).
async fn assert_events_carry_the_listed_comments(app: &TestApp, ticket: &Value) {
    let logged: Vec<Value> = event_data(app, ticket["id"].as_str().unwrap(), "comment.created")
        .await
        .into_iter()
        .map(|data| data["comment"].clone())
        .collect();
    let listed = app
        .list_all(&format!("/v1/tickets/{}/comments", ticket["key"].as_str().unwrap()))
        .await;
    assert!(!listed.is_empty());
    assert_eq!(logged, listed);
}

#[tokio::test]
async fn a_one_step_ticket_is_done_with_its_result_usage_and_events_in_order() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": { "answer": 42 } })).usage(120, 30));
    let ticket = app.create_ticket(json!({ "task": "What is six times seven?" })).await;
    let key = ticket["key"].as_str().unwrap();
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], json!({ "answer": 42 }));
    assert_eq!(done["agent"], "default");
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["usage"]["requests"], 1);
    assert_eq!(done["usage"]["tool_calls"], 1);
    assert_eq!(done["usage"]["input_tokens"], 120);
    assert_eq!(done["usage"]["output_tokens"], 30);
    assert!(
        done["labels"].as_array().unwrap().contains(&json!("default")),
        "the claiming agent's name is added"
    );

    let kinds = event_kinds(&app, done["id"].as_str().unwrap()).await;
    assert_eq!(
        kinds,
        [
            "ticket.created",
            "ticket.started",
            "comment.created",
            "request.started",
            "request.finished",
            "comment.created",
            "tool.started",
            "tool.finished",
            "comment.created",
            "ticket.done"
        ]
    );
    let started = event_data(&app, done["id"].as_str().unwrap(), "ticket.started").await;
    assert_eq!(
        started[0],
        json!({ "agent": "default", "attempt": 1, "agent_version": 1 })
    );
    assert_events_carry_the_listed_comments(&app, &done).await;

    // The request carried the task, the role as system prompt, the tools and usage streaming.
    let request = &llm.requests()[0].body;
    assert_eq!(request["stream"], true);
    assert_eq!(request["stream_options"]["include_usage"], true);
    assert_eq!(request["messages"][0]["role"], "system");
    assert!(request["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("six times seven"));
    let tools: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["close_ticket", "handover_ticket", "read_tickets", "manage_tickets"]
    );
    app.shutdown().await;
}

/// Every write of a ticket's row is a new version of it, with entries in its indexes: a one-step
/// ticket's row is written once per stage (created, claimed, request started, result stored), each
/// stage's events and comments taking their seqs in that same write.
#[tokio::test]
async fn a_one_step_tickets_row_is_written_once_per_stage() {
    let (app, llm) = start(|_| {}).await;
    sqlx::raw_sql(
        "CREATE TABLE row_writes (ticket_id uuid NOT NULL, op text NOT NULL);
         CREATE FUNCTION count_row_writes() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO row_writes VALUES (NEW.id, TG_OP);
             RETURN NEW;
         END $$;
         CREATE TRIGGER count_row_writes AFTER INSERT OR UPDATE ON tickets
             FOR EACH ROW EXECUTE FUNCTION count_row_writes();",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "say ok" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let id: uuid::Uuid = done["id"].as_str().unwrap().parse().unwrap();
    let writes: Vec<String> = sqlx::query_scalar("SELECT op FROM row_writes WHERE ticket_id = $1")
        .bind(id)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(writes, ["INSERT", "UPDATE", "UPDATE", "UPDATE"]);
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM events WHERE ticket_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(seqs, (1..=10).collect::<Vec<i64>>());
    assert_events_carry_the_listed_comments(&app, &done).await;
    app.shutdown().await;
}

#[tokio::test]
async fn text_deltas_stream_live_on_the_ticket_stream_without_ids() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::text("Which city do you mean?").chunk_delay(Duration::from_millis(30)));
    let ticket = app.create_ticket(json!({ "task": "Weather?" })).await;
    let key = ticket["key"].as_str().unwrap();
    let mut stream = app.sse(&format!("/v1/tickets/{key}/events"), None).await;
    let events = stream.collect_until(|e| e.kind() == "ticket.waiting", WAIT).await;
    let deltas: Vec<&SseEvent> = events.iter().filter(|e| e.kind() == "text.delta").collect();
    assert!(deltas.len() >= 2, "the reply streams in several deltas: {events:?}");
    let text: String = deltas
        .iter()
        .map(|e| e.data["data"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Which city do you mean?");
    assert!(deltas.iter().all(|e| e.id.is_none() && e.data["seq"].is_null()));
    let finished = events.iter().position(|e| e.kind() == "request.finished").unwrap();
    let first_delta = events.iter().position(|e| e.kind() == "text.delta").unwrap();
    assert!(first_delta < finished, "deltas arrive before the response is stored");
    app.shutdown().await;
}

/// Deltas are made only while some stream can show them: a global stream whose `kind` filter
/// names a delta kind is such a stream, even when it is the only one open.
#[tokio::test]
async fn a_global_stream_filtered_to_deltas_receives_them_while_a_stream_of_other_kinds_is_open() {
    let (app, llm) = start(|_| {}).await;
    let mut others = app.sse("/v1/events?kind=ticket.done,ticket.waiting", None).await;
    let mut exact = app.sse("/v1/events?kind=text.delta", None).await;
    let mut wildcard = app.sse("/v1/events?kind=text.*", None).await;
    llm.push(Reply::text("Which city do you mean?").chunk_delay(Duration::from_millis(30)));
    let ticket = app.create_ticket(json!({ "task": "Weather?" })).await;
    for stream in [&mut exact, &mut wildcard] {
        let mut text = String::new();
        let deltas = stream
            .collect_until(
                |e| {
                    text.push_str(e.data["data"]["delta"].as_str().unwrap_or_default());
                    text == "Which city do you mean?"
                },
                WAIT,
            )
            .await;
        assert!(deltas.len() >= 2, "{deltas:?}");
        assert!(deltas.iter().all(|e| e.kind() == "text.delta"), "{deltas:?}");
    }
    let waiting = others.collect_until(|e| e.kind() == "ticket.waiting", WAIT).await;
    assert!(waiting.iter().all(|e| e.kind() == "ticket.waiting"), "{waiting:?}");
    assert_eq!(waiting.last().unwrap().data["ticket_key"], ticket["key"]);
    app.shutdown().await;
}

use support::SseEvent;

#[tokio::test]
async fn a_text_reply_waits_for_the_humans_and_a_comment_resumes_the_agent_with_it() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::text("Which city?"));
    let ticket = app.create_ticket(json!({ "task": "What's the weather?" })).await;
    let key = ticket["key"].as_str().unwrap();
    let waiting = wait_status(&app, key, "waiting").await;
    assert_eq!(waiting["attempts"], 0, "asking the humans spends no attempt");

    llm.push(Reply::tool_call("close_ticket", json!({ "result": "Sunny in Berlin" })));
    let (code, _) = app
        .post(
            &format!("/v1/tickets/{key}/comments"),
            json!({ "text": "Berlin, please" }),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "Sunny in Berlin");

    let second = &llm.requests()[1].body["messages"];
    let texts: Vec<String> = second
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("Which city?")),
        "the agent's question is in context"
    );
    assert!(
        texts.last().unwrap().contains("Berlin, please"),
        "the human's answer is the last message"
    );
    let requeued = event_data(&app, done["id"].as_str().unwrap(), "ticket.requeued").await;
    assert_eq!(requeued, [json!({ "reason": "comment" })]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_schema_bound_ticket_retries_a_text_reply_and_an_invalid_result_then_succeeds() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::text("The answer is 4."));
    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": { "answer": "four" } }),
    ));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": { "answer": 4 } })));
    let schema = json!({ "type": "object", "properties": { "answer": { "type": "integer" } }, "required": ["answer"] });
    let ticket = app.create_ticket(json!({ "task": "2+2?", "schema": schema })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], json!({ "answer": 4 }));
    let retried = event_data(&app, done["id"].as_str().unwrap(), "schema.retried").await;
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0]["attempt"], 1);
    assert_eq!(retried[1]["attempt"], 2);
    assert_eq!(retried[0]["max_attempts"], 10);
    let failed_tools = event_data(&app, done["id"].as_str().unwrap(), "tool.failed").await;
    assert_eq!(failed_tools[0]["kind"], "result_invalid");
    // The model was told what was wrong.
    let third = llm.requests()[2].body["messages"].to_string();
    assert!(third.contains("Your previous reply was not accepted"));
    app.shutdown().await;
}

#[tokio::test]
async fn schema_retries_run_out_and_the_ticket_fails_with_a_policy_violation() {
    let (app, llm) = start(|_| {}).await;
    let (code, _) = app.put("/v1/agents/default", json!({ "max_schema_retries": 1 })).await;
    assert_eq!(code, StatusCode::OK);
    llm.push(Reply::text("no"));
    llm.push(Reply::text("still no"));
    let ticket = app
        .create_ticket(json!({ "task": "x", "schema": { "type": "integer" } }))
        .await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "max_schema_retries");
    let kinds = event_kinds(&app, failed["id"].as_str().unwrap()).await;
    assert!(position(&kinds, "schema.retried") < position(&kinds, "policy.violated"));
    assert_eq!(kinds.last().unwrap(), "ticket.failed");
    app.shutdown().await;
}

#[tokio::test]
async fn parallel_tool_calls_run_and_their_results_return_in_call_order() {
    let (app, llm) = start(|_| {}).await;
    app.create_ticket(json!({ "task": "other ticket", "labels": ["elsewhere"] }))
        .await;
    llm.push(Reply::tool_calls(vec![
        ("read_tickets", json!({ "action": "list" })),
        ("read_tickets", json!({ "action": "get", "key": "TICKET-1" })),
        ("read_tickets", json!({ "action": "search", "query": "other" })),
    ]));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "seen" })));
    let ticket = app.create_ticket(json!({ "task": "look around" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let second = &llm.requests()[1].body["messages"];
    let tool_messages: Vec<&Value> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    let ids: Vec<&str> = tool_messages
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    let calls = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()["tool_calls"]
        .clone();
    let call_ids: Vec<&str> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, call_ids);
    assert_eq!(done["usage"]["tool_calls"], 4);
    assert_events_carry_the_listed_comments(&app, &done).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_writing_tool_runs_after_its_call_is_stored_and_its_results_follow() {
    let (app, llm) = start(|_| {}).await;
    llm.push(
        Reply::tool_call(
            "manage_tickets",
            json!({ "action": "create", "task": "a sub-task", "labels": ["elsewhere"] }),
        )
        .usage(50, 10),
    );
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "delegated" })).usage(70, 20));
    let ticket = app.create_ticket(json!({ "task": "split this up" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "delegated");
    assert_eq!(done["usage"]["requests"], 2);
    assert_eq!(done["usage"]["tool_calls"], 2);
    assert_eq!(done["usage"]["input_tokens"], 120);

    let kinds = event_kinds(&app, done["id"].as_str().unwrap()).await;
    let first_step = &kinds[position(&kinds, "request.finished")..position(&kinds, "tool.finished") + 2];
    assert_eq!(
        first_step,
        [
            "request.finished",
            "comment.created",
            "tool.started",
            "tool.finished",
            "comment.created"
        ]
    );
    assert_events_carry_the_listed_comments(&app, &done).await;
    let subs = app.list_all("/v1/tickets?label=elsewhere").await;
    assert_eq!(subs.len(), 1, "the tool ran once");
    app.shutdown().await;
}

#[tokio::test]
async fn truncated_tool_arguments_are_repaired_and_the_repaired_input_is_stored_and_shown() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::raw_tool_call("close_ticket", r#"{"result": "hel"#));
    let ticket = app.create_ticket(json!({ "task": "greet" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "hel");
    let started = event_data(&app, done["id"].as_str().unwrap(), "tool.started").await;
    assert_eq!(started[0]["input"], json!({ "result": "hel" }));
    app.shutdown().await;
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_its_retry_after_and_the_retry_is_announced_first() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::status(429).retry_after(1));
    llm.push(Reply::status(503));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let (code, _) = app
        .put("/v1/agents/default", json!({ "request_retry_delay_ms": 10 }))
        .await;
    assert_eq!(code, StatusCode::OK);
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let retried = event_data(&app, done["id"].as_str().unwrap(), "request.retried").await;
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0]["kind"], "rate_limited");
    assert_eq!(retried[0]["delay_ms"], 1000, "Retry-After wins");
    assert_eq!(retried[0]["attempt"], 1);
    assert_eq!(retried[0]["max_attempts"], 10);
    assert_eq!(retried[1]["kind"], "server_error");
    assert_eq!(llm.request_count(), 3);
    app.shutdown().await;
}

#[tokio::test]
async fn a_terminal_provider_error_fails_the_ticket_at_once() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::status(401));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "authentication_failed");
    let kinds = event_kinds(&app, failed["id"].as_str().unwrap()).await;
    assert!(!kinds.contains(&"request.retried".to_string()));
    assert_eq!(&kinds[kinds.len() - 2..], ["request.failed", "ticket.failed"]);
    assert_eq!(llm.request_count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn exhausted_retries_fail_the_ticket_instead_of_requeueing_it() {
    let (app, llm) = start(|_| {}).await;
    app.put(
        "/v1/agents/default",
        json!({ "max_request_retries": 2, "request_retry_delay_ms": 1 }),
    )
    .await;
    for _ in 0..3 {
        llm.push(Reply::status(500));
    }
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "server_error");
    assert_eq!(llm.request_count(), 3);
    // Workers claim the oldest ticket first: once a ticket created afterwards is done and every
    // loop has ended, a claim of the failed one would have sent its request.
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "marker" })));
    let marker = app.create_ticket(json!({ "task": "marker" })).await;
    wait_status(&app, marker["key"].as_str().unwrap(), "done").await;
    app.wait_idle().await;
    assert_eq!(llm.request_count(), 4, "a failed ticket is not claimed again");
    app.shutdown().await;
}

#[tokio::test]
async fn a_stall_before_any_output_reconnects_but_a_stall_after_partial_output_fails() {
    let (app, llm) = start(|c| c.stream_idle = Duration::from_millis(400)).await;
    app.put("/v1/agents/default", json!({ "request_retry_delay_ms": 1 }))
        .await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })).stall_after(1));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let first = app.create_ticket(json!({ "task": "first" })).await;
    let done = wait_status(&app, first["key"].as_str().unwrap(), "done").await;
    let retried = event_data(&app, done["id"].as_str().unwrap(), "request.retried").await;
    assert_eq!(retried[0]["kind"], "stream_stalled");

    llm.push(Reply::text("partial answer that never ends").stall_after(3));
    let second = app.create_ticket(json!({ "task": "second" })).await;
    let failed = wait_status(&app, second["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "stream_stalled");
    assert!(event_data(&app, failed["id"].as_str().unwrap(), "request.retried")
        .await
        .is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_mid_stream_ends_the_ticket_within_two_seconds_and_retry_continues_it() {
    let (app, llm) = start(|_| {}).await;
    llm.push(Reply::text("a very slow answer that goes on and on").chunk_delay(Duration::from_millis(500)));
    let ticket = app.create_ticket(json!({ "task": "slow" })).await;
    let key = ticket["key"].as_str().unwrap();
    wait_status(&app, key, "in_progress").await;
    assert!(llm.wait_for_requests(1, WAIT).await);
    let started = std::time::Instant::now();
    let (code, cancelled) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(2));
    let events_after_cancel = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
    // The aborted loop has ended: whatever it would have written is written by now.
    app.wait_idle().await;
    assert_eq!(
        event_kinds(&app, ticket["id"].as_str().unwrap()).await,
        events_after_cancel,
        "the aborted worker wrote nothing"
    );

    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": "done after retry" }),
    ));
    let (code, _) = app.post(&format!("/v1/tickets/{key}/retry"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "done after retry");
    let messages = llm.requests()[1].body["messages"].to_string();
    assert!(messages.contains("slow"), "the agent continues from its transcript");
    app.shutdown().await;
}

/// `usage.requests` counts every request sent: one cut off by a cancel, and one that failed
/// before a cancel ended the wait for its retry.
#[tokio::test]
async fn requests_sent_before_a_cancel_are_counted() {
    let (app, llm) = start(|_| {}).await;
    let (code, _) = app
        .put("/v1/agents/default", json!({ "request_retry_delay_ms": 60000 }))
        .await;
    assert_eq!(code, StatusCode::OK);
    let requests_of = |key: String| {
        let app = &app;
        async move {
            let path = &format!("/v1/tickets/{key}");
            eventually(format!("{key} to count a request"), WAIT, || async move {
                let (_, ticket) = app.get(path).await;
                (ticket["usage"]["requests"] != 0).then(|| ticket["usage"]["requests"].clone())
            })
            .await
        }
    };

    // Failed, then cancelled while waiting to retry.
    llm.push(Reply::status(500));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let (key, id) = (
        ticket["key"].as_str().unwrap().to_owned(),
        ticket["id"].as_str().unwrap(),
    );
    eventually("the request to be retried", WAIT, || async {
        event_kinds(&app, id)
            .await
            .contains(&"request.retried".to_owned())
            .then_some(())
    })
    .await;
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(requests_of(key).await, 1);

    // Cancelled while its answer streams.
    llm.push(Reply::text("a very slow answer").chunk_delay(Duration::from_millis(500)));
    let ticket = app.create_ticket(json!({ "task": "slow" })).await;
    let key = ticket["key"].as_str().unwrap().to_owned();
    assert!(llm.wait_for_requests(2, WAIT).await);
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(requests_of(key).await, 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_handover_chain_of_three_agents_runs_to_the_end() {
    let (app, llm) = start(|_| {}).await;
    for name in ["researcher", "writer", "editor"] {
        let (code, _) = app
            .put(
                &format!("/v1/agents/{name}"),
                json!({ "role": format!("You are the {name}.") }),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED);
    }
    llm.push_for(
        "You are the researcher.",
        Reply::tool_call(
            "handover_ticket",
            json!({
                "to": "writer", "task": "Write about {parent_key}: {parent_result}", "result": "facts"
            }),
        ),
    );
    llm.push_for(
        "You are the writer.",
        Reply::tool_call(
            "handover_ticket",
            json!({
                "to": "editor", "task": "Edit {parent_result} from {parent_key}", "result": "draft"
            }),
        ),
    );
    llm.push_for(
        "You are the editor.",
        Reply::tool_call("close_ticket", json!({ "result": "final" })),
    );
    let first = app
        .create_ticket(json!({ "task": "Research", "labels": ["researcher"] }))
        .await;
    let first = wait_status(&app, first["key"].as_str().unwrap(), "done").await;
    assert_eq!(first["result"], "facts");
    let second = wait_status(&app, "TICKET-2", "done").await;
    assert_eq!(
        second["task"],
        format!("Write about {}: facts", first["key"].as_str().unwrap())
    );
    assert_eq!(second["parent_key"], first["key"]);
    assert_eq!(second["reporter"], "researcher");
    assert_eq!(second["agent"], "writer");
    let third = wait_status(&app, "TICKET-3", "done").await;
    assert_eq!(third["task"], "Edit draft from TICKET-2");
    assert_eq!(third["agent"], "editor");
    assert_eq!(third["result"], "final");
    app.shutdown().await;
}

#[tokio::test]
async fn max_turns_fails_the_ticket_with_a_policy_violation() {
    let (app, llm) = start(|_| {}).await;
    app.put("/v1/agents/default", json!({ "max_turns": 2 })).await;
    llm.set_responder(|_| Reply::tool_call("read_tickets", json!({ "action": "list" })));
    let ticket = app.create_ticket(json!({ "task": "loop forever" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "max_turns");
    let violated = event_data(&app, failed["id"].as_str().unwrap(), "policy.violated").await;
    assert_eq!(violated, [json!({ "kind": "max_turns", "limit": 2 })]);
    assert_eq!(llm.request_count(), 2);
    app.shutdown().await;
}

/// What the reaper does when a worker stops renewing: expire the lease and re-queue the ticket.
async fn expire_and_reap(app: &TestApp, key: &str) {
    sqlx::query("UPDATE tickets SET lease_expires_at = now() - interval '1 second' WHERE key = $1")
        .bind(key)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        agentdesk::transitions::claims::reap_expired(&app.pool, 10)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn a_zombie_workers_late_writes_change_nothing() {
    let (app, llm) = start(|c| c.lease = Duration::from_secs(30)).await;
    // The first claim's model call outlives its (forcibly expired) lease.
    llm.push(Reply::text("ZOMBIE reply").first_byte_delay(Duration::from_secs(2)));
    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": "from the second claim" }),
    ));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let key = ticket["key"].as_str().unwrap();
    assert!(llm.wait_for_requests(1, WAIT).await);
    expire_and_reap(&app, key).await;
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "from the second claim");
    assert_eq!(done["attempts"], 2, "the lost claim counts as an attempt");
    // The zombie's loop has ended: its late writes were tried (and refused) by now.
    app.wait_idle().await;
    let comments = app.list_all(&format!("/v1/tickets/{key}/comments")).await;
    assert!(
        !serde_json::to_string(&comments).unwrap().contains("ZOMBIE"),
        "the zombie's reply was not stored"
    );
    let kinds = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
    assert_eq!(kinds.last().unwrap(), "ticket.done");
    assert_eq!(kinds.iter().filter(|k| *k == "ticket.requeued").count(), 1);
    let requeued = event_data(&app, ticket["id"].as_str().unwrap(), "ticket.requeued").await;
    assert_eq!(requeued, [json!({ "reason": "lease_lost" })]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_zombie_workers_late_tool_results_and_close_change_nothing() {
    let (app, llm) = start(|c| c.lease = Duration::from_secs(30)).await;
    // The zombie's reply is a finisher: its results, its usage and its close are one write,
    // which the claim check inside that write must refuse whole.
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": "ZOMBIE result" })).first_byte_delay(Duration::from_secs(2)),
    );
    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": "from the second claim" }),
    ));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let key = ticket["key"].as_str().unwrap();
    assert!(llm.wait_for_requests(1, WAIT).await);
    expire_and_reap(&app, key).await;
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "from the second claim");
    // The zombie's loop has ended: its late writes were tried (and refused) by now.
    app.wait_idle().await;
    let done = app.get(&format!("/v1/tickets/{key}")).await.1;
    assert_eq!(done["result"], "from the second claim");
    assert_eq!(done["usage"]["requests"], 1, "the zombie's request added no usage");
    let comments = app.list_all(&format!("/v1/tickets/{key}/comments")).await;
    assert!(
        !serde_json::to_string(&comments).unwrap().contains("ZOMBIE"),
        "the zombie's call and result were not stored"
    );
    let kinds = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
    assert_eq!(kinds.iter().filter(|k| *k == "ticket.done").count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn deltas_of_a_worker_only_process_reach_the_clients_of_an_api_process() {
    let llm = FakeLlm::start().await;
    let api = TestApp::spawn_full(agentdesk::app::Mode::Api, agentdesk::llm::Providers::default(), |_| {}).await;
    let database_url = api.database_url.clone();
    let providers = support::fake_providers(&llm);
    let worker = TestApp::spawn_full(agentdesk::app::Mode::Worker, providers, |c| {
        c.database_url = Some(database_url);
    })
    .await;
    llm.push(Reply::text("hello from another process").chunk_delay(Duration::from_millis(40)));
    let ticket = api.create_ticket(json!({ "task": "say hello" })).await;
    let mut stream = api
        .sse(&format!("/v1/tickets/{}/events", ticket["key"].as_str().unwrap()), None)
        .await;
    let events = stream.collect_until(|e| e.kind() == "ticket.waiting", WAIT).await;
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "text.delta")
        .map(|e| e.data["data"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "hello from another process");
    worker.shutdown().await;
    api.shutdown().await;
}

/// A quick model's whole text and its close in one breath: the deltas, forwarded in batches by
/// the worker-only process, still reach the API's stream before the `ticket.done` that ends it.
#[tokio::test]
async fn a_quick_models_text_reaches_another_processs_stream_before_the_final_event() {
    let llm = FakeLlm::start().await;
    let api = TestApp::spawn_full(agentdesk::app::Mode::Api, agentdesk::llm::Providers::default(), |_| {}).await;
    let database_url = api.database_url.clone();
    let worker = TestApp::spawn_full(agentdesk::app::Mode::Worker, support::fake_providers(&llm), |c| {
        c.database_url = Some(database_url);
    })
    .await;
    // The first byte waits for the stream below to be open; then text and close come at once.
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": "ok" }))
            .with_text("quick text")
            .first_byte_delay(Duration::from_millis(500)),
    );
    let ticket = api.create_ticket(json!({ "task": "be quick" })).await;
    let mut stream = api
        .sse(&format!("/v1/tickets/{}/events", ticket["key"].as_str().unwrap()), None)
        .await;
    let events = stream.collect_until(|e| e.kind() == "ticket.done", WAIT).await;
    assert_eq!(events.last().map(|e| e.kind()), Some("ticket.done"), "{events:?}");
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "text.delta")
        .map(|e| e.data["data"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "quick text", "the live text before the final event");
    worker.shutdown().await;
    api.shutdown().await;
}

#[tokio::test]
async fn a_process_whose_lease_lapsed_stops_its_tickets_and_goes_on_under_a_new_lease() {
    let (app, llm) = start(|c| c.lease = Duration::from_secs(3)).await;
    // The first claim's model call outlives the process's lease, which lapses meanwhile (as it
    // would if the process had hung): the reaper takes the ticket back.
    llm.push(Reply::text("ZOMBIE reply").first_byte_delay(Duration::from_secs(4)));
    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": "under the new lease" }),
    ));
    let ticket = app.create_ticket(json!({ "task": "t" })).await;
    let key = ticket["key"].as_str().unwrap();
    assert!(llm.wait_for_requests(1, WAIT).await);
    let held: (String, String) =
        sqlx::query_as("SELECT t.worker_id, t.lease_expires_at::text FROM tickets t WHERE key = $1")
            .bind(key)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        held.1, "infinity",
        "held under its process's lease, not a lease of its own"
    );
    sqlx::query("UPDATE worker_leases SET expires_at = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    // The reaper takes the ticket back; the process finds its lease lost at its next renewal,
    // stops the first claim's loop, takes a new lease and claims the ticket again under it.
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "under the new lease");
    assert_eq!(done["attempts"], 2, "the lost claim counts as an attempt");
    let leases: Vec<(String, bool)> =
        sqlx::query_as("SELECT worker_id, reaped_at IS NOT NULL FROM worker_leases ORDER BY reaped_at NULLS LAST")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(leases.len(), 2, "{leases:?}");
    assert_eq!(
        leases[0],
        (held.0, true),
        "the lapsed lease is marked and never renewed"
    );
    assert!(!leases[1].1);
    // The first claim's loop was stopped: its model call was dropped, and wrote nothing.
    eventually("the first claim's model call to close", WAIT, || async {
        (llm.in_flight() == 0).then_some(())
    })
    .await;
    let comments = app.list_all(&format!("/v1/tickets/{key}/comments")).await;
    assert!(!serde_json::to_string(&comments).unwrap().contains("ZOMBIE"));
    let requeued = event_data(&app, ticket["id"].as_str().unwrap(), "ticket.requeued").await;
    assert_eq!(requeued, [json!({ "reason": "lease_lost" })]);
    // A graceful stop that holds nothing forgets its lease; the lapsed one stays a while, for a
    // claim statement that was in flight when it was marked.
    let database_url = app.database_url.clone();
    app.shutdown().await;
    let pool = sqlx::PgPool::connect(&database_url).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT worker_id FROM worker_leases")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, [leases[0].0.clone()]);
}

#[tokio::test]
async fn a_lease_renewal_is_one_row_so_a_locked_ticket_neither_holds_it_up_nor_loses_a_claim() {
    // A ticket's row is locked across several renewals while new tickets are claimed: the
    // process's lease is renewed without touching a ticket's row, and no claim is taken for lost.
    let (app, llm) = start(|c| {
        c.lease = Duration::from_secs(2);
        c.workers = 16;
    })
    .await;
    llm.set_responder(|body| {
        let slow = body.to_string().contains("slow");
        let delay = Duration::from_millis(if slow { 2500 } else { 30 });
        Reply::tool_call("close_ticket", json!({ "result": "ok" })).first_byte_delay(delay)
    });
    let slow = app.create_ticket(json!({ "task": "slow" })).await;
    let slow_key = slow["key"].as_str().unwrap().to_owned();
    assert!(llm.wait_for_requests(1, WAIT).await);

    // Hold the slow ticket's row across renewals (one runs every lease/3), claiming meanwhile.
    let mut lock = app.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM tickets WHERE key = $1 FOR UPDATE")
        .bind(&slow_key)
        .execute(&mut *lock)
        .await
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_millis(1000);
    let mut keys = vec![];
    while std::time::Instant::now() < until {
        let ticket = app.create_ticket(json!({ "task": "quick" })).await;
        keys.push(ticket["key"].as_str().unwrap().to_owned());
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    lock.rollback().await.unwrap();

    keys.push(slow_key);
    for key in &keys {
        let done = wait_status(&app, key, "done").await;
        assert_eq!(done["attempts"], 1, "{key} lost a claim it held");
    }
    let requeued: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE kind = 'ticket.requeued'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(requeued, 0, "no ticket was re-queued");
    app.shutdown().await;
}

#[tokio::test]
async fn a_backlog_is_claimed_by_claims_side_by_side_that_never_take_more_tickets_than_the_workers() {
    // A backlog waits before any worker runs: the worker's claims come back full, so further
    // claims run beside them, and together they must still stop at `workers` tickets in flight.
    const TICKETS: usize = 400;
    const WORKERS: usize = 100;
    let llm = FakeLlm::start().await;
    llm.set_responder(|_| {
        Reply::tool_call("close_ticket", json!({ "result": "ok" })).first_byte_delay(Duration::from_millis(300))
    });
    let api = TestApp::spawn_full(agentdesk::app::Mode::Api, agentdesk::llm::Providers::default(), |_| {}).await;
    let creates = (0..TICKETS).map(|i| api.create_ticket(json!({ "task": format!("backlog {i}") })));
    futures::future::join_all(creates).await;

    let providers = support::fake_providers(&llm);
    let database_url = api.database_url.clone();
    let worker = TestApp::spawn_full(agentdesk::app::Mode::Worker, providers, |c| {
        c.database_url = Some(database_url);
        c.workers = WORKERS;
        c.claimers = 4;
    })
    .await;
    let (mut peak, mut done) = (0i64, 0i64);
    let until = std::time::Instant::now() + WAIT;
    while done < TICKETS as i64 && std::time::Instant::now() < until {
        let (in_progress, finished): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'in_progress'), count(*) FILTER (WHERE status = 'done')
             FROM tickets",
        )
        .fetch_one(&api.pool)
        .await
        .unwrap();
        (peak, done) = (peak.max(in_progress), finished);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(done, TICKETS as i64, "every ticket of the backlog was done");
    assert!(
        peak <= WORKERS as i64,
        "{peak} tickets in flight, past the {WORKERS} workers"
    );
    assert!(
        peak > 64,
        "the workers filled up beyond one claim's batch (peak {peak})"
    );
    let claimed_again: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE attempts <> 1")
        .fetch_one(&api.pool)
        .await
        .unwrap();
    assert_eq!(claimed_again, 0, "each ticket was claimed once");
    worker.shutdown().await;
    api.shutdown().await;
}
