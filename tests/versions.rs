//! Versions of agents: every change is a new immutable version, a rollback is a new version with
//! an old one's settings, and a ticket records (or is pinned to) the version it runs.

mod support;

use serde_json::{json, Value};
use support::{assert_error, event_data, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

#[tokio::test]
async fn each_change_is_a_version_and_a_rollback_makes_a_new_one() {
    let app = TestApp::spawn().await;
    let put = |model: &str| json!({"model": model, "role": "Answer briefly."});
    let (status, v1) = app.put("/v1/agents/writer", put("model-a")).await;
    assert_eq!((status, &v1["version"]), (StatusCode::CREATED, &json!(1)), "{v1}");
    let (_, same) = app.put("/v1/agents/writer", put("model-a")).await;
    assert_eq!(same["version"], 1, "the same settings make no new version");
    let (_, v2) = app.put("/v1/agents/writer", put("model-b")).await;
    assert_eq!(v2["version"], 2);
    let (_, got) = app.get("/v1/agents/writer").await;
    assert_eq!((&got["version"], &got["model"]), (&json!(2), &json!("model-b")));

    let (_, old) = app.get("/v1/agents/writer/versions/1").await;
    assert_eq!((&old["version"], &old["model"]), (&json!(1), &json!("model-a")));
    let (status, rolled) = app.post("/v1/agents/writer/rollback", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::OK, "{rolled}");
    assert_eq!((&rolled["version"], &rolled["model"]), (&json!(3), &json!("model-a")));
    let (_, list) = app.get("/v1/agents/writer/versions").await;
    let versions: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["version"])
        .collect();
    assert_eq!(versions, [3, 2, 1], "newest first");
    let (_, page) = app.get("/v1/agents/writer/versions?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, rest) = app.get(&format!("/v1/agents/writer/versions?cursor={cursor}")).await;
    assert_eq!(rest["items"][0]["version"], 1);

    assert_error(
        &app.get("/v1/agents/writer/versions/9").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.get("/v1/agents/nobody/versions").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let answer = app.post("/v1/agents/writer/rollback", json!({"version": 9})).await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let answer = app.post("/v1/agents/nobody/rollback", json!({"version": 1})).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "not_found");

    // Deleted and made again, an agent goes on from its last version: old tickets' versions stay.
    let (status, _) = app.delete("/v1/agents/writer").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, again) = app.put("/v1/agents/writer", put("model-c")).await;
    assert_eq!(again["version"], 4);
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_runs_the_latest_version_unless_it_was_pinned_to_one() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    app.put("/v1/agents/default", json!({"model": "model-a"})).await;
    let (_, agent) = app.put("/v1/agents/default", json!({"model": "model-b"})).await;
    let latest = agent["version"].as_i64().unwrap();
    assert!(latest >= 2);

    let plain = app.create_ticket(json!({"task": "latest"})).await;
    assert_eq!(plain["agent_version"], Value::Null);
    let done = wait_status(&app, plain["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["agent_version"], latest);
    let started = event_data(&app, plain["id"].as_str().unwrap(), "ticket.started").await;
    assert_eq!(started[0]["agent_version"], latest);

    let v1: i64 = latest - 1;
    let (status, pinned) = app
        .post(
            "/v1/tickets",
            json!({"task": "pinned", "agent": "default", "agent_version": v1}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pinned}");
    assert_eq!(pinned["agent_version"], v1);
    assert!(pinned["labels"].as_array().unwrap().contains(&json!("default")));
    let done = wait_status(&app, pinned["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["agent_version"], v1);
    let started = event_data(&app, pinned["id"].as_str().unwrap(), "ticket.started").await;
    assert_eq!(started[0]["agent_version"], v1);
    let models: Vec<Value> = llm.requests().iter().map(|r| r.body["model"].clone()).collect();
    assert_eq!(
        models,
        [json!("model-b"), json!("model-a")],
        "the pinned ticket ran its version's model"
    );

    let bad = [
        json!({"task": "t", "agent_version": 1}),
        json!({"task": "t", "agent": "nobody"}),
        json!({"task": "t", "agent": "default", "agent_version": 99}),
    ];
    for body in bad {
        let answer = app.post("/v1/tickets", body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    app.shutdown().await;
}
