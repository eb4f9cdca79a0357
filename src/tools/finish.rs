//! Finishers: what `close_ticket` and `handover_ticket` return instead of writing, and how the
//! agent loop applies them inside the step's fenced transaction.

use serde_json::{json, Value};
use sqlx::PgConnection;

use super::placeholders::substitute_parent;
use crate::db::claims::Fence;
use crate::db::tickets::NewTicket;
use crate::domain::ticket::DEFAULT_MAX_ATTEMPTS;
use crate::domain::Ticket;
use crate::transitions::{self, DeskError};

#[derive(Clone, Debug, PartialEq)]
pub enum Finisher {
    Close {
        result: Value,
    },
    Handover {
        to: String,
        task: String,
        result: String,
        schema: Option<Value>,
    },
}

/// What `close_ticket` answers the model.
pub fn closed_output(ticket: &Ticket) -> String {
    format!("{} is done.", ticket.key)
}

/// Applies a finisher's side effects inside the caller's fenced transaction (the caller holds the
/// ticket's row lock through `db::claims::fence`): a handover creates the child ticket, labelled
/// `to`, with `{parent_key}` and `{parent_result}` substituted once. Returns the tool output and
/// the ticket's result; the caller then finishes the ticket with it, after storing the tool
/// results, so that `ticket.done` is the ticket's last event.
pub async fn apply_finisher(
    conn: &mut PgConnection,
    _fence: Fence,
    ticket: &Ticket,
    agent: &str,
    finisher: &Finisher,
) -> Result<(String, Value), sqlx::Error> {
    match finisher {
        Finisher::Close { result } => Ok((closed_output(ticket), result.clone())),
        Finisher::Handover {
            to,
            task,
            result,
            schema,
        } => {
            let child = NewTicket {
                project: ticket.project,
                task: Value::String(substitute_parent(task, &ticket.key, result)),
                labels: vec![to.clone()],
                priority: 0,
                schema: schema.clone(),
                parent_id: Some(ticket.id),
                metadata: json!({}),
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                reporter: agent.to_string(),
                idempotency: None,
                trace_context: None,
                deadline_secs: None,
            };
            let child = transitions::create_ticket(conn, child).await.map_err(into_sqlx)?;
            let output = format!("{} is done; handed over to {} (to: {to}).", ticket.key, child.key);
            Ok((output, Value::String(result.clone())))
        }
    }
}

/// `transitions::create_ticket` only fails on the database; anything else would be a bug, reported as
/// a protocol error rather than a panic.
fn into_sqlx(err: DeskError) -> sqlx::Error {
    match err {
        DeskError::Db(err) => err,
        other => sqlx::Error::Protocol(other.to_string()),
    }
}
