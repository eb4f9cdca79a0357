//! Provider capacity in the database: one row per model request that holds or waits for one of
//! a provider's `max_concurrent` slots, shared by every process of the desk. A row's id is its
//! place in line; a row lives for a lease and is renewed while its request waits or runs, so the
//! slots and places of a process that died come back when their leases run out.

use std::time::Duration;

use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

/// Where a request stands after a look at the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It holds a slot now.
    Taken,
    /// It waits behind this many requests (holding or waiting ahead of it).
    Waiting { ahead: i64 },
    /// Its row is gone: it was not renewed within the lease, and its place was given up.
    Lost,
}

fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1_000.0
}

/// Gets in line for a slot of `provider`; returns the request's row.
pub async fn enqueue<'e>(
    db: impl PgExecutor<'e>,
    provider: &str,
    ticket_id: Uuid,
    lease: Duration,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO provider_slots (provider, ticket_id, expires_at)
         VALUES ($1, $2, now() + $3 * interval '1 millisecond') RETURNING id",
    )
    .bind(provider)
    .bind(ticket_id)
    .bind(lease_ms(lease))
    .fetch_one(db)
    .await
}

/// Takes a slot for the request `id` when fewer than `limit` requests hold one or wait ahead of
/// it (so requests are served in order of arrival), and renews its row either way.
///
/// Safe across processes: the takers of one provider are serialised by a transaction-level
/// advisory lock, so two of them never both count a free slot; the expired rows of dead processes
/// are removed under the same lock before counting.
pub async fn try_take(
    pool: &PgPool,
    id: i64,
    provider: &str,
    limit: u32,
    lease: Duration,
) -> Result<Turn, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('agentdesk.provider_slots:' || $1, 0))")
        .bind(provider)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM provider_slots WHERE provider = $1 AND expires_at < now()")
        .bind(provider)
        .execute(&mut *tx)
        .await?;
    let row: Option<(bool, i64)> = sqlx::query_as(
        "WITH ahead AS (
            SELECT count(*) AS n FROM provider_slots
            WHERE provider = $2 AND id <> $1 AND (holding OR id < $1))
         UPDATE provider_slots SET holding = holding OR (SELECT n FROM ahead) < $3,
            expires_at = now() + $4 * interval '1 millisecond'
         WHERE id = $1
         RETURNING holding, (SELECT n FROM ahead)",
    )
    .bind(id)
    .bind(provider)
    .bind(i64::from(limit))
    .bind(lease_ms(lease))
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(match row {
        None => Turn::Lost,
        Some((true, _)) => Turn::Taken,
        Some((false, ahead)) => Turn::Waiting { ahead },
    })
}

/// Renews a held slot's lease; false when its row is gone.
pub async fn renew<'e>(db: impl PgExecutor<'e>, id: i64, lease: Duration) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query("UPDATE provider_slots SET expires_at = now() + $2 * interval '1 millisecond' WHERE id = $1")
            .bind(id)
            .bind(lease_ms(lease))
            .execute(db)
            .await?;
    Ok(done.rows_affected() == 1)
}

/// Gives a slot or a place in line back.
pub async fn release<'e>(db: impl PgExecutor<'e>, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM provider_slots WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}
