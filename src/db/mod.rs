//! All SQL of agentdesk. Functions take an executor (a pool or a transaction) so callers can put
//! a change and its events in one transaction.

pub mod agents;
pub mod budgets;
pub mod claims;
pub mod comments;
pub mod deadlines;
pub mod desk_stats;
pub mod events;
pub mod experiments;
pub mod fence;
pub mod group_commit;
pub mod http_tools;
pub mod links;
pub mod mcp_servers;
pub mod outputs;
pub mod planner_stats;
pub mod prices;
pub mod projects;
pub mod provider_slots;
pub mod providers;
pub mod retention;
pub mod schedules;
pub mod steps;
pub mod tickets;
pub mod webhooks;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Notification channels. Payloads stay tiny: NOTIFY is a wake-up hint, the tables are the truth.
pub const EVENTS_CHANNEL: &str = "agentdesk_events";
pub const WORK_CHANNEL: &str = "agentdesk_work";
pub const CONTROL_CHANNEL: &str = "agentdesk_control";
/// Token deltas from worker-only processes to API processes, batched (never one NOTIFY per token).
pub const DELTAS_CHANNEL: &str = "agentdesk_deltas";

/// Pools at least this large (the default size) let the busiest background tasks (the event
/// reader, the claim loop, the group writers) keep a connection between their statements: a
/// connection going back to the pool costs a round trip (sqlx checks it on release), which a
/// quiet desk would pay on every write. Smaller pools are left to the agent loops.
const KEEP_CONNECTIONS_FROM: u32 = 16;

/// Whether a background task of this pool may keep its connection (see `KEEP_CONNECTIONS_FROM`).
pub fn may_keep_connection(pool: &PgPool) -> bool {
    pool.options().get_max_connections() >= KEEP_CONNECTIONS_FROM
}

pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        // No ping before every use (it would double the round trips). Only connections opened
        // before this process last saw Postgres drop its connections are pinged, so that a
        // restart does not answer the next requests 503 from dead pooled connections.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if !opened_before_loss(meta.age) {
                    return Ok(true);
                }
                // A dead connection is closed here and the pool opens another.
                Ok(conn.ping().await.is_ok())
            })
        })
        // Generic plans: the statements are few and shaped alike every time, and planning the
        // event and comment appends (CTEs over arrays) anew for each call cost more than running them.
        .connect_with(
            options
                .application_name("agentdesk")
                .options([("plan_cache_mode", "force_generic_plan")]),
        )
        .await
}

/// The instant all process-wide clocks here count from.
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// When this process last saw Postgres drop a connection (a restart, a failover, a killed
/// backend), in nanoseconds after `clock_base`; 0 = never. Process-wide rather than per pool: a
/// needless ping on another pool's connection costs one round trip and nothing else.
static LAST_LOSS: AtomicU64 = AtomicU64::new(0);

/// Records that Postgres dropped a connection just now. The LISTEN connections call it (they
/// read all the time, so they see a restart first), as does every request that failed on one
/// (not one that only waited too long for a connection: its pool's connections are alive).
pub fn note_connection_loss() {
    let now = clock_base().elapsed().as_nanos().max(1);
    LAST_LOSS.fetch_max(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Whether a pooled connection of this `age` was opened before the last loss, and so may be dead.
fn opened_before_loss(age: Duration) -> bool {
    let loss = LAST_LOSS.load(Ordering::Relaxed);
    if loss == 0 {
        return false;
    }
    let opened = clock_base().elapsed().saturating_sub(age);
    opened.as_nanos() <= u128::from(loss)
}

/// Applies pending migrations. sqlx holds an advisory lock meanwhile, so replicas may race safely.
/// A page read with one row more than it shows (`LIMIT limit + 1`): the rows it shows, and
/// whether more follow. The one way every list knows it has a next page.
pub fn page_of<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit.max(0) as usize);
    (rows, more)
}

pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// Ready = reachable and every migration of this binary applied.
pub async fn is_ready(pool: &PgPool) -> bool {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Result<Option<i64>, _> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await;
    matches!(applied, Ok(Some(v)) if v >= latest)
}

/// Whether an error means the database is unreachable (as opposed to a bad statement).
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) || is_connection_lost(err)
}

/// Whether an error means Postgres dropped the connection it came on (a restart, a failover, a
/// terminated backend), rather than that the pool was busy or the statement wrong.
pub fn is_connection_lost(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Io(_) | sqlx::Error::Tls(_))
        || matches!(err, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connections_opened_before_the_last_loss_are_pinged() {
        note_connection_loss();
        assert!(opened_before_loss(Duration::from_secs(3600)), "opened before the loss");
        std::thread::sleep(Duration::from_millis(5));
        assert!(!opened_before_loss(Duration::ZERO), "opened after it");
    }
}
