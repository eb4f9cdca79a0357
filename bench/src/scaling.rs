//! Scenarios about how the desk grows and idles:
//! - `scale_out`: one database, 1, 2 and 4 worker processes (and then two API processes), each
//!   the real `agentdesk` binary: tickets/s, CPU per ticket of agentdesk and of Postgres, and the
//!   database connections each process holds.
//! - `quiet_desk`: tickets arriving at a fixed, modest rate (`--rate`, default 200/s) instead of as
//!   fast as they can be made: what a ticket costs in CPU when batches are small, beside the
//!   saturated figure of the same run.

use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{Context, Result};
use serde_json::json;
use sqlx::Connection;
use testkit::fake_llm::FakeLlm;

use crate::harness::close_ticket;
use crate::harness::{self, Progress};
use crate::opts::Opts;
use crate::pg_spend::PgSpend;
use crate::report::{median, Check, Report};
use crate::server::{self, Server, ServerSpec};

/// Tickets in flight per worker process: enough for one process to keep the machine busy alone.
const WORKERS_PER_PROCESS: usize = 256;

/// The topologies measured: (API processes, worker processes).
const TOPOLOGIES: [(usize, usize); 4] = [(1, 1), (1, 2), (1, 4), (2, 4)];

/// Several processes on one database, the fake model in this process.
struct Fleet {
    apis: Vec<Server>,
    workers: Vec<Server>,
    db_url: String,
    fake: FakeLlm,
    http: reqwest::Client,
}

impl Fleet {
    async fn start(apis: usize, workers: usize, opts: &Opts) -> Result<Fleet> {
        let db_url = testkit::testing::fresh_database().await?;
        {
            // Migrated once, before the processes start together.
            let pool = agentdesk::db::connect(&db_url, 2).await?;
            agentdesk::db::migrate(&pool).await?;
            pool.close().await;
        }
        let fake = FakeLlm::start().await;
        fake.keep_requests(false);
        fake.set_reply(close_ticket());
        let spec = |mode| ServerSpec {
            mode,
            workers: opts.workers.unwrap_or(WORKERS_PER_PROCESS),
            db_max_connections: opts.db_connections.unwrap_or(16),
            child: true,
            retention: None,
            claimers: None,
            shutdown_grace: None,
            model_http2: false,
            stream_idle: None,
        };
        let dir = harness::results_dir();
        let mut fleet = Fleet {
            apis: vec![],
            workers: vec![],
            db_url,
            fake,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .timeout(Duration::from_secs(30))
                .build()?,
        };
        for i in 0..apis {
            let log = dir.join(format!("scale_out.api{i}.log"));
            let api = Server::start(&spec(Mode::Api), &fleet.db_url, &fleet.fake.openai_base_url(), &log).await?;
            fleet.apis.push(api);
        }
        for i in 0..workers {
            let log = dir.join(format!("scale_out.worker{i}.log"));
            let worker = Server::start(&spec(Mode::Worker), &fleet.db_url, &fleet.fake.openai_base_url(), &log).await?;
            fleet.workers.push(worker);
        }
        Ok(fleet)
    }

    fn pids(&self) -> Vec<u32> {
        self.apis.iter().chain(&self.workers).map(Server::pid).collect()
    }

    fn cpu_secs(&self) -> f64 {
        self.pids().into_iter().map(server::cpu_secs).sum()
    }

    /// Creates `n` tickets from `clients` clients spread over the API processes, then waits until
    /// all are done; returns tickets/s over the whole.
    async fn round(&self, n: usize, clients: usize, done_before: i64, timeout: Duration) -> Result<f64> {
        let started = Instant::now();
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = vec![];
        for c in 0..clients {
            let url = self.apis[c % self.apis.len()].url();
            let (http, next) = (self.http.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    let r = http
                        .post(format!("{url}/v1/tickets"))
                        .json(&json!({"task": "say ok"}))
                        .send()
                        .await?;
                    anyhow::ensure!(r.status().as_u16() == 201, "POST /v1/tickets answered {}", r.status());
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let target = done_before + n as i64;
        loop {
            if done_count(&self.db_url).await? >= target {
                break;
            }
            anyhow::ensure!(started.elapsed() < timeout, "timed out waiting for {n} tickets");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(n as f64 / started.elapsed().as_secs_f64())
    }

    async fn shutdown(self) {
        for s in self.apis.into_iter().chain(self.workers) {
            s.shutdown().await;
        }
    }
}

async fn done_count(db_url: &str) -> Result<i64> {
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE status IN ('done', 'failed')")
        .fetch_one(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(n)
}

/// Connections to the database other than the asker's, now.
async fn connections(db_url: &str) -> Result<i64> {
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let n = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut c)
    .await?;
    let _ = c.close().await;
    Ok(n)
}

pub async fn scale_out(opts: Opts, report: &mut Report) -> Result<()> {
    let (tickets, rounds) = (opts.pick(300, 3000), opts.pick(1, 2));
    let clients = opts.clients.unwrap_or(32);
    let timeout = Duration::from_secs(opts.pick(60, 300));
    let topologies: &[(usize, usize)] = if opts.quick { &TOPOLOGIES[..2] } else { &TOPOLOGIES };
    let progress = Progress::new();
    let mut first_tps = None;
    let mut table = vec![];
    for &(apis, workers) in topologies {
        let fleet = Fleet::start(apis, workers, &opts)
            .await
            .with_context(|| format!("starting {apis} API and {workers} worker processes"))?;
        // Warm-up, unmeasured: plans, caches and relations settle.
        fleet.round(tickets / 3, clients, 0, timeout).await?;
        let mut done = done_count(&fleet.db_url).await?;
        let (mut tps, mut cpu, mut pg_cpu, mut conns) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (cpu_before, pg_before) = (fleet.cpu_secs(), PgSpend::now(&fleet.db_url).await?);
            tps.push(fleet.round(tickets, clients, done, timeout).await?);
            // Read right after the round, while every process still holds what it used.
            conns.push(connections(&fleet.db_url).await? as f64);
            cpu.push((fleet.cpu_secs() - cpu_before) / tickets as f64 * 1e6);
            pg_cpu.push(
                PgSpend::now(&fleet.db_url)
                    .await?
                    .since(pg_before, tickets as i64)
                    .cpu_s
                    * 1e6,
            );
            done += tickets as i64;
        }
        fleet.shutdown().await;
        let (t, c, p, n) = (median(&tps), median(&cpu), median(&pg_cpu), median(&conns));
        let processes = (apis + workers) as f64;
        progress.say(format!(
            "{apis} API + {workers} worker processes: {t:.0} tickets/s, agentdesk {c:.0} µs and Postgres {p:.0} µs CPU per ticket, {n:.0} connections ({:.1} per process)",
            n / processes
        ));
        let label = format!("{apis} API + {workers} worker processes");
        let base = *first_tps.get_or_insert(t);
        report.check(Check::info(&format!("{label}: tickets/s"), t, "tickets/s").baseline("1 API + 1 worker", base));
        report.check(Check::info(&format!("{label}: agentdesk CPU per ticket"), c, "µs"));
        report.check(Check::info(&format!("{label}: Postgres CPU per ticket"), p, "µs"));
        report.check(Check::info(
            &format!("{label}: connections per process"),
            n / processes,
            "connections",
        ));
        table.push(
            json!({"api_processes": apis, "worker_processes": workers, "tickets_per_s": tps,
            "agentdesk_cpu_us_per_ticket": cpu, "postgres_cpu_us_per_ticket": pg_cpu, "connections": conns}),
        );
    }
    report.figure("topologies", json!(table));
    report.figure("tickets_per_round", tickets);
    report.figure("clients", clients);
    report.note(format!(
        "each process is the agentdesk binary (`api` or `worker`) on one fresh database, {} workers and {} pooled connections per process; {clients} HTTP clients spread over the API processes; one model request per ticket, answered at once with close_ticket; a third of a round of warm-up first; tickets/s = tickets / (first request → last done), medians of {rounds} rounds",
        opts.workers.unwrap_or(WORKERS_PER_PROCESS),
        opts.db_connections.unwrap_or(16)
    ));
    report.note("agentdesk CPU = utime+stime of all its processes over a round, per ticket; Postgres CPU as in throughput; connections = pg_stat_activity on the database right after a round (idle pooled connections included), over the number of processes");
    Ok(())
}

pub async fn quiet_desk(opts: Opts, report: &mut Report) -> Result<()> {
    let rate = opts.rate.unwrap_or(200.0);
    let seconds = opts.pick(5.0, 20.0);
    let n = (rate * seconds) as usize;
    let timeout = Duration::from_secs(opts.pick(60, 300));
    let clients = opts.clients.unwrap_or(16);
    // One process runs both the API and the workers: `serve`.
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: opts.workers.unwrap_or(64),
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: true,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = harness::Fixture::start("quiet_desk", &spec).await?;
    fx.fake.set_reply(close_ticket());
    Statements::enable(&fx.db_url).await;
    let pid = fx.server.pid();
    let mut watcher = fx.done_watcher().await?;

    // Saturated: as fast as `clients` clients can make them.
    fx.create_tickets(n / 2, clients, json!({"task": "say ok"})).await?;
    watcher.wait_for(n / 2, timeout).await?;
    let sat_statements0 = Statements::now(&fx.db_url).await;
    let (cpu0, pg0) = (server::cpu_secs(pid), PgSpend::now(&fx.db_url).await?);
    let started = Instant::now();
    fx.create_tickets(n, clients, json!({"task": "say ok"})).await?;
    watcher.wait_for(n / 2 + n, timeout).await?;
    let saturated_tps = n as f64 / started.elapsed().as_secs_f64();
    let sat_cpu = (server::cpu_secs(pid) - cpu0) / n as f64 * 1e6;
    let sat_pg = PgSpend::now(&fx.db_url).await?.since(pg0, n as i64).cpu_s * 1e6;
    let sat_statements = Statements::now(&fx.db_url).await.since(&sat_statements0, n);

    // Quiet: the same number of tickets at a fixed rate, each sent at its planned time.
    let quiet_statements0 = Statements::now(&fx.db_url).await;
    let (cpu0, pg0) = (server::cpu_secs(pid), PgSpend::now(&fx.db_url).await?);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let (http, url) = (fx.http.clone(), fx.url.clone());
        tasks.push(tokio::spawn(async move {
            http.post(format!("{url}/v1/tickets"))
                .json(&json!({"task": "say ok"}))
                .send()
                .await
                .map(|r| r.status().as_u16() == 201)
                .unwrap_or(false)
        }));
    }
    let mut refused = 0;
    for t in tasks {
        if !t.await? {
            refused += 1;
        }
    }
    watcher.wait_for(n / 2 + 2 * n - refused, timeout).await?;
    let quiet_cpu = (server::cpu_secs(pid) - cpu0) / n as f64 * 1e6;
    let quiet_pg = PgSpend::now(&fx.db_url).await?.since(pg0, n as i64).cpu_s * 1e6;
    let quiet_statements = Statements::now(&fx.db_url).await.since(&quiet_statements0, n);
    fx.shutdown().await;
    // The floor's figures: what pgbench's ticket costs saturated and at the same rate.
    let floor = match crate::pgbench::find_pgbench() {
        Some(pgbench) => Some(pgbench_quiet(&pgbench, rate, seconds, clients).await?),
        None => None,
    };
    if let Some(table) = Statements::table(&quiet_statements, &sat_statements) {
        println!("{}", table.text);
        report.figure("statements_per_ticket", table.json);
    }

    report.check(Check::info("saturated tickets/s", saturated_tps, "tickets/s"));
    report.check(Check::info("quiet: agentdesk CPU per ticket", quiet_cpu, "µs").baseline("saturated", sat_cpu));
    report.check(Check::info("quiet: Postgres CPU per ticket", quiet_pg, "µs").baseline("saturated", sat_pg));
    report.check(
        Check::new(
            "quiet: total CPU per ticket",
            quiet_cpu + quiet_pg,
            "µs",
            crate::report::Bar::AtMost,
            1.5,
        )
        .baseline("saturated", sat_cpu + sat_pg)
        .bar_on_ratio(),
    );
    if let Some((saturated, quiet)) = floor {
        report.check(
            Check::info("pgbench: quiet total CPU per ticket", quiet, "µs").baseline("pgbench saturated", saturated),
        );
        report.note("pgbench: the throughput scenario's script (a ticket's life in three transactions) on a scratch database of the same server (script in bench-results/throughput.pgbench.sql), 16 connections as fast as they go, then at the same rate (`--rate`); CPU = every postgres process's and pgbench's utime+stime, per ticket done");
    }
    report.figure("rate_per_s", rate);
    report.figure("tickets", n);
    report.figure("refused", refused);
    report.note(format!(
        "one `agentdesk serve` child process ({} workers); {n} tickets as fast as {clients} clients make them (after {} unmeasured), then {n} at a fixed {rate}/s, each sent at its planned time; CPU = the agentdesk process's and every postgres process's utime+stime over each phase, per ticket",
        spec.workers,
        n / 2
    ));
    report.note("statements per ticket: pg_stat_statements of the desk's database over each phase (when the server preloads it), calls and planning + execution time per ticket; commits: pg_stat_database.xact_commit (backends report it about once a second)");
    Ok(())
}

/// pgbench's CPU per ticket (Postgres's and its own), saturated and at `rate` tickets/s, in µs.
async fn pgbench_quiet(pgbench: &std::path::Path, rate: f64, seconds: f64, clients: usize) -> Result<(f64, f64)> {
    let scratch = testkit::testing::fresh_database().await?;
    {
        let pool = agentdesk::db::connect(&scratch, 2).await?;
        agentdesk::db::migrate(&pool).await?;
        pool.close().await;
    }
    let script = crate::pgbench::script_path();
    let saturated_for = Duration::from_secs_f64((seconds / 4.0).max(2.0));
    let quiet_for = Duration::from_secs_f64(seconds);
    // Unmeasured warm-up, saturated, quiet.
    let phases = [(saturated_for, None), (saturated_for, None), (quiet_for, Some(rate))];
    let mut cpu = vec![];
    for (duration, throttle) in phases {
        let done_before = done_count(&scratch).await?;
        let pg_before = PgSpend::now(&scratch).await?;
        // pgbench is this process's child: its CPU is counted here once it has been waited for.
        let own_before = server::reaped_children_cpu_secs(std::process::id());
        let (pgb, url, path) = (pgbench.to_owned(), scratch.clone(), script.clone());
        tokio::task::spawn_blocking(move || {
            crate::pgbench::run(
                &pgb,
                &url,
                clients,
                duration,
                &path,
                crate::pgbench::Protocol::Prepared,
                throttle,
            )
        })
        .await??;
        let done = done_count(&scratch).await? - done_before;
        let own = server::reaped_children_cpu_secs(std::process::id()) - own_before;
        let pg = PgSpend::now(&scratch).await?.since(pg_before, done).cpu_s;
        cpu.push((pg + own / done.max(1) as f64) * 1e6);
    }
    Ok((cpu[1], cpu[2]))
}

/// What one database's sessions ran, read from pg_stat_statements (when the server preloads it)
/// and pg_stat_database: totals so far, or per ticket between two readings.
#[derive(Default)]
struct Statements {
    commits: f64,
    /// By query text (normalised, shortened): (calls, planning and execution ms).
    queries: std::collections::HashMap<String, (f64, f64)>,
}

/// The statements table of `quiet_desk`: printed, and for the report.
struct StatementsTable {
    text: String,
    json: serde_json::Value,
}

impl Statements {
    /// Creates the extension in the desk's database; nothing when the server cannot.
    async fn enable(db_url: &str) {
        if let Ok(mut c) = sqlx::PgConnection::connect(db_url).await {
            let _ = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .execute(&mut c)
                .await;
            let _ = c.close().await;
        }
    }

    async fn now(db_url: &str) -> Statements {
        let Ok(mut c) = sqlx::PgConnection::connect(db_url).await else {
            return Statements::default();
        };
        let commits: i64 =
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
                .fetch_one(&mut c)
                .await
                .unwrap_or(0);
        let rows: Vec<(String, i64, f64)> = sqlx::query_as(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls, total_plan_time + total_exec_time
             FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_all(&mut c)
        .await
        .unwrap_or_default();
        let _ = c.close().await;
        let mut queries = std::collections::HashMap::new();
        for (query, calls, ms) in rows {
            let e = queries.entry(query).or_insert((0.0, 0.0));
            e.0 += calls as f64;
            e.1 += ms;
        }
        Statements {
            commits: commits as f64,
            queries,
        }
    }

    fn since(self, before: &Statements, tickets: usize) -> Statements {
        let n = tickets.max(1) as f64;
        let queries = self
            .queries
            .into_iter()
            .map(|(q, (calls, ms))| {
                let (c0, ms0) = before.queries.get(&q).copied().unwrap_or_default();
                (q, ((calls - c0) / n, (ms - ms0) / n))
            })
            .filter(|(_, (calls, _))| *calls > 0.0)
            .collect();
        Statements {
            commits: (self.commits - before.commits) / n,
            queries,
        }
    }

    /// Statements per ticket, quiet beside saturated, most frequent (quiet) first; None when
    /// pg_stat_statements was not readable.
    fn table(quiet: &Statements, saturated: &Statements) -> Option<StatementsTable> {
        if quiet.queries.is_empty() {
            return None;
        }
        let mut names: Vec<&String> = quiet.queries.keys().chain(saturated.queries.keys()).collect();
        names.sort();
        names.dedup();
        let get = |s: &Statements, q: &str| s.queries.get(q).copied().unwrap_or_default();
        names.sort_by(|a, b| get(quiet, b).0.total_cmp(&get(quiet, a).0));
        let total = |s: &Statements| s.queries.values().fold((0.0, 0.0), |(c, m), (c1, m1)| (c + c1, m + m1));
        let (qt, st) = (total(quiet), total(saturated));
        let mut text = format!(
            "  statements per ticket (pg_stat_statements): quiet {:.2} ({:.0} µs planning and executing), saturated {:.2} ({:.0} µs); commits per ticket: quiet {:.2}, saturated {:.2}\n  {:>7} {:>7} {:>7} {:>7}  statement\n",
            qt.0, qt.1 * 1e3, st.0, st.1 * 1e3, quiet.commits, saturated.commits, "quiet", "µs", "sat.", "µs"
        );
        let mut rows = vec![];
        for q in names {
            let (qc, qm) = get(quiet, q);
            let (sc, sm) = get(saturated, q);
            if qc < 0.005 && sc < 0.005 {
                continue;
            }
            text.push_str(&format!(
                "  {qc:>7.3} {:>7.1} {sc:>7.3} {:>7.1}  {q}\n",
                qm * 1e3,
                sm * 1e3
            ));
            rows.push(json!({"statement": q, "quiet_calls": qc, "quiet_exec_us": qm * 1e3,
                "saturated_calls": sc, "saturated_exec_us": sm * 1e3}));
        }
        let json = json!({"quiet_commits": quiet.commits, "saturated_commits": saturated.commits,
            "quiet_calls": qt.0, "saturated_calls": st.0, "statements": rows});
        Some(StatementsTable { text, json })
    }
}
