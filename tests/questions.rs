//! Questions (`ask_human`): the ticket waits with its `pending_question`; an answer by the API,
//! the signed link's form or a comment returns to the model as the call's result; a question
//! nobody answers expires as the agent says, across a restart.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{assert_error, event_data, event_kinds, position, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// An agent `asker` with `ask_human` (and `extra` settings), answering with the model server.
async fn setup(app: &TestApp, extra: Value) {
    let mut agent = json!({"provider": "openai", "model": "m", "labels": ["asker"],
                           "tools": ["close_ticket", "ask_human"]});
    agent
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (code, body) = app.put("/v1/agents/asker", agent).await;
    assert!(code.is_success(), "{body}");
}

async fn ticket(app: &TestApp) -> (String, String) {
    let t = app.create_ticket(json!({"task": "ship it", "labels": ["asker"]})).await;
    (
        t["key"].as_str().unwrap().to_owned(),
        t["id"].as_str().unwrap().to_owned(),
    )
}

fn ask(args: Value) -> Reply {
    Reply::tool_call("ask_human", args)
}

fn close() -> Reply {
    Reply::tool_call("close_ticket", json!({"result": "ok"}))
}

/// The tool result the model got for the `ask_human` call.
fn answer_sent_to_model(llm: &FakeLlm) -> Option<String> {
    llm.requests().iter().find_map(|request| {
        let messages = request.body["messages"].as_array()?;
        let call_id = messages.iter().find_map(|m| {
            m["tool_calls"]
                .as_array()?
                .iter()
                .find(|c| c["function"]["name"] == "ask_human")
                .and_then(|c| c["id"].as_str())
        })?;
        messages.iter().find_map(|m| {
            (m["role"] == "tool" && m["tool_call_id"] == call_id).then(|| m["content"].as_str().unwrap().to_owned())
        })
    })
}

/// Waits until the ticket waits on its question; returns the ticket.
async fn waiting_question(app: &TestApp, key: &str) -> Value {
    let waiting = wait_status(app, key, "waiting").await;
    assert_eq!(waiting["waiting_for"], "human", "{waiting}");
    assert_eq!(waiting["pending_approvals"], json!([]));
    assert!(waiting["pending_question"]["id"].is_string(), "{waiting}");
    waiting
}

#[tokio::test]
async fn a_question_waits_for_an_answer_that_fits_and_the_answer_returns_to_the_model() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    setup(&app, json!({})).await;
    llm.push(ask(
        json!({"question": "Which environment?", "choices": ["staging", "prod"]}),
    ));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    let waiting = waiting_question(&app, &key).await;
    let question = &waiting["pending_question"];
    assert_eq!(question["question"], "Which environment?");
    assert_eq!(question["choices"], json!(["staging", "prod"]));
    assert_eq!(question["response_schema"], Value::Null);
    assert_eq!(question["expires_at"], Value::Null, "no deadline by default");
    let answer_url = question["answer_url"].as_str().expect("answer_url");
    assert!(
        answer_url.starts_with(&format!("{}/links/questions/", app.url)),
        "{answer_url}"
    );
    let qid = question["id"].as_str().unwrap().to_owned();
    let asked = event_data(&app, &id, "question.asked").await;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (&asked[0]["id"], &asked[0]["answer_url"]),
        (&json!(qid), &json!(answer_url))
    );
    assert!(
        event_data(&app, &id, "tool.started").await.is_empty(),
        "the question did not run"
    );

    // Not a choice: 422 naming the rule, and nothing changes.
    let path = format!("/v1/tickets/{key}/questions/{qid}");
    let (code, body) = app.post(&path, json!({"answer": "qa"})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("choices"), "{body}");
    assert_error(
        &app.post(&path, json!({"answer": null})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_eq!(app.get(&format!("/v1/tickets/{key}")).await.1["status"], "waiting");
    let other = "0190d5a4-0000-7000-8000-000000000000";
    let (code, _) = app
        .post(
            &format!("/v1/tickets/{key}/questions/{other}"),
            json!({"answer": "prod"}),
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    let (code, answered) = app.post(&path, json!({"answer": "prod"})).await;
    assert_eq!(code, StatusCode::OK, "{answered}");
    assert_eq!(answered["key"], key.as_str());
    assert_eq!(answered["pending_question"], Value::Null);
    wait_status(&app, &key, "done").await;
    assert_eq!(answer_sent_to_model(&llm).as_deref(), Some("prod"));
    let answers = event_data(&app, &id, "question.answered").await;
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (&answers[0]["answer"], &answers[0]["by"]),
        (&json!("prod"), &json!("api"))
    );
    let kinds = event_kinds(&app, &id).await;
    assert!(position(&kinds, "question.asked") < position(&kinds, "question.answered"));
    assert!(position(&kinds, "question.answered") < position(&kinds, "tool.finished"));
    let (code, _) = app.post(&path, json!({"answer": "prod"})).await;
    assert_eq!(code, StatusCode::CONFLICT, "answered once");
}

#[tokio::test]
async fn a_bad_question_or_a_second_one_is_an_error_result_for_the_model() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    setup(&app, json!({})).await;
    llm.push(Reply::tool_calls(vec![(
        "ask_human",
        json!({"question": "A?", "response_schema": {"type": "nonsense"}}),
    )]));
    llm.push(Reply::tool_calls(vec![
        ("ask_human", json!({"question": "first?"})),
        ("ask_human", json!({"question": "second?"})),
    ]));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    let waiting = waiting_question(&app, &key).await;
    assert_eq!(waiting["pending_question"]["question"], "first?");
    let failed = event_data(&app, &id, "tool.failed").await;
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        failed[0]["message"].as_str().unwrap().contains("response_schema"),
        "{failed:?}"
    );
    assert!(
        failed[1]["message"]
            .as_str()
            .unwrap()
            .contains("one question at a time"),
        "{failed:?}"
    );
}

#[tokio::test]
async fn a_link_answers_a_schema_question_with_a_form_once_and_without_a_token() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.api_tokens = vec!["desk-token".into()]).await;
    setup(&app, json!({})).await;
    let schema = json!({"type": "object", "required": ["replicas"],
                        "properties": {"replicas": {"type": "integer", "minimum": 1}, "canary": {"type": "boolean"}}});
    llm.push(ask(
        json!({"question": "How many replicas?", "response_schema": schema}),
    ));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    let waiting = waiting_question(&app, &key).await;
    let answer_url = waiting["pending_question"]["answer_url"].as_str().unwrap().to_owned();

    let plain = reqwest::Client::new();
    let page = plain.get(&answer_url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(
        html.contains("How many replicas?") && html.contains("ship it"),
        "{html}"
    );
    assert!(
        html.contains("name=\"replicas\"") && html.contains("name=\"canary\""),
        "{html}"
    );
    let form = |body: &'static str| {
        plain
            .post(&answer_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
    };
    // Below the schema's minimum: refused with the path, nothing changes.
    let refused = form("replicas=0").send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(refused.text().await.unwrap().contains("/replicas"));
    assert_eq!(app.get(&format!("/v1/tickets/{key}")).await.1["status"], "waiting");

    let answered = form("replicas=3&canary=true").send().await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    wait_status(&app, &key, "done").await;
    let sent: Value = serde_json::from_str(&answer_sent_to_model(&llm).unwrap()).unwrap();
    assert_eq!(sent, json!({"replicas": 3, "canary": true}));
    assert_eq!(event_data(&app, &id, "question.answered").await[0]["by"], "link");
    let again = form("replicas=4").send().await.unwrap();
    assert_eq!(again.status(), StatusCode::GONE, "a link works once");
    assert_eq!(plain.get(&answer_url).send().await.unwrap().status(), StatusCode::GONE);
    // An approval's path does not take a question's token.
    let swapped = answer_url.replace("/links/questions/", "/links/approvals/");
    assert_eq!(
        plain.get(&swapped).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );

    // A link whose ticket was deleted (as retention deletes) is gone.
    llm.push(ask(json!({"question": "Deleted?"})));
    let (key, id) = ticket(&app).await;
    let waiting = waiting_question(&app, &key).await;
    let answer_url = waiting["pending_question"]["answer_url"].as_str().unwrap().to_owned();
    for table in ["events", "comments"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE ticket_id = $1::uuid"))
            .bind(&id)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM tickets WHERE id = $1::uuid")
        .bind(&id)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(plain.get(&answer_url).send().await.unwrap().status(), StatusCode::GONE);
}

#[tokio::test]
async fn a_comment_answers_a_question_that_accepts_its_text() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    setup(&app, json!({})).await;
    // A number is wanted: a comment's text is not an answer, and the ticket waits again.
    llm.push(ask(
        json!({"question": "How many?", "response_schema": {"type": "integer"}}),
    ));
    let (key, id) = ticket(&app).await;
    let qid = waiting_question(&app, &key).await["pending_question"]["id"].clone();
    app.comment(&key, "a few").await;
    support::eventually("the ticket to wait again", Duration::from_secs(20), || async {
        (event_data(&app, &id, "ticket.waiting").await.len() >= 2).then_some(())
    })
    .await;
    assert_eq!(waiting_question(&app, &key).await["pending_question"]["id"], qid);
    assert!(event_data(&app, &id, "question.answered").await.is_empty());

    // Free text: the comment is the answer.
    llm.push(ask(json!({"question": "Which colour?"})));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    waiting_question(&app, &key).await;
    app.comment(&key, "  blue ").await;
    wait_status(&app, &key, "done").await;
    let answers = event_data(&app, &id, "question.answered").await;
    assert_eq!(
        (&answers[0]["answer"], &answers[0]["by"]),
        (&json!("blue"), &json!("comment"))
    );
    assert_eq!(answer_sent_to_model(&llm).as_deref(), Some("blue"));
}

#[tokio::test]
async fn a_question_nobody_answers_expires_as_the_agent_says_across_a_restart() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    // `continue`: the model is told nobody answered, and goes on.
    setup(
        &app,
        json!({"question_timeout_secs": 1, "on_question_timeout": "continue"}),
    )
    .await;
    llm.push(ask(json!({"question": "Anyone?"})));
    llm.push(close());
    let (key, id) = ticket(&app).await;
    wait_status(&app, &key, "done").await;
    let expired = event_data(&app, &id, "question.expired").await;
    assert_eq!(expired[0]["on_timeout"], "continue");
    // An answer that came too late is told the question expired.
    let late = format!("/v1/tickets/{key}/questions/{}", expired[0]["id"].as_str().unwrap());
    let (code, error) = app.post(&late, json!({"answer": "here"})).await;
    assert_eq!(code, StatusCode::CONFLICT, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("expired"),
        "{error}"
    );
    assert!(answer_sent_to_model(&llm).unwrap().contains("Nobody answered"));

    // `fail`, with the process gone while the question waits: the next one fails the ticket.
    setup(&app, json!({"question_timeout_secs": 3, "on_question_timeout": "fail"})).await;
    llm.push(ask(json!({"question": "Still there?"})));
    let (key, id) = ticket(&app).await;
    let waiting = waiting_question(&app, &key).await;
    assert!(waiting["pending_question"]["expires_at"].is_string(), "{waiting}");
    let database_url = app.database_url.clone();
    app.shutdown().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.database_url = Some(database_url)).await;
    let failed = wait_status(&app, &key, "failed").await;
    assert_eq!(failed["error"]["kind"], "question_expired", "{failed}");
    assert_eq!(event_data(&app, &id, "question.expired").await[0]["on_timeout"], "fail");
    let bad = json!({"provider": "openai", "model": "m", "question_timeout_secs": 0});
    assert_error(
        &app.put("/v1/agents/bad", bad).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
}
