//! fair_share: a project that posts ten thousand tickets does not hold up another project's ten.
//!
//! Two rounds on a model that answers every request after the same delay (so a ticket occupies
//! a worker for a known time):
//! - the floor: an empty desk with half the workers (beta's share when two projects of weight 1
//!   have tickets waiting) works beta's ten tickets alone;
//! - the measure: the whole desk, with the project `default` posting its backlog first and beta
//!   posting its ten once the backlog fills every worker.
//!
//! Each ticket's wait is its claim's time less its creation's (`started_at - created_at`), read
//! from the database; the bench reports beta's p95 wait against the floor's.

use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::harness::close_ticket;
use crate::harness::Fixture;
use crate::opts::Opts;
use crate::report::{percentile, Check, Report};
use crate::server::ServerSpec;

/// Tickets of the small project.
const SMALL: usize = 10;
const SMALL_PROJECT: &str = "beta";

pub async fn fair_share(opts: Opts, report: &mut Report) -> Result<()> {
    let backlog = opts.pick(2_000, 10_000);
    let workers = opts.workers.unwrap_or(16).max(2);
    // Long enough that a claim's own time is small beside it.
    let work = Duration::from_millis(opts.pick(50, 100));
    let timeout = Duration::from_secs(opts.pick(120, 600));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers,
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: opts.child,
        retention: None,
        claimers: None,
        shutdown_grace: Some(Duration::from_millis(100)),
        model_http2: false,
        stream_idle: None,
    };

    // The floor: beta alone, with its share of the workers.
    let floor_spec = ServerSpec {
        workers: workers / 2,
        ..spec.clone()
    };
    let fx = Fixture::start("fair_share_floor", &floor_spec).await?;
    fx.fake.set_reply(close_ticket().first_byte_delay(work));
    let floor = small_project_waits(&fx, timeout).await?;
    fx.shutdown().await;

    // The measure: beta's ten behind default's backlog, on the whole desk.
    let fx = Fixture::start("fair_share", &spec).await?;
    fx.fake.set_reply(close_ticket().first_byte_delay(work));
    let pool = agentdesk::db::connect(&fx.db_url, 2).await?;
    let posted = Instant::now();
    fx.create_tickets(backlog, 16, json!({"task": "the big project's backlog"}))
        .await?;
    wait_until(
        &pool,
        "SELECT count(*) FROM tickets WHERE status = 'in_progress'",
        workers as i64,
        timeout,
    )
    .await
    .context("the backlog never filled the workers")?;
    let measured = small_project_waits(&fx, timeout).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE project_id = 1 AND status = 'todo'")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    fx.shutdown().await;

    let (p95, floor_p95) = (percentile(&measured, 95.0), percentile(&floor, 95.0));
    println!(
        "  beta's p95 wait {p95:.0} ms behind a backlog of {backlog} ({left} still waiting when beta's were done); \
         floor {floor_p95:.0} ms"
    );
    report.check(
        Check::info(
            &format!("p95 wait of a project's {SMALL} tickets behind another's backlog of {backlog}"),
            p95,
            "ms",
        )
        .baseline("the same tickets alone on half the workers", floor_p95),
    );
    report.figure("backlog", backlog);
    report.figure("workers", workers);
    report.figure("work_ms", work.as_millis() as u64);
    report.figure("small_waits_ms", json!(measured));
    report.figure("floor_waits_ms", json!(floor));
    report.figure("backlog_left_when_small_done", left);
    report.figure("backlog_posting_s", posted.elapsed().as_secs_f64());
    report.note(format!(
        "a model answering each request after {} ms; {workers} workers (the floor: {}); projects default \
         (the backlog) and {SMALL_PROJECT}, weight 1 each; wait = started_at - created_at",
        work.as_millis(),
        workers / 2
    ));
    Ok(())
}

/// Creates the small project (with an agent of its own), posts its tickets, waits for them to be
/// done, and answers each one's wait in milliseconds.
async fn small_project_waits(fx: &Fixture, timeout: Duration) -> Result<Vec<f64>> {
    let request = |method: reqwest::Method, path: &str, body: Value| {
        fx.http
            .request(method, format!("{}{path}", fx.url))
            .header("AgentDesk-Project", SMALL_PROJECT)
            .json(&body)
    };
    let created = fx
        .http
        .post(format!("{}/v1/projects", fx.url))
        .json(&json!({"name": SMALL_PROJECT, "key_prefix": "BETA"}))
        .send()
        .await?;
    if !created.status().is_success() {
        bail!("POST /v1/projects answered {}", created.status());
    }
    let agent = json!({"role": "You work benchmark tickets.", "provider": "openai", "model": "gpt-4o-mini"});
    let put = request(reqwest::Method::PUT, "/v1/agents/worker", agent).send().await?;
    if !put.status().is_success() {
        bail!("PUT /v1/agents/worker answered {}", put.status());
    }
    for _ in 0..SMALL {
        let r = request(
            reqwest::Method::POST,
            "/v1/tickets",
            json!({"task": "the small project's"}),
        )
        .send()
        .await?;
        if r.status().as_u16() != 201 {
            bail!("POST /v1/tickets answered {}", r.status());
        }
    }
    let pool = agentdesk::db::connect(&fx.db_url, 1).await?;
    let done = format!(
        "SELECT count(*) FROM tickets t JOIN projects p ON p.id = t.project_id
         WHERE p.name = '{SMALL_PROJECT}' AND t.status = 'done'"
    );
    wait_until(&pool, &done, SMALL as i64, timeout).await?;
    let waits: Vec<f64> = sqlx::query_scalar(&format!(
        "SELECT (extract(epoch FROM t.started_at - t.created_at) * 1000)::float8
         FROM tickets t JOIN projects p ON p.id = t.project_id WHERE p.name = '{SMALL_PROJECT}'"
    ))
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    Ok(waits)
}

/// Polls a count until it reaches `at_least`.
async fn wait_until(pool: &sqlx::PgPool, count_sql: &str, at_least: i64, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        let n: i64 = sqlx::query_scalar(count_sql).fetch_one(pool).await?;
        if n >= at_least {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("{n} of {at_least} after {timeout:?}: {count_sql}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
