//! Retention: finished tickets (with their events and comments) and webhook delivery records
//! older than `AGENTDESK_RETENTION` are deleted, batch after batch (`db::retention::sweep`), at
//! start-up and then every `db::retention::interval(keep)`. Every process sweeps; an advisory
//! lock lets one at a time delete.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::periodic;
use crate::db::retention;

pub async fn run(pool: PgPool, keep: Duration, shutdown: CancellationToken) {
    let sweep = || async {
        let swept = retention::sweep(&pool, keep, &shutdown).await?;
        if swept.tickets + swept.deliveries > 0 {
            tracing::info!(
                tickets = swept.tickets,
                events = swept.events,
                comments = swept.comments,
                webhook_deliveries = swept.deliveries,
                "retention deleted old records"
            );
        }
        Ok(())
    };
    // Retried at the next sweep (e.g. while Postgres restarts); nothing half-done stays, since
    // each batch is one transaction.
    if let Err(err) = sweep().await {
        tracing::warn!(error = %err, "retention sweep failed; retrying later");
    }
    periodic("retention", retention::interval(keep), shutdown.clone(), sweep).await
}
