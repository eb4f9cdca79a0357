//! Named model providers defined through the API.

use std::collections::BTreeMap;

use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::provider::ProviderKind;
use crate::domain::{ProjectId, ProviderDef};

const PROVIDER_COLUMNS: &str =
    "name, kind, base_url, api_key, headers, timeout_ms, max_concurrent, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct ProviderRow {
    name: String,
    kind: String,
    base_url: String,
    api_key: Option<String>,
    headers: Json<BTreeMap<String, String>>,
    timeout_ms: i64,
    max_concurrent: Option<i32>,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<ProviderRow> for ProviderDef {
    fn from(r: ProviderRow) -> ProviderDef {
        ProviderDef {
            name: r.name,
            // The CHECK constraint admits only known kinds.
            kind: ProviderKind::parse(&r.kind).unwrap_or(ProviderKind::Openai),
            base_url: r.base_url,
            api_key: r.api_key,
            headers: r.headers.0,
            timeout_ms: Some(r.timeout_ms),
            max_concurrent: r.max_concurrent.map(i64::from),
            builtin: false,
            configured: true,
            created_at: Some(r.created_at),
            updated_at: Some(r.updated_at),
        }
    }
}

/// Creates or replaces a provider; true when it was created.
pub async fn upsert<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    p: &ProviderDef,
) -> Result<(ProviderDef, bool), sqlx::Error> {
    let sql = format!(
        "INSERT INTO providers (name, kind, base_url, api_key, headers, timeout_ms, max_concurrent, project_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (project_id, name) DO UPDATE SET
            kind = EXCLUDED.kind, base_url = EXCLUDED.base_url, api_key = EXCLUDED.api_key,
            headers = EXCLUDED.headers, timeout_ms = EXCLUDED.timeout_ms,
            max_concurrent = EXCLUDED.max_concurrent, updated_at = now()
         RETURNING {PROVIDER_COLUMNS}, (xmax = 0) AS created"
    );
    let row = sqlx::query(&sql)
        .bind(&p.name)
        .bind(p.kind.as_str())
        .bind(&p.base_url)
        .bind(&p.api_key)
        .bind(Json(&p.headers))
        .bind(
            p.timeout_ms
                .unwrap_or(crate::domain::provider::DEFAULT_PROVIDER_TIMEOUT_MS),
        )
        .bind(p.max_concurrent.map(|n| n as i32))
        .bind(project)
        .fetch_one(db)
        .await?;
    use sqlx::{FromRow, Row};
    let created: bool = row.try_get("created")?;
    Ok((ProviderRow::from_row(&row)?.into(), created))
}

pub async fn get<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    name: &str,
) -> Result<Option<ProviderDef>, sqlx::Error> {
    let row: Option<ProviderRow> = sqlx::query_as(&format!(
        "SELECT {PROVIDER_COLUMNS} FROM providers WHERE project_id = $2 AND name = $1"
    ))
    .bind(name)
    .bind(project)
    .fetch_optional(db)
    .await?;
    Ok(row.map(ProviderDef::from))
}

/// Every provider a project defined, in name order.
pub async fn all<'e>(db: impl PgExecutor<'e>, project: ProjectId) -> Result<Vec<ProviderDef>, sqlx::Error> {
    let rows: Vec<ProviderRow> = sqlx::query_as(&format!(
        "SELECT {PROVIDER_COLUMNS} FROM providers WHERE project_id = $1 ORDER BY name"
    ))
    .bind(project)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(ProviderDef::from).collect())
}

/// Every project's providers (for the warnings a worker logs at start).
pub async fn every<'e>(db: impl PgExecutor<'e>) -> Result<Vec<ProviderDef>, sqlx::Error> {
    let rows: Vec<ProviderRow> = sqlx::query_as(&format!("SELECT {PROVIDER_COLUMNS} FROM providers ORDER BY name"))
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(ProviderDef::from).collect())
}

pub async fn delete<'e>(db: impl PgExecutor<'e>, project: ProjectId, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM providers WHERE project_id = $2 AND name = $1")
        .bind(name)
        .bind(project)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}
