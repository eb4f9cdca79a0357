//! Agent definitions.

use sqlx::{PgExecutor, PgPool};

use crate::domain::{Agent, ProjectId};

const AGENT_COLUMNS: &str = "name, role, provider, model, labels, tools, context_window, max_turns, \
     max_input_tokens, max_output_tokens, max_schema_retries, max_request_retries, request_retry_delay_ms, \
     temperature, max_tokens, thinking_budget, tool_choice, max_concurrent, created_at, updated_at, \
     budget_usd_per_day::text AS budget_usd_per_day, version, approval_timeout_secs, on_timeout, \
     question_timeout_secs, on_question_timeout";

#[derive(sqlx::FromRow)]
struct AgentRow {
    name: String,
    role: String,
    provider: Option<String>,
    model: String,
    labels: Vec<String>,
    tools: Vec<String>,
    context_window: Option<i32>,
    max_turns: Option<i32>,
    max_input_tokens: Option<i64>,
    max_output_tokens: Option<i64>,
    max_schema_retries: i32,
    max_request_retries: i32,
    request_retry_delay_ms: i32,
    temperature: Option<f64>,
    max_tokens: Option<i32>,
    thinking_budget: Option<i32>,
    tool_choice: String,
    max_concurrent: Option<i32>,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    budget_usd_per_day: Option<String>,
    version: i32,
    approval_timeout_secs: Option<i32>,
    on_timeout: Option<String>,
    question_timeout_secs: Option<i32>,
    on_question_timeout: Option<String>,
}

impl From<AgentRow> for Agent {
    fn from(r: AgentRow) -> Agent {
        Agent {
            name: r.name,
            role: r.role,
            provider: r.provider,
            model: r.model,
            labels: r.labels,
            tools: r.tools,
            context_window: r.context_window,
            max_turns: r.max_turns,
            max_input_tokens: r.max_input_tokens,
            max_output_tokens: r.max_output_tokens,
            max_schema_retries: r.max_schema_retries,
            max_request_retries: r.max_request_retries,
            request_retry_delay_ms: r.request_retry_delay_ms,
            temperature: r.temperature,
            max_tokens: r.max_tokens,
            thinking_budget: r.thinking_budget,
            tool_choice: r.tool_choice,
            max_concurrent: r.max_concurrent,
            budget_usd_per_day: crate::domain::money::from_db(r.budget_usd_per_day),
            approval_timeout_secs: r.approval_timeout_secs,
            on_timeout: r.on_timeout.as_deref().and_then(crate::domain::tool::OnTimeout::parse),
            question_timeout_secs: r.question_timeout_secs,
            on_question_timeout: r
                .on_question_timeout
                .as_deref()
                .and_then(crate::domain::question::QuestionTimeout::parse),
            created_at: r.created_at,
            updated_at: r.updated_at,
            version: r.version,
        }
    }
}

/// The settings a version holds: a PUT that changes none of them makes no new version.
const SETTINGS: [&str; 22] = [
    "role",
    "provider",
    "model",
    "labels",
    "tools",
    "context_window",
    "max_turns",
    "max_input_tokens",
    "max_output_tokens",
    "max_schema_retries",
    "max_request_retries",
    "request_retry_delay_ms",
    "temperature",
    "max_tokens",
    "thinking_budget",
    "tool_choice",
    "max_concurrent",
    "budget_usd_per_day",
    "approval_timeout_secs",
    "on_timeout",
    "question_timeout_secs",
    "on_question_timeout",
];

/// SQL: whether an upsert's new settings differ from the stored ones.
fn settings_changed() -> String {
    let stored: Vec<String> = SETTINGS.iter().map(|c| format!("agents.{c}")).collect();
    let new: Vec<String> = SETTINGS.iter().map(|c| format!("EXCLUDED.{c}")).collect();
    format!("(({}) IS DISTINCT FROM ({}))", stored.join(", "), new.join(", "))
}

/// Creates or replaces an agent; true when it was created. A change of its settings makes a new
/// version (`agent_versions`, written by the table's trigger in the same statement).
pub async fn upsert<'e>(db: impl PgExecutor<'e>, project: ProjectId, a: &Agent) -> Result<(Agent, bool), sqlx::Error> {
    let sql = format!(
        "INSERT INTO agents (name, role, provider, model, labels, tools, context_window, max_turns,
            max_input_tokens, max_output_tokens, max_schema_retries, max_request_retries,
            request_retry_delay_ms, temperature, max_tokens, thinking_budget, tool_choice, max_concurrent,
            budget_usd_per_day, project_id, approval_timeout_secs, on_timeout, question_timeout_secs,
            on_question_timeout)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19::numeric, $20,
                 $21, $22, $23, $24)
         ON CONFLICT (project_id, name) DO UPDATE SET
            role = EXCLUDED.role, provider = EXCLUDED.provider, model = EXCLUDED.model,
            labels = EXCLUDED.labels, tools = EXCLUDED.tools, context_window = EXCLUDED.context_window,
            max_turns = EXCLUDED.max_turns, max_input_tokens = EXCLUDED.max_input_tokens,
            max_output_tokens = EXCLUDED.max_output_tokens, max_schema_retries = EXCLUDED.max_schema_retries,
            max_request_retries = EXCLUDED.max_request_retries,
            request_retry_delay_ms = EXCLUDED.request_retry_delay_ms, temperature = EXCLUDED.temperature,
            max_tokens = EXCLUDED.max_tokens, thinking_budget = EXCLUDED.thinking_budget,
            tool_choice = EXCLUDED.tool_choice, max_concurrent = EXCLUDED.max_concurrent,
            budget_usd_per_day = EXCLUDED.budget_usd_per_day, approval_timeout_secs = EXCLUDED.approval_timeout_secs,
            on_timeout = EXCLUDED.on_timeout, question_timeout_secs = EXCLUDED.question_timeout_secs,
            on_question_timeout = EXCLUDED.on_question_timeout, updated_at = now(),
            -- A change is a new version (kept by the table's trigger); the same settings are not.
            version = agents.version + CASE WHEN {changed} THEN 1 ELSE 0 END
         RETURNING {AGENT_COLUMNS}, (xmax = 0) AS created",
        changed = settings_changed()
    );
    let row = sqlx::query(&sql)
        .bind(&a.name)
        .bind(&a.role)
        .bind(&a.provider)
        .bind(&a.model)
        .bind(&a.labels)
        .bind(&a.tools)
        .bind(a.context_window)
        .bind(a.max_turns)
        .bind(a.max_input_tokens)
        .bind(a.max_output_tokens)
        .bind(a.max_schema_retries)
        .bind(a.max_request_retries)
        .bind(a.request_retry_delay_ms)
        .bind(a.temperature)
        .bind(a.max_tokens)
        .bind(a.thinking_budget)
        .bind(&a.tool_choice)
        .bind(a.max_concurrent)
        .bind(a.budget_usd_per_day.map(|b| b.to_string()))
        .bind(project)
        .bind(a.approval_timeout_secs)
        .bind(a.on_timeout.map(crate::domain::tool::OnTimeout::as_str))
        .bind(a.question_timeout_secs)
        .bind(
            a.on_question_timeout
                .map(crate::domain::question::QuestionTimeout::as_str),
        )
        .fetch_one(db)
        .await?;
    use sqlx::{FromRow, Row};
    let created: bool = row.try_get("created")?;
    Ok((AgentRow::from_row(&row)?.into(), created))
}

/// Inserts the agent unless one of that name exists (the default agent at start-up).
pub async fn insert_if_none_exist<'e>(db: impl PgExecutor<'e>, a: &Agent) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO agents (name, role, provider, model, labels, tools, project_id)
         SELECT $1, $2, $3, $4, $5, $6, 1 WHERE NOT EXISTS (SELECT 1 FROM agents WHERE project_id = 1)
         ON CONFLICT (project_id, name) DO NOTHING",
    )
    .bind(&a.name)
    .bind(&a.role)
    .bind(&a.provider)
    .bind(&a.model)
    .bind(&a.labels)
    .bind(&a.tools)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn get<'e>(db: impl PgExecutor<'e>, project: ProjectId, name: &str) -> Result<Option<Agent>, sqlx::Error> {
    let row: Option<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE project_id = $2 AND name = $1"
    ))
    .bind(name)
    .bind(project)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Agent::from))
}

/// Agents in name order after `after` (exclusive).
pub async fn list<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Agent>, sqlx::Error> {
    let rows: Vec<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE project_id = $3 AND ($1::text IS NULL OR name > $1)
         ORDER BY name LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .bind(project)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Agent::from).collect())
}

pub async fn all<'e>(db: impl PgExecutor<'e>, project: ProjectId) -> Result<Vec<Agent>, sqlx::Error> {
    list(db, project, None, i64::MAX).await
}

pub async fn delete<'e>(db: impl PgExecutor<'e>, project: ProjectId, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM agents WHERE project_id = $2 AND name = $1")
        .bind(name)
        .bind(project)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The names of the agents that use this provider.
pub async fn using_provider<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    provider: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT name FROM agents WHERE project_id = $2 AND provider = $1 ORDER BY name")
        .bind(provider)
        .bind(project)
        .fetch_all(db)
        .await
}

/// Wakes idle workers in every process after an agent changed: its new labels may make waiting
/// work claimable. Best effort for the caller: a lost notice only delays a claim to the next poll.
pub async fn notify_agent_changed(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    super::tickets::notify_work(&mut conn).await
}

/// Every agent's project, name and labels: what routing reads (`ROUTE` in `claims`).
pub async fn routing<'e>(db: impl PgExecutor<'e>) -> Result<Vec<(ProjectId, String, Vec<String>)>, sqlx::Error> {
    sqlx::query_as("SELECT project_id, name, labels FROM agents")
        .fetch_all(db)
        .await
}

/// An agent's versions, newest first, below `before` (a page).
pub async fn versions<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    name: &str,
    before: Option<i32>,
    limit: i64,
) -> Result<Vec<Agent>, sqlx::Error> {
    let rows: Vec<sqlx::types::Json<Agent>> = sqlx::query_scalar(
        "SELECT definition FROM agent_versions WHERE project_id = $1 AND name = $2 AND ($3::int4 IS NULL OR version < $3)
         ORDER BY version DESC LIMIT $4",
    )
    .bind(project)
    .bind(name)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|j| j.0).collect())
}

/// One version of an agent, as it was.
pub async fn version<'e>(
    db: impl PgExecutor<'e>,
    project: ProjectId,
    name: &str,
    version: i32,
) -> Result<Option<Agent>, sqlx::Error> {
    let row: Option<sqlx::types::Json<Agent>> = sqlx::query_scalar(
        "SELECT definition FROM agent_versions WHERE project_id = $1 AND name = $2 AND version = $3",
    )
    .bind(project)
    .bind(name)
    .bind(version)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|j| j.0))
}
