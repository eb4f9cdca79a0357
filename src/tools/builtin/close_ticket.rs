//! `close_ticket`: finishes the ticket with its result.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde_json::Value;

use super::text::clip;
use super::{CLOSE_TICKET, MAX_FIELD_CHARS};
use crate::schema::validate_against;
use crate::tools::args::args_schema;
use crate::tools::{Finisher, Tool, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};

const DESCRIPTION: &str = "Finish the current ticket and record its result. This is the ONLY way to \
    finish a ticket: a plain text reply does not close it, and the ticket stays open until \
    you call this tool. Call it exactly once, when the task is fully done, with the complete \
    final result (not a summary of it). If the ticket defines a result schema, `result` \
    must satisfy that schema. After this call you cannot change the result.";

#[derive(Debug, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// The ticket's result: any JSON value (text, number, object, array...).
    /// When the ticket has a result schema, this value must satisfy it.
    pub result: Value,
}

impl Args {
    pub fn parse(input: &Value) -> Result<Args, ToolFailure> {
        match input.get("result") {
            None | Some(Value::Null) => Err(ToolFailure::invalid(
                "`result` is required and must not be null: call close_ticket with the ticket's complete result",
            )),
            Some(result) => Ok(Args { result: result.clone() }),
        }
    }
}

pub struct CloseTicket {
    schema: Value,
}

impl CloseTicket {
    pub fn new() -> Self {
        CloseTicket {
            schema: args_schema::<Args>(),
        }
    }
}

impl Default for CloseTicket {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for CloseTicket {
    fn name(&self) -> &str {
        CLOSE_TICKET
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    /// The loop applies the close at commit.
    fn writes_nothing(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        let Args { result } = match Args::parse(input) {
            Ok(args) => args,
            Err(failure) => return failure.into(),
        };
        if let Some(schema) = &ctx.ticket.schema {
            if let Err(problems) = validate_against(schema, &result) {
                return ToolFailure::new(
                    ToolErrorKind::ResultInvalid,
                    format!(
                        "The result does not match this ticket's result schema: {problems}. The schema is: {}. \
                         Call close_ticket again with a result that matches the schema.",
                        clip(&schema.to_string(), MAX_FIELD_CHARS)
                    ),
                )
                .into();
            }
        }
        ToolOutcome::Finish(Finisher::Close { result })
    }
}
