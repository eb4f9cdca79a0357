//! The reaper: tickets whose lease expired go back to the queue, so no ticket stays
//! `in_progress` without a live worker for longer than the lease and a quarter of it; budget
//! reservations of claims that ended without settling are given back; tickets an agent's daily
//! budget stopped resume on a new UTC day.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{periodic, Nudge};
use crate::db;

/// A quarter of the lease, between 250 ms and 15 s.
pub fn interval(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(250), Duration::from_secs(15))
}

pub async fn run(pool: PgPool, lease: Duration, nudge: Nudge, shutdown: CancellationToken) {
    periodic("reaper", interval(lease), shutdown, || async {
        let requeued = db::claims::reap_expired(&pool, 500).await?;
        if requeued > 0 {
            tracing::info!(tickets = requeued, "re-queued tickets whose lease expired");
            nudge.work_changed();
        }
        db::budgets::release_orphans(&pool).await?;
        let resumed = db::budgets::resume_new_day(&pool).await?;
        if resumed > 0 {
            tracing::info!(
                tickets = resumed,
                "a new day: tickets that waited for an agent's daily budget resume"
            );
            nudge.work_changed();
        }
        Ok(())
    })
    .await
}
