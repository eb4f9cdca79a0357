//! Schedules over the API and with the real scheduler loop: the shapes and errors of
//! `/v1/schedules`, "run now" with the template and metadata, and seconds-level schedules fired by
//! the loop (on time, exactly once, `overlap`, `catch_up`). The rules of fire times themselves are
//! tested without a clock in `src/domain/schedule_tests.rs`; two processes of the real binary are
//! in `tests/schedules_processes.rs`.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use agentdesk::app::Mode;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use support::{assert_error, eventually, StatusCode, TestApp};

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("a time: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

async fn create(app: &TestApp, body: Value) -> Value {
    let (status, schedule) = app.post("/v1/schedules", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "creating {body}: {schedule}");
    schedule
}

/// The tickets a schedule made, oldest first.
async fn tickets_of(app: &TestApp, schedule: &str) -> Vec<Value> {
    let mut items = app
        .list_all(&format!("/v1/schedules/{schedule}/tickets?limit=200"))
        .await;
    items.reverse();
    items
}

#[tokio::test]
async fn a_schedule_is_created_read_listed_edited_and_deleted() {
    let app = TestApp::spawn().await;
    let s = create(
        &app,
        json!({"name": "daily-digest", "cron": "0 9 * * mon-fri", "timezone": "Europe/Berlin",
               "ticket": {"task": "digest {scheduled_for}", "labels": ["digest"]}}),
    )
    .await;
    assert_eq!(s["name"], "daily-digest");
    assert_eq!(s["timezone"], "Europe/Berlin");
    assert_eq!(s["enabled"], true);
    assert_eq!(s["overlap"], "skip");
    assert_eq!(s["catch_up"], "skip");
    assert_eq!(s["catch_up_window_secs"], 3600);
    assert_eq!(s["last_run_at"], Value::Null);
    assert_eq!(s["last_ticket"], Value::Null);
    assert_eq!(s["ticket"]["max_attempts"], 3);
    assert_eq!(s["ticket"]["metadata"], json!({}));
    let upcoming: Vec<DateTime<Utc>> = s["upcoming"].as_array().unwrap().iter().map(time).collect();
    assert_eq!(upcoming.len(), 5);
    assert_eq!(upcoming[0], time(&s["next_run_at"]));
    assert!(upcoming.windows(2).all(|w| w[0] < w[1]));
    for t in &upcoming {
        let local = t.with_timezone(&chrono_tz::Europe::Berlin);
        assert_eq!(local.format("%H:%M:%S").to_string(), "09:00:00", "{t}");
        assert!(!matches!(
            chrono::Datelike::weekday(&local),
            chrono::Weekday::Sat | chrono::Weekday::Sun
        ));
    }
    // By id and by name.
    let id = s["id"].as_str().unwrap();
    assert_eq!(app.get(&format!("/v1/schedules/{id}")).await.1["name"], "daily-digest");
    assert_eq!(app.get("/v1/schedules/daily-digest").await.1["id"], id);
    assert_error(&app.get("/v1/schedules/nope").await, StatusCode::NOT_FOUND, "not_found");

    // A defaulted one: UTC, no name.
    let other = create(&app, json!({"cron": "*/5 * * * * *", "ticket": {"task": "t"}})).await;
    assert_eq!(other["timezone"], "UTC");
    assert_eq!(other["name"], Value::Null);
    let (_, page) = app.get("/v1/schedules?limit=1").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["next_cursor"].is_string());
    assert_eq!(app.list_all("/v1/schedules?limit=1").await.len(), 2);

    // Pause: no next run; resume: from now.
    let (status, paused) = app.patch("/v1/schedules/daily-digest", json!({"enabled": false})).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["next_run_at"], Value::Null);
    assert_eq!(paused["upcoming"], json!([]));
    let (_, resumed) = app.patch("/v1/schedules/daily-digest", json!({"enabled": true})).await;
    assert_eq!(resumed["next_run_at"], s["next_run_at"]);
    // An edit of the template merges its keys; an edit of the cron moves the fire times.
    let (status, edited) = app
        .patch(
            "/v1/schedules/daily-digest",
            json!({"cron": "30 7 * * *", "ticket": {"priority": 5}, "overlap": "allow"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    assert_eq!(edited["ticket"]["priority"], 5);
    assert_eq!(edited["ticket"]["task"], "digest {scheduled_for}");
    assert_eq!(edited["overlap"], "allow");
    let next = time(&edited["next_run_at"]).with_timezone(&chrono_tz::Europe::Berlin);
    assert_eq!(next.format("%H:%M").to_string(), "07:30");

    let (status, _) = app.delete("/v1/schedules/daily-digest").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_error(
        &app.get("/v1/schedules/daily-digest").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.delete("/v1/schedules/daily-digest").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    app.shutdown().await;
}

#[tokio::test]
async fn bad_schedules_are_refused_naming_the_field_and_change_nothing() {
    let app = TestApp::spawn().await;
    create(
        &app,
        json!({"name": "taken", "cron": "* * * * *", "ticket": {"task": "t"}}),
    )
    .await;
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM schedules")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let base = json!({"cron": "* * * * *", "ticket": {"task": "t"}});
    let with = |patch: Value| {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
        body
    };
    let cases = [
        (with(json!({"cron": "not a cron"})), "cron"),
        (with(json!({"cron": "* * * *"})), "cron"),
        (with(json!({"cron": "0 0 0 * * * 2030"})), "cron"),
        (with(json!({"cron": "99 * * * *"})), "cron"),
        (with(json!({"timezone": "Mars/Olympus"})), "timezone"),
        (
            with(json!({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"})),
            "end_at",
        ),
        (
            with(json!({"start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"})),
            "end_at",
        ),
        (with(json!({"catch_up_window_secs": -1})), "catch_up_window_secs"),
        (
            with(json!({"start_at": ""})),
            "`start_at` must be an RFC 3339 date-time",
        ),
        (with(json!({"end_at": 5})), "`end_at` must be an RFC 3339 date-time"),
        (with(json!({"overlap": "sometimes"})), "overlap"),
        (with(json!({"catch_up": "all"})), "catch_up"),
        (with(json!({"name": "has space"})), "name"),
        (with(json!({"name": ""})), "name"),
        (with(json!({"ticket": {"task": ""}})), "task"),
        (with(json!({"ticket": {"task": "t", "metadata": [1]}})), "metadata"),
        (
            with(json!({"ticket": {"task": "t", "max_attempts": 0}})),
            "max_attempts",
        ),
        (with(json!({"ticket": {"task": "t", "schema": {"type": 5}}})), "schema"),
    ];
    for (body, field) in cases {
        let answer = app.post("/v1/schedules", body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        let message = answer.1["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(field), "{body}: {message}");
    }
    assert_error(
        &app.post(
            "/v1/schedules",
            json!({"name": "taken", "cron": "* * * * *", "ticket": {"task": "t"}}),
        )
        .await,
        StatusCode::CONFLICT,
        "conflict",
    );
    assert_error(
        &app.post_raw("/v1/schedules", "{").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_error(
        &app.post("/v1/schedules", json!({"cron": "* * * * *"})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    // Edits are checked the same way, and a bad one changes nothing.
    let (_, kept) = app.get("/v1/schedules/taken").await;
    for (patch, field) in [
        (json!({"cron": "nope"}), "cron"),
        (json!({"timezone": "Nowhere"}), "timezone"),
        (json!({"catch_up_window_secs": -5}), "catch_up_window_secs"),
        (json!({"start_at": ""}), "`start_at` must be an RFC 3339 date-time"),
        (json!({"end_at": "tomorrow"}), "`end_at` must be an RFC 3339 date-time"),
        (
            json!({"start_at": "2030-01-01T00:00:00Z", "end_at": "2029-01-01T00:00:00Z"}),
            "end_at",
        ),
    ] {
        let answer = app.patch("/v1/schedules/taken", patch).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert!(
            answer.1["error"]["message"].as_str().unwrap().contains(field),
            "{answer:?}"
        );
    }
    create(
        &app,
        json!({"name": "second", "cron": "* * * * *", "ticket": {"task": "t"}}),
    )
    .await;
    assert_error(
        &app.patch("/v1/schedules/second", json!({"name": "taken"})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
    assert_eq!(app.get("/v1/schedules/taken").await.1, kept);
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM schedules")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(after, before + 1);
    assert_error(
        &app.post("/v1/schedules/nope/run", json!({})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.get("/v1/schedules/nope/tickets").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    app.shutdown().await;
}

#[tokio::test]
async fn run_now_makes_a_ticket_from_the_template_with_the_previous_result() {
    let app = TestApp::spawn().await;
    let s = create(
        &app,
        json!({"name": "digest", "cron": "0 9 * * *", "timezone": "America/New_York", "overlap": "skip",
               "ticket": {"task": "for {scheduled_for}, after {previous_result}", "labels": ["digest"],
                          "priority": 3, "metadata": {"team": "ops"}, "max_attempts": 2, "deadline_secs": 600}}),
    )
    .await;
    let (status, first) = app.post("/v1/schedules/digest/run", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["status"], "todo");
    assert_eq!(first["labels"], json!(["digest"]));
    assert_eq!(first["priority"], 3);
    assert_eq!(first["max_attempts"], 2);
    assert_eq!(first["metadata"]["team"], "ops");
    let meta = &first["metadata"]["schedule"];
    assert_eq!(meta["id"], s["id"]);
    assert_eq!(meta["name"], "digest");
    let scheduled_for = time(&meta["scheduled_for"]);
    assert!(meta["scheduled_for"].as_str().unwrap().ends_with('Z'));
    // The task shows the time in the schedule's zone, in whole seconds as a fired ticket's is; no
    // ticket of it is done yet.
    let local = scheduled_for
        .with_timezone(&chrono_tz::America::New_York)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(first["task"], format!("for {local}, after null"));
    // Its ticket.created event is in the log like any other ticket's.
    let created: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE ticket_id = $1::text::uuid AND kind = 'ticket.created'")
            .bind(first["id"].as_str().unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(created, 1);

    // Its result once done (set behind the API's back: no model here) feeds the next task.
    sqlx::query(
        "UPDATE tickets SET status = 'done', result = '{\"items\": 2}', finished_at = now() WHERE id = $1::text::uuid",
    )
    .bind(first["id"].as_str().unwrap())
    .execute(&app.pool)
    .await
    .unwrap();
    // "Run now" fires whatever overlap says.
    let (_, second) = app.post("/v1/schedules/digest/run", json!({})).await;
    assert!(
        second["task"].as_str().unwrap().ends_with(r#"after {"items":2}"#),
        "{second}"
    );
    let (_, third) = app
        .post(&format!("/v1/schedules/{}/run", s["id"].as_str().unwrap()), json!({}))
        .await;
    assert_eq!(third["status"], "todo");

    let listed = app.get("/v1/schedules/digest/tickets").await.1;
    let keys: Vec<&Value> = listed["items"].as_array().unwrap().iter().map(|t| &t["key"]).collect();
    assert_eq!(keys, [&third["key"], &second["key"], &first["key"]]);
    let (_, paged) = app.get("/v1/schedules/digest/tickets?limit=2").await;
    assert_eq!(paged["items"].as_array().unwrap().len(), 2);
    assert_eq!(tickets_of(&app, "digest").await.len(), 3);
    let (_, s) = app.get("/v1/schedules/digest").await;
    assert_eq!(s["last_ticket"], third["key"]);
    assert!(s["last_run_at"].is_string());
    // Deleting the schedule keeps its tickets.
    app.delete("/v1/schedules/digest").await;
    assert_eq!(
        app.get(&format!("/v1/tickets/{}", first["key"].as_str().unwrap()))
            .await
            .0,
        StatusCode::OK
    );
    app.shutdown().await;
}

/// A worker process (the scheduler runs with the workers); tickets labelled `unrouted` are taken by
/// no agent, so they stay `todo`.
async fn scheduler_app() -> TestApp {
    TestApp::spawn_mode(Mode::Serve, |_| {}).await
}

#[tokio::test]
async fn a_seconds_schedule_fires_each_second_once_on_time_between_its_bounds() {
    let app = scheduler_app().await;
    let start = Utc::now() + chrono::Duration::seconds(2);
    let start = start - chrono::Duration::nanoseconds(start.timestamp_subsec_nanos() as i64);
    let end = start + chrono::Duration::seconds(4);
    let s = create(
        &app,
        json!({"name": "every-second", "cron": "* * * * * *", "overlap": "allow",
               "start_at": start, "end_at": end,
               "ticket": {"task": "at {scheduled_for}", "labels": ["unrouted"]}}),
    )
    .await;
    assert_eq!(time(&s["next_run_at"]), start);
    // Until it made its fifth ticket and has no next fire time: the fire that made a ticket also
    // moved `next_run_at`, so one past `end_at` would leave it set (and make a sixth).
    let tickets = eventually(
        "five tickets and no next fire time",
        Duration::from_secs(30),
        || async {
            let tickets = tickets_of(&app, "every-second").await;
            let (_, s) = app.get("/v1/schedules/every-second").await;
            (tickets.len() >= 5 && s["next_run_at"].is_null()).then_some(tickets)
        },
    )
    .await;
    let fired: Vec<DateTime<Utc>> = tickets
        .iter()
        .map(|t| time(&t["metadata"]["schedule"]["scheduled_for"]))
        .collect();
    let expected: Vec<DateTime<Utc>> = (0..=4).map(|i| start + chrono::Duration::seconds(i)).collect();
    assert_eq!(fired, expected, "one ticket per second from start_at to end_at");
    for t in &tickets {
        let lag = time(&t["created_at"]) - time(&t["metadata"]["schedule"]["scheduled_for"]);
        assert!(
            lag < chrono::Duration::seconds(2) && lag >= chrono::Duration::zero(),
            "{lag} late: {t}"
        );
        assert_eq!(
            t["task"],
            format!("at {}", t["metadata"]["schedule"]["scheduled_for"].as_str().unwrap())
        );
    }
    let (_, s) = app.get("/v1/schedules/every-second").await;
    assert_eq!(s["next_run_at"], Value::Null, "past end_at it will not fire again");
    assert_eq!(s["last_ticket"], tickets.last().unwrap()["key"]);
    // The metrics count them.
    let text = app
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("agentdesk_schedules{state=\"enabled\"} 1"), "{text}");
    assert!(
        text.contains("agentdesk_schedule_firings_total{outcome=\"fired\"}"),
        "{text}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn overlap_skip_leaves_a_skipped_event_and_cancel_previous_cancels() {
    let app = scheduler_app().await;
    create(
        &app,
        json!({"name": "skipper", "cron": "* * * * * *", "ticket": {"task": "t", "labels": ["unrouted"]}}),
    )
    .await;
    create(
        &app,
        json!({"name": "canceller", "cron": "* * * * * *", "overlap": "cancel_previous",
               "ticket": {"task": "t", "labels": ["unrouted"]}}),
    )
    .await;
    // Until each overlap rule has been applied a few times.
    let skipped_events = |app: &TestApp| {
        let pool = app.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE kind = 'schedule.skipped'")
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    eventually(
        "two skips and three cancelling tickets",
        Duration::from_secs(30),
        || async {
            let enough = skipped_events(&app).await >= 2 && tickets_of(&app, "canceller").await.len() >= 3;
            enough.then_some(())
        },
    )
    .await;
    app.patch("/v1/schedules/skipper", json!({"enabled": false})).await;
    app.patch("/v1/schedules/canceller", json!({"enabled": false})).await;

    // skip: one ticket (still todo), and a schedule.skipped on it for each later fire time.
    let skipped = tickets_of(&app, "skipper").await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let first = &skipped[0];
    let events: Vec<(String, Value)> =
        sqlx::query_as("SELECT kind, data::jsonb FROM events WHERE ticket_id = $1::text::uuid ORDER BY seq")
            .bind(first["id"].as_str().unwrap())
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let skips: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| k == "schedule.skipped")
        .map(|(_, d)| d)
        .collect();
    assert!(skips.len() >= 2, "{events:?}");
    let (_, s) = app.get("/v1/schedules/skipper").await;
    let mut seen = BTreeSet::new();
    for data in &skips {
        assert_eq!(data["schedule_id"], s["id"]);
        assert!(time(&data["scheduled_for"]) > time(&first["metadata"]["schedule"]["scheduled_for"]));
        assert!(
            seen.insert(data["scheduled_for"].as_str().unwrap().to_owned()),
            "one per fire time"
        );
    }

    // cancel_previous: each new ticket cancelled the one before it.
    let cancelling = tickets_of(&app, "canceller").await;
    assert!(cancelling.len() >= 3, "{cancelling:?}");
    let (last, earlier) = cancelling.split_last().unwrap();
    assert_eq!(last["status"], "todo");
    for t in earlier {
        let (_, t) = app.get(&format!("/v1/tickets/{}", t["key"].as_str().unwrap())).await;
        assert_eq!(t["status"], "cancelled", "{t}");
    }
    app.shutdown().await;
}

/// Fire times missed while no scheduler ran: the schedule's `next_run_at` is set ten minutes back
/// (as after an outage), then a scheduler starts.
#[tokio::test]
async fn missed_fire_times_follow_catch_up_and_never_burst() {
    let api = TestApp::spawn().await;
    for (name, catch_up, window) in [
        ("skip", "skip", 3600),
        ("latest", "latest", 3600),
        ("narrow", "latest", 1),
    ] {
        create(
            &api,
            json!({"name": name, "cron": "*/30 * * * * *", "catch_up": catch_up, "catch_up_window_secs": window,
                   "overlap": "allow", "ticket": {"task": "t", "labels": ["unrouted"]}}),
        )
        .await;
    }
    sqlx::query("UPDATE schedules SET next_run_at = date_trunc('minute', now()) - interval '10 minutes'")
        .execute(&api.pool)
        .await
        .unwrap();
    // Start between two 30-second marks, so that no fire time comes due on time while the
    // missed ones are checked.
    eventually(
        "a time between two 30-second marks",
        Duration::from_secs(30),
        || async { (3..=22).contains(&(Utc::now().timestamp() % 30)).then_some(()) },
    )
    .await;
    let started = Utc::now();
    let scheduler = TestApp::spawn_mode(Mode::Worker, |c| c.database_url = Some(api.database_url.clone())).await;
    // Until the scheduler has handled every missed time: each schedule's next fire time is then
    // ahead of the start (a catch-up fires and moves it in one transaction).
    eventually("every schedule to be caught up", Duration::from_secs(30), || async {
        let behind: i64 = sqlx::query_scalar("SELECT count(*) FROM schedules WHERE next_run_at <= $1")
            .bind(started)
            .fetch_one(&api.pool)
            .await
            .unwrap();
        (behind == 0).then_some(())
    })
    .await;
    let now = Utc::now();
    assert!(tickets_of(&api, "skip").await.is_empty());
    assert!(tickets_of(&api, "narrow").await.is_empty());
    let latest = tickets_of(&api, "latest").await;
    // Exactly one (none more may come from the missed ones), for the newest missed 30-second mark.
    let missed: Vec<&Value> = latest
        .iter()
        .filter(|t| time(&t["metadata"]["schedule"]["scheduled_for"]) < now - chrono::Duration::seconds(2))
        .collect();
    assert_eq!(missed.len(), 1, "{latest:?}");
    let at = time(&missed[0]["metadata"]["schedule"]["scheduled_for"]);
    assert!(
        now - at <= chrono::Duration::seconds(33),
        "the newest missed time: {at}"
    );
    for name in ["skip", "latest", "narrow"] {
        let (_, s) = api.get(&format!("/v1/schedules/{name}")).await;
        assert!(time(&s["next_run_at"]) > now - chrono::Duration::seconds(2), "{s}");
    }
    scheduler.shutdown().await;
    api.shutdown().await;
}

#[tokio::test]
async fn the_board_has_a_schedules_page() {
    let app = TestApp::spawn().await;
    let page = |path: &'static str| {
        let request = app.request(reqwest::Method::GET, path);
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let (status, index) = page("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(index.contains(r##"href="#/schedules""##), "{index}");
    let (status, script) = page("/board/schedules.js").await;
    assert_eq!(status, StatusCode::OK);
    for needle in ["/v1/schedules", "Pause", "Resume", "Run now", "next_run_at"] {
        assert!(script.contains(needle), "{needle}");
    }
    let (_, app_js) = page("/board/app.js").await;
    assert!(app_js.contains("schedulesPage"));
    app.shutdown().await;
}
