//! Agents that use MCP servers' tools through the loop: `mcp:{server}` offers all of a server's
//! tools, `{server}__{tool}` one; unknown names are 422; a server's `requires_approval` holds the
//! call for a person.

mod support;

use rmcp::model::ProtocolVersion;
use serde_json::{json, Value};
use support::{assert_error, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};
use testkit::mcp_server::McpHttpServer;

async fn start(llm: &FakeLlm) -> TestApp {
    TestApp::spawn_with_llm(llm, |c| c.mcp_allow_private = Some(true)).await
}

async fn put_agent(app: &TestApp, tools: Value) -> (StatusCode, Value) {
    app.put(
        "/v1/agents/mcp-user",
        json!({"provider": "openai", "model": "m", "labels": ["mcp"], "tools": tools}),
    )
    .await
}

/// The names of the tools offered in the model request `i`.
fn offered(llm: &FakeLlm, i: usize) -> Vec<String> {
    llm.requests()[i].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn tool_result(llm: &FakeLlm, call_id: &str) -> Option<String> {
    llm.requests().iter().find_map(|request| {
        request.body["messages"].as_array().unwrap().iter().find_map(|m| {
            (m["role"] == "tool" && m["tool_call_id"] == call_id).then(|| m["content"].as_str().unwrap().to_owned())
        })
    })
}

#[tokio::test]
async fn an_agent_naming_a_server_is_offered_its_tools_and_calls_them() {
    let llm = FakeLlm::start().await;
    let app = start(&llm).await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;

    // Names of servers that do not exist are refused.
    for bad in ["mcp:srv", "srv__echo"] {
        let answer = put_agent(&app, json!(["close_ticket", bad])).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let (code, body) = app.put("/v1/mcp-servers/srv", json!({"url": server.url})).await;
    assert!(code.is_success(), "{body}");
    let (code, body) = put_agent(&app, json!(["close_ticket", "mcp:srv"])).await;
    assert!(code.is_success(), "{body}");

    llm.push(Reply::tool_call("srv__echo", json!({"text": "from the server"})).with_call_id("call_echo"));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app
        .create_ticket(json!({"task": "use the server", "labels": ["mcp"]}))
        .await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;

    let names = offered(&llm, 0);
    assert!(names.contains(&"srv__echo".to_string()), "{names:?}");
    assert!(names.contains(&"close_ticket".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mcp:")), "{names:?}");
    assert_eq!(tool_result(&llm, "call_echo").as_deref(), Some("from the server"));

    // One tool by its full name: only that one is offered.
    let (code, body) = put_agent(&app, json!(["close_ticket", "srv__echo"])).await;
    assert!(code.is_success(), "{body}");
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app.create_ticket(json!({"task": "again", "labels": ["mcp"]})).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let last = llm.requests().len() - 1;
    let names = offered(&llm, last);
    assert_eq!(
        names.iter().filter(|n| n.starts_with("srv__")).collect::<Vec<_>>(),
        vec!["srv__echo"]
    );

    // A server removed later: the model sees the tool as missing, the ticket goes on.
    let (code, _) = app.delete("/v1/mcp-servers/srv").await;
    assert!(code.is_success());
    llm.push(Reply::tool_call("srv__echo", json!({"text": "x"})).with_call_id("call_gone"));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app.create_ticket(json!({"task": "once more", "labels": ["mcp"]})).await;
    wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let gone = tool_result(&llm, "call_gone").unwrap_or_default();
    assert!(gone.contains("no tool named"), "{gone}");
}

#[tokio::test]
async fn a_server_requiring_approval_holds_the_call_until_approved() {
    let llm = FakeLlm::start().await;
    let app = start(&llm).await;
    let server = McpHttpServer::start(ProtocolVersion::V_2025_11_25, true).await;
    let (code, body) = app
        .put(
            "/v1/mcp-servers/guarded",
            json!({"url": server.url, "requires_approval": ["echo"]}),
        )
        .await;
    assert!(code.is_success(), "{body}");
    let (code, body) = put_agent(&app, json!(["close_ticket", "mcp:guarded"])).await;
    assert!(code.is_success(), "{body}");

    llm.push(Reply::tool_call("guarded__echo", json!({"text": "approved text"})).with_call_id("call_guarded"));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app
        .create_ticket(json!({"task": "needs a yes", "labels": ["mcp"]}))
        .await;
    let key = ticket["key"].as_str().unwrap();
    let waiting = wait_status(&app, key, "waiting").await;
    assert_eq!(
        waiting["pending_approvals"][0]["tool_name"], "guarded__echo",
        "{waiting}"
    );
    assert_eq!(tool_result(&llm, "call_guarded"), None, "nothing ran before the answer");

    let (code, body) = app
        .post(
            &format!("/v1/tickets/{key}/approvals/call_guarded"),
            json!({"approve": true}),
        )
        .await;
    assert!(code.is_success(), "{body}");
    wait_status(&app, key, "done").await;
    assert_eq!(tool_result(&llm, "call_guarded").as_deref(), Some("approved text"));
}
