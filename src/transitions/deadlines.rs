//! Ticket deadlines: a ticket still open when its `deadline_at` passes fails with
//! `deadline_exceeded`, whatever it is doing (queued, in progress or waiting).

use sqlx::PgPool;

use crate::db;
use crate::domain::{EventData, NewEvent};

/// The error kind of a ticket whose deadline passed.
pub const DEADLINE_EXCEEDED: &str = "deadline_exceeded";

/// The error's message, as Postgres's `format` with the ticket's `deadline_secs`.
const DEADLINE_MESSAGE: &str = "the ticket's deadline of %s s after its creation has passed";

/// Fails up to `limit` open tickets past their deadline, each with its `ticket.failed` in the
/// same transaction; one process at a time does this. Bumping the generation fences out the
/// worker of an in-progress one (its next write finds the claim lost), and a cancel notice
/// stops its model stream and tools at once. Returns how many tickets failed.
pub async fn fail_past_deadline(pool: &PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !db::deadlines::lock_check(&mut tx).await? {
        return Ok(0);
    }
    let failed = db::deadlines::fail_due(&mut tx, limit, DEADLINE_EXCEEDED, DEADLINE_MESSAGE).await?;
    for ticket in &failed {
        // The event carries the error exactly as stored.
        let failed = EventData::TicketFailed {
            error: ticket.error.clone(),
        };
        let event = NewEvent::new(ticket.agent.as_deref(), failed);
        db::events::append(&mut tx, ticket.id, &[event]).await?;
        if ticket.was == "in_progress" {
            db::tickets::notify_cancel(&mut tx, ticket.id).await?;
        }
    }
    tx.commit().await?;
    Ok(failed.len())
}
