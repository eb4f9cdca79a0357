//! Ticket deadlines: open tickets whose `deadline_at` has passed, failed whatever they are doing
//! (queued, in progress or waiting). What they fail with, and what is logged, the caller decides
//! (`transitions::deadlines`).

use sqlx::types::Json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::{FailureKind, TicketError};

/// A ticket `fail_due` failed.
#[derive(Clone, Debug)]
pub struct PastDeadline {
    pub id: Uuid,
    pub agent: Option<String>,
    /// Its status before (`todo`, `in_progress` or `waiting`).
    pub was: String,
    /// The error stored with it.
    pub error: TicketError,
}

/// Takes the deadline check's lock for the caller's transaction: false when another process
/// holds it (it is doing the check).
pub async fn lock_check(tx: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended('agentdesk.deadlines', 0))")
        .fetch_one(tx)
        .await
}

/// Fails up to `limit` open tickets past their deadline, in the caller's transaction, with the
/// error `kind` and a message made by `format(message, deadline_secs)` (Postgres's `format`).
/// Bumping the generation fences out the worker of an in-progress one (its next write finds the
/// claim lost).
pub async fn fail_due(
    tx: &mut PgConnection,
    limit: i64,
    kind: &FailureKind,
    message: &str,
) -> Result<Vec<PastDeadline>, sqlx::Error> {
    // The status is re-checked under the row lock; a row being written right now is taken next time.
    let failed: Vec<(Uuid, Option<String>, String, Json<TicketError>)> = sqlx::query_as(
        "WITH due AS (
            SELECT id, status FROM tickets
            WHERE deadline_at IS NOT NULL AND deadline_at <= now()
              AND status IN ('todo', 'in_progress', 'waiting')
            ORDER BY deadline_at LIMIT $1
            FOR UPDATE SKIP LOCKED)
         UPDATE tickets t SET status = 'failed',
            error = jsonb_build_object('kind', $2::text, 'message', format($3::text, t.deadline_secs)),
            generation = t.generation + 1, lease_expires_at = NULL, worker_id = NULL,
            work_ms = t.work_ms + COALESCE((extract(epoch FROM now() - t.claimed_at) * 1000)::bigint, 0),
            claimed_at = NULL, finished_at = now(), updated_at = now()
         FROM due WHERE t.id = due.id
         RETURNING t.id, t.agent, due.status, t.error",
    )
    .bind(limit)
    .bind(kind.as_str())
    .bind(message)
    .fetch_all(tx)
    .await?;
    Ok(failed
        .into_iter()
        .map(|(id, agent, was, error)| PastDeadline {
            id,
            agent,
            was,
            error: error.0,
        })
        .collect())
}
