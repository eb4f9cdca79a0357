//! `/v1/mcp-servers`: MCP servers that lend their tools to agents. Streamable HTTP servers are
//! defined here; servers from `AGENTDESK_MCP_CONFIG` (stdio ones included) are listed, read-only.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{page_of_names, NamePageQuery};
use super::AppState;
use crate::domain::mcp_server::{
    is_valid_mcp_server_name, DEFAULT_MCP_TIMEOUT_MS, MAX_MCP_TIMEOUT_MS, MIN_MCP_TIMEOUT_MS,
};
use crate::domain::{McpServerDef, McpServerView, McpTransport, RequiresApproval};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutMcpServer {
    #[schema(schema_with = super::formats::mcp_server_url)]
    pub url: String,
    /// Request headers; values may hold `${env:NAME}` templates, expanded only when connecting
    /// and never shown expanded.
    #[serde(default)]
    #[schema(schema_with = super::formats::header_map)]
    pub headers: BTreeMap<String, String>,
    /// Limit of one tool call: 100 to 3600000 ms, default 60000.
    #[schema(minimum = 100, maximum = 3600000)]
    pub timeout_ms: Option<i64>,
    /// `false` (default), `true` (every tool), or the server's names of the tools that need a
    /// person's approval before a call runs.
    #[serde(default)]
    #[schema(schema_with = super::formats::requires_approval)]
    pub requires_approval: RequiresApproval,
    /// Seconds a call of its tools waits for approval before the desk answers `on_timeout` (1 to
    /// 31536000; beats the agent's setting); null: the agent's.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000)]
    pub approval_timeout_secs: Option<i32>,
    /// What the desk answers at the deadline: `deny` (default), `approve` or `fail`.
    #[serde(default)]
    pub on_timeout: Option<crate::domain::tool::OnTimeout>,
}

#[derive(Serialize, ToSchema)]
pub struct McpServerList {
    pub items: Vec<McpServerView>,
    /// Always null: every server is in `items`.
    pub next_cursor: Option<String>,
}

fn validation(message: impl Into<String>) -> ApiError {
    ApiError::Validation(message.into())
}

fn check_name(name: &str) -> ApiResult<()> {
    if is_valid_mcp_server_name(name) {
        Ok(())
    } else {
        Err(validation(format!(
            "invalid MCP server name {name:?}: use 1 to 32 letters, digits, '-' or '_'"
        )))
    }
}

fn config_refused(name: &str) -> ApiError {
    ApiError::Conflict(format!(
        "MCP server {name:?} comes from the AGENTDESK_MCP_CONFIG file and is read-only here"
    ))
}

fn validate(name: &str, req: PutMcpServer) -> ApiResult<McpServerDef> {
    check_name(name)?;
    // `${env:NAME}` templates are expanded only when connecting; the rest must be a URL.
    let url = req.url.trim();
    super::formats::check_url_length(url).map_err(validation)?;
    let parsed = reqwest::Url::parse(&super::tools::url_shape(url))
        .map_err(|e| validation(format!("url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(validation(format!(
            "url must be an http or https URL with a host, not {url:?}"
        )));
    }
    let timeout_ms = req.timeout_ms.unwrap_or(DEFAULT_MCP_TIMEOUT_MS);
    if !(MIN_MCP_TIMEOUT_MS..=MAX_MCP_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(validation(format!(
            "timeout_ms must be between {MIN_MCP_TIMEOUT_MS} and {MAX_MCP_TIMEOUT_MS}"
        )));
    }
    super::formats::check(&req.headers).map_err(validation)?;
    if let RequiresApproval::Tools(tools) = &req.requires_approval {
        if tools.iter().any(|t| t.is_empty()) {
            return Err(validation("requires_approval: tool names must not be empty"));
        }
    }
    Ok(McpServerDef {
        name: name.to_owned(),
        transport: McpTransport::Http {
            url: url.to_owned(),
            headers: req.headers,
        },
        timeout_ms,
        requires_approval: req.requires_approval,
        approval_timeout_secs: super::tools::approval_timeout(req.approval_timeout_secs)?,
        on_timeout: req.on_timeout,
        from_config: false,
        revision: 0,
        created_at: None,
        updated_at: None,
    })
}

/// Define or replace an MCP server
///
/// Connects and lists its tools before answering (waiting at most 15 s; `status` says how it
/// went). Takes effect with the next step of every agent that names it, in every process.
#[utoipa::path(put, path = "/mcp-servers/{name}", tag = "mcp-servers", request_body = PutMcpServer,
    params(("name" = String, Path, description = "1 to 32 letters, digits, '-' or '_'",
        pattern = "^[a-zA-Z0-9_-]{1,32}$")),
    responses((status = 201, description = "Created", body = McpServerView),
        (status = 200, description = "Replaced", body = McpServerView),
        (status = 409, description = "A server from the config file", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn put_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<PutMcpServer>,
) -> ApiResult<(StatusCode, Json<McpServerView>)> {
    check_name(&name)?;
    let project = caller.project_id();
    if state.mcp.is_config_server(project, &name) {
        return Err(config_refused(&name));
    }
    let def = validate(&name, req)?;
    let (view, created) = state.mcp.put(project, &def).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Get an MCP server, with its tools as last listed and its status
#[utoipa::path(get, path = "/mcp-servers/{name}", tag = "mcp-servers",
    params(("name" = String, Path)),
    responses((status = 200, body = McpServerView), (status = 404, body = ErrorBody)))]
pub async fn get_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<McpServerView>> {
    state
        .mcp
        .get(caller.project_id(), &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no MCP server {name:?}")))
}

/// List MCP servers: the config file's, then the API's, by name
#[utoipa::path(get, path = "/mcp-servers", tag = "mcp-servers", params(NamePageQuery),
    responses((status = 200, body = McpServerList), (status = 400, body = ErrorBody)))]
pub async fn list_mcp_servers(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<McpServerList>> {
    let project = caller.project_id();
    let all = state.mcp.list(project).await?;
    let config_first = |name: &str| usize::from(!state.mcp.is_config_server(project, name));
    let (items, next_cursor) = page_of_names(&q, all, |s| &s.name, config_first)?;
    Ok(Json(McpServerList { items, next_cursor }))
}

/// Delete an MCP server
///
/// Agents that name it see its tools as missing from their next step on.
#[utoipa::path(delete, path = "/mcp-servers/{name}", tag = "mcp-servers",
    params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody),
        (status = 409, description = "A server from the config file", body = ErrorBody)))]
pub async fn delete_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let project = caller.project_id();
    if state.mcp.is_config_server(project, &name) {
        return Err(config_refused(&name));
    }
    if state.mcp.delete(project, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no MCP server {name:?}")))
    }
}

/// List an MCP server's tools again
///
/// Connects if needed and asks the server for its tools now (waiting at most 15 s).
#[utoipa::path(post, path = "/mcp-servers/{name}/refresh", tag = "mcp-servers",
    params(("name" = String, Path)),
    responses((status = 200, body = McpServerView), (status = 404, body = ErrorBody)))]
pub async fn refresh_mcp_server(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<McpServerView>> {
    state
        .mcp
        .refresh(caller.project_id(), &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no MCP server {name:?}")))
}
