//! Retention (`AGENTDESK_RETENTION_DAYS`): what the sweep deletes and keeps, children of deleted
//! tickets, cursors that outlive their events (SSE, `Last-Event-ID`, list cursors, webhook
//! endpoints), the stored figures of `/v1/stats`, one sweeper at a time, the background task, and
//! the setting refused at start-up.

#[path = "webhooks/receiver.rs"]
#[allow(dead_code)]
mod receiver;
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::db::retention::{self, Swept};
use receiver::Receiver;
use serde_json::{json, Value};
use support::{eventually, StatusCode, TestApp};
use tokio_util::sync::CancellationToken;

const DAY: Duration = Duration::from_secs(86400);

/// A sweep keeping one day, as the background task runs it.
async fn sweep(app: &TestApp) -> Swept {
    retention::sweep(&app.pool, DAY, &CancellationToken::new())
        .await
        .unwrap()
}

/// Makes a finished ticket look finished two days ago.
async fn age(app: &TestApp, key: &str) {
    let aged = sqlx::query("UPDATE tickets SET finished_at = now() - interval '2 days' WHERE key = $1")
        .bind(key)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(aged.rows_affected(), 1);
}

async fn ticket(app: &TestApp, body: Value) -> (String, String) {
    let t = app.create_ticket(body).await;
    (
        t["id"].as_str().unwrap().to_owned(),
        t["key"].as_str().unwrap().to_owned(),
    )
}

async fn cancel(app: &TestApp, key: &str) {
    let (status, body) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Rows of a ticket left in `table`.
async fn rows(app: &TestApp, table: &str, ticket_id: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE ticket_id = $1::uuid"))
        .bind(ticket_id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn finished_tickets_older_than_the_retention_go_with_everything_they_stored() {
    let app = TestApp::spawn().await;
    let mut old = vec![];
    for status in ["done", "failed", "cancelled"] {
        let (id, key) = ticket(&app, json!({"task": format!("old {status}")})).await;
        app.comment(&key, "a comment").await;
        cancel(&app, &key).await;
        // Finished as `status`, with a stored tool output and approvals.
        sqlx::query(
            "UPDATE tickets SET status = $2,
                 approvals = '[{\"call_id\": \"c1\", \"tool_name\": \"t\", \"input\": {}, \"decision\": \"approved\"}]'
             WHERE key = $1",
        )
        .bind(&key)
        .bind(status)
        .execute(&app.pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO tool_outputs (ticket_id, call_id, tool_name, output) VALUES ($1::uuid, 'c1', 't', 'big')",
        )
        .bind(&id)
        .execute(&app.pool)
        .await
        .unwrap();
        age(&app, &key).await;
        old.push((id, key));
    }
    // Kept: finished recently, and unfinished ones however old.
    let (recent_id, recent) = ticket(&app, json!({"task": "finished today"})).await;
    cancel(&app, &recent).await;
    let (open_id, open) = ticket(&app, json!({"task": "still to do"})).await;
    sqlx::query("UPDATE tickets SET created_at = now() - interval '30 days', finished_at = now() - interval '30 days' WHERE key = $1")
        .bind(&open)
        .execute(&app.pool)
        .await
        .unwrap();

    let swept = sweep(&app).await;
    assert_eq!((swept.tickets, swept.comments), (3, 3), "{swept:?}");
    assert_eq!(swept.events, 3 * 3, "created, comment, cancelled each: {swept:?}");
    for (id, key) in &old {
        let (status, _) = app.get(&format!("/v1/tickets/{key}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{key} was deleted");
        for table in ["events", "comments", "tool_outputs"] {
            assert_eq!(rows(&app, table, id).await, 0, "{key}'s {table}");
        }
    }
    for (id, key) in [(&recent_id, &recent), (&open_id, &open)] {
        let (status, _) = app.get(&format!("/v1/tickets/{key}")).await;
        assert_eq!(status, StatusCode::OK, "{key} is kept");
        assert!(rows(&app, "events", id).await > 0);
    }
    assert_eq!(sweep(&app).await, Swept::default(), "nothing more to delete");
    app.shutdown().await;
}

#[tokio::test]
async fn the_sweep_deletes_in_batches_until_nothing_old_is_left() {
    let app = TestApp::spawn().await;
    let n = retention::BATCH as usize * 2 + 7;
    sqlx::query(
        "INSERT INTO tickets (id, task, status, finished_at)
         SELECT gen_random_uuid(), '\"old\"', 'done', now() - interval '3 days' FROM generate_series(1, $1)",
    )
    .bind(n as i32)
    .execute(&app.pool)
    .await
    .unwrap();
    // One batch is bounded.
    let batch = retention::delete_ticket_batch(&app.pool, DAY, retention::BATCH)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(batch.tickets, retention::BATCH as u64);
    let swept = sweep(&app).await;
    assert_eq!(swept.tickets as usize, n - retention::BATCH as usize);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    app.shutdown().await;
}

#[tokio::test]
async fn only_one_process_sweeps_at_a_time() {
    let app = TestApp::spawn().await;
    let (_, key) = ticket(&app, json!({"task": "old"})).await;
    cancel(&app, &key).await;
    age(&app, &key).await;
    // Another process's sweep holds the lock.
    let mut other = app.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(retention::SWEEP_LOCK)
        .execute(&mut *other)
        .await
        .unwrap();
    let swept = sweep(&app).await;
    assert!(swept.busy && swept.tickets == 0, "{swept:?}");
    assert_eq!(app.get(&format!("/v1/tickets/{key}")).await.0, StatusCode::OK);
    other.rollback().await.unwrap();
    assert_eq!(sweep(&app).await.tickets, 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_reopened_or_held_by_a_writer_is_not_deleted() {
    let app = TestApp::spawn().await;
    let (_, held) = ticket(&app, json!({"task": "held"})).await;
    cancel(&app, &held).await;
    age(&app, &held).await;
    let mut writer = app.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM tickets WHERE key = $1 FOR UPDATE")
        .bind(&held)
        .execute(&mut *writer)
        .await
        .unwrap();
    assert_eq!(sweep(&app).await.tickets, 0, "skipped while locked, not waited for");
    // Reopened under the writer's lock: no longer finished once the lock is released.
    sqlx::query("UPDATE tickets SET status = 'todo' WHERE key = $1")
        .bind(&held)
        .execute(&mut *writer)
        .await
        .unwrap();
    writer.commit().await.unwrap();
    assert_eq!(sweep(&app).await.tickets, 0);
    assert_eq!(app.get(&format!("/v1/tickets/{held}")).await.0, StatusCode::OK);
    app.shutdown().await;
}

#[tokio::test]
async fn webhook_delivery_records_older_than_the_retention_are_deleted() {
    let app = TestApp::spawn().await;
    let (_, hook) = app
        .post("/v1/webhooks", json!({"url": "https://example.com/hook"}))
        .await;
    let id = hook["id"].as_str().unwrap();
    sqlx::query(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, kind, attempt, status_code, duration_ms, at)
         SELECT $1::uuid, 'msg_' || n, 'ticket.created', 1, 200, 3,
                CASE WHEN n <= 1500 THEN now() - interval '2 days' ELSE now() END
         FROM generate_series(1, 1510) AS n",
    )
    .bind(id)
    .execute(&app.pool)
    .await
    .unwrap();
    let swept = sweep(&app).await;
    assert_eq!(swept.deliveries, 1500, "{swept:?}");
    let log = app.list_all(&format!("/v1/webhooks/{id}/deliveries")).await;
    assert_eq!(log.len(), 10);
    assert!(log.iter().all(|d| d["event_id"].as_str().unwrap() > "msg_1500"));
    app.shutdown().await;
}

#[tokio::test]
async fn a_child_of_a_deleted_ticket_keeps_working_with_no_parent() {
    let llm = testkit::fake_llm::FakeLlm::start().await;
    llm.set_responder(|_| testkit::fake_llm::Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    // An agent nobody's tickets match keeps both waiting until the parent is gone.
    let (_, parent) = ticket(&app, json!({"task": "parent", "labels": ["nobody"]})).await;
    let (child_id, child) = ticket(&app, json!({"task": "child", "labels": ["nobody"], "parent": parent})).await;
    assert_eq!(app.get(&format!("/v1/tickets/{child}")).await.1["parent_key"], parent);
    cancel(&app, &parent).await;
    age(&app, &parent).await;
    assert_eq!(sweep(&app).await.tickets, 1);

    let (status, got) = app.get(&format!("/v1/tickets/{child}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (got["parent_id"].clone(), got["parent_key"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(rows(&app, "events", &child_id).await, 1, "its own events are kept");
    // And it is worked to the end.
    let (status, body) = app.patch(&format!("/v1/tickets/{child}"), json!({"labels": []})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = support::wait_status(&app, &child, "done").await;
    assert_eq!(done["result"], "ok");
    app.shutdown().await;
}

#[tokio::test]
async fn global_stream_cursors_of_deleted_events_resume_with_the_next_event_kept() {
    let app = TestApp::spawn().await;
    let mut live = app.sse("/v1/events", None).await;
    assert!(live.wait_ready(Duration::from_secs(5)).await);
    let (_, gone) = ticket(&app, json!({"task": "to be deleted"})).await;
    let (kept_id, kept) = ticket(&app, json!({"task": "kept"})).await;
    let seen = live.collect_n(2, Duration::from_secs(10)).await;
    assert_eq!(seen.len(), 2);
    let gone_cursor = seen[0].id.clone().unwrap();
    cancel(&app, &gone).await;
    age(&app, &gone).await;
    assert_eq!(sweep(&app).await.tickets, 1);
    app.comment(&kept, "after the sweep").await;

    for resume in [Some(gone_cursor.as_str()), None] {
        let mut stream = match resume {
            Some(cursor) => app.sse("/v1/events", Some(cursor)).await,
            None => app.sse(&format!("/v1/events?after={gone_cursor}"), None).await,
        };
        assert_eq!(stream.status, StatusCode::OK);
        let events = stream.collect_n(2, Duration::from_secs(10)).await;
        let got: Vec<(&str, &str)> = events.iter().map(|e| (e.ticket_id(), e.kind())).collect();
        assert_eq!(
            got,
            [
                (kept_id.as_str(), "ticket.created"),
                (kept_id.as_str(), "comment.created")
            ]
        );
        assert!(
            stream.collect_for(Duration::from_millis(300)).await.is_empty(),
            "nothing repeated"
        );
    }
    // The ticket's own stream resumes as before.
    let mut own = app.sse(&format!("/v1/tickets/{kept}/events"), Some("1")).await;
    let events = own.collect_n(1, Duration::from_secs(10)).await;
    assert_eq!(events[0].kind(), "comment.created");
    app.shutdown().await;
}

#[tokio::test]
async fn list_cursors_of_deleted_tickets_go_on_with_the_next_ticket_kept() {
    let app = TestApp::spawn().await;
    let mut keys = vec![];
    for n in 0..4 {
        keys.push(ticket(&app, json!({"task": format!("t{n}")})).await.1);
    }
    let (_, first) = app.get("/v1/tickets?limit=2").await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let page: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    // The tickets the cursor stands on and the next one are deleted.
    let deleted: Vec<String> = keys.iter().filter(|k| page.contains(&k.as_str())).cloned().collect();
    let after: Vec<String> = keys.iter().filter(|k| !page.contains(&k.as_str())).cloned().collect();
    for key in deleted.iter().chain(&after[..1]) {
        cancel(&app, key).await;
        age(&app, key).await;
    }
    assert_eq!(sweep(&app).await.tickets, 3);
    let (status, next) = app.get(&format!("/v1/tickets?limit=2&cursor={cursor}")).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    let got: Vec<&str> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(got, [after[1].as_str()]);
    app.shutdown().await;
}

/// While tickets are written and the sweep deletes the finished ones, a global stream gets every
/// event of the kept tickets exactly once, in order, and never an event twice.
#[tokio::test]
async fn deleting_while_many_write_never_makes_the_global_stream_skip_or_repeat() {
    let app = TestApp::spawn().await;
    let mut stream = app.sse("/v1/events", None).await;
    assert!(stream.wait_ready(Duration::from_secs(5)).await);
    let keep = Duration::from_millis(200);
    let stop = CancellationToken::new();
    let deleted = Arc::new(AtomicU64::new(0));
    let sweeper = {
        let (pool, stop, deleted) = (app.pool.clone(), stop.clone(), deleted.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let swept = retention::sweep(&pool, keep, &stop).await.unwrap().tickets;
                deleted.fetch_add(swept, Ordering::SeqCst);
                // Not a wait for anything: the pause between sweeps.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let writers = (0..4).map(|w| {
        let (client, url) = (app.client.clone(), app.url.clone());
        async move {
            let mut kept = vec![];
            for n in 0..25 {
                let t = support::create_ticket_at(&client, &url, json!({"task": format!("w{w} n{n}")})).await;
                let key = t["key"].as_str().unwrap();
                if n % 2 == 0 {
                    client
                        .post(format!("{url}/v1/tickets/{key}/cancel"))
                        .json(&json!({}))
                        .send()
                        .await
                        .unwrap();
                } else {
                    let c = json!({"text": "kept"});
                    client
                        .post(format!("{url}/v1/tickets/{key}/comments"))
                        .json(&c)
                        .send()
                        .await
                        .unwrap();
                    kept.push(t["id"].as_str().unwrap().to_owned());
                }
            }
            kept
        }
    });
    let kept: HashSet<String> = futures::future::join_all(writers).await.into_iter().flatten().collect();
    // Every kept ticket has two events: created, and its comment.
    let mut seen: HashMap<String, Vec<i64>> = HashMap::new();
    let mut all = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while kept.iter().any(|id| seen.get(id).map_or(0, Vec::len) < 2) && tokio::time::Instant::now() < deadline {
        for e in stream.collect_for(Duration::from_millis(100)).await {
            assert!(
                all.insert((e.ticket_id().to_owned(), e.seq())),
                "repeated: {:?}",
                e.data
            );
            seen.entry(e.ticket_id().to_owned()).or_default().push(e.seq().unwrap());
        }
    }
    // The cancelled tickets age past `keep` and are swept.
    eventually("the sweep to delete tickets", Duration::from_secs(30), || async {
        (deleted.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    stop.cancel();
    sweeper.await.unwrap();
    assert!(
        deleted.load(Ordering::SeqCst) > 0,
        "the sweep deleted while the stream read"
    );
    for id in &kept {
        assert_eq!(seen.get(id).cloned().unwrap_or_default(), [1, 2], "ticket {id}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_webhook_endpoint_resumes_after_deleted_events_with_the_next_kept() {
    let receiver = Receiver::start(vec![]).await;
    // The API alone first: nothing is delivered yet.
    let api = TestApp::spawn_with(|c| c.allow_private_urls = true).await;
    let (_, hook) = api.post("/v1/webhooks", json!({"url": receiver.url})).await;
    let (_, gone) = ticket(&api, json!({"task": "to be deleted"})).await;
    let (kept_id, _) = ticket(&api, json!({"task": "kept"})).await;
    // The endpoint's cursor stands on the deleted ticket's first event.
    sqlx::query(
        "UPDATE webhooks w SET cursor_txid = e.txid, cursor_id = e.id
         FROM events e JOIN tickets t ON t.id = e.ticket_id WHERE t.key = $1 AND e.seq = 1 AND w.id = $2::uuid",
    )
    .bind(&gone)
    .bind(hook["id"].as_str().unwrap())
    .execute(&api.pool)
    .await
    .unwrap();
    cancel(&api, &gone).await;
    age(&api, &gone).await;
    assert_eq!(sweep(&api).await.tickets, 1);

    let database = api.database_url.clone();
    let worker = TestApp::spawn_mode(Mode::Serve, move |c| {
        c.database_url = Some(database);
        c.workers = 0;
        c.allow_private_urls = true;
    })
    .await;
    receiver.wait_for(1, Duration::from_secs(10)).await;
    // A ticket created last: the endpoint is sent events in the log's order, so once it got this
    // one, it got whatever it would be sent before it.
    let (last_id, _) = ticket(&api, json!({"task": "last"})).await;
    let received = eventually(
        "the event of the ticket created last",
        Duration::from_secs(30),
        || async {
            let received = receiver.received();
            received
                .iter()
                .any(|r| r.json()["data"]["ticket_id"] == last_id.as_str())
                .then_some(received)
        },
    )
    .await;
    let got: Vec<(String, String)> = received
        .iter()
        .map(|r| (r.kind(), r.json()["data"]["ticket_id"].as_str().unwrap().to_owned()))
        .filter(|(_, id)| *id != last_id)
        .collect();
    assert_eq!(got, [("ticket.created".to_owned(), kept_id)], "{got:?}");
    worker.shutdown().await;
    api.shutdown().await;
}

#[tokio::test]
async fn stats_report_what_is_stored() {
    let app = TestApp::spawn().await;
    let (_, a) = ticket(&app, json!({"task": "a"})).await;
    ticket(&app, json!({"task": "b"})).await;
    app.comment(&a, "one").await;
    let (status, stats) = app.get("/v1/stats").await;
    assert_eq!(status, StatusCode::OK);
    let counts = app.counts().await;
    let storage = &stats["storage"];
    assert_eq!(
        (
            storage["tickets"].as_i64(),
            storage["events"].as_i64(),
            storage["comments"].as_i64()
        ),
        (Some(counts.tickets), Some(counts.events), Some(counts.comments)),
        "{stats}"
    );
    assert_eq!((counts.tickets, counts.comments), (2, 1));
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let reported = storage["bytes"].as_i64().unwrap();
    assert!(
        reported > 1_000_000 && (reported - bytes).abs() < bytes / 10,
        "{reported} vs {bytes}"
    );

    cancel(&app, &a).await;
    age(&app, &a).await;
    sweep(&app).await;
    let (_, stats) = app.get("/v1/stats").await;
    assert_eq!(stats["storage"]["tickets"], 1);
    assert_eq!(stats["storage"]["comments"], 0);
    assert_eq!(stats["storage"]["events"], 1);
    app.shutdown().await;
}

#[tokio::test]
async fn the_background_task_sweeps_at_start_up_and_then_again() {
    let first = TestApp::spawn().await;
    let (_, before) = ticket(&first, json!({"task": "finished before the start"})).await;
    cancel(&first, &before).await;
    age(&first, &before).await;
    let database = first.database_url.clone();
    first.shutdown().await;

    // 0.00001 days is 0.864 s.
    let app = TestApp::spawn_with(move |c| {
        c.database_url = Some(database);
        c.retention = Some(Duration::from_secs_f64(0.00001 * 86400.0));
    })
    .await;
    let gone = |key: String| {
        let app = &app;
        async move {
            let path = &format!("/v1/tickets/{key}");
            eventually(format!("{key} to be deleted"), Duration::from_secs(30), || async move {
                (app.get(path).await.0 == StatusCode::NOT_FOUND).then_some(())
            })
            .await
        }
    };
    gone(before).await;
    let (_, later) = ticket(&app, json!({"task": "finished after the start"})).await;
    let (_, open) = ticket(&app, json!({"task": "open"})).await;
    cancel(&app, &later).await;
    gone(later).await;
    assert_eq!(app.get(&format!("/v1/tickets/{open}")).await.0, StatusCode::OK);
    app.shutdown().await;
}

#[test]
fn a_bad_retention_setting_stops_start_up_naming_it() {
    for bad in ["ten", "0", "-3"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentdesk"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .env("AGENTDESK_RETENTION_DAYS", bad)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("AGENTDESK_RETENTION_DAYS"), "{bad}: {stderr}");
    }
}
