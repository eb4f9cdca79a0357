//! The event log: appending with per-ticket sequence numbers, and reading it back.
//!
//! Ordering rules that make both streams exact:
//! - A ticket's `seq` is taken from its row under the row lock, so a ticket's events commit in
//!   `seq` order with no gaps.
//! - The global stream's cursor is `(txid, id)`, read only below a *horizon*: the oldest
//!   transaction still running in the reading statement's snapshot (or the next transaction id
//!   when none runs). Every transaction below it has committed or aborted in that snapshot, so no
//!   event can later appear behind the cursor. (A bigserial alone is not safe: ids commit out of
//!   order and readers would skip.) Transactions seen running in another database are left out,
//!   so a long transaction elsewhere on a shared server does not hold the streams back.

use std::fmt;

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgExecutor, PgPool, Row};
use uuid::Uuid;

use super::fence::Fence;
use super::group_commit::{GroupWrite, GroupWriter};

use crate::domain::{Comment, EventData, NewEvent, ProjectId, Ticket, TicketEvent};

/// Position in the global event stream. Opaque to clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalCursor {
    pub txid: u64,
    pub id: i64,
}

impl GlobalCursor {
    /// Before every event: where a reader that wants the whole kept log starts.
    pub const START: GlobalCursor = GlobalCursor { txid: 0, id: 0 };

    /// `TXID-ID`, each 1 to 18 digits (as the document's pattern says; each fits an i64), or `0`
    /// for `START`.
    pub fn parse(s: &str) -> Option<GlobalCursor> {
        if s == "0" {
            return Some(GlobalCursor::START);
        }
        let (txid, id) = s.split_once('-')?;
        let digits = |p: &str| (1..=18).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit());
        if !digits(txid) || !digits(id) {
            return None;
        }
        Some(GlobalCursor {
            txid: txid.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

impl fmt::Display for GlobalCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.txid, self.id)
    }
}

/// An event read from the log, with what the global stream filters on.
#[derive(Clone, Debug)]
pub struct LoggedEvent {
    pub cursor: GlobalCursor,
    pub project: ProjectId,
    pub event: TicketEvent,
    /// The ticket's labels and agent when the event was read.
    pub ticket_labels: Vec<String>,
    pub ticket_agent: Option<String>,
}

/// A row of `EVENT_COLUMNS`, read by position: the columns come first in every statement that
/// reads events, and looking each one up by name cost more than decoding it.
fn logged_event(row: &PgRow) -> Result<LoggedEvent, sqlx::Error> {
    let txid: String = row.try_get(1)?;
    let data: sqlx::types::Json<Box<serde_json::value::RawValue>> = row.try_get(7)?;
    Ok(LoggedEvent {
        cursor: GlobalCursor {
            txid: txid.parse().unwrap_or(0),
            id: row.try_get(0)?,
        },
        event: TicketEvent {
            ticket_id: row.try_get(2)?,
            ticket_key: row.try_get(3)?,
            seq: row.try_get(4)?,
            kind: row.try_get(5)?,
            agent: row.try_get(6)?,
            data: data.0,
            at: row.try_get(8)?,
        },
        ticket_labels: row.try_get(9)?,
        ticket_agent: row.try_get(10)?,
        project: row.try_get(11)?,
    })
}

/// How many columns `EVENT_COLUMNS` (and `logged_event`) has: where a statement's own begin.
const EVENT_COLUMN_COUNT: usize = 12;

/// Appends events to a ticket's log inside the caller's transaction. If the transaction rolls
/// back, the events vanish with the change they describe. After the commit, call `EventHub::wake`.
pub async fn append(conn: &mut PgConnection, ticket_id: Uuid, events: &[NewEvent]) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let columns = EventColumns::of(events);
    sqlx::query(
        "WITH t AS (
            UPDATE tickets SET last_event_seq = last_event_seq + $2 WHERE id = $1
            RETURNING key, project_id, last_event_seq - $2 AS base)
         INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, agent, data)
         SELECT $1, t.project_id, t.key, t.base + e.n, e.kind, e.agent, e.data::json
         FROM t, unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e(kind, agent, data, n)",
    )
    .bind(ticket_id)
    .bind(events.len() as i64)
    .bind(&columns.kinds)
    .bind(&columns.agents)
    .bind(&columns.data)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Appends events of a project that belong to no ticket (`project.quota_reached`, a schedule's
/// fire skipped for the quota): no ticket, no seq; the firehose and webhooks carry them like any
/// other, by their cursor. Inside the caller's transaction; after the commit, `EventHub::wake`.
pub async fn append_to_project(
    conn: &mut PgConnection,
    project: ProjectId,
    events: &[NewEvent],
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let columns = EventColumns::of(events);
    sqlx::query(
        "INSERT INTO events (project_id, kind, agent, data)
         SELECT $1, e.kind, e.agent, e.data::json
         FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS e(kind, agent, data, n) ORDER BY n",
    )
    .bind(project)
    .bind(&columns.kinds)
    .bind(&columns.agents)
    .bind(&columns.data)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Events as the arrays the append statements unnest (`kind`, `agent`, `data`), borrowed.
pub(crate) struct EventColumns<'a> {
    pub kinds: Vec<&'static str>,
    pub agents: Vec<Option<&'a str>>,
    /// As JSON text, for the `json` column (bound as `text[]`, cast with `::json`).
    pub data: Vec<&'a str>,
}

impl<'a> EventColumns<'a> {
    pub(crate) fn of(events: impl IntoIterator<Item = &'a NewEvent>) -> EventColumns<'a> {
        let (mut kinds, mut agents, mut data) = (vec![], vec![], vec![]);
        for e in events {
            kinds.push(e.kind);
            agents.push(e.agent.as_deref());
            data.push(e.data.as_str());
        }
        // Counted as they are written: a group that fails and is written again one by one is
        // counted twice (rare; the counter is for rates, the log is the record).
        crate::telemetry::metric::events_written(&kinds);
        EventColumns { kinds, agents, data }
    }
}

/// Appends events to tickets whose claims the callers hold, in one statement (one commit for all):
/// each claim is checked and its events get their ticket's next seqs under the row lock. Returns
/// the tickets whose claim held, whose events were appended; nothing is written for a lost one.
/// The statement may lock several tickets' rows.
/// No lock order is at stake: the other statements that lock several (`steps::store_steps`)
/// never hold the same tickets at once, since a ticket's loop waits for one write at a time, and
/// the claim, the renewal and the reaper skip locked rows instead of waiting.
pub async fn append_fenced_many(
    conn: &mut PgConnection,
    appends: &[(Fence, &[NewEvent])],
) -> Result<Vec<Uuid>, sqlx::Error> {
    let fences = appends
        .iter()
        .flat_map(|(fence, events)| events.iter().map(move |_| fence));
    let (ids, generations): (Vec<Uuid>, Vec<i64>) = fences.map(|f| (f.ticket_id, f.generation)).unzip();
    let columns = EventColumns::of(appends.iter().flat_map(|(_, events)| *events));
    sqlx::query_scalar(
        "WITH e AS (
            SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[], $5::text[])
                WITH ORDINALITY AS e(ticket_id, generation, kind, agent, data, ord)),
         counts AS (SELECT ticket_id, generation, count(*) AS n FROM e GROUP BY ticket_id, generation),
         t AS (
            UPDATE tickets SET last_event_seq = last_event_seq + counts.n, updated_at = now() FROM counts
            -- By key through the primary index: with statistics that say few tickets are in
            -- progress (just after thousands were claimed), a join on the status scanned the
            -- in-progress index once per ticket, over a second a statement at 50 000 in flight.
            WHERE tickets.id = ANY(ARRAY(SELECT ticket_id FROM counts))
              AND tickets.id = counts.ticket_id AND tickets.generation = counts.generation
              AND tickets.status = 'in_progress'
            RETURNING tickets.id, tickets.project_id, tickets.generation, tickets.key,
                      tickets.last_event_seq - counts.n AS base),
         ins AS (
            INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, agent, data)
            SELECT e.ticket_id, t.project_id, t.key, t.base + row_number() OVER (PARTITION BY e.ticket_id ORDER BY e.ord),
                   e.kind, e.agent, e.data::json
            FROM e JOIN t ON t.id = e.ticket_id AND t.generation = e.generation
            RETURNING 1)
         SELECT id FROM t",
    )
    .bind(&ids)
    .bind(&generations)
    .bind(&columns.kinds)
    .bind(&columns.agents)
    .bind(&columns.data)
    .fetch_all(conn)
    .await
}

/// Events to append to a claimed ticket's log, in a group (`EventAppender`).
pub struct Append {
    pub fence: Fence,
    pub events: Vec<NewEvent>,
}

impl GroupWrite for Append {
    /// Whether the claim held (else nothing was written).
    type Reply = bool;

    async fn write_group(conn: &mut PgConnection, writes: &[Append]) -> Result<Vec<bool>, sqlx::Error> {
        let appends: Vec<(Fence, &[NewEvent])> = writes.iter().map(|w| (w.fence, w.events.as_slice())).collect();
        let written = append_fenced_many(conn, &appends).await?;
        Ok(super::group_commit::held(writes.iter().map(|w| w.fence), written))
    }
}

/// Group-commits the agent loops' event-only writes (`request.started`, `request.retried`, …).
pub type EventAppender = GroupWriter<Append>;

impl EventAppender {
    /// The most appends one statement takes.
    const MAX_GROUP: usize = 256;

    /// Starts the writer (one: an append is small, and a group of them commits quickly).
    pub fn start(pool: PgPool) -> EventAppender {
        GroupWriter::spawn(pool, "events", Self::MAX_GROUP, 1)
    }

    /// Appends `events` if the claim still holds; false (nothing written) when it was lost.
    pub async fn append(&self, fence: Fence, events: Vec<NewEvent>) -> Result<bool, sqlx::Error> {
        self.write(Append { fence, events }).await
    }
}

/// An event whose `seq` its writer reserved by raising the ticket's `last_event_seq` in the same
/// transaction, under the row's lock (a claim): it is inserted
/// without touching the ticket's row again, which would write another version of it.
pub struct ReservedEvent {
    pub ticket_id: Uuid,
    pub project: ProjectId,
    pub ticket_key: String,
    pub seq: i64,
    pub event: NewEvent,
}

impl ReservedEvent {
    pub fn new(ticket: &Ticket, seq: i64, agent: Option<&str>, data: EventData) -> ReservedEvent {
        ReservedEvent {
            ticket_id: ticket.id,
            project: ticket.project,
            ticket_key: ticket.key.clone(),
            seq,
            event: NewEvent::new(agent, data),
        }
    }
}

/// Inserts comments and events whose seqs were reserved (see [`ReservedEvent`]; the comments'
/// in `last_comment_seq` alike), in one statement, in the order given.
pub async fn insert_reserved(
    conn: &mut PgConnection,
    comments: &[Comment],
    events: &[ReservedEvent],
) -> Result<(), sqlx::Error> {
    if comments.is_empty() && events.is_empty() {
        return Ok(());
    }
    let columns = EventColumns::of(events.iter().map(|e| &e.event));
    let contents: Vec<Value> = comments
        .iter()
        .map(|c| super::comments::content_json(&c.content))
        .collect();
    sqlx::query(
        "WITH c AS (
            INSERT INTO comments (id, ticket_id, seq, author, agent, content, created_at)
            SELECT id, ticket_id, seq, author, agent, content, created_at
            FROM unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::jsonb[], $7::timestamptz[])
                WITH ORDINALITY AS c(id, ticket_id, seq, author, agent, content, created_at, ord)
            ORDER BY ord
            RETURNING 1)
         INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, agent, data)
         SELECT ticket_id, project_id, ticket_key, seq, kind, agent, data::json
         FROM unnest($8::uuid[], $9::text[], $10::int8[], $11::text[], $12::text[], $13::text[], $14::int8[])
             WITH ORDINALITY AS e(ticket_id, ticket_key, seq, kind, agent, data, project_id, ord)
         ORDER BY ord",
    )
    .bind(comments.iter().map(|c| c.id).collect::<Vec<_>>())
    .bind(comments.iter().map(|c| c.ticket_id).collect::<Vec<_>>())
    .bind(comments.iter().map(|c| c.seq).collect::<Vec<_>>())
    .bind(comments.iter().map(|c| c.author.as_str()).collect::<Vec<_>>())
    .bind(comments.iter().map(|c| c.agent.as_deref()).collect::<Vec<_>>())
    .bind(&contents)
    .bind(comments.iter().map(|c| c.created_at).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.ticket_id).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.ticket_key.as_str()).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.seq).collect::<Vec<_>>())
    .bind(&columns.kinds)
    .bind(&columns.agents)
    .bind(&columns.data)
    .bind(events.iter().map(|e| e.project).collect::<Vec<_>>())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The columns `logged_event` reads, in its order; a statement's own columns follow them.
const EVENT_COLUMNS: &str =
    "e.id, e.txid::text AS txid, e.ticket_id, e.ticket_key, e.seq, e.kind, e.agent, e.data, e.at, \
     CASE WHEN t.labels IS NULL THEN '{}' ELSE t.labels END, t.agent AS ticket_agent, e.project_id";

/// A ticket's events after `after_seq`, in order.
pub async fn read_ticket<'e>(
    db: impl PgExecutor<'e>,
    ticket_id: Uuid,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<LoggedEvent>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {EVENT_COLUMNS} FROM events e JOIN tickets t ON t.id = e.ticket_id
         WHERE e.ticket_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3"
    ))
    .bind(ticket_id)
    .bind(after_seq)
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.iter().map(logged_event).collect()
}

/// Whether a ticket is finished (done, failed or cancelled) and the `seq` of its latest event;
/// None when there is no such ticket (any more).
pub async fn ticket_standing<'e>(db: impl PgExecutor<'e>, ticket_id: Uuid) -> Result<Option<(bool, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT status IN ('done', 'failed', 'cancelled'), last_event_seq FROM tickets WHERE id = $1")
        .bind(ticket_id)
        .fetch_optional(db)
        .await
}

/// The horizon of the global stream, as an SQL expression of type `xid8` over the statement's own
/// snapshot, so that a statement reads below the horizon of the snapshot it reads with.
///
/// It is the oldest transaction running in that snapshot, leaving out those that
/// `pg_stat_activity` shows running in *another* database (they cannot write this database's
/// events). That list may be read later than the snapshot, or earlier (Postgres keeps a
/// transaction's first look), and it need not show every session. A transaction missing from it
/// only makes the horizon lower: later events wait a round longer, none is skipped. A transaction
/// of this database can never be taken for another's, because a session stays in one database
/// and a transaction id is not reused.
const HORIZON: &str = "(SELECT least(
        pg_snapshot_xmax(s.snap),
        (SELECT min(x) FROM pg_snapshot_xip(s.snap) AS x
          WHERE (x::text::numeric % 4294967296) NOT IN (
              SELECT a.backend_xid::text::numeric FROM pg_stat_activity a
              WHERE a.backend_xid IS NOT NULL AND a.datname IS DISTINCT FROM current_database())))
    FROM (SELECT pg_current_snapshot() AS snap) s)";

/// Events of all tickets after `after`, in cursor order, only from transactions that can no
/// longer be overtaken by an earlier one (see the module comment).
pub async fn read_global(
    conn: &mut PgConnection,
    after: GlobalCursor,
    limit: i64,
) -> Result<Vec<LoggedEvent>, sqlx::Error> {
    Ok(read_global_page(conn, after, limit).await?.events)
}

/// One page of `read_global`, and whether committed events after the page are still held back
/// by an older running transaction (then the reader should look again soon, as no NOTIFY may
/// follow).
#[derive(Debug, Default)]
pub struct GlobalPage {
    pub events: Vec<LoggedEvent>,
    pub held_back: bool,
}

/// A page of `read_global` with whether events are held back (see [`GlobalPage`]), in one
/// statement: the event reader pays its round trips per round even when a round finds one event.
///
/// The horizon, the page and the newest event all come from the statement's one snapshot. An
/// event committed after it is in none of them; its writer wakes the readers after its commit
/// (this process's directly, others by NOTIFY or their polling), so the next round reads it.
pub async fn read_global_page(
    conn: &mut PgConnection,
    after: GlobalCursor,
    limit: i64,
) -> Result<GlobalPage, sqlx::Error> {
    // Some event is after the cursor and at or above the horizon exactly when the newest event is,
    // so one step down the cursor index answers it. (An `EXISTS` over a range got a generic plan
    // that scanned the whole log.) The page joins it laterally: one row with no event when the
    // page is empty, no row at all when the log is. The horizon is computed once, as an initplan.
    let sql = format!(
        "WITH h AS MATERIALIZED (SELECT {HORIZON} AS horizon)
         SELECT p.*, n.newest_txid, n.newest_id, (SELECT horizon FROM h)::text AS horizon
         FROM (SELECT e.txid::text AS newest_txid, e.id AS newest_id FROM events e
               ORDER BY e.txid DESC, e.id DESC LIMIT 1) n
         LEFT JOIN LATERAL (
            SELECT {EVENT_COLUMNS} FROM events e LEFT JOIN tickets t ON t.id = e.ticket_id
            WHERE (e.txid, e.id) > ($1::text::xid8, $2) AND e.txid < (SELECT horizon FROM h)
            ORDER BY e.txid, e.id LIMIT $3) p ON true"
    );
    let rows = sqlx::query(&sql)
        .bind(after.txid.to_string())
        .bind(after.id)
        .bind(limit)
        .fetch_all(conn)
        .await?;
    let mut page = GlobalPage::default();
    let mut newest_and_horizon = None;
    for row in &rows {
        // After the page's columns (`logged_event`'s): the newest event and the horizon.
        let own = EVENT_COLUMN_COUNT;
        let (txid, id, horizon): (String, i64, Option<String>) =
            (row.try_get(own)?, row.try_get(own + 1)?, row.try_get(own + 2)?);
        let newest = GlobalCursor {
            txid: txid.parse().unwrap_or(u64::MAX),
            id,
        };
        newest_and_horizon = Some((newest, horizon));
        if row.try_get::<Option<i64>, _>(0)?.is_some() {
            page.events.push(logged_event(row)?);
        }
    }
    // In cursor order, whatever order the join returned them in.
    page.events.sort_by_key(|e| e.cursor);
    let last = page.events.last().map_or(after, |e| e.cursor);
    // An unreadable horizon counts as holding back: the reader looks again rather than stalls.
    page.held_back = newest_and_horizon.is_some_and(|(newest, horizon)| {
        let horizon = horizon.and_then(|h| h.parse::<u64>().ok());
        let at_or_above_horizon = horizon.is_none_or(|h| newest.txid >= h);
        newest > last && at_or_above_horizon
    });
    Ok(page)
}

/// The cursor just past every event readable now: a stream "from now" starts here.
pub async fn head(conn: &mut PgConnection) -> Result<GlobalCursor, sqlx::Error> {
    let row: Option<(String, i64)> = sqlx::query_as(&format!(
        "SELECT e.txid::text, e.id FROM events e WHERE e.txid < {HORIZON}
         ORDER BY e.txid DESC, e.id DESC LIMIT 1"
    ))
    .fetch_optional(conn)
    .await?;
    Ok(row
        .map(|(txid, id)| GlobalCursor {
            txid: txid.parse().unwrap_or(0),
            id,
        })
        .unwrap_or_default())
}

/// How this tool call of the ticket was answered, from the log: `approved` or `denied` (by a
/// person, or by the desk at its deadline); None when it never was. Read only when an answer
/// names a call that no longer waits.
pub async fn call_answer(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    call_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE kind WHEN 'tool.approved' THEN 'approved' WHEN 'tool.denied' THEN 'denied'
                          ELSE CASE data->>'decision' WHEN 'approve' THEN 'approved by the desk at its deadline'
                                                      WHEN 'deny' THEN 'denied by the desk at its deadline'
                                                      ELSE 'failed at its deadline' END END
         FROM events WHERE ticket_id = $1 AND kind IN ('tool.approved', 'tool.denied', 'tool.approval_expired')
                     AND data->>'call_id' = $2
         ORDER BY seq DESC LIMIT 1",
    )
    .bind(ticket_id)
    .bind(call_id)
    .fetch_optional(conn)
    .await
}

/// The calls of a ticket that failed, with their kinds (`tool.failed`): (call id, kind).
pub async fn failed_calls<'e>(
    db: impl sqlx::PgExecutor<'e>,
    ticket_id: Uuid,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT data->>'call_id', data->>'kind' FROM events WHERE ticket_id = $1 AND kind = 'tool.failed'
         AND data->>'call_id' IS NOT NULL AND data->>'kind' IS NOT NULL",
    )
    .bind(ticket_id)
    .fetch_all(db)
    .await
}

/// What became of a question of the ticket that no longer waits: `question.answered` or
/// `question.expired`, or None when it never was asked.
pub async fn question_outcome(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT kind FROM events WHERE ticket_id = $1 AND kind IN ('question.asked', 'question.answered', 'question.expired')
                AND data->>'id' = $2 ORDER BY seq DESC LIMIT 1",
    )
    .bind(ticket_id)
    .bind(id.to_string())
    .fetch_optional(conn)
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_column_count_is_the_event_columns_length() {
        assert_eq!(super::EVENT_COLUMNS.split(',').count(), super::EVENT_COLUMN_COUNT);
    }
}
