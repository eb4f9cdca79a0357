//! Experiments: tickets replayed by several arms at low priority, compared by the replays' own
//! figures and a blind judge; cancellable; nothing made unless all of it is.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// The model by name: `m-old` and `m-new` close with their answers, `judge` prefers the new
/// answer wherever it is shown, `m-ask` replies with a question (the ticket waits).
fn responder(request: &Value) -> Reply {
    let model = request["model"].as_str().unwrap_or_default();
    let text = request["messages"].to_string();
    match model {
        "m-old" => Reply::tool_call("close_ticket", json!({"result": "old answer"})),
        "m-new" => Reply::tool_call("close_ticket", json!({"result": "new answer"})),
        "judge" => {
            let at = |letter: &str| text.find(&format!("Result {letter}:")).unwrap_or(usize::MAX);
            let new = text.find("new answer").unwrap_or(0);
            // The letter whose result holds the new answer: the last heading before it.
            let winner = ["B", "A"].into_iter().find(|l| at(l) < new).unwrap_or("A");
            let loser = if winner == "A" { "B" } else { "A" };
            let verdict = json!({"winner": winner, "scores": {winner: 9, loser: 4}});
            Reply::tool_call("close_ticket", json!({"result": verdict}))
        }
        _ => Reply::text("Which one do you mean?"),
    }
}

async fn desk() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    llm.set_responder(responder);
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    for (name, model, label) in [("writer", "m-old", "w"), ("judge", "judge", "judging")] {
        let agent = json!({"provider": "openai", "model": model, "labels": [label], "tools": ["close_ticket"]});
        assert!(app.put(&format!("/v1/agents/{name}"), agent).await.0.is_success());
    }
    (app, llm)
}

async fn wait_experiment(app: &TestApp, id: &str, status: &str) -> Value {
    support::eventually(
        format!("experiment {id} to be {status}"),
        Duration::from_secs(60),
        || async {
            let (code, experiment) = app.get(&format!("/v1/experiments/{id}")).await;
            assert_eq!(code, StatusCode::OK, "{experiment}");
            (experiment["status"] == status).then_some(experiment)
        },
    )
    .await
}

#[tokio::test]
async fn an_experiment_compares_two_versions_and_a_blind_judge_picks_the_better() {
    let (app, llm) = desk().await;
    let mut keys = vec![];
    for task in ["Summarise the outage", "Summarise the release", "Summarise the audit"] {
        let t = app
            .create_ticket(json!({"task": task, "labels": ["w"], "schema": {"type": "string"}}))
            .await;
        keys.push(t["key"].as_str().unwrap().to_owned());
    }
    for key in &keys {
        wait_status(&app, key, "done").await;
    }
    // Version 2 of the writer uses the new model.
    let agent = json!({"provider": "openai", "model": "m-new", "labels": ["w"], "tools": ["close_ticket"]});
    assert!(app.put("/v1/agents/writer", agent).await.0.is_success());

    let body = json!({"name": "new model", "filter": {"label": "w", "limit": 20},
                      "arms": [{"name": "baseline", "agent": "writer", "agent_version": 1},
                               {"name": "candidate", "agent": "writer"}],
                      "judge": {"agent": "judge", "criteria": "The newer answer is better."}});
    let (code, created) = app.post("/v1/experiments", body).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["status"], "running");
    assert_eq!(created["tickets"].as_array().unwrap().len(), 3);
    let id = created["id"].as_str().unwrap().to_owned();

    let done = wait_experiment(&app, &id, "done").await;
    assert!(done["finished_at"].is_string());
    let arm = |name: &str| {
        done["arms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()
            .clone()
    };
    let (baseline, candidate) = (arm("baseline"), arm("candidate"));
    for a in [&baseline, &candidate] {
        assert_eq!(
            (&a["done"], &a["failed"], &a["waiting"]),
            (&json!(3), &json!(0), &json!(0)),
            "{a}"
        );
        assert_eq!(a["schema_valid"], 1.0, "{a}");
        assert!(
            a["duration_ms"]["p50"].is_i64() && a["duration_ms"]["p95"].is_i64(),
            "{a}"
        );
        assert!(a["input_tokens"].as_i64().unwrap() > 0, "{a}");
    }
    assert_eq!(
        candidate["judge"],
        json!({"wins": 3, "losses": 0, "ties": 0, "mean_score": 9.0})
    );
    assert_eq!(
        baseline["judge"],
        json!({"wins": 0, "losses": 3, "ties": 0, "mean_score": 4.0})
    );
    for row in done["tickets"].as_array().unwrap() {
        assert!(keys.contains(&row["ticket"].as_str().unwrap().to_owned()), "{row}");
        assert_eq!(row["results"]["baseline"]["result"], "old answer");
        assert_eq!(row["results"]["candidate"]["result"], "new answer");
        assert_eq!(row["results"]["candidate"]["status"], "done");
    }
    // The judge saw neither arm's name; the replays ran below ordinary work.
    let judged: Vec<String> = llm
        .requests()
        .iter()
        .filter(|r| r.body["model"] == "judge")
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert_eq!(judged.len(), 3);
    assert!(
        judged
            .iter()
            .all(|t| !t.contains("baseline") && !t.contains("candidate")),
        "{judged:?}"
    );
    let replay_key = done["tickets"][0]["results"]["candidate"]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, replay) = app.get(&format!("/v1/tickets/{replay_key}")).await;
    assert!(replay["priority"].as_i64().unwrap() < 0, "{replay}");
    assert_eq!(replay["metadata"]["experiment"], id.as_str());
    // The originals are as they were.
    for key in &keys {
        assert_eq!(app.get(&format!("/v1/tickets/{key}")).await.1["result"], "old answer");
    }
    let (_, list) = app.get("/v1/experiments").await;
    assert_eq!(list["items"][0]["id"], id.as_str());
}

#[tokio::test]
async fn an_experiment_is_cancelled_or_deleted_and_refused_whole() {
    let (app, _llm) = desk().await;
    let asker = json!({"provider": "openai", "model": "m-ask", "labels": ["a"], "tools": ["close_ticket"]});
    assert!(app.put("/v1/agents/asker", asker).await.0.is_success());
    let original = app.create_ticket(json!({"task": "Summarise", "labels": ["w"]})).await;
    let key = original["key"].as_str().unwrap().to_owned();
    wait_status(&app, &key, "done").await;

    // Refused whole: nothing is created.
    let (_, before) = app.get("/v1/tickets?limit=200").await;
    for (body, code) in [
        (
            json!({"name": "x", "tickets": [key], "arms": []}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"name": "x", "tickets": [key], "arms": [{"name": "a"}, {"name": "a"}]}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"name": "x", "tickets": [key], "filter": {}, "arms": [{"name": "a"}]}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"name": "x", "tickets": [key], "arms": [{"name": "a"}, {"name": "b", "agent": "nobody"}]}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"name": "x", "tickets": [key], "arms": [{"name": "a"}], "judge": {"agent": "nobody"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"name": "x", "tickets": [key, "TICKET-999"], "arms": [{"name": "a"}]}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (status, error) = app.post("/v1/experiments", body.clone()).await;
        assert_eq!(status, code, "{body}: {error}");
    }
    let (_, after) = app.get("/v1/tickets?limit=200").await;
    assert_eq!(
        after["items"].as_array().unwrap().len(),
        before["items"].as_array().unwrap().len()
    );

    // The asker's replay waits for a person, so the experiment runs until it is cancelled.
    let body = json!({"name": "waits", "tickets": [key], "arms": [{"name": "asks", "agent": "asker"}]});
    let (code, created) = app.post("/v1/experiments", body).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    support::eventually("the replay to wait", Duration::from_secs(30), || async {
        let (_, e) = app.get(&format!("/v1/experiments/{id}")).await;
        (e["arms"][0]["waiting"] == 1).then_some(())
    })
    .await;
    let (code, cancelled) = app.post(&format!("/v1/experiments/{id}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let replay = cancelled["tickets"][0]["results"]["asks"]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.get(&format!("/v1/tickets/{replay}")).await.1["status"], "cancelled");

    let (code, _) = app.delete(&format!("/v1/experiments/{id}")).await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = app.get(&format!("/v1/experiments/{id}")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(
        app.get(&format!("/v1/tickets/{replay}")).await.0,
        StatusCode::OK,
        "its tickets stay"
    );
}
