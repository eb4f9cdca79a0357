//! `manage_tickets`: reads like `read_tickets`, and creates sub-tickets and edits tickets.
//! Each write is its own transaction that checks the claim's fence last.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::{Deserializer, Error};
use serde::Deserialize;
use serde_json::{json, Value};

use super::params;
use super::shape::BuiltinTool;
use super::view::{self, parse_ref, Filter};
use super::{DEFAULT_MAX_ATTEMPTS, MANAGE_TICKETS};
use crate::db;
use crate::db::tickets::{NewTicket, TicketPatch};
use crate::tools::{ToolContext, ToolFailure, ToolOutcome};
use crate::transitions::{self, DeskError};

const DESCRIPTION: &str = "View, create and edit tickets. Reading works like read_tickets (actions \
    \"get\", \"list\", \"search\"). Use \"create\" to open a sub-ticket of the current \
    ticket (`task` required; optional `labels` route it to agents, optional `schema` \
    constrains its result). Use \"edit\" with `key` to change a ticket's `task`, \
    `labels` or `schema`. This tool never changes a ticket's status: to finish your own \
    ticket call close_ticket (or handover_ticket).";

const CLAIM_LOST: &str = "this ticket is no longer held by this worker";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Get,
    List,
    Search,
    Create,
    Edit,
}

/// The text parameters but `task` are trimmed, blank ones count as not given; each label is
/// trimmed. Which parameters an action needs is checked when it runs.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// "get", "list" or "search" tickets, "create" a sub-ticket, or "edit" a ticket.
    #[serde(deserialize_with = "action")]
    pub action: Action,
    /// Ticket key; required for "get" and "edit".
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
    /// The ticket's task; required for "create", optional for "edit".
    #[serde(deserialize_with = "task")]
    pub task: Option<String>,
    /// Labels of the ticket ("create" and "edit"); they decide which agents pick it up.
    #[serde(deserialize_with = "labels")]
    pub labels: Option<Vec<String>>,
    /// Optional JSON Schema (draft 2020-12) the ticket's result must satisfy ("create" and "edit").
    #[schemars(extend("type" = "object"))]
    pub schema: Option<Value>,
}

fn action<'de, D: Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
    params::known_action(params::action_name(d)?.as_deref(), "get, list, search, create or edit")
}

fn task<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    params::optional_string(d, "task")
}

/// Each label trimmed.
fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let not_strings = || D::Error::custom("`labels` must be an array of strings");
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(|s| s.trim().to_string()))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(not_strings),
        _ => Err(not_strings()),
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

    /// The labels, checked and without duplicates.
    fn labels(&mut self) -> Result<Option<Vec<String>>, ToolFailure> {
        match self.labels.take() {
            None => Ok(None),
            Some(labels) => transitions::normalize_labels(labels)
                .map(Some)
                .map_err(|e| ToolFailure::invalid(format!("`labels`: {e}"))),
        }
    }

    /// The schema, checked to be a valid JSON Schema.
    fn schema(&mut self) -> Result<Option<Value>, ToolFailure> {
        match self.schema.take() {
            None => Ok(None),
            Some(schema) => transitions::check_schema(&schema)
                .map(|()| Some(schema))
                .map_err(|e| ToolFailure::invalid(format!("invalid `schema`: {e}"))),
        }
    }
}

pub struct ManageTickets;

#[async_trait]
impl BuiltinTool for ManageTickets {
    const NAME: &'static str = MANAGE_TICKETS;
    const DESCRIPTION: &'static str = DESCRIPTION;
    /// Creates and edits commit in the call's own transaction.
    const WRITES_NOTHING: bool = false;
    type Args = Args;

    async fn run(ctx: &ToolContext<'_>, args: Args) -> ToolOutcome {
        let output = match args.action {
            Action::Get => view::get(ctx, args.key.as_deref()).await,
            Action::List => view::list(ctx, args.filter(), false).await,
            Action::Search => view::list(ctx, args.filter(), true).await,
            Action::Create => create(ctx, args).await,
            Action::Edit => edit(ctx, args).await,
        };
        output.into()
    }
}

async fn create(ctx: &ToolContext<'_>, mut args: Args) -> Result<String, ToolFailure> {
    let task = match args.task.take() {
        Some(task) if !task.trim().is_empty() => task,
        Some(_) => return Err(ToolFailure::invalid("`task` must not be empty")),
        None => return Err(ToolFailure::invalid("action \"create\" needs `task`")),
    };
    let labels = args.labels()?.unwrap_or_default();
    let schema = args.schema()?;
    let new = NewTicket {
        project: ctx.ticket.project,
        task: Value::String(task),
        labels,
        priority: 0,
        schema,
        parent_id: Some(ctx.ticket.id),
        metadata: json!({}),
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        reporter: ctx.agent.to_string(),
        idempotency: None,
        trace_context: None,
        deadline_secs: None,
    };
    let mut tx = ctx
        .pool
        .begin()
        .await
        .map_err(|e| ToolFailure::internal("opening a transaction for a tool failed", &e))?;
    transitions::check_ticket_quota(&mut tx, ctx.ticket.project)
        .await
        .map_err(|e| ToolFailure::internal("reading the project's quota failed", &e))?
        .map_err(ToolFailure::invalid)?;
    let created = transitions::create_ticket(&mut tx, new)
        .await
        .map_err(|e| desk_failure("creating a sub-ticket failed", e))?;
    // Sent at commit; the loop wakes the local hub when the step commits.
    db::tickets::notify_work(&mut tx)
        .await
        .map_err(|e| ToolFailure::internal("waking the workers failed", &e))?;
    check_fence_last(ctx, &mut tx).await?;
    tx.commit()
        .await
        .map_err(|e| ToolFailure::internal("committing a sub-ticket failed", &e))?;
    Ok(format!("Created {}", created.key))
}

async fn edit(ctx: &ToolContext<'_>, mut args: Args) -> Result<String, ToolFailure> {
    let Some(key) = args.key.take() else {
        return Err(ToolFailure::invalid("action \"edit\" needs `key`, e.g. \"TICKET-12\""));
    };
    parse_ref(&key)?;
    let task = match args.task.take() {
        None => None,
        Some(task) if !task.trim().is_empty() => Some(Value::String(task)),
        Some(_) => return Err(ToolFailure::invalid("`task` must not be empty")),
    };
    let labels = args.labels()?;
    let schema = args.schema()?;
    if task.is_none() && labels.is_none() && schema.is_none() {
        return Err(ToolFailure::invalid(
            "action \"edit\" needs at least one of `task`, `labels` or `schema`",
        ));
    }
    // Status, priority and metadata stay as they are: agents never move a ticket between statuses.
    let patch = TicketPatch {
        task,
        labels,
        priority: None,
        schema: schema.map(Some),
        metadata: None,
        budget_usd: None,
    };
    let mut tx = ctx
        .pool
        .begin()
        .await
        .map_err(|e| ToolFailure::internal("opening a transaction for a tool failed", &e))?;
    let updated = transitions::patch_in(&mut tx, ctx.ticket.project, &key, patch)
        .await
        .map_err(|e| desk_failure("editing a ticket failed", e))?;
    check_fence_last(ctx, &mut tx).await?;
    tx.commit()
        .await
        .map_err(|e| ToolFailure::internal("committing a ticket edit failed", &e))?;
    Ok(format!("Updated {}.\n{}", updated.key, view::describe(&updated)))
}

/// The fence of a tool's writes, checked last: the claim's row is locked only from here to the
/// commit, so a tool waiting on another ticket's lock never keeps a cancel waiting on this one.
/// A lost claim rolls everything back.
async fn check_fence_last(ctx: &ToolContext<'_>, tx: &mut sqlx::PgConnection) -> Result<(), ToolFailure> {
    match db::claims::holds(tx, ctx.fence).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(ToolFailure::conflict(CLAIM_LOST)),
        Err(e) => Err(ToolFailure::internal("checking the claim failed", &e)),
    }
}

fn desk_failure(context: &str, err: DeskError) -> ToolFailure {
    match err {
        DeskError::NotFound(key) => ToolFailure::not_found(format!("no ticket {key:?}")),
        DeskError::Missing(message) => ToolFailure::not_found(message),
        DeskError::Conflict(message) => ToolFailure::conflict(message),
        DeskError::Invalid(message) => ToolFailure::invalid(message),
        DeskError::Db(e) => ToolFailure::internal(context, &e),
    }
}
