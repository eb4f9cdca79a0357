//! MCP servers defined through the API, with their tools as last listed and their status.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::tool::OnTimeout;
use crate::domain::{McpServerDef, McpToolInfo, McpTransport, ProjectId, RequiresApproval};

const COLUMNS: &str =
    "name, url, headers, timeout_ms, requires_approval, revision, tools, status, listed_at, created_at, updated_at, \
     approval_timeout_secs, on_timeout";

#[derive(sqlx::FromRow)]
struct Row {
    name: String,
    url: String,
    headers: Json<BTreeMap<String, String>>,
    timeout_ms: i64,
    requires_approval: Json<RequiresApproval>,
    revision: i64,
    tools: Json<Vec<McpToolInfo>>,
    status: String,
    listed_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    approval_timeout_secs: Option<i32>,
    on_timeout: Option<String>,
}

/// A stored server: its definition and what was last seen of it.
#[derive(Clone, Debug)]
pub struct StoredServer {
    pub def: McpServerDef,
    pub tools: Vec<McpToolInfo>,
    pub status: String,
    pub listed_at: Option<DateTime<Utc>>,
}

impl From<Row> for StoredServer {
    fn from(r: Row) -> StoredServer {
        StoredServer {
            def: McpServerDef {
                name: r.name,
                transport: McpTransport::Http {
                    url: r.url,
                    headers: r.headers.0,
                },
                timeout_ms: r.timeout_ms,
                requires_approval: r.requires_approval.0,
                approval_timeout_secs: r.approval_timeout_secs,
                on_timeout: r.on_timeout.as_deref().and_then(OnTimeout::parse),
                from_config: false,
                revision: r.revision,
                created_at: Some(r.created_at),
                updated_at: Some(r.updated_at),
            },
            tools: r.tools.0,
            status: r.status,
            listed_at: r.listed_at,
        }
    }
}

/// Creates or replaces a server (an HTTP one: stdio servers are never stored); true when created.
/// A replacement bumps the revision and forgets the old listing, so no process keeps using the
/// old definition's connection or shows its tools.
pub async fn upsert<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    def: &McpServerDef,
) -> Result<(StoredServer, bool), sqlx::Error> {
    let McpTransport::Http { url, headers } = &def.transport else {
        return Err(sqlx::Error::Protocol("only HTTP MCP servers are stored".into()));
    };
    let sql = format!(
        "INSERT INTO mcp_servers (name, url, headers, timeout_ms, requires_approval, project_id,
                                  approval_timeout_secs, on_timeout)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (project_id, name) DO UPDATE SET
            url = EXCLUDED.url, headers = EXCLUDED.headers, timeout_ms = EXCLUDED.timeout_ms,
            requires_approval = EXCLUDED.requires_approval, approval_timeout_secs = EXCLUDED.approval_timeout_secs,
            on_timeout = EXCLUDED.on_timeout, revision = mcp_servers.revision + 1,
            tools = '[]', status = 'pending', listed_at = NULL, updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created"
    );
    let row = sqlx::query(&sql)
        .bind(&def.name)
        .bind(url)
        .bind(Json(headers))
        .bind(def.timeout_ms)
        .bind(Json(&def.requires_approval))
        .bind(project)
        .bind(def.approval_timeout_secs)
        .bind(def.on_timeout.map(OnTimeout::as_str))
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
) -> Result<Option<StoredServer>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM mcp_servers WHERE project_id = $2 AND name = $1");
    let row: Option<Row> = sqlx::query_as(&sql).bind(name).bind(project).fetch_optional(db).await?;
    Ok(row.map(Into::into))
}

pub async fn all<'e>(db: impl PgExecutor<'e>, project: ProjectId) -> Result<Vec<StoredServer>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM mcp_servers WHERE project_id = $1 ORDER BY name");
    let rows: Vec<Row> = sqlx::query_as(&sql).bind(project).fetch_all(db).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Every project's server names (what the MCP hub checks an agent's tools against).
pub async fn names<'e>(db: impl PgExecutor<'e>) -> Result<Vec<(ProjectId, String)>, sqlx::Error> {
    sqlx::query_as("SELECT project_id, name FROM mcp_servers")
        .fetch_all(db)
        .await
}

/// One statement; a process still holding the server's connection drops it at its next lookup.
pub async fn delete<'e>(db: impl PgExecutor<'e>, project: ProjectId, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM mcp_servers WHERE project_id = $2 AND name = $1")
        .bind(name)
        .bind(project)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Records a listing (or a failure to list: `tools` None keeps the last tools). Only for the
/// revision it was made for: a listing of a replaced definition changes nothing.
pub async fn record_listing<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    name: &str,
    revision: i64,
    tools: Option<&[McpToolInfo]>,
    status: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE mcp_servers SET tools = COALESCE($3, tools), status = $4,
            listed_at = CASE WHEN $3 IS NULL THEN listed_at ELSE now() END
         WHERE project_id = $5 AND name = $1 AND revision = $2",
    )
    .bind(name)
    .bind(revision)
    .bind(tools.map(Json))
    .bind(status)
    .bind(project)
    .execute(db)
    .await?;
    Ok(())
}
