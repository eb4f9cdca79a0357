//! Server-sent events: per-ticket replay and resume, the global stream's cursor and filters, and
//! the guarantee that a reconnecting client sees every event exactly once while many tickets write.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use sqlx::Connection;
use support::{assert_error, SseClient, SseEvent, StatusCode, TestApp};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(5);

fn ids(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(|e| e.id.clone().unwrap_or_default()).collect()
}

fn kinds(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(|e| e.kind().to_owned()).collect()
}

/// A connection to `url` holding a transaction open that has taken its transaction id, as a
/// writer does: every event committed after it waits behind it while the two share a database.
async fn open_writing_transaction(url: &str) -> sqlx::postgres::PgConnection {
    let mut conn = sqlx::postgres::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// Waits until the event hub has read what was written so far, so a stream "from now" starts
/// after it.
async fn settle(app: &TestApp) {
    app.wait_events_read().await;
}

// ---------------------------------------------------------------------------------------------
// One ticket's stream

#[tokio::test]
async fn a_ticket_stream_replays_from_the_first_event_with_gapless_ids_then_sends_live_events() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x", "labels": ["l"]})).await;
    let key = t["key"].as_str().unwrap();
    for i in 0..3 {
        app.comment(key, &format!("comment {i}")).await;
    }
    let mut stream = app.sse(&format!("/v1/tickets/{key}/events"), None).await;
    let replayed = stream.collect_n(4, WAIT).await;
    assert_eq!(ids(&replayed), ["1", "2", "3", "4"]);
    assert_eq!(
        kinds(&replayed),
        [
            "ticket.created",
            "comment.created",
            "comment.created",
            "comment.created"
        ]
    );
    for (i, e) in replayed.iter().enumerate() {
        assert_eq!(e.seq(), Some(i as i64 + 1));
        assert_eq!(e.data["ticket_id"], t["id"]);
        assert_eq!(e.data["ticket_key"], t["key"]);
        assert!(e.data["at"].is_string() && e.data.get("agent").is_some(), "{}", e.data);
    }
    assert_eq!(replayed[0].data["data"]["ticket"]["id"], t["id"]);
    assert_eq!(replayed[1].data["data"]["comment"]["content"][0]["text"], "comment 0");

    // Live, after the replay, with the next id.
    app.comment(key, "live").await;
    let live = stream.next_event(WAIT).await.expect("a live event");
    assert_eq!((live.id.as_deref(), live.kind()), (Some("5"), "comment.created"));
    // Another ticket's events do not show up.
    app.create_ticket(json!({"task": "other"})).await;
    app.comment(key, "live again").await;
    let live = stream.next_event(WAIT).await.expect("a live event");
    assert_eq!(
        (live.id.as_deref(), live.data["ticket_id"].clone()),
        (Some("6"), t["id"].clone())
    );
    assert!(stream.next_event(Duration::from_millis(300)).await.is_none());
    assert!(!stream.ended());
    app.shutdown().await;
}

#[tokio::test]
async fn after_a_quiet_spell_an_event_streams_without_waiting_for_company() {
    // The hub gathers the commits of a few milliseconds into one read only when they come faster
    // than that; an event on a quiet desk is read as soon as it is committed.
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    let mut stream = app.sse("/v1/events?kind=comment.created", None).await;
    settle(&app).await;
    let mut latencies = vec![];
    for i in 0..15 {
        // Not a wait for anything: the quiet spell this test is about, before each comment.
        tokio::time::sleep(Duration::from_millis(50)).await;
        app.comment(key, &format!("c{i}")).await;
        let answered = Instant::now();
        stream.next_event(WAIT).await.expect("the comment's event");
        latencies.push(answered.elapsed());
    }
    latencies.sort();
    // Waiting out a 5 ms gathering window would put every one at 4.5 ms or more.
    assert!(latencies[7] < Duration::from_millis(4), "median {:?}", latencies[7]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_session_that_listens_is_told_of_new_events_and_work() {
    // A process alone on its database sends no NOTIFY (it wakes its own reader and workers); any
    // other session that LISTENs is taken for another process, and is told.
    let app = TestApp::spawn().await;
    let mut listener = sqlx::postgres::PgListener::connect(&app.database_url).await.unwrap();
    listener
        .listen_all([agentdesk::db::EVENTS_CHANNEL, agentdesk::db::WORK_CHANNEL])
        .await
        .unwrap();
    // The process looks for listeners at most once a second: write until it has seen this one
    // and told it of both.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut told = HashSet::new();
    while told.len() < 2 {
        assert!(Instant::now() < deadline, "told only of {told:?}");
        app.create_ticket(json!({"task": "x"})).await;
        while let Ok(n) = tokio::time::timeout(Duration::from_millis(100), listener.recv()).await {
            told.insert(n.unwrap().channel().to_owned());
        }
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_events_data_is_kept_as_the_json_text_it_was_written_as() {
    // No query looks into an event's data: it is stored as `json` text, only checked on insert,
    // and read back as stored instead of being converted to jsonb and printed again.
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x", "labels": ["b", "a"]})).await;
    let mut stream = app
        .sse(&format!("/v1/tickets/{}/events", t["key"].as_str().unwrap()), None)
        .await;
    let created = stream.next_event(WAIT).await.expect("ticket.created");
    let mut db = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
    let ticket_id: uuid::Uuid = t["id"].as_str().unwrap().parse().unwrap();
    let (column_type, stored): (String, String) =
        sqlx::query_as("SELECT pg_typeof(data)::text, data::text FROM events WHERE ticket_id = $1 AND seq = 1")
            .bind(ticket_id)
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(column_type, "json");
    let value: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored, value.to_string(), "kept as written (compact), not reformatted");
    assert_eq!(created.data["data"], value);
    assert_eq!(value["ticket"]["labels"], json!(["b", "a"]));
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_stream_has_the_sse_headers_a_retry_hint_and_pings_every_second() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let stream = app
        .sse(&format!("/v1/tickets/{}/events", t["id"].as_str().unwrap()), None)
        .await;
    assert!(stream.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    assert!(stream.retry_ms().is_some_and(|ms| ms > 0));
    let global = app.sse("/v1/events", None).await;
    assert!(global.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(global.headers["x-accel-buffering"], "no");
    assert!(global.retry_ms().is_some());
    let opened = Instant::now();
    let what = support::Describe(|| {
        format!(
            "two pings on each stream (pings: {} {})",
            stream.pings(),
            global.pings()
        )
    });
    support::eventually(what, Duration::from_secs(30), || async {
        (stream.pings() >= 2 && global.pings() >= 2).then_some(())
    })
    .await;
    assert!(stream.saw_ping(), "no ping on the ticket stream");
    assert!(global.saw_ping(), "no ping on the global stream");
    // A ping a second: the second comes about 2 s after the streams opened, not much later.
    assert!(
        opened.elapsed() < Duration::from_secs(5),
        "two pings took {:?}",
        opened.elapsed()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_stream_resumes_after_last_event_id_or_the_after_parameter_without_repeats() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    for i in 0..4 {
        app.comment(key, &format!("c{i}")).await;
    }
    let path = format!("/v1/tickets/{key}/events");

    let mut by_header = app.sse(&path, Some("2")).await;
    assert_eq!(ids(&by_header.collect_n(3, WAIT).await), ["3", "4", "5"]);
    let mut by_query = app.sse(&format!("{path}?after=4"), None).await;
    assert_eq!(ids(&by_query.collect_n(1, WAIT).await), ["5"]);
    // Last-Event-ID is what a reconnecting EventSource sends; it wins over the query.
    let mut both = app.sse(&format!("{path}?after=1"), Some("3")).await;
    assert_eq!(ids(&both.collect_n(2, WAIT).await), ["4", "5"]);
    // After the latest event only new ones come.
    let mut caught_up = app.sse(&format!("{path}?after=5"), None).await;
    let mut beyond = app.sse(&format!("{path}?after=99"), None).await;
    assert!(caught_up.next_event(Duration::from_millis(300)).await.is_none());

    app.comment(key, "new").await;
    for stream in [&mut by_header, &mut by_query, &mut both, &mut caught_up] {
        let e = stream.next_event(WAIT).await.expect("the live event");
        assert_eq!(e.id.as_deref(), Some("6"));
        assert!(
            stream.next_event(Duration::from_millis(200)).await.is_none(),
            "nothing repeated"
        );
    }
    assert!(beyond.next_event(Duration::from_millis(200)).await.is_none());
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_stream_ends_after_ticket_cancelled_but_not_while_a_reopened_ticket_goes_on() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    let path = format!("/v1/tickets/{key}/events");
    let mut live = app.sse(&path, None).await;
    assert_eq!(kinds(&live.collect_n(1, WAIT).await), ["ticket.created"]);
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    let rest = live
        .wait_end(WAIT)
        .await
        .expect("the stream ends after ticket.cancelled");
    assert_eq!(kinds(&rest), ["ticket.cancelled"]);
    assert!(live.error().is_none(), "ended cleanly: {:?}", live.error());

    // Replaying a cancelled ticket ends as well.
    let mut replay = app.sse(&path, None).await;
    let all = replay.wait_end(WAIT).await.expect("the replay ends");
    assert_eq!(kinds(&all), ["ticket.created", "ticket.cancelled"]);
    let mut resumed = app.sse(&path, Some("2")).await;
    assert_eq!(resumed.wait_end(WAIT).await.map(|e| e.len()), Some(0));

    // Reopened by a comment, its latest event is no longer final: the stream stays open.
    app.comment(key, "again please").await;
    let mut reopened = app.sse(&path, None).await;
    let events = reopened.collect_n(4, WAIT).await;
    assert_eq!(
        kinds(&events),
        [
            "ticket.created",
            "ticket.cancelled",
            "comment.created",
            "ticket.requeued"
        ]
    );
    assert!(reopened.next_event(Duration::from_millis(500)).await.is_none());
    assert!(!reopened.ended());
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    let rest = reopened.wait_end(WAIT).await.expect("ends at the second cancel");
    assert_eq!(ids(&rest), ["5"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_stream_with_a_bad_cursor_is_400_and_for_an_unknown_ticket_404() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let path = format!("/v1/tickets/{}/events", t["key"].as_str().unwrap());
    for after in [
        "abc",
        "-1",
        "+1",
        "1.5",
        "1-2",
        "99999999999999999999",
        "1234567890123456789",
        "null",
    ] {
        assert_error(
            &app.get(&format!("{path}?after={after}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
        let answer = support::send(app.request(reqwest::Method::GET, &path).header("last-event-id", after)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    // A bad `?after=` is 400 even where a good Last-Event-ID wins over it; an empty
    // Last-Event-ID is no header, so `?after=` counts.
    let answer = support::send(
        app.request(reqwest::Method::GET, &format!("{path}?after=x"))
            .header("last-event-id", "1"),
    )
    .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    let answer = support::send(
        app.request(reqwest::Method::GET, &format!("{path}?after=x"))
            .header("last-event-id", ""),
    )
    .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    for reference in ["TICKET-999", "0193a0b2-0000-7000-8000-000000000000", "nonsense"] {
        let answer = app.get(&format!("/v1/tickets/{reference}/events")).await;
        assert_error(&answer, StatusCode::NOT_FOUND, "not_found");
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The global stream

#[tokio::test]
async fn the_global_stream_starts_with_new_events_and_resumes_after_a_cursor() {
    let app = TestApp::spawn().await;
    let old = app.create_ticket(json!({"task": "before"})).await;
    settle(&app).await;
    let mut stream = app.sse("/v1/events", None).await;
    let mut created = vec![];
    for i in 0..3 {
        created.push(app.create_ticket(json!({"task": format!("new {i}")})).await);
    }
    let events = stream.collect_n(3, WAIT).await;
    assert_eq!(kinds(&events), ["ticket.created"; 3]);
    let tickets: Vec<&Value> = events.iter().map(|e| &e.data["ticket_id"]).collect();
    assert_eq!(tickets, created.iter().map(|t| &t["id"]).collect::<Vec<_>>());
    assert!(
        !tickets.contains(&&old["id"]),
        "events from before the connection are not sent"
    );
    assert!(
        events.iter().all(|e| e.id.as_deref().is_some_and(|id| !id.is_empty())),
        "every event has a cursor"
    );
    assert_eq!(ids(&events).into_iter().collect::<HashSet<_>>().len(), 3);
    assert_eq!(stream.last_id(), events[2].id.as_deref());

    let first = events[0].id.clone().unwrap();
    let mut by_header = app.sse("/v1/events", Some(&first)).await;
    let mut by_query = app.sse(&format!("/v1/events?after={first}"), None).await;
    for resumed in [&mut by_header, &mut by_query] {
        let again = resumed.collect_n(2, WAIT).await;
        assert_eq!(ids(&again), ids(&events[1..]));
        assert!(
            resumed.next_event(Duration::from_millis(300)).await.is_none(),
            "nothing repeated"
        );
    }
    // All three go on live.
    let later = app.create_ticket(json!({"task": "later"})).await;
    for s in [&mut stream, &mut by_header, &mut by_query] {
        let e = s.next_event(WAIT).await.expect("the live event");
        assert_eq!(e.data["ticket_id"], later["id"]);
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_global_stream_filters_by_label_and_by_exact_or_wildcard_kind() {
    let app = TestApp::spawn().await;
    let mut all = app.sse("/v1/events", None).await;
    let mut label_x = app.sse("/v1/events?label=x", None).await;
    let mut labels_yz = app.sse("/v1/events?label=z,y", None).await;
    let mut ticket_kinds = app.sse("/v1/events?kind=ticket.*", None).await;
    let mut exact = app.sse("/v1/events?kind=comment.created,ticket.cancelled", None).await;
    let mut nothing = app.sse("/v1/events?kind=tool.started", None).await;

    let t1 = app.create_ticket(json!({"task": "1", "labels": ["x"]})).await;
    app.comment(t1["key"].as_str().unwrap(), "on 1").await;
    let t2 = app.create_ticket(json!({"task": "2", "labels": ["y"]})).await;
    app.comment(t2["key"].as_str().unwrap(), "on 2").await;
    app.post(
        &format!("/v1/tickets/{}/cancel", t2["key"].as_str().unwrap()),
        json!({}),
    )
    .await;
    // The last ticket matches every filter but one, so its cancel closes each collection.
    let t3 = app.create_ticket(json!({"task": "3", "labels": ["x", "y"]})).await;
    app.comment(t3["key"].as_str().unwrap(), "on 3").await;
    app.post(
        &format!("/v1/tickets/{}/cancel", t3["key"].as_str().unwrap()),
        json!({}),
    )
    .await;

    let until_end = |e: &SseEvent| e.data["ticket_id"] == t3["id"] && e.kind() == "ticket.cancelled";
    let summary = |events: &[SseEvent]| {
        events
            .iter()
            .map(|e| {
                let n = [&t1, &t2, &t3]
                    .iter()
                    .position(|t| t["id"] == e.data["ticket_id"])
                    .map_or(0, |i| i + 1);
                format!("{n} {}", e.kind())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        summary(&all.collect_until(until_end, WAIT).await),
        [
            "1 ticket.created",
            "1 comment.created",
            "2 ticket.created",
            "2 comment.created",
            "2 ticket.cancelled",
            "3 ticket.created",
            "3 comment.created",
            "3 ticket.cancelled"
        ]
    );
    assert_eq!(
        summary(&label_x.collect_until(until_end, WAIT).await),
        [
            "1 ticket.created",
            "1 comment.created",
            "3 ticket.created",
            "3 comment.created",
            "3 ticket.cancelled"
        ]
    );
    assert_eq!(
        summary(&labels_yz.collect_until(until_end, WAIT).await),
        [
            "2 ticket.created",
            "2 comment.created",
            "2 ticket.cancelled",
            "3 ticket.created",
            "3 comment.created",
            "3 ticket.cancelled"
        ]
    );
    assert_eq!(
        summary(&ticket_kinds.collect_until(until_end, WAIT).await),
        [
            "1 ticket.created",
            "2 ticket.created",
            "2 ticket.cancelled",
            "3 ticket.created",
            "3 ticket.cancelled"
        ]
    );
    assert_eq!(
        summary(&exact.collect_until(until_end, WAIT).await),
        [
            "1 comment.created",
            "2 comment.created",
            "2 ticket.cancelled",
            "3 comment.created",
            "3 ticket.cancelled"
        ]
    );
    assert!(nothing.next_event(Duration::from_millis(300)).await.is_none());
    app.shutdown().await;
}

/// The cursor `0` replays the whole kept log from its oldest event, then goes on live: how a
/// reader that arrives after the work sees it.
#[tokio::test]
async fn the_global_stream_from_cursor_zero_replays_the_oldest_events_first() {
    let app = TestApp::spawn().await;
    let first = app.create_ticket(json!({"task": "first"})).await;
    let second = app.create_ticket(json!({"task": "second"})).await;
    let mut by_query = app.sse("/v1/events?after=0", None).await;
    let mut by_header = app.sse("/v1/events", Some("0")).await;
    for stream in [&mut by_query, &mut by_header] {
        let events = stream.collect_n(2, WAIT).await;
        assert_eq!(kinds(&events), ["ticket.created"; 2]);
        assert_eq!(events[0].data["ticket_id"], first["id"]);
        assert_eq!(events[1].data["ticket_id"], second["id"]);
    }
    let later = app.create_ticket(json!({"task": "later"})).await;
    for stream in [&mut by_query, &mut by_header] {
        let e = stream.next_event(WAIT).await.expect("the live event");
        assert_eq!(e.data["ticket_id"], later["id"]);
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_global_stream_refuses_a_bad_cursor_with_400() {
    let app = TestApp::spawn().await;
    for cursor in [
        "abc",
        "1",
        "00",
        "-1",
        "1-2-3",
        "1--2",
        "x-1",
        "1-x",
        "+1-2",
        "1-+2",
        "99999999999999999999999-1",
        "1234567890123456789-1",
        "null",
    ] {
        assert_error(
            &app.get(&format!("/v1/events?after={cursor}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
        let answer = support::send(
            app.request(reqwest::Method::GET, "/v1/events")
                .header("last-event-id", cursor),
        )
        .await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Exactly once under concurrent writers

/// Creates tickets and comments until `until`; returns how many requests it made.
async fn write_until(app: Arc<TestApp>, writer: usize, until: Instant) -> usize {
    let mut requests = 0;
    let mut n = 0;
    while Instant::now() < until {
        let t = app
            .create_ticket(json!({"task": format!("writer {writer} ticket {n}"), "labels": [format!("w{writer}")]}))
            .await;
        requests += 1;
        let key = t["key"].as_str().unwrap().to_owned();
        for c in 0..(1 + n % 3) {
            app.comment(&key, &format!("comment {c}")).await;
            requests += 1;
        }
        if n % 4 == 3 {
            app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
            requests += 1;
        }
        n += 1;
    }
    requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reconnecting_with_its_cursor_while_many_tickets_write_receives_every_event_exactly_once() {
    let app = Arc::new(TestApp::spawn().await);
    // Earlier events are not part of what the client must see.
    for i in 0..3 {
        app.create_ticket(json!({"task": format!("old {i}")})).await;
    }
    settle(&app).await;
    let baseline: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM events")
        .fetch_one(&app.pool)
        .await
        .unwrap();

    let seed: u64 = rand::random();
    println!("reconnect seed {seed}");
    let received: Arc<Mutex<Vec<SseEvent>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let first = app.sse("/v1/events", None).await;
    let reader = tokio::spawn({
        let (app, received, stop) = (app.clone(), received.clone(), stop.clone());
        async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut stream = first;
            let mut connections = 1;
            let mut cursor: Option<String> = None;
            loop {
                let mut budget = rng.random_range(3..=7);
                while budget > 0 {
                    let event = tokio::select! {
                        _ = stop.cancelled() => return connections,
                        e = stream.next_event(Duration::from_secs(10)) => e,
                    };
                    let Some(event) = event else {
                        assert!(!stream.ended(), "the global stream ended by itself");
                        continue;
                    };
                    assert!(
                        event.id.is_some(),
                        "a persisted event without a cursor: {:?}",
                        event.data
                    );
                    cursor.clone_from(&event.id);
                    received.lock().unwrap().push(event);
                    budget -= 1;
                }
                drop(stream);
                stream = app.sse("/v1/events", cursor.as_deref()).await;
                connections += 1;
            }
        }
    });

    let until = Instant::now() + Duration::from_secs(4);
    let writers: Vec<_> = (0..6)
        .map(|w| tokio::spawn(write_until(app.clone(), w, until)))
        .collect();
    let mut requests = 0;
    for w in writers {
        requests += w.await.unwrap();
    }
    let expected: Vec<(String, i64)> =
        sqlx::query_as("SELECT ticket_id::text, seq FROM events WHERE id > $1 ORDER BY id")
            .bind(baseline)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert!(
        expected.len() >= 200,
        "only {} events were written ({requests} requests)",
        expected.len()
    );

    // Drain: wait until the client has as many events as the log holds, then until it has the
    // event of a ticket created after all of them: a stream sends in log order, so any repeat of
    // an earlier event would have come before it.
    let what = support::Describe(|| format!("{} of {} events", received.lock().unwrap().len(), expected.len()));
    support::eventually(what, Duration::from_secs(30), || async {
        (received.lock().unwrap().len() >= expected.len()).then_some(())
    })
    .await;
    let marker = app.create_ticket(json!({"task": "after every writer"})).await;
    let marker = marker["id"].as_str().unwrap();
    support::eventually(
        "the event of a ticket created last",
        Duration::from_secs(30),
        || async {
            let received = received.lock().unwrap();
            received.iter().any(|e| e.ticket_id() == marker).then_some(())
        },
    )
    .await;
    stop.cancel();
    let connections = reader.await.unwrap();
    let received: Vec<SseEvent> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.ticket_id() != marker)
        .cloned()
        .collect();

    let got: Vec<(String, i64)> = received
        .iter()
        .map(|e| (e.ticket_id().to_owned(), e.seq().expect("a seq")))
        .collect();
    let mut seen = HashSet::new();
    let repeats: Vec<&(String, i64)> = got.iter().filter(|k| !seen.insert((*k).clone())).collect();
    assert!(repeats.is_empty(), "repeated events: {repeats:?}");
    let expected_set: HashSet<(String, i64)> = expected.iter().cloned().collect();
    let missing: Vec<&(String, i64)> = expected.iter().filter(|k| !seen.contains(*k)).collect();
    let extra: Vec<&(String, i64)> = got.iter().filter(|k| !expected_set.contains(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} missing (first {:?}), {} extra (first {:?}); {} received over {connections} connections, seed {seed}",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first(),
        got.len()
    );
    // Each ticket's events arrive in seq order, from its first.
    let mut last_seq: HashMap<&str, i64> = HashMap::new();
    for (ticket, seq) in &got {
        let last = last_seq.entry(ticket.as_str()).or_insert(0);
        assert_eq!(*seq, *last + 1, "ticket {ticket}: seq {seq} after {last}");
        *last = *seq;
    }
    assert!(connections > 20, "the client reconnected only {connections} times");
    println!("{} events, {requests} requests, {connections} connections", got.len());
    Arc::try_unwrap(app)
        .ok()
        .expect("no other owner of the app")
        .shutdown()
        .await;
}

// ---------------------------------------------------------------------------------------------
// Shutdown

#[tokio::test]
async fn shutdown_ends_open_streams_within_five_seconds() {
    let app = TestApp::spawn().await;
    let a = app.create_ticket(json!({"task": "a"})).await;
    let b = app.create_ticket(json!({"task": "b"})).await;
    let mut streams: Vec<SseClient> = vec![
        app.sse("/v1/events", None).await,
        app.sse(&format!("/v1/tickets/{}/events", a["key"].as_str().unwrap()), None)
            .await,
        app.sse(
            &format!("/v1/tickets/{}/events?after=1", b["id"].as_str().unwrap()),
            None,
        )
        .await,
    ];
    assert_eq!(streams[1].collect_n(1, WAIT).await.len(), 1);

    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), app.shutdown())
        .await
        .expect("shutdown took over 5 s");
    assert!(started.elapsed() < Duration::from_secs(5));
    for (i, stream) in streams.iter_mut().enumerate() {
        assert!(
            stream.wait_end(Duration::from_secs(2)).await.is_some(),
            "stream {i} is still open"
        );
    }
}

#[tokio::test]
async fn a_long_transaction_in_another_database_does_not_hold_the_global_stream_back() {
    let app = TestApp::spawn().await;
    // A writing transaction elsewhere on the same server, left open.
    let other = testkit::testing::with_database(&app.database_url, "postgres");
    let mut elsewhere = open_writing_transaction(&other).await;

    let mut stream = app.sse("/v1/events", None).await;
    let ticket = app.create_ticket(json!({ "task": "still streams" })).await;
    let event = stream
        .collect_until(|e| e.kind() == "ticket.created", Duration::from_secs(3))
        .await;
    assert!(
        event.iter().any(|e| e.data["ticket_id"] == ticket["id"]),
        "the event arrived while the other database's transaction stayed open"
    );
    sqlx::query("ROLLBACK").execute(&mut elsewhere).await.unwrap();
    app.shutdown().await;
}

#[tokio::test]
async fn events_held_back_by_an_older_transaction_arrive_promptly_once_it_rolls_back_without_a_notify() {
    let app = TestApp::spawn().await;
    let mut stream = app.sse("/v1/events", None).await;
    settle(&app).await;

    // The hub reads at the create's wake-up and then, without a look-again, only at its 500 ms
    // fallback poll: the 100 + 200 ms below end before that poll.
    for round in 0..3 {
        // An older writing transaction of the same database: every event after it waits behind it.
        let mut older = open_writing_transaction(&app.database_url).await;

        let ticket = app
            .create_ticket(json!({ "task": format!("waits behind an older transaction {round}") }))
            .await;
        let early = stream
            .collect_until(|e| e.kind() == "ticket.created", Duration::from_millis(300))
            .await;
        assert!(
            early.is_empty(),
            "held back while the older transaction may still write: {early:?}"
        );

        // A rollback sends no NOTIFY: only the hub's look-again (every 10 ms while events are held
        // back) finds the event this soon.
        sqlx::query("ROLLBACK").execute(&mut older).await.unwrap();
        let late = stream
            .collect_until(|e| e.kind() == "ticket.created", Duration::from_millis(200))
            .await;
        assert!(
            late.iter().any(|e| e.data["ticket_id"] == ticket["id"]),
            "round {round}: the held-back event arrived within 200 ms of the rollback: {late:?}"
        );
    }
    app.shutdown().await;
}

/// A page of the global stream stops before a transaction of this database that is running in
/// its snapshot, whenever `pg_stat_activity` was looked at: here the reader's transaction looked
/// before that transaction began (Postgres keeps a transaction's first look), so the list does
/// not show it. It holds the page back until it ends, and then the event is read.
#[tokio::test]
async fn a_page_of_the_global_stream_never_passes_a_running_transaction_of_this_database() {
    use agentdesk::db::events::{read_global_page, GlobalCursor};
    let app = TestApp::spawn().await;
    let mut reader = sqlx::postgres::PgConnection::connect(&app.database_url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut reader).await.unwrap();
    sqlx::query("SELECT count(*) FROM pg_stat_activity")
        .execute(&mut reader)
        .await
        .unwrap();
    let mut older = open_writing_transaction(&app.database_url).await;
    let ticket = app
        .create_ticket(json!({"task": "committed behind an older transaction"}))
        .await;

    let page = read_global_page(&mut reader, GlobalCursor::default(), 100)
        .await
        .unwrap();
    assert!(page.events.is_empty(), "read past a running transaction: {page:?}");
    assert!(page.held_back, "the event waits behind the older transaction");

    sqlx::query("ROLLBACK").execute(&mut older).await.unwrap();
    // The desk's own transactions (its worker claims the ticket, its background services run)
    // may hold the page back a moment longer: read until nothing does.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = read_global_page(&mut reader, GlobalCursor::default(), 100)
            .await
            .unwrap();
        if !page.held_back || tokio::time::Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !page.held_back,
        "still held back 10 s after the older transaction ended"
    );
    let first = page.events.first().expect("the ticket's event was read");
    assert_eq!(
        (
            first.event.kind.as_str(),
            first.event.ticket_id.unwrap_or_default().to_string()
        ),
        ("ticket.created", ticket["id"].as_str().unwrap().to_string()),
        "{page:?}"
    );
    sqlx::query("COMMIT").execute(&mut reader).await.unwrap();
    app.shutdown().await;
}

#[tokio::test]
async fn a_global_stream_opened_without_a_cursor_tells_its_position_first() {
    let app = TestApp::spawn().await;
    app.create_ticket(json!({"task": "before"})).await;
    settle(&app).await;
    // The frames before any event: the retry hint, then the position as an `id:` alone.
    let mut response = app
        .client
        .get(app.endpoint("/v1/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    let position = loop {
        let chunk = tokio::time::timeout(WAIT, response.chunk())
            .await
            .expect("the stream's first frames")
            .unwrap()
            .expect("the stream is open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        let frames: Vec<&str> = text.split("\n\n").collect();
        if let Some(frame) = frames.iter().find(|f| f.starts_with("id: ")) {
            assert!(!frame.contains("data:"), "a position, not an event: {frame:?}");
            break frame.trim_start_matches("id: ").trim().to_owned();
        }
    };
    // Cut before any event: resuming from the position gets what was written since, and nothing
    // from before.
    drop(response);
    let created = app.create_ticket(json!({"task": "after the cut"})).await;
    let mut resumed = app.sse("/v1/events", Some(&position)).await;
    let events = resumed.collect_n(1, WAIT).await;
    assert_eq!(kinds(&events), ["ticket.created"]);
    assert_eq!(events[0].data["ticket_id"], created["id"]);
    assert!(resumed.next_event(Duration::from_millis(300)).await.is_none());
}
