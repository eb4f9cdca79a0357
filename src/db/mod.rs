//! All SQL of agentdesk. Functions take an executor (a pool or a transaction) so callers can put
//! a change and its events in one transaction.

pub mod agents;
pub mod claims;
pub mod comments;
pub mod deadlines;
pub mod desk_stats;
pub mod events;
pub mod group;
pub mod http_tools;
pub mod mcp_servers;
pub mod outputs;
pub mod planner_stats;
pub mod providers;
pub mod steps;
pub mod tickets;
pub mod webhooks;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

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
        // No ping before every use (it would double the round trips): a connection that died
        // with a Postgres restart fails its next query and is dropped; callers retry.
        .test_before_acquire(false)
        // Generic plans: the statements are few and shaped alike every time, and planning the
        // event and comment appends (CTEs over arrays) anew for each call cost more than running them.
        .connect_with(
            options
                .application_name("agentdesk")
                .options([("plan_cache_mode", "force_generic_plan")]),
        )
        .await
}

/// Applies pending migrations. sqlx holds an advisory lock meanwhile, so replicas may race safely.
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
    matches!(
        err,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_)
    ) || matches!(err, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}
