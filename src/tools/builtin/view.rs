//! What `read_tickets` and `manage_tickets` share: their reading actions (`get`, `list`,
//! `search`) and the views of tickets they show.

use super::text::{clip, one_line, value_text};
use super::MAX_FIELD_CHARS;
use crate::db;
use crate::db::tickets::ListFilter;
use crate::domain::{Author, ContentBlock, Status, Ticket, TicketRef};
use crate::tools::{ToolContext, ToolFailure};

/// Tickets a list or search shows at most; the contract caps the view at 50 lines.
pub const MAX_LISTED: i64 = 50;
/// Characters of a task shown per line of a list.
const PREVIEW_CHARS: usize = 100;
/// The latest text comments `get` shows, each cut to `COMMENT_CHARS`.
const SHOWN_COMMENTS: usize = 3;
const COMMENT_CHARS: usize = 300;

pub(super) fn parse_ref(key: &str) -> Result<TicketRef, ToolFailure> {
    TicketRef::parse(key)
        .ok_or_else(|| ToolFailure::not_found(format!("no ticket {key:?}: tickets are named by key, like TICKET-12")))
}

/// `get`: one ticket, with its latest text comments.
pub(super) async fn get(ctx: &ToolContext<'_>, key: Option<&str>) -> Result<String, ToolFailure> {
    let Some(key) = key else {
        return Err(ToolFailure::invalid("action \"get\" needs `key`, e.g. \"TICKET-12\""));
    };
    let ticket_ref = parse_ref(key)?;
    let ticket = match db::tickets::find(ctx.pool, ctx.ticket.project, &ticket_ref).await {
        Ok(Some(ticket)) => ticket,
        Ok(None) => return Err(ToolFailure::not_found(format!("no ticket {key:?}"))),
        Err(e) => return Err(ToolFailure::internal("reading a ticket for a tool failed", &e)),
    };
    let comments = db::comments::all(ctx.pool, ticket.id)
        .await
        .map_err(|e| ToolFailure::internal("reading a ticket's comments for a tool failed", &e))?;
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
    Ok(out)
}

/// A compact, multi-line view of one ticket for a model.
pub(super) fn describe(t: &Ticket) -> String {
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

/// What `list` and `search` filter by (`status` may list several, comma-separated).
pub(super) struct Filter<'a> {
    pub status: Option<&'a str>,
    pub label: Option<&'a str>,
    pub query: Option<&'a str>,
}

/// `list`, or `search` (which needs a query): one line per ticket, at most [`MAX_LISTED`].
pub(super) async fn list(ctx: &ToolContext<'_>, filter: Filter<'_>, search: bool) -> Result<String, ToolFailure> {
    let Filter { status, label, query } = filter;
    if search && query.is_none() {
        return Err(ToolFailure::invalid(
            "action \"search\" needs `query`: the text to look for in the tasks",
        ));
    }
    let mut statuses = Vec::new();
    for name in status.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Status::parse(&name.to_ascii_lowercase()) {
            Some(s) => statuses.push(s),
            None => {
                let valid: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
                return Err(ToolFailure::invalid(format!(
                    "unknown status {name:?}: valid statuses are {}",
                    valid.join(", ")
                )));
            }
        }
    }
    let filter = ListFilter {
        statuses,
        label: label.map(str::to_string),
        query: query.map(str::to_string),
        limit: MAX_LISTED,
        ..ListFilter::new(ctx.ticket.project)
    };
    let (tickets, _) = db::tickets::list(ctx.pool, &filter)
        .await
        .map_err(|e| ToolFailure::internal("listing tickets for a tool failed", &e))?;
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
        return Ok(if conditions.is_empty() {
            "There are no tickets.".to_string()
        } else {
            format!("No tickets match {}.", conditions.join(" and "))
        });
    }
    let mut lines: Vec<String> = tickets.iter().map(summary_line).collect();
    if tickets.len() as i64 >= MAX_LISTED {
        let total = db::tickets::count(ctx.pool, &filter)
            .await
            .map_err(|e| ToolFailure::internal("counting tickets for a tool failed", &e))?;
        if total > tickets.len() as i64 {
            // The note takes the last ticket's line: the view stays within its 50 lines.
            lines.truncate(MAX_LISTED as usize - 1);
            lines.push(format!("({} more not shown)", total - lines.len() as i64));
        }
    }
    Ok(lines.join("\n"))
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
