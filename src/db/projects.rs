//! Projects, their tokens, rate buckets and usage.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::domain::money::Usd;
use crate::domain::project::{Project, ProjectId, ProjectToken, Quotas, RateLimit, TokenScope};

const PROJECT_COLUMNS: &str = "id, name, key_prefix, description, weight, rate_limit, quotas, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct ProjectRow {
    id: ProjectId,
    name: String,
    key_prefix: String,
    description: Option<String>,
    weight: i32,
    rate_limit: Option<Json<RateLimit>>,
    quotas: Json<Quotas>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ProjectRow> for Project {
    fn from(r: ProjectRow) -> Project {
        Project {
            id: r.id,
            name: r.name,
            key_prefix: r.key_prefix,
            description: r.description,
            weight: r.weight,
            rate_limit: r.rate_limit.map(|j| j.0),
            quotas: r.quotas.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The sequence a project's ticket numbers come from: `default` keeps the one it always had.
pub fn number_sequence(project: ProjectId) -> String {
    if project == ProjectId::DEFAULT {
        "ticket_number_seq".into()
    } else {
        format!("ticket_number_seq_{}", project.0)
    }
}

/// A project's settings, as created or replaced.
pub struct ProjectSettings {
    pub name: String,
    pub key_prefix: String,
    pub description: Option<String>,
    pub weight: i32,
    pub rate_limit: Option<RateLimit>,
    pub quotas: Quotas,
}

pub async fn list<'e>(db: impl PgExecutor<'e>, after: Option<&str>, limit: i64) -> Result<Vec<Project>, sqlx::Error> {
    let rows: Vec<ProjectRow> = sqlx::query_as(&format!(
        "SELECT {PROJECT_COLUMNS} FROM projects WHERE ($1::text IS NULL OR name > $1) ORDER BY name LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Project::from).collect())
}

pub async fn find_by_name<'e>(db: impl PgExecutor<'e>, name: &str) -> Result<Option<Project>, sqlx::Error> {
    let row: Option<ProjectRow> = sqlx::query_as(&format!("SELECT {PROJECT_COLUMNS} FROM projects WHERE name = $1"))
        .bind(name)
        .fetch_optional(db)
        .await?;
    Ok(row.map(Project::from))
}

pub async fn find_by_id<'e>(db: impl PgExecutor<'e>, id: ProjectId) -> Result<Option<Project>, sqlx::Error> {
    let row: Option<ProjectRow> = sqlx::query_as(&format!("SELECT {PROJECT_COLUMNS} FROM projects WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(row.map(Project::from))
}

/// Creates a project and the sequence of its ticket numbers, in one transaction. A duplicate
/// name or key prefix is a unique violation (the caller's 409).
pub async fn insert(pool: &PgPool, s: &ProjectSettings) -> Result<Project, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let row: ProjectRow = sqlx::query_as(&format!(
        "INSERT INTO projects (name, key_prefix, description, weight, rate_limit, quotas)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {PROJECT_COLUMNS}"
    ))
    .bind(&s.name)
    .bind(&s.key_prefix)
    .bind(&s.description)
    .bind(s.weight)
    .bind(s.rate_limit.map(Json))
    .bind(Json(&s.quotas))
    .fetch_one(&mut *tx)
    .await?;
    // The name is built from the id, never from input.
    sqlx::query(&format!("CREATE SEQUENCE IF NOT EXISTS {}", number_sequence(row.id)))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(row.into())
}

/// Replaces a project's settings (its name and key prefix stay). None when it does not exist.
pub async fn update(pool: &PgPool, id: ProjectId, s: &ProjectSettings) -> Result<Option<Project>, sqlx::Error> {
    let row: Option<ProjectRow> = sqlx::query_as(&format!(
        "UPDATE projects SET description = $2, weight = $3, rate_limit = $4, quotas = $5, updated_at = now()
         WHERE id = $1 RETURNING {PROJECT_COLUMNS}"
    ))
    .bind(id)
    .bind(&s.description)
    .bind(s.weight)
    .bind(s.rate_limit.map(Json))
    .bind(Json(&s.quotas))
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Project::from))
}

pub enum Deleted {
    Gone,
    Missing,
    HasTickets,
}

/// Deletes a project with everything it owns, unless it still has tickets.
pub async fn delete(pool: &PgPool, id: ProjectId) -> Result<Deleted, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM projects WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Ok(Deleted::Missing);
    }
    // The row lock above keeps a create from slipping in: ticket inserts check the project (FK).
    let has_tickets: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tickets WHERE project_id = $1)")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if has_tickets {
        return Ok(Deleted::HasTickets);
    }
    for table in [
        "events",
        "agents",
        "providers",
        "http_tools",
        "mcp_servers",
        "schedules",
        "webhooks",
        "budgets",
    ] {
        sqlx::query(&format!("DELETE FROM {table} WHERE project_id = $1"))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("DELETE FROM projects WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!("DROP SEQUENCE IF EXISTS {}", number_sequence(id)))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Deleted::Gone)
}

/// A token as the access check needs it.
#[derive(Clone, Debug)]
pub struct TokenGrant {
    pub id: Uuid,
    pub project: ProjectId,
    pub scopes: Vec<TokenScope>,
    pub expires_at: Option<DateTime<Utc>>,
    pub rate_limit: Option<RateLimit>,
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: Uuid,
    project_id: ProjectId,
    name: String,
    scopes: Vec<String>,
    expires_at: Option<DateTime<Utc>>,
    rate_limit: Option<Json<RateLimit>>,
    last_used_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

fn scopes(names: &[String]) -> Vec<TokenScope> {
    names.iter().filter_map(|s| TokenScope::parse(s)).collect()
}

impl From<TokenRow> for ProjectToken {
    fn from(r: TokenRow) -> ProjectToken {
        ProjectToken {
            id: r.id,
            name: r.name,
            scopes: scopes(&r.scopes),
            expires_at: r.expires_at,
            rate_limit: r.rate_limit.map(|j| j.0),
            last_used_at: r.last_used_at,
            created_at: r.created_at,
        }
    }
}

const TOKEN_COLUMNS: &str = "id, project_id, name, scopes, expires_at, rate_limit, last_used_at, created_at";

pub struct NewToken<'a> {
    pub project: ProjectId,
    pub name: &'a str,
    pub scopes: &'a [TokenScope],
    pub expires_at: Option<DateTime<Utc>>,
    pub rate_limit: Option<RateLimit>,
    /// SHA-256 of the secret: the secret itself is never stored.
    pub hash: &'a [u8],
}

pub async fn insert_token(pool: &PgPool, t: &NewToken<'_>) -> Result<ProjectToken, sqlx::Error> {
    let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
    let row: TokenRow = sqlx::query_as(&format!(
        "INSERT INTO project_tokens (id, project_id, name, scopes, token_hash, expires_at, rate_limit)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {TOKEN_COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(t.project)
    .bind(t.name)
    .bind(&scopes)
    .bind(t.hash)
    .bind(t.expires_at)
    .bind(t.rate_limit.map(Json))
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

pub async fn list_tokens(
    pool: &PgPool,
    project: ProjectId,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ProjectToken>, sqlx::Error> {
    let rows: Vec<TokenRow> = sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM project_tokens WHERE project_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3"
    ))
    .bind(project)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(ProjectToken::from).collect())
}

/// Revokes a token: its row goes, so no process finds it again once its cache expires.
pub async fn delete_token(pool: &PgPool, project: ProjectId, id: Uuid) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM project_tokens WHERE project_id = $1 AND id = $2")
        .bind(project)
        .bind(id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn find_token(pool: &PgPool, hash: &[u8]) -> Result<Option<TokenGrant>, sqlx::Error> {
    let row: Option<TokenRow> = sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM project_tokens WHERE token_hash = $1"
    ))
    .bind(hash)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| TokenGrant {
        id: r.id,
        project: r.project_id,
        scopes: scopes(&r.scopes),
        expires_at: r.expires_at,
        rate_limit: r.rate_limit.map(|j| j.0),
    }))
}

/// Records when tokens were last used: one statement for every token used since the last call.
pub async fn touch_tokens(pool: &PgPool, used: &[(Uuid, DateTime<Utc>)]) -> Result<(), sqlx::Error> {
    let (ids, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = used.iter().copied().unzip();
    sqlx::query(
        "UPDATE project_tokens t SET last_used_at = u.at
         FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, at)
         WHERE t.id = u.id AND (t.last_used_at IS NULL OR t.last_used_at < u.at)",
    )
    .bind(&ids)
    .bind(&times)
    .execute(pool)
    .await?;
    Ok(())
}

/// One request taken from a token bucket shared by every process: refilled for the time since
/// its last use, then one taken if one is there. Answers whether it was, and what is left.
pub async fn take_from_bucket(pool: &PgPool, key: &str, limit: &RateLimit) -> Result<(bool, f64), sqlx::Error> {
    sqlx::query_as(
        "WITH b AS (
            SELECT least($2::float8, coalesce(
                (SELECT tokens + extract(epoch FROM clock_timestamp() - updated_at) * $3 FROM rate_buckets WHERE key = $1),
                $2::float8)) AS tokens)
         INSERT INTO rate_buckets AS r (key, tokens, updated_at)
         SELECT $1, CASE WHEN b.tokens >= 1 THEN b.tokens - 1 ELSE b.tokens END, clock_timestamp() FROM b
         ON CONFLICT (key) DO UPDATE SET
            tokens = least($2::float8, r.tokens + extract(epoch FROM clock_timestamp() - r.updated_at) * $3)
                     - CASE WHEN least($2::float8, r.tokens + extract(epoch FROM clock_timestamp() - r.updated_at) * $3) >= 1
                            THEN 1 ELSE 0 END,
            updated_at = clock_timestamp()
         RETURNING (SELECT b.tokens >= 1 FROM b), tokens",
    )
    .bind(key)
    .bind(f64::from(limit.burst))
    .bind(limit.requests_per_s)
    .fetch_one(pool)
    .await
}

/// What a project used in one period.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct PeriodUsage {
    pub tickets: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[schema(value_type = f64)]
    pub cost_usd: Usd,
    /// By the model the tickets' agent ran (at their latest claim).
    pub by_model: std::collections::BTreeMap<String, super::desk_stats::ModelFigures>,
}

/// The tickets created since `since` in a project, and what their requests used.
pub async fn usage_since(
    conn: &mut PgConnection,
    project: ProjectId,
    since: DateTime<Utc>,
) -> Result<PeriodUsage, sqlx::Error> {
    let (tickets, input, output, cost): (i64, i64, i64, String) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(input_tokens), 0)::int8, coalesce(sum(output_tokens), 0)::int8,
                coalesce(sum(cost_usd), 0)::text
         FROM tickets WHERE project_id = $1 AND created_at >= $2",
    )
    .bind(project)
    .bind(since)
    .fetch_one(&mut *conn)
    .await?;
    let models: Vec<(String, i64, i64, i64, String)> = sqlx::query_as(
        "SELECT model, coalesce(sum(requests), 0)::int8, coalesce(sum(input_tokens), 0)::int8,
                coalesce(sum(output_tokens), 0)::int8, coalesce(sum(cost_usd), 0)::text
         FROM tickets WHERE project_id = $1 AND created_at >= $2 AND model IS NOT NULL GROUP BY model",
    )
    .bind(project)
    .bind(since)
    .fetch_all(conn)
    .await?;
    let by_model = models
        .into_iter()
        .map(|(model, requests, input_tokens, output_tokens, cost)| {
            let figures = super::desk_stats::ModelFigures {
                requests,
                input_tokens,
                output_tokens,
                cost_usd: Usd::parse(&cost).unwrap_or_default(),
            };
            (model, figures)
        })
        .collect();
    Ok(PeriodUsage {
        tickets,
        input_tokens: input,
        output_tokens: output,
        cost_usd: crate::domain::money::from_db(Some(cost)).unwrap_or(Usd::ZERO),
        by_model,
    })
}

/// A project's `tickets_per_day` and how many tickets it created today (UTC), when it has that
/// quota; None otherwise (and for a project that is gone).
pub async fn ticket_quota_today(
    conn: &mut PgConnection,
    project: ProjectId,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let limit: Option<Option<i64>> =
        sqlx::query_scalar("SELECT (quotas->>'tickets_per_day')::int8 FROM projects WHERE id = $1")
            .bind(project)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(limit) = limit.flatten() else {
        return Ok(None);
    };
    let now = Utc::now();
    let midnight = now.date_naive().and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
    let used = tickets_since(&mut *conn, project, midnight).await?;
    Ok(Some((limit, used)))
}

/// How many tickets a project created since `since` (a quota's admission check).
pub async fn tickets_since<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    since: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM tickets WHERE project_id = $1 AND created_at >= $2")
        .bind(project)
        .bind(since)
        .fetch_one(db)
        .await
}

/// What a worker needs of a project to charge its requests: its name and quotas.
#[derive(Clone, Debug)]
pub struct ProjectQuotas {
    pub name: String,
    pub quotas: Quotas,
}

/// Every project's name and quotas as a process last read them: requests are checked against a
/// project's quotas without a round trip. Reloaded every `prices::REFRESH`, at once by the
/// process that changes a project, and when a project it has not seen yet asks.
#[derive(Clone, Default)]
pub struct ProjectBook {
    projects: std::sync::Arc<std::sync::RwLock<std::collections::HashMap<ProjectId, ProjectQuotas>>>,
}

impl ProjectBook {
    pub async fn reload(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let rows: Vec<(ProjectId, String, Json<Quotas>)> = sqlx::query_as("SELECT id, name, quotas FROM projects")
            .fetch_all(pool)
            .await?;
        crate::telemetry::metric::name_projects(rows.iter().map(|(id, name, _)| (id.0, name.clone())));
        let projects = rows
            .into_iter()
            .map(|(id, name, quotas)| (id, ProjectQuotas { name, quotas: quotas.0 }))
            .collect();
        *self.projects.write().unwrap_or_else(|e| e.into_inner()) = projects;
        Ok(())
    }

    /// The project as last read; None when it was not there then.
    pub fn get(&self, project: ProjectId) -> Option<ProjectQuotas> {
        self.projects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&project)
            .cloned()
    }

    /// The project, read again first when this process has not seen it yet.
    pub async fn find(&self, pool: &PgPool, project: ProjectId) -> Result<Option<ProjectQuotas>, sqlx::Error> {
        if let Some(found) = self.get(project) {
            return Ok(Some(found));
        }
        self.reload(pool).await?;
        Ok(self.get(project))
    }

    /// Reloads every `prices::REFRESH` until `stop`.
    pub fn spawn_refresh(
        &self,
        pool: PgPool,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let book = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(super::prices::REFRESH) => {}
                }
                if let Err(err) = book.reload(&pool).await {
                    tracing::debug!(error = %err, "could not reload the projects' quotas");
                }
            }
        })
    }
}
