//! Ticket deadlines: a ticket still open when its `deadline_at` passes fails with
//! `deadline_exceeded`, whatever it is doing (queued, in progress or waiting).

use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::{EventData, NewEvent, TicketError};

/// The error kind of a ticket whose deadline passed.
pub const DEADLINE_EXCEEDED: &str = "deadline_exceeded";

/// Fails up to `limit` open tickets past their deadline, each with its `ticket.failed` in the
/// same transaction; one process at a time does this. Bumping the generation fences out the
/// worker of an in-progress one (its next write finds the claim lost), and a cancel notice
/// stops its model stream and tools at once. Returns how many tickets failed.
pub async fn fail_past_deadline(pool: &PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let got_lock: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended('agentdesk.deadlines', 0))")
            .fetch_one(&mut *tx)
            .await?;
    if !got_lock {
        return Ok(0);
    }
    // The status is re-checked under the row lock; a row being written right now is taken next time.
    let failed: Vec<(Uuid, Option<String>, String, Option<i32>)> = sqlx::query_as(
        "WITH due AS (
            SELECT id, status FROM tickets
            WHERE deadline_at IS NOT NULL AND deadline_at <= now()
              AND status IN ('todo', 'in_progress', 'waiting')
            ORDER BY deadline_at LIMIT $1
            FOR UPDATE SKIP LOCKED)
         UPDATE tickets t SET status = 'failed',
            error = jsonb_build_object('kind', $2::text, 'message',
                format('the ticket''s deadline of %s s after its creation has passed', t.deadline_secs)),
            generation = t.generation + 1, lease_expires_at = NULL, worker_id = NULL,
            work_ms = t.work_ms + COALESCE((extract(epoch FROM now() - t.claimed_at) * 1000)::bigint, 0),
            claimed_at = NULL, finished_at = now(), updated_at = now()
         FROM due WHERE t.id = due.id
         RETURNING t.id, t.agent, due.status, t.deadline_secs",
    )
    .bind(limit)
    .bind(DEADLINE_EXCEEDED)
    .fetch_all(&mut *tx)
    .await?;
    for (id, agent, was, secs) in &failed {
        let error = TicketError {
            kind: DEADLINE_EXCEEDED.into(),
            message: format!(
                "the ticket's deadline of {} s after its creation has passed",
                secs.unwrap_or_default()
            ),
        };
        let event = NewEvent::new(agent.as_deref(), EventData::TicketFailed { error });
        super::events::append(&mut tx, *id, &[event]).await?;
        if was == "in_progress" {
            super::tickets::notify_cancel(&mut tx, *id).await?;
        }
    }
    tx.commit().await?;
    Ok(failed.len())
}
