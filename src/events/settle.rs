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
use crate::domain::{Status, Ticket, TicketRef};

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
    let reference = TicketRef::Id(ticket_id);
    loop {
        let ticket = db::tickets::find(hub.pool(), &reference).await?;
        match &ticket {
            Some(t) if !is_settled(t.status) => {}
            _ => return Ok(ticket),
        }
        // Until one of the ticket's own persisted events arrives (or the broadcast lagged, and
        // with it perhaps such an event), nothing about the ticket can have changed.
        loop {
            let message = match tokio::time::timeout_at(deadline, live.recv()).await {
                Err(_) => return Ok(ticket),
                Ok(message) => message,
            };
            match message {
                Ok(HubMessage::Events(batch)) if batch.items.iter().any(|i| i.event.ticket_id == ticket_id) => break,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => return Ok(ticket),
            }
        }
    }
}
