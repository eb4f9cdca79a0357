//! Experiments, moved on every second (`transitions::experiments::advance`): a judge is asked
//! about each ticket whose arms have all finished, and an experiment whose replays and judges
//! have all finished is done.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{periodic, Nudge};
use crate::transitions::experiments;

const POLL: Duration = Duration::from_secs(1);

pub async fn run(pool: PgPool, nudge: Nudge, shutdown: CancellationToken) {
    periodic("experiments", POLL, shutdown, || async {
        if experiments::advance(&pool, 20).await? > 0 {
            // A judge's ticket to claim, or an experiment's end to show.
            nudge.work_changed();
        }
        Ok(())
    })
    .await
}
