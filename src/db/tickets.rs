//! Ticket rows: create, find, list, edit and the status changes made outside the worker.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::domain::event::kind::TICKET_CREATED;
use crate::domain::event::{CREATED_TICKET_FIELDS, CREATED_USAGE_FIELDS};
use crate::domain::money::{self, Usd};
use crate::domain::ticket::WaitingFor;
use crate::domain::{
    Approval, PendingApproval, PendingQuestion, ProjectId, Status, Ticket, TicketError, TicketRef, TicketUsage,
};

/// Every column a `Ticket` is built from, with the parent's key joined in.
pub const TICKET_COLUMNS: &str =
    "t.id, t.project_id, t.key, t.task, t.labels, t.status, t.agent, t.reporter, t.priority, \
     t.parent_id, (SELECT p.key FROM tickets p WHERE p.id = t.parent_id) AS parent_key, \
     t.schema, t.result, t.error, t.attempts, t.max_attempts, t.metadata, t.deadline_secs, t.deadline_at, \
     t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_creation_tokens, t.requests, t.tool_calls, \
     t.usage_estimated, t.created_at, t.updated_at, t.started_at, t.finished_at, t.approvals, \
     t.cost_usd::text AS cost_usd, t.unpriced, t.budget_usd::text AS budget_usd, t.waiting_for, \
     t.agent_version, t.version_pinned, t.replay";

#[derive(sqlx::FromRow)]
pub struct TicketRow {
    id: Uuid,
    project_id: ProjectId,
    key: String,
    task: Value,
    labels: Vec<String>,
    status: String,
    agent: Option<String>,
    reporter: String,
    priority: i32,
    parent_id: Option<Uuid>,
    parent_key: Option<String>,
    schema: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
    attempts: i32,
    max_attempts: i32,
    metadata: Value,
    deadline_secs: Option<i32>,
    deadline_at: Option<DateTime<Utc>>,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_creation_tokens: i64,
    requests: i64,
    tool_calls: i64,
    usage_estimated: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    approvals: Option<sqlx::types::Json<Vec<Approval>>>,
    cost_usd: String,
    unpriced: bool,
    budget_usd: Option<String>,
    waiting_for: Option<String>,
    agent_version: Option<i32>,
    version_pinned: bool,
    replay: Option<sqlx::types::Json<crate::domain::ticket::Replay>>,
}

impl From<TicketRow> for Ticket {
    fn from(r: TicketRow) -> Ticket {
        let status = Status::parse(&r.status).unwrap_or(Status::Failed);
        // A finished ticket runs nothing more: calls still listed (a finisher called beside
        // them) are over; reopening it clears the column.
        let approvals = match r.approvals {
            Some(a) if !status.is_terminal() => a.0,
            _ => vec![],
        };
        // What the desk stopped it for, else what a waiting ticket waits for by its state.
        let waiting_for = match status {
            Status::Waiting => Some(r.waiting_for.as_deref().and_then(WaitingFor::parse).unwrap_or(
                if approvals.iter().any(|a| a.is_pending() && !a.is_question()) {
                    WaitingFor::Approval
                } else {
                    WaitingFor::Human
                },
            )),
            _ => None,
        };
        Ticket {
            id: r.id,
            project: r.project_id,
            key: r.key,
            task: r.task,
            labels: r.labels,
            // The CHECK constraint admits only known statuses.
            status,
            agent: r.agent,
            reporter: r.reporter,
            priority: r.priority,
            parent_id: r.parent_id,
            parent_key: r.parent_key,
            schema: r.schema,
            result: r.result,
            error: r.error.and_then(|e| serde_json::from_value::<TicketError>(e).ok()),
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            metadata: r.metadata,
            deadline_secs: r.deadline_secs,
            deadline_at: r.deadline_at,
            usage: TicketUsage {
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                cache_read_tokens: r.cache_read_tokens,
                cache_creation_tokens: r.cache_creation_tokens,
                requests: r.requests,
                tool_calls: r.tool_calls,
                cost: Usd::parse(&r.cost_usd).unwrap_or_default(),
                unpriced: r.unpriced,
                estimated: r.usage_estimated,
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            pending_approvals: approvals
                .iter()
                .filter(|a| a.is_pending() && !a.is_question())
                .map(PendingApproval::from)
                .collect(),
            pending_question: approvals.iter().filter(|a| a.is_pending()).find_map(|a| {
                let q = a.question.as_ref()?;
                Some(PendingQuestion {
                    id: q.id,
                    question: q.question.clone(),
                    response_schema: q.response_schema.clone(),
                    choices: q.choices.clone(),
                    answer_url: q.answer_url.clone(),
                    expires_at: a.expires_at,
                })
            }),
            approvals,
            budget_usd: money::from_db(r.budget_usd),
            waiting_for,
            agent_version: r.agent_version,
            version_pinned: r.version_pinned,
            replay: r.replay.map(|j| j.0),
        }
    }
}

/// What a create may set besides a `NewTicket`'s fields (the API's creates).
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The ticket's own money budget (`budget_usd`).
    pub budget_usd: Option<Usd>,
    /// The version of its agent it is pinned to (created with `agent` and `agent_version`).
    pub agent_version: Option<i32>,
    /// What it replays (`POST /v1/tickets/{ticket}/replay`).
    pub replay: Option<crate::domain::ticket::Replay>,
}

#[derive(Clone, Debug)]
pub struct NewTicket {
    /// The project it belongs to: its key and number come from there.
    pub project: ProjectId,
    pub task: Value,
    pub labels: Vec<String>,
    pub priority: i32,
    pub schema: Option<Value>,
    pub parent_id: Option<Uuid>,
    pub metadata: Value,
    pub max_attempts: i32,
    pub reporter: String,
    pub idempotency: Option<(String, String)>,
    /// The W3C `traceparent` its spans continue (see `telemetry::trace`).
    pub trace_context: Option<String>,
    /// Fails the ticket this many seconds after its creation (`deadline_exceeded`).
    pub deadline_secs: Option<i32>,
}

/// The data of a new ticket's `ticket.created` event (`{"ticket": …}`) as SQL, for the statement
/// that inserts the ticket (its inserted row is `t`): the ticket exactly as the API writes it, every
/// field of `Ticket`'s serialisation in its order (`CREATED_TICKET_FIELDS`, kept next to the
/// event's type), with the same values (the key and the times are the database's), without
/// spaces between members (the task, metadata and schema inside are Postgres's text of their
/// jsonb, which has them: the same JSON). One statement writes both, so a create is one round
/// trip and its own transaction. `tests/created_event.rs` and `tests/api.rs` compare it with the
/// created ticket.
static CREATED_EVENT_DATA: LazyLock<String> = LazyLock::new(|| {
    let ticket = json_object_sql(
        CREATED_TICKET_FIELDS
            .iter()
            .map(|&field| (field, created_member_sql(field))),
    );
    format!("('{{\"ticket\":' || {ticket} || '}}')::json")
});

/// The SQL of one member of a new ticket's JSON: most are the column of the same name.
fn created_member_sql(field: &str) -> JsonValue {
    match field {
        "parent_key" => JsonValue::Of("(SELECT p.key FROM tickets p WHERE p.id = t.parent_id)".into()),
        // Times as the API writes them.
        "deadline_at" | "created_at" | "updated_at" | "started_at" | "finished_at" => {
            JsonValue::Of(format!("api_time(t.{field})"))
        }
        "usage" => JsonValue::Text(json_object_sql(CREATED_USAGE_FIELDS.iter().map(|&counter| {
            let sql = match counter {
                "cost_usd" => "trim_scale(t.cost_usd)".to_owned(),
                counter => format!("t.{counter}"),
            };
            (counter, JsonValue::Of(sql))
        }))),
        // Written as the API writes an amount: no trailing zeros.
        "budget_usd" => JsonValue::Of("trim_scale(t.budget_usd)".into()),
        // A new ticket waits for no approval.
        "pending_approvals" => JsonValue::Text("'[]'".into()),
        "pending_question" => JsonValue::Text("'null'".into()),
        column => JsonValue::Of(format!("t.{column}")),
    }
}

/// A value in `json_object_sql`: a SQL expression, written as `to_json` writes it (NULL as
/// `null`), or SQL that is already JSON text.
enum JsonValue {
    Of(String),
    Text(String),
}

/// SQL for the text of a JSON object with these fields, in this order and without spaces
/// (`json_build_object` would put a space on either side of every colon).
fn json_object_sql<'a>(fields: impl Iterator<Item = (&'a str, JsonValue)>) -> String {
    let members: Vec<String> = fields
        .enumerate()
        .map(|(i, (name, value))| {
            let open = if i == 0 { "{" } else { "," };
            let value = match value {
                JsonValue::Of(sql) => format!("coalesce(to_json({sql})::text, 'null')"),
                JsonValue::Text(sql) => sql,
            };
            format!("'{open}\"{name}\":' || {value}")
        })
        .collect();
    format!("({} || '}}')", members.join(" || "))
}

/// Inserts a ticket and its `ticket.created` event (seq 1 of its log), in one statement.
pub async fn insert(conn: &mut PgConnection, new: NewTicket) -> Result<Ticket, sqlx::Error> {
    insert_with(conn, new, Extras::default()).await
}

/// `insert`, with a money budget of the ticket's own and a pinned agent version.
pub async fn insert_with(conn: &mut PgConnection, new: NewTicket, extras: Extras) -> Result<Ticket, sqlx::Error> {
    let (idem_key, idem_hash) = new.idempotency.unzip();
    let sql = format!(
        "WITH n AS (SELECT agentdesk_ticket_number($15) AS number),
         t AS (
            INSERT INTO tickets (id, project_id, number, key, task, labels, priority, schema, parent_id, metadata,
                                 max_attempts, reporter, idempotency_key, idempotency_hash, last_event_seq,
                                 trace_context, deadline_secs, deadline_at, budget_usd, agent_version, version_pinned,
                                 replay)
            SELECT $1, $15, n.number, p.key_prefix || '-' || n.number, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1,
                   $12, $13, now() + make_interval(secs => $13), $14::numeric, $16, $16 IS NOT NULL, $17
            FROM n, projects p WHERE p.id = $15
            RETURNING *),
         e AS (
            INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, data)
            SELECT t.id, t.project_id, t.key, 1, '{TICKET_CREATED}', {data} FROM t)
         SELECT {TICKET_COLUMNS} FROM t",
        data = *CREATED_EVENT_DATA
    );
    let row: TicketRow = sqlx::query_as(&sql)
        .bind(Uuid::now_v7())
        .bind(&new.task)
        .bind(&new.labels)
        .bind(new.priority)
        .bind(&new.schema)
        .bind(new.parent_id)
        .bind(&new.metadata)
        .bind(new.max_attempts)
        .bind(&new.reporter)
        .bind(idem_key)
        .bind(idem_hash)
        .bind(&new.trace_context)
        .bind(new.deadline_secs)
        .bind(extras.budget_usd.map(|b| b.to_string()))
        .bind(new.project)
        .bind(extras.agent_version)
        .bind(extras.replay.map(sqlx::types::Json))
        .fetch_one(conn)
        .await?;
    crate::telemetry::metric::events_written(&[TICKET_CREATED]);
    Ok(row.into())
}

/// Inserts several tickets without idempotency keys, each with its `ticket.created` event, in one
/// statement; returned in the order given, with keys (and their events) increasing in that order.
pub async fn insert_many(conn: &mut PgConnection, new: &[NewTicket]) -> Result<Vec<Ticket>, sqlx::Error> {
    if new.is_empty() {
        return Ok(vec![]);
    }
    let ids: Vec<Uuid> = new.iter().map(|_| Uuid::now_v7()).collect();
    let tasks: Vec<&Value> = new.iter().map(|n| &n.task).collect();
    // Label lists differ in length, which a two-dimensional array cannot hold: they go as JSON.
    let labels: Vec<Value> = new.iter().map(|n| serde_json::json!(n.labels)).collect();
    let priorities: Vec<i32> = new.iter().map(|n| n.priority).collect();
    let schemas: Vec<Option<&Value>> = new.iter().map(|n| n.schema.as_ref()).collect();
    let parents: Vec<Option<Uuid>> = new.iter().map(|n| n.parent_id).collect();
    let metadata: Vec<&Value> = new.iter().map(|n| &n.metadata).collect();
    let max_attempts: Vec<i32> = new.iter().map(|n| n.max_attempts).collect();
    let reporters: Vec<&str> = new.iter().map(|n| n.reporter.as_str()).collect();
    let trace_contexts: Vec<Option<&str>> = new.iter().map(|n| n.trace_context.as_deref()).collect();
    let deadlines: Vec<Option<i32>> = new.iter().map(|n| n.deadline_secs).collect();
    let projects: Vec<ProjectId> = new.iter().map(|n| n.project).collect();
    let sql = format!(
        "WITH t AS (
            INSERT INTO tickets (id, project_id, number, key, task, labels, priority, schema, parent_id, metadata,
                                 max_attempts, reporter, last_event_seq, trace_context, deadline_secs, deadline_at)
            SELECT n.id, n.project_id, n.number, p.key_prefix || '-' || n.number, n.task,
                   ARRAY(SELECT jsonb_array_elements_text(n.labels)), n.priority, n.schema,
                   n.parent_id, n.metadata, n.max_attempts, n.reporter, 1, n.trace_context,
                   n.deadline_secs, now() + make_interval(secs => n.deadline_secs)
            -- Numbers are drawn as the rows come, in the order given.
            FROM (SELECT u.*, agentdesk_ticket_number(u.project_id) AS number
                  FROM unnest($1::uuid[], $2::jsonb[], $3::jsonb[], $4::int4[], $5::jsonb[], $6::uuid[], $7::jsonb[],
                              $8::int4[], $9::text[], $10::text[], $11::int4[], $12::int8[])
                       WITH ORDINALITY AS u(id, task, labels, priority, schema, parent_id, metadata, max_attempts,
                                            reporter, trace_context, deadline_secs, project_id, ord)) n
            JOIN projects p ON p.id = n.project_id
            ORDER BY n.ord
            RETURNING *),
         e AS (
            INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, data)
            SELECT t.id, t.project_id, t.key, 1, '{TICKET_CREATED}', {data} FROM t ORDER BY t.project_id, t.number)
         SELECT {TICKET_COLUMNS} FROM t",
        data = *CREATED_EVENT_DATA
    );
    let rows: Vec<TicketRow> = sqlx::query_as(&sql)
        .bind(&ids)
        .bind(&tasks)
        .bind(&labels)
        .bind(&priorities)
        .bind(&schemas)
        .bind(&parents)
        .bind(&metadata)
        .bind(&max_attempts)
        .bind(&reporters)
        .bind(&trace_contexts)
        .bind(&deadlines)
        .bind(&projects)
        .fetch_all(conn)
        .await?;
    crate::telemetry::metric::events_written(std::iter::repeat_n(&TICKET_CREATED, rows.len()));
    let mut tickets: Vec<Ticket> = rows.into_iter().map(Ticket::from).collect();
    tickets.sort_by_key(|t| ids.iter().position(|id| *id == t.id));
    Ok(tickets)
}

/// Tickets by project and status, every status of every project that has tickets (zeros
/// included), and every status of `default` always.
pub async fn count_by_status(pool: &PgPool) -> Result<Vec<(ProjectId, &'static str, i64)>, sqlx::Error> {
    let rows: Vec<(ProjectId, String, i64)> =
        sqlx::query_as("SELECT project_id, status, count(*) FROM tickets GROUP BY project_id, status")
            .fetch_all(pool)
            .await?;
    let found: std::collections::HashMap<(ProjectId, &str), i64> =
        rows.iter().map(|(p, s, n)| ((*p, s.as_str()), *n)).collect();
    let mut projects: Vec<ProjectId> = rows.iter().map(|(p, _, _)| *p).collect();
    projects.push(ProjectId::DEFAULT);
    projects.sort();
    projects.dedup();
    let mut counts = Vec::with_capacity(projects.len() * Status::ALL.len());
    for project in projects {
        for status in Status::ALL {
            let count = found.get(&(project, status.as_str())).copied().unwrap_or(0);
            counts.push((project, status.as_str(), count));
        }
    }
    Ok(counts)
}

/// Serialises creates that share an idempotency key until the first one commits.
pub async fn lock_idempotency_key(conn: &mut PgConnection, key: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))")
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// The ticket created earlier with this idempotency key, and the hash of its request body.
pub async fn find_by_idempotency_key(
    conn: &mut PgConnection,
    project: ProjectId,
    key: &str,
) -> Result<Option<(Ticket, Option<String>)>, sqlx::Error> {
    let sql = format!(
        "SELECT {TICKET_COLUMNS}, t.idempotency_hash FROM tickets t WHERE t.project_id = $2 AND t.idempotency_key = $1"
    );
    let row = sqlx::query(&sql)
        .bind(key)
        .bind(project)
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        None => Ok(None),
        Some(row) => {
            use sqlx::{FromRow, Row};
            let hash: Option<String> = row.try_get("idempotency_hash")?;
            Ok(Some((TicketRow::from_row(&row)?.into(), hash)))
        }
    }
}

/// A ticket of `project` by id or key: another project's ticket is not found.
pub async fn find<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    ticket: &TicketRef,
) -> Result<Option<Ticket>, sqlx::Error> {
    let sql = format!(
        "SELECT {TICKET_COLUMNS} FROM tickets t WHERE t.project_id = $1 AND {}",
        ref_condition(ticket)
    );
    let row: Option<TicketRow> = bind_ref(sqlx::query_as(&sql), project, ticket)
        .fetch_optional(db)
        .await?;
    Ok(row.map(Ticket::from))
}

/// The condition on tickets `t` of project `$1` that finds a reference: by id through the primary
/// key, by key through the project's unique number index (the key is checked on the row found,
/// so `OPS-3` is no ticket of a project whose prefix is not OPS). One statement shape per kind of
/// reference, so each plans as the lookup it is; `bind_ref` binds it.
fn ref_condition(r: &TicketRef) -> &'static str {
    match r {
        TicketRef::Id(_) => "t.id = $2",
        TicketRef::Key { .. } => "t.number = $2 AND t.key = $3",
    }
}

fn bind_ref<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    project: ProjectId,
    r: &'q TicketRef,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    let query = query.bind(project);
    match r {
        TicketRef::Id(id) => query.bind(*id),
        TicketRef::Key { key, number } => query.bind(*number).bind(key.as_str()),
    }
}

/// A ticket by its id, whatever its project: for the desk's own work on a ticket it already
/// holds (a claim, a timer), never for a reference a client sent.
pub async fn find_by_id<'e>(db: impl PgExecutor<'e>, id: Uuid) -> Result<Option<Ticket>, sqlx::Error> {
    let row: Option<TicketRow> = sqlx::query_as(&format!("SELECT {TICKET_COLUMNS} FROM tickets t WHERE t.id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(row.map(Ticket::from))
}

/// Locks a ticket row of `project` for the rest of the transaction. Taking this lock first in
/// every writing transaction keeps a ticket's events in commit order (see `db::events`).
pub async fn lock(
    conn: &mut PgConnection,
    project: ProjectId,
    ticket: &TicketRef,
) -> Result<Option<Ticket>, sqlx::Error> {
    let sql = format!(
        "SELECT {TICKET_COLUMNS} FROM tickets t WHERE t.project_id = $1 AND {} FOR UPDATE OF t",
        ref_condition(ticket)
    );
    let row: Option<TicketRow> = bind_ref(sqlx::query_as(&sql), project, ticket)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(Ticket::from))
}

#[derive(Clone, Debug)]
pub struct ListFilter {
    /// Only this project's tickets.
    pub project: ProjectId,
    pub statuses: Vec<Status>,
    pub label: Option<String>,
    pub agent: Option<String>,
    pub parent_id: Option<Uuid>,
    pub query: Option<String>,
    /// An A2A context: tickets whose metadata names it (`a2a_context_id`), or the ticket with
    /// this id when its metadata names none (a ticket is its own context by default).
    pub context_id: Option<String>,
    pub descending: bool,
    /// Ticket number to continue after (exclusive), in the list's order.
    pub after_number: Option<i64>,
    pub limit: i64,
}

impl ListFilter {
    /// Every ticket of a project, the first page in creation order.
    pub fn new(project: ProjectId) -> ListFilter {
        ListFilter {
            project,
            statuses: vec![],
            label: None,
            agent: None,
            parent_id: None,
            query: None,
            context_id: None,
            descending: false,
            after_number: None,
            limit: 50,
        }
    }
}

/// One page of tickets plus the number of its last one (for the next cursor) when more follow.
pub async fn list<'e>(db: impl PgExecutor<'e>, f: &ListFilter) -> Result<(Vec<Ticket>, Option<i64>), sqlx::Error> {
    let (cmp, order) = if f.descending { ("<", "DESC") } else { (">", "ASC") };
    let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
    let sql = format!(
        "SELECT {TICKET_COLUMNS}, t.number FROM tickets t
         WHERE t.project_id = $9 AND (cardinality($1::text[]) = 0 OR t.status = ANY($1))
           AND ($2::text IS NULL OR $2 = ANY(t.labels))
           AND ($3::text IS NULL OR t.agent = $3)
           AND ($4::uuid IS NULL OR t.parent_id = $4)
           AND ($5::text IS NULL OR t.task::text ILIKE '%' || $5 || '%')
           AND ($6::bigint IS NULL OR t.number {cmp} $6)
           AND ($8::text IS NULL OR coalesce(t.metadata->>'a2a_context_id', t.id::text) = $8)
         ORDER BY t.number {order}
         LIMIT $7"
    );
    let rows = sqlx::query(&sql)
        .bind(&statuses)
        .bind(&f.label)
        .bind(&f.agent)
        .bind(f.parent_id)
        .bind(f.query.as_deref().map(escape_like))
        .bind(f.after_number)
        .bind(f.limit + 1)
        .bind(&f.context_id)
        .bind(f.project)
        .fetch_all(db)
        .await?;
    let (tickets, numbers) = tickets_and_numbers(&rows)?;
    let (tickets, more) = super::page_of(tickets, f.limit);
    let next = if more {
        numbers.get(tickets.len().wrapping_sub(1)).copied()
    } else {
        None
    };
    Ok((tickets, next))
}

/// How many tickets match a list's filters (the cursor and limit aside): lets a capped listing
/// say how many it left out.
pub async fn count<'e>(db: impl PgExecutor<'e>, f: &ListFilter) -> Result<i64, sqlx::Error> {
    let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
    sqlx::query_scalar(
        "SELECT count(*) FROM tickets t
         WHERE t.project_id = $7 AND (cardinality($1::text[]) = 0 OR t.status = ANY($1))
           AND ($2::text IS NULL OR $2 = ANY(t.labels))
           AND ($3::text IS NULL OR t.agent = $3)
           AND ($4::uuid IS NULL OR t.parent_id = $4)
           AND ($5::text IS NULL OR t.task::text ILIKE '%' || $5 || '%')
           AND ($6::text IS NULL OR coalesce(t.metadata->>'a2a_context_id', t.id::text) = $6)",
    )
    .bind(&statuses)
    .bind(&f.label)
    .bind(&f.agent)
    .bind(f.parent_id)
    .bind(f.query.as_deref().map(escape_like))
    .bind(&f.context_id)
    .bind(f.project)
    .fetch_one(db)
    .await
}

/// A position in the list of `list_by_update`: a ticket's `updated_at` and number.
pub type UpdatePosition = (DateTime<Utc>, i64);

/// A2A's task list: the tickets of `f`'s statuses and context (its other filters are not read),
/// most recently updated first, since a task's status timestamp is its ticket's `updated_at`
/// (to the millisecond, as shown). Only those shown as updated at or after `since`; the page
/// starts after `after`. Returns the page, the position of its last ticket when more follow,
/// and how many tickets match (the position aside).
pub async fn list_by_update(
    pool: &PgPool,
    f: &ListFilter,
    since: Option<DateTime<Utc>>,
    after: Option<UpdatePosition>,
) -> Result<(Vec<Ticket>, Option<UpdatePosition>, i64), sqlx::Error> {
    const MATCHING: &str = "t.project_id = $7 AND (cardinality($1::text[]) = 0 OR t.status = ANY($1))
           AND ($2::text IS NULL OR coalesce(t.metadata->>'a2a_context_id', t.id::text) = $2)
           AND ($3::timestamptz IS NULL OR date_trunc('milliseconds', t.updated_at) >= $3)";
    let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
    let sql = format!(
        "SELECT {TICKET_COLUMNS}, t.number FROM tickets t
         WHERE {MATCHING}
           AND ($4::timestamptz IS NULL OR (t.updated_at, t.number) < ($4, $5::bigint))
         ORDER BY t.updated_at DESC, t.number DESC
         LIMIT $6"
    );
    let rows = sqlx::query(&sql)
        .bind(&statuses)
        .bind(&f.context_id)
        .bind(since)
        .bind(after.map(|(at, _)| at))
        .bind(after.map(|(_, number)| number))
        .bind(f.limit + 1)
        .bind(f.project)
        .fetch_all(pool)
        .await?;
    let (tickets, numbers) = tickets_and_numbers(&rows)?;
    let (tickets, more) = super::page_of(tickets, f.limit);
    let next = match (more, tickets.last()) {
        (true, Some(last)) => Some((last.updated_at, numbers[tickets.len() - 1])),
        _ => None,
    };
    let total: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM tickets t WHERE {MATCHING} AND $4::int8 IS NULL AND $5::int8 IS NULL AND $6::int8 IS NULL"
    ))
    .bind(&statuses)
    .bind(&f.context_id)
    .bind(since)
    .bind(None::<i64>)
    .bind(None::<i64>)
    .bind(None::<i64>)
    .bind(f.project)
    .fetch_one(pool)
    .await?;
    Ok((tickets, next, total))
}

/// Searching the task text must match `%` and `_` literally.
fn escape_like(q: &str) -> String {
    q.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

pub struct TicketPatch {
    pub task: Option<Value>,
    pub labels: Option<Vec<String>>,
    pub priority: Option<i32>,
    /// Some(None) clears the schema.
    pub schema: Option<Option<Value>>,
    pub metadata: Option<Value>,
    /// Some(None) removes the budget.
    pub budget_usd: Option<Option<Usd>>,
}

pub async fn update_fields(conn: &mut PgConnection, id: Uuid, patch: &TicketPatch) -> Result<Ticket, sqlx::Error> {
    let sql = format!(
        "WITH t AS (
            UPDATE tickets SET
                task = COALESCE($2, task),
                labels = COALESCE($3, labels),
                priority = COALESCE($4, priority),
                schema = CASE WHEN $5 THEN $6 ELSE schema END,
                metadata = COALESCE($7, metadata),
                budget_usd = CASE WHEN $8 THEN $9::numeric ELSE budget_usd END,
                updated_at = now()
            WHERE id = $1 RETURNING *)
         SELECT {TICKET_COLUMNS} FROM t"
    );
    let row: TicketRow = sqlx::query_as(&sql)
        .bind(id)
        .bind(&patch.task)
        .bind(&patch.labels)
        .bind(patch.priority)
        .bind(patch.schema.is_some())
        .bind(patch.schema.clone().flatten())
        .bind(&patch.metadata)
        .bind(patch.budget_usd.is_some())
        .bind(patch.budget_usd.flatten().map(|b| b.to_string()))
        .fetch_one(conn)
        .await?;
    Ok(row.into())
}

/// Moves a ticket nobody works on (or whose worker is fenced out by the bumped generation) to a
/// new status. `cancelled` ends any claim; `todo` re-arms a finished ticket with fresh attempts.
pub async fn set_status(conn: &mut PgConnection, id: Uuid, to: Status) -> Result<Ticket, sqlx::Error> {
    let sql = format!(
        "WITH t AS (
            UPDATE tickets SET
                status = $2,
                -- fence out a worker that still runs this ticket: its writes name the old generation
                generation = generation + CASE WHEN status = 'in_progress' THEN 1 ELSE 0 END,
                work_ms = work_ms + CASE WHEN status = 'in_progress' AND claimed_at IS NOT NULL
                          THEN (extract(epoch FROM now() - claimed_at) * 1000)::bigint ELSE 0 END,
                lease_expires_at = NULL, worker_id = NULL, claimed_at = NULL,
                finished_at = CASE WHEN $2 IN ('done', 'failed', 'cancelled') THEN now() ELSE NULL END,
                error = CASE WHEN $2 = 'todo' THEN NULL ELSE error END,
                attempts = CASE WHEN $2 = 'todo' AND status IN ('done', 'failed', 'cancelled') THEN 0 ELSE attempts END,
                schema_retries = CASE WHEN $2 = 'todo' THEN 0 ELSE schema_retries END,
                -- a cancel drops the calls waiting for approval, and so does reopening a finished
                -- ticket; a comment on a waiting ticket keeps them (the next claim waits again)
                approvals = CASE WHEN $2 = 'cancelled' OR status IN ('done', 'failed', 'cancelled')
                            THEN NULL ELSE approvals END,
                approval_deadline_at = CASE WHEN $2 = 'cancelled' OR status IN ('done', 'failed', 'cancelled')
                            THEN NULL ELSE approval_deadline_at END,
                waiting_for = NULL, blocked_scope = NULL, blocked_name = NULL, blocked_period = NULL,
                updated_at = now()
            WHERE id = $1 RETURNING *)
         SELECT {TICKET_COLUMNS} FROM t"
    );
    let row: TicketRow = sqlx::query_as(&sql).bind(id).bind(to.as_str()).fetch_one(conn).await?;
    Ok(row.into())
}

/// The `SET` clauses that add a usage to a ticket's counters, from parameters `$2` to `$8` and
/// its cost, `$10` and `$11` (`$9` is left to the statement)
/// (bound by `bind_usage`; `$1` is the ticket's id): one list of the counters for every
/// statement that adds to them.
macro_rules! usage_added {
    () => {
        "input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
         cache_read_tokens = cache_read_tokens + $4, cache_creation_tokens = cache_creation_tokens + $5,
         requests = requests + $6, tool_calls = tool_calls + $7, usage_estimated = usage_estimated OR $8,
         cost_usd = cost_usd + $10::numeric, unpriced = unpriced OR $11"
    };
}
pub(super) use usage_added;

/// Binds `usage` as `usage_added!` reads it, after the ticket's id.
pub(super) fn bind_usage<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    usage: &TicketUsage,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(usage.input_tokens)
        .bind(usage.output_tokens)
        .bind(usage.cache_read_tokens)
        .bind(usage.cache_creation_tokens)
        .bind(usage.requests)
        .bind(usage.tool_calls)
        .bind(usage.estimated)
}

/// Binds the cost of `usage` as `usage_added!` reads it (`$10`, `$11`), after `$9`.
pub(super) fn bind_cost<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    usage: &TicketUsage,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query.bind(usage.cost.to_string()).bind(usage.unpriced)
}

/// Adds what a worker's requests used to a ticket's usage, outside any claim (see
/// `Step::keep_failed_requests`).
pub async fn add_usage(pool: &PgPool, id: Uuid, usage: &TicketUsage) -> Result<(), sqlx::Error> {
    // `$9` is unused here: the cost's parameters follow it.
    let sql = concat!(
        "UPDATE tickets SET ",
        usage_added!(),
        " WHERE id = $1 AND $9::int8 IS NOT NULL"
    );
    let query = bind_usage(sqlx::query(sql).bind(id), usage).bind(0i64);
    bind_cost(query, usage).execute(pool).await?;
    Ok(())
}

/// Wakes idle workers (any process) after a ticket became claimable; sent at commit.
pub async fn notify_work(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(super::WORK_CHANNEL)
        .execute(conn)
        .await?;
    Ok(())
}

/// Tells the process running a ticket to stop it (cancel); sent at commit.
pub async fn notify_cancel(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(super::CONTROL_CHANNEL)
        .bind(format!("cancel:{id}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Sets (or, with an empty list, clears) the calls of a ticket that wait for a person's answer.
/// Callers hold the ticket's row lock (a fenced transaction, or the answer's lock), so the list
/// is never written from two places at once.
pub async fn set_approvals(conn: &mut PgConnection, id: Uuid, approvals: &[Approval]) -> Result<(), sqlx::Error> {
    let value = (!approvals.is_empty()).then_some(sqlx::types::Json(approvals));
    // The earliest deadline of a call still unanswered: what the deadline check looks for.
    let deadline = approvals
        .iter()
        .filter(|a| a.decision.is_none())
        .filter_map(|a| a.expires_at)
        .min();
    sqlx::query("UPDATE tickets SET approvals = $2, approval_deadline_at = $3 WHERE id = $1")
        .bind(id)
        .bind(value)
        .bind(deadline)
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores why a ticket failed (beside `set_status`, in the same transaction).
pub async fn set_error(conn: &mut PgConnection, id: Uuid, error: &TicketError) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE tickets SET error = $2 WHERE id = $1")
        .bind(id)
        .bind(sqlx::types::Json(error))
        .execute(conn)
        .await?;
    Ok(())
}

/// The calls of a ticket waiting for (or with) a person's answer, as stored now.
pub async fn approvals(conn: &mut PgConnection, id: Uuid) -> Result<Vec<Approval>, sqlx::Error> {
    let value: Option<sqlx::types::Json<Vec<Approval>>> =
        sqlx::query_scalar("SELECT approvals FROM tickets WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?
            .flatten();
    Ok(value.map(|v| v.0).unwrap_or_default())
}

/// The tickets of a list's rows, with each one's `number` (what the list's cursor is made of).
fn tickets_and_numbers(rows: &[sqlx::postgres::PgRow]) -> Result<(Vec<Ticket>, Vec<i64>), sqlx::Error> {
    use sqlx::{FromRow, Row};
    let mut tickets = Vec::with_capacity(rows.len());
    let mut numbers = Vec::with_capacity(rows.len());
    for row in rows {
        numbers.push(row.try_get::<i64, _>("number")?);
        tickets.push(Ticket::from(TicketRow::from_row(row)?));
    }
    Ok((tickets, numbers))
}

/// The tickets an experiment's filter picks: the project's own (not replays), newest first.
pub async fn for_experiment<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    label: Option<&str>,
    status: Option<Status>,
    since: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<Ticket>, sqlx::Error> {
    let rows: Vec<TicketRow> = sqlx::query_as(&format!(
        "SELECT {TICKET_COLUMNS} FROM tickets t
         WHERE t.project_id = $1 AND t.replay IS NULL AND ($2::text IS NULL OR $2 = ANY(t.labels))
           AND ($3::text IS NULL OR t.status = $3) AND ($4::timestamptz IS NULL OR t.created_at >= $4)
         ORDER BY t.number DESC LIMIT $5"
    ))
    .bind(project)
    .bind(label)
    .bind(status.map(Status::as_str))
    .bind(since)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Ticket::from).collect())
}
