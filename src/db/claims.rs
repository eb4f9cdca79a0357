//! The worker side of tickets: claiming with leases and fencing, renewing, reaping, releasing.
//!
//! Fencing: every claim bumps `generation`. Each write a worker makes starts with
//! `fence`, an UPDATE matching `(id, generation, status = 'in_progress')`; zero rows means the
//! claim was lost (lease expired and reaped, cancelled, or taken by another worker), and the
//! worker must stop without writing anything more.

use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

pub use super::fence::Fence;
use super::tickets::{TicketRow, TICKET_COLUMNS};
use crate::domain::{
    Agent, Author, Comment, ContentBlock, EventData, FailureKind, NewEvent, ProjectId, RequeueReason, Status, Ticket,
    TicketError, TicketUsage,
};

/// A claim held by this worker: the ticket as claimed and the generation that fences its writes.
#[derive(Clone, Debug)]
pub struct Claim {
    pub ticket: Ticket,
    pub generation: i64,
    pub agent: String,
    /// The agent's definition as the claim read it (None if it has been deleted since): the
    /// first step runs with it instead of reading it again.
    pub definition: Option<Agent>,
    /// The whole transcript when the claim wrote it (a first claim of a ticket nobody had
    /// commented on: just the task), for the first step; None means read it.
    pub transcript: Option<Vec<Comment>>,
    /// The `traceparent` stored with the ticket, which its spans continue.
    pub trace_context: Option<String>,
}

impl Claim {
    pub fn fence(&self) -> Fence {
        Fence {
            ticket_id: self.ticket.id,
            generation: self.generation,
        }
    }

    /// Splits the claim into who holds it, kept for the whole run, and what the first step works
    /// from, which that step takes: a ticket waiting on its model then holds one copy of its
    /// ticket and agent, not the claim's as well as the step's. Boxed, so that each future it
    /// passes through holds a pointer, not room for a ticket and an agent.
    pub fn split(self) -> (Holder, Box<FirstRead>) {
        let holder = Holder {
            fence: self.fence(),
            agent: self.agent,
            key: self.ticket.key.clone(),
            project: self.ticket.project,
            trace_context: self.trace_context,
        };
        let first = Box::new(FirstRead {
            ticket: self.ticket,
            definition: self.definition,
            transcript: self.transcript,
        });
        (holder, first)
    }
}

/// Who holds a claim: what its run keeps from start to end.
pub struct Holder {
    pub fence: Fence,
    pub agent: String,
    /// The ticket's key, for logs and spans.
    pub key: String,
    pub project: ProjectId,
    /// The `traceparent` stored with the ticket, which its spans continue.
    pub trace_context: Option<String>,
}

/// What a claim read for its first step (see `Claim`'s fields of the same names).
pub struct FirstRead {
    pub ticket: Ticket,
    pub definition: Option<Agent>,
    pub transcript: Option<Vec<Comment>>,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Routes each ticket to one agent of its project (as agentwerk): a ticket labelled with an
/// agent's name goes only to that agent; an agent with no labels takes unlabelled tickets;
/// otherwise any agent sharing a label.
const ROUTE: &str = "CROSS JOIN LATERAL (
                SELECT a.name, a.max_concurrent, a.model, a.version FROM agents a
                WHERE a.project_id = t.project_id
                  AND (a.name = ANY(t.labels)
                       OR (NOT EXISTS (SELECT 1 FROM agents b WHERE b.project_id = t.project_id AND b.name = ANY(t.labels))
                           AND ((cardinality(a.labels) = 0 AND cardinality(t.labels) = 0) OR a.labels && t.labels)))
                ORDER BY (a.name = ANY(t.labels)) DESC, a.name
                LIMIT 1) a";

/// A project that reached a quota (`db::budgets::pause_project`) is not claimed from until the
/// quota's period ends or the quota changes.
fn not_paused(project: &str) -> String {
    format!("({project}.paused_until IS NULL OR {project}.paused_until <= now())")
}

/// A ticket past its deadline is the reaper's to fail, not a worker's to start.
const BEFORE_DEADLINE: &str = "(t.deadline_at IS NULL OR t.deadline_at > now())";

/// A ticket a claim statement took, with the seqs it reserved for what the claim logs; what that
/// is, the caller decides (`transitions::claims`). Every claim reserves one event seq; a ticket's
/// first claim also reserves a comment seq and a second event seq, for its task as the
/// transcript's first comment.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The claim, without its transcript (the caller's log decides it).
    pub claim: Claim,
    /// The event seq reserved first (for `ticket.started`).
    pub started_seq: i64,
    /// On a first claim, the seqs reserved for the task comment.
    pub task: Option<TaskSeqs>,
    /// Whether the ticket had no comment before (the task comment is then the whole transcript).
    pub no_comments_before: bool,
}

/// The seqs a first claim reserves for the task comment and its event.
#[derive(Clone, Copy, Debug)]
pub struct TaskSeqs {
    pub comment: i64,
    pub event: i64,
}

/// Claims up to `limit` claimable tickets, by priority then age, routed by the agents' labels,
/// in the caller's transaction, which must insert what the claims log (their seqs are reserved,
/// see [`Claimed`]) before it commits. The claiming agent's name is added to the labels, pinning
/// the ticket to it if it is re-queued.
///
/// Tickets of agents without `max_concurrent` are claimed by one statement, as fast as ever; it
/// also says whether any agent has a limit. Only then, a second statement claims for the limited
/// agents under a transaction-level advisory lock taken before it, so that its snapshot sees every
/// claim committed before: each agent's running count is exact however many processes claim, and
/// a claim never takes an agent past its limit.
/// The tickets are held under `worker_id`'s process lease (`register_worker`); a process whose
/// lease was lost claims nothing.
pub async fn claim_tickets(tx: &mut PgConnection, limit: i64, worker_id: &str) -> Result<Vec<Claimed>, sqlx::Error> {
    let mut claimed = vec![];
    let unlimited = ClaimStatement {
        candidates: &unlimited_candidates(),
        flag: "EXISTS (SELECT 1 FROM agents WHERE max_concurrent IS NOT NULL)",
        limit,
        worker_id,
    };
    let any_limited = claim_statement(tx, &unlimited, &mut claimed).await?;
    let left = limit - claimed.len() as i64;
    if any_limited && left > 0 {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('agentdesk.limited_claims', 0))")
            .execute(&mut *tx)
            .await?;
        let limited = ClaimStatement {
            candidates: &limited_candidates(),
            flag: "false",
            limit: left,
            ..unlimited
        };
        claim_statement(tx, &limited, &mut claimed).await?;
    }
    Ok(claimed)
}

/// The claimable tickets of agents without a limit, shared among the projects that have some
/// by weight: each project's tickets come in its own order (priority, then age), and a project's
/// k-th ticket ranks by (its running tickets + k) / its weight, so the project furthest below its
/// share of the workers is served first. A project with a backlog of thousands does not hold up
/// another's new ticket: that one ranks ahead as soon as its project runs less than its share.
/// With one project this is the single-queue claim it always was, and its running tickets are
/// not counted: with one queue they change no ranking, and counting them (an index range full of
/// recently finished tickets on a busy desk) is the costliest part of the statement.
fn unlimited_candidates() -> String {
    format!(
        "SELECT c.id, c.agent_name, c.agent_model, c.agent_version, c.seeded
         FROM projects p
         CROSS JOIN LATERAL (
            SELECT t.id, a.name AS agent_name, a.model AS agent_model, a.version AS agent_version, t.seeded,
                   t.priority, t.created_at
            FROM tickets t
            {ROUTE}
            WHERE t.project_id = p.id AND t.status = 'todo' AND a.max_concurrent IS NULL AND {BEFORE_DEADLINE}
            ORDER BY t.priority DESC, t.created_at, t.id
            LIMIT $1
            FOR UPDATE OF t SKIP LOCKED) c
         -- Counted once per project, not once per candidate, and only when another project's
         -- queue competes (the condition does not depend on `r`: Postgres checks it once, before
         -- reading the index).
         CROSS JOIN LATERAL (
            SELECT count(*) AS running FROM tickets r
            WHERE r.project_id = p.id AND r.status = 'in_progress'
              AND EXISTS (SELECT 1 FROM projects o
                          WHERE o.id <> p.id AND {other_not_paused}
                            AND EXISTS (SELECT 1 FROM tickets q WHERE q.project_id = o.id AND q.status = 'todo'))) load
         WHERE EXISTS (SELECT 1 FROM tickets q WHERE q.project_id = p.id AND q.status = 'todo')
           AND {not_paused}
         ORDER BY (load.running
                   + row_number() OVER (PARTITION BY p.id ORDER BY c.priority DESC, c.created_at, c.id))::float8
                  / p.weight,
                  c.priority DESC, c.created_at, c.id
         LIMIT $1",
        not_paused = not_paused("p"),
        other_not_paused = not_paused("o"),
    )
}

/// Ranks each limited agent's claimable tickets and keeps as many as it has free slots.
fn limited_candidates() -> String {
    format!(
        "WITH ranked AS MATERIALIZED (
                SELECT t.id, a.name AS agent_name, a.model AS agent_model, a.version AS agent_version, t.seeded,
                    t.priority, t.created_at,
                    row_number() OVER (PARTITION BY a.name ORDER BY t.priority DESC, t.created_at, t.id) AS place,
                    a.max_concurrent - (SELECT count(*) FROM tickets r
                                        WHERE r.status = 'in_progress' AND r.project_id = t.project_id
                                          AND r.agent = a.name) AS free
                FROM tickets t
                {ROUTE}
                WHERE t.status = 'todo' AND a.max_concurrent IS NOT NULL AND {BEFORE_DEADLINE}
                  AND EXISTS (SELECT 1 FROM projects p WHERE p.id = t.project_id AND {not_paused}))
             SELECT t.id, r.agent_name, r.agent_model, r.agent_version, r.seeded
             FROM tickets t JOIN ranked r ON r.id = t.id
             WHERE r.place <= r.free AND t.status = 'todo'
             ORDER BY r.priority DESC, r.created_at, r.id
             LIMIT $1
             FOR UPDATE OF t SKIP LOCKED",
        not_paused = not_paused("p"),
    )
}

/// One claim statement: `candidates` selects (and locks) the tickets, `flag` is a boolean SQL
/// expression the same statement evaluates.
#[derive(Clone, Copy)]
struct ClaimStatement<'a> {
    candidates: &'a str,
    flag: &'a str,
    limit: i64,
    worker_id: &'a str,
}

impl ClaimStatement<'_> {
    fn sql(&self) -> String {
        let ClaimStatement { candidates, flag, .. } = self;
        format!(
            "WITH candidates AS MATERIALIZED ({candidates}),
         claimed AS (
            UPDATE tickets t SET
                status = 'in_progress',
                agent = c.agent_name,
                -- A pinned ticket runs its version; any other the agent's latest.
                agent_version = CASE WHEN t.version_pinned THEN t.agent_version ELSE c.agent_version END,
                -- A replay may run another model than its agent's.
                model = coalesce(t.replay->>'model', CASE WHEN t.version_pinned
                             THEN coalesce((SELECT v.definition->>'model' FROM agent_versions v
                                            WHERE v.project_id = t.project_id AND v.name = c.agent_name
                                              AND v.version = t.agent_version), c.agent_model)
                             ELSE c.agent_model END),
                labels = CASE WHEN c.agent_name = ANY(t.labels) THEN t.labels ELSE array_append(t.labels, c.agent_name) END,
                generation = t.generation + 1,
                attempts = t.attempts + 1,
                -- Held while the process's lease is (`worker_leases`).
                lease_expires_at = 'infinity',
                worker_id = $2,
                claimed_at = now(),
                started_at = COALESCE(t.started_at, now()),
                finished_at = NULL,
                seeded = true,
                -- The seqs of what this claim logs, reserved here so the inserts below need not
                -- update the row again: `ticket.started`, and for a first claim the task as a
                -- comment with its `comment.created`.
                last_event_seq = t.last_event_seq + CASE WHEN c.seeded THEN 1 ELSE 2 END,
                last_comment_seq = t.last_comment_seq + CASE WHEN c.seeded THEN 0 ELSE 1 END,
                updated_at = now()
            -- By key through the primary index: joined on `t.id = c.id` alone, a plan that
            -- guessed many candidates would read the whole table to hash it.
            FROM candidates c WHERE t.id = ANY(ARRAY(SELECT id FROM candidates)) AND t.id = c.id
              -- A process whose lease was lost claims nothing under it.
              AND EXISTS (SELECT 1 FROM worker_leases w WHERE w.worker_id = $2
                          AND w.reaped_at IS NULL AND w.expires_at > now())
            RETURNING t.*, c.seeded AS was_seeded)
         -- One row even when nothing was claimed, to carry the flag.
         SELECT f.flag, {TICKET_COLUMNS}, t.generation, t.was_seeded, t.last_comment_seq, t.last_event_seq, t.trace_context,
                CASE WHEN t.version_pinned
                     THEN (SELECT v.definition FROM agent_versions v WHERE v.project_id = t.project_id
                             AND v.name = t.agent AND v.version = t.agent_version)
                     ELSE (SELECT to_jsonb(a) FROM agents a WHERE a.project_id = t.project_id AND a.name = t.agent)
                END AS definition
         FROM (SELECT {flag} AS flag) f LEFT JOIN claimed t ON true"
        )
    }
}

/// Claims the tickets `statement` selects, adding them to `claimed`; returns its flag.
async fn claim_statement(
    tx: &mut PgConnection,
    statement: &ClaimStatement<'_>,
    claimed: &mut Vec<Claimed>,
) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    let rows = sqlx::query(&statement.sql())
        .bind(statement.limit)
        .bind(statement.worker_id)
        .fetch_all(&mut *tx)
        .await?;
    let mut flag = false;
    for row in &rows {
        flag |= row.try_get::<bool, _>("flag")?;
        if row.try_get::<Option<Uuid>, _>("id")?.is_none() {
            continue;
        }
        claimed.push(claimed_from_row(row)?);
    }
    Ok(flag)
}

/// A claimed ticket as the claim statement returned it.
fn claimed_from_row(row: &PgRow) -> Result<Claimed, sqlx::Error> {
    use sqlx::{FromRow, Row};
    let generation: i64 = row.try_get("generation")?;
    let ticket: Ticket = TicketRow::from_row(row)?.into();
    let agent = ticket.agent.clone().unwrap_or_default();
    let (last_event_seq, last_comment_seq): (i64, i64) =
        (row.try_get("last_event_seq")?, row.try_get("last_comment_seq")?);
    let seeded: bool = row.try_get("was_seeded")?;
    let trace_context: Option<String> = row.try_get("trace_context")?;
    // Unreadable, it is read again by name in the first step.
    let definition = row
        .try_get::<Option<sqlx::types::Json<Agent>>, _>("definition")
        .ok()
        .flatten()
        .map(|json| json.0);
    // A first claim logs the task as a comment right after `ticket.started`.
    let (started_seq, task) = if seeded {
        (last_event_seq, None)
    } else {
        let task = TaskSeqs {
            comment: last_comment_seq,
            event: last_event_seq,
        };
        (last_event_seq - 1, Some(task))
    };
    Ok(Claimed {
        claim: Claim {
            ticket,
            generation,
            agent,
            definition,
            transcript: None,
            trace_context,
        },
        started_seq,
        task,
        no_comments_before: last_comment_seq == 1,
    })
}

/// Opens a transaction holding the claim's row lock, or None when the claim was lost. Every
/// write of a worker goes through here, so a worker that lost its claim changes nothing.
pub async fn fence(pool: &PgPool, fence: Fence) -> Result<Option<Transaction<'static, Postgres>>, sqlx::Error> {
    fence_adding(pool, fence, &TicketUsage::default()).await
}

/// `fence`, adding `usage` to the ticket's counters in the same statement (they commit, or roll
/// back, with the rest of the transaction).
pub async fn fence_adding(
    pool: &PgPool,
    fence: Fence,
    usage: &TicketUsage,
) -> Result<Option<Transaction<'static, Postgres>>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if holds_adding(&mut tx, fence, usage).await? {
        Ok(Some(tx))
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

/// Within a transaction: whether the claim is still held, locking its row until the commit.
pub async fn holds(conn: &mut PgConnection, fence: Fence) -> Result<bool, sqlx::Error> {
    holds_adding(conn, fence, &TicketUsage::default()).await
}

async fn holds_adding(conn: &mut PgConnection, fence: Fence, usage: &TicketUsage) -> Result<bool, sqlx::Error> {
    let sql = concat!(
        "UPDATE tickets SET updated_at = now(), ",
        super::tickets::usage_added!(),
        " WHERE id = $1 AND generation = $9 AND status = 'in_progress'"
    );
    let query = super::tickets::bind_usage(sqlx::query(sql).bind(fence.ticket_id), usage).bind(fence.generation);
    let held = super::tickets::bind_cost(query, usage).execute(conn).await?;
    Ok(held.rows_affected() == 1)
}

/// Starts a worker process's lease under a new `worker_id`; its claims are held while it is
/// renewed (`renew_worker`). An id registered before is left as it is: a lost lease is never
/// started again.
pub async fn register_worker(pool: &PgPool, worker_id: &str, lease: Duration) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO worker_leases (worker_id, expires_at) VALUES ($1, now() + make_interval(secs => $2))
         ON CONFLICT (worker_id) DO NOTHING",
    )
    .bind(worker_id)
    .bind(secs(lease))
    .execute(pool)
    .await?;
    Ok(())
}

/// Renews a worker process's lease, and with it every claim it holds, in one statement. False
/// when the lease had expired or was reaped: it is never renewed again, the claims made under
/// it are lost, and the process goes on under a new `worker_id`. The row lock orders this
/// against the reaper's marking (`mark_dead_workers`): a renewal either lands before the lease
/// expired and the reaper then sees it, or finds the row marked.
pub async fn renew_worker(pool: &PgPool, worker_id: &str, lease: Duration) -> Result<bool, sqlx::Error> {
    let renewed = sqlx::query(
        "UPDATE worker_leases SET expires_at = now() + make_interval(secs => $2)
         WHERE worker_id = $1 AND reaped_at IS NULL AND expires_at > now()",
    )
    .bind(worker_id)
    .bind(secs(lease))
    .execute(pool)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Lets a worker process's lease lapse now (on shutdown, after its tickets were released): the
/// reaper takes whatever it still holds at once, and forgets it later (`mark_dead_workers`).
pub async fn expire_worker(pool: &PgPool, worker_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE worker_leases SET expires_at = now() WHERE worker_id = $1 AND reaped_at IS NULL")
        .bind(worker_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// Ends a worker process's lease on shutdown, once its claimers have stopped (no claim statement
/// of it can still commit) and its tickets were released: forgotten when it holds no ticket,
/// else lapsed now as `expire_worker` does.
pub async fn end_worker(pool: &PgPool, worker_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH forgotten AS (
            DELETE FROM worker_leases WHERE worker_id = $1
              AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.status = 'in_progress'
                              AND t.lease_expires_at = 'infinity' AND t.worker_id = $1)
            RETURNING 1)
         UPDATE worker_leases SET expires_at = now()
         WHERE worker_id = $1 AND reaped_at IS NULL AND NOT EXISTS (SELECT 1 FROM forgotten)",
    )
    .bind(worker_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// How long the reaper keeps a dead process's row after marking it: a claim statement of that
/// process still in flight when its lease was marked may commit tickets under it a moment later,
/// and they are found as long as the row is.
const DEAD_WORKER_KEPT_SECS: f64 = 3600.0;

/// Marks the worker processes whose lease expired as reaped (never renewed again, `renew_worker`)
/// and returns every process marked within `DEAD_WORKER_KEPT_SECS`, whose claims are lost;
/// forgets the processes marked before that which hold no ticket.
pub async fn mark_dead_workers(tx: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query(
        "DELETE FROM worker_leases w WHERE w.reaped_at < now() - make_interval(secs => $1)
           AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.status = 'in_progress'
                           AND t.lease_expires_at = 'infinity' AND t.worker_id = w.worker_id)",
    )
    .bind(DEAD_WORKER_KEPT_SECS)
    .execute(&mut *tx)
    .await?;
    // The statement's snapshot is from before its update: the rows marked now come from `marked`
    // alone, those marked before from the second half.
    sqlx::query_scalar(
        "WITH marked AS (
            UPDATE worker_leases SET reaped_at = now() WHERE expires_at < now() AND reaped_at IS NULL
            RETURNING worker_id)
         SELECT worker_id FROM marked
         UNION ALL SELECT worker_id FROM worker_leases WHERE reaped_at IS NOT NULL",
    )
    .fetch_all(tx)
    .await
}

/// Takes the reaper's lock for the caller's transaction: one reaper at a time across all
/// processes. False when another holds it.
pub async fn lock_reaper(tx: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended('agentdesk.reaper', 0))")
        .fetch_one(tx)
        .await
}

/// An in-progress ticket whose lease expired, locked by the reaper.
#[derive(Debug, sqlx::FromRow)]
pub struct Expired {
    pub id: Uuid,
    /// The lost claim's generation, which still fences its rows until they are ended.
    pub generation: i64,
    pub attempts: i32,
    pub max_attempts: i32,
    pub agent: Option<String>,
    #[sqlx(rename = "project_id")]
    pub project: ProjectId,
}

/// Locks up to `limit` in-progress tickets whose lease expired, oldest first: their own lease,
/// or the lease of their process when it is one of `dead` (`mark_dead_workers`). Expiry is
/// checked under the row lock; a row being written now is skipped, and taken next time.
pub async fn lock_expired(tx: &mut PgConnection, limit: i64, dead: &[String]) -> Result<Vec<Expired>, sqlx::Error> {
    let own = sqlx::query_as(
        "SELECT id, generation, attempts, max_attempts, agent, project_id FROM tickets
         WHERE status = 'in_progress' AND lease_expires_at < now()
         ORDER BY lease_expires_at LIMIT $1
         FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let left = limit - own.len() as i64;
    if dead.is_empty() || left <= 0 {
        return Ok(own);
    }
    // Only while a process is dead: its tickets are among the live processes' ones (`infinity`).
    let mut expired = own;
    let of_dead: Vec<Expired> = sqlx::query_as(
        "SELECT id, generation, attempts, max_attempts, agent, project_id FROM tickets
         WHERE status = 'in_progress' AND lease_expires_at = 'infinity' AND worker_id = ANY($2)
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
    )
    .bind(left)
    .bind(dead)
    .fetch_all(&mut *tx)
    .await?;
    expired.extend(of_dead);
    Ok(expired)
}

/// Ends lost claims (locked by `lock_expired`) in one statement: each ticket goes to its status
/// (`todo`, or `failed` with its error), under a new generation that fences out its old worker,
/// with no lease, and the claim's time counted as work.
pub async fn end_lost_claims(
    tx: &mut PgConnection,
    ends: &[(Uuid, Status, Option<TicketError>)],
) -> Result<(), sqlx::Error> {
    let ids: Vec<Uuid> = ends.iter().map(|(id, _, _)| *id).collect();
    let statuses: Vec<&str> = ends.iter().map(|(_, status, _)| status.as_str()).collect();
    let errors: Vec<Option<sqlx::types::Json<&TicketError>>> =
        ends.iter().map(|(_, _, e)| e.as_ref().map(sqlx::types::Json)).collect();
    sqlx::query(
        "UPDATE tickets t SET status = e.status, error = COALESCE(e.error, t.error), generation = t.generation + 1,
            lease_expires_at = NULL, worker_id = NULL,
            work_ms = t.work_ms + COALESCE((extract(epoch FROM now() - t.claimed_at) * 1000)::bigint, 0),
            claimed_at = NULL,
            finished_at = CASE WHEN e.status = 'failed' THEN now() ELSE NULL END, updated_at = now()
         FROM unnest($1::uuid[], $2::text[], $3::jsonb[]) AS e(id, status, error)
         WHERE t.id = e.id",
    )
    .bind(&ids)
    .bind(&statuses)
    .bind(&errors)
    .execute(tx)
    .await?;
    Ok(())
}

/// How a worker lets go of a claim it still holds (inside a fenced transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// The agent asked the humans something: `waiting` until a comment arrives.
    Waiting,
    /// Clean shutdown: back to `todo` without spending an attempt.
    Shutdown,
}

pub async fn release(conn: &mut PgConnection, fence: Fence, how: Release, agent: &str) -> Result<(), sqlx::Error> {
    let (status, event) = match how {
        Release::Waiting => ("waiting", EventData::TicketWaiting {}),
        Release::Shutdown => (
            "todo",
            EventData::TicketRequeued {
                reason: RequeueReason::Shutdown,
            },
        ),
    };
    sqlx::query(
        "UPDATE tickets SET status = $3, attempts = GREATEST(attempts - 1, 0),
            lease_expires_at = NULL, worker_id = NULL,
            work_ms = work_ms + COALESCE((extract(epoch FROM now() - claimed_at) * 1000)::bigint, 0),
            claimed_at = NULL, updated_at = now()
         WHERE id = $1 AND generation = $2",
    )
    .bind(fence.ticket_id)
    .bind(fence.generation)
    .bind(status)
    .execute(&mut *conn)
    .await?;
    super::events::append(conn, fence.ticket_id, &[NewEvent::new(Some(agent), event)]).await?;
    if how == Release::Shutdown {
        super::tickets::notify_work(conn).await?;
    }
    Ok(())
}

/// Ends a claim as `done` or `failed` (inside a fenced transaction), appending `events` and then
/// the ticket's final event in one statement.
pub async fn finish(
    conn: &mut PgConnection,
    fence: Fence,
    outcome: &Finish,
    agent: &str,
    mut events: Vec<NewEvent>,
) -> Result<(), sqlx::Error> {
    let (status, result, error, event) = outcome.columns(agent);
    events.push(event);
    // The outcome and the events in one statement: one new version of the ticket's row.
    let columns = super::events::EventColumns::of(&events);
    sqlx::query(
        "WITH e AS (
            SELECT * FROM unnest($6::text[], $7::text[], $8::text[]) WITH ORDINALITY AS e(kind, agent, data, ord)),
         t AS (
            UPDATE tickets SET status = $3, result = COALESCE($4, result), error = $5,
                lease_expires_at = NULL, worker_id = NULL,
                work_ms = work_ms + COALESCE((extract(epoch FROM now() - claimed_at) * 1000)::bigint, 0),
                claimed_at = NULL, finished_at = now(), updated_at = now(),
                last_event_seq = last_event_seq + cardinality($6::text[])
             WHERE id = $1 AND generation = $2
             RETURNING id, project_id, key, last_event_seq - cardinality($6::text[]) AS base)
         INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, agent, data)
         SELECT t.id, t.project_id, t.key, t.base + e.ord, e.kind, e.agent, e.data::json FROM e, t",
    )
    .bind(fence.ticket_id)
    .bind(fence.generation)
    .bind(status)
    .bind(result)
    .bind(error)
    .bind(&columns.kinds)
    .bind(&columns.agents)
    .bind(&columns.data)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[derive(Clone, Debug)]
pub enum Finish {
    Done(serde_json::Value),
    Failed { kind: FailureKind, message: String },
}

impl Finish {
    /// The ticket's new status, result and error, and its final event.
    pub(super) fn columns(&self, agent: &str) -> (&'static str, Option<Value>, Option<Value>, NewEvent) {
        match self {
            Finish::Done(result) => (
                "done",
                Some(result.clone()),
                None,
                NewEvent::new(Some(agent), EventData::TicketDone { result: result.clone() }),
            ),
            Finish::Failed { kind, message } => {
                let error = TicketError {
                    kind: kind.clone(),
                    message: message.clone(),
                };
                (
                    "failed",
                    None,
                    serde_json::to_value(&error).ok(),
                    NewEvent::new(Some(agent), EventData::TicketFailed { error }),
                )
            }
        }
    }
}

/// Counts a schema retry and returns the new count.
pub async fn bump_schema_retries(conn: &mut PgConnection, ticket_id: Uuid, reset: bool) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE tickets SET schema_retries = CASE WHEN $2 THEN 0 ELSE schema_retries + 1 END WHERE id = $1
         RETURNING schema_retries",
    )
    .bind(ticket_id)
    .bind(reset)
    .fetch_one(conn)
    .await
}

/// What the loop needs of a ticket besides `Ticket`: the generation (to see that the claim still
/// holds).
pub async fn loop_state(pool: &PgPool, ticket_id: Uuid) -> Result<Option<(Ticket, i64)>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {TICKET_COLUMNS}, t.generation FROM tickets t WHERE t.id = $1"
    ))
    .bind(ticket_id)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    use sqlx::{FromRow, Row};
    Ok(Some((TicketRow::from_row(&row)?.into(), row.try_get("generation")?)))
}

/// After a cancel stopped this claim's model response: stores what it had streamed (and shown)
/// as an assistant comment with its `comment.created`. The cancel bumped the generation, so the
/// claim's fence fails; instead, under the ticket's row lock, this checks that the claim ended by
/// that cancel and nothing else: the ticket is `cancelled`, its generation is exactly the claim's
/// plus one (nobody claimed it since), and its last two lifecycle events are this claim's
/// `ticket.started` and then `ticket.cancelled` (a lost claim logs `ticket.requeued` first, a
/// retry too). False when that does not hold, and nothing is written.
pub async fn store_cancelled_output(
    pool: &PgPool,
    fence: Fence,
    agent: &str,
    content: &[ContentBlock],
) -> Result<bool, sqlx::Error> {
    use crate::domain::event::kind;
    let mut tx = pool.begin().await?;
    let state: Option<(String, i64)> =
        sqlx::query_as("SELECT status, generation FROM tickets WHERE id = $1 FOR UPDATE")
            .bind(fence.ticket_id)
            .fetch_optional(&mut *tx)
            .await?;
    if state != Some(("cancelled".to_owned(), fence.generation + 1)) {
        return Ok(false);
    }
    let lifecycle = [
        kind::TICKET_STARTED,
        kind::TICKET_REQUEUED,
        kind::TICKET_WAITING,
        kind::TICKET_CANCELLED,
        kind::TICKET_DONE,
        kind::TICKET_FAILED,
    ];
    let last: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM events WHERE ticket_id = $1 AND kind = ANY($2) ORDER BY seq DESC LIMIT 2")
            .bind(fence.ticket_id)
            .bind(&lifecycle[..])
            .fetch_all(&mut *tx)
            .await?;
    if last != [kind::TICKET_CANCELLED, kind::TICKET_STARTED] {
        return Ok(false);
    }
    let comment = super::comments::insert(&mut tx, fence.ticket_id, Author::Assistant, Some(agent), content).await?;
    let created = NewEvent::new(Some(agent), EventData::CommentCreated { comment });
    super::events::append(&mut tx, fence.ticket_id, &[created]).await?;
    tx.commit().await?;
    Ok(true)
}
