//! `/v1/projects`: projects, their tokens and their usage.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::access::{new_token, Caller};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{Cursor, NamePageQuery, Page};
use super::AppState;
use crate::db;
use crate::db::budgets::Quota;
use crate::db::projects::{Deleted, PeriodUsage, ProjectSettings};
use crate::domain::project::{
    is_key_prefix, is_project_name, Project, ProjectToken, Quotas, RateLimit, TokenScope, DEFAULT_PROJECT,
};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// 1–32 of `[a-z0-9-]`, unique.
    #[schema(pattern = "^[a-z0-9-]{1,32}$")]
    pub name: String,
    /// 1–10 of `[A-Z]`, unique; its tickets are `{key_prefix}-1`, `{key_prefix}-2`, …
    #[schema(pattern = "^[A-Z]{1,10}$")]
    pub key_prefix: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub description: Option<String>,
    /// Its share of the workers when several projects have tickets waiting (1–100; default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub weight: Option<i32>,
    #[serde(default, deserialize_with = "super::extract::object")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, deserialize_with = "super::extract::object")]
    pub quotas: Option<Quotas>,
}

/// Changes a project: fields left out stay; `rate_limit` null removes the limit. The name and
/// key prefix never change (they are in every key and in clients' configuration).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchProject {
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schema(value_type = Option<String>, max_length = 4096)]
    pub description: Option<Option<String>>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub weight: Option<i32>,
    #[serde(default, deserialize_with = "super::extract::present_object")]
    #[schema(value_type = Option<RateLimit>)]
    pub rate_limit: Option<Option<RateLimit>>,
    #[serde(default, deserialize_with = "super::extract::object")]
    pub quotas: Option<Quotas>,
}

fn check_settings(
    weight: i32,
    rate_limit: Option<&RateLimit>,
    quotas: &Quotas,
    description: Option<&str>,
) -> ApiResult<()> {
    if !(1..=100).contains(&weight) {
        return Err(ApiError::Validation("weight must be between 1 and 100".into()));
    }
    if let Some(limit) = rate_limit {
        limit.validate().map_err(ApiError::Validation)?;
    }
    quotas.validate().map_err(ApiError::Validation)?;
    if description.is_some_and(|d| d.len() > 4096) {
        return Err(ApiError::Validation("description must be at most 4096 bytes".into()));
    }
    Ok(())
}

/// The project a path names, as the caller may see it: another project is 404 to a project
/// token, as if it did not exist.
async fn visible(state: &AppState, caller: &Caller, name: &str) -> ApiResult<Arc<Project>> {
    let missing = || ApiError::NotFound(format!("no project {name:?}"));
    let project = db::projects::find_by_name(&state.pool, name)
        .await?
        .ok_or_else(missing)?;
    if !caller.sees(&project) {
        return Err(missing());
    }
    Ok(Arc::new(project))
}

fn conflict(e: sqlx::Error) -> ApiError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            ApiError::Conflict("a project with this name or key prefix exists".into())
        }
        _ => e.into(),
    }
}

/// Create a project
#[utoipa::path(post, path = "/projects", tag = "projects", request_body = CreateProject,
    responses((status = 201, body = Project), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_project(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateProject>,
) -> ApiResult<Response> {
    if !is_project_name(&body.name) {
        return Err(ApiError::Validation("name must be 1 to 32 of [a-z0-9-]".into()));
    }
    if !is_key_prefix(&body.key_prefix) {
        return Err(ApiError::Validation("key_prefix must be 1 to 10 of [A-Z]".into()));
    }
    let settings = ProjectSettings {
        name: body.name,
        key_prefix: body.key_prefix,
        description: body.description,
        weight: body.weight.unwrap_or(1),
        rate_limit: body.rate_limit,
        quotas: body.quotas.unwrap_or_default(),
    };
    check_settings(
        settings.weight,
        settings.rate_limit.as_ref(),
        &settings.quotas,
        settings.description.as_deref(),
    )?;
    let project = db::projects::insert(&state.pool, &settings).await.map_err(conflict)?;
    state.access.projects_changed();
    Ok((StatusCode::CREATED, Json(project)).into_response())
}

#[derive(Serialize, ToSchema)]
pub struct ProjectList {
    pub items: Vec<Project>,
    pub next_cursor: Option<String>,
}

/// List projects
///
/// A desk token sees every project; a project token its own.
#[utoipa::path(get, path = "/projects", tag = "projects", params(NamePageQuery),
    responses((status = 200, body = ProjectList), (status = 400, body = ErrorBody)))]
pub async fn list_projects(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<ProjectList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_name()?;
    if !caller.is_desk() {
        let own = caller.project.as_ref().clone();
        let items = if after.as_deref().is_none_or(|a| a < own.name.as_str()) {
            vec![own]
        } else {
            vec![]
        };
        return Ok(Json(ProjectList {
            items,
            next_cursor: None,
        }));
    }
    let rows = db::projects::list(&state.pool, after.as_deref(), page.fetch()).await?;
    let (items, next_cursor) = page.finish(rows, |p| Cursor::Name(p.name.clone()));
    Ok(Json(ProjectList { items, next_cursor }))
}

/// Get a project
#[utoipa::path(get, path = "/projects/{project}", tag = "projects", params(("project" = String, Path)),
    responses((status = 200, body = Project), (status = 404, body = ErrorBody)))]
pub async fn get_project(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<Project>> {
    Ok(Json(visible(&state, &caller, &name).await?.as_ref().clone()))
}

/// Change a project
#[utoipa::path(patch, path = "/projects/{project}", tag = "projects", params(("project" = String, Path)),
    request_body = PatchProject,
    responses((status = 200, body = Project), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn patch_project(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(patch): ApiJson<PatchProject>,
) -> ApiResult<Json<Project>> {
    let project = visible(&state, &caller, &name).await?;
    let settings = ProjectSettings {
        name: project.name.clone(),
        key_prefix: project.key_prefix.clone(),
        description: patch.description.unwrap_or_else(|| project.description.clone()),
        weight: patch.weight.unwrap_or(project.weight),
        rate_limit: patch.rate_limit.unwrap_or(project.rate_limit),
        quotas: patch.quotas.unwrap_or_else(|| project.quotas.clone()),
    };
    check_settings(
        settings.weight,
        settings.rate_limit.as_ref(),
        &settings.quotas,
        settings.description.as_deref(),
    )?;
    let updated = db::projects::update(&state.pool, project.id, &settings)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no project {name:?}")))?;
    state.access.projects_changed();
    if updated.quotas != project.quotas {
        // New limits for the quotas' counters; the pause is lifted and the tickets the quotas
        // stopped are tried again (one still over its quota pauses the project again).
        let limits = Quota::limits(&updated.quotas);
        let mut tx = state.pool.begin().await?;
        let resumed = db::budgets::set_project_quotas(&mut tx, project.id, &limits).await?;
        tx.commit().await?;
        state.projects.reload(&state.pool).await?;
        if resumed > 0 {
            state.hub.wake();
        }
    }
    // A raised quota may let its tickets be claimed again.
    state.hub.work_available();
    Ok(Json(updated))
}

/// Delete a project
///
/// Only a project without tickets (409 otherwise); its agents, tools, MCP servers, providers,
/// schedules, webhooks and tokens go with it. `default` is never deleted.
#[utoipa::path(delete, path = "/projects/{project}", tag = "projects", params(("project" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn delete_project(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let project = visible(&state, &caller, &name).await?;
    if project.name == DEFAULT_PROJECT {
        return Err(ApiError::Conflict("the project default always exists".into()));
    }
    match db::projects::delete(&state.pool, project.id).await? {
        Deleted::Gone => {
            state.access.projects_changed();
            state.access.tokens_changed();
            Ok(StatusCode::NO_CONTENT)
        }
        Deleted::Missing => Err(ApiError::NotFound(format!("no project {name:?}"))),
        Deleted::HasTickets => Err(ApiError::Conflict(format!(
            "project {name:?} still has tickets; a project is deleted only when it has none"
        ))),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// `read`, `write`, `approve`, `admin`.
    #[schema(min_items = 1)]
    pub scopes: Vec<TokenScope>,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "super::extract::object")]
    pub rate_limit: Option<RateLimit>,
}

/// A new token, with its secret: shown only in this answer.
#[derive(Serialize, ToSchema)]
pub struct CreatedToken {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub expires_at: Option<DateTime<Utc>>,
    pub rate_limit: Option<RateLimit>,
    pub created_at: DateTime<Utc>,
    /// `adk_` and 32 random bytes, base64url without padding.
    pub token: String,
}

/// Create a project token
#[utoipa::path(post, path = "/projects/{project}/tokens", tag = "projects", params(("project" = String, Path)),
    request_body = CreateToken,
    responses((status = 201, body = CreatedToken), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<CreateToken>,
) -> ApiResult<Response> {
    let project = visible(&state, &caller, &name).await?;
    if body.name.is_empty() || body.name.len() > 64 {
        return Err(ApiError::Validation("name must be 1 to 64 bytes".into()));
    }
    if body.scopes.is_empty() {
        return Err(ApiError::Validation(
            "scopes must name at least one of read, write, approve, admin".into(),
        ));
    }
    if let Some(limit) = &body.rate_limit {
        limit.validate().map_err(ApiError::Validation)?;
    }
    let mut scopes = body.scopes;
    scopes.dedup();
    let (secret, hash) = new_token();
    let token = db::projects::insert_token(
        &state.pool,
        &db::projects::NewToken {
            project: project.id,
            name: &body.name,
            scopes: &scopes,
            expires_at: body.expires_at,
            rate_limit: body.rate_limit,
            hash: &hash,
        },
    )
    .await?;
    let created = CreatedToken {
        id: token.id,
        name: token.name,
        scopes: token.scopes,
        expires_at: token.expires_at,
        rate_limit: token.rate_limit,
        created_at: token.created_at,
        token: secret,
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

#[derive(Serialize, ToSchema)]
pub struct TokenList {
    pub items: Vec<ProjectToken>,
    pub next_cursor: Option<String>,
}

/// List a project's tokens (never their secrets)
#[utoipa::path(get, path = "/projects/{project}/tokens", tag = "projects",
    params(("project" = String, Path), NamePageQuery),
    responses((status = 200, body = TokenList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn list_tokens(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<TokenList>> {
    let project = visible(&state, &caller, &name).await?;
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_id()?;
    let rows = db::projects::list_tokens(&state.pool, project.id, after, page.fetch()).await?;
    let (items, next_cursor) = page.finish(rows, |t| Cursor::Name(t.id.to_string()));
    Ok(Json(TokenList { items, next_cursor }))
}

/// Revoke a project token
///
/// Refused by every process within 2 s.
#[utoipa::path(delete, path = "/projects/{project}/tokens/{id}", tag = "projects",
    params(("project" = String, Path), ("id" = Uuid, Path)),
    responses((status = 204, description = "Revoked"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((name, id)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    let project = visible(&state, &caller, &name).await?;
    let missing = || ApiError::NotFound(format!("no token {id:?} in project {name:?}"));
    let id = Uuid::try_parse(&id).map_err(|_| missing())?;
    if !db::projects::delete_token(&state.pool, project.id, id).await? {
        return Err(missing());
    }
    state.access.tokens_changed();
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct ProjectUsage {
    /// Since the start of this UTC day.
    pub day: PeriodUsage,
    /// Since the start of this UTC month.
    pub month: PeriodUsage,
    pub quotas: Quotas,
}

/// The start of the UTC day and month.
pub fn period_starts(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let day = Utc.from_utc_datetime(&now.date_naive().and_hms_opt(0, 0, 0).unwrap_or_default());
    let month = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(day);
    (day, month)
}

/// Seconds until the next UTC midnight (at least 1).
pub fn secs_to_midnight(now: DateTime<Utc>) -> u64 {
    let (day, _) = period_starts(now);
    ((day + chrono::Duration::days(1)) - now).num_seconds().max(1) as u64
}

/// A project's usage today and this month, with its quotas
///
/// The tickets created in the period and what their requests used.
#[utoipa::path(get, path = "/projects/{project}/usage", tag = "projects", params(("project" = String, Path)),
    responses((status = 200, body = ProjectUsage), (status = 404, body = ErrorBody)))]
pub async fn project_usage(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ProjectUsage>> {
    let project = visible(&state, &caller, &name).await?;
    let (day, month) = period_starts(Utc::now());
    let mut conn = state.pool.acquire().await?;
    let usage = ProjectUsage {
        day: db::projects::usage_since(&mut conn, project.id, day).await?,
        month: db::projects::usage_since(&mut conn, project.id, month).await?,
        quotas: project.quotas.clone(),
    };
    Ok(Json(usage))
}

/// Refuses a create beyond the project's `tickets_per_day` before anything is written: 429
/// `quota_exceeded` with `Retry-After` until the next UTC midnight. A project without that quota
/// costs no query.
pub async fn admit_ticket(pool: &sqlx::PgPool, project: &Project) -> ApiResult<()> {
    let Some(limit) = project.quotas.tickets_per_day else {
        return Ok(());
    };
    let now = Utc::now();
    let (day, _) = period_starts(now);
    let used = db::projects::tickets_since(pool, project.id, day).await?;
    if used >= limit {
        return Err(ApiError::QuotaExceeded(
            format!(
                "project {:?} has created {used} of its {limit} tickets today (quota tickets_per_day)",
                project.name
            ),
            secs_to_midnight(now),
        ));
    }
    Ok(())
}
