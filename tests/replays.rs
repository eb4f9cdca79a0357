//! Replays: a ticket run again as a new one, its tool calls answered from the original's
//! recording (or live), by another model or version; the original never changes.

mod support;

use serde_json::{json, Value};
use support::tool_server::ToolServer;
use support::{event_data, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// `lookup` (GET /lookup) and an agent `tooler` that has it; a done original that called it
/// once with `{"q": "a"}`: (its key, its id).
async fn original(app: &TestApp, llm: &FakeLlm, server: &ToolServer) -> (String, String) {
    let (code, _) = app
        .put(
            "/v1/tools/lookup",
            json!({"url": server.url("/lookup"), "method": "GET"}),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let agent = json!({"provider": "openai", "model": "m1", "labels": ["tooler"], "tools": ["close_ticket", "lookup"]});
    assert!(app.put("/v1/agents/tooler", agent).await.0.is_success());
    llm.push(Reply::tool_call("lookup", json!({"q": "a"})));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "found"})));
    let t = app
        .create_ticket(
            json!({"task": "look it up", "labels": ["tooler"], "metadata": {"team": "blue"},
                              "schema": {"type": "string"}}),
        )
        .await;
    let key = t["key"].as_str().unwrap().to_owned();
    wait_status(app, &key, "done").await;
    assert_eq!(server.requests().len(), 1);
    (key, t["id"].as_str().unwrap().to_owned())
}

/// The result the model got for each tool call of the requests that carried `model`.
fn results_for(llm: &FakeLlm, model: &str) -> Vec<Value> {
    let requests = llm.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.body["model"] == model)
        .expect("a request");
    last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .collect()
}

#[tokio::test]
async fn a_replay_answers_its_calls_from_the_recording_and_leaves_the_original_alone() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.allow_private_urls = true).await;
    let server = ToolServer::start().await;
    let (key, id) = original(&app, &llm, &server).await;
    let (_, before) = app.get(&format!("/v1/tickets/{key}")).await;
    let events_before = support::event_kinds(&app, &id).await.len();

    // The same call returns the recorded output; a new one is not in the recording.
    llm.push(Reply::tool_calls(vec![
        ("lookup", json!({"q": "a"})),
        ("lookup", json!({"q": "b"})),
    ]));
    llm.push(Reply::tool_call("lookup", json!({"q": "a"})));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "found again"})));
    let (code, replay) = app
        .post(&format!("/v1/tickets/{key}/replay"), json!({"model": "m2"}))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{replay}");
    assert_eq!(replay["metadata"], json!({"team": "blue", "replay_of": key}));
    assert_eq!(
        (&replay["task"], &replay["schema"]),
        (&before["task"], &before["schema"])
    );
    let rkey = replay["key"].as_str().unwrap().to_owned();
    let done = wait_status(&app, &rkey, "done").await;
    assert_eq!(done["result"], "found again");
    assert_eq!(done["agent"], "tooler");
    assert_eq!(server.requests().len(), 1, "nothing outside the desk was called");
    let results = results_for(&llm, "m2");
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].as_str().unwrap().contains("/lookup"),
        "the recorded output: {results:?}"
    );
    assert!(
        results[1].as_str().unwrap().contains("not in the recording"),
        "{results:?}"
    );
    // The second `{"q": "a"}` is the second such call: the original made only one.
    assert!(
        results[2].as_str().unwrap().contains("not in the recording"),
        "{results:?}"
    );
    let rid = replay["id"].as_str().unwrap();
    let mismatches = event_data(&app, rid, "tool.replay_mismatch").await;
    assert_eq!(mismatches.len(), 2);
    assert_eq!(mismatches[0]["tool_name"], "lookup");

    let (_, after) = app.get(&format!("/v1/tickets/{key}")).await;
    assert_eq!(after, before, "the original is unchanged");
    assert_eq!(support::event_kinds(&app, &id).await.len(), events_before);

    // Live: the tools run again.
    llm.push(Reply::tool_call("lookup", json!({"q": "z"})));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "live"})));
    let (code, live) = app
        .post(&format!("/v1/tickets/{id}/replay"), json!({"tools": "live"}))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{live}");
    wait_status(&app, live["key"].as_str().unwrap(), "done").await;
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_replay_runs_the_version_named_and_refuses_what_does_not_exist() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.allow_private_urls = true).await;
    let server = ToolServer::start().await;
    let (key, _) = original(&app, &llm, &server).await;
    // Version 2 changes the model; a replay pinned to version 1 runs m1.
    let agent = json!({"provider": "openai", "model": "m3", "labels": ["tooler"], "tools": ["close_ticket", "lookup"]});
    app.put("/v1/agents/tooler", agent).await;
    llm.push(Reply::tool_call("close_ticket", json!({"result": "v1"})));
    let (code, replay) = app
        .post(
            &format!("/v1/tickets/{key}/replay"),
            json!({"agent": "tooler", "agent_version": 1}),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{replay}");
    let done = wait_status(&app, replay["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["agent_version"], 1);
    assert_eq!(llm.requests().last().unwrap().body["model"], "m1");

    for (body, what) in [
        (json!({"agent": "nobody"}), "nobody"),
        (json!({"agent_version": 9}), "version 9"),
        (json!({"provider": "nowhere"}), "nowhere"),
        (json!({"tools": "sometimes"}), "sometimes"),
    ] {
        let (code, error) = app.post(&format!("/v1/tickets/{key}/replay"), body).await;
        assert!(code.is_client_error(), "{error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(what), "{error}");
    }
    let (code, _) = app.post("/v1/tickets/TICKET-999/replay", json!({})).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_replay_gets_a_questions_recorded_answer_without_asking_anyone() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    let agent =
        json!({"provider": "openai", "model": "m1", "labels": ["asker"], "tools": ["close_ticket", "ask_human"]});
    assert!(app.put("/v1/agents/asker", agent).await.0.is_success());
    let ask = || {
        Reply::tool_call(
            "ask_human",
            json!({"question": "Which region?", "choices": ["eu", "us"]}),
        )
    };
    llm.push(ask());
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let t = app.create_ticket(json!({"task": "deploy", "labels": ["asker"]})).await;
    let key = t["key"].as_str().unwrap().to_owned();
    let waiting = wait_status(&app, &key, "waiting").await;
    let qid = waiting["pending_question"]["id"].as_str().unwrap().to_owned();
    let (code, _) = app
        .post(&format!("/v1/tickets/{key}/questions/{qid}"), json!({"answer": "eu"}))
        .await;
    assert_eq!(code, StatusCode::OK);
    wait_status(&app, &key, "done").await;

    llm.push(ask());
    llm.push(Reply::tool_call("close_ticket", json!({"result": "again"})));
    let (_, replay) = app
        .post(&format!("/v1/tickets/{key}/replay"), json!({"model": "m9"}))
        .await;
    let done = wait_status(&app, replay["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "again");
    assert!(event_data(&app, replay["id"].as_str().unwrap(), "question.asked")
        .await
        .is_empty());
    assert_eq!(results_for(&llm, "m9"), [json!("eu")], "the recorded answer");
}

/// Recorded means recorded: a replay of a ticket whose calls reached an HTTP tool (after an
/// approval) and an MCP server calls neither again, asks for no approval, and never waits.
#[tokio::test]
async fn a_recorded_replay_calls_no_tool_server_and_asks_for_no_approval() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.allow_private_urls = true).await;
    let server = ToolServer::start().await;
    let mcp = testkit::mcp_server::McpHttpServer::start(rmcp::model::ProtocolVersion::V_2025_11_25, true).await;
    let (code, view) = app.put("/v1/mcp-servers/files", json!({"url": mcp.url})).await;
    assert_eq!(code, StatusCode::CREATED, "{view}");
    let deploy = json!({"url": server.url("/deploy"), "method": "POST", "requires_approval": true,
                        "input_schema": {"type": "object"}});
    assert_eq!(app.put("/v1/tools/deploy", deploy).await.0, StatusCode::CREATED);
    let agent = json!({"provider": "openai", "model": "m1", "labels": ["ops"],
                       "tools": ["close_ticket", "deploy", "mcp:files"]});
    let (code, body) = app.put("/v1/agents/ops", agent).await;
    assert!(code.is_success(), "{body}");
    let calls = || {
        Reply::tool_calls(vec![
            ("deploy", json!({"env": "prod"})),
            ("files__echo", json!({"text": "hi"})),
        ])
    };
    llm.push(calls());
    llm.push(Reply::tool_call("close_ticket", json!({"result": "shipped"})));
    let t = app.create_ticket(json!({"task": "ship", "labels": ["ops"]})).await;
    let key = t["key"].as_str().unwrap().to_owned();
    let waiting = wait_status(&app, &key, "waiting").await;
    let call_id = waiting["pending_approvals"][0]["call_id"].as_str().unwrap().to_owned();
    let (code, _) = app
        .post(
            &format!("/v1/tickets/{key}/approvals/{call_id}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    wait_status(&app, &key, "done").await;
    let mcp_calls = mcp.state.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!((server.requests().len(), mcp_calls), (1, 1));

    llm.push(calls());
    llm.push(Reply::tool_call("close_ticket", json!({"result": "shipped again"})));
    let (_, replay) = app
        .post(&format!("/v1/tickets/{key}/replay"), json!({"model": "m2"}))
        .await;
    let rid = replay["id"].as_str().unwrap().to_owned();
    let done = wait_status(&app, replay["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["result"], "shipped again");
    assert_eq!(server.requests().len(), 1, "the HTTP tool was not called again");
    assert_eq!(
        mcp.state.calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "nor the MCP server"
    );
    for kind in ["tool.approval_requested", "ticket.waiting", "tool.replay_mismatch"] {
        assert!(event_data(&app, &rid, kind).await.is_empty(), "{kind}");
    }
    let results = results_for(&llm, "m2");
    assert!(
        results.iter().any(|r| r.as_str().unwrap().contains("hi")),
        "the recorded echo: {results:?}"
    );
}
