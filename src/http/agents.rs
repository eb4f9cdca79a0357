//! `/v1/agents`: create or replace, read, list, delete.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{Cursor, NamePageQuery, NumberPageQuery, Page};
use super::AppState;
use crate::db;
use crate::domain::agent::{default_model, is_valid_agent_name};
use crate::domain::Agent;
use crate::tools::BUILTIN_TOOLS;

#[derive(Deserialize, ToSchema)]
pub struct PutAgent {
    /// The system prompt.
    #[serde(default)]
    pub role: String,
    /// `openai`, `anthropic` or a provider defined with `PUT /v1/providers/{name}` (unknown: 422);
    /// omitted: the configured built-in one (Anthropic first).
    pub provider: Option<String>,
    /// Omitted: `AGENTDESK_MODEL`, else the provider's default.
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::formats::labels)]
    pub labels: Vec<String>,
    /// Default: all four built-in tools. Built-in tool names, HTTP tools by name (`/v1/tools`),
    /// `mcp:{server}` and `{server}__{tool}`; an unknown name is 422.
    pub tools: Option<Vec<String>>,
    #[schema(minimum = 1)]
    pub context_window: Option<i32>,
    #[schema(minimum = 1)]
    pub max_turns: Option<i32>,
    #[schema(minimum = 1)]
    pub max_input_tokens: Option<i64>,
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<i64>,
    #[schema(minimum = 0)]
    pub max_schema_retries: Option<i32>,
    #[schema(minimum = 0)]
    pub max_request_retries: Option<i32>,
    #[schema(minimum = 0)]
    pub request_retry_delay_ms: Option<i32>,
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    #[schema(minimum = 1)]
    pub max_tokens: Option<i32>,
    /// Extended thinking budget in tokens (Anthropic, at least 1024); null is off.
    #[schema(minimum = 1024)]
    pub thinking_budget: Option<i32>,
    /// `auto` (default), `required`, `none`, or the name of one of the agent's tools (else 422).
    #[schema(min_length = 1)]
    pub tool_choice: Option<String>,
    /// How many tickets this agent works on at once, across all processes; null (default) is no limit.
    #[schema(minimum = 1)]
    pub max_concurrent: Option<i32>,
    /// The most this agent's requests may cost per UTC day, in US dollars (at least 0); null
    /// (default) is no limit. Each request's worst case is reserved before it is sent; a ticket
    /// whose request does not fit waits (`waiting_for: "budget"`) until the budget is raised or
    /// the day rolls over.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1000000000)]
    pub budget_usd_per_day: Option<crate::domain::Usd>,
    /// Seconds a call of its tools waits for approval when the tool (or its MCP server) sets
    /// none (1 to 31536000); null: for ever.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000)]
    pub approval_timeout_secs: Option<i32>,
    /// What the desk answers at that deadline: `deny` (default), `approve` or `fail`.
    #[serde(default)]
    pub on_timeout: Option<crate::domain::tool::OnTimeout>,
    /// Seconds a question it asks (`ask_human`) waits for an answer (1 to 31536000); null: for ever.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000)]
    pub question_timeout_secs: Option<i32>,
    /// What the desk does at that deadline: `fail` (default; kind `question_expired`) or
    /// `continue` (the model is told that nobody answered).
    #[serde(default)]
    pub on_question_timeout: Option<crate::domain::question::QuestionTimeout>,
}

/// An amount of dollars: 0 to a billion (`money::MAX_USD`).
pub(crate) fn non_negative_usd(name: &str, v: Option<crate::domain::Usd>) -> ApiResult<Option<crate::domain::Usd>> {
    match v {
        Some(v) if v.is_negative() => Err(ApiError::Validation(format!("{name} must not be negative"))),
        Some(v) if v.pico() > crate::domain::money::MAX_USD => Err(ApiError::Validation(format!(
            "{name} must be at most 1000000000 (US dollars)"
        ))),
        v => Ok(v),
    }
}

fn non_negative<T: PartialOrd + Default + std::fmt::Display>(name: &str, v: Option<T>) -> ApiResult<Option<T>> {
    match v {
        Some(v) if v < T::default() => Err(ApiError::Validation(format!("{name} must not be negative"))),
        v => Ok(v),
    }
}

fn positive<T: PartialOrd + Default + std::fmt::Display>(name: &str, v: Option<T>) -> ApiResult<Option<T>> {
    match v {
        Some(v) if v <= T::default() => Err(ApiError::Validation(format!("{name} must be positive"))),
        v => Ok(v),
    }
}

/// Create or replace an agent
#[utoipa::path(put, path = "/agents/{name}", tag = "agents", request_body = PutAgent,
    params(("name" = String, Path, description = "Letters, digits, '-', '_' and '.'; at most 64",
        pattern = "^[a-zA-Z0-9._-]{1,64}$")),
    responses((status = 201, description = "Created", body = Agent, headers(("AgentDesk-Warning" = String,
            description = "Present when the agent must call a tool on every turn and holds one that creates tickets"))),
        (status = 200, description = "Replaced", body = Agent, headers(("AgentDesk-Warning" = String,
            description = "Present when the agent must call a tool on every turn and holds one that creates tickets"))),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn put_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<PutAgent>,
) -> ApiResult<Response> {
    if !is_valid_agent_name(&name) {
        return Err(ApiError::Validation(format!(
            "invalid agent name {name:?}: use 1 to 64 letters, digits, '-', '_' or '.'"
        )));
    }
    // The wire format of the provider named, for the default model.
    let (provider, provider_kind) = match req.provider.as_deref() {
        None => (None, None),
        Some(name) => {
            let kind = super::providers::provider_kind(&state, caller.project_id(), name).await?;
            (Some(name.to_owned()), Some(kind))
        }
    };
    let tools = match req.tools {
        None => BUILTIN_TOOLS.iter().map(|t| t.to_string()).collect(),
        Some(tools) => {
            let unknown = state.catalog.unknown(&state.pool, caller.project_id(), &tools).await?;
            if let Some(unknown) = unknown.first() {
                return Err(ApiError::Validation(format!(
                    "unknown tool {unknown:?}: name built-in tools ({}), HTTP tools defined with PUT /v1/tools/{{name}}, \
                     or MCP tools",
                    crate::tools::ALL_BUILTIN_TOOLS.join(", ")
                )));
            }
            for name in &tools {
                if let Some(server) = state.mcp.listing_without(caller.project_id(), name).await? {
                    return Err(ApiError::Validation(format!(
                        "unknown tool {name:?}: MCP server {server:?} did not list it (see GET /v1/mcp-servers/{server}; \
                         list its tools again with POST /v1/mcp-servers/{server}/refresh if it has new ones)"
                    )));
                }
            }
            let mut unique: Vec<String> = vec![];
            for t in tools {
                if !unique.contains(&t) {
                    unique.push(t);
                }
            }
            unique
        }
    };
    let labels = crate::transitions::normalize_labels(req.labels).map_err(ApiError::Validation)?;
    let model = match req.model {
        Some(m) if m.trim().is_empty() => return Err(ApiError::Validation("model must not be empty".into())),
        Some(m) => m,
        None => default_model(
            state.config.model.as_deref(),
            provider_kind.as_deref().or(state.providers.detected()),
        ),
    };
    check_temperature(req.temperature)?;
    let tool_choice = tool_choice(req.tool_choice, &tools)?;
    let now = chrono::Utc::now();
    let agent = Agent {
        name,
        role: req.role,
        provider,
        model,
        labels,
        tools,
        context_window: positive("context_window", req.context_window)?,
        max_turns: positive("max_turns", req.max_turns)?,
        max_input_tokens: positive("max_input_tokens", req.max_input_tokens)?,
        max_output_tokens: positive("max_output_tokens", req.max_output_tokens)?,
        max_schema_retries: non_negative("max_schema_retries", req.max_schema_retries)?.unwrap_or(10),
        max_request_retries: non_negative("max_request_retries", req.max_request_retries)?.unwrap_or(10),
        request_retry_delay_ms: non_negative("request_retry_delay_ms", req.request_retry_delay_ms)?.unwrap_or(500),
        temperature: req.temperature,
        max_tokens: positive("max_tokens", req.max_tokens)?,
        thinking_budget: thinking_budget(req.thinking_budget)?,
        tool_choice,
        max_concurrent: positive("max_concurrent", req.max_concurrent)?,
        budget_usd_per_day: non_negative_usd("budget_usd_per_day", req.budget_usd_per_day)?,
        approval_timeout_secs: super::tools::approval_timeout(req.approval_timeout_secs)?,
        on_timeout: req.on_timeout,
        question_timeout_secs: super::tools::approval_timeout(req.question_timeout_secs).map_err(|_| {
            ApiError::Validation(format!(
                "question_timeout_secs must be between 1 and {}",
                crate::domain::tool::MAX_APPROVAL_TIMEOUT_SECS
            ))
        })?,
        on_question_timeout: req.on_question_timeout,
        created_at: now,
        updated_at: now,
        version: 1,
    };
    let before = db::agents::get(&state.pool, caller.project_id(), &agent.name).await?;
    let (agent, created) = db::agents::upsert(&state.pool, caller.project_id(), &agent).await?;
    let old_budget = before.and_then(|a| a.budget_usd_per_day);
    if old_budget != agent.budget_usd_per_day {
        // Tickets its old budget stopped resume when it was raised or removed.
        let raised = match (old_budget, agent.budget_usd_per_day) {
            (Some(old), Some(new)) => new > old,
            _ => true,
        };
        let mut tx = state.pool.begin().await?;
        let resumed = db::budgets::set_limit(
            &mut tx,
            "agent",
            &db::budgets::agent_key(caller.project_id(), &agent.name),
            agent.budget_usd_per_day,
            raised,
        )
        .await?;
        tx.commit().await?;
        if resumed > 0 {
            state.hub.wake();
            state.hub.work_available();
        }
    }
    // New labels may make waiting work claimable.
    let _ = db::agents::notify_agent_changed(&state.pool).await;
    state.route_check.agents_changed().await;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let warning = forced_ticket_creation(&agent).map(|w| [(crate::http::routable::WARNING, w)]);
    Ok((status, warning, Json(agent)).into_response())
}

/// The tools that create tickets, which a model forced to call a tool on every turn
/// (`tool_choice: "required"`) may call when nothing else fits: a small model then creates
/// tickets no one asked for, often with labels no agent takes.
const CREATING_TOOLS: [&str; 2] = ["manage_tickets", "handover_ticket"];

/// The warning an answer carries for an agent on `required` that holds a creating tool.
fn forced_ticket_creation(agent: &Agent) -> Option<String> {
    if agent.tool_choice != "required" {
        return None;
    }
    let creating: Vec<&str> = CREATING_TOOLS
        .into_iter()
        .filter(|tool| agent.tools.iter().any(|t| t == tool))
        .collect();
    (!creating.is_empty()).then(|| {
        format!(
            "tool_choice is required and the agent holds {}, which create tickets: a small model forced to \
             call a tool may create tickets nobody asked for; give it only the tools its tickets need",
            creating.join(" and ")
        )
    })
}

fn check_temperature(temperature: Option<f64>) -> Result<(), ApiError> {
    match temperature {
        Some(t) if !(0.0..=2.0).contains(&t) => Err(ApiError::Validation("temperature must be between 0 and 2".into())),
        _ => Ok(()),
    }
}

/// `auto` when not given; else `auto`, `required`, `none` or one of the agent's tools.
fn tool_choice(choice: Option<String>, tools: &[String]) -> Result<String, ApiError> {
    match choice {
        None => Ok(crate::domain::agent::default_tool_choice()),
        Some(c) if matches!(c.as_str(), "auto" | "required" | "none") || tools.contains(&c) => Ok(c),
        Some(c) => Err(ApiError::Validation(format!(
            "tool_choice must be auto, required, none or one of the agent's tools, not {c:?}"
        ))),
    }
}

fn thinking_budget(budget: Option<i32>) -> Result<Option<i32>, ApiError> {
    match budget {
        Some(b) if b < 1024 => Err(ApiError::Validation(
            "thinking_budget must be at least 1024 tokens".into(),
        )),
        b => Ok(b),
    }
}

/// Get an agent
#[utoipa::path(get, path = "/agents/{name}", tag = "agents",
    params(("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
pub async fn get_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<Agent>> {
    db::agents::get(&state.pool, caller.project_id(), &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no agent {name:?}")))
}

#[derive(Serialize, ToSchema)]
pub struct AgentList {
    pub items: Vec<Agent>,
    pub next_cursor: Option<String>,
}

/// List agents
#[utoipa::path(get, path = "/agents", tag = "agents", params(NamePageQuery),
    responses((status = 200, body = AgentList), (status = 400, body = ErrorBody)))]
pub async fn list_agents(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<AgentList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_name()?;
    let rows = db::agents::list(&state.pool, caller.project_id(), after.as_deref(), page.fetch()).await?;
    let (items, next_cursor) = page.finish(rows, |a| Cursor::Name(a.name.clone()));
    Ok(Json(AgentList { items, next_cursor }))
}

/// An agent's versions, newest first
///
/// Every change of an agent's settings made a new version; each is kept whole.
#[utoipa::path(get, path = "/agents/{name}/versions", tag = "agents", params(("name" = String, Path), NumberPageQuery),
    responses((status = 200, body = AgentList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_agent_versions(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<NumberPageQuery>,
) -> ApiResult<Json<AgentList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let before = match &page.cursor {
        None => None,
        // Versions below it; a number past any version is the whole list.
        Some(c) => Some(
            c.as_number()
                .ok_or_else(Page::bad_cursor)?
                .clamp(0, i64::from(i32::MAX)) as i32,
        ),
    };
    let project = caller.project_id();
    let rows = db::agents::versions(&state.pool, project, &name, before, page.fetch()).await?;
    if rows.is_empty() && before.is_none() && db::agents::get(&state.pool, project, &name).await?.is_none() {
        return Err(ApiError::NotFound(format!("no agent {name:?}")));
    }
    let (items, next_cursor) = page.finish(rows, |a| Cursor::number(i64::from(a.version)));
    Ok(Json(AgentList { items, next_cursor }))
}

/// One version of an agent, as it was
#[utoipa::path(get, path = "/agents/{name}/versions/{version}", tag = "agents",
    params(("name" = String, Path), ("version" = i32, Path, minimum = 1)),
    responses((status = 200, body = Agent), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_agent_version(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((name, version)): ApiPath<(String, i32)>,
) -> ApiResult<Json<Agent>> {
    db::agents::version(&state.pool, caller.project_id(), &name, version)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no version {version} of agent {name:?}")))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    /// The version whose settings the agent takes again (as a new version).
    #[schema(minimum = 1)]
    pub version: i32,
}

/// Roll an agent back to a version
///
/// Makes a new version holding version `version`'s settings; the versions in between stay.
#[utoipa::path(post, path = "/agents/{name}/rollback", tag = "agents", request_body = Rollback,
    params(("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn rollback_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<Rollback>,
) -> ApiResult<Json<Agent>> {
    let project = caller.project_id();
    if db::agents::get(&state.pool, project, &name).await?.is_none() {
        return Err(ApiError::NotFound(format!("no agent {name:?}")));
    }
    let Some(old) = db::agents::version(&state.pool, project, &name, req.version).await? else {
        return Err(ApiError::Validation(format!(
            "agent {name:?} has no version {} (see GET /v1/agents/{name}/versions)",
            req.version
        )));
    };
    let (agent, _) = db::agents::upsert(&state.pool, project, &old).await?;
    state.route_check.agents_changed().await;
    Ok(Json(agent))
}

/// Delete an agent
#[utoipa::path(delete, path = "/agents/{name}", tag = "agents",
    params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if db::agents::delete(&state.pool, caller.project_id(), &name).await? {
        state.route_check.agents_changed().await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no agent {name:?}")))
    }
}
