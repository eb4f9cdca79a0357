//! Retention (`AGENTDESK_RETENTION_DAYS`): deleting tickets that finished long enough ago, with
//! their comments, events and stored tool outputs (their approvals live on their row), and old
//! webhook delivery records; and what is stored, for `/v1/stats`.
//!
//! Why deleting events keeps every cursor valid:
//! - The global stream and the webhook endpoints read the events *after* a cursor `(txid, id)`,
//!   below the horizon (see `events`). A delete only removes rows: it never adds one behind a
//!   cursor, so no reader can skip an event that is kept, nor see one twice. A cursor whose own
//!   event is gone still orders against the others, so a reader resuming from it goes on with the
//!   next event kept. The deleting transaction, while it runs, holds the horizon back like any
//!   writer (events wait, none is skipped); a batch is small, so it holds it briefly.
//! - A ticket's events go only with the ticket, so a kept ticket's `seq`s have no gaps, and the
//!   ticket and list cursors (numbers, seqs) are positions that need no row to exist.
//!
//! Why no work is lost: only tickets in a final status are taken, each locked (`FOR UPDATE SKIP
//! LOCKED`) and checked again under the lock, so a ticket that a comment reopens or a writer
//! holds at that moment is left for a later sweep. One process sweeps at a time (an advisory
//! lock per batch), and each batch is its own short transaction.

use std::time::Duration;

use serde::Serialize;
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;
use uuid::Uuid;

/// Tickets deleted per transaction: small, so that a batch's locks and its hold on the global
/// stream's horizon last milliseconds.
pub const BATCH: i64 = 100;
/// Webhook delivery records deleted per statement.
const DELIVERY_BATCH: i64 = 1000;
/// The advisory lock that lets one process sweep at a time.
pub const SWEEP_LOCK: i64 = i64::from_be_bytes(*b"retentn!");
/// The pause between two batches, which leaves the database to the hot path.
const PAUSE: Duration = Duration::from_millis(20);
/// The longest time between two sweeps.
const MAX_INTERVAL: Duration = Duration::from_secs(30);

/// What one sweep deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub tickets: u64,
    pub events: u64,
    pub comments: u64,
    pub deliveries: u64,
    /// Whether another process held the sweep lock (then this one deleted nothing).
    pub busy: bool,
}

fn secs(keep: Duration) -> f64 {
    keep.as_secs_f64()
}

/// Deletes one batch of tickets finished more than `keep` ago (at most `limit`), in one
/// transaction. None: another process is sweeping.
pub async fn delete_ticket_batch(pool: &PgPool, keep: Duration, limit: i64) -> Result<Option<Swept>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(SWEEP_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !locked {
        return Ok(None);
    }
    // Locked and checked again under the lock: a ticket reopened (by a comment) or written to
    // meanwhile is not final any more, or is skipped while its writer holds it.
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM tickets
         WHERE status IN ('done', 'failed', 'cancelled') AND finished_at < now() - make_interval(secs => $1)
         ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(secs(keep))
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        return Ok(Some(Swept::default()));
    }
    // The rows that cascade from the ticket, deleted explicitly to count them (each through its
    // table's index on ticket_id); then the tickets, which clears their children's parent_id.
    let events = sqlx::query("DELETE FROM events WHERE ticket_id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let comments = sqlx::query("DELETE FROM comments WHERE ticket_id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM tool_outputs WHERE ticket_id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    let tickets = sqlx::query("DELETE FROM tickets WHERE id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(Some(Swept {
        tickets,
        events,
        comments,
        ..Swept::default()
    }))
}

/// Deletes up to `limit` webhook delivery records written more than `keep` ago, taken from the
/// oldest (by id, without an index on their time: records are written in about time order, so
/// one written a little out of order waits for the next sweep).
pub async fn delete_delivery_batch(pool: &PgPool, keep: Duration, limit: i64) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query(
        "DELETE FROM webhook_deliveries WHERE id IN (
            SELECT id FROM webhook_deliveries ORDER BY id LIMIT $2)
         AND at < now() - make_interval(secs => $1)",
    )
    .bind(secs(keep))
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(deleted.rows_affected())
}

/// Deletes everything older than `keep`, batch after batch, until nothing is left to delete or
/// `shutdown`. Another process sweeping at the same time makes this one stop (`busy`).
pub async fn sweep(pool: &PgPool, keep: Duration, shutdown: &CancellationToken) -> Result<Swept, sqlx::Error> {
    let mut total = Swept::default();
    loop {
        let Some(batch) = delete_ticket_batch(pool, keep, BATCH).await? else {
            total.busy = true;
            return Ok(total);
        };
        total.tickets += batch.tickets;
        total.events += batch.events;
        total.comments += batch.comments;
        if batch.tickets < BATCH as u64 || !pause(shutdown).await {
            break;
        }
    }
    loop {
        let deleted = delete_delivery_batch(pool, keep, DELIVERY_BATCH).await?;
        total.deliveries += deleted;
        if deleted < DELIVERY_BATCH as u64 || !pause(shutdown).await {
            break;
        }
    }
    Ok(total)
}

/// Sleeps between batches; false on shutdown.
async fn pause(shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(PAUSE) => true,
    }
}

/// How often the background task sweeps: a quarter of the retention, between 1 s and 30 s (so at
/// least twice a minute, and a tiny retention, as in tests, is honoured within seconds).
pub fn interval(keep: Duration) -> Duration {
    (keep / 4).clamp(Duration::from_secs(1), MAX_INTERVAL)
}

/// What the database stores: exact counts, and its size as Postgres reports it.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct Storage {
    pub tickets: i64,
    pub events: i64,
    pub comments: i64,
    /// The database's size on disk (`pg_database_size`), in bytes.
    pub bytes: i64,
}

pub async fn storage(pool: &PgPool) -> Result<Storage, sqlx::Error> {
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM tickets) AS tickets, (SELECT count(*) FROM events) AS events,
                (SELECT count(*) FROM comments) AS comments, pg_database_size(current_database()) AS bytes",
    )
    .fetch_one(pool)
    .await?;
    Ok(Storage {
        tickets: row.try_get("tickets")?,
        events: row.try_get("events")?,
        comments: row.try_get("comments")?,
        bytes: row.try_get("bytes")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_at_least_twice_a_minute_and_at_most_every_second() {
        assert_eq!(interval(Duration::from_secs(30 * 86400)), MAX_INTERVAL);
        assert_eq!(interval(Duration::from_millis(864)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(20)), Duration::from_secs(5));
    }
}
