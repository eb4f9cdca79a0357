//! Tickets in flight at once on a slow model: a model that thinks for `--first-token-secs` before
//! its first token (30 s by default), then streams a short answer that closes the ticket. All
//! tickets are created first with a label no agent takes; putting the agent releases them at once.
//!
//! Measured on the agentdesk process (a child, so the fake model server's side of the connections
//! is the bench's): its memory per ticket in flight (RSS with every ticket waiting on the model,
//! less its RSS before they were claimed, over the tickets in flight), database connections,
//! lease renewal statements, CPU per ticket-second while every ticket waits, and the time from a
//! first token to `ticket.done`. `--subscribers K` adds K readers of the whole event stream, to
//! see what the event hub and SSE cost beside the work; `--kill` kills the process with SIGKILL
//! while every ticket waits and starts another, which must take them all over.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use serde_json::json;
use sqlx::Connection;

use crate::harness::close_ticket;
use crate::harness::{self, Fixture, Progress, Sampler};
use crate::opts::Opts;
use crate::report::{Bar, Check, Report};
use crate::server::{self, ServerSpec};
use crate::sse::SseConn;
use crate::stages::Snapshot;
use agentdesk::app::Mode;

/// The goal of memory per ticket in flight.
const KB_PER_TICKET: f64 = 20.0;

pub async fn run(opts: Opts, report: &mut Report) -> Result<()> {
    let tickets = opts.tickets.unwrap_or(opts.pick(200, 2000));
    let first_token = Duration::from_secs_f64(opts.first_token_secs.unwrap_or(opts.pick(5.0, 30.0)));
    let http2 = !opts.http1;
    // Over HTTP/1.1 the fake model server (this process) holds a connection per ticket too.
    let fd_limit = harness::raise_fd_limit();
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: tickets,
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: true,
        retention: None,
        claimers: None,
        shutdown_grace: Some(Duration::from_secs(1)),
        model_http2: http2,
        // A stall is silence longer than the model thinks.
        stream_idle: Some(first_token + Duration::from_secs(60)),
    };
    let progress = Progress::new();
    let fx = Fixture::start("concurrency", &spec).await?;
    // A reasoning model: the response's headers at once, silence while it thinks, then a short
    // answer (20 tokens at 100 a second) closing the ticket.
    fx.fake
        .set_reply(close_ticket().first_token_delay(first_token).tokens_per_second(100, 20));
    let created = fx
        .create_tickets(
            tickets,
            opts.clients.unwrap_or(16),
            json!({"task": "think, then answer briefly", "labels": ["fleet"]}),
        )
        .await?;
    progress.say(format!("{tickets} tickets created in {:.1} s", created.as_secs_f64()));
    let pid = fx.server.pid();
    // The tickets are rows, not memory, until claimed; settle what the creates left behind.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss_mb = server::rss_mb(pid);
    let subscribers = subscribe(&fx, opts.subscribers.unwrap_or(0)).await?;
    let mut watcher = fx.done_watcher().await?;
    let sampler = Sampler::start(pid, &fx.db_url, Duration::from_millis(500)).await?;
    let metrics_before = Snapshot::take(&fx).await?;
    let cpu_before = server::cpu_secs(pid);

    let started = Instant::now();
    fx.put_agent("fleet").await?;
    let ramp_limit = first_token + Duration::from_secs(60) + Duration::from_secs_f64(tickets as f64 / 500.0);
    anyhow::ensure!(
        fx.fake.wait_for_requests(1, ramp_limit).await,
        "no model request within {ramp_limit:?}"
    );
    let first_request = Instant::now();
    progress.say("first model request");
    let all_sent = fx.fake.wait_for_requests(tickets, ramp_limit).await;
    let all_sent_at = Instant::now();
    let ramp_s = (all_sent_at - started).as_secs_f64();
    progress.say(format!(
        "{} model requests in flight{}",
        fx.fake.in_flight(),
        if all_sent {
            ""
        } else {
            " (not all tickets reached the model)"
        }
    ));

    // Every ticket waits on the model until the first of them gets its first token: the quiet
    // window, measured up to half a second before that.
    let window_end = first_request + first_token.saturating_sub(Duration::from_millis(500));
    let window = window_end.saturating_duration_since(all_sent_at);
    let mut waiting = None;
    if all_sent && window >= Duration::from_secs(1) {
        let cpu0 = server::cpu_secs(pid);
        tokio::time::sleep_until(window_end.into()).await;
        let cpu1 = server::cpu_secs(pid);
        let rss_mb = server::rss_mb(pid);
        let in_flight = fx.fake.in_flight();
        waiting = Some((rss_mb, in_flight, cpu1 - cpu0, window.as_secs_f64()));
        progress.say(format!(
            "all waiting: {in_flight} in flight, RSS {rss_mb:.0} MB (idle {idle_rss_mb:.0} MB)"
        ));
    }

    let killed = opts.kill.then(Instant::now);
    let fx = if opts.kill {
        progress.say("SIGKILL of the agentdesk process; starting another");
        fx.kill_and_restart("concurrency.after_kill", &spec).await?
    } else {
        fx
    };
    let done_limit = first_token * 2 + Duration::from_secs(120) + Duration::from_secs_f64(tickets as f64 / 200.0);
    let waited = if opts.kill {
        // The first process's event stream ended with it: count from the database.
        wait_done_in_db(&fx.db_url, tickets, done_limit).await
    } else {
        watcher.wait_for(tickets, done_limit).await.map(|_| ())
    };
    let elapsed = started.elapsed();
    progress.say(format!("finished waiting after {:.1} s", elapsed.as_secs_f64()));
    let pid = fx.server.pid();
    let cpu_after = server::cpu_secs(pid);
    let metrics_after = Snapshot::take(&fx).await.unwrap_or_default();
    let peaks = sampler.finish().await?;
    let hwm_mb = server::status_kb(pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;
    let events_read = subscribers.finish();
    report.note(format!("agentdesk: {}", fx.server.describe()));
    let (done, failed, finish_times) = finished(&fx.db_url).await?;
    let first_tokens = fx.fake.first_byte_times();
    let max_in_flight = fx.fake.max_in_flight();
    fx.shutdown().await;
    if let Err(e) = waited {
        report.note(format!("{e:#}"));
    }

    report.check(Check::new(
        "tickets done",
        done as f64,
        "",
        Bar::AtLeast,
        tickets as f64,
    ));
    if let Some((rss_mb, in_flight, cpu_s, window_s)) = waiting {
        let per_ticket_kb = (rss_mb - idle_rss_mb).max(0.0) * 1024.0 / in_flight.max(1) as f64;
        report.check(
            Check::new(
                "memory per ticket in flight",
                per_ticket_kb,
                "KB",
                Bar::AtMost,
                KB_PER_TICKET,
            )
            .baseline("idle RSS, MB", idle_rss_mb),
        );
        report.check(Check::info("tickets in flight (at the model)", in_flight as f64, ""));
        report.check(Check::info(
            "CPU per ticket-second while waiting",
            cpu_s * 1e6 / (in_flight.max(1) as f64 * window_s),
            "µs",
        ));
        report.figure("rss_all_waiting_mb", round1(rss_mb));
        report.figure("quiet_window_s", round1(window_s));
    } else {
        report.note(format!(
            "no quiet window to measure memory and CPU while waiting: the tickets took {ramp_s:.1} s to reach the \
             model, the first token came after {:.1} s (raise --first-token-secs)",
            first_token.as_secs_f64()
        ));
    }
    report.check(Check::info("peak RSS (VmHWM)", hwm_mb, "MB"));
    report.check(Check::new(
        "peak DB connections",
        peaks.db_connections as f64,
        "",
        Bar::AtMost,
        f64::from(spec.db_max_connections) + 4.0,
    ));
    let renewal = metrics_after.stage(&metrics_before, "renewals");
    let (renewals, renewed) = (renewal.statements, renewal.items);
    report.check(Check::info(
        "lease renewal statements per second",
        renewals / elapsed.as_secs_f64(),
        "",
    ));
    report.figure("lease_renewal_statements", renewals);
    report.figure("leases_renewed", renewed);
    // After a kill the first tokens the fake sent include the dead process's, which no ticket
    // finished after: the pairing would be meaningless.
    if !opts.kill {
        let (p50, p95) = first_token_to_done(&first_tokens, &finish_times);
        report.check(Check::info("first token to ticket.done, p50", p50, "ms"));
        report.check(Check::info("first token to ticket.done, p95", p95, "ms"));
    }
    report.check(Check::info(
        "CPU per ticket (whole run)",
        (cpu_after - cpu_before).max(0.0) * 1e6 / tickets.max(1) as f64,
        "µs",
    ));
    report.figure("tickets", tickets);
    report.figure("failed", failed);
    report.figure("first_token_s", first_token.as_secs_f64());
    report.figure(
        "model_http",
        if http2 {
            "HTTP/2 (AGENTDESK_OPENAI_HTTP2=true)"
        } else {
            "HTTP/1.1"
        },
    );
    report.figure("ramp_s", round1(ramp_s));
    report.figure("wall_s", round1(elapsed.as_secs_f64()));
    report.figure("max_in_flight_at_model", max_in_flight);
    report.figure("bench_fd_limit", fd_limit);
    if let Some((n, events)) = events_read {
        report.figure("subscribers", n);
        report.figure("events_read_per_subscriber", events / n.max(1) as u64);
    }
    if let Some(killed) = killed {
        report.figure("kill_to_all_done_s", round1(killed.elapsed().as_secs_f64()));
    }
    report.note(format!(
        "agentdesk ran as a child process (AGENTDESK_WORKERS={tickets}, AGENTDESK_DB_MAX_CONNECTIONS={}); memory per \
         ticket = (RSS with every ticket waiting on the model − RSS before the agent was put) ÷ tickets in flight at \
         the fake model; CPU while waiting = the process's CPU over the quiet window ÷ (tickets × window); \
         connections = pg_stat_activity rows of its database other than the sampler's, every 500 ms; first token → \
         done pairs the n-th first token sent with the n-th ticket finished",
        spec.db_max_connections
    ));
    Ok(())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The p50 and p95 (ms) of first token → `ticket.done`, pairing the n-th first token with the n-th
/// ticket finished: answers are equally long, so they finish in the order they started.
fn first_token_to_done(first_tokens: &[SystemTime], finished: &[f64]) -> (f64, f64) {
    let mut starts: Vec<f64> = first_tokens
        .iter()
        .filter_map(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64())
        .collect();
    starts.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = starts
        .iter()
        .zip(finished)
        .map(|(start, end)| (end - start) * 1e3)
        .collect();
    if gaps.is_empty() {
        return (0.0, 0.0);
    }
    gaps.sort_by(f64::total_cmp);
    let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// Done and failed tickets, and when each done one finished (seconds since the epoch, in order).
async fn finished(db_url: &str) -> Result<(i64, i64, Vec<f64>)> {
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let (done, failed): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed') FROM tickets",
    )
    .fetch_one(&mut c)
    .await?;
    let times: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at)::float8 FROM tickets WHERE status = 'done' ORDER BY finished_at",
    )
    .fetch_all(&mut c)
    .await?;
    let _ = c.close().await;
    Ok((done, failed, times))
}

/// Waits until `n` tickets are done or failed, polling the database.
async fn wait_done_in_db(db_url: &str, n: usize, limit: Duration) -> Result<()> {
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let deadline = Instant::now() + limit;
    loop {
        let finished: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE status IN ('done', 'failed')")
            .fetch_one(&mut c)
            .await?;
        if finished as usize >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{finished} of {n} tickets finished within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Readers of the whole event stream, counting what they read.
struct Subscribers {
    count: usize,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Subscribers {
    /// (subscribers, events read by all of them); None without subscribers.
    fn finish(self) -> Option<(usize, u64)> {
        for t in &self.tasks {
            t.abort();
        }
        (self.count > 0).then(|| (self.count, self.read.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

async fn subscribe(fx: &Fixture, count: usize) -> Result<Subscribers> {
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let mut conn = SseConn::connect(fx.addr, "/v1/events")
            .await
            .context("a subscriber could not connect")?;
        let read = read.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok(Some(_)) = conn.next_event().await {
                read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    Ok(Subscribers { count, read, tasks })
}
