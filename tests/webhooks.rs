//! Webhooks against a real receiver on loopback: the endpoints' API, Standard Webhooks signatures
//! checked by an independent HMAC, filters, retries and their timing, `Retry-After`, 410, a hanging
//! receiver, ordering, a crash mid-delivery, several processes, and the address guard.

#[path = "webhooks/receiver.rs"]
mod receiver;
mod support;

use std::collections::HashSet;
use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::config::Config;
use receiver::{verify, Answer, Received, Receiver};
use serde_json::{json, Value};
use support::postgres::{as_postgres_user, pg_bindir};
use support::{assert_error, eventually, StatusCode, TestApp};

const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Workers that claim nothing (tickets stay `todo`, so the events are the test's own), deliveries
/// on, loopback allowed, short retries.
fn fast(c: &mut Config) {
    c.workers = 0;
    c.allow_private_urls = true;
    c.webhook_retry = vec![Duration::from_millis(300), Duration::from_millis(600)];
    c.webhook_timeout = Duration::from_secs(2);
    c.webhook_lease = Duration::from_secs(3);
}

async fn spawn(configure: impl FnOnce(&mut Config)) -> TestApp {
    TestApp::spawn_mode(Mode::Serve, |c| {
        fast(c);
        configure(c);
    })
    .await
}

async fn create_hook(app: &TestApp, body: Value) -> Value {
    let (status, hook) = app.post("/v1/webhooks", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "creating {body}: {hook}");
    hook
}

async fn ticket(app: &TestApp, labels: &[&str]) -> Value {
    app.create_ticket(json!({ "task": "something to do", "labels": labels }))
        .await
}

async fn deliveries(app: &TestApp, hook: &Value) -> Vec<Value> {
    app.list_all(&format!("/v1/webhooks/{}/deliveries", hook["id"].as_str().unwrap()))
        .await
}

/// Waits until the endpoint's log has `n` entries.
async fn wait_deliveries(app: &TestApp, hook: &Value, n: usize) -> Vec<Value> {
    eventually(
        format!("{n} entries in the delivery log"),
        Duration::from_secs(15),
        || async {
            let log = deliveries(app, hook).await;
            (log.len() >= n).then_some(log)
        },
    )
    .await
}

/// Waits until `receiver` got the `kind` event of ticket `key`, and returns all it got. An
/// endpoint is sent its events in the log's order: every event before that one has been sent or
/// passed over by then.
async fn wait_for_event(receiver: &Receiver, key: &Value, kind: &str) -> Vec<Received> {
    eventually(
        format!("the {kind} event of {key}"),
        Duration::from_secs(30),
        || async {
            let got = receiver.received();
            got.iter()
                .any(|r| r.json()["data"]["ticket_key"] == *key && r.kind() == kind)
                .then_some(got)
        },
    )
    .await
}

#[tokio::test]
async fn endpoints_are_created_listed_changed_and_deleted() {
    let app = TestApp::spawn().await;
    let hook = create_hook(
        &app,
        json!({"url": "https://example.com/hook", "events": ["ticket.done", "tool.*"], "labels": ["red"],
               "description": "mine"}),
    )
    .await;
    let secret = hook["secret"].as_str().unwrap();
    let key = secret.strip_prefix("whsec_").expect("a whsec_ secret");
    use base64::Engine;
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(key).unwrap().len(), 32);
    assert_eq!(hook["events"], json!(["ticket.done", "tool.*"]));
    assert_eq!(
        (hook["disabled"].clone(), hook["description"].clone()),
        (json!(false), json!("mine"))
    );
    let id = hook["id"].as_str().unwrap();

    // The secret is shown only once.
    let (status, got) = app.get(&format!("/v1/webhooks/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(got.get("secret").is_none(), "{got}");
    assert_eq!(got["url"], "https://example.com/hook");

    let given = create_hook(&app, json!({"url": "http://example.com/2", "secret": SPEC_SECRET})).await;
    assert_eq!(given["secret"], SPEC_SECRET);
    assert_eq!(given["events"], json!([]));
    let stopped = create_hook(&app, json!({"url": "http://example.com/3", "disabled": true})).await;
    assert_eq!(stopped["disabled"], true, "created stopped");
    let (_, page) = app.get("/v1/webhooks?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert!(page["next_cursor"].is_string());
    let all = app.list_all("/v1/webhooks?limit=2").await;
    let urls: Vec<&str> = all.iter().map(|h| h["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        [
            "https://example.com/hook",
            "http://example.com/2",
            "http://example.com/3"
        ]
    );

    let (status, patched) = app
        .patch(
            &format!("/v1/webhooks/{id}"),
            json!({"disabled": true, "description": null, "events": [], "url": "https://example.org/h"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["disabled"], true);
    assert_eq!(patched["description"], Value::Null);
    assert_eq!(patched["events"], json!([]));
    assert_eq!(patched["labels"], json!(["red"]));
    assert_eq!(patched["url"], "https://example.org/h");

    for bad in [
        json!({"url": "not a url"}),
        json!({"url": "ftp://example.com/x"}),
        json!({"url": "https://example.com", "events": ["Ticket.Done"]}),
        json!({"url": "https://example.com", "events": ["ti*ck"]}),
        json!({"url": "https://example.com", "labels": [""]}),
        json!({"url": "https://example.com", "secret": "hunter2"}),
        json!({"url": "https://example.com", "secret": "whsec_c2hvcnQ="}),
        json!({"events": ["ticket.done"]}),
    ] {
        assert_error(
            &app.post("/v1/webhooks", bad.clone()).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
    }
    for body in [json!({"events": ["*x"]}), json!({"secret": "whsec_c2hvcnQ="})] {
        let bad_patch = app.patch(&format!("/v1/webhooks/{id}"), body).await;
        assert_error(&bad_patch, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let missing = "0193a0a0-0000-7000-8000-000000000000";
    for path in [format!("/v1/webhooks/{missing}"), "/v1/webhooks/nope".into()] {
        assert_error(&app.get(&path).await, StatusCode::NOT_FOUND, "not_found");
        assert_error(
            &app.get(&format!("{path}/deliveries")).await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        assert_error(
            &app.post(&format!("{path}/test"), json!({})).await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
    }
    assert_error(
        &app.get(&format!("/v1/webhooks/{id}/deliveries?cursor=zz")).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );

    let (status, _) = app.delete(&format!("/v1/webhooks/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_error(
        &app.get(&format!("/v1/webhooks/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.delete(&format!("/v1/webhooks/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    app.shutdown().await;
}

#[tokio::test]
async fn events_are_delivered_signed_as_standard_webhooks() {
    // The independent check agrees with the spec's test vector.
    assert!(verify(
        SPEC_SECRET,
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "1614265330",
        br#"{"test": 2432232314}"#,
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    ));
    let receiver = Receiver::start(vec![]).await;
    let app = spawn(|_| {}).await;
    let hook = create_hook(&app, json!({"url": receiver.url, "secret": SPEC_SECRET})).await;
    let t = ticket(&app, &[]).await;
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "one delivery");
    let r = &got[0];
    assert!(verify(SPEC_SECRET, &r.id, &r.timestamp, &r.body, &r.signature), "{r:?}");
    assert!(r.id.starts_with("msg_"));
    let sent_at: i64 = r.timestamp.parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - sent_at).abs() < 10);

    // The data is the event as the ticket's stream sends it.
    let mut stream = app
        .sse(&format!("/v1/tickets/{}/events", t["key"].as_str().unwrap()), None)
        .await;
    let streamed = stream
        .next_event(Duration::from_secs(5))
        .await
        .expect("the created event");
    let body = r.json();
    assert_eq!(body["type"], "ticket.created");
    assert_eq!(body["data"], streamed.data);
    assert_eq!(body["timestamp"], streamed.data["at"]);

    let log = wait_deliveries(&app, &hook, 1).await;
    assert_eq!(log[0]["event_id"], r.id.as_str());
    assert_eq!(
        (log[0]["attempt"].clone(), log[0]["status_code"].clone()),
        (json!(1), json!(200))
    );
    assert_eq!(log[0]["error"], Value::Null);
    assert!(log[0]["duration_ms"].is_i64() && log[0]["at"].is_string());

    // The test event: sent at once, signed alike, logged.
    let (status, test) = app
        .post(
            &format!("/v1/webhooks/{}/test", hook["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{test}");
    assert_eq!(
        (test["status_code"].clone(), test["error"].clone()),
        (json!(200), Value::Null)
    );
    let got = receiver.wait_for(2, Duration::from_secs(5)).await;
    let r = &got[1];
    assert_eq!(r.kind(), "webhook.test");
    assert_eq!(r.id, test["event_id"].as_str().unwrap());
    assert!(verify(SPEC_SECRET, &r.id, &r.timestamp, &r.body, &r.signature));
    assert_eq!(deliveries(&app, &hook).await[0]["event_id"], test["event_id"]);
    app.shutdown().await;
}

#[tokio::test]
async fn endpoints_receive_the_kinds_and_labels_they_ask_for() {
    let (cancelled, blue, red_tickets) = (
        Receiver::start(vec![]).await,
        Receiver::start(vec![]).await,
        Receiver::start(vec![]).await,
    );
    let app = spawn(|_| {}).await;
    create_hook(&app, json!({"url": cancelled.url, "events": ["ticket.cancelled"]})).await;
    create_hook(&app, json!({"url": blue.url, "labels": ["blue"]})).await;
    create_hook(
        &app,
        json!({"url": red_tickets.url, "events": ["ticket.*"], "labels": ["red"]}),
    )
    .await;
    let red = ticket(&app, &["red"]).await;
    let blue_ticket = ticket(&app, &["blue", "green"]).await;
    for t in [&red, &blue_ticket] {
        let key = t["key"].as_str().unwrap();
        app.comment(key, "a note").await;
        let (status, _) = app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let seen = |r: &Receiver| {
        r.received()
            .iter()
            .map(|r| (r.json()["data"]["ticket_key"].as_str().unwrap().to_owned(), r.kind()))
            .collect::<Vec<_>>()
    };
    let (red_key, blue_key) = (red["key"].as_str().unwrap(), blue_ticket["key"].as_str().unwrap());
    cancelled.wait_for(2, Duration::from_secs(10)).await;
    blue.wait_for(3, Duration::from_secs(10)).await;
    red_tickets.wait_for(2, Duration::from_secs(10)).await;
    // A ticket that every endpoint takes, cancelled last: once each endpoint got its cancel, it
    // has been sent or passed over every event before it.
    let marker = ticket(&app, &["red", "blue"]).await;
    let marker_key = marker["key"].as_str().unwrap();
    let (status, _) = app.post(&format!("/v1/tickets/{marker_key}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    for receiver in [&cancelled, &blue, &red_tickets] {
        wait_for_event(receiver, &marker["key"], "ticket.cancelled").await;
    }
    let seen = |r: &Receiver| {
        let mut seen = seen(r);
        seen.retain(|(key, _)| key != marker_key);
        seen
    };
    let pair = |k: &str, kind: &str| (k.to_owned(), kind.to_owned());
    assert_eq!(
        seen(&cancelled),
        [pair(red_key, "ticket.cancelled"), pair(blue_key, "ticket.cancelled")]
    );
    assert_eq!(
        seen(&blue),
        [
            pair(blue_key, "ticket.created"),
            pair(blue_key, "comment.created"),
            pair(blue_key, "ticket.cancelled")
        ]
    );
    assert_eq!(
        seen(&red_tickets),
        [pair(red_key, "ticket.created"), pair(red_key, "ticket.cancelled")]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn failures_are_retried_on_schedule_with_the_same_webhook_id_then_given_up() {
    let receiver = Receiver::start(vec![
        Answer::Status(500),
        Answer::Status(302),
        Answer::Status(200),
        Answer::Status(500),
        Answer::Status(503),
        Answer::Status(500),
    ])
    .await;
    let app = spawn(|_| {}).await;
    let hook = create_hook(&app, json!({"url": receiver.url})).await;
    ticket(&app, &[]).await;
    let got = receiver.wait_for(3, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|r| r.id == got[0].id),
        "one webhook-id for every attempt"
    );
    let (first_gap, second_gap) = (got[1].at - got[0].at, got[2].at - got[1].at);
    assert!(
        first_gap >= Duration::from_millis(300) && first_gap < Duration::from_millis(1300),
        "{first_gap:?}"
    );
    assert!(
        second_gap >= Duration::from_millis(600) && second_gap < Duration::from_millis(1600),
        "{second_gap:?}"
    );
    let log = wait_deliveries(&app, &hook, 3).await;
    let summary: Vec<(Value, Value, Value)> = log
        .iter()
        .map(|d| (d["attempt"].clone(), d["status_code"].clone(), d["error"].clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (json!(3), json!(200), Value::Null),
            (json!(2), json!(302), json!("status 302")),
            (json!(1), json!(500), json!("status 500")),
        ],
        "a redirect is a failure"
    );

    // Three failures of the next event exhaust the schedule: it is given up, the one after comes.
    ticket(&app, &[]).await;
    ticket(&app, &[]).await;
    let got = receiver.wait_for(7, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 7);
    assert!(got[3..6].iter().all(|r| r.id == got[3].id));
    assert_ne!(got[6].id, got[3].id);
    let log = wait_deliveries(&app, &hook, 7).await;
    assert_eq!(
        (log[0]["attempt"].clone(), log[0]["status_code"].clone()),
        (json!(1), json!(200))
    );
    assert_eq!(
        (log[1]["attempt"].clone(), log[1]["error"].clone()),
        (json!(3), json!("status 500"))
    );
    app.shutdown().await;
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let receiver = Receiver::start(vec![Answer::RetryAfter(429, "2")]).await;
    let app = spawn(|c| c.webhook_retry = vec![Duration::from_millis(100)]).await;
    create_hook(&app, json!({"url": receiver.url})).await;
    ticket(&app, &[]).await;
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2);
    let gap = got[1].at - got[0].at;
    assert!(gap >= Duration::from_secs(2) && gap < Duration::from_secs(3), "{gap:?}");
    assert_eq!(got[0].id, got[1].id);
    app.shutdown().await;
}

#[tokio::test]
async fn gone_disables_the_endpoint_until_it_is_enabled_again() {
    let receiver = Receiver::start(vec![Answer::Status(410)]).await;
    let app = spawn(|_| {}).await;
    let hook = create_hook(&app, json!({"url": receiver.url})).await;
    // An endpoint beside it that takes every event: what it was sent, the other would have been.
    let control = Receiver::start(vec![]).await;
    create_hook(&app, json!({"url": control.url})).await;
    let path = format!("/v1/webhooks/{}", hook["id"].as_str().unwrap());
    ticket(&app, &[]).await;
    receiver.wait_for(1, Duration::from_secs(10)).await;
    let disabled = eventually("the endpoint to be disabled", Duration::from_secs(30), || async {
        let (_, got) = app.get(&path).await;
        (got["disabled"] == true).then_some(got)
    })
    .await;
    assert_eq!(
        (disabled["disabled"].clone(), disabled["disabled_reason"].clone()),
        (json!(true), json!("gone"))
    );
    let meanwhile = ticket(&app, &[]).await;
    wait_for_event(&control, &meanwhile["key"], "ticket.created").await;
    assert_eq!(receiver.received().len(), 1, "a disabled endpoint receives nothing");

    let (status, enabled) = app.patch(&path, json!({"disabled": false})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (enabled["disabled"].clone(), enabled["disabled_reason"].clone()),
        (json!(false), Value::Null)
    );
    let after = ticket(&app, &[]).await;
    // In the log's order, an event of the disabled time would come before this one.
    let got = wait_for_event(&receiver, &after["key"], "ticket.created").await;
    assert_eq!(got.len(), 2, "events of the disabled time are not sent");
    assert_eq!(got[1].json()["data"]["ticket_key"], after["key"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_hanging_receiver_does_not_delay_another_endpoint() {
    let (hanging, healthy) = (Receiver::start(vec![Answer::Hang]).await, Receiver::start(vec![]).await);
    let app = spawn(|c| c.webhook_timeout = Duration::from_secs(20)).await;
    let stuck = create_hook(&app, json!({"url": hanging.url})).await;
    create_hook(&app, json!({"url": healthy.url})).await;
    for n in 1..=3 {
        ticket(&app, &[]).await;
        assert_eq!(healthy.wait_for(n, Duration::from_secs(5)).await.len(), n);
    }
    // The hanging endpoint got its first event and waits for its answer; the others wait behind it.
    assert_eq!(hanging.received().len(), 1);
    assert!(deliveries(&app, &stuck).await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_timeout_is_a_failure() {
    let receiver = Receiver::start(vec![Answer::Hang]).await;
    let app = spawn(|c| c.webhook_timeout = Duration::from_secs(1)).await;
    let hook = create_hook(&app, json!({"url": receiver.url})).await;
    ticket(&app, &[]).await;
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2);
    assert!(got[1].at - got[0].at >= Duration::from_millis(1300));
    let log = wait_deliveries(&app, &hook, 2).await;
    assert_eq!(log[1]["error"], "timeout");
    assert_eq!(log[1]["status_code"], Value::Null);
    app.shutdown().await;
}

#[tokio::test]
async fn an_endpoint_receives_its_events_in_order_even_through_retries() {
    let mut script = vec![Answer::Status(200); 3];
    script.push(Answer::Status(500));
    let receiver = Receiver::start(script).await;
    let app = spawn(|_| {}).await;
    let hook = create_hook(&app, json!({"url": receiver.url, "events": ["ticket.created"]})).await;
    let mut stream = app.sse("/v1/events?kind=ticket.created", None).await;
    let creates = (0..12).map(|_| ticket(&app, &[]));
    futures::future::join_all(creates).await;
    let order: Vec<Value> = stream
        .collect_n(12, Duration::from_secs(10))
        .await
        .iter()
        .map(|e| e.data["ticket_id"].clone())
        .collect();
    let got = receiver.wait_for(13, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 13);
    // The fourth failed once; its retry came before the fifth.
    assert_eq!(got[3].id, got[4].id);
    let mut delivered: Vec<Value> = got.iter().map(|r| r.json()["data"]["ticket_id"].clone()).collect();
    delivered.remove(3);
    assert_eq!(delivered, order, "the global stream's order");
    // The log holds every attempt, newest first, however they were grouped when written.
    let log = wait_deliveries(&app, &hook, 13).await;
    let logged: Vec<&str> = log.iter().rev().map(|d| d["event_id"].as_str().unwrap()).collect();
    let sent: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(logged, sent);
    app.shutdown().await;
}

#[tokio::test]
async fn several_processes_deliver_each_event_once() {
    let receiver = Receiver::start(vec![]).await;
    let first = spawn(|_| {}).await;
    let database = first.database_url.clone();
    let second = spawn(move |c| c.database_url = Some(database)).await;
    create_hook(&first, json!({"url": receiver.url})).await;
    for n in 0..10 {
        let app = if n % 2 == 0 { &first } else { &second };
        ticket(app, &[]).await;
    }
    receiver.wait_for(10, Duration::from_secs(10)).await;
    // A ticket created last: once it was delivered, every event before it had been (a second
    // sender of the endpoint would be sending the same events beside the first).
    let last = ticket(&second, &[]).await;
    let got = wait_for_event(&receiver, &last["key"], "ticket.created").await;
    let ids: Vec<String> = got.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids.len(), 11, "{ids:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 11);
    second.shutdown().await;
    first.shutdown().await;
}

/// A process killed mid-delivery (its tasks dropped where they stood, its lease left behind): a
/// new process on the same database sends the event again, with the same `webhook-id`.
#[test]
fn a_delivery_interrupted_by_a_crash_is_sent_again_with_the_same_id() {
    let main = tokio::runtime::Runtime::new().unwrap();
    let doomed = tokio::runtime::Runtime::new().unwrap();
    let receiver = main.block_on(Receiver::start(vec![Answer::Hang]));
    let crashed = doomed.block_on(spawn(|_| {}));
    let database = crashed.database_url.clone();
    let first = doomed.block_on(async {
        create_hook(&crashed, json!({"url": receiver.url, "secret": SPEC_SECRET})).await;
        ticket(&crashed, &[]).await;
        receiver.wait_for(1, Duration::from_secs(10)).await
    });
    assert_eq!(first.len(), 1);
    // No graceful shutdown: nothing is released or written.
    std::mem::forget(crashed);
    doomed.shutdown_background();

    main.block_on(async {
        let app = spawn(move |c| c.database_url = Some(database)).await;
        let got = receiver.wait_for(2, Duration::from_secs(15)).await;
        assert_eq!(got.len(), 2, "sent again after the crash");
        assert_eq!(got[1].id, got[0].id);
        assert_eq!(got[1].body, got[0].body);
        assert!(verify(
            SPEC_SECRET,
            &got[1].id,
            &got[1].timestamp,
            &got[1].body,
            &got[1].signature
        ));
        let (_, hooks) = app.get("/v1/webhooks").await;
        let log = wait_deliveries(&app, &hooks["items"][0], 1).await;
        assert_eq!(
            (log[0]["event_id"].as_str(), log[0]["status_code"].clone()),
            (Some(got[0].id.as_str()), json!(200))
        );
        app.shutdown().await;
    });
}

#[tokio::test]
async fn the_address_guard_refuses_inward_addresses() {
    let receiver = Receiver::start(vec![]).await;
    let app = spawn(|c| c.allow_private_urls = false).await;
    // Checked where the connection is made, for an address literal and for a name that
    // resolves inward (`localhost`) alike: the delivery fails, and says why.
    let by_name = receiver.url.replace("127.0.0.1", "localhost");
    let hooks = [
        create_hook(&app, json!({"url": receiver.url})).await,
        create_hook(&app, json!({"url": by_name})).await,
    ];
    ticket(&app, &[]).await;
    for hook in &hooks {
        let log = wait_deliveries(&app, hook, 1).await;
        assert_eq!(log[0]["error"], "forbidden_address");
        assert_eq!(log[0]["status_code"], Value::Null);
        let (_, test) = app
            .post(
                &format!("/v1/webhooks/{}/test", hook["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(test["error"], "forbidden_address");
    }
    assert!(receiver.received().is_empty(), "nothing reached the receiver");
    app.shutdown().await;
}

/// Postgres restarts (every connection dropped) while an attempt is in flight: the delivery is
/// recorded, or sent again with the same `webhook-id`; later events flow as before.
#[tokio::test]
async fn a_postgres_restart_mid_delivery_is_survived() {
    let dir = std::env::temp_dir().join(format!("agentdesk-webhook-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = agentdesk::embedded_pg::EmbeddedPostgres::start(&dir.join("pgdata"))
        .await
        .unwrap();
    let receiver = Receiver::start(vec![Answer::Slow(Duration::from_secs(2))]).await;
    let url = pg.url();
    let app = spawn(|c| c.database_url = Some(url)).await;
    let hook = create_hook(&app, json!({"url": receiver.url})).await;
    ticket(&app, &[]).await;
    assert_eq!(receiver.wait_for(1, Duration::from_secs(10)).await.len(), 1);
    let pg_ctl = std::path::Path::new(&pg_bindir()).join("pg_ctl");
    let status = as_postgres_user(
        std::process::Command::new(&pg_ctl)
            .arg("-D")
            .arg(pg.data_dir())
            .args(["restart", "-m", "fast", "-w", "-l"])
            .arg(std::env::temp_dir().join(format!("agentdesk-webhook-pg-{}.log", std::process::id()))),
    )
    .status()
    .unwrap();
    assert!(status.success(), "pg_ctl restart failed");

    let later = ticket(&app, &[]).await;
    let got = wait_for_event(&receiver, &later["key"], "ticket.created").await;
    let last = got.last().expect("deliveries");
    assert_eq!(last.json()["data"]["ticket_key"], later["key"], "{got:?}");
    assert!(
        got[..got.len() - 1].iter().all(|r| r.id == got[0].id),
        "only the first event before the later one"
    );
    let log = wait_deliveries(&app, &hook, 2).await;
    assert!(
        log.iter()
            .any(|d| d["event_id"] == got[0].id.as_str() && d["status_code"] == 200),
        "{log:?}"
    );
    app.shutdown().await;
    let _ = as_postgres_user(std::process::Command::new(&pg_ctl).arg("-D").arg(pg.data_dir()).args([
        "stop",
        "-m",
        "immediate",
    ]))
    .status();
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}
