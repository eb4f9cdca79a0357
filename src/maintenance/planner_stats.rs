//! The planner's statistics: every second, tables that outgrew what Postgres last measured are
//! analysed (`db::planner_stats::Refresher`), so plans stay right while a queue grows fast.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::periodic;
use crate::db::planner_stats::Refresher;

const CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub async fn run(pool: PgPool, shutdown: CancellationToken) {
    let refresher = Arc::new(Mutex::new(Refresher::default()));
    periodic("planner statistics", CHECK_INTERVAL, shutdown, || {
        let (refresher, pool) = (refresher.clone(), pool.clone());
        async move {
            let tables = refresher.lock().await.refresh_if_outgrown(&pool).await?;
            if !tables.is_empty() {
                tracing::debug!(?tables, "analysed tables that had outgrown their statistics");
            }
            Ok(())
        }
    })
    .await
}
