//! The agent card at `/.well-known/agent-card.json`: public, and generated from the desk's agents.

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::wire;
use crate::db;
use crate::domain::project::DEFAULT_PROJECT;
use crate::http::error::ApiError;
use crate::http::AppState;

/// The desk's agent card for one project (`?project=`, default `default`): public (it holds no
/// secrets), one skill per agent of that project; its interfaces name the project as `tenant`.
pub(super) async fn agent_card(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let name = query
        .as_deref()
        .and_then(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "project")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or_else(|| DEFAULT_PROJECT.to_owned());
    let project = match state.access.project(&name).await {
        Ok(Some(project)) => project,
        Ok(None) => return ApiError::NotFound(format!("no project {name:?}")).into_response(),
        Err(err) => return err.into_response(),
    };
    let agents = match db::agents::all(&state.pool, project.id).await {
        Ok(agents) => agents,
        Err(err) => return ApiError::from(err).into_response(),
    };
    let base = base_url(&state, &headers);
    let skills: Vec<Value> = agents
        .iter()
        .map(|agent| {
            let tags = if agent.labels.is_empty() {
                vec![agent.name.clone()]
            } else {
                agent.labels.clone()
            };
            let description = if agent.role.trim().is_empty() {
                format!("The desk's agent {}.", agent.name)
            } else {
                agent.role.clone()
            };
            json!({"id": agent.name, "name": agent.name, "description": description, "tags": tags})
        })
        .collect();
    let mut card = json!({
        "name": "agentdesk",
        "description": "A ticket desk worked by AI agents. Send a message to open a task (a ticket); \
                        answer its questions with follow-up messages. Name an agent with metadata.skill.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": format!("{base}/a2a"), "protocolBinding": "HTTP+JSON", "protocolVersion": wire::PROTOCOL_VERSION,
             "tenant": project.name},
            {"url": format!("{base}/a2a/jsonrpc"), "protocolBinding": "JSONRPC", "protocolVersion": wire::PROTOCOL_VERSION,
             "tenant": project.name},
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    });
    if !state.config.api_tokens.is_empty() {
        card["securitySchemes"] = json!({"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "description": "A token of AGENTDESK_API_TOKENS; a read: token may only get, list and subscribe."
        }}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    ([(header::CACHE_CONTROL, "no-cache")], Json(card)).into_response()
}

/// `AGENTDESK_PUBLIC_URL`, else the request's scheme and host (as a proxy in front forwards them).
fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.config.public_url {
        return url.clone();
    }
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let scheme = first("x-forwarded-proto")
        .filter(|p| p == "http" || p == "https")
        .unwrap_or_else(|| "http".into());
    let host = first("x-forwarded-host")
        .or_else(|| first("host"))
        .filter(|h| h.chars().all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c)))
        .unwrap_or_else(|| "localhost".into());
    format!("{scheme}://{host}")
}
