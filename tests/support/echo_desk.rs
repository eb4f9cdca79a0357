//! The desk of the agent-protocol tests (`tests/mcp_server.rs`, `tests/a2a.rs`,
//! `tests/protocol_clients.rs`): an agent on a fake model that closes a ticket with
//! `echo: <the last user message>`, or asks "Which colour should it be?" when that message says
//! `QUESTION`. No agent takes tickets labelled `nobody`.

use serde_json::{json, Value};
use testkit::fake_llm::{FakeLlm, Reply};

use super::TestApp;

/// The model's answer to an OpenAI chat request.
pub fn echo_or_ask(body: &Value) -> Reply {
    let text = body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    if text.contains("QUESTION") {
        Reply::text("Which colour should it be?")
    } else {
        Reply::tool_call("close_ticket", json!({"result": format!("echo: {text}")}))
    }
}

/// A serving desk with the tokens `full` and `read:<reader>`, `configure`d further, and the agent
/// `echo` (`agent` adds to its definition).
pub async fn start(
    full: &str,
    reader: &str,
    agent: Value,
    configure: impl FnOnce(&mut agentdesk::config::Config),
) -> (FakeLlm, TestApp) {
    let llm = FakeLlm::start().await;
    llm.set_responder(echo_or_ask);
    let app = TestApp::spawn_with_llm(&llm, |c| {
        c.api_tokens = vec![full.into(), format!("read:{reader}")];
        configure(c);
    })
    .await;
    let mut definition = json!({"provider": "openai", "model": "m", "tools": ["close_ticket"]});
    if let (Some(base), Value::Object(extra)) = (definition.as_object_mut(), agent) {
        base.extend(extra);
    }
    let (code, body) = app.put("/v1/agents/echo", definition).await;
    assert!(code.is_success(), "{body}");
    (llm, app)
}
