//! Limits that hold: an agent's `max_concurrent` across worker processes, a ticket's deadline.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use serde_json::json;
use support::{event_kinds, wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// A real `agentdesk worker` process on the test database, its model server at `llm`.
fn spawn_worker(database_url: &str, llm: &FakeLlm) -> Child {
    Command::new(env!("CARGO_BIN_EXE_agentdesk"))
        .arg("worker")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("AGENTDESK_WORKERS", "8")
        .env("AGENTDESK_DB_MAX_CONNECTIONS", "4")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start an agentdesk worker")
}

#[tokio::test]
async fn max_concurrent_holds_across_two_worker_processes() {
    let app = TestApp::spawn_mode(Mode::Api, |_| {}).await;
    let llm = FakeLlm::start().await;
    llm.set_responder(|_| {
        Reply::tool_call("close_ticket", json!({ "result": "ok" })).first_byte_delay(Duration::from_millis(300))
    });
    let (status, agent) = app
        .put(
            "/v1/agents/capped",
            json!({"provider": "openai", "model": "m", "labels": ["capped"], "max_concurrent": 2}),
        )
        .await;
    assert!(status.is_success(), "{agent}");
    assert_eq!(agent["max_concurrent"], 2);
    // An agent without a limit, working alongside, is not held back.
    let (status, _) = app
        .put(
            "/v1/agents/free",
            json!({"provider": "openai", "model": "m", "labels": ["free"]}),
        )
        .await;
    assert!(status.is_success());
    for i in 0..12 {
        app.create_ticket(json!({"task": format!("capped {i}"), "labels": ["capped"]}))
            .await;
    }
    for i in 0..6 {
        app.create_ticket(json!({"task": format!("free {i}"), "labels": ["free"]}))
            .await;
    }
    let mut workers = [
        spawn_worker(&app.database_url, &llm),
        spawn_worker(&app.database_url, &llm),
    ];

    let (mut most_capped, mut most_free) = (0i64, 0i64);
    let started = Instant::now();
    loop {
        let (capped, free, left): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'in_progress' AND agent = 'capped'),
                    count(*) FILTER (WHERE status = 'in_progress' AND agent = 'free'),
                    count(*) FILTER (WHERE status <> 'done')
             FROM tickets",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        most_capped = most_capped.max(capped);
        most_free = most_free.max(free);
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{left} tickets never finished"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    assert_eq!(
        most_capped, 2,
        "the capped agent ran at most (and at best) 2 tickets at once"
    );
    assert!(most_free > 2, "the agent without a limit ran {most_free} at once");
    let claimants: i64 = sqlx::query_scalar("SELECT count(DISTINCT agent) FROM tickets")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(claimants, 2);
}

#[tokio::test]
async fn max_concurrent_must_be_at_least_one() {
    let app = TestApp::spawn().await;
    for bad in [json!(0), json!(-1), json!("two")] {
        let (status, body) = app
            .put("/v1/agents/a", json!({"model": "m", "max_concurrent": bad}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    let (status, agent) = app.put("/v1/agents/a", json!({"model": "m"})).await;
    assert!(status.is_success());
    assert!(agent["max_concurrent"].is_null());
}

/// Fails within a few seconds of the deadline, with `deadline_exceeded` and a `ticket.failed`.
async fn assert_fails_by_its_deadline(app: &TestApp, ticket: &serde_json::Value) {
    let key = ticket["key"].as_str().unwrap();
    let failed = wait_status(app, key, "failed").await;
    assert_eq!(failed["error"]["kind"], "deadline_exceeded", "{failed}");
    assert_eq!(failed["deadline_secs"], 1);
    let kinds = event_kinds(app, ticket["id"].as_str().unwrap()).await;
    assert_eq!(kinds.last().map(String::as_str), Some("ticket.failed"), "{kinds:?}");
}

#[tokio::test]
async fn a_deadline_fails_a_queued_a_running_and_a_waiting_ticket() {
    let llm = FakeLlm::start().await;
    llm.set_responder(|request| {
        let text = request.to_string();
        if text.contains("ASK-THE-HUMANS") {
            Reply::text("Which city?")
        } else {
            Reply::tool_call("close_ticket", json!({ "result": "late" })).first_byte_delay(Duration::from_secs(30))
        }
    });
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    // Nobody takes this label: it stays queued.
    let queued = app
        .create_ticket(json!({"task": "queued", "labels": ["nobody"], "deadline_secs": 1}))
        .await;
    let running = app.create_ticket(json!({"task": "slow", "deadline_secs": 1})).await;
    let asking = app
        .create_ticket(json!({"task": "ASK-THE-HUMANS", "deadline_secs": 30}))
        .await;
    assert!(queued["deadline_at"].is_string());

    wait_status(&app, running["key"].as_str().unwrap(), "in_progress").await;
    let started = Instant::now();
    assert_fails_by_its_deadline(&app, &queued).await;
    assert_fails_by_its_deadline(&app, &running).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the running ticket failed on time"
    );

    wait_status(&app, asking["key"].as_str().unwrap(), "waiting").await;
    // Bring the waiting ticket's deadline forward rather than wait half a minute.
    sqlx::query("UPDATE tickets SET deadline_at = now(), deadline_secs = 1 WHERE id = $1::uuid")
        .bind(asking["id"].as_str().unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    assert_fails_by_its_deadline(&app, &asking).await;
    // Done tickets keep their result: nothing more happens after the deadline. The stopped
    // loops have ended, so whatever they would write is written by now.
    app.wait_idle().await;
    let (_, after) = app
        .get(&format!("/v1/tickets/{}", running["key"].as_str().unwrap()))
        .await;
    assert_eq!(after["status"], "failed");
    assert!(after["result"].is_null());
}

#[tokio::test]
async fn deadline_secs_is_1_or_more_and_null_means_none() {
    let app = TestApp::spawn().await;
    for bad in [json!(0), json!(-5), json!(315_360_001), json!("soon"), json!(1.5)] {
        let (status, body) = app
            .post("/v1/tickets", json!({"task": "x", "deadline_secs": bad}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    let (status, ticket) = app
        .post("/v1/tickets", json!({"task": "x", "deadline_secs": null}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(ticket["deadline_secs"].is_null() && ticket["deadline_at"].is_null());
}

#[tokio::test]
async fn a_task_holding_the_largest_and_smallest_doubles_is_stored_and_read_back() {
    let app = TestApp::spawn().await;
    let task = json!({"big": 1.7976931348623157e308, "small": -1.7976931348623157e308, "tiny": 5e-324, "n": [1e300]});
    let (status, created) = app
        .post(
            "/v1/tickets",
            json!({"task": task, "metadata": {"x": 1.7976931348623157e308}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, read) = app
        .get(&format!("/v1/tickets/{}", created["key"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["task"], task);
    let (status, list) = app.get("/v1/tickets").await;
    assert_eq!(status, StatusCode::OK, "{list}");
}
