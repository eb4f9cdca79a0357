//! `retention_sweep`: what deleting old tickets costs the hot path. A desk works a backlog of
//! tickets, which are then aged past the retention window. Throughput rounds run on the desk
//! restarted with retention off (the baseline), then on the desk restarted with retention on,
//! while its sweep deletes the backlog; the ratio of the two is the cost. The sweep's rate and
//! the tables' sizes before and after are reported too.

use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{bail, Result};
use serde_json::json;
use sqlx::PgPool;

use crate::harness::close_ticket;
use crate::harness::Fixture;
use crate::opts::Opts;
use crate::report::{median, Bar, Check, Report};
use crate::server::ServerSpec;
use crate::throughput::throughput_round;

/// The retention window of the sweeping desk; the backlog is aged past it.
const KEEP_DAYS: f64 = 7.0;

/// Finished tickets older than the window: what the sweep has left to delete.
async fn aged(pool: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM tickets WHERE finished_at < now() - make_interval(secs => $1)")
            .bind(KEEP_DAYS * 86_400.0)
            .fetch_one(pool)
            .await?,
    )
}

/// The on-disk size (with indexes and TOAST) of the tables a ticket writes, in MB.
async fn sizes_mb(pool: &PgPool) -> Result<serde_json::Value> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class
         WHERE relkind = 'r' AND relname IN ('tickets', 'events', 'comments', 'outputs')
         ORDER BY relname",
    )
    .fetch_all(pool)
    .await?;
    Ok(json!(rows
        .into_iter()
        .map(|(name, bytes)| (name, json!((bytes as f64 / 1e6 * 10.0).round() / 10.0)))
        .collect::<serde_json::Map<_, _>>()))
}

pub async fn retention_sweep(opts: Opts, report: &mut Report) -> Result<()> {
    let backlog = opts.pick(5_000, 100_000);
    let (tickets, clients, rounds) = (opts.pick(300, 2000), opts.clients.unwrap_or(16), opts.pick(2, 3));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: opts.workers.unwrap_or(256),
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: opts.child,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let timeout = Duration::from_secs(opts.pick(120, 900));

    let fx = Fixture::start("retention_sweep", &spec).await?;
    fx.fake.set_reply(close_ticket());
    let pool = agentdesk::db::connect(&fx.db_url, 2).await?;

    // The backlog, worked like any tickets, then aged: finished a month ago.
    let started = Instant::now();
    let mut watcher = fx.done_watcher().await?;
    throughput_round(&fx, &mut watcher, 0, backlog, clients, timeout, report).await?;
    drop(watcher);
    println!(
        "  backlog: {backlog} tickets worked in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    sqlx::query("UPDATE tickets SET finished_at = finished_at - interval '30 days'")
        .execute(&pool)
        .await?;
    sqlx::query("VACUUM ANALYZE tickets").execute(&pool).await?;
    let sizes_before = sizes_mb(&pool).await?;

    // Both phases start from a restarted desk, so they differ only in the sweep.
    let fx = fx.restart("retention_sweep.baseline", &spec).await?;
    let mut watcher = fx.done_watcher().await?;
    let mut baseline = vec![];
    for round in 0..rounds {
        let (tps, _) = throughput_round(&fx, &mut watcher, round * tickets, tickets, clients, timeout, report).await?;
        println!("  retention off, round {}: {tps:.0} tickets/s", round + 1);
        baseline.push(tps);
    }
    drop(watcher);

    let sweeping = ServerSpec {
        retention: Some(Duration::from_secs_f64(KEEP_DAYS * 86_400.0)),
        ..spec
    };
    let fx = fx.restart("retention_sweep.sweeping", &sweeping).await?;
    let sweep_started = Instant::now();
    let mut watcher = fx.done_watcher().await?;
    let mut during = vec![];
    let mut left_after = vec![];
    for round in 0..rounds {
        let (tps, _) = throughput_round(&fx, &mut watcher, round * tickets, tickets, clients, timeout, report).await?;
        let left = aged(&pool).await?;
        println!(
            "  sweeping, round {}: {tps:.0} tickets/s ({left} aged tickets left)",
            round + 1
        );
        during.push(tps);
        left_after.push(left);
    }
    if left_after.first() == Some(&0) {
        report.note("the sweep had finished before the first round ended: the rounds measured little of it");
    }
    let deadline = Instant::now() + timeout;
    while aged(&pool).await? > 0 {
        if Instant::now() > deadline {
            bail!("the sweep had not deleted the backlog after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sweep_secs = sweep_started.elapsed().as_secs_f64();
    sqlx::query("VACUUM ANALYZE tickets, events, comments")
        .execute(&pool)
        .await?;
    let sizes_after = sizes_mb(&pool).await?;
    let server_kind = fx.server.describe();
    fx.shutdown().await;
    println!("  the sweep deleted {backlog} tickets in {sweep_secs:.1} s; sizes {sizes_before} → {sizes_after}");

    report.check(
        Check::new(
            "tickets/s while the sweep deletes a backlog",
            median(&during),
            "tickets/s",
            Bar::AtLeast,
            0.8,
        )
        .baseline("retention off", median(&baseline))
        .bar_on_ratio(),
    );
    report.check(Check::info("backlog deleted in", sweep_secs, "s"));
    report.check(Check::info(
        "tickets deleted per second",
        backlog as f64 / sweep_secs,
        "tickets/s",
    ));
    report.figure("backlog", backlog);
    report.figure("tickets_per_round", tickets);
    report.figure("clients", clients);
    report.figure("baseline_tickets_per_s", json!(baseline));
    report.figure("sweeping_tickets_per_s", json!(during));
    report.figure("aged_tickets_left_after_each_round", json!(left_after));
    report.figure("table_mb_before_sweep", sizes_before);
    report.figure("table_mb_after_sweep_and_vacuum", sizes_after);
    report.note(format!(
        "agentdesk ran {server_kind}; a backlog of {backlog} one-step tickets was worked, then aged 30 days; \
         rounds of {tickets} tickets from {clients} clients ran on the desk restarted with retention off, \
         then on the desk restarted with AGENTDESK_RETENTION_DAYS={KEEP_DAYS}, whose sweep starts at once; \
         the ratio compares the medians"
    ));
    report.note("sizes: pg_total_relation_size of each table (indexes and TOAST included), after VACUUM; space freed by deletes is reused by later rows rather than returned to the system");
    Ok(())
}
