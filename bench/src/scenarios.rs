//! The scenarios, one function each. Each fills a [`Report`]; an `Err` means the scenario could
//! not run to the end (the report says so instead of a figure).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use testkit::fake_llm::Reply;
use tokio::sync::{watch, Semaphore};

use crate::floor::Floor;
use crate::harness::{self, DoneWatcher, Fixture, Progress};
use crate::pgbench::{self, Protocol};
use crate::report::{median, percentile, Bar, Check, Report};
use crate::server::{self, ServerSpec};
use crate::sse::{self, SseConn};
use crate::stages;

/// Latency first, on a quiet machine; the 10 000-connection fan-out last, as tearing down its
/// connections disturbs whatever runs right after it.
pub const ALL: [&str; 10] = [
    "api_latency",
    "throughput",
    "claim_backlog",
    "fair_share",
    "retention_sweep",
    "quiet_desk",
    "scale_out",
    "concurrency",
    "step_overhead",
    "sse_fanout",
];

/// Options shared by all scenarios.
#[derive(Clone, Copy, Debug, Default)]
pub struct Opts {
    pub quick: bool,
    /// Run every scenario against the `agentdesk` binary as a child process.
    pub child: bool,
    /// `--workers`: tickets in flight per process (AGENTDESK_WORKERS), instead of the scenario's.
    pub workers: Option<usize>,
    /// `--db-connections`: pooled connections per process (AGENTDESK_DB_MAX_CONNECTIONS).
    pub db_connections: Option<u32>,
    /// `--clients`: concurrent HTTP clients creating tickets.
    pub clients: Option<usize>,
    /// `--rate`: tickets per second for the fixed-rate scenarios.
    pub rate: Option<f64>,
    /// Throughput with one webhook subscribed to every event.
    pub webhook: bool,
    /// `--minutes`: how long the soak runs.
    pub minutes: Option<f64>,
    /// `--pg-seconds`: how long each of throughput's pgbench runs lasts.
    pub pg_seconds: Option<f64>,
    /// `--tickets`: tickets in flight in concurrency.
    pub tickets: Option<usize>,
    /// `--first-token-secs`: how long concurrency's model thinks before its first token.
    pub first_token_secs: Option<f64>,
    /// `--http1`: concurrency's model requests over HTTP/1.1, a connection each.
    pub http1: bool,
    /// `--kill`: concurrency kills the process while every ticket waits, and starts another.
    pub kill: bool,
    /// `--subscribers`: readers of the whole event stream beside concurrency's work.
    pub subscribers: Option<usize>,
}

impl Opts {
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

pub async fn run(name: &str, opts: Opts, report: &mut Report) -> Result<()> {
    match name {
        "throughput" => throughput(opts, report).await,
        "claim_backlog" => crate::backlog::claim_backlog(opts, report).await,
        "fair_share" => crate::fair_share::fair_share(opts, report).await,
        "concurrency" => crate::concurrency::run(opts, report).await,
        "sse_fanout" => sse_fanout(opts, report).await,
        "api_latency" => api_latency(opts, report).await,
        "step_overhead" => step_overhead(opts, report).await,
        "scale_out" => crate::scaling::scale_out(opts, report).await,
        "quiet_desk" => crate::scaling::quiet_desk(opts, report).await,
        "retention_sweep" => crate::retention::retention_sweep(opts, report).await,
        "soak" => crate::soak::soak(opts, report).await,
        other => bail!("unknown scenario {other:?}"),
    }
}

pub fn close_ticket() -> Reply {
    Reply::tool_call("close_ticket", json!({"result": "ok"}))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

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
async fn throughput(opts: Opts, report: &mut Report) -> Result<()> {
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

/// What Postgres has spent so far, or per ticket between two readings: CPU seconds of the
/// server's processes (0 when it runs elsewhere) and WAL bytes, cluster-wide.
#[derive(Clone, Copy)]
pub struct PgSpend {
    pub cpu_s: f64,
    pub wal_bytes: f64,
}

impl PgSpend {
    pub async fn now(db_url: &str) -> Result<PgSpend> {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(db_url).await?;
        let (wal, backend): (i64, i32) =
            sqlx::query_as("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, pg_backend_pid()")
                .fetch_one(&mut c)
                .await?;
        // The server's processes when it runs on this machine (a backend's parent is its
        // postmaster), so that another server here (a test suite's) is not counted; else every
        // postgres process visible (none, for a remote server).
        let cpu_s = match server::parent(backend as u32) {
            Some(postmaster) => server::cluster_cpu_secs(postmaster),
            None => server::postgres_cpu_secs(),
        };
        let _ = c.close().await;
        Ok(PgSpend {
            cpu_s,
            wal_bytes: wal as f64,
        })
    }

    pub fn since(self, before: PgSpend, tickets: i64) -> PgSpend {
        let n = tickets.max(1) as f64;
        PgSpend {
            cpu_s: (self.cpu_s - before.cpu_s) / n,
            wal_bytes: (self.wal_bytes - before.wal_bytes) / n,
        }
    }
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

/// Idle subscribers' memory, then event latency to every subscriber while tickets run.
async fn sse_fanout(opts: Opts, report: &mut Report) -> Result<()> {
    let wanted = opts.pick(500, 10_000);
    let fd_limit = harness::raise_fd_limit();
    // One ticket a second makes about 10 persisted events a second (each one-step ticket logs
    // about ten): 100 000 receipts a second at 10 000 subscribers, which the bench can read
    // without taking the machine from the server it measures (its CPU share is reported).
    let (rate, seconds) = (opts.pick(1.0, 1.0), opts.pick(3.0, 15.0));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: 64,
        db_max_connections: 16,
        child: true,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let progress = Progress::new();
    let fx = Fixture::start("sse_fanout", &spec).await?;
    progress.say("agentdesk started");
    fx.fake.set_reply(close_ticket());
    let pid = fx.server.pid();

    // Warm up, so lazily built state does not count against the subscribers.
    let mut watcher = fx.done_watcher().await?;
    fx.create_tickets(20, 4, json!({"task": "warm up"})).await?;
    let warm_done = watcher.wait_for(20, Duration::from_secs(20)).await.is_ok();
    drop(watcher);
    progress.say(if warm_done {
        "warm-up tickets done"
    } else {
        "warm-up tickets did not finish"
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = server::rss_mb(pid);

    let connect_started = Instant::now();
    let fleet = Fleet::connect(fx.addr, wanted).await;
    let connect_s = connect_started.elapsed().as_secs_f64();
    let open = fleet.open();
    progress.say(format!("{open} of {wanted} subscribers connected"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = server::rss_mb(pid);
    let per_sub_kb = if open > 0 {
        (rss_idle - rss_before) * 1024.0 / open as f64
    } else {
        f64::NAN
    };

    // Tickets at a steady rate; every subscriber measures each event it receives.
    fleet.start_measuring();
    let total = (rate * seconds) as usize;
    let started = Instant::now();
    let cpu_start = (server::cpu_secs(pid), server::cpu_secs(std::process::id()));
    let mut watcher = fx.done_watcher().await?;
    for i in 0..total {
        tokio::time::sleep_until((started + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        fx.create_ticket(&json!({"task": format!("fan-out ticket {i}")}))
            .await?;
    }
    progress.say(format!("{total} tickets created"));
    // Let the last tickets finish (or, without workers, their events arrive).
    let _ = watcher.wait_for(total, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let measured_s = started.elapsed().as_secs_f64();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_share = |start: f64, end: f64| ((end - start) / measured_s / cpus * 1000.0).round() / 1000.0;
    let server_cpu = cpu_share(cpu_start.0, server::cpu_secs(pid));
    let bench_cpu = cpu_share(cpu_start.1, server::cpu_secs(std::process::id()));
    let (latencies, errors, chunks) = fleet.stop().await?;
    progress.say("subscribers stopped");
    let hwm_mb = server::status_kb(pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;
    report.note(format!("agentdesk: {}", fx.server.describe()));
    fx.shutdown().await;
    progress.say("agentdesk stopped");

    // The floor, with the same subscribers: one chunk of ten events a second to every connection
    // (agentdesk's one-step tickets log about ten events each, in one to two chunks).
    let floor = Floor::start(rate, 10).await?;
    let floor_fleet = Fleet::connect(floor.addr, wanted).await;
    progress.say(format!(
        "{} subscribers connected to the fan-out floor",
        floor_fleet.open()
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    floor_fleet.start_measuring();
    let floor_cpu_start = server::cpu_secs(floor.pid());
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let floor_cpu = (server::cpu_secs(floor.pid()) - floor_cpu_start) / seconds / cpus;
    let (floor_latencies, floor_errors, _) = floor_fleet.stop().await?;
    drop(floor);
    progress.say("fan-out floor stopped");
    let floor_ms: Vec<f64> = floor_latencies.iter().map(|us| *us as f64 / 1000.0).collect();

    let lat_ms: Vec<f64> = latencies.iter().map(|us| *us as f64 / 1000.0).collect();
    let (p50, p99, max) = (
        percentile(&lat_ms, 50.0),
        percentile(&lat_ms, 99.0),
        percentile(&lat_ms, 100.0),
    );
    report.check(Check::new(
        "subscribers open",
        open as f64,
        "",
        Bar::AtLeast,
        wanted as f64,
    ));
    report.check(
        Check::new("p99 commit→receipt", p99, "ms", Bar::Below, 100.0)
            .baseline("fan-out floor p99", percentile(&floor_ms, 99.0)),
    );
    report.check(Check::new(
        "memory per idle subscriber",
        per_sub_kb,
        "KB",
        Bar::Below,
        20.0,
    ));
    report.figure("p50_ms", p50);
    report.figure("max_ms", max);
    report.figure("receipts", lat_ms.len());
    report.figure("receipts_per_s", (lat_ms.len() as f64 / measured_s).round());
    if !lat_ms.is_empty() {
        // Server writes (HTTP chunks) per event received: below 1 when bursts share a write.
        let per_event = chunks as f64 / lat_ms.len() as f64;
        report.figure("chunks_per_event", (per_event * 1000.0).round() / 1000.0);
    }
    if open > 0 {
        let events = lat_ms.len() as f64 / open as f64;
        report.figure("events_per_subscriber", events.round());
        report.figure("events_per_s", (events / measured_s * 10.0).round() / 10.0);
    }
    report.figure("measured_s", (measured_s * 10.0).round() / 10.0);
    report.figure("agentdesk_cpu_share", server_cpu);
    report.figure("bench_cpu_share", bench_cpu);
    report.figure("tickets", total);
    report.figure("ticket_rate_per_s", rate);
    report.figure("connect_s", (connect_s * 100.0).round() / 100.0);
    report.figure("rss_before_mb", rss_before);
    report.figure("rss_idle_subscribers_mb", rss_idle);
    report.figure("peak_rss_mb", hwm_mb);
    report.figure("fd_limit", fd_limit);
    report.figure("floor_p50_ms", percentile(&floor_ms, 50.0));
    report.figure("floor_max_ms", percentile(&floor_ms, 100.0));
    report.figure("floor_receipts", floor_ms.len());
    report.figure("floor_cpu_share", (floor_cpu * 1000.0).round() / 1000.0);
    report.figure("floor_subscriber_errors", floor_errors.len());
    report.figure("subscriber_errors", errors.len());
    if let Some(e) = errors.first() {
        report.note(format!("first subscriber error: {e}"));
    }
    if !warm_done {
        report.note("the warm-up tickets did not finish (no workers?); only ticket.created events were measured");
    }
    report.note(
        "latency = receipt time minus the event's `at` (Postgres now() of the writing transaction, i.e. its start: an upper bound of commit→receipt), same machine clock; the bench's own reading of every socket is included",
    );
    report.note(
        "cpu shares = utime+stime over the measured window / (window × CPUs), from /proc/<pid>/stat: agentdesk_cpu_share for the agentdesk child, bench_cpu_share for the bench process (subscribers, ticket creation, fake model)",
    );
    report.note("memory = the agentdesk child's VmRSS after connecting the idle subscribers minus before, divided by their count");
    report.note(
        "baseline = the fan-out floor: a bare tokio TCP server (child process `agentdesk-bench __fanout_floor`) writing one chunk of ten event frames a second, stamped when written, to the same number of subscribers read by the same client code; no HTTP framework, database or filtering, so its p99 is what the TCP writes and reads alone cost on this machine",
    );
    Ok(())
}

/// SSE subscribers on `/v1/events`, connected from a few tasks, a bounded number of handshakes
/// at a time; each records the latency of every event it receives once measuring starts.
/// What a group of subscribers saw: latencies in µs, errors, and HTTP chunks read.
type Seen = (Vec<i64>, Vec<String>, usize);

struct Fleet {
    tasks: Vec<tokio::task::JoinHandle<Seen>>,
    stop: watch::Sender<bool>,
    measure: watch::Sender<bool>,
    connected: Arc<std::sync::atomic::AtomicUsize>,
}

impl Fleet {
    /// Connects `wanted` subscribers; returns once all are connected or none connected for 10 s.
    async fn connect(addr: std::net::SocketAddr, wanted: usize) -> Fleet {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (measure_tx, measure_rx) = watch::channel(false);
        let handshakes = Arc::new(Semaphore::new(256));
        let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let groups = 4;
        let mut tasks = vec![];
        for g in 0..groups {
            let count = wanted / groups + usize::from(g < wanted % groups);
            let (stop, measure, handshakes, connected) = (
                stop_rx.clone(),
                measure_rx.clone(),
                handshakes.clone(),
                connected.clone(),
            );
            tasks.push(tokio::spawn(async move {
                use futures::stream::{FuturesUnordered, StreamExt};
                let mut subs = FuturesUnordered::new();
                for _ in 0..count {
                    let (stop, measure, handshakes, connected) =
                        (stop.clone(), measure.clone(), handshakes.clone(), connected.clone());
                    subs.push(subscriber(addr, stop, measure, handshakes, connected));
                }
                let (mut latencies, mut errors, mut chunks) = (Vec::new(), Vec::new(), 0);
                while let Some(r) = subs.next().await {
                    match r {
                        Ok((mut l, c)) => {
                            latencies.append(&mut l);
                            chunks += c;
                        }
                        Err(e) => errors.push(format!("{e:#}")),
                    }
                }
                (latencies, errors, chunks)
            }));
        }
        let fleet = Fleet {
            tasks,
            stop: stop_tx,
            measure: measure_tx,
            connected,
        };
        let (mut last, mut last_change) = (0, Instant::now());
        loop {
            let n = fleet.open();
            if n >= wanted || fleet.tasks.iter().all(|t| t.is_finished()) {
                break;
            }
            if n != last {
                (last, last_change) = (n, Instant::now());
            } else if last_change.elapsed() > Duration::from_secs(10) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fleet
    }

    fn open(&self) -> usize {
        self.connected.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn start_measuring(&self) {
        self.measure.send_replace(true);
    }

    /// Stops every subscriber: (latencies in µs, errors, HTTP chunks read).
    async fn stop(self) -> Result<Seen> {
        self.stop.send_replace(true);
        let (mut latencies, mut errors, mut chunks) = (Vec::new(), Vec::new(), 0);
        for t in self.tasks {
            let (mut l, mut e, c) = tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .context("subscribers did not stop within 30 s")??;
            latencies.append(&mut l);
            errors.append(&mut e);
            chunks += c;
        }
        Ok((latencies, errors, chunks))
    }
}

/// One subscriber: connect, then (once measuring) record each event's latency until stopped.
async fn subscriber(
    addr: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
    measure: watch::Receiver<bool>,
    handshakes: Arc<Semaphore>,
    connected: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<(Vec<i64>, usize)> {
    let mut conn = {
        let _permit = handshakes.acquire().await?;
        tokio::time::timeout(Duration::from_secs(10), SseConn::connect(addr, "/v1/events"))
            .await
            .context("connect timed out")??
    };
    connected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut latencies = Vec::new();
    // Created once: a fresh `wait_for` per receipt would register with the watch channel's waiter
    // list, shared by all 10 000 subscribers, every time.
    let stopped = stop.wait_for(|s| *s);
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => return Ok((latencies, conn.chunks)),
            event = conn.next_event() => match event? {
                None => return Ok((latencies, conn.chunks)),
                Some(e) => {
                    if *measure.borrow() {
                        if let Some(at) = e.at_us {
                            latencies.push(sse::now_us() - at);
                        }
                    }
                }
            }
        }
    }
}

/// Open-loop `POST /v1/tickets` at a fixed rate, latency from each planned send time; baseline:
/// the same schedule on `GET /healthz`. Workers are idle (API mode).
async fn api_latency(opts: Opts, report: &mut Report) -> Result<()> {
    let rate = opts.pick(200.0, 500.0);
    let seconds = opts.pick(2.0, 10.0);
    let spec = ServerSpec {
        mode: Mode::Api,
        workers: 0,
        db_max_connections: 16,
        child: opts.child,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = Fixture::start("api_latency", &spec).await?;
    let body = json!({"task": "triage this", "labels": ["nobody"], "metadata": {"source": "bench"}});

    // Warm-up at the same rate: connections, prepared statements, allocator.
    open_loop(&fx, rate, opts.pick(0.5, 2.0), Target::Create(&body)).await?;
    let baseline = open_loop(&fx, rate, opts.pick(1.0, 5.0), Target::Health).await?;
    let create = open_loop(&fx, rate, seconds, Target::Create(&body)).await?;
    report.note(format!("agentdesk (API mode): {}", fx.server.describe()));
    fx.shutdown().await;

    let (p50, p99, max) = (
        percentile(&create.ms, 50.0),
        percentile(&create.ms, 99.0),
        percentile(&create.ms, 100.0),
    );
    report.check(
        Check::new("POST /v1/tickets p99", p99, "ms", Bar::Below, 10.0)
            .baseline("GET /healthz p99", percentile(&baseline.ms, 99.0)),
    );
    report.figure("p50_ms", p50);
    report.figure("max_ms", max);
    report.figure("requests", create.ms.len());
    report.figure("errors", create.errors);
    report.figure("rate_per_s", rate);
    report.figure("seconds", seconds);
    report.figure("healthz_p50_ms", percentile(&baseline.ms, 50.0));
    report.figure("healthz_max_ms", percentile(&baseline.ms, 100.0));
    if create.errors > 0 {
        report.note(format!(
            "{} requests failed; counted at the timeout (10 s)",
            create.errors
        ));
    }
    report.note("open loop: each request is sent at its planned time whatever the earlier ones do; latency runs from the planned time to the end of the response body (reqwest client, pooled connections)");
    Ok(())
}

enum Target<'a> {
    Create(&'a Value),
    Health,
}

struct Latencies {
    ms: Vec<f64>,
    errors: usize,
}

async fn open_loop(fx: &Fixture, rate: f64, seconds: f64, target: Target<'_>) -> Result<Latencies> {
    let n = (rate * seconds) as usize;
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let body = match target {
        Target::Create(b) => Some(Arc::new(b.clone())),
        Target::Health => None,
    };
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let planned = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(planned).await;
        let (http, url, body) = (fx.http.clone(), fx.url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let request = match &body {
                Some(b) => http.post(format!("{url}/v1/tickets")).json(&**b),
                None => http.get(format!("{url}/healthz")),
            };
            let ok = match tokio::time::timeout(Duration::from_secs(10), async {
                let r = request.send().await?;
                let status = r.status();
                r.bytes().await?;
                anyhow::Ok(status.is_success())
            })
            .await
            {
                Ok(Ok(ok)) => ok,
                _ => false,
            };
            (planned.elapsed(), ok)
        }));
    }
    let mut out = Latencies {
        ms: Vec::with_capacity(n),
        errors: 0,
    };
    for t in tasks {
        let (elapsed, ok) = t.await?;
        out.ms.push(ms(elapsed));
        if !ok {
            out.errors += 1;
        }
    }
    Ok(out)
}

/// CPU time of the agentdesk process per agent step (one model request and its tool call),
/// with the model answering at once: S−1 read_tickets calls, then close_ticket.
async fn step_overhead(opts: Opts, report: &mut Report) -> Result<()> {
    let (tickets, steps, rounds) = (opts.pick(20, 200), 5usize, opts.pick(1, 3));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: 64,
        db_max_connections: 16,
        child: true,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = Fixture::start("step_overhead", &spec).await?;
    fx.fake.set_responder(move |req| {
        let tool_results = req["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
            .unwrap_or(0);
        if tool_results + 1 < steps {
            Reply::tool_call("read_tickets", json!({"action": "list", "status": "done"}))
        } else {
            close_ticket()
        }
    });
    let pid = fx.server.pid();
    let me = std::process::id();

    // The idle cost of the service (pollers, lease renewals), to correct the figure with.
    let (c0, t0) = (server::cpu_secs(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(opts.pick(1, 3))).await;
    let idle_cpu_per_s = (server::cpu_secs(pid) - c0) / t0.elapsed().as_secs_f64();

    let mut watcher = fx.done_watcher().await?;
    let (mut gross_us, mut net_us, mut fake_us, mut walls) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let label = format!("steps{round}");
        fx.create_tickets(
            tickets,
            8,
            json!({"task": "look around, then close", "labels": [label]}),
        )
        .await?;
        let requests_before = fx.fake.request_count();
        let (cpu0, fake0, started) = (server::cpu_secs(pid), server::cpu_secs(me), Instant::now());
        fx.put_agent(&label).await?;
        let (_, failed) = watcher
            .wait_for((round + 1) * tickets, Duration::from_secs(opts.pick(60, 300)))
            .await?;
        let wall = started.elapsed().as_secs_f64();
        let (cpu, fake_cpu) = (server::cpu_secs(pid) - cpu0, server::cpu_secs(me) - fake0);
        let requests = (fx.fake.request_count() - requests_before) as f64;
        if failed > 0 {
            report.note(format!("round {}: {failed} tickets failed", round + 1));
        }
        if requests < 1.0 {
            bail!("the model received no requests");
        }
        gross_us.push(cpu / requests * 1e6);
        net_us.push((cpu - idle_cpu_per_s * wall).max(0.0) / requests * 1e6);
        fake_us.push(fake_cpu / requests * 1e6);
        walls.push(wall);
        println!(
            "  round {}: {requests:.0} steps in {wall:.2} s, agentdesk {:.0} µs/step, bench (fake model) {:.0} µs/step",
            round + 1,
            gross_us[round],
            fake_us[round]
        );
    }
    report.note(format!("agentdesk: {}", fx.server.describe()));
    fx.shutdown().await;

    report.check(
        Check::info("agentdesk CPU per step", median(&gross_us), "µs")
            .baseline("fake model CPU/request", median(&fake_us)),
    );
    report.figure("net_of_idle_us_per_step", json!(net_us));
    report.figure("gross_us_per_step", json!(gross_us));
    report.figure("bench_process_us_per_step", json!(fake_us));
    report.figure("idle_cpu_ms_per_s", idle_cpu_per_s * 1000.0);
    report.figure("tickets_per_round", tickets);
    report.figure("steps_per_ticket", steps);
    report.figure("wall_s", json!(walls));
    report.note(format!(
        "agentdesk ran as a child process; CPU = utime+stime from /proc/<pid>/stat over the round, divided by the model requests; a step = one model request plus its tool call ({} read_tickets steps, then close_ticket); ticket creation is outside the measured window",
        steps - 1
    ));
    report.note("the baseline is the bench process's CPU per request: the fake model server, the completion watcher and the agent PUT");
    Ok(())
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
