//! Execution of the built-in tools.
//!
//! The finishers (`close_ticket`, `handover_ticket`) are split in two: `run_builtin` checks every
//! input and returns a `Finisher` without writing anything, and the agent loop applies it with
//! `apply_finisher` in the transaction that also stores the step's comments. So an invalid call
//! changes nothing, and a valid one closes the ticket together with the transcript that led to it.
//! The other tools read directly, or write inside their own fenced transaction: a worker that lost
//! its claim never writes.

use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};

use crate::db;
use crate::db::claims::Fence;
use crate::db::tickets::{ListFilter, NewTicket, TicketPatch};
use crate::domain::{Author, ContentBlock, Status, Ticket, TicketRef};
use crate::tools::placeholders::substitute_parent;
use crate::tools::specs::{CLOSE_TICKET, HANDOVER_TICKET, MANAGE_TICKETS, READ_TICKETS};
use crate::tools::validate::validate_against;
use crate::transitions::{self, DeskError};

/// Tickets a list or search shows at most; the contract caps the view at 50 lines.
pub const MAX_LISTED: i64 = 50;
/// Long fields of a ticket shown by `get` are cut to this many characters.
const MAX_FIELD_CHARS: usize = 2000;
/// Characters of a task shown per line of a list.
const PREVIEW_CHARS: usize = 100;
/// The latest text comments `get` shows, each cut to `COMMENT_CHARS`.
const SHOWN_COMMENTS: usize = 3;
const COMMENT_CHARS: usize = 300;
/// Sub-tickets get the same attempt budget as tickets created over the API by default.
const DEFAULT_MAX_ATTEMPTS: i32 = 3;

const STORE_UNAVAILABLE: &str = "the ticket store is unavailable; try again";
const CLAIM_LOST: &str = "this ticket is no longer held by this worker";

pub struct ToolContext<'a> {
    pub pool: &'a PgPool,
    pub fence: Fence,
    pub ticket: &'a Ticket,
    pub agent: &'a str,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// Goes back to the model as the tool result.
    Output(String),
    /// Goes back to the model as an error result (is_error). kind: "invalid_input",
    /// "result_invalid" (a close/handover result that fails the ticket's schema — the loop counts
    /// these as schema retries), "not_found", "conflict", "unknown_tool", "internal".
    Failed { kind: &'static str, message: String },
    /// A validated finisher; the loop applies it with `apply_finisher` in the step's transaction.
    Finish(Finisher),
}

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

/// A refused input, kept small so that parameter helpers can return it by value.
struct Rejection {
    kind: &'static str,
    message: String,
}

impl Rejection {
    fn invalid(message: impl Into<String>) -> Self {
        Rejection {
            kind: "invalid_input",
            message: message.into(),
        }
    }

    fn not_found(message: impl Into<String>) -> Self {
        Rejection {
            kind: "not_found",
            message: message.into(),
        }
    }
}

impl From<Rejection> for ToolOutcome {
    fn from(r: Rejection) -> Self {
        ToolOutcome::Failed {
            kind: r.kind,
            message: r.message,
        }
    }
}

impl ToolOutcome {
    fn invalid(message: impl Into<String>) -> Self {
        ToolOutcome::Failed {
            kind: "invalid_input",
            message: message.into(),
        }
    }

    fn not_found(message: impl Into<String>) -> Self {
        ToolOutcome::Failed {
            kind: "not_found",
            message: message.into(),
        }
    }

    fn conflict(message: impl Into<String>) -> Self {
        ToolOutcome::Failed {
            kind: "conflict",
            message: message.into(),
        }
    }

    fn internal(context: &str, err: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %err, "{context}");
        ToolOutcome::Failed {
            kind: "internal",
            message: STORE_UNAVAILABLE.to_string(),
        }
    }
}

/// Runs a built-in tool; `input` was already repaired and validated against the tool's own JSON
/// schema. The checks are repeated where a wrong value would do harm, since the schema is only as
/// strict as the model's provider lets it be.
pub async fn run_builtin(ctx: &ToolContext<'_>, name: &str, input: &Value) -> ToolOutcome {
    match name {
        CLOSE_TICKET => close_ticket(ctx, input),
        HANDOVER_TICKET => handover_ticket(ctx, input),
        READ_TICKETS => read_tickets(ctx, input).await,
        MANAGE_TICKETS => manage_tickets(ctx, input).await,
        other => ToolOutcome::Failed {
            kind: "unknown_tool",
            message: format!(
                "there is no tool named {other:?}; the built-in tools are {CLOSE_TICKET}, {HANDOVER_TICKET}, \
                 {READ_TICKETS} and {MANAGE_TICKETS}"
            ),
        },
    }
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
                task: Value::String(substitute_parent(task, &ticket.key, result)),
                labels: vec![to.clone()],
                priority: 0,
                schema: schema.clone(),
                parent_id: Some(ticket.id),
                metadata: json!({}),
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                reporter: agent.to_string(),
                idempotency: None,
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

// ---------------------------------------------------------------------------------------------
// Finishers

fn close_ticket(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    let result = match input.get("result") {
        None | Some(Value::Null) => {
            return ToolOutcome::invalid(
                "`result` is required and must not be null: call close_ticket with the ticket's complete result",
            )
        }
        Some(result) => result.clone(),
    };
    if let Some(schema) = &ctx.ticket.schema {
        if let Err(problems) = validate_against(schema, &result) {
            return ToolOutcome::Failed {
                kind: "result_invalid",
                message: format!(
                    "The result does not match this ticket's result schema: {problems}. The schema is: {}. \
                     Call close_ticket again with a result that matches the schema.",
                    clip(&schema.to_string(), MAX_FIELD_CHARS)
                ),
            };
        }
    }
    ToolOutcome::Finish(Finisher::Close { result })
}

fn handover_ticket(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    let to = match input.get("to") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) => {
            return ToolOutcome::invalid("`to` must not be empty: name the agent or label that takes the follow-up")
        }
        None | Some(Value::Null) => return ToolOutcome::invalid("missing required parameter `to`"),
        Some(_) => return ToolOutcome::invalid("`to` must be a string: the name of an agent or label"),
    };
    let to = match transitions::normalize_labels(vec![to]) {
        Ok(mut labels) if labels.len() == 1 => labels.remove(0),
        Ok(_) => return ToolOutcome::invalid("`to` must name exactly one agent or label"),
        Err(e) => return ToolOutcome::invalid(format!("`to`: {e}")),
    };
    let task = match input.get("task") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return ToolOutcome::invalid("`task` must not be empty"),
        None | Some(Value::Null) => return ToolOutcome::invalid("missing required parameter `task`"),
        Some(_) => return ToolOutcome::invalid("`task` must be a string"),
    };
    let result = match input.get("result") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return ToolOutcome::invalid("`result` must not be empty"),
        None | Some(Value::Null) => return ToolOutcome::invalid("missing required parameter `result`"),
        Some(_) => {
            return ToolOutcome::invalid(
                "`result` must be a string: pass plain prose, not numbers, objects or arrays. \
                 For a structured result use close_ticket instead.",
            )
        }
    };
    let schema = match input.get("schema") {
        None | Some(Value::Null) => None,
        Some(schema) => match transitions::check_schema(schema) {
            Ok(()) => Some(schema.clone()),
            Err(e) => return ToolOutcome::invalid(format!("cannot hand over: the given `schema` is invalid: {e}")),
        },
    };
    // The handover closes this ticket with `result`, so its own schema must accept that string.
    if let Some(own) = &ctx.ticket.schema {
        if let Err(problems) = validate_against(own, &Value::String(result.clone())) {
            return ToolOutcome::Failed {
                kind: "result_invalid",
                message: format!(
                    "The result does not match this ticket's result schema: {problems}. The schema is: {}. \
                     Call handover_ticket again with a `result` that matches the schema, or use close_ticket \
                     when the schema asks for a structured result.",
                    clip(&own.to_string(), MAX_FIELD_CHARS)
                ),
            };
        }
    }
    ToolOutcome::Finish(Finisher::Handover {
        to,
        task,
        result,
        schema,
    })
}

// ---------------------------------------------------------------------------------------------
// Reading and managing tickets

async fn read_tickets(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    match action(input) {
        Some("get") => get(ctx, input).await,
        Some("list") => list(ctx, input, false).await,
        Some("search") => list(ctx, input, true).await,
        Some("create" | "edit") => ToolOutcome::invalid(
            "read_tickets only reads: its actions are get, list and search. Use manage_tickets to create or edit tickets.",
        ),
        other => unknown_action(other, "get, list or search"),
    }
}

async fn manage_tickets(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    match action(input) {
        Some("get") => get(ctx, input).await,
        Some("list") => list(ctx, input, false).await,
        Some("search") => list(ctx, input, true).await,
        Some("create") => create(ctx, input).await,
        Some("edit") => edit(ctx, input).await,
        other => unknown_action(other, "get, list, search, create or edit"),
    }
}

fn action(input: &Value) -> Option<&str> {
    input.get("action").and_then(Value::as_str).map(str::trim)
}

fn unknown_action(action: Option<&str>, valid: &str) -> ToolOutcome {
    match action {
        Some(a) => ToolOutcome::invalid(format!("unknown action {a:?}: use {valid}")),
        None => ToolOutcome::invalid(format!("missing required parameter `action`: use {valid}")),
    }
}

/// A string parameter, trimmed; absent, null and blank are all "not given".
fn text_param<'v>(input: &'v Value, name: &str) -> Result<Option<&'v str>, Rejection> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim())),
        Some(_) => Err(Rejection::invalid(format!("`{name}` must be a string"))),
    }
}

fn parse_ref(key: &str) -> Result<TicketRef, Rejection> {
    TicketRef::parse(key)
        .ok_or_else(|| Rejection::not_found(format!("no ticket {key:?}: tickets are named by key, like TICKET-12")))
}

async fn get(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    let key = match text_param(input, "key") {
        Ok(Some(key)) => key,
        Ok(None) => return ToolOutcome::invalid("action \"get\" needs `key`, e.g. \"TICKET-12\""),
        Err(e) => return e.into(),
    };
    let ticket_ref = match parse_ref(key) {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let ticket = match db::tickets::find(ctx.pool, &ticket_ref).await {
        Ok(Some(ticket)) => ticket,
        Ok(None) => return ToolOutcome::not_found(format!("no ticket {key:?}")),
        Err(e) => return ToolOutcome::internal("reading a ticket for a tool failed", &e),
    };
    let comments = match db::comments::all(ctx.pool, ticket.id).await {
        Ok(comments) => comments,
        Err(e) => return ToolOutcome::internal("reading a ticket's comments for a tool failed", &e),
    };
    let mut out = describe(&ticket);
    let texts: Vec<String> = comments
        .iter()
        .filter(|c| c.author != Author::System)
        .filter_map(|c| {
            let text: Vec<&str> = c
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            (!text.is_empty())
                .then(|| format!("  [{}] {}", c.author.as_str(), one_line(&text.join(" "), COMMENT_CHARS)))
        })
        .collect();
    out.push_str(&format!("\ncomments: {}", comments.len()));
    if !texts.is_empty() {
        let shown = &texts[texts.len().saturating_sub(SHOWN_COMMENTS)..];
        out.push_str(&format!(" (latest text{}:)", if shown.len() == 1 { "" } else { "s" }));
        for line in shown {
            out.push('\n');
            out.push_str(line);
        }
    }
    ToolOutcome::Output(out)
}

/// A compact, multi-line view of one ticket for a model.
fn describe(t: &Ticket) -> String {
    let mut lines = vec![format!("{} [{}]", t.key, t.status.as_str())];
    lines.push(format!(
        "labels: {}",
        if t.labels.is_empty() {
            "(none)".to_string()
        } else {
            t.labels.join(", ")
        }
    ));
    lines.push(format!("agent: {}", t.agent.as_deref().unwrap_or("(none)")));
    lines.push(format!("reporter: {}", t.reporter));
    if let Some(parent) = &t.parent_key {
        lines.push(format!("parent: {parent}"));
    }
    if let Some(schema) = &t.schema {
        lines.push(format!("schema: {}", clip(&schema.to_string(), MAX_FIELD_CHARS)));
    }
    // Task and result are shown whole: an agent often needs all of a parent's result, and a
    // very large output is stored and stubbed by the loop (see agent::outputs).
    lines.push(format!("task: {}", value_text(&t.task)));
    if let Some(result) = &t.result {
        lines.push(format!("result: {}", value_text(result)));
    }
    if let Some(error) = &t.error {
        lines.push(format!(
            "error: {}: {}",
            error.kind,
            clip(&error.message, MAX_FIELD_CHARS)
        ));
    }
    lines.join("\n")
}

async fn list(ctx: &ToolContext<'_>, input: &Value, search: bool) -> ToolOutcome {
    let (status, label, query) = match (
        text_param(input, "status"),
        text_param(input, "label"),
        text_param(input, "query"),
    ) {
        (Ok(s), Ok(l), Ok(q)) => (s, l, q),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e.into(),
    };
    if search && query.is_none() {
        return ToolOutcome::invalid("action \"search\" needs `query`: the text to look for in the tasks");
    }
    let mut statuses = Vec::new();
    for name in status.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Status::parse(&name.to_ascii_lowercase()) {
            Some(s) => statuses.push(s),
            None => {
                let valid: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
                return ToolOutcome::invalid(format!(
                    "unknown status {name:?}: valid statuses are {}",
                    valid.join(", ")
                ));
            }
        }
    }
    let filter = ListFilter {
        statuses,
        label: label.map(str::to_string),
        query: query.map(str::to_string),
        limit: MAX_LISTED,
        ..ListFilter::default()
    };
    let tickets = match db::tickets::list(ctx.pool, &filter).await {
        Ok((tickets, _)) => tickets,
        Err(e) => return ToolOutcome::internal("listing tickets for a tool failed", &e),
    };
    if tickets.is_empty() {
        let mut conditions = Vec::new();
        if let Some(s) = status {
            conditions.push(format!("status {s}"));
        }
        if let Some(l) = label {
            conditions.push(format!("label {l:?}"));
        }
        if let Some(q) = query {
            conditions.push(format!("text {q:?}"));
        }
        return ToolOutcome::Output(if conditions.is_empty() {
            "There are no tickets.".to_string()
        } else {
            format!("No tickets match {}.", conditions.join(" and "))
        });
    }
    let mut lines: Vec<String> = tickets.iter().map(summary_line).collect();
    if tickets.len() as i64 >= MAX_LISTED {
        match db::tickets::count(ctx.pool, &filter).await {
            Ok(total) if total > tickets.len() as i64 => {
                lines.push(format!("({} more not shown)", total - tickets.len() as i64));
            }
            Ok(_) => {}
            Err(e) => return ToolOutcome::internal("counting tickets for a tool failed", &e),
        }
    }
    ToolOutcome::Output(lines.join("\n"))
}

fn summary_line(t: &Ticket) -> String {
    format!(
        "{} [{}] labels={}: {}",
        t.key,
        t.status.as_str(),
        t.labels.join(","),
        one_line(&value_text(&t.task), PREVIEW_CHARS)
    )
}

async fn create(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    let task = match input.get("task") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return ToolOutcome::invalid("`task` must not be empty"),
        None | Some(Value::Null) => return ToolOutcome::invalid("action \"create\" needs `task`"),
        Some(_) => return ToolOutcome::invalid("`task` must be a string"),
    };
    let labels = match labels_param(input) {
        Ok(labels) => labels.unwrap_or_default(),
        Err(e) => return e.into(),
    };
    let schema = match schema_param(input) {
        Ok(schema) => schema,
        Err(e) => return e.into(),
    };
    let new = NewTicket {
        task: Value::String(task),
        labels,
        priority: 0,
        schema,
        parent_id: Some(ctx.ticket.id),
        metadata: json!({}),
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        reporter: ctx.agent.to_string(),
        idempotency: None,
    };
    let mut tx = match ctx.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return ToolOutcome::internal("opening a transaction for a tool failed", &e),
    };
    let created = match transitions::create_ticket(&mut tx, new).await {
        Ok(ticket) => ticket,
        Err(e) => return desk_failure("creating a sub-ticket failed", e),
    };
    // Sent at commit; the loop wakes the local hub when the step commits.
    if let Err(e) = db::tickets::notify_work(&mut tx).await {
        return ToolOutcome::internal("waking the workers failed", &e);
    }
    if let Some(outcome) = check_fence_last(ctx, &mut tx).await {
        return outcome;
    }
    if let Err(e) = tx.commit().await {
        return ToolOutcome::internal("committing a sub-ticket failed", &e);
    }
    ToolOutcome::Output(format!("Created {}", created.key))
}

async fn edit(ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
    let key = match text_param(input, "key") {
        Ok(Some(key)) => key.to_string(),
        Ok(None) => return ToolOutcome::invalid("action \"edit\" needs `key`, e.g. \"TICKET-12\""),
        Err(e) => return e.into(),
    };
    if let Err(e) = parse_ref(&key) {
        return e.into();
    }
    let task = match input.get("task") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(Value::String(s.clone())),
        Some(Value::String(_)) => return ToolOutcome::invalid("`task` must not be empty"),
        Some(_) => return ToolOutcome::invalid("`task` must be a string"),
    };
    let labels = match labels_param(input) {
        Ok(labels) => labels,
        Err(e) => return e.into(),
    };
    let schema = match schema_param(input) {
        Ok(schema) => schema,
        Err(e) => return e.into(),
    };
    if task.is_none() && labels.is_none() && schema.is_none() {
        return ToolOutcome::invalid("action \"edit\" needs at least one of `task`, `labels` or `schema`");
    }
    // Status, priority and metadata stay as they are: agents never move a ticket between statuses.
    let patch = TicketPatch {
        task,
        labels,
        priority: None,
        schema: schema.map(Some),
        metadata: None,
    };
    let mut tx = match ctx.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return ToolOutcome::internal("opening a transaction for a tool failed", &e),
    };
    let updated = match transitions::patch_in(&mut tx, &key, patch).await {
        Ok(ticket) => ticket,
        Err(e) => return desk_failure("editing a ticket failed", e),
    };
    if let Some(outcome) = check_fence_last(ctx, &mut tx).await {
        return outcome;
    }
    if let Err(e) = tx.commit().await {
        return ToolOutcome::internal("committing a ticket edit failed", &e);
    }
    ToolOutcome::Output(format!("Updated {}.\n{}", updated.key, describe(&updated)))
}

/// The fence of a tool's writes, checked last: the claim's row is locked only from here to the
/// commit, so a tool waiting on another ticket's lock never keeps a cancel waiting on this one.
/// A lost claim rolls everything back.
async fn check_fence_last(ctx: &ToolContext<'_>, tx: &mut sqlx::PgConnection) -> Option<ToolOutcome> {
    match db::claims::holds(tx, ctx.fence).await {
        Ok(true) => None,
        Ok(false) => Some(ToolOutcome::conflict(CLAIM_LOST)),
        Err(e) => Some(ToolOutcome::internal("checking the claim failed", &e)),
    }
}

fn labels_param(input: &Value) -> Result<Option<Vec<String>>, Rejection> {
    match input.get("labels") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => {
            let mut labels = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) => labels.push(s.trim().to_string()),
                    _ => return Err(Rejection::invalid("`labels` must be an array of strings")),
                }
            }
            transitions::normalize_labels(labels)
                .map(Some)
                .map_err(|e| Rejection::invalid(format!("`labels`: {e}")))
        }
        Some(_) => Err(Rejection::invalid("`labels` must be an array of strings")),
    }
}

fn schema_param(input: &Value) -> Result<Option<Value>, Rejection> {
    match input.get("schema") {
        None | Some(Value::Null) => Ok(None),
        Some(schema) => transitions::check_schema(schema)
            .map(|()| Some(schema.clone()))
            .map_err(|e| Rejection::invalid(format!("invalid `schema`: {e}"))),
    }
}

fn desk_failure(context: &str, err: DeskError) -> ToolOutcome {
    match err {
        DeskError::NotFound(key) => ToolOutcome::not_found(format!("no ticket {key:?}")),
        DeskError::Conflict(message) => ToolOutcome::conflict(message),
        DeskError::Invalid(message) => ToolOutcome::invalid(message),
        DeskError::Db(e) => ToolOutcome::internal(context, &e),
    }
}

// ---------------------------------------------------------------------------------------------
// Text helpers

/// A task or result as text: strings as they are, anything else as compact JSON.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Cuts `s` to `max` characters (not bytes), marking the cut.
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((at, _)) => format!("{}… ({} chars in all)", &s[..at], s.chars().count()),
    }
}

/// Whitespace runs (newlines included) collapsed to one space, then cut to `max` characters, so
/// each ticket stays on its own line.
fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        None => flat,
        Some((at, _)) => format!("{}…", &flat[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_counts_characters_not_bytes() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("héllo", 2), "hé… (5 chars in all)");
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\n\n b\tc", 100), "a b c");
        assert_eq!(one_line(&"ж".repeat(150), 100), format!("{}…", "ж".repeat(100)));
    }

    #[test]
    fn value_text_shows_strings_bare() {
        assert_eq!(value_text(&json!("x")), "x");
        assert_eq!(value_text(&json!({"a": 1})), "{\"a\":1}");
    }
}
