//! Faults: a killed process, a restarted Postgres, cancel while a tool runs, shutdown mid-step,
//! and the smaller ways a run can go wrong.

mod support;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::postgres::{as_postgres_user, pg_bindir};
use support::wait_status;
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);

async fn kinds_of(pool: &sqlx::PgPool, key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT e.kind FROM events e JOIN tickets t ON t.id = e.ticket_id WHERE t.key = $1 ORDER BY e.seq",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Runs the real binary against `database_url`, its model server at `llm`.
fn spawn_binary(database_url: &str, llm: &FakeLlm, port: u16, log: &str) -> Child {
    support::spawn_binary(database_url, &llm.openai_base_url(), port, log, &[])
}

#[tokio::test]
async fn after_kill_9_and_a_restart_every_ticket_finishes_once_and_nothing_acknowledged_is_lost() {
    let database_url = testkit::testing::fresh_database().await.unwrap();
    let pool = agentdesk::db::connect(&database_url, 2).await.unwrap();
    let llm = FakeLlm::start().await;
    let slow = Arc::new(AtomicBool::new(true));
    let slow_flag = slow.clone();
    llm.set_responder(move |_| {
        let reply = Reply::tool_call("close_ticket", json!({ "result": "finished" }));
        if slow_flag.load(Ordering::SeqCst) {
            reply.first_byte_delay(Duration::from_secs(30))
        } else {
            reply
        }
    });
    let client = reqwest::Client::new();
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut first = spawn_binary(&database_url, &llm, port, "target/kill9-first.log");
    support::wait_ready(&client, &base, Duration::from_secs(10)).await;

    let mut keys = vec![];
    for i in 0..6 {
        let r: Value = client
            .post(format!("{base}/v1/tickets"))
            .json(&json!({ "task": format!("job {i}") }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        keys.push(r["key"].as_str().unwrap().to_owned());
    }
    assert!(llm.wait_for_requests(6, WAIT).await, "every ticket reached the model");
    let comment = client
        .post(format!("{base}/v1/tickets/{}/comments", keys[0]))
        .json(&json!({ "text": "acknowledged before the crash" }))
        .send()
        .await
        .unwrap();
    assert_eq!(comment.status(), StatusCode::CREATED);
    let events_before: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();

    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    slow.store(false, Ordering::SeqCst);

    let mut second = spawn_binary(&database_url, &llm, port, "target/kill9-second.log");
    support::wait_ready(&client, &base, Duration::from_secs(10)).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    for key in &keys {
        let t = support::wait_status_at(&client, &base, key, "done", deadline).await;
        assert_eq!(t["attempts"], 2, "the claim lost in the crash counts: {t}");
    }
    second.kill().unwrap();
    second.wait().unwrap();

    for key in &keys {
        let kinds = kinds_of(&pool, key).await;
        assert_eq!(
            kinds.iter().filter(|k| *k == "ticket.done").count(),
            1,
            "{key} closed once: {kinds:?}"
        );
        assert_eq!(kinds.last().unwrap(), "ticket.done");
        assert!(
            kinds.contains(&"ticket.requeued".to_string()),
            "{key} was re-queued after its lease expired"
        );
        let seqs: Vec<i64> = sqlx::query_scalar(
            "SELECT e.seq FROM events e JOIN tickets t ON t.id = e.ticket_id WHERE t.key = $1 ORDER BY e.seq",
        )
        .bind(key)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "{key}'s events have no gaps"
        );
    }
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM comments c JOIN tickets t ON t.id = c.ticket_id WHERE t.key = $1 AND c.content::text LIKE '%acknowledged before the crash%'")
        .bind(&keys[0])
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1, "the acknowledged comment survived");
    let events_after: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(events_after > events_before);
}

#[tokio::test]
async fn a_postgres_restart_mid_run_is_survived_and_the_tickets_finish() {
    let dir = std::env::temp_dir().join(format!("agentdesk-pg-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = agentdesk::embedded_pg::EmbeddedPostgres::start(&dir.join("pgdata"))
        .await
        .unwrap();
    let llm = FakeLlm::start().await;
    llm.set_responder(|_| {
        Reply::tool_call("close_ticket", json!({ "result": "ok" })).first_byte_delay(Duration::from_millis(1500))
    });
    let providers = support::fake_providers(&llm);
    let url = pg.url();
    let app = TestApp::spawn_full(agentdesk::app::Mode::Serve, providers, |c| {
        c.database_url = Some(url.clone());
        c.lease = Duration::from_secs(10);
    })
    .await;
    let mut keys = vec![];
    for i in 0..4 {
        keys.push(
            app.create_ticket(json!({ "task": format!("job {i}") })).await["key"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(llm.wait_for_requests(4, WAIT).await);

    // A real restart: fast shutdown (every connection dropped), then the same server again.
    let pg_ctl = std::path::Path::new(&pg_bindir()).join("pg_ctl");
    let data_dir = pg.data_dir().to_path_buf();
    let status = as_postgres_user(
        Command::new(&pg_ctl)
            .arg("-D")
            .arg(&data_dir)
            .args(["restart", "-m", "fast", "-w", "-l"])
            .arg(std::env::temp_dir().join(format!("agentdesk-pg-restart-{}.log", std::process::id()))),
    )
    .status()
    .unwrap();
    assert!(status.success(), "pg_ctl restart failed");

    // Requests right after the restart get fresh connections: none is answered 503 from a pooled
    // connection that died with the old server.
    let reads = keys
        .iter()
        .chain(&keys)
        .map(|key| support::send(app.request(reqwest::Method::GET, &format!("/v1/tickets/{key}"))));
    for (status, body) in futures::future::join_all(reads).await {
        assert_eq!(status, StatusCode::OK, "right after the restart: {body}");
    }

    for key in &keys {
        let done = wait_status(&app, key, "done").await;
        assert_eq!(done["result"], "ok");
    }
    // New work after the restart runs too.
    let key = app.create_ticket(json!({ "task": "after" })).await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_status(&app, &key, "done").await;
    app.shutdown().await;
    let _ = as_postgres_user(
        Command::new(&pg_ctl)
            .arg("-D")
            .arg(&data_dir)
            .args(["stop", "-m", "immediate"]),
    )
    .status();
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn start(configure: impl FnOnce(&mut agentdesk::config::Config)) -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, configure).await;
    (app, llm)
}

#[tokio::test]
async fn cancelling_while_a_tool_runs_aborts_the_tool_and_returns_cancelled_within_two_seconds() {
    let (app, llm) = start(|_| {}).await;
    let target = app
        .create_ticket(json!({ "task": "edit me", "labels": ["nobody"] }))
        .await;
    let target_key = target["key"].as_str().unwrap().to_owned();
    // Hold the target's row lock so the agent's edit blocks inside the tool.
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM tickets WHERE key = $1 FOR UPDATE")
        .bind(&target_key)
        .execute(&mut *blocker)
        .await
        .unwrap();
    llm.push(Reply::tool_call(
        "manage_tickets",
        json!({ "action": "edit", "key": target_key, "task": "edited" }),
    ));
    let ticket = app.create_ticket(json!({ "task": "edit the other one" })).await;
    let key = ticket["key"].as_str().unwrap();
    support::eventually("the tool to start", WAIT, || async {
        kinds_of(&app.pool, key)
            .await
            .contains(&"tool.started".to_string())
            .then_some(())
    })
    .await;
    // The tool's statement waits for the row lock.
    let blocked: Vec<i32> = support::eventually("the tool's edit to wait for the lock", WAIT, || async {
        let waiting: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_all(&app.pool)
        .await
        .unwrap();
        (!waiting.is_empty()).then_some(waiting)
    })
    .await;
    let started = std::time::Instant::now();
    let (code, cancelled) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(2));
    blocker.rollback().await.unwrap();
    // The aborted loop has ended, and the statement it left waiting has finished and settled
    // (its session idle or gone): whatever either would write is written by now.
    app.wait_idle().await;
    support::eventually("the blocked statement to settle", WAIT, || async {
        let busy: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1) AND state <> 'idle'")
                .bind(&blocked)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        (busy == 0).then_some(())
    })
    .await;
    let kinds = kinds_of(&app.pool, key).await;
    assert_eq!(
        kinds.last().unwrap(),
        "ticket.cancelled",
        "nothing after the cancel: {kinds:?}"
    );
    assert!(!kinds.contains(&"tool.finished".to_string()));
    let (_, target) = app.get(&format!("/v1/tickets/{target_key}")).await;
    assert_eq!(target["task"], "edit me", "the aborted tool changed nothing");
    app.shutdown().await;
}

#[tokio::test]
async fn shutdown_releases_a_running_ticket_to_todo_without_spending_an_attempt() {
    let (app, llm) = start(|c| c.shutdown_grace = Duration::from_millis(300)).await;
    llm.push(Reply::text("slow").first_byte_delay(Duration::from_secs(20)));
    let ticket = app.create_ticket(json!({ "task": "long" })).await;
    let key = ticket["key"].as_str().unwrap().to_owned();
    assert!(llm.wait_for_requests(1, WAIT).await);
    let pool = agentdesk::db::connect(&app.database_url, 1).await.unwrap();
    let started = std::time::Instant::now();
    app.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    let (status, attempts): (String, i32) = sqlx::query_as("SELECT status, attempts FROM tickets WHERE key = $1")
        .bind(&key)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((status.as_str(), attempts), ("todo", 0));
    let data: Value = sqlx::query_scalar("SELECT e.data FROM events e JOIN tickets t ON t.id = e.ticket_id WHERE t.key = $1 AND e.kind = 'ticket.requeued'")
        .bind(&key)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(data, json!({ "reason": "shutdown" }));
}

#[tokio::test]
async fn a_comment_on_an_in_progress_ticket_reaches_the_model_on_its_next_request() {
    let (app, llm) = start(|_| {}).await;
    llm.push(
        Reply::tool_call("read_tickets", json!({ "action": "list" })).first_byte_delay(Duration::from_millis(800)),
    );
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "ok" })));
    let ticket = app.create_ticket(json!({ "task": "work" })).await;
    let key = ticket["key"].as_str().unwrap();
    assert!(llm.wait_for_requests(1, WAIT).await);
    let (code, _) = app
        .post(
            &format!("/v1/tickets/{key}/comments"),
            json!({ "text": "also check the logs" }),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    wait_status(&app, key, "done").await;
    assert!(llm.requests()[1].body["messages"]
        .to_string()
        .contains("also check the logs"));
    app.shutdown().await;
}

#[tokio::test]
async fn an_agent_naming_an_unconfigured_provider_fails_its_ticket_with_a_clear_kind() {
    let (app, _llm) = start(|_| {}).await;
    let (code, _) = app
        .put("/v1/agents/claude", json!({ "provider": "anthropic", "labels": ["c"] }))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let ticket = app.create_ticket(json!({ "task": "t", "labels": ["claude"] })).await;
    let failed = wait_status(&app, ticket["key"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error"]["kind"], "provider_unconfigured");
    assert!(failed["error"]["message"]
        .as_str()
        .unwrap()
        .contains("ANTHROPIC_API_KEY"));
    app.shutdown().await;
}

#[tokio::test]
async fn a_step_retried_after_a_database_error_sees_the_whole_transcript_again() {
    let (app, llm) = start(|_| {}).await;
    // Storing the second step's result fails (a trigger stands in for the database failing at
    // that moment), and the run is retried with the same claim.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_the_comment() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.content::text LIKE '%refused by the database%' THEN
                 RAISE EXCEPTION 'the database failed';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_the_comment BEFORE INSERT ON comments
             FOR EACH ROW EXECUTE FUNCTION refuse_the_comment();",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    llm.push(Reply::tool_call("read_tickets", json!({ "action": "list" })));
    llm.push(Reply::tool_call(
        "close_ticket",
        json!({ "result": "refused by the database" }),
    ));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "after the retry" })));
    let ticket = app.create_ticket(json!({ "task": "work through a failure" })).await;
    let key = ticket["key"].as_str().unwrap();

    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["result"], "after the retry");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let messages = requests[2].body["messages"].as_array().unwrap();
    assert!(
        messages.iter().any(|m| m["role"] == "tool"),
        "the retried step was sent the first step's call and result, not just the task: {messages:?}"
    );
    app.shutdown().await;
}
