//! Approvals of tool calls: a call of a tool with `requires_approval` waits for a person; the
//! other calls of the step run at once; the answer decides whether it runs on the next claim.

mod support;

use std::time::Duration;

use serde_json::json;
use support::tool_server::{wait_flag, HangingServer, ToolServer};
use support::{assert_error, event_data, event_kinds, position, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

async fn start(llm: &FakeLlm, database_url: Option<String>) -> TestApp {
    TestApp::spawn_with_llm(llm, |c| {
        c.allow_private_urls = true;
        if let Some(url) = database_url {
            c.database_url = Some(url);
        }
    })
    .await
}

/// `deploy` (needs approval, POST /deploy/{env}) and `lookup` (runs at once, GET /x), and an
/// agent `tooler` with both.
async fn setup(app: &TestApp, server: &ToolServer) {
    let deploy = json!({"description": "Deploy", "url": server.url("/deploy/{env}"), "requires_approval": true,
                        "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}});
    let (code, body) = app.put("/v1/tools/deploy", deploy).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(body["requires_approval"], true);
    let (code, _) = app
        .put("/v1/tools/lookup", json!({"url": server.url("/x"), "method": "GET"}))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let agent = json!({"provider": "openai", "model": "m", "labels": ["tooler"],
                       "tools": ["close_ticket", "deploy", "lookup"]});
    let (code, body) = app.put("/v1/agents/tooler", agent).await;
    assert!(code.is_success(), "{body}");
}

async fn ticket(app: &TestApp) -> (String, String) {
    let t = app
        .create_ticket(json!({"task": "deploy it", "labels": ["tooler"]}))
        .await;
    (
        t["key"].as_str().unwrap().to_owned(),
        t["id"].as_str().unwrap().to_owned(),
    )
}

fn deploy_and_lookup() -> Reply {
    Reply::tool_calls(vec![("deploy", json!({"env": "prod"})), ("lookup", json!({"q": "a"}))])
}

fn close() -> Reply {
    Reply::tool_call("close_ticket", json!({"result": "ok"}))
}

fn paths(server: &ToolServer) -> Vec<String> {
    server.requests().into_iter().map(|r| r.path).collect()
}

/// The tool result the model got for `call_id`.
fn result_sent_to_model(llm: &FakeLlm, call_id: &str) -> Option<String> {
    llm.requests().iter().find_map(|request| {
        request.body["messages"].as_array().unwrap().iter().find_map(|m| {
            (m["role"] == "tool" && m["tool_call_id"] == call_id).then(|| m["content"].as_str().unwrap().to_owned())
        })
    })
}

/// Waits until the ticket waits with one pending approval, and returns that call's id.
async fn pending_call(app: &TestApp, key: &str) -> String {
    let waiting = wait_status(app, key, "waiting").await;
    let pending = waiting["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{waiting}");
    assert_eq!(pending[0]["tool_name"], "deploy");
    assert_eq!(pending[0]["input"], json!({"env": "prod"}));
    pending[0]["call_id"].as_str().unwrap().to_owned()
}

/// A desk with `setup`'s tools and agent, its model server and its tool server.
struct Desk {
    llm: FakeLlm,
    app: TestApp,
    server: ToolServer,
}

async fn desk() -> Desk {
    let llm = FakeLlm::start().await;
    let app = start(&llm, None).await;
    let server = ToolServer::start().await;
    setup(&app, &server).await;
    Desk { llm, app, server }
}

/// A new ticket whose model answers `reply`, once it waits on its one approval: (key, id, call id).
async fn waiting_on(app: &TestApp, llm: &FakeLlm, reply: Reply) -> (String, String, String) {
    llm.push(reply);
    let (key, id) = ticket(app).await;
    let call_id = pending_call(app, &key).await;
    (key, id, call_id)
}

#[tokio::test]
async fn an_approved_call_runs_on_the_next_claim_and_the_other_calls_ran_at_once() {
    let Desk { llm, app, server } = desk().await;
    let (key, id, call_id) = waiting_on(&app, &llm, deploy_and_lookup()).await;
    assert_eq!(
        paths(&server),
        ["/x"],
        "the other call ran at once, the one waiting did not"
    );
    let kinds = event_kinds(&app, &id).await;
    assert!(position(&kinds, "tool.approval_requested") < position(&kinds, "tool.finished"));
    assert_eq!(kinds.last().unwrap(), "ticket.waiting");
    let requested = event_data(&app, &id, "tool.approval_requested").await;
    let mut requested = requested[0].clone();
    for link in ["approve_url", "deny_url"] {
        let url = requested.as_object_mut().unwrap().remove(link);
        assert!(url.is_some_and(|u| u.as_str().is_some_and(|u| u.contains("/links/approvals/"))));
    }
    assert_eq!(
        requested,
        json!({"tool_name": "deploy", "call_id": call_id, "input": {"env": "prod"}})
    );
    // Lists show what waits too.
    let (_, listed) = app.get("/v1/tickets?status=waiting").await;
    assert_eq!(listed["items"][0]["pending_approvals"][0]["call_id"], call_id.as_str());

    llm.push(close());
    let path = format!("/v1/tickets/{key}/approvals/{call_id}");
    let (code, answered) = app.post(&path, json!({"approve": true})).await;
    assert_eq!(code, StatusCode::OK, "{answered}");
    assert!(answered["pending_approvals"].as_array().unwrap().is_empty());
    wait_status(&app, &key, "done").await;

    let deploys: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/deploy/prod")
        .collect();
    assert_eq!(deploys.len(), 1, "the approved call ran once");
    assert_eq!(deploys[0].headers["idempotency-key"], call_id);
    assert!(result_sent_to_model(&llm, &call_id).unwrap().contains("/deploy/prod"));
    let kinds = event_kinds(&app, &id).await;
    let approved = position(&kinds, "tool.approved");
    assert_eq!(kinds[approved + 1], "ticket.requeued");
    let requeued = event_data(&app, &id, "ticket.requeued").await;
    assert_eq!(requeued[0], json!({"reason": "approval"}));
    assert_eq!(
        event_data(&app, &id, "tool.approved").await[0],
        json!({"tool_name": "deploy", "call_id": call_id})
    );

    // Answered already: 409; unknown call or ticket: 404; a bad body: 422.
    assert_error(
        &app.post(&path, json!({"approve": false})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
    let unknown = format!("/v1/tickets/{key}/approvals/call_nope");
    assert_error(
        &app.post(&unknown, json!({"approve": true})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let no_ticket = "/v1/tickets/TICKET-999/approvals/x";
    assert_error(
        &app.post(no_ticket, json!({"approve": true})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for bad in [
        json!({"approve": "yes"}),
        json!({}),
        json!({"approve": true, "extra": 1}),
    ] {
        assert_error(
            &app.post(&path, bad).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
    }
}

#[tokio::test]
async fn a_denied_call_returns_to_the_model_with_the_reason() {
    let Desk { llm, app, server } = desk().await;
    let (key, id, call_id) = waiting_on(&app, &llm, Reply::tool_call("deploy", json!({"env": "prod"}))).await;
    llm.push(close());
    let path = format!("/v1/tickets/{key}/approvals/{call_id}");
    let (code, body) = app
        .post(&path, json!({"approve": false, "reason": "not on a Friday"}))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    wait_status(&app, &key, "done").await;
    assert!(server.requests().is_empty(), "a denied call never runs");
    let told = result_sent_to_model(&llm, &call_id).unwrap();
    assert!(told.contains("not on a Friday"), "{told}");
    assert_eq!(
        event_data(&app, &id, "tool.denied").await[0],
        json!({"tool_name": "deploy", "call_id": call_id, "reason": "not on a Friday"})
    );
    assert_eq!(event_data(&app, &id, "tool.failed").await[0]["kind"], "denied");
}

#[tokio::test]
async fn cancel_drops_pending_approvals_and_retry_tells_the_model_the_call_never_ran() {
    let Desk { llm, app, server } = desk().await;
    let (key, _, call_id) = waiting_on(&app, &llm, Reply::tool_call("deploy", json!({"env": "prod"}))).await;
    let (code, cancelled) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    assert!(cancelled["pending_approvals"].as_array().unwrap().is_empty());
    let path = format!("/v1/tickets/{key}/approvals/{call_id}");
    assert_error(
        &app.post(&path, json!({"approve": true})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    llm.push(close());
    let (code, _) = app.post(&format!("/v1/tickets/{key}/retry"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    wait_status(&app, &key, "done").await;
    assert!(server.requests().is_empty());
    let told = result_sent_to_model(&llm, &call_id).unwrap();
    assert!(told.contains("interrupted"), "{told}");
}

/// The process stops while a step's other call runs and an approval waits; a new process finds
/// the approval, waits again, and runs the approved call once.
#[tokio::test]
async fn pending_approvals_survive_a_restart() {
    let Desk { llm, app, server } = desk().await;
    let mut hanging = HangingServer::start().await;
    let hang = json!({"url": format!("http://{}/wait", hanging.addr), "timeout_ms": 600000});
    app.put("/v1/tools/hang", hang).await;
    let agent = json!({"provider": "openai", "model": "m", "labels": ["tooler"],
                       "tools": ["close_ticket", "deploy", "hang"]});
    app.put("/v1/agents/tooler", agent).await;
    llm.push(Reply::tool_calls(vec![
        ("deploy", json!({"env": "prod"})),
        ("hang", json!({})),
    ]));
    let (key, _) = ticket(&app).await;
    assert!(wait_flag(&mut hanging.received, Duration::from_secs(20)).await);
    let (_, running) = app.get(&format!("/v1/tickets/{key}")).await;
    assert_eq!(running["status"], "in_progress");
    let call_id = running["pending_approvals"][0]["call_id"].as_str().unwrap().to_owned();
    let database_url = app.database_url.clone();
    app.shutdown().await;

    let app = start(&llm, Some(database_url)).await;
    assert_eq!(
        pending_call(&app, &key).await,
        call_id,
        "the new process waits for the same call"
    );
    llm.push(close());
    let (code, _) = app
        .post(
            &format!("/v1/tickets/{key}/approvals/{call_id}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    wait_status(&app, &key, "done").await;
    assert_eq!(paths(&server), ["/deploy/prod"], "the approved call ran once");
}

#[tokio::test]
async fn a_comment_wakes_a_ticket_with_unanswered_calls_but_it_waits_again() {
    let Desk { llm, app, server } = desk().await;
    let (key, id, call_id) = waiting_on(&app, &llm, Reply::tool_call("deploy", json!({"env": "prod"}))).await;
    app.comment(&key, "any news?").await;
    // Woken (todo), claimed, and waiting again for the same call, without asking the model.
    support::eventually("the ticket to wait again", Duration::from_secs(20), || async {
        (event_data(&app, &id, "ticket.waiting").await.len() >= 2).then_some(())
    })
    .await;
    assert_eq!(pending_call(&app, &key).await, call_id);
    assert_eq!(llm.requests().len(), 1, "the model was not asked while the call waits");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_ticket_closed_beside_a_call_that_needs_approval_is_done_and_nothing_waits() {
    let Desk { llm, app, server } = desk().await;
    llm.push(Reply::tool_calls(vec![
        ("deploy", json!({"env": "prod"})),
        ("close_ticket", json!({"result": "ok"})),
    ]));
    let (key, id) = ticket(&app).await;
    let done = wait_status(&app, &key, "done").await;
    assert_eq!(done["pending_approvals"], json!([]));
    assert_eq!(event_data(&app, &id, "tool.approval_requested").await.len(), 1);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_batch_answers_several_calls_all_or_nothing() {
    let Desk { llm, app, server } = desk().await;
    let two_deploys = Reply::tool_calls(vec![
        ("deploy", json!({"env": "prod"})),
        ("deploy", json!({"env": "eu"})),
    ]);
    llm.push(two_deploys);
    let (key, id) = ticket(&app).await;
    let waiting = wait_status(&app, &key, "waiting").await;
    let calls: Vec<String> = waiting["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["call_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(calls.len(), 2, "{waiting}");
    let path = format!("/v1/tickets/{key}/approvals");

    // An unknown call among them: 404, and neither is answered.
    let mixed = json!({"decisions": [{"call_id": calls[0], "approve": true}, {"call_id": "nope", "approve": true}]});
    assert_error(&app.post(&path, mixed).await, StatusCode::NOT_FOUND, "not_found");
    let (_, still) = app.get(&format!("/v1/tickets/{key}")).await;
    assert_eq!(still["pending_approvals"].as_array().unwrap().len(), 2);
    assert!(event_data(&app, &id, "tool.approved").await.is_empty());
    for bad in [
        json!({}),
        json!({"decisions": []}),
        json!({"approve_all": true, "deny_all": true}),
        json!({"decisions": [{"call_id": calls[0], "approve": true}, {"call_id": calls[0], "approve": false}]}),
    ] {
        assert_error(
            &app.post(&path, bad).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
    }

    // One answered alone, then a batch naming it again: 409, and the other stays pending.
    let (code, _) = app
        .post(&format!("{path}/{}", calls[0]), json!({"approve": true}))
        .await;
    assert_eq!(code, StatusCode::OK);
    let again = json!({"decisions": [{"call_id": calls[0], "approve": true}, {"call_id": calls[1], "approve": true}]});
    assert_error(&app.post(&path, again).await, StatusCode::CONFLICT, "conflict");
    // Deny every pending one (the second): the ticket goes on.
    llm.push(close());
    let (code, body) = app
        .post(&path, json!({"deny_all": true, "reason": "one region is enough"}))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["key"], key.as_str());
    wait_status(&app, &key, "done").await;
    assert_eq!(
        paths(&server),
        ["/deploy/prod"],
        "the approved call ran, the denied one did not"
    );
    let denied = event_data(&app, &id, "tool.denied").await;
    assert_eq!(denied[0]["call_id"], calls[1].as_str());
    assert_eq!(denied[0]["reason"], "one region is enough");
    assert_error(
        &app.post(&path, json!({"approve_all": true})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
}

#[tokio::test]
async fn a_call_nobody_answers_in_time_is_answered_as_on_timeout_says() {
    let Desk { llm, app, server } = desk().await;
    // The tool's own deadline: approved after a second, so it runs.
    let deploy = json!({"url": server.url("/deploy/{env}"), "requires_approval": true,
                        "approval_timeout_secs": 1, "on_timeout": "approve",
                        "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}}});
    let (code, body) = app.put("/v1/tools/deploy", deploy).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["approval_timeout_secs"], &body["on_timeout"]),
        (&json!(1), &json!("approve"))
    );
    // The agent's deadline (fail) is beaten by the tool's.
    let agent = json!({"provider": "openai", "model": "m", "labels": ["tooler"], "tools": ["close_ticket", "deploy", "lookup"],
                       "approval_timeout_secs": 1, "on_timeout": "fail"});
    let (code, _) = app.put("/v1/agents/tooler", agent).await;
    assert!(code.is_success());
    llm.push(Reply::tool_call("deploy", json!({"env": "prod"})));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    assert_eq!(paths(&server), ["/deploy/prod"], "approved at its deadline, so it ran");
    let expired = event_data(&app, &id, "tool.approval_expired").await;
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["decision"], "approve");
    assert_eq!(expired[0]["tool_name"], "deploy");
    // A person's answer that lost to the deadline is told what won.
    let call_id = expired[0]["call_id"].as_str().unwrap();
    let (code, late) = app
        .post(
            &format!("/v1/tickets/{key}/approvals/{call_id}"),
            json!({"approve": false}),
        )
        .await;
    assert_eq!(code, StatusCode::CONFLICT, "{late}");
    let message = late["error"]["message"].as_str().unwrap();
    assert!(message.contains("approved by the desk at its deadline"), "{message}");

    // A tool without a deadline of its own: the agent's applies, and `fail` fails the ticket.
    let plain = json!({"url": server.url("/deploy/{env}"), "requires_approval": true,
                       "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}}});
    app.put("/v1/tools/deploy", plain).await;
    llm.push(Reply::tool_call("deploy", json!({"env": "eu"})));
    let (key, id) = ticket(&app).await;
    let failed = wait_status(&app, &key, "failed").await;
    assert_eq!(failed["error"]["kind"], "approval_expired", "{failed}");
    assert_eq!(
        event_data(&app, &id, "tool.approval_expired").await[0]["decision"],
        "fail"
    );
    assert_eq!(paths(&server), ["/deploy/prod"], "the expired call never ran");
    let bad = json!({"url": server.url("/x"), "approval_timeout_secs": 0});
    assert_error(
        &app.put("/v1/tools/bad", bad).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let bad = json!({"url": server.url("/x"), "on_timeout": "maybe"});
    let (code, _) = app.put("/v1/tools/bad", bad).await;
    assert!(code.is_client_error());
}

#[tokio::test]
async fn signed_links_answer_a_call_once_without_a_token() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| {
        c.allow_private_urls = true;
        c.api_tokens = vec!["desk-token".into()];
    })
    .await;
    let server = ToolServer::start().await;
    setup(&app, &server).await;
    let (key, id, call_id) = waiting_on(&app, &llm, Reply::tool_call("deploy", json!({"env": "prod"}))).await;
    let (_, waiting) = app.get(&format!("/v1/tickets/{key}")).await;
    let pending = &waiting["pending_approvals"][0];
    let approve_url = pending["approve_url"].as_str().expect("approve_url").to_owned();
    let deny_url = pending["deny_url"].as_str().expect("deny_url").to_owned();
    assert!(
        approve_url.starts_with(&format!("{}/links/approvals/", app.url)),
        "{approve_url}"
    );
    assert_ne!(approve_url, deny_url);
    let requested = event_data(&app, &id, "tool.approval_requested").await;
    assert_eq!(requested[0]["approve_url"], approve_url.as_str());
    assert_eq!(requested[0]["deny_url"], deny_url.as_str());

    // No token: the page shows the call and the task.
    let plain = reqwest::Client::new();
    let page = plain.get(&approve_url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("deploy") && html.contains("deploy it") && html.contains("<form"),
        "{html}"
    );
    // A changed token is no link.
    let forged = format!("{}x", &approve_url[..approve_url.len() - 1]);
    assert_eq!(plain.get(&forged).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    // The form's post answers it, once.
    llm.push(close());
    let answered = plain
        .post(&approve_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("reason=looks+fine")
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    wait_status(&app, &key, "done").await;
    assert_eq!(paths(&server), ["/deploy/prod"]);
    let approved = event_data(&app, &id, "tool.approved").await;
    assert_eq!(approved[0]["call_id"], call_id.as_str());
    assert_eq!(approved[0]["reason"], "looks fine");
    for url in [&approve_url, &deny_url] {
        assert_eq!(plain.get(url).send().await.unwrap().status(), StatusCode::GONE);
        let again = plain.post(url).json(&json!({})).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::GONE);
    }
}
