//! The queue's periodic background services, one file each, all on one shape
//! ([`periodic`]: a tick every interval until shutdown, an error logged and tried again at the
//! next tick). What each tick decides lives in `transitions/` and what it writes in `db/`; a
//! service only says when. Every worker process runs them: their writes take row locks (or an
//! advisory lock) so that processes running them at once never do one thing twice.

pub mod deadlines;
pub mod experiments;
pub mod planner_stats;
pub mod reaper;
pub mod retention;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::events::EventHub;

/// Whom a tick that changed tickets tells: the live hub (streams read what was written) and the
/// process's claimers (a ticket may be claimable again).
#[derive(Clone)]
pub struct Nudge {
    pub hub: EventHub,
    pub claimers: Arc<Notify>,
}

impl Nudge {
    /// Tickets changed, and some may be claimable.
    pub fn work_changed(&self) {
        self.hub.wake();
        self.claimers.notify_one();
    }
}

/// Runs `tick` every `interval` until `shutdown`. A tick that fails (Postgres restarting, say) is
/// logged at debug level, as readiness reports a database that is away, and the next tick tries
/// again: nothing a tick does is half-done, since each write is one transaction.
pub async fn periodic<F, Fut>(name: &'static str, interval: Duration, shutdown: CancellationToken, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), sqlx::Error>>,
{
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if let Err(err) = tick().await {
            tracing::debug!(service = name, error = %err, "a background service could not run; it tries again");
        }
    }
}
