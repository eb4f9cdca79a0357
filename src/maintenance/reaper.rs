//! The reaper: tickets whose lease expired go back to the queue, so no ticket stays
//! `in_progress` without a live worker for longer than the lease and a quarter of it; budget
//! reservations of claims that ended without settling are given back; tickets an agent's daily
//! budget stopped resume on a new UTC day.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{periodic, Nudge};
use crate::db;
use crate::transitions::claims;

/// A quarter of the lease, between 250 ms and 15 s.
pub fn interval(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(250), Duration::from_secs(15))
}

/// Tickets reaped by one transaction. A tick goes on with the next batch while batches come
/// back full, so a process that died holding 100 000 tickets is reaped within the tick, and
/// each batch is claimable at once.
const BATCH: i64 = 1000;

pub async fn run(pool: PgPool, lease: Duration, nudge: Nudge, shutdown: CancellationToken) {
    periodic("reaper", interval(lease), shutdown, || async {
        let mut requeued = 0;
        loop {
            let reaped = claims::reap_expired(&pool, BATCH).await?;
            requeued += reaped;
            if reaped > 0 {
                nudge.work_changed();
            }
            if (reaped as i64) < BATCH {
                break;
            }
        }
        if requeued > 0 {
            tracing::info!(tickets = requeued, "re-queued tickets whose lease expired");
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
