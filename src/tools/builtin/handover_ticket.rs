//! `handover_ticket`: finishes the ticket and hands the follow-up to another agent or label.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde_json::Value;

use super::text::clip;
use super::{HANDOVER_TICKET, MAX_FIELD_CHARS};
use crate::schema::validate_against;
use crate::tools::args::args_schema;
use crate::tools::{Finisher, Tool, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};
use crate::transitions;

const DESCRIPTION: &str = "Finish the current ticket with a result AND hand the follow-up work to \
    another agent: this closes your ticket (like close_ticket) and creates a new ticket \
    for the agent or label named in `to`. Use it only when the next step belongs to \
    someone else; use close_ticket when no follow-up is needed. The follow-up `task` may \
    contain the placeholders {parent_key} (this ticket's key) and {parent_result} (the \
    `result` you give here), which are substituted when the new ticket is created.";

#[derive(Debug, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// Name of the agent or label that takes the follow-up ticket.
    #[schemars(length(min = 1))]
    pub to: String,
    /// The follow-up ticket's task, written so the receiver can act on it
    /// without other context. May contain {parent_key} and {parent_result}.
    #[schemars(length(min = 1))]
    pub task: String,
    /// This ticket's result (non-empty text). It closes the current ticket.
    #[schemars(length(min = 1))]
    pub result: String,
    /// Optional JSON Schema (draft 2020-12) that the follow-up ticket's
    /// result must satisfy. Omit it when the result is free-form.
    #[schemars(extend("type" = "object"))]
    pub schema: Option<Value>,
}

impl Args {
    /// The checked arguments: `to` trimmed and a valid label, `task` and `result` non-blank,
    /// `schema` a valid JSON Schema.
    pub fn parse(input: &Value) -> Result<Args, ToolFailure> {
        let to = match input.get("to") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(Value::String(_)) => {
                return Err(ToolFailure::invalid(
                    "`to` must not be empty: name the agent or label that takes the follow-up",
                ))
            }
            None | Some(Value::Null) => return Err(ToolFailure::invalid("missing required parameter `to`")),
            Some(_) => {
                return Err(ToolFailure::invalid(
                    "`to` must be a string: the name of an agent or label",
                ))
            }
        };
        let to = match transitions::normalize_labels(vec![to]) {
            Ok(mut labels) if labels.len() == 1 => labels.remove(0),
            Ok(_) => return Err(ToolFailure::invalid("`to` must name exactly one agent or label")),
            Err(e) => return Err(ToolFailure::invalid(format!("`to`: {e}"))),
        };
        let task = match input.get("task") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(ToolFailure::invalid("`task` must not be empty")),
            None | Some(Value::Null) => return Err(ToolFailure::invalid("missing required parameter `task`")),
            Some(_) => return Err(ToolFailure::invalid("`task` must be a string")),
        };
        let result = match input.get("result") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(ToolFailure::invalid("`result` must not be empty")),
            None | Some(Value::Null) => return Err(ToolFailure::invalid("missing required parameter `result`")),
            Some(_) => {
                return Err(ToolFailure::invalid(
                    "`result` must be a string: pass plain prose, not numbers, objects or arrays. \
                     For a structured result use close_ticket instead.",
                ))
            }
        };
        let schema = match input.get("schema") {
            None | Some(Value::Null) => None,
            Some(schema) => match transitions::check_schema(schema) {
                Ok(()) => Some(schema.clone()),
                Err(e) => {
                    return Err(ToolFailure::invalid(format!(
                        "cannot hand over: the given `schema` is invalid: {e}"
                    )))
                }
            },
        };
        Ok(Args {
            to,
            task,
            result,
            schema,
        })
    }
}

pub struct HandoverTicket {
    schema: Value,
}

impl HandoverTicket {
    pub fn new() -> Self {
        HandoverTicket {
            schema: args_schema::<Args>(),
        }
    }
}

impl Default for HandoverTicket {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for HandoverTicket {
    fn name(&self) -> &str {
        HANDOVER_TICKET
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    /// The loop applies the handover (the child ticket, the close) at commit.
    fn writes_nothing(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        let Args {
            to,
            task,
            result,
            schema,
        } = match Args::parse(input) {
            Ok(args) => args,
            Err(failure) => return failure.into(),
        };
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
