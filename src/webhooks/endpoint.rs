//! One endpoint's deliveries, in one task of the process holding its lease: read the log after the
//! endpoint's cursor, send the first event it takes, move the cursor once that event is answered
//! (or given up), and so on, one event at a time (the next waits for the one before it).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::send::{self, Attempt, Sender};
use crate::db;
use crate::db::events::{GlobalCursor, LoggedEvent};
use crate::db::webhooks::{AttemptOutcome, EndpointState};
use crate::domain::webhook::{message_id, secret_key, Delivery};
use crate::events::stream::kind_matches;

/// Events read from the log at once.
const BATCH: i64 = 100;
/// An idle endpoint looks at the log at least this often (the hub's wake-ups are the fast path).
const IDLE_POLL: Duration = Duration::from_secs(1);
/// The longest answered events wait to be recorded together.
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Log entries between two prunings of an endpoint's log.
const PRUNE_EVERY: u32 = 200;
/// The shortest time between two rounds (renew, read): while the log moves quickly, its events
/// are read in batches rather than a round per commit.
const MIN_ROUND_INTERVAL: Duration = Duration::from_millis(10);

/// What every endpoint task of a process shares.
pub(super) struct Shared {
    pub pool: PgPool,
    pub sender: Sender,
    /// Bounds the deliveries in flight in this process.
    pub permits: Semaphore,
    pub retry: Vec<Duration>,
    pub lease: Duration,
    /// This process's lease owner id.
    pub owner: Uuid,
    /// The event hub's position: moves when new events are readable.
    pub position: watch::Receiver<GlobalCursor>,
    pub shutdown: CancellationToken,
}

/// Answered events not recorded yet.
#[derive(Default)]
struct Group {
    /// The cursor past every event answered, given up or not taken so far.
    settled: Option<GlobalCursor>,
    deliveries: Vec<Delivery>,
    /// When the first answer of the group came.
    started: Option<Instant>,
}

/// How a send ended.
enum Sent {
    Answered(Attempt),
    Shutdown,
    LeaseLost,
}

/// Why an endpoint's task ends.
enum Stop {
    /// The lease is another's now, or the endpoint was deleted: nothing to release.
    Lost,
    /// Shutdown or disabled: give the lease up.
    Release,
}

/// Delivers endpoint `id` until its lease is lost, it is disabled or deleted, or shutdown.
pub(super) async fn run(shared: Arc<Shared>, id: Uuid) {
    let mut task = Task {
        position: shared.position.clone(),
        shared,
        id,
        logged: 0,
        failures: 0,
    };
    if let Stop::Release = task.deliver().await {
        // Best effort: an unreleased lease expires on its own.
        let _ = db::webhooks::release(&task.shared.pool, id, task.shared.owner).await;
    }
}

struct Task {
    shared: Arc<Shared>,
    id: Uuid,
    position: watch::Receiver<GlobalCursor>,
    /// Log entries written since the last pruning.
    logged: u32,
    /// Database errors in a row.
    failures: u32,
}

impl Task {
    async fn deliver(&mut self) -> Stop {
        let mut round_started = Instant::now();
        loop {
            tokio::time::sleep_until(round_started + MIN_ROUND_INTERVAL).await;
            round_started = Instant::now();
            if self.shared.shutdown.is_cancelled() {
                return Stop::Release;
            }
            // Renewed before every batch: the sends below start only while the lease has at least
            // `send_margin` left (measured from before the renewal), so no other process can take
            // the endpoint while one of ours is in flight.
            let renewed_at = Instant::now();
            let state =
                match db::webhooks::renew(&self.shared.pool, self.id, self.shared.owner, self.shared.lease).await {
                    Ok(Some(state)) => state,
                    Ok(None) => return Stop::Lost,
                    Err(err) => {
                        self.db_failed(&err).await;
                        continue;
                    }
                };
            if state.disabled {
                return Stop::Release;
            }
            let lease_end = renewed_at + self.shared.lease;
            if let Some(due) = state.next_attempt_at {
                let wait = (due - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                if !wait.is_zero() {
                    // Wake to renew the lease meanwhile.
                    if !self.sleep(wait.min(self.shared.lease / 3)).await {
                        return Stop::Release;
                    }
                    continue;
                }
            }
            match self.batch(&state, lease_end).await {
                Ok(Some(stop)) => return stop,
                Ok(None) => self.failures = 0,
                Err(err) => self.db_failed(&err).await,
            }
        }
    }

    /// Reads the events after the cursor and delivers those the endpoint takes, in order, until
    /// one fails or the lease needs renewing; idles when there is nothing to read.
    ///
    /// Answered events are recorded (log entries and the cursor past them) together, at the end of
    /// the batch or every `FLUSH_INTERVAL`: one write per group rather than per event. A crash
    /// before the write sends the group again, with the same ids: at least once.
    async fn batch(&mut self, state: &EndpointState, mut lease_end: Instant) -> Result<Option<Stop>, sqlx::Error> {
        let Ok(key) = secret_key(&state.secret) else {
            // The API accepts only well-formed secrets; a bad one in the table is left alone.
            tracing::warn!(webhook = %self.id, "webhook secret is malformed; not delivering");
            return Ok(Some(Stop::Release));
        };
        // Marked before reading: events read by the hub meanwhile wake the idle wait below.
        self.position.mark_unchanged();
        let events = {
            let mut conn = self.shared.pool.acquire().await?;
            db::events::read_global(&mut conn, state.cursor(), BATCH).await?
        };
        if events.is_empty() {
            return Ok((!self.idle().await).then_some(Stop::Release));
        }
        let shared = self.shared.clone();
        let mut group = Group::default();
        let mut attempts = state.attempts;
        for event in &events {
            if !takes(state, event) {
                group.settled = Some(event.cursor);
                continue;
            }
            let permit = tokio::select! {
                _ = shared.shutdown.cancelled() => return self.stop(&mut group).await,
                permit = shared.permits.acquire() => permit,
            };
            // Half the lease left at least when a send starts; the send renews it while it runs.
            if Instant::now() + self.shared.lease / 2 > lease_end {
                break;
            }
            let msg_id = message_id(self.id, event.cursor.id);
            let Ok(data) = serde_json::value::to_raw_value(&event.event) else {
                continue;
            };
            let body = send::body(&event.event.kind, event.event.at, &data);
            let send = shared.sender.send(&state.url, &key, &msg_id, body);
            let attempt = match self.send_holding_lease(send, &mut lease_end).await {
                Sent::Answered(attempt) => attempt,
                Sent::Shutdown => return self.stop(&mut group).await,
                // Another process holds the endpoint now and sends from the stored cursor (this
                // event again, with the same id: at least once).
                Sent::LeaseLost => return Ok(Some(Stop::Lost)),
            };
            drop(permit);
            attempts += 1;
            let (outcome, label) = self.outcome(&attempt, attempts, event.cursor, group.settled);
            metrics::counter!("agentdesk_webhook_deliveries_total", "outcome" => label).increment(1);
            group.deliveries.push(Delivery {
                event_id: msg_id,
                kind: event.event.kind.clone(),
                attempt: attempts,
                status_code: attempt.status.map(|s| i32::from(s.as_u16())),
                error: attempt.error.clone(),
                duration_ms: attempt.duration.as_millis() as i64,
                at: Utc::now(),
            });
            if outcome.cursor == Some(event.cursor) {
                // Answered (or given up): the next event may go.
                attempts = 0;
                group.settled = Some(event.cursor);
                group.started.get_or_insert_with(Instant::now);
                if group.started.is_some_and(|t| t.elapsed() >= FLUSH_INTERVAL) && !self.flush(&mut group).await? {
                    return Ok(Some(Stop::Lost));
                }
                continue;
            }
            // Failed, or gone: recorded with what went before; retried when due, from the top.
            let deliveries = std::mem::take(&mut group.deliveries);
            if !self.record(&outcome, &deliveries).await? {
                return Ok(Some(Stop::Lost));
            }
            if outcome.disable.is_some() {
                tracing::warn!(webhook = %self.id, url = %state.url, "webhook endpoint answered 410 Gone; disabled");
                return Ok(Some(Stop::Lost));
            }
            return Ok(None);
        }
        Ok((!self.flush(&mut group).await?).then_some(Stop::Lost))
    }

    /// Waits for a send's answer, renewing the lease every third of it meanwhile, so that the
    /// lease may be shorter than a send's timeout: a dead process's endpoints are taken over
    /// after one lease (`AGENTDESK_LEASE_SECS`), whatever the timeout.
    async fn send_holding_lease(
        &self,
        send: impl std::future::Future<Output = Attempt>,
        lease_end: &mut Instant,
    ) -> Sent {
        tokio::pin!(send);
        loop {
            tokio::select! {
                _ = self.shared.shutdown.cancelled() => return Sent::Shutdown,
                attempt = &mut send => return Sent::Answered(attempt),
                _ = tokio::time::sleep(self.shared.lease / 3) => {
                    let renewed_at = Instant::now();
                    match db::webhooks::renew(&self.shared.pool, self.id, self.shared.owner, self.shared.lease).await {
                        Ok(Some(_)) => *lease_end = renewed_at + self.shared.lease,
                        Ok(None) => return Sent::LeaseLost,
                        // Tried again a third of a lease later; should the lease lapse meanwhile,
                        // the endpoint is taken over and the event sent again (at least once).
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// Writes what a group settled (its log entries, the cursor past its events); false when the
    /// lease was lost.
    async fn flush(&mut self, group: &mut Group) -> Result<bool, sqlx::Error> {
        let Some(cursor) = group.settled else {
            return Ok(true);
        };
        let outcome = AttemptOutcome {
            cursor: Some(cursor),
            attempts: 0,
            next_attempt_at: None,
            disable: None,
        };
        let deliveries = std::mem::take(&mut group.deliveries);
        *group = Group::default();
        self.record(&outcome, &deliveries).await
    }

    /// On shutdown: records what was answered (so it is not sent again), then gives the lease up.
    async fn stop(&mut self, group: &mut Group) -> Result<Option<Stop>, sqlx::Error> {
        self.flush(group).await?;
        Ok(Some(Stop::Release))
    }

    async fn record(&mut self, outcome: &AttemptOutcome, deliveries: &[Delivery]) -> Result<bool, sqlx::Error> {
        let held =
            db::webhooks::record_attempts(&self.shared.pool, self.id, self.shared.owner, outcome, deliveries).await?;
        if held {
            self.logged_some(deliveries.len() as u32).await;
        }
        Ok(held)
    }

    /// The endpoint's new state after an attempt of the event at `cursor`, and the metric's outcome.
    fn outcome(
        &self,
        attempt: &Attempt,
        attempts: i32,
        cursor: GlobalCursor,
        skipped: Option<GlobalCursor>,
    ) -> (AttemptOutcome, &'static str) {
        let done = |label| {
            let outcome = AttemptOutcome {
                cursor: Some(cursor),
                attempts: 0,
                next_attempt_at: None,
                disable: None,
            };
            (outcome, label)
        };
        if attempt.succeeded() {
            return done("success");
        }
        if attempt.gone() {
            let outcome = AttemptOutcome {
                cursor: skipped,
                attempts: 0,
                next_attempt_at: None,
                disable: Some("gone"),
            };
            return (outcome, "gone");
        }
        // `attempts` failed so far: retry after the delay of that many, if the schedule has one.
        let Some(delay) = self.shared.retry.get(attempts as usize - 1) else {
            return done("gave_up");
        };
        let delay = attempt.retry_after.unwrap_or(*delay);
        let outcome = AttemptOutcome {
            cursor: skipped,
            attempts,
            next_attempt_at: Some(Utc::now() + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::days(1))),
            disable: None,
        };
        (outcome, "retry")
    }

    async fn logged_some(&mut self, n: u32) {
        self.logged += n;
        if self.logged >= PRUNE_EVERY {
            self.logged = 0;
            // Best effort: the log is only kept from growing without end.
            let _ = db::webhooks::prune_deliveries(&self.shared.pool, self.id).await;
        }
    }

    /// Waits for new events (the hub's position moving), at most `IDLE_POLL`; false on shutdown.
    async fn idle(&mut self) -> bool {
        tokio::select! {
            _ = self.shared.shutdown.cancelled() => false,
            // A closed channel (the hub gone) leaves the poll to wake us.
            _ = async {
                if self.position.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => true,
            // Back within a third of the lease, to renew it.
            _ = tokio::time::sleep(IDLE_POLL.min(self.shared.lease / 3)) => true,
        }
    }

    /// Sleeps; false on shutdown.
    async fn sleep(&self, duration: Duration) -> bool {
        tokio::select! {
            _ = self.shared.shutdown.cancelled() => false,
            _ = tokio::time::sleep(duration) => true,
        }
    }

    /// Backs off after a database error (e.g. while Postgres restarts); the stored cursor is
    /// untouched, so nothing is skipped.
    async fn db_failed(&mut self, err: &sqlx::Error) {
        self.failures += 1;
        if self.failures == 1 || self.failures.is_multiple_of(20) {
            tracing::warn!(webhook = %self.id, error = %err, "webhook delivery cannot reach the database; retrying");
        }
        self.sleep(Duration::from_millis(200 * u64::from(self.failures.min(10))))
            .await;
    }
}

/// Whether the endpoint takes an event: it is of the endpoint's project, its kind matches `events` and its ticket has one of
/// `labels` (an empty list takes all).
fn takes(state: &EndpointState, event: &LoggedEvent) -> bool {
    event.project == state.project_id
        && kind_matches(&state.events, &event.event.kind)
        && (state.labels.is_empty() || event.ticket_labels.iter().any(|l| state.labels.contains(l)))
}
