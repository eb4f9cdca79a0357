//! `read_tickets`: a read-only view of other tickets.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::{Deserializer, Error};
use serde::Deserialize;

use super::params;
use super::shape::BuiltinTool;
use super::view::{self, Filter};
use super::READ_TICKETS;
use crate::tools::{ToolContext, ToolOutcome};

const DESCRIPTION: &str = "Read-only view of other tickets. Use action \"get\" with `key` to read one \
    ticket (task, status, result, comments); \"list\" to list tickets, optionally filtered \
    by `status` and/or `label`; \"search\" with `query` for a text search. This tool never \
    changes anything.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Get,
    List,
    Search,
}

/// The text parameters are trimmed; blank ones count as not given.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// "get" one ticket by key, "list" tickets, or "search" them by text.
    #[serde(deserialize_with = "action")]
    pub action: Action,
    /// Ticket key; required for "get".
    #[serde(deserialize_with = "params::key")]
    pub key: Option<String>,
    /// Only tickets with this status ("list" and "search").
    #[serde(deserialize_with = "params::status")]
    pub status: Option<String>,
    /// Only tickets with this label ("list" and "search").
    #[serde(deserialize_with = "params::label")]
    pub label: Option<String>,
    /// Text to search for; required for "search".
    #[serde(deserialize_with = "params::query")]
    pub query: Option<String>,
}

/// The writing actions of manage_tickets are refused with a pointer to it.
fn action<'de, D: Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
    match params::action_name(d)?.as_deref() {
        Some("create" | "edit") => Err(D::Error::custom(
            "read_tickets only reads: its actions are get, list and search. Use manage_tickets to create or \
             edit tickets.",
        )),
        name => params::known_action(name, "get, list or search"),
    }
}

impl Args {
    fn filter(&self) -> Filter<'_> {
        Filter {
            status: self.status.as_deref(),
            label: self.label.as_deref(),
            query: self.query.as_deref(),
        }
    }
}

pub struct ReadTickets;

#[async_trait]
impl BuiltinTool for ReadTickets {
    const NAME: &'static str = READ_TICKETS;
    const DESCRIPTION: &'static str = DESCRIPTION;
    const WRITES_NOTHING: bool = true;
    type Args = Args;

    async fn run(ctx: &ToolContext<'_>, args: Args) -> ToolOutcome {
        let output = match args.action {
            Action::Get => view::get(ctx, args.key.as_deref()).await,
            Action::List => view::list(ctx, args.filter(), false).await,
            Action::Search => view::list(ctx, args.filter(), true).await,
        };
        output.into()
    }
}
