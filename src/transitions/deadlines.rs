//! Ticket deadlines: a ticket still open when its `deadline_at` passes fails with
//! `deadline_exceeded`, whatever it is doing (queued, in progress or waiting). Approval
//! deadlines: a call nobody answered by its `expires_at` is answered by the desk as its
//! `on_timeout` says; a question nobody answered fails the ticket or lets the model go on.

use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use crate::db;
use crate::domain::question::QuestionTimeout;
use crate::domain::tool::OnTimeout;
use crate::domain::{Decision, EventData, FailureKind, NewEvent, Status, TicketError};

/// Answers the calls whose approval deadline has passed (up to `limit` tickets), each ticket in
/// its own row lock and the same transaction as its events: `tool.approval_expired`, then what
/// the answer leads to (`ticket.requeued` once every call is answered, or `ticket.failed`). The
/// deadline is in Postgres, so it holds across restarts; the check runs every second in every
/// worker process, and row locks (SKIP LOCKED) keep two processes from answering one call.
/// Returns how many tickets changed.
pub async fn expire_approvals(pool: &PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let due: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM tickets WHERE approval_deadline_at <= now() AND status IN ('todo', 'waiting')
         ORDER BY approval_deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let now = Utc::now();
    for id in &due {
        let Some(ticket) = db::tickets::find_by_id(&mut *tx, *id).await? else {
            continue;
        };
        let mut approvals = ticket.approvals.clone();
        let mut events = vec![];
        let mut failure = None;
        let expired = approvals
            .iter_mut()
            .filter(|a| a.decision.is_none() && a.expires_at.is_some_and(|at| at <= now));
        for approval in expired {
            if let Some(question) = &approval.question {
                let on_timeout = question.on_timeout.unwrap_or_default();
                events.push(NewEvent::new(
                    None,
                    EventData::QuestionExpired {
                        id: question.id,
                        call_id: approval.call_id.clone(),
                        on_timeout: on_timeout.as_str().into(),
                    },
                ));
                match on_timeout {
                    QuestionTimeout::Continue => {
                        // Answered by nobody: the model is told so (`agent::approvals`).
                        approval.decision = Some(Decision::Denied);
                        approval.reason = Some("nobody answered the question in time".into());
                    }
                    QuestionTimeout::Fail => {
                        failure.get_or_insert_with(|| {
                            let message = format!("nobody answered the question {:?} in time", question.question);
                            (FailureKind::QuestionExpired, message)
                        });
                    }
                }
                continue;
            }
            let on_timeout = approval.on_timeout.unwrap_or_default();
            events.push(NewEvent::new(
                None,
                EventData::ToolApprovalExpired {
                    call_id: approval.call_id.clone(),
                    tool_name: approval.tool_name.clone(),
                    decision: on_timeout.as_str().into(),
                },
            ));
            match on_timeout {
                OnTimeout::Deny => {
                    approval.decision = Some(Decision::Denied);
                    approval.reason = Some("nobody approved this call in time".into());
                }
                OnTimeout::Approve => {
                    approval.decision = Some(Decision::Approved);
                    approval.reason = Some("approved by the desk: nobody answered in time".into());
                }
                OnTimeout::Fail => {
                    failure.get_or_insert_with(|| {
                        let message = format!(
                            "nobody answered the call {} of {} in time",
                            approval.call_id, approval.tool_name
                        );
                        (FailureKind::ApprovalExpired, message)
                    });
                }
            }
        }
        if let Some((kind, message)) = failure {
            let error = TicketError { kind, message };
            db::tickets::set_approvals(&mut tx, *id, &[]).await?;
            db::tickets::set_status(&mut tx, *id, Status::Failed).await?;
            db::tickets::set_error(&mut tx, *id, &error).await?;
            events.push(NewEvent::new(
                ticket.agent.as_deref(),
                EventData::TicketFailed { error },
            ));
        } else {
            super::store_answers(&mut tx, &ticket, &approvals, &mut events).await?;
        }
        db::events::append(&mut tx, *id, &events).await?;
    }
    tx.commit().await?;
    Ok(due.len())
}

/// The error's message, as Postgres's `format` with the ticket's `deadline_secs`.
const DEADLINE_MESSAGE: &str = "the ticket's deadline of %s s after its creation has passed";

/// Fails up to `limit` open tickets past their deadline, each with its `ticket.failed` in the
/// same transaction; one process at a time does this. Bumping the generation fences out the
/// worker of an in-progress one (its next write finds the claim lost), and a cancel notice
/// stops its model stream and tools at once. Returns how many tickets failed.
pub async fn fail_past_deadline(pool: &PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !db::deadlines::lock_check(&mut tx).await? {
        return Ok(0);
    }
    let failed = db::deadlines::fail_due(&mut tx, limit, &FailureKind::DeadlineExceeded, DEADLINE_MESSAGE).await?;
    for ticket in &failed {
        // The event carries the error exactly as stored.
        let failed = EventData::TicketFailed {
            error: ticket.error.clone(),
        };
        let event = NewEvent::new(ticket.agent.as_deref(), failed);
        db::events::append(&mut tx, ticket.id, &[event]).await?;
        if ticket.was == "in_progress" {
            db::tickets::notify_cancel(&mut tx, ticket.id).await?;
        }
    }
    tx.commit().await?;
    Ok(failed.len())
}
