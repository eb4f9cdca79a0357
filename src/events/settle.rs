//! Waiting for a ticket to settle (done, failed, cancelled or waiting) on the event hub: what
//! the MCP server's `create_ticket` with `wait_secs` and a blocking A2A send do. The waiter
//! subscribes before it reads the ticket, so a change committed in between is still seen; it
//! re-reads the ticket only when the hub carries one of that ticket's persisted events, so an
//! idle wait costs nothing but a broadcast receiver.

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::{EventHub, HubMessage};
use crate::db;
use crate::domain::{Status, Ticket};

/// Whether a ticket is where a waiting client should hear of it: finished, or waiting for a
/// person (a question or approvals).
pub fn is_settled(status: Status) -> bool {
    status.is_terminal() || status == Status::Waiting
}

/// The ticket once it is settled, or as it is when `limit` runs out (or the hub closes). `None`
/// when the ticket is gone (deleted by retention meanwhile).
pub async fn settled(hub: &EventHub, ticket_id: Uuid, limit: Duration) -> Result<Option<Ticket>, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut live = hub.subscribe();
    loop {
        let ticket = db::tickets::find_by_id(hub.pool(), ticket_id).await?;
        match &ticket {
            Some(t) if !is_settled(t.status) => {}
            _ => return Ok(ticket),
        }
        match next_change(&mut live, ticket_id, deadline).await {
            Change::Changed => {}
            Change::TimedOut | Change::Closed => return Ok(ticket),
        }
    }
}

/// What ended a wait for a ticket's next change.
pub enum Change {
    /// The hub carried one of the ticket's persisted events, or lagged (and may have dropped
    /// one): read the ticket again.
    Changed,
    TimedOut,
    /// The hub is gone (the process is stopping).
    Closed,
}

/// Waits until the hub carries one of the ticket's persisted events (until then nothing about
/// the ticket can have changed) or `deadline` passes.
pub async fn next_change(
    live: &mut tokio::sync::broadcast::Receiver<HubMessage>,
    ticket_id: Uuid,
    deadline: tokio::time::Instant,
) -> Change {
    loop {
        match tokio::time::timeout_at(deadline, live.recv()).await {
            Err(_) => return Change::TimedOut,
            Ok(Ok(HubMessage::Events(batch))) if batch.items.iter().any(|i| i.event.ticket_id == Some(ticket_id)) => {
                return Change::Changed
            }
            Ok(Ok(_)) => {}
            Ok(Err(RecvError::Lagged(_))) => return Change::Changed,
            Ok(Err(RecvError::Closed)) => return Change::Closed,
        }
    }
}
