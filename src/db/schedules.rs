//! Schedules and their firings.
//!
//! Safety of the writes: a fire time is handled in one transaction that holds the schedule's row
//! lock, inserts the fire time's `schedule_firings` row (unique per schedule and fire time), the
//! ticket with its `ticket.created` event, and moves `next_run_at` on; a crash anywhere before the
//! commit leaves nothing of it, and a second scheduler can never insert the same fire time again.
//! API writes change the settings and recompute `next_run_at` under the same row lock.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::domain::schedule::{CatchUp, Overlap, Schedule, TicketTemplate};
use crate::domain::{ProjectId, Status, Ticket};

/// The channel a schedule change is announced on: every scheduler looks at `next_run_at` again.
pub const SCHEDULES_CHANNEL: &str = "agentdesk_schedules";

const COLUMNS: &str =
    "s.id, s.project_id, s.name, s.cron, s.timezone, s.ticket, s.enabled, s.start_at, s.end_at, s.overlap, \
     s.catch_up, s.catch_up_window_secs, s.next_run_at, s.last_run_at, \
     (SELECT t.key FROM tickets t WHERE t.id = s.last_ticket_id) AS last_ticket, s.created_at, s.updated_at";

#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: Uuid,
    project_id: ProjectId,
    name: Option<String>,
    cron: String,
    timezone: String,
    ticket: Value,
    enabled: bool,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
    overlap: String,
    catch_up: String,
    catch_up_window_secs: i64,
    next_run_at: Option<DateTime<Utc>>,
    last_run_at: Option<DateTime<Utc>>,
    last_ticket: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = sqlx::Error;

    fn try_from(r: ScheduleRow) -> Result<Schedule, sqlx::Error> {
        let ticket: TicketTemplate = serde_json::from_value(r.ticket).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        Ok(Schedule {
            id: r.id,
            project: r.project_id,
            name: r.name,
            cron: r.cron,
            timezone: r.timezone,
            ticket,
            enabled: r.enabled,
            start_at: r.start_at,
            end_at: r.end_at,
            overlap: Overlap::parse(&r.overlap).unwrap_or_default(),
            catch_up: CatchUp::parse(&r.catch_up).unwrap_or_default(),
            catch_up_window_secs: r.catch_up_window_secs,
            next_run_at: r.next_run_at,
            upcoming: vec![],
            last_run_at: r.last_run_at,
            last_ticket: r.last_ticket,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// Whether an error is a unique violation (a name already taken).
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error().and_then(|e| e.code()).as_deref() == Some("23505")
}

/// Tells every scheduler to look at `next_run_at` again (delivered at the caller's commit).
pub async fn notify_changed(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(SCHEDULES_CHANNEL)
        .execute(conn)
        .await?;
    Ok(())
}

/// Inserts a schedule (`s.id` new; `upcoming`, `last_*` ignored) and announces it.
pub async fn insert(pool: &PgPool, s: &Schedule) -> Result<Schedule, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let ticket = serde_json::to_value(&s.ticket).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let sql = format!(
        "WITH s AS (
            INSERT INTO schedules (id, name, cron, timezone, ticket, enabled, start_at, end_at, overlap, catch_up,
                                   catch_up_window_secs, next_run_at, project_id)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING *)
         SELECT {COLUMNS} FROM s"
    );
    let row: ScheduleRow = sqlx::query_as(&sql)
        .bind(s.id)
        .bind(&s.name)
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(ticket)
        .bind(s.enabled)
        .bind(s.start_at)
        .bind(s.end_at)
        .bind(s.overlap.as_str())
        .bind(s.catch_up.as_str())
        .bind(s.catch_up_window_secs)
        .bind(s.next_run_at)
        .bind(s.project)
        .fetch_one(&mut *tx)
        .await?;
    notify_changed(&mut tx).await?;
    tx.commit().await?;
    row.try_into()
}

/// A schedule by id or name.
pub async fn find<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    reference: &str,
) -> Result<Option<Schedule>, sqlx::Error> {
    let id = Uuid::parse_str(reference).ok();
    let sql = format!("SELECT {COLUMNS} FROM schedules s WHERE s.project_id = $3 AND (s.id = $1 OR s.name = $2)");
    let row: Option<ScheduleRow> = sqlx::query_as(&sql)
        .bind(id)
        .bind(reference)
        .bind(project)
        .fetch_optional(db)
        .await?;
    row.map(Schedule::try_from).transpose()
}

/// Locks a schedule (by id or name) for this transaction.
pub async fn lock(
    conn: &mut PgConnection,
    project: ProjectId,
    reference: &str,
) -> Result<Option<Schedule>, sqlx::Error> {
    let id = Uuid::parse_str(reference).ok();
    let sql =
        format!("SELECT {COLUMNS} FROM schedules s WHERE s.project_id = $3 AND (s.id = $1 OR s.name = $2) FOR UPDATE");
    let row: Option<ScheduleRow> = sqlx::query_as(&sql)
        .bind(id)
        .bind(reference)
        .bind(project)
        .fetch_optional(conn)
        .await?;
    row.map(Schedule::try_from).transpose()
}

/// Schedules in creation order after `after` (an id); and whether more follow.
pub async fn list(
    pool: &PgPool,
    project: ProjectId,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Schedule>, bool), sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules s WHERE s.project_id = $3 AND ($1::uuid IS NULL OR s.id > $1) ORDER BY s.id LIMIT $2"
    );
    let rows: Vec<ScheduleRow> = sqlx::query_as(&sql)
        .bind(after)
        .bind(limit + 1)
        .bind(project)
        .fetch_all(pool)
        .await?;
    let (rows, more) = super::page_of(rows, limit);
    let items = rows.into_iter().map(Schedule::try_from).collect::<Result<_, _>>()?;
    Ok((items, more))
}

/// Writes a locked schedule's settings and `next_run_at` (in the caller's transaction) and
/// announces the change at its commit.
pub async fn update(conn: &mut PgConnection, s: &Schedule) -> Result<Schedule, sqlx::Error> {
    let ticket = serde_json::to_value(&s.ticket).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let sql = format!(
        "WITH s AS (
            UPDATE schedules SET name = $2, cron = $3, timezone = $4, ticket = $5, enabled = $6, start_at = $7,
                end_at = $8, overlap = $9, catch_up = $10, catch_up_window_secs = $11, next_run_at = $12,
                updated_at = now()
            WHERE id = $1 RETURNING *)
         SELECT {COLUMNS} FROM s"
    );
    let row: ScheduleRow = sqlx::query_as(&sql)
        .bind(s.id)
        .bind(&s.name)
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(ticket)
        .bind(s.enabled)
        .bind(s.start_at)
        .bind(s.end_at)
        .bind(s.overlap.as_str())
        .bind(s.catch_up.as_str())
        .bind(s.catch_up_window_secs)
        .bind(s.next_run_at)
        .fetch_one(&mut *conn)
        .await?;
    notify_changed(conn).await?;
    row.try_into()
}

/// Deletes a schedule (its tickets stay). False when there is none.
pub async fn delete(pool: &PgPool, project: ProjectId, reference: &str) -> Result<bool, sqlx::Error> {
    let id = Uuid::parse_str(reference).ok();
    let done = sqlx::query("DELETE FROM schedules WHERE project_id = $3 AND (id = $1 OR name = $2)")
        .bind(id)
        .bind(reference)
        .bind(project)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The tickets a schedule created, newest first, before ticket number `before`; with each one's
/// number (the cursor) and whether more follow.
pub async fn tickets(
    pool: &PgPool,
    schedule_id: Uuid,
    before: Option<i64>,
    limit: i64,
) -> Result<(Vec<(i64, Ticket)>, bool), sqlx::Error> {
    let sql = format!(
        "SELECT t.number, {} FROM schedule_firings f JOIN tickets t ON t.id = f.ticket_id
         WHERE f.schedule_id = $1 AND ($2::bigint IS NULL OR t.number < $2)
         ORDER BY t.number DESC LIMIT $3",
        super::tickets::TICKET_COLUMNS
    );
    let rows: Vec<NumberedTicket> = sqlx::query_as(&sql)
        .bind(schedule_id)
        .bind(before)
        .bind(limit + 1)
        .fetch_all(pool)
        .await?;
    let (rows, more) = super::page_of(rows, limit);
    let items = rows.into_iter().map(|r| (r.number, r.ticket.into())).collect();
    Ok((items, more))
}

#[derive(sqlx::FromRow)]
struct NumberedTicket {
    number: i64,
    #[sqlx(flatten)]
    ticket: super::tickets::TicketRow,
}

/// The earliest `next_run_at` of the enabled schedules, and the database's clock now (the one
/// clock every scheduler goes by). An index-only read.
pub async fn earliest(pool: &PgPool) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT min(next_run_at) FROM schedules WHERE enabled AND next_run_at IS NOT NULL), clock_timestamp()",
    )
    .fetch_one(pool)
    .await
}

/// Locks one enabled schedule whose `next_run_at` has come, skipping those another scheduler is
/// firing; with the database's clock.
pub async fn lock_due(conn: &mut PgConnection) -> Result<Option<(Schedule, DateTime<Utc>)>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS}, clock_timestamp() AS now FROM schedules s
         WHERE s.enabled AND s.next_run_at <= clock_timestamp()
         ORDER BY s.next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED"
    );
    let row: Option<DueRow> = sqlx::query_as(&sql).fetch_optional(conn).await?;
    row.map(|r| Ok((Schedule::try_from(r.schedule)?, r.now))).transpose()
}

#[derive(sqlx::FromRow)]
struct DueRow {
    #[sqlx(flatten)]
    schedule: ScheduleRow,
    now: DateTime<Utc>,
}

/// Takes a fire time's slot: false when it was already taken (another scheduler fired it; that
/// insert waits for the other transaction and then finds the row).
pub async fn claim_fire_time(
    conn: &mut PgConnection,
    schedule_id: Uuid,
    scheduled_for: DateTime<Utc>,
    outcome: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO schedule_firings (schedule_id, scheduled_for, outcome) VALUES ($1, $2, $3)
         ON CONFLICT (schedule_id, scheduled_for) WHERE NOT manual DO NOTHING RETURNING id",
    )
    .bind(schedule_id)
    .bind(scheduled_for)
    .bind(outcome)
    .fetch_optional(conn)
    .await
}

/// Records a manual run ("run now"): any number of these may share a time.
pub async fn insert_manual(conn: &mut PgConnection, schedule_id: Uuid, at: DateTime<Utc>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO schedule_firings (schedule_id, scheduled_for, manual, outcome) VALUES ($1, $2, true, 'manual')
         RETURNING id",
    )
    .bind(schedule_id)
    .bind(at)
    .fetch_one(conn)
    .await
}

/// Links a firing to the ticket it made and makes that the schedule's last ticket.
pub async fn set_ticket(
    conn: &mut PgConnection,
    firing: i64,
    schedule_id: Uuid,
    ticket_id: Uuid,
    scheduled_for: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH f AS (UPDATE schedule_firings SET ticket_id = $3 WHERE id = $1)
         UPDATE schedules SET last_ticket_id = $3, last_run_at = $4 WHERE id = $2",
    )
    .bind(firing)
    .bind(schedule_id)
    .bind(ticket_id)
    .bind(scheduled_for)
    .execute(conn)
    .await?;
    Ok(())
}

/// Moves a locked schedule's `next_run_at` on (without touching `updated_at`: the settings did
/// not change).
pub async fn advance(
    conn: &mut PgConnection,
    schedule_id: Uuid,
    next: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE schedules SET next_run_at = $2 WHERE id = $1")
        .bind(schedule_id)
        .bind(next)
        .execute(conn)
        .await?;
    Ok(())
}

/// The schedule's unfinished tickets (todo, in_progress, waiting), newest first.
pub async fn open_tickets(conn: &mut PgConnection, schedule_id: Uuid) -> Result<Vec<(Uuid, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT t.id, t.key FROM schedule_firings f JOIN tickets t ON t.id = f.ticket_id
         WHERE f.schedule_id = $1 AND t.status IN ('todo', 'in_progress', 'waiting')
         ORDER BY t.number DESC",
    )
    .bind(schedule_id)
    .fetch_all(conn)
    .await
}

/// The result of the schedule's last done ticket (the one finished last), if any.
pub async fn previous_result(conn: &mut PgConnection, schedule_id: Uuid) -> Result<Option<Value>, sqlx::Error> {
    let row: Option<(Option<Value>,)> = sqlx::query_as(
        "SELECT t.result FROM schedule_firings f JOIN tickets t ON t.id = f.ticket_id
         WHERE f.schedule_id = $1 AND t.status = $2
         ORDER BY t.finished_at DESC NULLS LAST, t.number DESC LIMIT 1",
    )
    .bind(schedule_id)
    .bind(Status::Done.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(r,)| r))
}

/// Schedules by state, for the `schedules` gauge: (enabled, paused).
pub async fn count(pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as("SELECT count(*) FILTER (WHERE enabled), count(*) FILTER (WHERE NOT enabled) FROM schedules")
        .fetch_one(pool)
        .await
}
