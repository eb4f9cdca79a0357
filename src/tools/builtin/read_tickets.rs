//! `read_tickets`: a read-only view of other tickets.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde_json::Value;

use super::view::{self, action, text_param, unknown_action, Filter};
use super::READ_TICKETS;
use crate::tools::args::args_schema;
use crate::tools::{Tool, ToolContext, ToolFailure, ToolOutcome};

const DESCRIPTION: &str = "Read-only view of other tickets. Use action \"get\" with `key` to read one \
    ticket (task, status, result, comments); \"list\" to list tickets, optionally filtered \
    by `status` and/or `label`; \"search\" with `query` for a text search. This tool never \
    changes anything.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(rename_all = "lowercase")]
pub enum Action {
    Get,
    List,
    Search,
}

/// The text parameters are trimmed; blank ones count as not given.
#[derive(Debug, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// "get" one ticket by key, "list" tickets, or "search" them by text.
    pub action: Action,
    /// Ticket key; required for "get".
    pub key: Option<String>,
    /// Only tickets with this status ("list" and "search").
    pub status: Option<String>,
    /// Only tickets with this label ("list" and "search").
    pub label: Option<String>,
    /// Text to search for; required for "search".
    pub query: Option<String>,
}

impl Args {
    pub fn parse(input: &Value) -> Result<Args, ToolFailure> {
        let action =
            match action(input) {
                Some("get") => Action::Get,
                Some("list") => Action::List,
                Some("search") => Action::Search,
                Some("create" | "edit") => return Err(ToolFailure::invalid(
                    "read_tickets only reads: its actions are get, list and search. Use manage_tickets to create or \
                     edit tickets.",
                )),
                other => return Err(unknown_action(other, "get, list or search")),
            };
        Ok(Args {
            action,
            key: text_param(input, "key")?,
            status: text_param(input, "status")?,
            label: text_param(input, "label")?,
            query: text_param(input, "query")?,
        })
    }

    fn filter(&self) -> Filter<'_> {
        Filter {
            status: self.status.as_deref(),
            label: self.label.as_deref(),
            query: self.query.as_deref(),
        }
    }
}

pub struct ReadTickets {
    schema: Value,
}

impl ReadTickets {
    pub fn new() -> Self {
        ReadTickets {
            schema: args_schema::<Args>(),
        }
    }
}

impl Default for ReadTickets {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for ReadTickets {
    fn name(&self) -> &str {
        READ_TICKETS
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn writes_nothing(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        let args = match Args::parse(input) {
            Ok(args) => args,
            Err(failure) => return failure.into(),
        };
        let output = match args.action {
            Action::Get => view::get(ctx, args.key.as_deref()).await,
            Action::List => view::list(ctx, args.filter(), false).await,
            Action::Search => view::list(ctx, args.filter(), true).await,
        };
        output.into()
    }
}
