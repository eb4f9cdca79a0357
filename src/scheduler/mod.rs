//! The scheduler: one loop per process that works tickets (`serve`, `worker`), any number of them
//! against one database. It sleeps until the earliest `next_run_at` of the enabled schedules (one
//! index-only read), or until a schedule changes (a NOTIFY on `agentdesk_schedules`), then hands
//! each due schedule to `transitions::schedules::fire_due`, which makes exactly one ticket per fire
//! time whatever the other schedulers do. Idle, it costs one statement a minute.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::events::EventHub;
use crate::transitions::schedules::{fire_due, Outcome};

/// The longest sleep without a look at the schedules (a NOTIFY lost while reconnecting is seen
/// by then at the latest).
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// A due schedule that another scheduler is firing is looked at again after this.
const BUSY_RETRY: Duration = Duration::from_millis(100);
/// After a database error.
const ERROR_RETRY: Duration = Duration::from_secs(1);

/// Starts the loop; it ends when `shutdown` is cancelled.
pub fn start(pool: PgPool, hub: EventHub, shutdown: CancellationToken) -> JoinHandle<()> {
    let changed = Arc::new(Notify::new());
    tokio::spawn(listen(hub.clone(), changed.clone(), shutdown.clone()));
    tokio::spawn(run(pool, hub, changed, shutdown))
}

async fn run(pool: PgPool, hub: EventHub, changed: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        let wait = match fire_all_due(&pool, &hub).await {
            Ok(()) => next_wait(&pool).await.unwrap_or(ERROR_RETRY),
            Err(err) => {
                tracing::warn!(error = %err, "the scheduler could not fire schedules; retrying");
                ERROR_RETRY
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = changed.notified() => {}
        }
    }
}

/// Fires every schedule that is due now and that no other scheduler is firing.
async fn fire_all_due(pool: &PgPool, hub: &EventHub) -> Result<(), crate::transitions::DeskError> {
    while let Some((outcome, cancelled)) = fire_due(pool).await? {
        crate::telemetry::metric::schedule_firing(outcome.label());
        for (project, agent) in cancelled {
            crate::telemetry::metric::ticket_finished(project.0, &agent, "cancelled");
        }
        match &outcome {
            Outcome::Fired(ticket) | Outcome::CaughtUp(ticket) => {
                tracing::debug!(ticket = %ticket.key, "a schedule fired");
                hub.wake();
                hub.work_available();
            }
            // `schedule.skipped` (and any cancel) went into the log.
            Outcome::Skipped => hub.wake(),
            Outcome::Missed | Outcome::AlreadyFired => {}
        }
    }
    Ok(())
}

/// How long to sleep: until the earliest `next_run_at` (by the database's clock), a short retry
/// when one is due but being fired elsewhere, or `MAX_SLEEP` when nothing is scheduled.
async fn next_wait(pool: &PgPool) -> Result<Duration, sqlx::Error> {
    let (earliest, now) = db::schedules::earliest(pool).await?;
    crate::telemetry::metric::scheduler_polled();
    Ok(match earliest {
        None => MAX_SLEEP,
        Some(at) if at <= now => BUSY_RETRY,
        Some(at) => (at - now)
            .to_std()
            .map_or(BUSY_RETRY, |d| d + Duration::from_millis(1))
            .min(MAX_SLEEP),
    })
}

/// Wakes the loop whenever a schedule is created, edited or deleted, in any process.
async fn listen(hub: EventHub, changed: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        let mut listener = match hub.listener("schedules", &[db::schedules::SCHEDULES_CHANNEL]).await {
            Ok(l) => l,
            Err(_) => {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(ERROR_RETRY) => continue,
                }
            }
        };
        // A change missed while (re)connecting: look once now.
        changed.notify_one();
        loop {
            let message = tokio::select! {
                _ = shutdown.cancelled() => return,
                m = listener.try_recv() => m,
            };
            match message {
                Ok(Some(_)) => changed.notify_one(),
                Ok(None) | Err(_) => break,
            }
        }
    }
}
