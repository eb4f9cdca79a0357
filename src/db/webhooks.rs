//! Webhook endpoints, their delivery state (a cursor in the global event stream and a lease) and
//! their delivery log.
//!
//! Safety of the writes: an endpoint's delivery state is written only by the process holding its
//! lease, each statement matching `lease_owner`; zero rows means the lease was lost and the caller
//! stops (the new holder starts again from the stored cursor, so an event is at worst sent twice,
//! never skipped). API writes touch only the settings, except enabling, which moves the cursor.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::events::{self, GlobalCursor};
use crate::domain::webhook::{Delivery, Webhook};
use crate::domain::ProjectId;

/// How many log entries an endpoint keeps (older ones are pruned as new ones come).
pub const KEPT_DELIVERIES: i64 = 1000;

const WEBHOOK_COLUMNS: &str = "id, url, events, labels, description, disabled, disabled_reason, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct WebhookRow {
    id: Uuid,
    url: String,
    events: Vec<String>,
    labels: Vec<String>,
    description: Option<String>,
    disabled: bool,
    disabled_reason: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<WebhookRow> for Webhook {
    fn from(r: WebhookRow) -> Webhook {
        Webhook {
            id: r.id,
            url: r.url,
            events: r.events,
            labels: r.labels,
            description: r.description,
            disabled: r.disabled,
            disabled_reason: r.disabled_reason,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A new endpoint's settings.
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
    pub labels: Vec<String>,
    pub description: Option<String>,
    pub secret: String,
    /// Created stopped: no deliveries until a PATCH enables it (from the events of then on).
    pub disabled: bool,
}

/// Creates an endpoint whose cursor is the log's head: it receives the events from now on.
pub async fn insert(pool: &PgPool, project: ProjectId, new: &NewWebhook) -> Result<Webhook, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let head = events::head(&mut conn).await?;
    let row: WebhookRow = sqlx::query_as(&format!(
        "INSERT INTO webhooks (id, url, events, labels, description, secret, cursor_txid, cursor_id, disabled, project_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7::text::xid8, $8, $9, $10) RETURNING {WEBHOOK_COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(&new.url)
    .bind(&new.events)
    .bind(&new.labels)
    .bind(&new.description)
    .bind(&new.secret)
    .bind(head.txid.to_string())
    .bind(head.id)
    .bind(new.disabled)
    .bind(project)
    .fetch_one(&mut *conn)
    .await?;
    Ok(row.into())
}

pub async fn get<'e>(db: impl PgExecutor<'e>, project: ProjectId, id: Uuid) -> Result<Option<Webhook>, sqlx::Error> {
    let row: Option<WebhookRow> = sqlx::query_as(&format!(
        "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $2 AND id = $1"
    ))
    .bind(id)
    .bind(project)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Webhook::from))
}

/// Endpoints after `after` by id (creation order), and whether more follow.
pub async fn list(
    pool: &PgPool,
    project: ProjectId,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Webhook>, bool), sqlx::Error> {
    let rows: Vec<WebhookRow> = sqlx::query_as(&format!(
        "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $3 AND ($1::uuid IS NULL OR id > $1)
         ORDER BY id LIMIT $2"
    ))
    .bind(after)
    .bind(limit + 1)
    .bind(project)
    .fetch_all(pool)
    .await?;
    let (rows, more) = super::page_of(rows, limit);
    Ok((rows.into_iter().map(Webhook::from).collect(), more))
}

/// The settings a `PATCH` may change; None leaves one as it is.
#[derive(Default)]
pub struct WebhookPatch {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub labels: Option<Vec<String>>,
    pub description: Option<Option<String>>,
    pub disabled: Option<bool>,
}

/// Applies a patch; None when there is no such endpoint. Enabling a disabled endpoint moves its
/// cursor to the log's head (it receives the events from then on) and clears its retry state.
pub async fn update(
    pool: &PgPool,
    project: ProjectId,
    id: Uuid,
    patch: &WebhookPatch,
) -> Result<Option<Webhook>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    // The head is read first, in its own statement (as `events::head` requires of any read).
    let head = events::head(&mut conn).await?;
    let row: Option<WebhookRow> = sqlx::query_as(&format!(
        "UPDATE webhooks w SET
            url = coalesce($2, w.url),
            events = coalesce($3, w.events),
            labels = coalesce($4, w.labels),
            description = CASE WHEN $5 THEN $6 ELSE w.description END,
            disabled = coalesce($7, w.disabled),
            disabled_reason = CASE WHEN $7 IS NULL THEN w.disabled_reason ELSE NULL END,
            cursor_txid = CASE WHEN w.disabled AND $7 = false THEN $8::text::xid8 ELSE w.cursor_txid END,
            cursor_id = CASE WHEN w.disabled AND $7 = false THEN $9 ELSE w.cursor_id END,
            attempts = CASE WHEN w.disabled AND $7 = false THEN 0 ELSE w.attempts END,
            next_attempt_at = CASE WHEN w.disabled AND $7 = false THEN NULL ELSE w.next_attempt_at END,
            updated_at = now()
         WHERE id = $1 AND project_id = $10 RETURNING {WEBHOOK_COLUMNS}"
    ))
    .bind(id)
    .bind(&patch.url)
    .bind(&patch.events)
    .bind(&patch.labels)
    .bind(patch.description.is_some())
    .bind(patch.description.clone().flatten())
    .bind(patch.disabled)
    .bind(head.txid.to_string())
    .bind(head.id)
    .bind(project)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(Webhook::from))
}

pub async fn delete(pool: &PgPool, project: ProjectId, id: Uuid) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM webhooks WHERE project_id = $2 AND id = $1")
        .bind(id)
        .bind(project)
        .execute(pool)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

pub async fn secret(pool: &PgPool, id: Uuid) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT secret FROM webhooks WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    id: i64,
    event_id: String,
    kind: String,
    attempt: i32,
    status_code: Option<i32>,
    error: Option<String>,
    duration_ms: i64,
    at: DateTime<Utc>,
}

/// An endpoint's log, newest first, before the entry `before`: `(entry id, delivery)`, and
/// whether more follow.
pub async fn deliveries(
    pool: &PgPool,
    webhook_id: Uuid,
    before: Option<i64>,
    limit: i64,
) -> Result<(Vec<(i64, Delivery)>, bool), sqlx::Error> {
    let rows: Vec<DeliveryRow> = sqlx::query_as(
        "SELECT id, event_id, kind, attempt, status_code, error, duration_ms, at FROM webhook_deliveries
         WHERE webhook_id = $1 AND ($2::int8 IS NULL OR id < $2) ORDER BY id DESC LIMIT $3",
    )
    .bind(webhook_id)
    .bind(before)
    .bind(limit + 1)
    .fetch_all(pool)
    .await?;
    let (rows, more) = super::page_of(rows, limit);
    let items = rows
        .into_iter()
        .map(|r| {
            let delivery = Delivery {
                event_id: r.event_id,
                kind: r.kind,
                attempt: r.attempt,
                status_code: r.status_code,
                error: r.error,
                duration_ms: r.duration_ms,
                at: r.at,
            };
            (r.id, delivery)
        })
        .collect();
    Ok((items, more))
}

/// Logs a delivery outside any lease (the test event, which has no place in the stream).
pub async fn log_unfenced(pool: &PgPool, webhook_id: Uuid, delivery: &Delivery) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, kind, attempt, status_code, error, duration_ms, at)
         SELECT id, $2, $3, $4, $5, $6, $7, $8 FROM webhooks WHERE id = $1",
    )
    .bind(webhook_id)
    .bind(&delivery.event_id)
    .bind(&delivery.kind)
    .bind(delivery.attempt)
    .bind(delivery.status_code)
    .bind(&delivery.error)
    .bind(delivery.duration_ms)
    .bind(delivery.at)
    .execute(pool)
    .await?;
    Ok(())
}

/// What the holder of an endpoint's lease delivers with: its settings and delivery state.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EndpointState {
    pub id: Uuid,
    /// Only this project's events are delivered.
    pub project_id: ProjectId,
    pub url: String,
    pub events: Vec<String>,
    pub labels: Vec<String>,
    pub secret: String,
    pub disabled: bool,
    cursor_txid: String,
    cursor_id: i64,
    /// Failed attempts of the first event after the cursor.
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

impl EndpointState {
    pub fn cursor(&self) -> GlobalCursor {
        GlobalCursor {
            txid: self.cursor_txid.parse().unwrap_or(0),
            id: self.cursor_id,
        }
    }
}

fn interval(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Takes the leases of up to `limit` enabled endpoints that nobody holds (or whose holder's lease
/// expired); returns their ids. `SKIP LOCKED`: processes claiming at once take different ones.
pub async fn claim(pool: &PgPool, owner: Uuid, lease: Duration, limit: i64) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE webhooks SET lease_owner = $1, lease_until = now() + make_interval(secs => $2)
         WHERE id IN (
            SELECT id FROM webhooks
            WHERE NOT disabled AND (lease_owner IS NULL OR lease_until < now())
            ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED)
         RETURNING id",
    )
    .bind(owner)
    .bind(interval(lease))
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Extends a held lease and reads the endpoint's current settings and state; None when the lease
/// is no longer this owner's (or the endpoint is gone).
pub async fn renew(
    pool: &PgPool,
    id: Uuid,
    owner: Uuid,
    lease: Duration,
) -> Result<Option<EndpointState>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE webhooks SET lease_until = now() + make_interval(secs => $3)
         WHERE id = $1 AND lease_owner = $2
         RETURNING id, project_id, url, events, labels, secret, disabled, cursor_txid::text AS cursor_txid, cursor_id,
                   attempts, next_attempt_at",
    )
    .bind(id)
    .bind(owner)
    .bind(interval(lease))
    .fetch_optional(pool)
    .await
}

/// Gives a lease up (on shutdown, or when the endpoint was disabled), so another process may take
/// the endpoint at once.
pub async fn release(pool: &PgPool, id: Uuid, owner: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE webhooks SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2")
        .bind(id)
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

/// Gives up every lease of `owner`.
pub async fn release_all(pool: &PgPool, owner: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE webhooks SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = $1")
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

/// Moves the cursor past events the endpoint does not take. False: the lease was lost.
pub async fn skip_to(pool: &PgPool, id: Uuid, owner: Uuid, cursor: GlobalCursor) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query(
        "UPDATE webhooks SET cursor_txid = $3::text::xid8, cursor_id = $4, attempts = 0, next_attempt_at = NULL
         WHERE id = $1 AND lease_owner = $2",
    )
    .bind(id)
    .bind(owner)
    .bind(cursor.txid.to_string())
    .bind(cursor.id)
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() > 0)
}

/// What an attempt changes in the endpoint's state, beside its log entry.
pub struct AttemptOutcome {
    /// The cursor past the event (answered or given up); None: it stays (to be retried).
    pub cursor: Option<GlobalCursor>,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Disables the endpoint with this reason (and gives its lease up).
    pub disable: Option<&'static str>,
}

/// Records attempts: their log entries and the endpoint's state after the last of them, in one
/// statement (all or nothing). False: the lease was lost, and nothing was written.
pub async fn record_attempts(
    pool: &PgPool,
    id: Uuid,
    owner: Uuid,
    outcome: &AttemptOutcome,
    deliveries: &[Delivery],
) -> Result<bool, sqlx::Error> {
    let column = |f: fn(&Delivery) -> String| deliveries.iter().map(f).collect::<Vec<_>>();
    let written: Option<i32> = sqlx::query_scalar(
        "WITH w AS (
            UPDATE webhooks SET
                cursor_txid = coalesce($3::text::xid8, cursor_txid),
                cursor_id = coalesce($4, cursor_id),
                attempts = $5,
                next_attempt_at = $6,
                disabled = disabled OR $7::text IS NOT NULL,
                disabled_reason = coalesce($7::text, disabled_reason),
                updated_at = CASE WHEN $7::text IS NULL THEN updated_at ELSE now() END,
                lease_owner = CASE WHEN $7::text IS NULL THEN lease_owner END,
                lease_until = CASE WHEN $7::text IS NULL THEN lease_until END
            WHERE id = $1 AND lease_owner = $2
            RETURNING id),
         ins AS (
            INSERT INTO webhook_deliveries (webhook_id, event_id, kind, attempt, status_code, error, duration_ms, at)
            SELECT w.id, d.event_id, d.kind, d.attempt, d.status_code, d.error, d.duration_ms, d.at
            FROM w, unnest($8::text[], $9::text[], $10::int4[], $11::int4[], $12::text[], $13::int8[],
                           $14::timestamptz[]) WITH ORDINALITY
                AS d(event_id, kind, attempt, status_code, error, duration_ms, at, ord)
            ORDER BY d.ord)
         SELECT 1 FROM w",
    )
    .bind(id)
    .bind(owner)
    .bind(outcome.cursor.map(|c| c.txid.to_string()))
    .bind(outcome.cursor.map(|c| c.id))
    .bind(outcome.attempts)
    .bind(outcome.next_attempt_at)
    .bind(outcome.disable)
    .bind(column(|d| d.event_id.clone()))
    .bind(column(|d| d.kind.clone()))
    .bind(deliveries.iter().map(|d| d.attempt).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.status_code).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.error.clone()).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.duration_ms).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.at).collect::<Vec<_>>())
    .fetch_optional(pool)
    .await?;
    Ok(written.is_some())
}

/// Keeps an endpoint's newest `KEPT_DELIVERIES` log entries.
pub async fn prune_deliveries(pool: &PgPool, webhook_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND id <= (
            SELECT id FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)",
    )
    .bind(webhook_id)
    .bind(KEPT_DELIVERIES)
    .execute(pool)
    .await?;
    Ok(())
}
