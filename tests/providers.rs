//! Named providers and what local model servers need: `/v1/providers`, agents working through a
//! named provider, `tool_choice`, no null content, estimated usage, failed requests counted, error
//! bodies kept and empty answers, against the fake model server.

mod support;

use serde_json::{json, Value};
use support::{assert_error, event_data, wait_status};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    (app, llm)
}

/// Points the `default` agent at `provider` with the extra agent fields.
async fn default_agent(app: &TestApp, provider: &str, extra: Value) {
    let mut body = json!({ "provider": provider, "model": "local-model", "request_retry_delay_ms": 1 });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (code, agent) = app.put("/v1/agents/default", body).await;
    assert_eq!(code, StatusCode::OK, "{agent}");
}

async fn define(app: &TestApp, name: &str, body: Value) -> (StatusCode, Value) {
    app.put(&format!("/v1/providers/{name}"), body).await
}

#[tokio::test]
async fn providers_are_defined_listed_read_and_deleted_with_the_key_shown_as_its_template() {
    let (app, llm) = start().await;
    let body = json!({
        "kind": "openai", "base_url": llm.openai_base_url(), "api_key": "${env:AGENTDESK_TEST_KEY_CRUD}",
        "headers": { "X-Team": "${env:AGENTDESK_TEST_TEAM}" }, "timeout_ms": 30000
    });
    let (code, created) = define(&app, "local", body.clone()).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["api_key"], "${env:AGENTDESK_TEST_KEY_CRUD}");
    assert_eq!(created["headers"]["X-Team"], "${env:AGENTDESK_TEST_TEAM}");
    assert_eq!(created["timeout_ms"], 30000);
    assert_eq!(created["builtin"], false);
    let (code, replaced) = define(&app, "local", body).await;
    assert_eq!(code, StatusCode::OK, "{replaced}");

    let stored: Option<String> = sqlx::query_scalar("SELECT api_key FROM providers WHERE name = 'local'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some("${env:AGENTDESK_TEST_KEY_CRUD}"));

    let (code, list) = app.get("/v1/providers").await;
    assert_eq!(code, StatusCode::OK);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["openai", "anthropic", "local"]);
    assert_eq!(list["items"][0]["builtin"], true);
    assert_eq!(list["items"][0]["configured"], true);
    assert_eq!(list["items"][0]["base_url"], llm.openai_base_url());
    assert_eq!(list["items"][1]["configured"], false);
    assert_eq!(list["next_cursor"], Value::Null);
    // Paged like every list, in the same order.
    let (_, first) = app.get("/v1/providers?limit=2").await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    let cursor = first["next_cursor"].as_str().expect("a next page");
    let (_, rest) = app.get(&format!("/v1/providers?limit=2&cursor={cursor}")).await;
    assert_eq!(rest["items"][0]["name"], "local");
    assert_eq!(rest["next_cursor"], Value::Null);
    for bad in ["limit=0", "limit=abc", "cursor=zzz"] {
        support::assert_error(
            &app.get(&format!("/v1/providers?{bad}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    let (code, one) = app.get("/v1/providers/local").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(one["api_key"], "${env:AGENTDESK_TEST_KEY_CRUD}");
    assert_eq!(app.get("/v1/providers/openai").await.1["builtin"], true);

    // Bad input is refused and changes nothing.
    let url = llm.openai_base_url();
    for (name, bad) in [
        ("local", json!({ "kind": "cohere", "base_url": url })),
        ("local", json!({ "kind": "openai", "base_url": "ftp://example.com" })),
        ("local", json!({ "kind": "openai", "base_url": "not a url" })),
        (
            "local",
            json!({ "kind": "openai", "base_url": format!("https://e.com/{}", "a".repeat(2048)) }),
        ),
        ("local", json!({ "kind": "openai", "base_url": url, "timeout_ms": 0 })),
        (
            "local",
            json!({ "kind": "openai", "base_url": url, "timeout_ms": 99_999_999 }),
        ),
        (
            "local",
            json!({ "kind": "openai", "base_url": url, "headers": { "bad header": "x" } }),
        ),
        ("bad name!", json!({ "kind": "openai", "base_url": url })),
    ] {
        let answer = define(&app, &name.replace(' ', "%20"), bad.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.get("/v1/providers/local").await.1, one);
    for builtin in ["openai", "anthropic"] {
        let answer = define(&app, builtin, json!({ "kind": "openai", "base_url": url })).await;
        assert_error(&answer, StatusCode::CONFLICT, "conflict");
        assert_error(
            &app.delete(&format!("/v1/providers/{builtin}")).await,
            StatusCode::CONFLICT,
            "conflict",
        );
    }

    // An agent that uses it keeps it.
    default_agent(&app, "local", json!({})).await;
    assert_error(
        &app.delete("/v1/providers/local").await,
        StatusCode::CONFLICT,
        "conflict",
    );
    default_agent(&app, "openai", json!({})).await;
    assert_eq!(app.delete("/v1/providers/local").await.0, StatusCode::NO_CONTENT);
    assert_error(
        &app.get("/v1/providers/local").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.delete("/v1/providers/local").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_naming_an_unknown_provider_or_tool_choice_is_refused() {
    let (app, _llm) = start().await;
    let before = app.get("/v1/agents/default").await.1;
    let answer = app
        .put("/v1/agents/default", json!({ "provider": "nowhere", "model": "m" }))
        .await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let answer = app
        .put(
            "/v1/agents/default",
            json!({ "tools": ["close_ticket"], "tool_choice": "read_tickets" }),
        )
        .await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(app.get("/v1/agents/default").await.1, before);
    assert_eq!(before["tool_choice"], "auto");
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_is_worked_through_a_named_provider_whose_key_is_expanded_only_on_the_wire() {
    assert_eq!(
        std::env::var("AGENTDESK_TEST_KEY_WIRE").as_deref(),
        Ok("sk-local-123"),
        "see .cargo/config.toml"
    );
    let (app, hosted) = start().await;
    let local = FakeLlm::start().await;
    let (code, _) = define(
        &app,
        "local",
        json!({
            "kind": "openai", "base_url": local.openai_base_url(), "api_key": "${env:AGENTDESK_TEST_KEY_WIRE}",
            "headers": { "X-Route": "r-${env:AGENTDESK_TEST_KEY_WIRE}" }
        }),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    default_agent(&app, "local", json!({})).await;
    local.push(Reply::tool_call("close_ticket", json!({ "result": "local answer" })));
    let ticket = app.create_ticket(json!({ "task": "ask the local model" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "local answer");
    assert_eq!(hosted.request_count(), 0, "the built-in provider was not asked");
    let sent = local.requests().pop().unwrap();
    assert_eq!(sent.header("authorization"), Some("Bearer sk-local-123"));
    assert_eq!(sent.header("x-route"), Some("r-sk-local-123"));
    assert_eq!(sent.body["model"], "local-model");

    // The key is nowhere but on the wire.
    let shown = app.get("/v1/providers/local").await.1;
    assert_eq!(shown["api_key"], "${env:AGENTDESK_TEST_KEY_WIRE}");
    let leaked: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM providers WHERE api_key LIKE '%sk-local%' OR headers::text LIKE '%sk-local%')
              + (SELECT count(*) FROM events WHERE data::text LIKE '%sk-local%')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(leaked, 0);

    // A changed definition takes effect with the next request.
    let moved = FakeLlm::start().await;
    define(
        &app,
        "local",
        json!({ "kind": "openai", "base_url": moved.openai_base_url() }),
    )
    .await;
    moved.push(Reply::tool_call("close_ticket", json!({ "result": "moved" })));
    let ticket = app.create_ticket(json!({ "task": "again" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "moved");
    assert_eq!(moved.requests().pop().unwrap().header("authorization"), None);
    app.shutdown().await;
}

/// The `tool_choice` of the last request `llm` received.
fn last_tool_choice(llm: &FakeLlm) -> Value {
    llm.requests()
        .pop()
        .unwrap()
        .body
        .get("tool_choice")
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn tool_choice_is_sent_in_each_providers_own_form() {
    let (app, llm) = start().await;
    define(
        &app,
        "claude-like",
        json!({ "kind": "anthropic", "base_url": llm.anthropic_base_url() }),
    )
    .await;
    let cases = [
        ("openai", "auto", Value::Null),
        ("openai", "required", json!("required")),
        ("openai", "none", json!("none")),
        (
            "openai",
            "close_ticket",
            json!({ "type": "function", "function": { "name": "close_ticket" } }),
        ),
        ("claude-like", "auto", Value::Null),
        ("claude-like", "required", json!({ "type": "any" })),
        ("claude-like", "none", json!({ "type": "none" })),
        (
            "claude-like",
            "close_ticket",
            json!({ "type": "tool", "name": "close_ticket" }),
        ),
    ];
    for (provider, choice, expected) in cases {
        default_agent(&app, provider, json!({ "tool_choice": choice })).await;
        assert_eq!(app.get("/v1/agents/default").await.1["tool_choice"], choice);
        llm.push(Reply::tool_call("close_ticket", json!({ "result": choice })));
        let ticket = app
            .create_ticket(json!({ "task": format!("{provider} {choice}") }))
            .await;
        wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
        assert_eq!(last_tool_choice(&llm), expected, "{provider} {choice}");
    }
    // No tools, no tool_choice.
    default_agent(&app, "openai", json!({ "tools": [], "tool_choice": "required" })).await;
    llm.push(Reply::text("a question?"));
    let ticket = app.create_ticket(json!({ "task": "no tools" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "waiting").await;
    assert_eq!(last_tool_choice(&llm), Value::Null);
    app.shutdown().await;
}

#[tokio::test]
async fn an_assistant_turn_of_tool_calls_only_is_sent_with_empty_content_never_null() {
    let (app, llm) = start().await;
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "list" })));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "look around" })).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let second = llm.requests().pop().unwrap().body;
    let messages = second["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["content"], "");
    assert!(assistant["tool_calls"].is_array());
    for m in messages {
        assert!(!m["content"].is_null(), "null content in {m}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn usage_a_provider_does_not_report_is_estimated_and_marked() {
    let (app, llm) = start().await;
    // Reported usage: no mark anywhere.
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "x" })).usage(100, 10));
    let ticket = app.create_ticket(json!({ "task": "reported" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert!(done["usage"].get("estimated").is_none(), "{}", done["usage"]);
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    assert!(finished[0]["usage"].get("estimated").is_none());

    llm.push(Reply::tool_call("close_ticket", json!({ "result": "a result of some length" })).without_usage());
    let ticket = app.create_ticket(json!({ "task": "estimate me ".repeat(50) })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let usage = &done["usage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    assert!(usage["input_tokens"].as_i64().unwrap() > 150, "{usage}");
    assert!(usage["output_tokens"].as_i64().unwrap() > 5, "{usage}");
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    assert_eq!(finished[0]["usage"]["estimated"], true);
    assert_eq!(finished[0]["usage"]["input_tokens"], usage["input_tokens"]);
    app.shutdown().await;
}

#[tokio::test]
async fn limits_apply_to_estimated_usage() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_input_tokens": 50 })).await;
    llm.set_reply(Reply::tool_call("read_tickets", json!({ "action": "list" })).without_usage());
    let ticket = app
        .create_ticket(json!({ "task": "a task long enough to pass fifty estimated tokens" }))
        .await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "max_input_tokens", "{failed}");
    assert_eq!(failed["usage"]["requests"], 1);
    assert_eq!(failed["usage"]["estimated"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn failed_requests_count_and_an_error_keeps_the_providers_body() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_request_retries": 2 })).await;
    llm.push(Reply::status(503));
    llm.push(Reply::status(500));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "third time" })));
    let ticket = app.create_ticket(json!({ "task": "flaky" })).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["usage"]["requests"], 3, "two failed requests and one answer");

    // A long body (a stack trace, say) keeps the part that matters at its end.
    let body = format!(
        "Traceback (most recent call last):\n{}\nTHE ACTUAL CAUSE",
        "  frame\n".repeat(180)
    );
    assert!(body.len() > 1_400 && body.len() < 2_000);
    default_agent(&app, "openai", json!({ "max_request_retries": 0 })).await;
    llm.push(Reply::status(500).with_error_body(&body));
    let ticket = app.create_ticket(json!({ "task": "broken" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "server_error");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("THE ACTUAL CAUSE"),
        "{failed}"
    );
    let events = event_data(&app, failed["id"].as_str().unwrap(), "request.failed").await;
    assert!(events[0]["message"].as_str().unwrap().contains("THE ACTUAL CAUSE"));
    assert_eq!(failed["usage"]["requests"], 1, "a request that failed is a request");
    app.shutdown().await;
}

/// A provider that answers an error with an endless-looking body (4 MiB here) is read only up to
/// a bound: the ticket fails with a short message, not after holding the whole body.
#[tokio::test]
async fn a_huge_error_body_is_read_only_in_part() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_request_retries": 0 })).await;
    llm.push(Reply::status(500).with_error_body(&"x".repeat(4 * 1024 * 1024)));
    let ticket = app.create_ticket(json!({ "task": "broken" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "server_error", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.len() < 4096, "{} bytes", message.len());
    app.shutdown().await;
}

#[tokio::test]
async fn an_empty_answer_is_retried_twice_then_fails_as_empty_response() {
    let (app, llm) = start().await;
    default_agent(&app, "openai", json!({ "max_request_retries": 10 })).await;
    llm.set_reply(Reply::empty());
    let ticket = app.create_ticket(json!({ "task": "anyone there?" })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "empty_response", "{failed}");
    assert_eq!(llm.request_count(), 3);
    assert_eq!(failed["usage"]["requests"], 3);
    let retried = event_data(&app, failed["id"].as_str().unwrap(), "request.retried").await;
    assert_eq!(retried.len(), 2);
    assert!(retried
        .iter()
        .all(|r| r["kind"] == "empty_response" && r["max_attempts"] == 2));
    app.shutdown().await;
}

/// A provider whose key or header names a variable the desk's environment does not set is kept,
/// with a warning: its requests would go out with an empty secret.
#[tokio::test]
async fn a_provider_naming_an_unset_variable_is_answered_with_a_warning() {
    let app = TestApp::spawn().await;
    let put = |body: Value| {
        app.request(reqwest::Method::PUT, "/v1/providers/local")
            .json(&body)
            .send()
    };
    let unset = put(json!({"kind": "openai", "base_url": "http://127.0.0.1:9/v1",
                           "api_key": "${env:AGENTDESK_TEST_NEVER_SET}",
                           "headers": {"x-team": "${env:AGENTDESK_TEST_NEVER_SET_EITHER}"}}))
    .await
    .unwrap();
    assert_eq!(unset.status(), StatusCode::CREATED);
    let warning = unset.headers()["agentdesk-warning"].to_str().unwrap().to_owned();
    assert!(
        warning.contains("${env:AGENTDESK_TEST_NEVER_SET}, ${env:AGENTDESK_TEST_NEVER_SET_EITHER}"),
        "{warning}"
    );
    // PATH is set wherever the tests run.
    let set = put(json!({"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "${env:PATH}"}))
        .await
        .unwrap();
    assert_eq!(set.status(), StatusCode::OK);
    assert!(set.headers().get("agentdesk-warning").is_none());
    app.shutdown().await;
}
