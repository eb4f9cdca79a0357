//! `handover_ticket`: finishes the ticket and hands the follow-up to another agent or label.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::{Deserializer, Error};
use serde::Deserialize;
use serde_json::Value;

use super::params;
use super::shape::BuiltinTool;
use super::text::clip;
use super::{HANDOVER_TICKET, MAX_FIELD_CHARS};
use crate::schema::validate_against;
use crate::tools::{Finisher, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};
use crate::transitions;

const DESCRIPTION: &str = "Finish the current ticket with a result AND hand the follow-up work to \
    another agent: this closes your ticket (like close_ticket) and creates a new ticket \
    for the agent or label named in `to`. Use it only when the next step belongs to \
    someone else; use close_ticket when no follow-up is needed. The follow-up `task` may \
    contain the placeholders {parent_key} (this ticket's key) and {parent_result} (the \
    `result` you give here), which are substituted when the new ticket is created.";

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// Name of the agent or label that takes the follow-up ticket.
    #[schemars(length(min = 1))]
    #[serde(deserialize_with = "to")]
    pub to: String,
    /// The follow-up ticket's task, written so the receiver can act on it
    /// without other context. May contain {parent_key} and {parent_result}.
    #[schemars(length(min = 1))]
    #[serde(deserialize_with = "task")]
    pub task: String,
    /// This ticket's result (non-empty text). It closes the current ticket.
    #[schemars(length(min = 1))]
    #[serde(deserialize_with = "result")]
    pub result: String,
    /// Optional JSON Schema (draft 2020-12) that the follow-up ticket's
    /// result must satisfy. Omit it when the result is free-form.
    #[schemars(extend("type" = "object"))]
    #[serde(deserialize_with = "schema")]
    pub schema: Option<Value>,
}

/// Trimmed, and a valid label.
fn to<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let to = params::required_text(
        d,
        "to",
        "`to` must not be empty: name the agent or label that takes the follow-up",
        "`to` must be a string: the name of an agent or label",
    )?;
    match transitions::normalize_labels(vec![to.trim().to_string()]) {
        Ok(mut labels) if labels.len() == 1 => Ok(labels.remove(0)),
        Ok(_) => Err(D::Error::custom("`to` must name exactly one agent or label")),
        Err(e) => Err(D::Error::custom(format!("`to`: {e}"))),
    }
}

fn task<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    params::required_text(d, "task", "`task` must not be empty", "`task` must be a string")
}

fn result<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    params::required_text(
        d,
        "result",
        "`result` must not be empty",
        "`result` must be a string: pass plain prose, not numbers, objects or arrays. \
         For a structured result use close_ticket instead.",
    )
}

/// A valid JSON Schema, when given.
fn schema<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let Some(schema) = Option::<Value>::deserialize(d)? else {
        return Ok(None);
    };
    match transitions::check_schema(&schema) {
        Ok(()) => Ok(Some(schema)),
        Err(e) => Err(D::Error::custom(format!(
            "cannot hand over: the given `schema` is invalid: {e}"
        ))),
    }
}

pub struct HandoverTicket;

#[async_trait]
impl BuiltinTool for HandoverTicket {
    const NAME: &'static str = HANDOVER_TICKET;
    const DESCRIPTION: &'static str = DESCRIPTION;
    /// The loop applies the handover (the child ticket, the close) at commit.
    const WRITES_NOTHING: bool = true;
    type Args = Args;

    async fn run(ctx: &ToolContext<'_>, args: Args) -> ToolOutcome {
        let Args {
            to,
            task,
            result,
            schema,
        } = args;
        // The handover closes this ticket with `result`, so its own schema must accept that string.
        if let Some(own) = &ctx.ticket.schema {
            if let Err(problems) = validate_against(own, &Value::String(result.clone())) {
                return ToolFailure::new(
                    ToolErrorKind::ResultInvalid,
                    format!(
                        "The result does not match this ticket's result schema: {problems}. The schema is: {}. \
                         Call handover_ticket again with a `result` that matches the schema, or use close_ticket \
                         when the schema asks for a structured result.",
                        clip(&own.to_string(), MAX_FIELD_CHARS)
                    ),
                )
                .into();
            }
        }
        ToolOutcome::Finish(Finisher::Handover {
            to,
            task,
            result,
            schema,
        })
    }
}
