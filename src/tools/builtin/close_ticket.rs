//! `close_ticket`: finishes the ticket with its result.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::{Deserializer, Error};
use serde::Deserialize;
use serde_json::Value;

use super::shape::BuiltinTool;
use super::text::clip;
use super::{CLOSE_TICKET, MAX_FIELD_CHARS};
use crate::schema::validate_against;
use crate::tools::{Finisher, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};

const DESCRIPTION: &str = "Finish the current ticket and record its result. This is the ONLY way to \
    finish a ticket: a plain text reply does not close it, and the ticket stays open until \
    you call this tool. Call it exactly once, when the task is fully done, with the complete \
    final result (not a summary of it). If the ticket defines a result schema, `result` \
    must satisfy that schema. After this call you cannot change the result.";

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// The ticket's result: any JSON value (text, number, object, array...).
    /// When the ticket has a result schema, this value must satisfy it.
    #[serde(deserialize_with = "result")]
    pub result: Value,
}

fn result<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Err(D::Error::custom(
            "`result` is required and must not be null: call close_ticket with the ticket's complete result",
        )),
        result => Ok(result),
    }
}

pub struct CloseTicket;

#[async_trait]
impl BuiltinTool for CloseTicket {
    const NAME: &'static str = CLOSE_TICKET;
    const DESCRIPTION: &'static str = DESCRIPTION;
    /// The loop applies the close at commit.
    const WRITES_NOTHING: bool = true;
    type Args = Args;

    async fn run(ctx: &ToolContext<'_>, Args { result }: Args) -> ToolOutcome {
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
