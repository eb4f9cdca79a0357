//! The worker pool: claims tickets, keeps their leases alive, reaps expired ones, and runs the
//! agent loop on each, up to `AGENTDESK_WORKERS` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::agent::{self, RunEnd, Runtime, Signals};
use crate::config::Config;
use crate::db;
use crate::db::claims::{Claim, Fence, FirstRead, Holder, Release};
use crate::events::EventHub;
use crate::llm::Providers;
use crate::maintenance;
use crate::net::backoff::Backoff;
use crate::telemetry::metric;
use crate::telemetry::trace::AgentSpan;

mod descriptors;

/// Most tickets claimed by one statement.
const MAX_CLAIM_BATCH: i64 = 64;
/// Claims after a wake-up start at least this far apart, so that on a steady trickle of tickets
/// one claim takes those of the last few milliseconds together (and their first steps then share
/// group commits), instead of a claim transaction per ticket; the first claim after a quiet spell
/// goes at once. A full batch is followed by the next claim at once.
const MIN_CLAIM_INTERVAL: Duration = Duration::from_millis(20);
/// Polling fallback for missed wake-ups.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Waits after claims or lease registrations that failed in a row on the database: 0.25 s more
/// each time, up to 2 s.
const DB_RETRY: Backoff = Backoff::linear(Duration::from_millis(250), Duration::from_secs(2));
/// Waits after a ticket's steps that failed in a row on the database: 0.2 s more each time, up
/// to 5 s.
const STEP_RETRY: Backoff = Backoff::linear(Duration::from_millis(200), Duration::from_secs(5));

struct Running {
    agent: String,
    signals: Signals,
    /// The process lease it was claimed under.
    worker_id: WorkerId,
}

/// The id of a process lease (`worker_leases`), which its claims name.
type WorkerId = Arc<str>;

struct Shared {
    config: Arc<Config>,
    runtime: Runtime,
    /// This process's lease, under which it claims: none until it is registered, a new one
    /// whenever the last was lost (`lease_loop`).
    worker_id: watch::Sender<Option<WorkerId>>,
    /// Keyed by claim: a ticket lost and claimed again here runs under a new generation.
    running: Mutex<HashMap<Fence, Running>>,
    /// Slots promised to claim statements in flight, so that claimers running at once never take
    /// more tickets than `workers` allows: read and raised under `running`'s lock, lowered without
    /// it once the claimed tickets are in `running` (a claimer reading meanwhile sees fewer free
    /// slots, never more).
    reserved: AtomicI64,
    /// Work may be claimable (NOTIFY, or a slot freed): wakes the lead claimer (shared with the
    /// background services, `maintenance::Nudge`).
    wake: Arc<Notify>,
    /// A claim came back full, so more may be waiting: wakes another claimer.
    more: Notify,
    /// Stop claiming.
    stop: CancellationToken,
    tasks: TaskTracker,
}

/// What the workers read without a round trip: the prices, the projects' quotas, and the key
/// and base of the links they sign.
pub struct Books {
    pub prices: crate::db::prices::PriceBook,
    pub projects: crate::db::projects::ProjectBook,
    pub links: crate::domain::link::Links,
}

pub struct WorkerPool {
    shared: Arc<Shared>,
    background: Vec<tokio::task::JoinHandle<()>>,
    /// Ends the background loops (renewal, reaper, listener) after the tickets are settled.
    background_stop: CancellationToken,
}

impl WorkerPool {
    pub fn start(
        pool: PgPool,
        hub: EventHub,
        config: Arc<Config>,
        providers: Arc<Providers>,
        catalog: crate::tools::catalog::ToolCatalog,
        books: Books,
    ) -> WorkerPool {
        let runtime = Runtime {
            appender: crate::db::events::EventAppender::start(pool.clone()),
            // At least two, more on a big machine, for the reason claims run side by side.
            steps: crate::db::steps::StepWriter::start(pool.clone(), crate::config::stage_parallelism(2)),
            slots: crate::agent::capacity::ProviderSlots::new(pool.clone(), config.lease),
            pool,
            hub,
            providers,
            catalog,
            stream_idle: config.stream_idle,
            prices: books.prices,
            projects: books.projects,
            links: books.links,
        };
        let shared = Arc::new(Shared {
            config,
            runtime,
            worker_id: watch::Sender::new(None),
            running: Mutex::new(HashMap::new()),
            reserved: AtomicI64::new(0),
            wake: Arc::new(Notify::new()),
            more: Notify::new(),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        descriptors::ensure(
            descriptors::wanted(shared.config.workers, shared.config.db_max_connections),
            shared.config.workers,
        );
        let background_stop = CancellationToken::new();
        let pool = shared.runtime.pool.clone();
        let nudge = maintenance::Nudge {
            hub: shared.runtime.hub.clone(),
            claimers: shared.wake.clone(),
        };
        // A claim is one transaction that locks, updates and logs its batch in one backend, so a
        // single claimer caps a busy desk at about a batch per claim, however many cores Postgres
        // has. While a backlog lasts (claims come back full), further claimers take the next
        // batches beside it (see `claim_loop`).
        let mut background: Vec<_> = (0..shared.config.claimers.max(1))
            .map(|i| tokio::spawn(claim_loop(shared.clone(), i == 0)))
            .collect();
        background.extend([
            tokio::spawn(lease_loop(shared.clone(), background_stop.clone())),
            tokio::spawn(maintenance::reaper::run(
                pool.clone(),
                shared.config.lease,
                nudge.clone(),
                background_stop.clone(),
            )),
            tokio::spawn(maintenance::deadlines::run(
                pool.clone(),
                nudge.clone(),
                background_stop.clone(),
            )),
            tokio::spawn(maintenance::experiments::run(
                pool.clone(),
                nudge,
                background_stop.clone(),
            )),
            tokio::spawn(listen_loop(shared.clone(), background_stop.clone())),
        ]);
        tracing::info!(
            slots = shared.config.workers,
            claimers = shared.config.claimers.max(1),
            "worker pool started"
        );
        WorkerPool {
            shared,
            background,
            background_stop,
        }
    }

    /// Tickets this process is running now.
    pub fn running(&self) -> usize {
        self.shared.running.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Stops claiming, lets running steps finish within `grace`, then aborts the rest and
    /// releases them to `todo` without spending an attempt.
    pub async fn shutdown(self, grace: Duration) {
        let shared = &self.shared;
        shared.stop.cancel();
        for running in shared
            .running
            .lock()
            .map(|r| r.values().map(|r| r.signals.clone()).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            running.stop.cancel();
        }
        shared.tasks.close();
        if tokio::time::timeout(grace, shared.tasks.wait()).await.is_err() {
            let left: Vec<(Fence, String, Signals)> = shared
                .running
                .lock()
                .map(|r| {
                    r.iter()
                        .map(|(fence, r)| (*fence, r.agent.clone(), r.signals.clone()))
                        .collect()
                })
                .unwrap_or_default();
            tracing::info!(tickets = left.len(), "grace period over: releasing running tickets");
            for (_, _, signals) in &left {
                signals.abort.cancel();
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), shared.tasks.wait()).await;
            for (fence, agent, _) in left {
                if let Err(err) = agent::release(&shared.runtime, fence, Release::Shutdown, &agent).await {
                    tracing::warn!(error = %err, ticket = %fence.ticket_id, "could not release a ticket on shutdown; its lease will expire");
                }
            }
        }
        self.background_stop.cancel();
        // The claimers come first in `background`.
        let mut claimers_stopped = true;
        for (i, task) in self.background.into_iter().enumerate() {
            let stopped = tokio::time::timeout(Duration::from_secs(2), task).await.is_ok();
            claimers_stopped &= stopped || i >= shared.config.claimers.max(1);
        }
        // Whatever could not be released is the reaper's at once, not after the lease. The row
        // is forgotten only once no claim statement can still commit tickets under it.
        let worker_id = shared.worker_id.borrow().clone();
        if let Some(worker_id) = worker_id {
            let pool = &shared.runtime.pool;
            let ended = if claimers_stopped {
                db::claims::end_worker(pool, &worker_id).await
            } else {
                db::claims::expire_worker(pool, &worker_id).await
            };
            if let Err(err) = ended {
                tracing::warn!(error = %err, "could not end this process's lease on shutdown; it will expire");
            }
        }
    }
}

/// Reserves up to `MAX_CLAIM_BATCH` free slots for one claim; `release_slots` gives them back
/// once the claimed tickets are in `running`.
fn reserve_slots(shared: &Shared) -> i64 {
    let Ok(running) = shared.running.lock() else {
        return 0;
    };
    let taken = running.len() as i64 + shared.reserved.load(Ordering::Relaxed);
    let free = (shared.config.workers as i64 - taken).clamp(0, MAX_CLAIM_BATCH);
    shared.reserved.fetch_add(free, Ordering::Relaxed);
    free
}

fn release_slots(shared: &Shared, reserved: i64) {
    // Until this runs, the claimed tickets count twice (reserved and running): a claim beside
    // this one takes fewer, never more.
    shared.reserved.fetch_sub(reserved, Ordering::Relaxed);
}

/// Claims tickets while there are free slots. The lead claimer (one per pool) wakes for new work,
/// freed slots and its poll; the others only when a claim came back full, and each goes back to
/// sleep once its own claim is not: so claims overlap only while a backlog lasts, and a quiet desk
/// makes one claim at a time, as with a single claimer.
async fn claim_loop(shared: Arc<Shared>, lead: bool) {
    let mut failures = 0u32;
    // Kept between claims when the pool allows it (see `db::may_keep_connection`): on a quiet
    // desk, claims come about once a ticket.
    let pool = &shared.runtime.pool;
    let keep = db::may_keep_connection(pool);
    let mut conn: Option<PoolConnection<Postgres>> = None;
    let mut lease = shared.worker_id.subscribe();
    if !lead {
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.more.notified() => {}
        }
    }
    while !shared.stop.is_cancelled() {
        let worker_id = lease.borrow_and_update().clone();
        let Some(worker_id) = worker_id else {
            // Not registered yet, or the last lease was lost: wait for the next.
            tokio::select! {
                _ = shared.stop.cancelled() => break,
                _ = lease.changed() => continue,
            }
        };
        let claim_started = tokio::time::Instant::now();
        let free = reserve_slots(&shared);
        let mut wait = IDLE_POLL;
        if free > 0 {
            let claimed = match conn.as_mut() {
                Some(c) => crate::transitions::claims::claim_batch(c, free, &worker_id).await,
                None => match pool.acquire().await {
                    Ok(c) => crate::transitions::claims::claim_batch(conn.insert(c), free, &worker_id).await,
                    Err(err) => Err(err),
                },
            };
            // A connection whose claim failed goes back (the pool's check drops it if broken).
            if !keep || claimed.is_err() {
                conn = None;
            }
            match claimed {
                Ok(claims) => {
                    metric::db_batch("claims", claims.len(), claim_started.elapsed(), []);
                    failures = 0;
                    let full = claims.len() as i64 == free;
                    if !claims.is_empty() {
                        shared.runtime.hub.wake();
                        metric::claimed(claims.len());
                    }
                    for claim in claims {
                        spawn_run(&shared, claim, &worker_id);
                    }
                    release_slots(&shared, free);
                    if full {
                        // More may be waiting: claim again at once if slots allow, and let
                        // another claimer take the batch after this one meanwhile.
                        shared.more.notify_one();
                        wait = Duration::ZERO;
                    }
                }
                Err(err) => {
                    release_slots(&shared, free);
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %err, "cannot claim tickets; retrying");
                    }
                    wait = DB_RETRY.delay(failures);
                }
            }
        }
        if wait.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        if !lead {
            // Idle until the next backlog: its connection goes back to the pool meanwhile.
            conn = None;
            tokio::select! {
                _ = shared.stop.cancelled() => break,
                _ = shared.more.notified() => continue,
            }
        }
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            _ = shared.wake.notified() => {}
            _ = shared.runtime.hub.work_notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        // Woken soon after a claim: the tickets of the next few milliseconds gather for one claim.
        // After a longer wait this returns at once.
        tokio::time::sleep_until(claim_started + MIN_CLAIM_INTERVAL).await;
    }
}

fn spawn_run(shared: &Arc<Shared>, claim: Claim, worker_id: &WorkerId) {
    let signals = Signals::default();
    let (claim, first) = claim.split();
    let fence = claim.fence;
    if let Ok(mut running) = shared.running.lock() {
        running.insert(
            fence,
            Running {
                agent: claim.agent.clone(),
                signals: signals.clone(),
                worker_id: worker_id.clone(),
            },
        );
    }
    if shared.stop.is_cancelled() {
        signals.stop.cancel();
    }
    let task_shared = shared.clone();
    let task = async move {
        let shared = task_shared;
        let span = AgentSpan::start(
            &metric::project_label(claim.project.0),
            &claim.agent,
            &fence.ticket_id.to_string(),
            &claim.key,
            claim.trace_context.as_deref(),
        );
        let end = run_until_settled(&shared, &claim, Some(first), &signals, &span).await;
        tracing::debug!(ticket = %claim.key, ?end, "ticket run ended");
        record_end(claim.project.0, &claim.agent, end, &span);
        if let Ok(mut running) = shared.running.lock() {
            running.remove(&fence);
        }
        shared.wake.notify_one();
    };
    // What each ticket in flight holds at least, whatever it waits on (BENCHMARKS.md, round 25).
    static TASK_SIZE: std::sync::Once = std::sync::Once::new();
    TASK_SIZE.call_once(|| tracing::debug!(bytes = std::mem::size_of_val(&task), "a ticket's task future"));
    shared.tasks.spawn(task);
}

/// How a claim ended, for the metrics and its span.
fn record_end(project: i64, agent: &str, end: RunEnd, span: &AgentSpan) {
    let outcome = match end {
        RunEnd::Done => "done",
        RunEnd::Failed => "failed",
        RunEnd::Waiting => "waiting",
        RunEnd::Released => "released",
        RunEnd::Aborted => "aborted",
    };
    if matches!(end, RunEnd::Done | RunEnd::Failed) {
        metric::ticket_finished(project, agent, outcome);
    }
    span.set_outcome(outcome, end == RunEnd::Failed);
}

/// Runs the agent loop; a database outage (e.g. a Postgres restart) pauses the ticket and retries
/// with the same claim until it succeeds or the claim is lost (reading everything again: what
/// the claim read, `first`, serves the first try only).
async fn run_until_settled(
    shared: &Shared,
    claim: &Holder,
    mut first: Option<Box<FirstRead>>,
    signals: &Signals,
    span: &AgentSpan,
) -> RunEnd {
    let mut failures = 0u32;
    loop {
        match agent::run_ticket(&shared.runtime, claim, first.take(), signals, span).await {
            Ok(end) => return end,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, ticket = %claim.key, "ticket step failed on a database error; retrying");
                let delay = STEP_RETRY.delay(failures);
                tokio::select! {
                    _ = signals.abort.cancelled() => return RunEnd::Aborted,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Holds this process's lease (`worker_leases`): registers it, then renews it every lease/3 in
/// one statement, which renews every claim the process holds, however many. A lost lease (it
/// expired before a renewal got through, and the reaper may have taken its tickets) stops every
/// loop claimed under it, and the process goes on under a new one. A lease that cannot be renewed
/// for as long as it lasts stops them too.
async fn lease_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let lease = shared.config.lease;
    let pool = &shared.runtime.pool;
    let Some(mut worker_id) = register(&shared, &stop).await else {
        return;
    };
    let mut last_success = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(lease / 3) => {}
        }
        let started = std::time::Instant::now();
        let renewed = db::claims::renew_worker(pool, &worker_id, lease).await;
        let held = held_under(&shared, &worker_id);
        match renewed {
            Ok(true) => {
                metric::db_batch("renewals", held.len(), started.elapsed(), []);
                last_success = tokio::time::Instant::now();
            }
            Ok(false) => {
                tracing::warn!(worker_id = %worker_id, tickets = held.len(), "this process's lease was lost: stopping the tickets it held");
                metric::leases_lost(held.len());
                abort(&shared, &held);
                shared.worker_id.send_replace(None);
                match register(&shared, &stop).await {
                    Some(id) => worker_id = id,
                    None => return,
                }
                last_success = tokio::time::Instant::now();
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot renew this process's lease");
                if last_success.elapsed() >= lease {
                    metric::leases_lost(held.len());
                    abort(&shared, &held);
                }
            }
        }
    }
}

/// Registers a new lease for this process and lets the claimers use it, trying until it is
/// registered (None once stopped).
async fn register(shared: &Shared, stop: &CancellationToken) -> Option<WorkerId> {
    let worker_id: WorkerId = format!(
        "{}-{}-{}",
        shared.config.host.hostname.as_deref().unwrap_or("agentdesk"),
        std::process::id(),
        &Uuid::now_v7().simple().to_string()[20..]
    )
    .into();
    let mut failures = 0u32;
    loop {
        match db::claims::register_worker(&shared.runtime.pool, &worker_id, shared.config.lease).await {
            Ok(()) => {
                tracing::info!(worker_id = %worker_id, "process lease registered");
                shared.worker_id.send_replace(Some(worker_id.clone()));
                return Some(worker_id);
            }
            Err(err) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(30) {
                    tracing::warn!(error = %err, "cannot register this process's lease; retrying");
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(DB_RETRY.delay(failures)) => {}
        }
    }
}

/// The claims this process holds under `worker_id`.
fn held_under(shared: &Shared, worker_id: &WorkerId) -> Vec<Fence> {
    shared
        .running
        .lock()
        .map(|r| {
            r.iter()
                .filter(|(_, running)| running.worker_id == *worker_id)
                .map(|(fence, _)| *fence)
                .collect()
        })
        .unwrap_or_default()
}

/// Stops the loops of these claims (a loop of the same ticket under a newer claim goes on).
fn abort(shared: &Shared, lost: &[Fence]) {
    if lost.is_empty() {
        return;
    }
    if let Ok(running) = shared.running.lock() {
        for fence in lost {
            if let Some(r) = running.get(fence) {
                tracing::info!(ticket = %fence.ticket_id, "claim lost or cancelled: stopping its loop");
                r.signals.abort.cancel();
            }
        }
    }
}

fn abort_where(shared: &Shared, lost: impl Fn(&Fence) -> bool) {
    let fences: Vec<Fence> = match shared.running.lock() {
        Ok(running) => running.keys().filter(|f| lost(f)).copied().collect(),
        Err(_) => return,
    };
    abort(shared, &fences);
}

/// Wake-ups for new work and cancel requests, across processes.
async fn listen_loop(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let listener = shared
            .runtime
            .hub
            .listener("work", &[db::WORK_CHANNEL, db::CONTROL_CHANNEL]);
        let mut listener = match listener.await {
            Ok(l) => l,
            Err(_) => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        // Anything missed while (re)connecting is picked up by polling; look once now.
        shared.wake.notify_one();
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => return,
                m = listener.try_recv() => m,
            };
            match message {
                Ok(Some(n)) if n.channel() == db::CONTROL_CHANNEL => {
                    if let Some(id) = n
                        .payload()
                        .strip_prefix("cancel:")
                        .and_then(|id| Uuid::parse_str(id).ok())
                    {
                        abort_where(&shared, |fence| fence.ticket_id == id);
                    }
                }
                Ok(Some(_)) => shared.wake.notify_one(),
                Ok(None) | Err(_) => {
                    db::note_connection_loss();
                    break;
                }
            }
        }
    }
}
