use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::db::claims::Fence;
use crate::domain::Ticket;

pub struct ToolContext<'a> {
    pub pool: &'a PgPool,
    pub fence: Fence,
    pub ticket: &'a Ticket,
    pub agent: &'a str,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    Output(String),
    Failed { kind: &'static str, message: String },
    Finish(Finisher),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Finisher {
    Close { result: Value },
    Handover { to: String, task: String, result: String, schema: Option<Value> },
}

pub async fn run_builtin(_ctx: &ToolContext<'_>, name: &str, input: &Value) -> ToolOutcome {
    match name {
        "close_ticket" => ToolOutcome::Finish(Finisher::Close { result: input["result"].clone() }),
        _ => ToolOutcome::Failed { kind: "unknown_tool", message: name.into() },
    }
}

/// Applies a finisher's side effects (a handover's child ticket) in the caller's fenced
/// transaction; returns the tool output and the ticket's result. The caller then finishes the
/// ticket, so that `ticket.done` is the ticket's last event of the step.
pub async fn apply_finisher(
    _conn: &mut PgConnection,
    _fence: Fence,
    ticket: &Ticket,
    _agent: &str,
    finisher: &Finisher,
) -> Result<(String, Value), sqlx::Error> {
    match finisher {
        Finisher::Close { result } => Ok((format!("{} is done.", ticket.key), result.clone())),
        Finisher::Handover { result, .. } => Ok((format!("{} is done.", ticket.key), Value::String(result.clone()))),
    }
}
