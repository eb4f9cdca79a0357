//! `/v1/tools`: HTTP tools, defined once and given to agents by name.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{Cursor, NamePageQuery, Page};
use super::AppState;
use crate::db;
use crate::domain::tool::{
    is_valid_tool_name, DEFAULT_HTTP_TOOL_TIMEOUT_MS, MAX_HTTP_TOOL_TIMEOUT_MS, MIN_HTTP_TOOL_TIMEOUT_MS,
};
use crate::domain::tool::{OnTimeout, MAX_APPROVAL_TIMEOUT_SECS};
use crate::domain::{HttpMethod, HttpToolDef};
use crate::tools::ALL_BUILTIN_TOOLS;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutTool {
    /// What the tool does and when to use it, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema (draft 2020-12) of `"type": "object"`; default `{"type": "object"}`.
    #[schema(schema_with = super::formats::tool_input_schema)]
    pub input_schema: Option<Value>,
    #[schema(schema_with = super::formats::tool_url)]
    pub url: String,
    /// Default POST. POST, PUT and PATCH send the input as a JSON body; GET and DELETE as query
    /// parameters (less the fields used by placeholders).
    pub method: Option<HttpMethod>,
    /// Request headers; values may hold `${env:NAME}` templates, expanded only at call time.
    #[serde(default)]
    #[schema(schema_with = super::formats::header_map)]
    pub headers: BTreeMap<String, String>,
    /// 100 to 600000 ms, default 30000.
    #[schema(minimum = 100, maximum = 600000)]
    pub timeout_ms: Option<i64>,
    /// A call waits for a person's approval before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// Seconds a call waits for approval before the desk answers `on_timeout` (1 to 31536000);
    /// null: for ever, or the agent's setting.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000)]
    pub approval_timeout_secs: Option<i32>,
    /// What the desk answers at the deadline: `deny` (default), `approve` or `fail`.
    #[serde(default)]
    pub on_timeout: Option<OnTimeout>,
}

#[derive(Serialize, ToSchema)]
pub struct ToolList {
    pub items: Vec<HttpToolDef>,
    pub next_cursor: Option<String>,
}

fn invalid(message: String) -> ApiError {
    ApiError::Validation(message)
}

/// `url` with its placeholders and templates replaced by a plain word, to check its form.
pub(crate) fn url_shape(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut depth = 0;
    for c in url.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push('x');
                }
            }
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out.replace("$x", "x")
}

fn validate(name: &str, req: PutTool) -> ApiResult<HttpToolDef> {
    if !is_valid_tool_name(name) {
        return Err(invalid(format!(
            "invalid tool name {name:?}: use 1 to 64 letters, digits, '_' or '-'"
        )));
    }
    if ALL_BUILTIN_TOOLS.contains(&name) {
        return Err(invalid(format!("{name:?} is a built-in tool's name")));
    }
    if name.contains("__") {
        return Err(invalid(format!(
            "invalid tool name {name:?}: '__' is kept for MCP tools ({{server}}__{{tool}})"
        )));
    }
    let url = req.url.trim();
    super::formats::check_url_length(url).map_err(invalid)?;
    let parsed = reqwest::Url::parse(&url_shape(url)).map_err(|e| invalid(format!("url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid(format!(
            "url must be an http or https URL with a host, not {url:?}"
        )));
    }
    let timeout_ms = req.timeout_ms.unwrap_or(DEFAULT_HTTP_TOOL_TIMEOUT_MS);
    if !(MIN_HTTP_TOOL_TIMEOUT_MS..=MAX_HTTP_TOOL_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(invalid(format!(
            "timeout_ms must be between {MIN_HTTP_TOOL_TIMEOUT_MS} and {MAX_HTTP_TOOL_TIMEOUT_MS}"
        )));
    }
    super::formats::check(&req.headers).map_err(invalid)?;
    for header in req.headers.keys() {
        if header.eq_ignore_ascii_case("idempotency-key") {
            return Err(invalid(
                "the Idempotency-Key header is set by the desk (the call's id)".into(),
            ));
        }
    }
    let input_schema = req.input_schema.unwrap_or_else(|| json!({"type": "object"}));
    if input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(
            "input_schema must be a JSON Schema with \"type\": \"object\"".into(),
        ));
    }
    crate::schema::compile_schema(&input_schema).map_err(|e| invalid(format!("input_schema: {e}")))?;
    Ok(HttpToolDef {
        name: name.to_owned(),
        description: req.description,
        input_schema,
        url: url.to_owned(),
        method: req.method.unwrap_or_default(),
        headers: req.headers,
        timeout_ms,
        requires_approval: req.requires_approval,
        approval_timeout_secs: approval_timeout(req.approval_timeout_secs)?,
        on_timeout: req.on_timeout,
        created_at: None,
        updated_at: None,
    })
}

/// An `approval_timeout_secs` as given: 1 second to a year, or none.
pub fn approval_timeout(secs: Option<i32>) -> ApiResult<Option<i32>> {
    match secs {
        Some(s) if !(1..=MAX_APPROVAL_TIMEOUT_SECS).contains(&s) => Err(invalid(format!(
            "approval_timeout_secs must be between 1 and {MAX_APPROVAL_TIMEOUT_SECS}"
        ))),
        other => Ok(other),
    }
}

/// Define or replace an HTTP tool
///
/// Takes effect with the next step of every agent that names it, in every process. Header values
/// are stored and shown as written: `${env:NAME}` is expanded only when a call is sent.
#[utoipa::path(put, path = "/tools/{name}", tag = "tools", request_body = PutTool,
    params(("name" = String, Path, description = "1 to 64 letters, digits, '_' or '-'; not a built-in tool's name, and no '__' (kept for MCP tools' names)",
        pattern = "^[a-zA-Z0-9_-]{1,64}$")),
    responses((status = 201, description = "Created", body = HttpToolDef),
        (status = 200, description = "Replaced", body = HttpToolDef),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn put_tool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<PutTool>,
) -> ApiResult<(StatusCode, Json<HttpToolDef>)> {
    let def = validate(&name, req)?;
    let (def, created) = db::http_tools::upsert(&state.pool, caller.project_id(), &def).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(def)))
}

/// Get an HTTP tool
#[utoipa::path(get, path = "/tools/{name}", tag = "tools",
    params(("name" = String, Path)),
    responses((status = 200, body = HttpToolDef), (status = 404, body = ErrorBody)))]
pub async fn get_tool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<HttpToolDef>> {
    db::http_tools::get(&state.pool, caller.project_id(), &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no tool {name:?}")))
}

/// List HTTP tools, by name
#[utoipa::path(get, path = "/tools", tag = "tools", params(NamePageQuery),
    responses((status = 200, body = ToolList), (status = 400, body = ErrorBody)))]
pub async fn list_tools(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<ToolList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_name()?;
    let rows = db::http_tools::list(&state.pool, caller.project_id(), after.as_deref(), page.fetch()).await?;
    let (items, next_cursor) = page.finish(rows, |t| Cursor::Name(t.name.clone()));
    Ok(Json(ToolList { items, next_cursor }))
}

/// Delete an HTTP tool
///
/// Agents that name it keep the name; their models see the tool as missing from the next step on.
#[utoipa::path(delete, path = "/tools/{name}", tag = "tools",
    params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_tool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if db::http_tools::delete(&state.pool, caller.project_id(), &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no tool {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_shapes_hide_placeholders_and_templates() {
        assert_eq!(url_shape("https://h/{city}?k=${env:KEY}"), "https://h/x?k=x");
        assert_eq!(url_shape("https://${env:HOST}/a"), "https://x/a");
    }
}
