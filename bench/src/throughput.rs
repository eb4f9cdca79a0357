//! throughput: one-step tickets created over HTTP until all are done, against pgbench running
//! the bare SQL of a ticket's life on the same server.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::harness::{close_ticket, DoneWatcher, Fixture};
use crate::opts::Opts;
use crate::pg_spend::PgSpend;
use crate::pgbench::{self, Protocol};
use crate::report::{median, Bar, Check, Report};
use crate::server::{self, ServerSpec};
use crate::stages;
use agentdesk::app::Mode;

/// Tickets in flight in the measured throughput rounds: enough to keep the machine busy. With an
/// instant model, a ticket's life is mostly waiting on round trips (HTTP, model, Postgres), and the
/// default 64 in flight left a quarter of the CPU idle; pgbench's clients never wait on anything
/// but Postgres.
const THROUGHPUT_WORKERS: usize = 256;
/// `AGENTDESK_WORKERS`' default, measured in one more round for information.
const DEFAULT_WORKERS: usize = 64;

/// One throughput round: `tickets` one-step tickets created over HTTP by `clients` until all are
/// done. Returns tickets/s and the creation rate.
pub async fn throughput_round(
    fx: &Fixture,
    watcher: &mut DoneWatcher,
    done_before: usize,
    tickets: usize,
    clients: usize,
    timeout: Duration,
    report: &mut Report,
) -> Result<(f64, f64)> {
    let started = Instant::now();
    let creating = fx.create_tickets(tickets, clients, json!({"task": "say ok"}));
    let created = tokio::time::timeout(timeout, creating)
        .await
        .context("creating tickets timed out")??;
    let (_, failed) = watcher
        .wait_for(done_before + tickets, timeout.saturating_sub(created))
        .await?;
    let elapsed = started.elapsed();
    if failed > 0 {
        report.note(format!("{failed} tickets failed (counted as finished)"));
    }
    Ok((
        tickets as f64 / elapsed.as_secs_f64(),
        tickets as f64 / created.as_secs_f64(),
    ))
}

/// N one-step tickets created over HTTP by concurrent clients until all are done, against
/// pgbench running the bare SQL of a ticket's life with as many clients. Rounds alternate between
/// the two so both see the same machine noise; the medians are compared.
pub async fn throughput(opts: Opts, report: &mut Report) -> Result<()> {
    let (tickets, clients, rounds) = (opts.pick(200, 2000), opts.clients.unwrap_or(16), opts.pick(1, 3));
    let pg_duration = opts
        .pg_seconds
        .map_or(Duration::from_secs(opts.pick(3, 10)), Duration::from_secs_f64);
    let workers = opts.workers.unwrap_or(THROUGHPUT_WORKERS);
    let db_connections = opts.db_connections.unwrap_or(16);
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers,
        db_max_connections: db_connections,
        child: opts.child,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let pgbench = pgbench::find_pgbench().context("pgbench not found (install postgresql-contrib or the client)")?;

    let scratch = testkit::testing::fresh_database().await?;
    {
        let pool = agentdesk::db::connect(&scratch, 2).await?;
        agentdesk::db::migrate(&pool).await?;
        pool.close().await;
    }
    let script = pgbench::script_path();

    let fx = Fixture::start("throughput", &spec).await?;
    fx.fake.set_reply(close_ticket());
    let receiver = match opts.webhook {
        true => Some(webhook_receiver(&fx).await?),
        false => None,
    };
    let mut watcher = fx.done_watcher().await?;
    let (mut agentdesk_tps, mut pg_tps, mut pg_runs, mut create_rates) = (vec![], vec![], vec![], vec![]);
    let mut simple_tps = vec![];
    let timeout = Duration::from_secs(opts.pick(60, 300));

    // Both sides warm up first, unmeasured: a fresh desk runs its first thousand tickets with
    // plans made on empty tables and relations growing from nothing, and pgbench's scratch
    // database starts as cold. Measured rounds then compare the two steady states.
    let warm_up = tickets / 2;
    let (warm_tps, _) = throughput_round(&fx, &mut watcher, 0, warm_up, clients, timeout, report).await?;
    // pgbench blocks until it ends: off the runtime that serves agentdesk's watcher.
    let run_pgbench = |duration: Duration, protocol: Protocol| {
        let (pgb, url, path) = (pgbench.clone(), scratch.clone(), script.clone());
        async move {
            tokio::task::spawn_blocking(move || pgbench::run(&pgb, &url, clients, duration, &path, protocol, None))
                .await?
        }
    };
    let warm_pg = Duration::from_secs(opts.pick(1, 3));
    let warm_runs = run_pgbench(warm_pg, Protocol::Prepared).await?;
    println!("  warm-up: agentdesk {warm_tps:.0} tickets/s ({warm_up} tickets), pgbench {warm_runs:.0} runs/s");
    // What Postgres spends per ticket on either side: less noisy than the rates, and it says
    // where the gap between them comes from.
    let (mut agentdesk_spend, mut pg_spend) = (vec![], vec![]);
    // And what the client side spends: agentdesk's process (with the bench's HTTP clients and
    // fake model when it runs in the bench process), and pgbench's.
    let (mut agentdesk_cpu, mut pgbench_cpu) = (vec![], vec![]);
    // Where the tickets queued inside agentdesk, round by round (see `stages`).
    let mut stage_lines = vec![];
    for round in 0..rounds {
        let finished = warm_up + round * tickets;
        let before = PgSpend::now(&scratch).await?;
        let process_before = server::cpu_secs(fx.server.pid());
        let bench_before = server::cpu_secs(std::process::id());
        let stages_before = stages::Snapshot::take(&fx).await?;
        let waits = stages::WaitSampler::start(&scratch, stages::database_name(&fx.db_url)).await?;
        let round_started = Instant::now();
        let (tps, create_rate) =
            throughput_round(&fx, &mut watcher, finished, tickets, clients, timeout, report).await?;
        let stages_line = format!(
            "bench process {:.0} µs/ticket; {}; {}",
            1e6 * (server::cpu_secs(std::process::id()) - bench_before) / tickets as f64,
            stages::describe(
                &stages_before,
                &stages::Snapshot::take(&fx).await?,
                round_started.elapsed()
            ),
            waits.finish().await?,
        );
        println!("  stages {}: {stages_line}", round + 1);
        stage_lines.push(stages_line);
        agentdesk_spend.push(PgSpend::now(&scratch).await?.since(before, tickets as i64));
        agentdesk_cpu.push((server::cpu_secs(fx.server.pid()) - process_before) / tickets as f64);
        agentdesk_tps.push(tps);
        create_rates.push(create_rate);
        let done_before = done_count(&scratch).await?;
        let before = PgSpend::now(&scratch).await?;
        // pgbench is this process's child: its CPU is counted here once it has been waited for.
        let pgbench_before = server::reaped_children_cpu_secs(std::process::id());
        let waits = stages::WaitSampler::start(&scratch, stages::database_name(&scratch)).await?;
        let runs = run_pgbench(pg_duration, Protocol::Prepared).await?;
        println!("  pgbench {}: {}", round + 1, waits.finish().await?);
        let done = done_count(&scratch).await? - done_before;
        pg_spend.push(PgSpend::now(&scratch).await?.since(before, done));
        pgbench_cpu.push((server::reaped_children_cpu_secs(std::process::id()) - pgbench_before) / done.max(1) as f64);
        let tps = done as f64 / pg_duration.as_secs_f64();
        pg_runs.push(runs);
        pg_tps.push(tps);
        // For comparison with earlier reports, whose baseline this was.
        let done_before = done_count(&scratch).await?;
        run_pgbench(pg_duration, Protocol::Simple).await?;
        let simple = (done_count(&scratch).await? - done_before) as f64 / pg_duration.as_secs_f64();
        simple_tps.push(simple);
        println!(
            "  round {}: agentdesk {:.0} tickets/s (created at {:.0}/s), pgbench {tps:.0} tickets/s (simple protocol: {simple:.0})",
            round + 1,
            agentdesk_tps[round],
            create_rates[round],
        );
    }
    let stats = fx.stats().await?;
    let server_kind = fx.server.describe();
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&agentdesk::db::connect(&fx.db_url, 1).await?)
        .await?;
    fx.shutdown().await;
    if let Some(received) = &receiver {
        let received = received.load(std::sync::atomic::Ordering::Relaxed);
        println!("  webhook: {received} deliveries received of {events} events");
        report.note(format!(
            "one webhook subscribed to every event: {received} deliveries received by the end of the last round, \
             of {events} events (delivery trails the desk; it never holds it up)"
        ));
        report.figure("webhook_deliveries", received);
    }

    // The same round once more with the default number of workers, on a new server warmed up alike.
    let default_spec = ServerSpec {
        workers: DEFAULT_WORKERS,
        ..spec
    };
    let fx = Fixture::start("throughput", &default_spec).await?;
    fx.fake.set_reply(close_ticket());
    let mut watcher = fx.done_watcher().await?;
    throughput_round(&fx, &mut watcher, 0, warm_up, clients, timeout, report).await?;
    let (default_tps, _) = throughput_round(&fx, &mut watcher, warm_up, tickets, clients, timeout, report).await?;
    fx.shutdown().await;
    println!("  one more round with {DEFAULT_WORKERS} workers (the default): agentdesk {default_tps:.0} tickets/s");

    let (a, p) = (median(&agentdesk_tps), median(&pg_tps));
    report.check(
        Check::new("agentdesk / pgbench tickets/s", a, "tickets/s", Bar::AtLeast, 0.6)
            .baseline("pgbench", p)
            .bar_on_ratio(),
    );
    report.check(
        Check::info("agentdesk / pgbench, simple protocol", a, "tickets/s")
            .baseline("pgbench -M simple", median(&simple_tps)),
    );
    report.check(Check::info(
        "tickets/s with the default workers (64)",
        default_tps,
        "tickets/s",
    ));
    let per_ticket = |spends: &[PgSpend], f: fn(&PgSpend) -> f64| median(&spends.iter().map(f).collect::<Vec<_>>());
    let cpu_us = |s: &PgSpend| s.cpu_s * 1e6;
    if per_ticket(&pg_spend, cpu_us) > 0.0 {
        report.check(
            Check::info("Postgres CPU per ticket", per_ticket(&agentdesk_spend, cpu_us), "µs")
                .baseline("pgbench", per_ticket(&pg_spend, cpu_us)),
        );
    }
    let micros = |secs: &[f64]| median(&secs.iter().map(|s| s * 1e6).collect::<Vec<_>>());
    report.check(
        Check::info(
            &format!(
                "{} CPU per ticket",
                if opts.child {
                    "agentdesk process"
                } else {
                    "bench process (agentdesk, clients, fake model)"
                }
            ),
            micros(&agentdesk_cpu),
            "µs",
        )
        .baseline("pgbench process", micros(&pgbench_cpu)),
    );
    let wal = |s: &PgSpend| s.wal_bytes;
    report.check(
        Check::info("WAL per ticket", per_ticket(&agentdesk_spend, wal), "bytes")
            .baseline("pgbench", per_ticket(&pg_spend, wal)),
    );
    report.figure("stages", json!(stage_lines));
    report.figure("workers", workers);
    report.figure("db_connections", db_connections);
    report.figure("agentdesk_tickets_per_s_default_workers", default_tps);
    report.figure("tickets_per_round", tickets);
    report.figure("clients", clients);
    report.figure("rounds", rounds);
    report.figure("agentdesk_tickets_per_s", json!(agentdesk_tps));
    report.figure("pgbench_tickets_per_s", json!(pg_tps));
    report.figure("pgbench_script_runs_per_s", json!(pg_runs));
    report.figure("pgbench_simple_protocol_tickets_per_s", json!(simple_tps));
    report.figure("create_rate_per_s", json!(create_rates));
    let rounded =
        |spends: &[PgSpend], f: fn(&PgSpend) -> f64| json!(spends.iter().map(|s| f(s).round()).collect::<Vec<_>>());
    report.figure("postgres_cpu_us_per_ticket", rounded(&agentdesk_spend, cpu_us));
    report.figure("pgbench_postgres_cpu_us_per_ticket", rounded(&pg_spend, cpu_us));
    report.figure("wal_bytes_per_ticket", rounded(&agentdesk_spend, wal));
    report.figure("pgbench_wal_bytes_per_ticket", rounded(&pg_spend, wal));
    report.figure("warm_up_agentdesk_tickets_per_s", warm_tps);
    report.figure("warm_up_pgbench_script_runs_per_s", warm_runs);
    report.figure("avg_ticket_ms", stats["avg_ticket_ms"].clone());
    report.figure("done", stats["by_status"]["done"].clone());
    report.note(format!(
        "agentdesk ran {server_kind}, with {workers} workers (AGENTDESK_WORKERS: tickets in flight) and {db_connections} DB connections; one model request per ticket, answered at once with close_ticket"
    ));
    report.note(format!(
        "with the default {DEFAULT_WORKERS} workers a ticket's round trips (HTTP, model, Postgres) leave part of the CPU idle: one more round on a new server with that setting is shown for information"
    ));
    report.note(format!(
        "both sides warm up unmeasured first: {warm_up} agentdesk tickets, then pgbench for {} s",
        warm_pg.as_secs()
    ));
    report.note(
        "Postgres CPU = utime+stime of the server's postgres processes (exited backends through the postmaster's children's times) over a round, per ticket finished; WAL = pg_current_wal_lsn() advance over the round, per ticket; medians of the rounds",
    );
    report.note(format!(
        "pgbench: {clients} clients, {} s per round with prepared statements (-M prepared, like agentdesk's: the bar's baseline), then as long with the simple protocol (pgbench's default, the baseline of reports before 2026-11-26: every statement parsed and planned anew); tickets/s = tickets it finished / duration, script in bench-results/throughput.pgbench.sql, same server, a scratch database with agentdesk's schema",
        pg_duration.as_secs()
    ));
    Ok(())
}

async fn done_count(db_url: &str) -> Result<i64> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE status = 'done'")
        .fetch_one(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(n)
}

/// A receiver that answers every POST with 200 at once, and an endpoint subscribed to every event
/// pointing at it; returns the count of deliveries received.
async fn webhook_receiver(fx: &Fixture) -> Result<std::sync::Arc<std::sync::atomic::AtomicU64>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            async { "" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let response = fx
        .http
        .post(format!("{}/v1/webhooks", fx.url))
        .json(&json!({ "url": url }))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "creating the webhook: {}",
        response.status()
    );
    Ok(received)
}
