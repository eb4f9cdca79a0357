//! HTTP tools defined through the API. Header values are stored as written (templates), never
//! expanded.

use std::collections::BTreeMap;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::tool::OnTimeout;
use crate::domain::{HttpMethod, HttpToolDef, ProjectId};

const COLUMNS: &str =
    "name, description, input_schema, url, method, headers, timeout_ms, requires_approval, created_at, updated_at, \
     approval_timeout_secs, on_timeout";

#[derive(sqlx::FromRow)]
struct Row {
    name: String,
    description: String,
    input_schema: Value,
    url: String,
    method: String,
    headers: Json<BTreeMap<String, String>>,
    timeout_ms: i64,
    requires_approval: bool,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    approval_timeout_secs: Option<i32>,
    on_timeout: Option<String>,
}

impl From<Row> for HttpToolDef {
    fn from(r: Row) -> HttpToolDef {
        HttpToolDef {
            name: r.name,
            description: r.description,
            input_schema: r.input_schema,
            url: r.url,
            // The CHECK constraint admits only known methods.
            method: HttpMethod::parse(&r.method).unwrap_or_default(),
            headers: r.headers.0,
            timeout_ms: r.timeout_ms,
            requires_approval: r.requires_approval,
            approval_timeout_secs: r.approval_timeout_secs,
            on_timeout: r.on_timeout.as_deref().and_then(OnTimeout::parse),
            created_at: Some(r.created_at),
            updated_at: Some(r.updated_at),
        }
    }
}

/// Creates or replaces a tool (one statement: safe under concurrent PUTs, the last one wins);
/// true when it was created.
pub async fn upsert<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    t: &HttpToolDef,
) -> Result<(HttpToolDef, bool), sqlx::Error> {
    let sql = format!(
        "INSERT INTO http_tools (name, description, input_schema, url, method, headers, timeout_ms, requires_approval,
                                 project_id, approval_timeout_secs, on_timeout)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (project_id, name) DO UPDATE SET
            description = EXCLUDED.description, input_schema = EXCLUDED.input_schema, url = EXCLUDED.url,
            method = EXCLUDED.method, headers = EXCLUDED.headers, timeout_ms = EXCLUDED.timeout_ms,
            requires_approval = EXCLUDED.requires_approval, approval_timeout_secs = EXCLUDED.approval_timeout_secs,
            on_timeout = EXCLUDED.on_timeout, updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created"
    );
    let row = sqlx::query(&sql)
        .bind(&t.name)
        .bind(&t.description)
        .bind(&t.input_schema)
        .bind(&t.url)
        .bind(t.method.as_str())
        .bind(Json(&t.headers))
        .bind(t.timeout_ms)
        .bind(t.requires_approval)
        .bind(project)
        .bind(t.approval_timeout_secs)
        .bind(t.on_timeout.map(OnTimeout::as_str))
        .fetch_one(db)
        .await?;
    use sqlx::{FromRow, Row as _};
    let created: bool = row.try_get("created")?;
    Ok((Row::from_row(&row)?.into(), created))
}

pub async fn get<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    name: &str,
) -> Result<Option<HttpToolDef>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM http_tools WHERE project_id = $2 AND name = $1"
    ))
    .bind(name)
    .bind(project)
    .fetch_optional(db)
    .await?;
    Ok(row.map(HttpToolDef::from))
}

/// The named tools that exist, in name order (one query for an agent's whole list).
pub async fn named<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    names: &[String],
) -> Result<Vec<HttpToolDef>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM http_tools WHERE project_id = $2 AND name = ANY($1) ORDER BY name"
    ))
    .bind(names)
    .bind(project)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(HttpToolDef::from).collect())
}

/// A page of tools in name order, after `after`.
pub async fn list<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<HttpToolDef>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM http_tools WHERE project_id = $3 AND ($1::text IS NULL OR name > $1)
         ORDER BY name LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .bind(project)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(HttpToolDef::from).collect())
}

pub async fn delete<'e>(db: impl PgExecutor<'e>, project: ProjectId, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM http_tools WHERE project_id = $2 AND name = $1")
        .bind(name)
        .bind(project)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}
