//! The worker pool: claims tickets, keeps their leases alive, reaps expired ones, and runs the
//! agent loop on each, up to `AGENTDESK_WORKERS` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::agent::{self, RunEnd, Runtime, Signals};
use crate::config::Config;
use crate::db;
use crate::db::claims::{Claim, Fence, Release};
use crate::events::EventHub;
use crate::llm::Providers;
use crate::maintenance;
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

struct Running {
    agent: String,
    signals: Signals,
}

struct Shared {
    config: Arc<Config>,
    runtime: Runtime,
    worker_id: String,
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
        let worker_id = format!(
            "{}-{}-{}",
            config.host.hostname.as_deref().unwrap_or("agentdesk"),
            std::process::id(),
            &Uuid::now_v7().simple().to_string()[20..]
        );
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
            worker_id,
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
            tokio::spawn(renew_loop(shared.clone(), background_stop.clone())),
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
            worker_id = %shared.worker_id,
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
        for task in self.background {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
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
    if !lead {
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.more.notified() => {}
        }
    }
    while !shared.stop.is_cancelled() {
        let claim_started = tokio::time::Instant::now();
        let free = reserve_slots(&shared);
        let mut wait = IDLE_POLL;
        if free > 0 {
            let claimed = match conn.as_mut() {
                Some(c) => {
                    crate::transitions::claims::claim_batch(c, free, shared.config.lease, &shared.worker_id).await
                }
                None => match pool.acquire().await {
                    Ok(c) => {
                        crate::transitions::claims::claim_batch(
                            conn.insert(c),
                            free,
                            shared.config.lease,
                            &shared.worker_id,
                        )
                        .await
                    }
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
                        spawn_run(&shared, claim);
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
                    wait = Duration::from_millis(250 * u64::from(failures.min(8)));
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

fn spawn_run(shared: &Arc<Shared>, claim: Claim) {
    let signals = Signals::default();
    let fence = claim.fence();
    if let Ok(mut running) = shared.running.lock() {
        running.insert(
            fence,
            Running {
                agent: claim.agent.clone(),
                signals: signals.clone(),
            },
        );
    }
    if shared.stop.is_cancelled() {
        signals.stop.cancel();
    }
    let task_shared = shared.clone();
    let task = async move {
        let shared = task_shared;
        let ticket_id = claim.ticket.id.to_string();
        let span = AgentSpan::start(
            &metric::project_label(claim.ticket.project.0),
            &claim.agent,
            &ticket_id,
            &claim.ticket.key,
            claim.trace_context.as_deref(),
        );
        let end = run_until_settled(&shared, &claim, &signals, &span).await;
        tracing::debug!(ticket = %claim.ticket.key, ?end, "ticket run ended");
        record_end(claim.ticket.project.0, &claim.agent, end, &span);
        if let Ok(mut running) = shared.running.lock() {
            running.remove(&fence);
        }
        shared.wake.notify_one();
    };
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
/// with the same claim until it succeeds or the claim is lost.
async fn run_until_settled(shared: &Shared, claim: &Claim, signals: &Signals, span: &AgentSpan) -> RunEnd {
    let mut failures = 0u32;
    loop {
        match agent::run_ticket(&shared.runtime, claim, signals, failures > 0, span).await {
            Ok(end) => return end,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, ticket = %claim.ticket.key, "ticket step failed on a database error; retrying");
                let delay = Duration::from_millis(200 * u64::from(failures.min(25)));
                tokio::select! {
                    _ = signals.abort.cancelled() => return RunEnd::Aborted,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Renews every lease this process holds every lease/3, in a statement per `RENEWAL_CHUNK`. A
/// ticket missing from the answer was lost (reaped, cancelled, taken): its loop is aborted at once. If renewals keep
/// failing until the leases must have expired, every loop is aborted.
async fn renew_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let lease = shared.config.lease;
    let interval = lease / 3;
    let mut last_success = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let held: Vec<Fence> = shared
            .running
            .lock()
            .map(|r| r.keys().copied().collect())
            .unwrap_or_default();
        if held.is_empty() {
            last_success = tokio::time::Instant::now();
            continue;
        }
        match renew(&shared.runtime.pool, &held, lease).await {
            Ok(kept) => {
                last_success = tokio::time::Instant::now();
                let lost = lost_claims(&held, &kept);
                metric::leases_lost(lost.len());
                abort(&shared, &lost);
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot renew leases");
                if last_success.elapsed() >= lease {
                    metric::leases_lost(held.len());
                    abort(&shared, &held);
                }
            }
        }
    }
}

/// Most leases one renewal statement extends: with a hundred thousand tickets in flight, one
/// statement would hold all their rows locked for a second or more, and every ticket finishing
/// meanwhile would wait for it.
const RENEWAL_CHUNK: usize = 10_000;

/// Renews `held` in statements of `RENEWAL_CHUNK`, one after the other; returns the tickets kept.
async fn renew(pool: &sqlx::PgPool, held: &[Fence], lease: Duration) -> Result<Vec<Uuid>, sqlx::Error> {
    let mut kept = Vec::with_capacity(held.len());
    for chunk in held.chunks(RENEWAL_CHUNK) {
        let started = std::time::Instant::now();
        let renewed = db::claims::renew_leases(pool, chunk, lease).await?;
        metric::db_batch("renewals", renewed.len(), started.elapsed(), []);
        kept.extend(renewed);
    }
    Ok(kept)
}

/// The claims of a renewal that it did not renew. Only claims that were part of the renewal can
/// be lost: a ticket claimed while the renewal ran is missing from its answer, yet held.
fn lost_claims(renewed: &[Fence], kept: &[Uuid]) -> Vec<Fence> {
    let kept: std::collections::HashSet<&Uuid> = kept.iter().collect();
    renewed
        .iter()
        .filter(|f| !kept.contains(&f.ticket_id))
        .copied()
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(n: u128, generation: i64) -> Fence {
        Fence {
            ticket_id: Uuid::from_u128(n),
            generation,
        }
    }

    #[test]
    fn only_renewed_claims_missing_from_the_answer_are_lost() {
        let renewed = [fence(1, 1), fence(2, 1), fence(3, 4)];
        let kept = [Uuid::from_u128(1), Uuid::from_u128(3)];
        assert_eq!(lost_claims(&renewed, &kept), vec![fence(2, 1)]);
        // A claim made while the renewal ran is not in it, and so never lost by it.
        assert!(!lost_claims(&renewed, &kept).contains(&fence(9, 1)));
        assert!(lost_claims(&[], &kept).is_empty());
    }
}
