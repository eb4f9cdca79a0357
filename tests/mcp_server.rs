//! `/mcp`: the desk as an MCP server, driven by the official Rust SDK's client (rmcp) over
//! streamable HTTP, in each revision it serves: 2025-06-18 and 2025-11-25 (initialize and a
//! session) and the stateless 2026-07-28.

mod support;

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ProtocolVersion, ReadResourceRequestParams, ResourceContents,
};
use serde_json::{json, Map, Value};
use support::mcp_client::{call, connect};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const TOKEN: &str = "mcp-full";
const READ_TOKEN: &str = "mcp-reader";

/// A successful result's JSON, checked to be the same as structured content and as text.
fn ok(result: CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let structured = result.structured_content.clone().expect("structuredContent");
    let text = result.content[0].as_text().expect("a text block").text.clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), structured);
    structured
}

/// An error result's `{code, message}`.
fn error(result: CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    result.structured_content.expect("structuredContent")["error"].clone()
}

/// The desk of `support::echo_desk`: `QUESTION` tasks wait, `nobody` tickets are never claimed.
async fn desk() -> (FakeLlm, TestApp) {
    support::echo_desk::start(TOKEN, READ_TOKEN, json!({}), |_| {}).await
}

const ALL_TOOLS: [&str; 7] = [
    "create_ticket",
    "get_ticket",
    "list_tickets",
    "comment_ticket",
    "cancel_ticket",
    "retry_ticket",
    "answer_approval",
];

#[tokio::test]
async fn every_tool_works_in_every_revision() {
    let (_llm, app) = desk().await;
    for revision in [
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ] {
        let client = connect(&app, Some(TOKEN), revision.clone()).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ALL_TOOLS, "{revision:?}");
        // The schemas are the REST API's: `CreateTicket` (plus wait_secs) for create_ticket.
        let create = &tools[0].input_schema;
        assert_eq!(create["type"], "object");
        assert!(create["properties"]["task"].is_object(), "{create:?}");
        assert!(create["properties"]["wait_secs"].is_object());
        assert_eq!(create["required"], json!(["task"]));
        assert_eq!(tools[1].input_schema["required"], json!(["ticket"]));

        // create_ticket waits (on the event hub) until the agent closed the ticket.
        let done = ok(call(&client, "create_ticket", json!({"task": "hello", "wait_secs": 30})).await);
        assert_eq!(done["status"], "done", "{done}");
        assert_eq!(done["result"], "echo: hello");
        let key = done["key"].as_str().unwrap().to_owned();

        // A retried call with the same idempotency_key is the same ticket; other arguments with
        // that key are a conflict.
        let key_args =
            json!({"task": "once", "labels": ["nobody"], "idempotency_key": format!("mcp-{}", revision.as_str())});
        let first = ok(call(&client, "create_ticket", key_args.clone()).await);
        let again = ok(call(&client, "create_ticket", key_args).await);
        assert_eq!(again["id"], first["id"]);
        let other = json!({"task": "twice", "idempotency_key": format!("mcp-{}", revision.as_str())});
        assert_eq!(error(call(&client, "create_ticket", other).await)["code"], "conflict");
        let bad_key = error(call(&client, "create_ticket", json!({"task": "x", "idempotency_key": ""})).await);
        assert_eq!(bad_key["code"], "validation_failed");

        // Without wait_secs it answers at once, with the ticket as created.
        let todo = ok(call(&client, "create_ticket", json!({"task": "later", "labels": ["nobody"]})).await);
        assert_eq!(todo["status"], "todo");
        let todo_key = todo["key"].as_str().unwrap().to_owned();

        let got = ok(call(&client, "get_ticket", json!({"ticket": key})).await);
        assert_eq!(got["id"], done["id"]);
        let comments = got["comments"].as_array().unwrap();
        assert!(!comments.is_empty() && comments.len() <= 20, "{got}");

        let list = ok(call(&client, "list_tickets", json!({"label": "nobody", "limit": 10})).await);
        assert_eq!(list["items"][0]["key"], todo_key.as_str(), "{list}");
        assert!(list.get("next_cursor").is_some());

        let cancelled = ok(call(&client, "cancel_ticket", json!({"ticket": todo_key})).await);
        assert_eq!(cancelled["status"], "cancelled");
        let retried = ok(call(&client, "retry_ticket", json!({"ticket": todo_key})).await);
        assert_eq!(retried["status"], "todo");

        // A question: the wait ends when the ticket waits; the answer is a comment.
        let waiting = ok(call(
            &client,
            "create_ticket",
            json!({"task": "QUESTION: paint it", "wait_secs": 30}),
        )
        .await);
        assert_eq!(waiting["status"], "waiting", "{waiting}");
        let question_key = waiting["key"].as_str().unwrap().to_owned();
        let comment = ok(call(
            &client,
            "comment_ticket",
            json!({"ticket": question_key, "text": "blue"}),
        )
        .await);
        assert_eq!(comment["author"], "user");
        let answered = support::wait_status(&app, &question_key, "done").await;
        assert_eq!(answered["result"], "echo: blue");

        // API errors are results the model can read.
        let missing = error(call(&client, "get_ticket", json!({"ticket": "TICKET-999999"})).await);
        assert_eq!(missing["code"], "not_found");
        let no_call = error(
            call(
                &client,
                "answer_approval",
                json!({"ticket": key, "call_id": "nope", "approve": true}),
            )
            .await,
        );
        assert_eq!(no_call["code"], "not_found", "{no_call}");
        let blank = error(call(&client, "create_ticket", json!({"task": "  "})).await);
        assert_eq!(blank["code"], "validation_failed");
        let stray = error(call(&client, "get_ticket", json!({"ticket": key, "extra": 1})).await);
        assert_eq!(stray["code"], "validation_failed");
        let too_long = error(call(&client, "create_ticket", json!({"task": "x", "wait_secs": 301})).await);
        assert_eq!(too_long["code"], "validation_failed");
        for limit in [json!(0), json!(-1), json!(201)] {
            let bad = error(call(&client, "list_tickets", json!({ "limit": limit })).await);
            assert_eq!(bad["code"], "validation_failed", "{limit}: {bad}");
        }

        // An unknown tool is a protocol error, not a result.
        let unknown = client
            .call_tool(CallToolRequestParams::new("drop_tables").with_arguments(Map::new()))
            .await;
        assert!(unknown.is_err(), "{unknown:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_ticket_reads_as_a_resource_with_its_transcript() {
    let (_llm, app) = desk().await;
    let client = connect(&app, Some(READ_TOKEN), ProtocolVersion::V_2025_11_25)
        .await
        .unwrap();
    let templates = client.list_resource_templates(None).await.unwrap().resource_templates;
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "agentdesk://tickets/{ticket}");

    let ticket = app.create_ticket(json!({"task": "read me"})).await;
    let key = support::wait_status(&app, ticket["key"].as_str().unwrap(), "done").await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = format!("agentdesk://tickets/{key}");
    let read = client
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents {
        text,
        uri: got,
        mime_type,
        ..
    } = &read.contents[0]
    else {
        panic!("{read:?}");
    };
    assert_eq!(got, &uri);
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["key"], key.as_str());
    assert_eq!(body["result"], "echo: read me");
    assert_eq!(body["comments"][0]["author"], "user");

    let missing = client
        .read_resource(ReadResourceRequestParams::new(
            "agentdesk://tickets/TICKET-424242".to_owned(),
        ))
        .await;
    assert!(missing.is_err());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_read_token_sees_and_calls_only_the_reading_tools() {
    let (_llm, app) = desk().await;
    let before = app.counts().await;
    for revision in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let client = connect(&app, Some(READ_TOKEN), revision).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["get_ticket", "list_tickets"]);
        assert!(tools
            .iter()
            .all(|t| t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true)));
        let refused = error(call(&client, "create_ticket", json!({"task": "no"})).await);
        assert_eq!(refused["code"], "forbidden");
        let refused = error(call(&client, "cancel_ticket", json!({"ticket": "TICKET-1"})).await);
        assert_eq!(refused["code"], "forbidden");
        ok(call(&client, "list_tickets", json!({})).await);
        client.cancel().await.unwrap();
    }
    assert_eq!(app.counts().await, before, "a read token changed nothing");
}

#[tokio::test]
async fn without_a_valid_token_there_is_no_session() {
    let (_llm, app) = desk().await;
    for token in [None, Some("wrong")] {
        let refused = connect(&app, token, ProtocolVersion::V_2025_11_25).await;
        assert!(refused.unwrap_err().contains("401"), "{token:?}");
    }
    let (code, body) = support::send(app.client.post(app.endpoint("/mcp")).json(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/list"
    })))
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
}

/// The transport's refusals speak the API's error shape, with the status the MCP transport gives.
#[tokio::test]
async fn transport_errors_have_the_api_error_shape() {
    let (_llm, app) = desk().await;
    let post = |body: reqwest::Body| {
        app.client
            .post(app.endpoint("/mcp"))
            .bearer_auth(TOKEN)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(body)
    };
    // Malformed JSON, a batch and an object that is no message are malformed requests.
    for body in ["{not json", "[1,2]", "{}"] {
        let answer = support::send(post(body.into())).await;
        support::assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1100 * 1024)
    );
    support::assert_error(
        &support::send(post(oversized.into())).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let no_accept = app.client.post(app.endpoint("/mcp")).bearer_auth(TOKEN).json(&list);
    support::assert_error(
        &support::send(no_accept).await,
        StatusCode::NOT_ACCEPTABLE,
        "not_acceptable",
    );
    let unknown_session = post(list.to_string().into()).header("Mcp-Session-Id", "no-such-session");
    support::assert_error(
        &support::send(unknown_session).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

/// Ending a session answers 204 (the SDKs take 200 or 204 as success); the session is gone then.
#[tokio::test]
async fn ending_a_session_answers_no_content() {
    let (_llm, app) = desk().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    let opened = app
        .client
        .post(app.endpoint("/mcp"))
        .bearer_auth(TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), StatusCode::OK);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let end = || {
        app.client
            .delete(app.endpoint("/mcp"))
            .bearer_auth(TOKEN)
            .header("Mcp-Session-Id", &session)
            .header("MCP-Protocol-Version", "2025-06-18")
            .send()
    };
    let ended = end().await.unwrap();
    assert_eq!(ended.status(), StatusCode::NO_CONTENT);
    assert!(ended.bytes().await.unwrap().is_empty());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let after = app
        .client
        .post(app.endpoint("/mcp"))
        .bearer_auth(TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-06-18")
        .json(&list)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::NOT_FOUND, "the session is gone");
}

#[tokio::test]
async fn the_stateless_revision_checks_its_headers() {
    let (_llm, app) = desk().await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let post = |method: &str, name: Option<&str>, params: Value| {
        let mut request = app
            .client
            .post(app.endpoint("/mcp"))
            .bearer_auth(TOKEN)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method)
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
        if let Some(name) = name {
            request = request.header("Mcp-Name", name);
        }
        request
    };
    let discover = post("server/discover", None, json!({"_meta": meta}))
        .send()
        .await
        .unwrap();
    assert_eq!(discover.status(), 200);
    let text = discover.text().await.unwrap();
    assert!(text.contains("2026-07-28") && text.contains("agentdesk"), "{text}");

    let listed = post(
        "tools/call",
        Some("list_tickets"),
        json!({"_meta": meta, "name": "list_tickets", "arguments": {}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(listed.text().await.unwrap().contains("structuredContent"));

    // A header that names another tool than the body is refused before anything runs.
    let mismatch = post(
        "tools/call",
        Some("get_ticket"),
        json!({"_meta": meta, "name": "list_tickets", "arguments": {}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(mismatch.status(), 400);

    // A method it knows with params of the wrong shape is -32602, one it does not know -32601.
    let bad_params = post(
        "tools/call",
        Some("list_tickets"),
        json!({"_meta": meta, "name": "list_tickets", "arguments": "not an object"}),
    )
    .send()
    .await
    .unwrap();
    let text = bad_params.text().await.unwrap();
    assert!(text.contains("-32602"), "{text}");
    let unknown = post("no/such/method", None, json!({"_meta": meta}))
        .send()
        .await
        .unwrap();
    let text = unknown.text().await.unwrap();
    assert!(text.contains("-32601"), "{text}");
}

#[tokio::test]
async fn create_ticket_waits_no_longer_than_asked() {
    let (llm, app) = desk().await;
    let client = connect(&app, Some(TOKEN), ProtocolVersion::V_2025_11_25).await.unwrap();
    // The model answers after the wait is over.
    llm.push(Reply::tool_call("close_ticket", json!({"result": "late"})).first_byte_delay(Duration::from_secs(5)));
    let started = std::time::Instant::now();
    let working = ok(call(&client, "create_ticket", json!({"task": "slow", "wait_secs": 1})).await);
    assert!(
        ["todo", "in_progress"].contains(&working["status"].as_str().unwrap()),
        "{working}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );

    // A ticket no agent takes would never settle: it is answered at once.
    let started = std::time::Instant::now();
    let stray = ok(call(
        &client,
        "create_ticket",
        json!({"task": "idle", "labels": ["nobody"], "wait_secs": 30}),
    )
    .await);
    assert_eq!(stray["status"], "todo");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    client.cancel().await.unwrap();
}

/// The JSON-RPC message of an answer, whether it came as JSON or as an event stream.
fn message_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        let data = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .find(|data| !data.is_empty())
            .unwrap_or_else(|| panic!("no message in {text:?}"));
        serde_json::from_str(data).unwrap()
    })
}

#[tokio::test]
async fn the_stateless_revision_has_no_session_methods() {
    let (_llm, app) = desk().await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let post = |method: &str, params: Value| {
        let mut request = app
            .client
            .post(app.endpoint("/mcp"))
            .bearer_auth(TOKEN)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method);
        if let Some(uri) = params["uri"].as_str() {
            request = request.header("Mcp-Name", uri);
        }
        request.json(&json!({"jsonrpc": "2.0", "id": 41, "method": method, "params": params}))
    };
    // What 2026-07-28 removed, or never had, is no method: HTTP 404 with -32601, whatever the
    // params, the request's id kept.
    for (method, params) in [
        ("initialize", json!({"_meta": meta})),
        ("ping", json!({"_meta": meta})),
        ("logging/setLevel", json!({"_meta": meta})),
        ("logging/setLevel", json!({"_meta": meta, "level": "info"})),
        ("resources/subscribe", json!({"_meta": meta})),
        (
            "resources/subscribe",
            json!({"_meta": meta, "uri": "agentdesk://tickets/TICKET-1"}),
        ),
        ("resources/unsubscribe", json!({"_meta": meta})),
        ("no/such/method", json!({"_meta": meta})),
    ] {
        let answer = post(method, params.clone()).send().await.unwrap();
        let status = answer.status();
        let message = message_of(&answer.text().await.unwrap());
        assert_eq!(status, 404, "{method} {params}: {message}");
        assert_eq!(message["error"]["code"], -32601, "{method} {params}: {message}");
        assert_eq!(message["id"], 41, "{message}");
    }
    // A method it has, with params of the wrong shape, is still -32602.
    let answer = post("resources/read", json!({"_meta": meta, "uri": 7}))
        .send()
        .await
        .unwrap();
    let message = message_of(&answer.text().await.unwrap());
    assert_eq!(message["error"]["code"], -32602, "{message}");

    // A resource that is not there: the error names its URI (SEP-2164).
    let uri = "agentdesk://tickets/TICKET-404";
    let answer = post("resources/read", json!({"_meta": meta, "uri": uri}))
        .send()
        .await
        .unwrap();
    let message = message_of(&answer.text().await.unwrap());
    assert_eq!(message["error"]["data"]["uri"], uri, "{message}");
}

#[tokio::test]
async fn a_session_revision_keeps_its_methods_and_in_band_errors() {
    let (_llm, app) = desk().await;
    let post = |session: Option<&str>, body: Value| {
        let mut request = app
            .client
            .post(app.endpoint("/mcp"))
            .bearer_auth(TOKEN)
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        request
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "agentdesk-tests", "version": "1"}}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let initialized = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    assert!(initialized.status().is_success());
    // logging/setLevel is a method of 2025-11-25 (the desk has no logging): params of the wrong
    // shape are -32602, right ones -32601, both in a 200 answer as that revision has it.
    for (params, code) in [(json!({}), -32602), (json!({"level": "info"}), -32601)] {
        let answer = post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": params}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(answer.status(), 200);
        let message = message_of(&answer.text().await.unwrap());
        assert_eq!(message["error"]["code"], code, "{params}: {message}");
    }
}
