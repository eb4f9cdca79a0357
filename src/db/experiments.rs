//! Experiments and their replays and judgements (`domain::experiment`). The figures are read from
//! the tickets' own rows here; what they mean is `transitions::experiments`'s.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::domain::experiment::{Arm, ExperimentStatus, JudgeSpec};
use crate::domain::ProjectId;

/// An experiment's own row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ExperimentRow {
    pub id: Uuid,
    pub project_id: ProjectId,
    pub name: String,
    pub status: String,
    pub tools: String,
    pub arms: Json<Vec<Arm>>,
    pub judge: Option<Json<JudgeSpec>>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl ExperimentRow {
    pub fn status(&self) -> ExperimentStatus {
        ExperimentStatus::parse(&self.status).unwrap_or(ExperimentStatus::Running)
    }
}

const COLUMNS: &str = "id, project_id, name, status, tools, arms, judge, created_at, finished_at";

/// A replay of an experiment, as its ticket is now (None where retention deleted it).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct RunRow {
    pub position: i32,
    pub original_id: Uuid,
    pub original_key: String,
    pub arm: String,
    pub ticket_id: Uuid,
    pub key: Option<String>,
    pub status: Option<String>,
    pub task: Option<Value>,
    pub result: Option<Value>,
    pub schema: Option<Value>,
    pub cost_usd: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub duration_ms: Option<i64>,
}

/// A judgement, with its judge's ticket as it is now.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JudgementRow {
    pub original_id: Uuid,
    pub ticket_id: Option<Uuid>,
    pub shown: Json<std::collections::BTreeMap<String, String>>,
    pub status: Option<String>,
    pub result: Option<Value>,
    pub cost_usd: Option<String>,
}

pub async fn insert(
    conn: &mut PgConnection,
    project: ProjectId,
    id: Uuid,
    name: &str,
    tools: &str,
    arms: &[Arm],
    judge: Option<&JudgeSpec>,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO experiments (id, project_id, name, tools, arms, judge) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(id)
        .bind(project)
        .bind(name)
        .bind(tools)
        .bind(Json(arms))
        .bind(judge.map(Json))
        .execute(conn)
        .await?;
    Ok(())
}

/// One replay of the experiment (in the transaction that inserts its ticket).
pub async fn insert_run(
    conn: &mut PgConnection,
    experiment: Uuid,
    position: i32,
    (original_id, original_key): (Uuid, &str),
    arm: &str,
    ticket_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO experiment_runs (experiment_id, position, original_id, original_key, arm, ticket_id)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(experiment)
    .bind(position)
    .bind(original_id)
    .bind(original_key)
    .bind(arm)
    .bind(ticket_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    id: Uuid,
) -> Result<Option<ExperimentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM experiments WHERE project_id = $1 AND id = $2"
    ))
    .bind(project)
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Locks the experiment's row for the caller's transaction.
pub async fn lock(conn: &mut PgConnection, project: ProjectId, id: Uuid) -> Result<Option<ExperimentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM experiments WHERE project_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(project)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The project's experiments, newest first.
pub async fn list<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    limit: i64,
) -> Result<Vec<ExperimentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM experiments WHERE project_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
    ))
    .bind(project)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Running experiments, oldest first, each locked for the caller's transaction (skipping those
/// another process is advancing).
pub async fn lock_running(conn: &mut PgConnection, limit: i64) -> Result<Vec<ExperimentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM experiments WHERE status = 'running' ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED"
    ))
    .bind(limit)
    .fetch_all(conn)
    .await
}

pub async fn runs<'e>(db: impl PgExecutor<'e>, experiment: Uuid) -> Result<Vec<RunRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.position, r.original_id, r.original_key, r.arm, r.ticket_id, t.key, t.status, t.task, t.result,
                t.schema, t.cost_usd::text AS cost_usd, t.input_tokens, t.output_tokens,
                CASE WHEN t.status IN ('done', 'failed') AND t.started_at IS NOT NULL
                     THEN (extract(epoch FROM t.finished_at - t.started_at) * 1000)::bigint END AS duration_ms
         FROM experiment_runs r LEFT JOIN tickets t ON t.id = r.ticket_id
         WHERE r.experiment_id = $1 ORDER BY r.position, r.arm",
    )
    .bind(experiment)
    .fetch_all(db)
    .await
}

pub async fn judgements<'e>(db: impl PgExecutor<'e>, experiment: Uuid) -> Result<Vec<JudgementRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT j.original_id, j.ticket_id, j.shown, t.status, t.result, t.cost_usd::text AS cost_usd
         FROM experiment_judgements j LEFT JOIN tickets t ON t.id = j.ticket_id
         WHERE j.experiment_id = $1",
    )
    .bind(experiment)
    .fetch_all(db)
    .await
}

pub async fn insert_judgement(
    conn: &mut PgConnection,
    experiment: Uuid,
    original_id: Uuid,
    ticket_id: Option<Uuid>,
    shown: &std::collections::BTreeMap<String, String>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO experiment_judgements (experiment_id, original_id, ticket_id, shown) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING",
    )
    .bind(experiment)
    .bind(original_id)
    .bind(ticket_id)
    .bind(Json(shown))
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends a running experiment (`done` or `cancelled`); false when it was not running.
pub async fn finish(conn: &mut PgConnection, id: Uuid, status: ExperimentStatus) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query("UPDATE experiments SET status = $2, finished_at = now() WHERE id = $1 AND status = 'running'")
            .bind(id)
            .bind(status.as_str())
            .execute(conn)
            .await?;
    Ok(done.rows_affected() == 1)
}

/// The experiment's replays and judges that have not finished.
pub async fn open_tickets(conn: &mut PgConnection, id: Uuid) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT t.id FROM tickets t
         WHERE t.id IN (SELECT ticket_id FROM experiment_runs WHERE experiment_id = $1
                        UNION SELECT ticket_id FROM experiment_judgements WHERE experiment_id = $1 AND ticket_id IS NOT NULL)
           AND t.status IN ('todo', 'in_progress', 'waiting')
         ORDER BY t.id",
    )
    .bind(id)
    .fetch_all(conn)
    .await
}

pub async fn delete(conn: &mut PgConnection, project: ProjectId, id: Uuid) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM experiments WHERE project_id = $1 AND id = $2")
        .bind(project)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}
