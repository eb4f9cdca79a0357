//! Deadlines, checked every second: tickets past their `deadline_at` fail; calls and questions
//! nobody answered by their `expires_at` are answered as their `on_timeout` says
//! (`transitions::deadlines`). The deadlines live in Postgres (cheap partial indexes), so they
//! hold across restarts and fire within about 2 s in whichever process is alive.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{periodic, Nudge};
use crate::transitions::deadlines;

/// How often deadlines are looked for: a deadline is kept to about this.
const POLL: Duration = Duration::from_secs(1);

pub async fn run(pool: PgPool, nudge: Nudge, shutdown: CancellationToken) {
    periodic("deadlines", POLL, shutdown, || async {
        let failed = deadlines::fail_past_deadline(&pool, 500).await?;
        if failed > 0 {
            tracing::info!(tickets = failed, "failed tickets past their deadline");
            nudge.hub.wake();
        }
        let answered = deadlines::expire_approvals(&pool, 100).await?;
        if answered > 0 {
            tracing::info!(tickets = answered, "answered calls and questions whose deadline passed");
            nudge.work_changed();
        }
        Ok(())
    })
    .await
}
