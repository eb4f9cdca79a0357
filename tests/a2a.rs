//! The desk as an A2A v1.0 agent: its card, the HTTP+JSON binding under `/a2a` and the JSON-RPC
//! binding at `/a2a/jsonrpc`, on the wire. (`tests/protocol_clients.rs` drives both with the
//! official Python SDK.)

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{SseClient, StatusCode, TestApp};
use testkit::fake_llm::FakeLlm;

const TOKEN: &str = "a2a-full";
const READ_TOKEN: &str = "a2a-reader";

/// The desk of `support::echo_desk`, its agent `echo` labelled `echoes`: `QUESTION` tasks wait,
/// `nobody` tickets are never claimed.
async fn desk(configure: impl FnOnce(&mut agentdesk::config::Config)) -> (FakeLlm, TestApp) {
    let agent = json!({"role": "Echoes what it is told.", "labels": ["echoes"]});
    support::echo_desk::start(TOKEN, READ_TOKEN, agent, configure).await
}

fn message(text: &str) -> Value {
    json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]})
}

async fn rest(
    app: &TestApp,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = app
        .client
        .request(method, app.endpoint(path))
        .bearer_auth(token)
        .header("A2A-Version", "1.0");
    if let Some(body) = body {
        request = request.json(&body);
    }
    support::send(request).await
}

async fn rpc(app: &TestApp, token: &str, method: &str, params: Value) -> Value {
    let (code, body) = support::send(
        app.client
            .post(app.endpoint("/a2a/jsonrpc"))
            .bearer_auth(token)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], "req-1");
    body
}

fn artifact_text(task: &Value) -> &str {
    task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn the_card_describes_the_desk_and_its_agents() {
    let (_llm, app) = desk(|_| {}).await;
    // Public: no token needed.
    let (code, card) = support::send(app.client.get(app.endpoint("/.well-known/agent-card.json"))).await;
    assert_eq!(code, StatusCode::OK, "{card}");
    assert_eq!(card["name"], "agentdesk");
    assert_eq!(card["version"], env!("CARGO_PKG_VERSION"));
    assert!(card["description"].as_str().unwrap().len() > 10);
    assert_eq!(card["capabilities"]["streaming"], true);
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    assert_eq!(interfaces[0]["url"], format!("{}/a2a", app.url));
    assert_eq!(interfaces[0]["protocolBinding"], "HTTP+JSON");
    assert_eq!(interfaces[1]["url"], format!("{}/a2a/jsonrpc", app.url));
    assert_eq!(interfaces[1]["protocolBinding"], "JSONRPC");
    assert!(interfaces.iter().all(|i| i["protocolVersion"] == "1.0"));
    assert_eq!(card["defaultInputModes"][0], "text/plain");
    let echo = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "echo")
        .unwrap()
        .clone();
    assert_eq!(
        echo,
        json!({"id": "echo", "name": "echo", "description": "Echoes what it is told.", "tags": ["echoes"]})
    );
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(card["securityRequirements"][0]["schemes"]["bearer"]["list"], json!([]));

    // Behind a proxy, the forwarded scheme and host make the URLs.
    let (_, card) = support::send(
        app.client
            .get(app.endpoint("/.well-known/agent-card.json"))
            .header("X-Forwarded-Proto", "https")
            .header("X-Forwarded-Host", "desk.example.com"),
    )
    .await;
    assert_eq!(card["supportedInterfaces"][0]["url"], "https://desk.example.com/a2a");

    // An agent without labels is tagged with its name; without tokens there is no scheme.
    let (_llm, open) = desk(|c| {
        c.api_tokens = vec![];
        c.public_url = Some("https://agents.example.org/desk".into());
    })
    .await;
    open.put("/v1/agents/plain", json!({"provider": "openai", "model": "m"}))
        .await;
    let (_, card) = support::send(open.client.get(open.endpoint("/.well-known/agent-card.json"))).await;
    assert_eq!(
        card["supportedInterfaces"][1]["url"],
        "https://agents.example.org/desk/a2a/jsonrpc"
    );
    assert!(card.get("securitySchemes").is_none());
    let plain = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "plain")
        .unwrap()
        .clone();
    assert_eq!(plain["tags"], json!(["plain"]));
}

#[tokio::test]
async fn a_message_becomes_a_ticket_and_its_result_the_artifact() {
    let (_llm, app) = desk(|_| {}).await;
    let mut hello = message("hello");
    hello["contextId"] = json!("conversation-1");
    hello["metadata"] = json!({"skill": "echo", "origin": "tests"});
    let (code, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        "/a2a/message:send",
        Some(json!({"message": hello})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let task = &body["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["contextId"], "conversation-1");
    assert_eq!(artifact_text(task), "echo: hello");
    assert!(task["status"]["timestamp"].as_str().unwrap().ends_with('Z'));
    let history = task["history"].as_array().unwrap();
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["parts"][0]["text"], "hello");

    // The task is the ticket: same id, labelled with the skill, the metadata kept.
    let id = task["id"].as_str().unwrap();
    let (_, ticket) = app.get(&format!("/v1/tickets/{id}")).await;
    assert_eq!(ticket["labels"], json!(["echo"]));
    assert_eq!(ticket["agent"], "echo");
    assert_eq!(ticket["metadata"]["origin"], "tests");

    // The same message again (a client's retry) is the same task.
    let (_, again) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        "/a2a/message:send",
        Some(json!({"message": hello})),
    )
    .await;
    assert_eq!(again["task"]["id"], id);

    let (code, got) = rest(
        &app,
        READ_TOKEN,
        reqwest::Method::GET,
        &format!("/a2a/tasks/{id}?historyLength=0"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert!(got.get("history").is_none(), "{got}");
    assert_eq!(artifact_text(&got), "echo: hello");

    // A data part is the task as JSON; the result comes back as a text part (it is a string).
    let data = json!({"messageId": "data-1", "role": "ROLE_USER", "parts": [{"data": {"n": 1}}]});
    let body = rpc(&app, TOKEN, "SendMessage", json!({"message": data})).await;
    let id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let (_, ticket) = app.get(&format!("/v1/tickets/{id}")).await;
    assert_eq!(ticket["task"], json!({"n": 1}));

    // A message whose metadata names no skill or labels takes them from the request's metadata;
    // the ticket keeps the message's.
    let mut aside = message("hello again");
    aside["metadata"] = json!({"origin": "message"});
    let body = rpc(
        &app,
        TOKEN,
        "SendMessage",
        json!({"message": aside, "metadata": {"skill": "echo"}}),
    )
    .await;
    let id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let (_, ticket) = app.get(&format!("/v1/tickets/{id}")).await;
    assert_eq!(ticket["labels"], json!(["echo"]));
    assert_eq!(ticket["metadata"]["origin"], "message");
}

#[tokio::test]
async fn a_question_interrupts_the_task_and_a_reply_resumes_it() {
    let (_llm, app) = desk(|_| {}).await;
    let body = rpc(
        &app,
        TOKEN,
        "SendMessage",
        json!({"message": message("QUESTION: paint the shed")}),
    )
    .await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{body}");
    let said = task["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(said.contains("colour"), "{said}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();
    assert_eq!(context, id, "a task without a client context is its own context");

    let mut reply = message("blue");
    reply["taskId"] = json!(id);
    reply["contextId"] = json!(context);
    let body = rpc(&app, TOKEN, "SendMessage", json!({"message": reply})).await;
    let task = &body["result"]["task"];
    assert_eq!(task["id"], id.as_str());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    assert_eq!(artifact_text(task), "echo: blue");
    let texts: Vec<&str> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["QUESTION: paint the shed", "Which colour should it be?", "blue"]
    );

    // A finished task takes no more messages; another context is refused.
    let mut late = message("again");
    late["taskId"] = json!(id);
    let body = rpc(&app, TOKEN, "SendMessage", json!({"message": late})).await;
    assert_eq!(body["error"]["code"], -32004, "{body}");
    assert_eq!(body["error"]["data"][0]["reason"], "UNSUPPORTED_OPERATION");
}

#[tokio::test]
async fn streams_send_the_task_then_its_changes_until_it_ends() {
    let (_llm, app) = desk(|_| {}).await;
    for binding in ["rest", "jsonrpc"] {
        let request = match binding {
            "rest" => app
                .stream_client
                .post(app.endpoint("/a2a/message:stream"))
                .json(&json!({"message": message("stream me")})),
            _ => app.stream_client.post(app.endpoint("/a2a/jsonrpc")).json(&json!({
                "jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage",
                "params": {"message": message("stream me")}
            })),
        };
        let mut stream = SseClient::open(request.bearer_auth(TOKEN)).await.unwrap();
        let events = stream.wait_end(Duration::from_secs(30)).await.expect("the stream ends");
        let responses: Vec<Value> = events
            .iter()
            .map(|e| {
                if binding == "rest" {
                    e.data.clone()
                } else {
                    e.data["result"].clone()
                }
            })
            .collect();
        assert!(responses[0]["task"]["id"].is_string(), "{binding}: {responses:?}");
        let last = responses.last().unwrap();
        assert_eq!(
            last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{responses:?}"
        );
        let artifact = &responses[responses.len() - 2]["artifactUpdate"];
        assert_eq!(artifact["artifact"]["parts"][0]["text"], "echo: stream me");
        assert_eq!(artifact["lastChunk"], true);
        if binding == "jsonrpc" {
            assert!(events.iter().all(|e| e.data["id"] == 9));
        }
    }
}

#[tokio::test]
async fn subscribing_follows_a_running_task() {
    let (_llm, app) = desk(|_| {}).await;
    // Unclaimed (no agent takes `nobody`) until it is relabelled for `echo`.
    let mut idle = message("wait for me");
    idle["metadata"] = json!({"labels": ["nobody"]});
    let (_, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        "/a2a/message:send",
        Some(json!({"message": idle, "configuration": {"returnImmediately": true}})),
    )
    .await;
    assert_eq!(body["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{body}");
    let id = body["task"]["id"].as_str().unwrap().to_owned();

    let request = app
        .stream_client
        .post(app.endpoint(&format!("/a2a/tasks/{id}:subscribe")))
        .bearer_auth(READ_TOKEN);
    let mut stream = SseClient::open(request).await.unwrap();
    let first = stream.next_event(Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.data["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    let (code, _) = app
        .patch(&format!("/v1/tickets/{id}"), json!({"labels": ["echo"]}))
        .await;
    assert_eq!(code, StatusCode::OK);
    let rest_of = stream.wait_end(Duration::from_secs(30)).await.expect("the stream ends");
    let states: Vec<&str> = rest_of
        .iter()
        .filter_map(|e| e.data["statusUpdate"]["status"]["state"].as_str())
        .collect();
    assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"), "{rest_of:?}");

    // A finished task has nothing to stream.
    let (code, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::GET,
        &format!("/a2a/tasks/{id}:subscribe"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["details"][0]["reason"], "UNSUPPORTED_OPERATION", "{body}");
}

#[tokio::test]
async fn tasks_are_listed_got_and_cancelled() {
    let (_llm, app) = desk(|_| {}).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut m = message(&format!("idle {n}"));
        m["contextId"] = json!("ctx-list");
        m["metadata"] = json!({"labels": ["nobody"]});
        let body = rpc(
            &app,
            TOKEN,
            "SendMessage",
            json!({"message": m, "configuration": {"returnImmediately": true}}),
        )
        .await;
        ids.push(body["result"]["task"]["id"].as_str().unwrap().to_owned());
    }
    let (code, page) = rest(
        &app,
        READ_TOKEN,
        reqwest::Method::GET,
        "/a2a/tasks?contextId=ctx-list&pageSize=2",
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{page}");
    assert_eq!(page["totalSize"], 3);
    assert_eq!(page["pageSize"], 2);
    let first: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(first, [ids[2].as_str(), ids[1].as_str()], "newest first");
    let token = page["nextPageToken"].as_str().unwrap();
    let body = rpc(
        &app,
        READ_TOKEN,
        "ListTasks",
        json!({"contextId": "ctx-list", "pageSize": 2, "pageToken": token}),
    )
    .await;
    let rest_page = &body["result"];
    assert_eq!(rest_page["tasks"][0]["id"], ids[0].as_str());
    assert_eq!(rest_page["nextPageToken"], "");
    let body = rpc(
        &app,
        READ_TOKEN,
        "ListTasks",
        json!({"status": "TASK_STATE_COMPLETED", "contextId": "ctx-list"}),
    )
    .await;
    assert_eq!(body["result"]["totalSize"], 0);

    let body = rpc(&app, TOKEN, "CancelTask", json!({"id": ids[0]})).await;
    assert_eq!(body["result"]["status"]["state"], "TASK_STATE_CANCELED", "{body}");
    let body = rpc(&app, TOKEN, "CancelTask", json!({"id": ids[0]})).await;
    assert_eq!(body["error"]["code"], -32002, "{body}");
    let body = rpc(&app, READ_TOKEN, "SubscribeToTask", json!({"id": ids[0]})).await;
    assert_eq!(
        body["error"]["code"], -32004,
        "a cancelled task has nothing to stream: {body}"
    );
    let (code, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        &format!("/a2a/tasks/{}:cancel", ids[1]),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "TASK_STATE_CANCELED");

    let body = rpc(&app, READ_TOKEN, "GetTask", json!({"id": ids[2], "historyLength": 1})).await;
    assert_eq!(body["result"]["history"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn errors_are_the_protocols_own() {
    let (_llm, app) = desk(|_| {}).await;
    let before = app.counts().await;
    let missing = uuid::Uuid::now_v7();
    let body = rpc(&app, TOKEN, "GetTask", json!({"id": missing.to_string()})).await;
    assert_eq!(body["error"]["code"], -32001);
    assert_eq!(body["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    let (code, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::GET,
        &format!("/a2a/tasks/{missing}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["status"], "NOT_FOUND");
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");

    assert_eq!(
        rpc(&app, TOKEN, "NoSuchMethod", json!({})).await["error"]["code"],
        -32601
    );
    assert_eq!(
        rpc(&app, TOKEN, "SendMessage", json!({"message": {"role": "ROLE_USER"}})).await["error"]["code"],
        -32602
    );
    assert_eq!(
        rpc(
            &app,
            TOKEN,
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "https://x"}]}})
        )
        .await["error"]["code"],
        -32602
    );
    assert_eq!(
        rpc(&app, TOKEN, "CreateTaskPushNotificationConfig", json!({})).await["error"]["code"],
        -32003
    );
    let (code, body) = support::send(
        app.client
            .post(app.endpoint("/a2a/jsonrpc"))
            .bearer_auth(TOKEN)
            .body("{not json"),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["error"]["code"], -32700);
    let (code, body) = support::send(
        app.client
            .post(app.endpoint("/a2a/jsonrpc"))
            .bearer_auth(TOKEN)
            .header("A2A-Version", "0.3")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["error"]["code"], -32009);
    let (code, body) = rest(&app, TOKEN, reqwest::Method::GET, "/a2a/tasks?pageSize=1000", None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["details"][0]["reason"], "INVALID_PARAMS");

    // Tokens: none is 401 on both bindings; a read token may not send or cancel.
    let (code, _) = support::send(
        app.client
            .post(app.endpoint("/a2a/message:send"))
            .json(&json!({"message": message("x")})),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, _) = support::send(app.client.post(app.endpoint("/a2a/jsonrpc")).json(&json!({}))).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, body) = rest(
        &app,
        READ_TOKEN,
        reqwest::Method::POST,
        "/a2a/message:send",
        Some(json!({"message": message("x")})),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    let (code, _) = support::send(
        app.client
            .post(app.endpoint("/a2a/jsonrpc"))
            .bearer_auth(READ_TOKEN)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": missing.to_string()}})),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);

    // A path that is not UTF-8 names no task; a body over 1 MiB is refused in the API's shape.
    for (method, path) in [
        (reqwest::Method::GET, "/a2a/tasks/%FF"),
        (reqwest::Method::GET, "/a2a/tasks/%FF:subscribe"),
        (reqwest::Method::POST, "/a2a/tasks/%FF:cancel"),
    ] {
        let (code, body) = rest(&app, TOKEN, method, path, None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND", "{path}");
    }
    let oversized = json!({"message": message(&"x".repeat(1100 * 1024))});
    for path in ["/a2a/message:send", "/a2a/jsonrpc"] {
        let answer = support::send(app.client.post(app.endpoint(path)).bearer_auth(TOKEN).json(&oversized)).await;
        support::assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }
    assert_eq!(app.counts().await, before, "refused requests changed nothing");
}

/// Sends `n` messages that no agent takes (they stay submitted) in `context`; their ids.
async fn idle_tasks(app: &TestApp, context: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let mut m = message(&format!("idle {i}"));
        m["contextId"] = json!(context);
        m["metadata"] = json!({"labels": ["nobody"]});
        let body = rpc(
            app,
            TOKEN,
            "SendMessage",
            json!({"message": m, "configuration": {"returnImmediately": true}}),
        )
        .await;
        ids.push(body["result"]["task"]["id"].as_str().unwrap().to_owned());
    }
    ids
}

fn ids_of(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn tasks_are_listed_by_their_last_change_and_filtered_by_it() {
    let (_llm, app) = desk(|_| {}).await;
    let ids = idle_tasks(&app, "ctx-changed", 3).await;
    // The oldest task changes last: it comes first, as the specification orders by the status's
    // timestamp, newest first.
    let (code, _) = app
        .patch(
            &format!("/v1/tickets/{}", ids[0]),
            json!({"labels": ["nobody", "moved"]}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    let body = rpc(&app, READ_TOKEN, "ListTasks", json!({"contextId": "ctx-changed"})).await;
    let page = &body["result"];
    let newest_first = vec![ids[0].clone(), ids[2].clone(), ids[1].clone()];
    assert_eq!(ids_of(page), newest_first, "{page}");
    let stamps: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");

    // Pages follow the same order.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let body = rpc(
            &app,
            READ_TOKEN,
            "ListTasks",
            json!({"contextId": "ctx-changed", "pageSize": 1, "pageToken": token}),
        )
        .await;
        paged.extend(ids_of(&body["result"]));
        assert_eq!(body["result"]["totalSize"], 3);
        token = body["result"]["nextPageToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(paged, newest_first);

    // statusTimestampAfter keeps the tasks whose status timestamp is at or after it.
    let mark = stamps[1];
    let expected: Vec<String> = newest_first
        .iter()
        .zip(&stamps)
        .filter(|(_, stamp)| **stamp >= mark)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(expected.starts_with(&newest_first[..2]), "{stamps:?}");
    let body = rpc(
        &app,
        READ_TOKEN,
        "ListTasks",
        json!({"contextId": "ctx-changed", "statusTimestampAfter": mark}),
    )
    .await;
    assert_eq!(ids_of(&body["result"]), expected, "{body}");
    assert_eq!(body["result"]["totalSize"], expected.len());
    // Over HTTP+JSON too, in another offset, its `+` unescaped (a query string reads it as a
    // space).
    let at = chrono::DateTime::parse_from_rfc3339(mark).unwrap();
    let shifted = at
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    assert!(shifted.contains('+'), "{shifted}");
    let (code, page) = rest(
        &app,
        READ_TOKEN,
        reqwest::Method::GET,
        &format!("/a2a/tasks?contextId=ctx-changed&statusTimestampAfter={shifted}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{page}");
    assert_eq!(ids_of(&page), expected);
    // A time in the future: nothing.
    let body = rpc(
        &app,
        READ_TOKEN,
        "ListTasks",
        json!({"contextId": "ctx-changed", "statusTimestampAfter": "2999-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(body["result"]["tasks"], json!([]), "{body}");
    assert_eq!(body["result"]["totalSize"], 0);

    // Not a timestamp: invalid params, on both bindings.
    let body = rpc(&app, READ_TOKEN, "ListTasks", json!({"statusTimestampAfter": "-1"})).await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("statusTimestampAfter"));
    for bad in ["yesterday", ""] {
        let (code, body) = rest(
            &app,
            READ_TOKEN,
            reqwest::Method::GET,
            &format!("/a2a/tasks?statusTimestampAfter={bad}"),
            None,
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
        assert_eq!(body["error"]["details"][0]["reason"], "INVALID_PARAMS");
    }
}

#[tokio::test]
async fn a_task_that_cannot_be_cancelled_is_a_conflict_over_http() {
    let (_llm, app) = desk(|_| {}).await;
    let body = rpc(&app, TOKEN, "SendMessage", json!({"message": message("finish")})).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    let id = task["id"].as_str().unwrap();
    let (code, body) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        &format!("/a2a/tasks/{id}:cancel"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], 409);
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_CANCELABLE");
    let body = rpc(&app, TOKEN, "CancelTask", json!({"id": id})).await;
    assert_eq!(body["error"]["code"], -32002, "{body}");
}

#[tokio::test]
async fn a_message_needs_its_role() {
    let (_llm, app) = desk(|_| {}).await;
    let before = app.counts().await;
    for role in [None, Some(""), Some("ROLE_UNSPECIFIED"), Some("user")] {
        let mut m = message("who says this?");
        match role {
            None => {
                m.as_object_mut().unwrap().remove("role");
            }
            Some(role) => m["role"] = json!(role),
        }
        let body = rpc(&app, TOKEN, "SendMessage", json!({"message": m})).await;
        assert_eq!(body["error"]["code"], -32602, "{role:?}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("role"), "{body}");
        let (code, body) = rest(
            &app,
            TOKEN,
            reqwest::Method::POST,
            "/a2a/message:send",
            Some(json!({"message": m})),
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{role:?}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("role"), "{body}");
    }
    assert_eq!(app.counts().await, before, "no ticket was made");
    // An agent's message is a message all the same.
    let mut m = message("from another agent");
    m["role"] = json!("ROLE_AGENT");
    let body = rpc(&app, TOKEN, "SendMessage", json!({"message": m})).await;
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
}

#[tokio::test]
async fn a_stream_that_cannot_start_says_why_in_the_stream() {
    let (_llm, app) = desk(|_| {}).await;
    let call = |method: &str, params: Value| {
        app.stream_client
            .post(app.endpoint("/a2a/jsonrpc"))
            .bearer_auth(TOKEN)
            .json(&json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params}))
    };
    // An SSE client reads nothing but events: the JSON-RPC error is the stream's one event.
    let mut stream = SseClient::open(call("SubscribeToTask", json!({"id": "no-such-task"})))
        .await
        .unwrap();
    let events = stream.wait_end(Duration::from_secs(10)).await.expect("the stream ends");
    assert_eq!(events.len(), 1, "{events:?}");
    let error = &events[0].data;
    assert_eq!(error["id"], "s-1");
    assert_eq!(error["error"]["code"], -32001, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("not found"),
        "{error}"
    );
    let mut stream = SseClient::open(call("SendStreamingMessage", json!({"message": {"role": "ROLE_USER"}})))
        .await
        .unwrap();
    let events = stream.wait_end(Duration::from_secs(10)).await.expect("the stream ends");
    assert_eq!(events[0].data["error"]["code"], -32602, "{events:?}");

    // A client that asked for JSON gets the error as JSON.
    let body = rpc(&app, TOKEN, "SubscribeToTask", json!({"id": "no-such-task"})).await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    // A missing token stays an HTTP error.
    let (code, _) = support::send(
        app.client
            .post(app.endpoint("/a2a/jsonrpc"))
            .header("Accept", "text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": "x"}})),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}

/// A message for labels no agent takes makes a task nobody will work on: a blocking send answers
/// at once with it submitted, and its stream sends it and ends, rather than hold on for ever.
#[tokio::test]
async fn a_task_no_agent_takes_is_answered_at_once() {
    let (_llm, app) = desk(|_| {}).await;
    let mut stray = message("anyone?");
    stray["metadata"] = json!({"labels": ["nobody"]});
    let started = std::time::Instant::now();
    let (code, sent) = rest(
        &app,
        TOKEN,
        reqwest::Method::POST,
        "/a2a/message:send",
        Some(json!({"message": stray})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{sent}");
    assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{sent}");
    assert!(started.elapsed() < Duration::from_secs(10), "answered at once");

    let mut streamed = message("anyone there?");
    streamed["metadata"] = json!({"labels": ["nobody"]});
    let request = app
        .stream_client
        .post(app.endpoint("/a2a/message:stream"))
        .bearer_auth(TOKEN)
        .json(&json!({"message": streamed}));
    let mut stream = SseClient::open(request).await.unwrap();
    let events = stream.wait_end(Duration::from_secs(10)).await.expect("the stream ends");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].data["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
}
