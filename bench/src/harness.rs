//! What every scenario needs: a fresh database, the fake model server, the service, a client,
//! a completion watcher and a sampler of the service's memory and database connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use testkit::fake_llm::{FakeLlm, Reply};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::server::{self, Server, ServerSpec};
use crate::sse::SseConn;

/// The model's answer that ends a ticket in one step.
pub fn close_ticket() -> Reply {
    Reply::tool_call("close_ticket", json!({"result": "ok"}))
}

/// Where results go: the repository root when it is where the bench was built, else the
/// current directory.
pub fn output_root() -> PathBuf {
    // This crate lives in `bench/` of the repository.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if root.join("Cargo.toml").exists() {
        root
    } else {
        PathBuf::from(".")
    }
}

pub fn results_dir() -> PathBuf {
    output_root().join("bench-results")
}

pub struct Fixture {
    pub fake: FakeLlm,
    pub db_url: String,
    pub server: Server,
    pub url: String,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
}

/// How `Fixture::replace` stops the running service.
enum Stop {
    /// SIGTERM, and wait for its graceful shutdown.
    Shutdown,
    /// SIGKILL: a crash.
    Kill,
}

impl Fixture {
    pub async fn start(scenario: &str, spec: &ServerSpec) -> Result<Fixture> {
        let db_url = testkit::testing::fresh_database()
            .await
            .context("cannot create a scratch database")?;
        let fake = FakeLlm::start().await;
        // Thousands of requests: the fake counts them but keeps no copies.
        fake.keep_requests(false);
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(30))
            .build()?;
        Fixture::serve(fake, db_url, http, scenario, spec).await
    }

    /// Starts the service on `db_url` and `fake`; its log is `bench-results/<log>.agentdesk.log`.
    async fn serve(
        fake: FakeLlm,
        db_url: String,
        http: reqwest::Client,
        log: &str,
        spec: &ServerSpec,
    ) -> Result<Fixture> {
        let log = results_dir().join(format!("{log}.agentdesk.log"));
        let server = Server::start(spec, &db_url, &fake.openai_base_url(), &log).await?;
        let url = server.url();
        let addr: SocketAddr = url
            .trim_start_matches("http://")
            .parse()
            .context("the service's address")?;
        Ok(Fixture {
            fake,
            db_url,
            server,
            url,
            addr,
            http,
        })
    }

    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }

    /// Stops the service and starts it again with `spec`, on the same database and model server;
    /// its log is `bench-results/<log>.agentdesk.log`.
    pub async fn restart(self, log: &str, spec: &ServerSpec) -> Result<Fixture> {
        self.replace(Stop::Shutdown, log, spec).await
    }

    /// Kills the service with SIGKILL and starts another with `spec` on the same database and
    /// model server; its log is `bench-results/<log>.agentdesk.log`.
    pub async fn kill_and_restart(self, log: &str, spec: &ServerSpec) -> Result<Fixture> {
        self.replace(Stop::Kill, log, spec).await
    }

    async fn replace(self, stop: Stop, log: &str, spec: &ServerSpec) -> Result<Fixture> {
        let Fixture {
            fake,
            db_url,
            server,
            http,
            ..
        } = self;
        match stop {
            Stop::Shutdown => server.shutdown().await,
            Stop::Kill => server.kill().await,
        }
        Fixture::serve(fake, db_url, http, log, spec).await
    }

    pub async fn create_ticket(&self, body: &Value) -> Result<()> {
        let r = self
            .http
            .post(format!("{}/v1/tickets", self.url))
            .json(body)
            .send()
            .await?;
        if r.status().as_u16() != 201 {
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            bail!("POST /v1/tickets answered {status}: {text}");
        }
        Ok(())
    }

    /// Creates `n` tickets from `clients` concurrent clients; returns how long it took.
    pub async fn create_tickets(&self, n: usize, clients: usize, body: Value) -> Result<Duration> {
        let started = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..clients.max(1) {
            let (http, url, next, body) = (self.http.clone(), self.url.clone(), next.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n as u64 {
                    let r = http.post(format!("{url}/v1/tickets")).json(&body).send().await?;
                    if r.status().as_u16() != 201 {
                        let status = r.status();
                        bail!(
                            "POST /v1/tickets answered {status}: {}",
                            r.text().await.unwrap_or_default()
                        );
                    }
                }
                Ok(())
            }));
        }
        for t in tasks {
            t.await.context("a ticket client panicked")??;
        }
        Ok(started.elapsed())
    }

    /// Creates or replaces an agent routed to tickets labelled `name`, on the fake model.
    pub async fn put_agent(&self, name: &str) -> Result<()> {
        let body = json!({"role": "You work benchmark tickets.", "provider": "openai", "model": "gpt-4o-mini"});
        let r = self
            .http
            .put(format!("{}/v1/agents/{name}", self.url))
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            let status = r.status();
            bail!(
                "PUT /v1/agents/{name} answered {status}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    pub async fn stats(&self) -> Result<Value> {
        let r = self.http.get(format!("{}/v1/stats", self.url)).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    /// Counts finished tickets from `/v1/events` (connected before the work starts).
    pub async fn done_watcher(&self) -> Result<DoneWatcher> {
        let mut conn = SseConn::connect(self.addr, "/v1/events?kind=ticket.done,ticket.failed").await?;
        let (tx, rx) = watch::channel((0usize, 0usize));
        let task = tokio::spawn(async move {
            let (mut done, mut failed) = (0, 0);
            while let Ok(Some(e)) = conn.next_event().await {
                match e.kind.as_str() {
                    "ticket.done" => done += 1,
                    "ticket.failed" => failed += 1,
                    _ => continue,
                }
                tx.send_replace((done, failed));
            }
        });
        Ok(DoneWatcher { rx, task })
    }
}

pub struct DoneWatcher {
    rx: watch::Receiver<(usize, usize)>,
    task: JoinHandle<()>,
}

impl DoneWatcher {
    /// (done, failed) so far.
    pub fn counts(&self) -> (usize, usize) {
        *self.rx.borrow()
    }

    /// Waits until `n` tickets have finished (done or failed); the error says how far it got.
    pub async fn wait_for(&mut self, n: usize, timeout: Duration) -> Result<(usize, usize)> {
        let reached = tokio::time::timeout(timeout, self.rx.wait_for(|(d, f)| d + f >= n))
            .await
            .map(|r| r.is_ok());
        let counts = self.counts();
        match reached {
            Ok(true) => Ok(counts),
            Ok(false) => bail!(
                "the event stream ended after {} done and {} failed of {n}",
                counts.0,
                counts.1
            ),
            Err(_) => bail!(
                "timed out after {:.0} s with {} done and {} failed of {n} tickets",
                timeout.as_secs_f64(),
                counts.0,
                counts.1
            ),
        }
    }
}

impl Drop for DoneWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Peaks seen by a [`Sampler`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Peaks {
    pub rss_mb: f64,
    pub db_connections: i64,
    pub in_progress: i64,
    pub samples: usize,
}

/// Samples the service's RSS, the database's connections (other than the sampler's own) and the
/// tickets in progress, every `every`, until stopped.
pub struct Sampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Peaks>>,
}

impl Sampler {
    pub async fn start(pid: u32, db_url: &str, every: Duration) -> Result<Sampler> {
        let mut conn = PgConnection::connect(db_url)
            .await
            .context("sampler: cannot connect to the database")?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut peaks = Peaks::default();
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                peaks.rss_mb = peaks.rss_mb.max(server::rss_mb(pid));
                let (conns, in_progress): (i64, i64) = sqlx::query_as(
                    "SELECT (SELECT count(*) FROM pg_stat_activity
                              WHERE datname = current_database() AND pid <> pg_backend_pid()),
                            (SELECT count(*) FROM tickets WHERE status = 'in_progress')",
                )
                .fetch_one(&mut conn)
                .await?;
                peaks.db_connections = peaks.db_connections.max(conns);
                peaks.in_progress = peaks.in_progress.max(in_progress);
                peaks.samples += 1;
            }
            let _ = conn.close().await;
            Ok(peaks)
        });
        Ok(Sampler { stop, task })
    }

    pub async fn finish(self) -> Result<Peaks> {
        let _ = self.stop.send(true);
        self.task.await.context("the sampler panicked")?
    }
}

/// Facts about the machine for BENCHMARKS.md.
pub async fn machine(db_url: Option<&str>) -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut postgres = String::new();
    if let Some(url) = db_url {
        if let Ok(mut c) = PgConnection::connect(url).await {
            postgres = sqlx::query_scalar::<_, String>("SELECT version()")
                .fetch_one(&mut c)
                .await
                .unwrap_or_default();
            let _ = c.close().await;
        }
    }
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "memory_gib": format!("{:.1}", mem_kb as f64 / 1024.0 / 1024.0),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "rustc": rustc,
        "postgres": postgres,
    })
}

/// Raises the open-file limit to the hard limit (children inherit it); returns the new limit.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit and setrlimit read and write a `rlimit` that lives on this stack frame.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur
    }
}

/// Prints what a scenario is doing, with the time since it started, so a slow phase shows.
pub struct Progress(Instant);

impl Progress {
    pub fn new() -> Progress {
        Progress(Instant::now())
    }

    pub fn say(&self, what: impl std::fmt::Display) {
        println!("  [{:6.1} s] {what}", self.0.elapsed().as_secs_f64());
    }
}
