//! Ticket transitions: every change of a ticket's state that the HTTP API or an agent's tool asks
//! for, with the events that describe it. Each change and its events commit in one transaction:
//! either both are durable or neither. New tickets arriving together are grouped by `intake`.

pub mod claims;
pub mod deadlines;
pub mod experiments;
pub mod intake;
pub mod questions;
pub mod schedules;

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::db;
use crate::db::tickets::{NewTicket, TicketPatch};
use crate::domain::{
    Author, Comment, ContentBlock, EventData, NewEvent, ProjectId, RequeueReason, Status, Ticket, TicketRef,
};

#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    #[error("no ticket {0:?}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Something of the ticket (not the ticket itself) is missing.
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub const MAX_LABELS: usize = 50;
pub const MAX_LABEL_LEN: usize = 100;

/// Labels: non-empty, at most 100 characters, no control characters; duplicates dropped.
pub fn normalize_labels(labels: Vec<String>) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::with_capacity(labels.len());
    for label in labels {
        if label.trim().is_empty() || label.chars().count() > MAX_LABEL_LEN || label.chars().any(char::is_control) {
            return Err(format!(
                "invalid label {label:?}: labels are 1 to {MAX_LABEL_LEN} characters without control characters"
            ));
        }
        if !out.contains(&label) {
            out.push(label);
        }
    }
    if out.len() > MAX_LABELS {
        return Err(format!("at most {MAX_LABELS} labels"));
    }
    Ok(out)
}

/// A ticket's result schema must be a valid JSON Schema (draft 2020-12).
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("schema must be a JSON Schema object (or a boolean)".into());
    }
    crate::schema::compile_schema(schema)
        .map(|_| ())
        .map_err(|err| format!("schema: {err} (draft 2020-12 expected)"))
}

/// A task is any JSON but null or an empty string.
pub fn check_task(task: &Value) -> Result<(), String> {
    match task {
        Value::Null => Err("task must not be null".into()),
        Value::String(s) if s.trim().is_empty() => Err("task must not be empty".into()),
        _ => Ok(()),
    }
}

/// Creates a ticket and its `ticket.created` event (one statement, in the caller's transaction if
/// any). After the commit, call `EventHub::work_available` (or NOTIFY the work channel) so that
/// workers look for it.
pub async fn create_ticket(conn: &mut PgConnection, new: NewTicket) -> Result<Ticket, DeskError> {
    Ok(db::tickets::insert(conn, new).await?)
}

/// Refuses a ticket beyond the project's `tickets_per_day` (for the creates that do not come
/// through the API's admission check: schedules and agents' own): Err says why.
pub async fn check_ticket_quota(
    conn: &mut PgConnection,
    project: ProjectId,
) -> Result<Result<(), String>, sqlx::Error> {
    match db::projects::ticket_quota_today(conn, project).await? {
        Some((limit, used)) if used >= limit => Ok(Err(format!(
            "the project has created {used} of its {limit} tickets today (quota tickets_per_day)"
        ))),
        _ => Ok(Ok(())),
    }
}

/// What `create_requested` did.
pub enum Created {
    /// A new ticket (acknowledged only after its commit: it and its event are durable).
    New(Ticket),
    /// A repeat of an earlier create with the same idempotency key and body: that ticket.
    Repeat(Ticket),
}

/// Creates a ticket asked for over the API, with its parent (an id or key) and its idempotency
/// key and body hash (in `new.idempotency`), in one transaction. After `Created::New`, call
/// `EventHub::wake` and `work_available`.
pub async fn create_requested(pool: &PgPool, new: NewTicket, parent: Option<&str>) -> Result<Created, DeskError> {
    create_with(pool, new, parent, db::tickets::Extras::default()).await
}

/// `create_requested` with a money budget of the ticket's own (`budget_usd`) and a pinned agent
/// version.
pub async fn create_with(
    pool: &PgPool,
    mut new: NewTicket,
    parent: Option<&str>,
    extras: db::tickets::Extras,
) -> Result<Created, DeskError> {
    let mut tx = pool.begin().await?;
    if let Some(p) = parent {
        let no_parent = || DeskError::Invalid(format!("parent {p:?} names no ticket"));
        let parent = TicketRef::parse(p).ok_or_else(no_parent)?;
        let parent = db::tickets::find(&mut *tx, new.project, &parent)
            .await?
            .ok_or_else(no_parent)?;
        new.parent_id = Some(parent.id);
    }
    if let Some((key, hash)) = &new.idempotency {
        // Concurrent repeats wait here for the first to commit, then find its ticket.
        db::tickets::lock_idempotency_key(&mut tx, &format!("{}:{key}", new.project)).await?;
        if let Some((existing, existing_hash)) = db::tickets::find_by_idempotency_key(&mut tx, new.project, key).await?
        {
            return if existing_hash.as_deref() == Some(hash.as_str()) {
                Ok(Created::Repeat(existing))
            } else {
                Err(DeskError::Conflict(format!(
                    "Idempotency-Key {key:?} was used for {} with a different body",
                    existing.key
                )))
            };
        }
    }
    let ticket = db::tickets::insert_with(&mut tx, new, extras).await?;
    tx.commit().await?;
    Ok(Created::New(ticket))
}

pub async fn find(pool: &PgPool, project: ProjectId, reference: &str) -> Result<Ticket, DeskError> {
    let not_found = || DeskError::NotFound(reference.to_owned());
    let ticket_ref = TicketRef::parse(reference).ok_or_else(not_found)?;
    db::tickets::find(pool, project, &ticket_ref)
        .await?
        .ok_or_else(not_found)
}

/// Locks the ticket for this transaction, or NotFound.
async fn lock(conn: &mut PgConnection, project: ProjectId, reference: &str) -> Result<Ticket, DeskError> {
    let not_found = || DeskError::NotFound(reference.to_owned());
    let ticket_ref = TicketRef::parse(reference).ok_or_else(not_found)?;
    db::tickets::lock(conn, project, &ticket_ref)
        .await?
        .ok_or_else(not_found)
}

/// A human comment. A waiting or finished ticket goes back to `todo`; an in-progress ticket's
/// agent sees the comment on its next model request.
pub async fn add_comment(
    pool: &PgPool,
    project: ProjectId,
    reference: &str,
    author: Author,
    text: String,
) -> Result<(Comment, Ticket), DeskError> {
    let mut tx = pool.begin().await?;
    let ticket = lock(&mut tx, project, reference).await?;
    let answers = match ticket.status {
        Status::Waiting => questions::comment_answer(&ticket, &text),
        _ => None,
    };
    let comment = db::comments::insert(&mut tx, ticket.id, author, None, &[ContentBlock::text(text)]).await?;
    let mut events = vec![NewEvent::new(
        None,
        EventData::CommentCreated {
            comment: comment.clone(),
        },
    )];
    // A comment the waiting question accepts is its answer (logged after the comment).
    let ticket = match answers {
        Some((id, answer)) => {
            db::events::append(&mut tx, ticket.id, &std::mem::take(&mut events)).await?;
            questions::answer_in(&mut tx, ticket.clone(), id, answer, questions::AnsweredBy::Comment)
                .await?
                .unwrap_or(ticket)
        }
        None => ticket,
    };
    let ticket = if ticket.status == Status::Waiting || ticket.status.is_terminal() {
        let ticket = db::tickets::set_status(&mut tx, ticket.id, Status::Todo).await?;
        events.push(NewEvent::new(
            None,
            EventData::TicketRequeued {
                reason: RequeueReason::Comment,
            },
        ));
        db::tickets::notify_work(&mut tx).await?;
        ticket
    } else {
        ticket
    };
    let requeued = events
        .iter()
        .any(|e| e.kind == crate::domain::event::kind::TICKET_REQUEUED);
    db::events::append(&mut tx, ticket.id, &events).await?;
    tx.commit().await?;
    if requeued {
        crate::telemetry::metric::requeued("comment");
    }
    Ok((comment, ticket))
}

pub async fn patch(
    pool: &PgPool,
    project: ProjectId,
    reference: &str,
    patch: TicketPatch,
) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let updated = patch_in(&mut tx, project, reference, patch).await?;
    tx.commit().await?;
    Ok(updated)
}

/// Edits a `todo` or `waiting` ticket and logs `ticket.updated`, in the caller's transaction (an
/// agent's edit runs inside its fenced transaction, so a worker that lost its claim edits nothing).
pub async fn patch_in(
    conn: &mut PgConnection,
    project: ProjectId,
    reference: &str,
    patch: TicketPatch,
) -> Result<Ticket, DeskError> {
    let ticket = lock(conn, project, reference).await?;
    if !ticket.status.is_editable() {
        return Err(DeskError::Conflict(format!(
            "{} is {}: only todo or waiting tickets can be edited",
            ticket.key,
            ticket.status.as_str()
        )));
    }
    let mut updated = db::tickets::update_fields(conn, ticket.id, &patch).await?;
    if let Some(new) = patch.budget_usd.filter(|new| *new != ticket.budget_usd) {
        let raised = match (ticket.budget_usd, new) {
            (Some(old), Some(new)) => new > old,
            _ => true,
        };
        let key = ticket.id.to_string();
        if db::budgets::set_limit(conn, "ticket", &key, new, raised).await? > 0 {
            updated = db::tickets::find_by_id(&mut *conn, ticket.id).await?.unwrap_or(updated);
        }
    }
    let event = NewEvent::new(
        None,
        EventData::TicketUpdated {
            ticket: updated.clone(),
        },
    );
    db::events::append(conn, ticket.id, &[event]).await?;
    if updated.status == Status::Todo {
        // New labels or priority may make it claimable by another agent.
        db::tickets::notify_work(conn).await?;
    }
    Ok(updated)
}

/// Cancels a ticket. For an in-progress ticket the claim is ended here, in the same transaction
/// (the bumped generation fences the worker out), and the worker is told to abort its model
/// stream and tools.
pub async fn cancel(pool: &PgPool, project: ProjectId, reference: &str) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let (cancelled, agent) = cancel_in(&mut tx, project, reference).await?;
    tx.commit().await?;
    if let Some(agent) = agent {
        // Under the agent that had it, if any (`""` for a ticket cancelled before any claim).
        crate::telemetry::metric::ticket_finished(project.0, &agent, "cancelled");
    }
    Ok(cancelled)
}

/// `cancel` in the caller's transaction; with the agent that had the ticket (`""` for none) when
/// this call cancelled it (None when it already was), for the metric to count after the commit.
pub async fn cancel_in(
    conn: &mut PgConnection,
    project: ProjectId,
    reference: &str,
) -> Result<(Ticket, Option<String>), DeskError> {
    let ticket = lock(conn, project, reference).await?;
    match ticket.status {
        Status::Cancelled => return Ok((ticket, None)),
        Status::Done | Status::Failed => {
            return Err(DeskError::Conflict(format!(
                "{} is {}: finished tickets cannot be cancelled",
                ticket.key,
                ticket.status.as_str()
            )))
        }
        Status::Todo | Status::Waiting | Status::InProgress => {}
    }
    let was_running = ticket.status == Status::InProgress;
    let cancelled = db::tickets::set_status(conn, ticket.id, Status::Cancelled).await?;
    db::events::append(conn, ticket.id, &[NewEvent::new(None, EventData::TicketCancelled {})]).await?;
    if was_running {
        db::tickets::notify_cancel(conn, ticket.id).await?;
    }
    Ok((cancelled, Some(ticket.agent.unwrap_or_default())))
}

/// Re-queues a failed or cancelled ticket, keeping its transcript so the agent continues.
pub async fn retry(pool: &PgPool, project: ProjectId, reference: &str) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let ticket = lock(&mut tx, project, reference).await?;
    if !matches!(ticket.status, Status::Failed | Status::Cancelled) {
        return Err(DeskError::Conflict(format!(
            "{} is {}: only failed or cancelled tickets can be retried",
            ticket.key,
            ticket.status.as_str()
        )));
    }
    let requeued = db::tickets::set_status(&mut tx, ticket.id, Status::Todo).await?;
    db::events::append(
        &mut tx,
        ticket.id,
        &[NewEvent::new(
            None,
            EventData::TicketRequeued {
                reason: RequeueReason::Retry,
            },
        )],
    )
    .await?;
    db::tickets::notify_work(&mut tx).await?;
    tx.commit().await?;
    crate::telemetry::metric::requeued("retry");
    Ok(requeued)
}

/// A person's answer to a tool call that waits for approval (see `answer_approvals`).
pub async fn answer_approval(
    pool: &PgPool,
    project: ProjectId,
    reference: &str,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
) -> Result<Ticket, DeskError> {
    let decision = Decision {
        call_id: call_id.to_owned(),
        approve,
        reason,
    };
    answer_approvals(pool, project, reference, Decisions::Each(vec![decision])).await
}

/// One answer to a waiting tool call.
#[derive(Clone, Debug)]
pub struct Decision {
    pub call_id: String,
    pub approve: bool,
    pub reason: Option<String>,
}

/// The answers of one request: for some calls, or the same for every pending one.
#[derive(Clone, Debug)]
pub enum Decisions {
    Each(Vec<Decision>),
    All { approve: bool, reason: Option<String> },
}

/// People's answers to tool calls that wait for approval: `tool.approved` or `tool.denied` for
/// each; once every waiting call of the step is answered, a `waiting` ticket goes back to `todo`
/// and its next claim runs them. All or nothing, under the ticket's row lock, in one transaction:
/// an unknown call (not found) or one answered already (a conflict) applies none of them; two
/// answers to one call cannot both win, and a worker's step reads them whole.
pub async fn answer_approvals(
    pool: &PgPool,
    project: ProjectId,
    reference: &str,
    decisions: Decisions,
) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let ticket = lock(&mut tx, project, reference).await?;
    let mut approvals = ticket.approvals.clone();
    let decisions = match decisions {
        Decisions::Each(each) => each,
        Decisions::All { approve, reason } => {
            let pending: Vec<Decision> = approvals
                .iter()
                .filter(|a| a.decision.is_none())
                .map(|a| Decision {
                    call_id: a.call_id.clone(),
                    approve,
                    reason: reason.clone(),
                })
                .collect();
            if pending.is_empty() || ticket.status.is_terminal() {
                return Err(DeskError::Conflict(format!(
                    "no tool call of {} waits for approval",
                    ticket.key
                )));
            }
            pending
        }
    };
    let mut events = vec![];
    for Decision {
        call_id,
        approve,
        reason,
    } in decisions
    {
        let Some(approval) = approvals.iter_mut().find(|a| a.call_id == call_id) else {
            // Answered calls leave `approvals` once they ran; their answer stays in the log.
            if let Some(outcome) = db::events::call_answer(&mut tx, ticket.id, &call_id).await? {
                return Err(DeskError::Conflict(format!(
                    "the call {call_id:?} of {} was already answered: {outcome}",
                    ticket.key
                )));
            }
            return Err(DeskError::Missing(format!(
                "{}: no tool call {call_id:?} waits for approval",
                ticket.key
            )));
        };
        if let Some(decision) = approval.decision {
            // Said whole, so that an answer that lost to another (or to the deadline) knows
            // what won.
            let decided = match decision {
                crate::domain::Decision::Approved => "approved",
                crate::domain::Decision::Denied => "denied",
            };
            let why = approval
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            return Err(DeskError::Conflict(format!(
                "the call {call_id:?} of {} was already answered: {decided}{why}",
                ticket.key
            )));
        }
        if ticket.status.is_terminal() {
            return Err(DeskError::Conflict(format!(
                "the call {call_id:?} of {} does not wait: the ticket is {}",
                ticket.key,
                ticket.status.as_str()
            )));
        }
        approval.decision = Some(if approve {
            crate::domain::Decision::Approved
        } else {
            crate::domain::Decision::Denied
        });
        approval.reason = reason.clone();
        let (tool_name, call_id) = (approval.tool_name.clone(), approval.call_id.clone());
        let event = if approve {
            EventData::ToolApproved {
                tool_name,
                call_id,
                reason,
            }
        } else {
            EventData::ToolDenied {
                tool_name,
                call_id,
                reason,
            }
        };
        events.push(NewEvent::new(None, event));
    }
    let ticket = match store_answers(&mut tx, &ticket, &approvals, &mut events).await? {
        Some(requeued) => requeued,
        None => db::tickets::find_by_id(&mut *tx, ticket.id)
            .await?
            .ok_or_else(|| DeskError::NotFound(reference.to_owned()))?,
    };
    db::events::append(&mut tx, ticket.id, &events).await?;
    tx.commit().await?;
    Ok(ticket)
}

/// Stores a ticket's calls with their answers, under its row lock; once every call is answered,
/// a `waiting` ticket goes back to `todo` (`ticket.requeued` with reason `approval`, added to
/// `events`) and the ticket as requeued is returned. Shared by people's answers and the desk's
/// answers at a deadline (`deadlines::expire_approvals`).
pub(crate) async fn store_answers(
    conn: &mut PgConnection,
    ticket: &Ticket,
    approvals: &[crate::domain::Approval],
    events: &mut Vec<NewEvent>,
) -> Result<Option<Ticket>, sqlx::Error> {
    db::tickets::set_approvals(conn, ticket.id, approvals).await?;
    let all_answered = approvals.iter().all(|a| a.decision.is_some());
    if !(all_answered && ticket.status == Status::Waiting) {
        return Ok(None);
    }
    let requeued = db::tickets::set_status(conn, ticket.id, Status::Todo).await?;
    events.push(NewEvent::new(
        None,
        EventData::TicketRequeued {
            reason: RequeueReason::Approval,
        },
    ));
    db::tickets::notify_work(conn).await?;
    Ok(Some(requeued))
}
