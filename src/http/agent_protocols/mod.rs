//! The desk as a peer of other agents: an MCP server at `/mcp` and an A2A agent at `/a2a`.
//!
//! Neither has a way of its own to create, change or watch a ticket: both call what `/v1` calls
//! (`http::tickets::create` and `list`, the transitions, the event hub), so idempotency, durable
//! acknowledgements, fencing and exactly-once streams hold through them as they do over REST.

pub mod a2a;
pub mod document;
pub mod mcp;

use std::time::Duration;

use crate::http::error::ApiError;
use crate::http::AppState;

/// The longest a request here waits for a ticket to settle (MCP's `wait_secs`, A2A's blocking
/// send); the request time limit of these paths is raised by as much.
pub const LONGEST_WAIT: Duration = Duration::from_secs(300);

/// The ticket once it is done, failed, cancelled or waiting, or as it is after `limit` (or at
/// once when no agent takes it).
async fn settled_ticket(
    state: &AppState,
    ticket: crate::domain::Ticket,
    limit: Duration,
) -> Result<crate::domain::Ticket, ApiError> {
    if limit.is_zero() || crate::events::settle::is_settled(ticket.status) {
        return Ok(ticket);
    }
    // A ticket no agent takes would hold the request for the whole wait: it is answered as it is.
    if state.route_check.warning(&state.pool, &ticket).await?.is_some() {
        return Ok(ticket);
    }
    let id = ticket.id;
    let settled = tokio::select! {
        settled = crate::events::settle::settled(&state.hub, id, limit) => settled?,
        // Shutting down: answer with the ticket as it is rather than hold the shutdown up.
        _ = state.shutdown.cancelled() => crate::db::tickets::find_by_id(&state.pool, id).await?,
    };
    settled.ok_or_else(|| ApiError::ticket_not_found(&id.to_string()))
}
