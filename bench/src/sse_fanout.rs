//! sse_fanout: thousands of subscribers on the event stream, their memory while idle and the
//! latency of every event to each of them, against the fan-out floor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use crate::floor::Floor;
use crate::harness::{self, close_ticket, Fixture, Progress};
use crate::opts::Opts;
use crate::report::{percentile, Bar, Check, Report};
use crate::server::{self, ServerSpec};
use crate::sse::{self, SseConn};
use agentdesk::app::Mode;

/// Idle subscribers' memory, then event latency to every subscriber while tickets run.
pub async fn sse_fanout(opts: Opts, report: &mut Report) -> Result<()> {
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
