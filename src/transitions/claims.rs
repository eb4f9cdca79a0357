//! What a claim logs: `ticket.started` for every ticket claimed, and on a ticket's first claim
//! its task as the transcript's first user comment (so it is compacted and shown like everything
//! else) with its `comment.created`. The database layer claims and reserves the seqs
//! (`db::claims::claim_tickets`); this decides what goes in them.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use crate::db;
use crate::db::claims::{Claim, Claimed};
use crate::db::events::ReservedEvent;
use crate::domain::{Author, Comment, ContentBlock, EventData};

/// Claims up to `limit` tickets for `worker_id` and logs each claim, in one transaction: the
/// claims and their events (and a first claim's task comment) are durable together, or none is.
pub async fn claim_batch(
    conn: &mut PgConnection,
    limit: i64,
    lease: Duration,
    worker_id: &str,
) -> Result<Vec<Claim>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let claimed = db::claims::claim_tickets(&mut tx, limit, lease, worker_id).await?;
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
