//! What a claim logs: `ticket.started` for every ticket claimed, and on a ticket's first claim
//! its task as the transcript's first user comment (so it is compacted and shown like everything
//! else) with its `comment.created`. The database layer claims and reserves the seqs
//! (`db::claims::claim_tickets`); this decides what goes in them. And what becomes of a ticket
//! whose claim was lost with its worker (`reap_expired`).

use sqlx::{Connection, PgConnection};

use crate::db;
use crate::db::claims::{Claim, Claimed, Fence};
use crate::db::events::ReservedEvent;
use crate::domain::{
    Author, Comment, ContentBlock, EventData, FailureKind, NewEvent, RequeueReason, Status, TicketError,
};
use crate::telemetry::metric;

/// Claims up to `limit` tickets for `worker_id` and logs each claim, in one transaction: the
/// claims and their events (and a first claim's task comment) are durable together, or none is.
pub async fn claim_batch(conn: &mut PgConnection, limit: i64, worker_id: &str) -> Result<Vec<Claim>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let claimed = db::claims::claim_tickets(&mut tx, limit, worker_id).await?;
    let mut log = ClaimLog::default();
    let claims = claimed.into_iter().map(|claimed| log.add(claimed)).collect();
    // In the same statement for the whole batch, into the seqs the claims reserved.
    db::events::insert_reserved(&mut tx, &log.comments, &log.events).await?;
    tx.commit().await?;
    Ok(claims)
}

/// The comments and events of a batch of claims, in order.
#[derive(Default)]
struct ClaimLog {
    comments: Vec<Comment>,
    events: Vec<ReservedEvent>,
}

impl ClaimLog {
    /// Logs one claim; returns it with its transcript when the claim wrote the whole of it.
    fn add(&mut self, claimed: Claimed) -> Claim {
        let Claimed {
            mut claim,
            started_seq,
            task,
            no_comments_before,
        } = claimed;
        let ticket = &claim.ticket;
        let agent = Some(claim.agent.as_str());
        let started = EventData::TicketStarted {
            agent: claim.agent.clone(),
            attempt: ticket.attempts,
            agent_version: ticket.agent_version,
        };
        self.events
            .push(ReservedEvent::new(ticket, started_seq, agent, started));
        if let Some(seqs) = task {
            let content = vec![ContentBlock::text(ticket.task_text())];
            let task = Comment {
                seq: seqs.comment,
                ..db::steps::new_comment(ticket.id, Author::User, None, content)
            };
            let created = EventData::CommentCreated { comment: task.clone() };
            self.events.push(ReservedEvent::new(ticket, seqs.event, agent, created));
            // Nobody had commented: the task is the whole transcript.
            if no_comments_before {
                claim.transcript = Some(vec![task.clone()]);
            }
            self.comments.push(task);
        }
        claim
    }
}

/// Re-queues up to `limit` tickets whose lease expired (their worker died or hung), counting
/// the lost claim as an attempt; a ticket out of attempts fails with `lease_lost`. One
/// transaction, a statement for all their events and one for all their rows, so a dead process's
/// thousands of tickets go back within seconds. One reaper at a time across all processes.
/// The re-queues, their events and the marks of lapsed process leases commit together: a crash
/// before the commit leaves it all as it was, for the next tick. Returns how many tickets were
/// reaped.
pub async fn reap_expired(pool: &sqlx::PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !db::claims::lock_reaper(&mut tx).await? {
        return Ok(0);
    }
    let dead = db::claims::mark_dead_workers(&mut tx).await?;
    let expired = db::claims::lock_expired(&mut tx, limit, &dead).await?;
    if expired.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let mut ends = Vec::with_capacity(expired.len());
    let mut events = Vec::with_capacity(expired.len());
    for ticket in &expired {
        let data = if ticket.attempts >= ticket.max_attempts {
            let error = TicketError {
                kind: FailureKind::LeaseLost,
                message: format!(
                    "the worker's lease expired on {} of {} attempts",
                    ticket.attempts, ticket.max_attempts
                ),
            };
            ends.push((ticket.id, Status::Failed, Some(error.clone())));
            EventData::TicketFailed { error }
        } else {
            ends.push((ticket.id, Status::Todo, None));
            EventData::TicketRequeued {
                reason: RequeueReason::LeaseLost,
            }
        };
        let fence = Fence {
            ticket_id: ticket.id,
            generation: ticket.generation,
        };
        events.push((fence, NewEvent::new(ticket.agent.as_deref(), data)));
    }
    // Appended under the lost claims' own fences (the rows are locked here), then ended.
    let appends: Vec<(Fence, &[NewEvent])> = events
        .iter()
        .map(|(fence, event)| (*fence, std::slice::from_ref(event)))
        .collect();
    db::events::append_fenced_many(&mut tx, &appends).await?;
    db::claims::end_lost_claims(&mut tx, &ends).await?;
    db::tickets::notify_work(&mut tx).await?;
    tx.commit().await?;
    for (ticket, (_, status, _)) in expired.iter().zip(&ends) {
        if *status == Status::Failed {
            metric::ticket_finished(ticket.project.0, ticket.agent.as_deref().unwrap_or_default(), "failed");
        } else {
            metric::requeued("lease_lost");
        }
    }
    Ok(expired.len())
}
