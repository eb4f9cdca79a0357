//! Two `agentdesk worker` processes of the real binary run the scheduler on one database: a
//! schedule firing every second for a minute makes exactly 60 tickets, one per second, each within
//! 2 s of its time, although one process is killed with SIGKILL part-way and started again.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use support::{eventually, metric_value, KillOnDrop, StatusCode, TestApp};

/// A worker process and the base URL of its health and metrics listener.
fn worker(database_url: &str, name: &str) -> (KillOnDrop, String) {
    let port = support::free_port();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("target/schedules-{name}.log"))
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_agentdesk"))
        .arg("worker")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
        .env("AGENTDESK_DB_MAX_CONNECTIONS", "4")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the agentdesk binary");
    (KillOnDrop(child), format!("http://127.0.0.1:{port}"))
}

/// The value of an unlabelled counter of the process at `base` (0 while it does not answer).
async fn scrape(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    match client.get(format!("{base}/metrics")).send().await {
        Ok(response) => metric_value(&response.text().await.unwrap_or_default(), name),
        Err(_) => 0.0,
    }
}

/// How many fire times of the schedule have a ticket.
async fn fired(api: &TestApp) -> usize {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM schedule_firings")
        .fetch_one(&api.pool)
        .await
        .unwrap();
    n as usize
}

/// Wakes every process's scheduler (a NOTIFY on its channel): each reads the schedules again.
async fn wake_schedulers(api: &TestApp) {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(agentdesk::db::schedules::SCHEDULES_CHANNEL)
        .execute(&api.pool)
        .await
        .unwrap();
}

/// Waits until the schedule has fired `n` times.
async fn wait_fired(api: &TestApp, n: usize) {
    eventually(format!("{n} firings"), Duration::from_secs(90), || async {
        (fired(api).await >= n).then_some(())
    })
    .await
}

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test]
async fn two_processes_make_exactly_one_ticket_per_fire_time() {
    // The API alone (no scheduler in this process): the tickets come from the two workers.
    let api = TestApp::spawn().await;
    let (mut a, _) = worker(&api.database_url, "a");
    let (_b, b_base) = worker(&api.database_url, "b");
    let start = Utc::now() + chrono::Duration::seconds(5);
    let start = start - chrono::Duration::nanoseconds(start.timestamp_subsec_nanos() as i64);
    let end = start + chrono::Duration::seconds(59);
    let (status, s) = api
        .post(
            "/v1/schedules",
            json!({"name": "minute", "cron": "* * * * * *", "overlap": "allow", "start_at": start, "end_at": end,
                   "ticket": {"task": "tick {scheduled_for}", "labels": ["unrouted"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{s}");

    // A third of the way in, one process dies mid-whatever; fifteen fire times later it comes
    // back.
    wait_fired(&api, 20).await;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    wait_fired(&api, 35).await;
    let (_a, a_base) = worker(&api.database_url, "a");
    support::wait_ready(&api.client, &a_base, Duration::from_secs(30)).await;
    wait_fired(&api, 60).await;
    // Then until each process has read the schedules again after that: a scheduler reads them
    // (`scheduler_polls_total`) once it is done firing what was due, so neither is still firing
    // one of the 60 times. A NOTIFY on their channel wakes them.
    let polls = || async {
        let name = "agentdesk_scheduler_polls_total";
        [
            scrape(&api.client, &a_base, name).await,
            scrape(&api.client, &b_base, name).await,
        ]
    };
    let before = polls().await;
    wake_schedulers(&api).await;
    eventually(
        "both schedulers to read the schedules again",
        Duration::from_secs(30),
        || async {
            let after = polls().await;
            (after[0] > before[0] && after[1] > before[1]).then_some(())
        },
    )
    .await;

    let tickets = api.list_all("/v1/schedules/minute/tickets?limit=200").await;
    let mut per_time: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    for t in &tickets {
        let at = time(&t["metadata"]["schedule"]["scheduled_for"]);
        *per_time.entry(at).or_default() += 1;
        let lag = time(&t["created_at"]) - at;
        assert!(lag < chrono::Duration::seconds(2), "{t} was {lag} late");
    }
    let expected: Vec<DateTime<Utc>> = (0..60).map(|i| start + chrono::Duration::seconds(i)).collect();
    assert_eq!(
        per_time.keys().copied().collect::<Vec<_>>(),
        expected,
        "every second, no gap"
    );
    assert!(
        per_time.values().all(|n| *n == 1),
        "never two for one time: {per_time:?}"
    );
    assert_eq!(tickets.len(), 60);
    let firings: i64 = sqlx::query_scalar("SELECT count(*) FROM schedule_firings")
        .fetch_one(&api.pool)
        .await
        .unwrap();
    assert_eq!(firings, 60);
    api.shutdown().await;
}

/// The value of an unlabelled counter in a Prometheus text page.
fn counter(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}

#[tokio::test]
async fn ten_thousand_quiet_schedules_cost_the_scheduler_nothing_while_it_waits() {
    let api = TestApp::spawn().await;
    // 10 000 enabled schedules, the next of which fires in a year.
    sqlx::query(
        "INSERT INTO schedules (id, name, cron, timezone, ticket, overlap, catch_up, catch_up_window_secs, next_run_at)
         SELECT gen_random_uuid(), 'yearly-' || n, '0 0 1 1 *', 'UTC', '{\"task\": \"t\"}', 'skip', 'skip', 3600,
                now() + interval '1 year' + n * interval '1 second'
         FROM generate_series(1, 10000) AS n",
    )
    .execute(&api.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE schedules").execute(&api.pool).await.unwrap();
    // The read the scheduler sleeps on is an index-only scan of the partial index.
    let plan: Vec<(String,)> =
        sqlx::query_as("EXPLAIN SELECT min(next_run_at) FROM schedules WHERE enabled AND next_run_at IS NOT NULL")
            .fetch_all(&api.pool)
            .await
            .unwrap();
    let plan: String = plan.into_iter().map(|(l,)| l).collect::<Vec<_>>().join("\n");
    assert!(plan.contains("schedules_due_idx"), "{plan}");

    let port = support::free_port();
    let log = std::fs::File::create("target/schedules-quiet.log").unwrap();
    let _worker = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_agentdesk"))
            .arg("worker")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &api.database_url)
            .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    support::wait_ready(&api.client, &base, Duration::from_secs(30)).await;
    let page = || async {
        let response = api.client.get(format!("{base}/metrics")).send().await.unwrap();
        response.text().await.unwrap()
    };
    // The claimers look for work once a second when idle (each look is a `claims` batch): the
    // process's own clock, to measure the scheduler's quiet by.
    let claim_looks = |page: &str| metric_value(page, "agentdesk_db_batch_duration_seconds_count{stage=\"claims\"}");
    let polls = |page: &str| counter(page, "agentdesk_scheduler_polls_total");
    // Its start: a first read, and one more when its listener connects (it looks once then).
    let settled = eventually("the scheduler's start to be over", Duration::from_secs(30), || async {
        let first = page().await;
        (polls(&first) >= 2.0).then_some(first)
    })
    .await;
    let (before, looks) = (polls(&settled), claim_looks(&settled));
    // Five looks for work later (about five seconds), the scheduler has read nothing more.
    let later = eventually("five more looks for work", Duration::from_secs(30), || async {
        let later = page().await;
        (claim_looks(&later) >= looks + 5.0).then_some(later)
    })
    .await;
    assert_eq!(
        polls(&later),
        before,
        "the scheduler slept: no statement while nothing is due"
    );
    // A change wakes it at once, and a schedule due in two seconds fires on time.
    let due = Utc::now() + chrono::Duration::seconds(2);
    let due = due - chrono::Duration::nanoseconds(due.timestamp_subsec_nanos() as i64);
    let (status, _) = api
        .post(
            "/v1/schedules",
            json!({"name": "soon", "cron": "* * * * * *", "start_at": due,
                   "end_at": due + chrono::Duration::milliseconds(500),
                   "ticket": {"task": "t", "labels": ["unrouted"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    eventually("the schedule to fire", Duration::from_secs(30), || async {
        let tickets = api.list_all("/v1/schedules/soon/tickets").await;
        (!tickets.is_empty()).then_some(())
    })
    .await;
    // Then until the scheduler has read the schedules again (woken by a NOTIFY): it is done
    // firing whatever was due, and its one fire time is past.
    let fired = polls(&page().await);
    wake_schedulers(&api).await;
    eventually(
        "the scheduler to read the schedules again",
        Duration::from_secs(30),
        || async { (polls(&page().await) > fired).then_some(()) },
    )
    .await;
    let tickets = api.list_all("/v1/schedules/soon/tickets").await;
    assert_eq!(tickets.len(), 1, "{tickets:?}");
    assert!(time(&tickets[0]["created_at"]) - due < chrono::Duration::seconds(2));
    api.shutdown().await;
}
