//! `soak`: one desk under an hour (`--minutes`) of mixed load, sampled every minute: whether
//! anything grows without bound. Tickets arrive at a fixed rate (`--rate`, default 20/s): most
//! close at once, some call a built-in tool first, some call an HTTP tool that waits for approval
//! (an approver in the bench answers it). A webhook receives every event, SSE readers come and go,
//! and retention deletes what finished more than five minutes ago. Each sample records the
//! process's memory, the database's connections and size, the tables' row counts and the create
//! latency percentiles; the bars compare the last sample with the one after warm-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use sqlx::PgPool;
use testkit::fake_llm::Reply;

use crate::harness::Fixture;
use crate::opts::Opts;
use crate::report::{percentile, Bar, Check, Report};
use crate::server::{self, ServerSpec};
use crate::sse::SseConn;

/// What the bench's receiver counts: webhook deliveries and HTTP tool calls.
#[derive(Default)]
struct Counters {
    deliveries: AtomicU64,
    tool_calls: AtomicU64,
    sse_events: AtomicU64,
    approvals: AtomicU64,
    create_errors: AtomicU64,
}

/// The model: a tool result is answered with `close_ticket`; otherwise a task that says
/// `approve` calls `deploy` (which waits for approval), one that says `tool` lists tickets with
/// `read_tickets`, and any other closes at once.
fn model(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return Reply::tool_call("close_ticket", json!({"result": "ok"}));
    }
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if task.contains("approve") {
        Reply::tool_call("deploy", json!({"env": "staging"}))
    } else if task.contains("tool") {
        Reply::tool_call("read_tickets", json!({"action": "list", "status": "done"}))
    } else {
        Reply::tool_call("close_ticket", json!({"result": "ok"}))
    }
}

/// A receiver on loopback: `/hook` for webhook deliveries, `/tool` for the HTTP tool.
async fn receiver(counters: Arc<Counters>) -> Result<String> {
    let (hooks, tools) = (counters.clone(), counters);
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(move || {
                hooks.deliveries.fetch_add(1, Ordering::Relaxed);
                async { "" }
            }),
        )
        .route(
            "/tool",
            axum::routing::post(move || {
                tools.tool_calls.fetch_add(1, Ordering::Relaxed);
                async { "deployed" }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(base)
}

async fn put(fx: &Fixture, path: &str, body: Value) -> Result<()> {
    let response = fx.http.put(format!("{}{path}", fx.url)).json(&body).send().await?;
    anyhow::ensure!(response.status().is_success(), "PUT {path}: {}", response.status());
    Ok(())
}

/// The tool, the agent and the webhook.
async fn set_up(fx: &Fixture, base: &str) -> Result<()> {
    put(
        fx,
        "/v1/tools/deploy",
        json!({"description": "Deploys", "url": format!("{base}/tool"), "requires_approval": true,
               "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}}),
    )
    .await?;
    put(
        fx,
        "/v1/agents/soak",
        json!({"provider": "openai", "model": "m", "labels": ["soak"],
               "tools": ["close_ticket", "read_tickets", "deploy"]}),
    )
    .await?;
    let response = fx
        .http
        .post(format!("{}/v1/webhooks", fx.url))
        .json(&json!({"url": format!("{base}/hook")}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "POST /v1/webhooks: {}",
        response.status()
    );
    Ok(())
}

/// Creates tickets at `rate` per second until `until`, one in ten waiting for approval and three
/// in ten calling a tool; records each create's latency.
async fn load(fx: Arc<Fixture>, rate: f64, until: Instant, latencies: Arc<Mutex<Vec<f64>>>, counters: Arc<Counters>) {
    let start = tokio::time::Instant::now();
    let mut n: u64 = 0;
    while Instant::now() < until {
        let planned = start + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(planned).await;
        let task = match n % 10 {
            0 => "approve the deploy",
            1..=3 => "tool: look around",
            _ => "say ok",
        };
        n += 1;
        let (http, url, latencies, counters) = (fx.http.clone(), fx.url.clone(), latencies.clone(), counters.clone());
        tokio::spawn(async move {
            let sent = http
                .post(format!("{url}/v1/tickets"))
                .json(&json!({"task": task, "labels": ["soak"]}))
                .send()
                .await;
            let ok = matches!(&sent, Ok(r) if r.status().as_u16() == 201);
            latencies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(planned.elapsed().as_secs_f64() * 1e3);
            if !ok {
                counters.create_errors.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Approves every call that waits, once a second.
async fn approver(fx: Arc<Fixture>, until: Instant, counters: Arc<Counters>) {
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(response) = fx
            .http
            .get(format!("{}/v1/tickets?status=waiting&label=soak&limit=200", fx.url))
            .send()
            .await
        else {
            continue;
        };
        let Ok(page) = response.json::<Value>().await else {
            continue;
        };
        for ticket in page["items"].as_array().into_iter().flatten() {
            for pending in ticket["pending_approvals"].as_array().into_iter().flatten() {
                let url = format!(
                    "{}/v1/tickets/{}/approvals/{}",
                    fx.url,
                    ticket["id"].as_str().unwrap_or_default(),
                    pending["call_id"].as_str().unwrap_or_default()
                );
                if let Ok(r) = fx.http.post(url).json(&json!({"approve": true})).send().await {
                    if r.status().is_success() {
                        counters.approvals.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// SSE readers that come and go: every 5 s, ten connect to `/v1/events` and read for 20 s.
async fn readers(fx: Arc<Fixture>, until: Instant, counters: Arc<Counters>) {
    while Instant::now() < until {
        for _ in 0..10 {
            let (addr, counters) = (fx.addr, counters.clone());
            tokio::spawn(async move {
                let Ok(mut conn) = SseConn::connect(addr, "/v1/events").await else {
                    return;
                };
                let _ = tokio::time::timeout(Duration::from_secs(20), async {
                    while let Ok(Some(_)) = conn.next_event().await {
                        counters.sse_events.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .await;
            });
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

async fn sample(
    pool: &PgPool,
    pid: u32,
    minute: f64,
    latencies: &Mutex<Vec<f64>>,
    counters: &Counters,
) -> Result<Value> {
    let (connections, db_bytes, tickets, events, comments, done): (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()),
                pg_database_size(current_database()),
                (SELECT count(*) FROM tickets), (SELECT count(*) FROM events), (SELECT count(*) FROM comments),
                (SELECT count(*) FROM tickets WHERE status = 'done')",
    )
    .fetch_one(pool)
    .await?;
    let waits: Vec<f64> = std::mem::take(&mut *latencies.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(json!({
        "minute": (minute * 10.0).round() / 10.0,
        "rss_mb": (server::rss_mb(pid) * 10.0).round() / 10.0,
        "db_connections": connections,
        "db_mb": (db_bytes as f64 / 1e6 * 10.0).round() / 10.0,
        "tickets": tickets, "events": events, "comments": comments, "done_kept": done,
        "creates": waits.len(),
        "create_p50_ms": (percentile(&waits, 50.0) * 100.0).round() / 100.0,
        "create_p99_ms": (percentile(&waits, 99.0) * 100.0).round() / 100.0,
        "webhook_deliveries": counters.deliveries.load(Ordering::Relaxed),
        "tool_calls": counters.tool_calls.load(Ordering::Relaxed),
        "approvals": counters.approvals.load(Ordering::Relaxed),
        "sse_events": counters.sse_events.load(Ordering::Relaxed),
    }))
}

pub async fn soak(opts: Opts, report: &mut Report) -> Result<()> {
    let minutes = opts.minutes.unwrap_or(opts.pick(4.0, 60.0));
    let rate = opts.rate.unwrap_or(20.0);
    // Samples a minute apart (quick: ten seconds); the first ones are warm-up, while retention's
    // window fills.
    let every = Duration::from_secs(opts.pick(10, 60));
    let keep = Duration::from_secs(opts.pick(30, 300));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: opts.workers.unwrap_or(64),
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: true,
        retention: Some(keep),
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = Arc::new(Fixture::start("soak", &spec).await?);
    fx.fake.set_responder(model);
    let counters = Arc::new(Counters::default());
    let base = receiver(counters.clone()).await?;
    set_up(&fx, &base).await?;
    let pool = agentdesk::db::connect(&fx.db_url, 2).await?;
    // Retention deletes rows; autovacuum makes their space reusable. A server with it off (some
    // test setups) grows whatever the desk does.
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&pool)
        .await?;
    if autovacuum != "on" {
        report.note("autovacuum is off on this PostgreSQL server: deleted rows' space is never reclaimed, so the database grows whatever the desk deletes; run against a server with autovacuum on (without DATABASE_URL the bench starts one)");
    }
    report.figure("autovacuum", autovacuum);
    let pid = fx.server.pid();
    let latencies = Arc::new(Mutex::new(Vec::new()));

    let started = Instant::now();
    let until = started + Duration::from_secs_f64(minutes * 60.0);
    let tasks = [
        tokio::spawn(load(fx.clone(), rate, until, latencies.clone(), counters.clone())),
        tokio::spawn(approver(fx.clone(), until, counters.clone())),
        tokio::spawn(readers(fx.clone(), until, counters.clone())),
    ];
    let mut samples = vec![];
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    while Instant::now() < until {
        tick.tick().await;
        let at = started.elapsed().as_secs_f64() / 60.0;
        let s = sample(&pool, pid, at, &latencies, &counters).await?;
        println!("  {s}");
        samples.push(s);
    }
    for task in tasks {
        task.await.context("a load task panicked")?;
    }
    let server_kind = fx.server.describe();
    // Every task holding the fixture has ended (the creates in flight hold only its client).
    let fx = Arc::into_inner(fx).context("the fixture is still shared")?;
    fx.shutdown().await;

    // Warm-up: the tables fill up to retention's window, then autovacuum (which looks once a
    // minute) starts making deleted rows' space reusable: twice the window and two minutes more.
    let warm_up_secs = 2.0 * keep.as_secs_f64() + 120.0;
    let warm = samples
        .iter()
        .position(|s| s["minute"].as_f64().unwrap_or(0.0) * 60.0 >= warm_up_secs)
        .context("the run was shorter than its warm-up")?;
    let (first, last) = (&samples[warm], &samples[samples.len() - 1]);
    let ratio = |field: &str| last[field].as_f64().unwrap_or(0.0) / first[field].as_f64().unwrap_or(1.0).max(1e-9);
    report.check(
        Check::new(
            "process memory (RSS), last sample",
            last["rss_mb"].as_f64().unwrap_or(0.0),
            "MB",
            Bar::AtMost,
            1.25,
        )
        .baseline("after warm-up", first["rss_mb"].as_f64().unwrap_or(0.0))
        .bar_on_ratio(),
    );
    report.check(
        Check::new(
            "database size, last sample",
            last["db_mb"].as_f64().unwrap_or(0.0),
            "MB",
            Bar::AtMost,
            1.25,
        )
        .baseline("after warm-up", first["db_mb"].as_f64().unwrap_or(0.0))
        .bar_on_ratio(),
    );
    report.check(Check::info("events kept, last / after warm-up", ratio("events"), "×"));
    let peak_connections = samples
        .iter()
        .filter_map(|s| s["db_connections"].as_i64())
        .max()
        .unwrap_or(0);
    report.check(Check::new(
        "database connections, most seen",
        peak_connections as f64,
        "",
        Bar::AtMost,
        20.0,
    ));
    let p99s: Vec<f64> = samples[warm..]
        .iter()
        .filter_map(|s| s["create_p99_ms"].as_f64())
        .collect();
    report.check(Check::info(
        "create p99, worst minute after warm-up",
        p99s.iter().cloned().fold(0.0, f64::max),
        "ms",
    ));
    report.check(Check::new(
        "failed creates",
        counters.create_errors.load(Ordering::Relaxed) as f64,
        "",
        Bar::AtMost,
        0.0,
    ));
    report.figure("minutes", minutes);
    report.figure("rate_per_s", rate);
    report.figure("retention_secs", keep.as_secs());
    report.figure("warm_up_samples", warm);
    report.figure("samples", json!(samples));
    report.note(format!(
        "agentdesk ran {server_kind} with AGENTDESK_RETENTION_DAYS = {} s; tickets at {rate}/s for {minutes} min: \
         6 in 10 close at once, 3 call read_tickets first, 1 calls an HTTP tool that waits for approval (the bench \
         approves within a second); one webhook on every event; ten SSE readers connect every 5 s and read for 20 s",
        keep.as_secs()
    ));
    report.note("bars compare the last sample with the first after warm-up (twice the retention window and two minutes for autovacuum): flat means within 1.25×");
    Ok(())
}
