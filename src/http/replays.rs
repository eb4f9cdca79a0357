//! `POST /v1/tickets/{ticket}/replay`: runs a ticket again as a new one, by the same or another
//! agent, version, provider or model, with its tool calls answered from the original's recording
//! (the default) or run live. The original is only read.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use super::AppState;
use crate::db::tickets::{Extras, NewTicket};
use crate::domain::project::Project;
use crate::domain::ticket::{Replay, ReplayTools};
use crate::domain::Ticket;
use crate::transitions::{self, Created};

#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayTicket {
    /// The agent that runs the replay; default: the original's.
    #[schema(min_length = 1, max_length = 64)]
    pub agent: Option<String>,
    /// Its version (pinned); default: the agent's latest.
    #[schema(minimum = 1)]
    pub agent_version: Option<i32>,
    /// A provider (`openai`, `anthropic` or a named one) instead of the agent's, for this ticket.
    #[schema(min_length = 1, max_length = 64)]
    pub provider: Option<String>,
    /// A model instead of the agent's, for this ticket.
    #[schema(min_length = 1, max_length = 200)]
    pub model: Option<String>,
    /// `recorded` (default): a call equal to one of the original's returns its recorded result
    /// and runs nothing, any other returns "not in the recording"; `live`: the tools run.
    pub tools: Option<ReplayTools>,
}

/// Replay a ticket
///
/// Creates a new ticket with the original's task, schema and labels and `metadata.replay_of` =
/// the original's key, run by the named agent and version (default: the original's agent at its
/// latest version), with `provider`/`model` overriding the agent's. With `tools: "recorded"` (the
/// default) nothing outside the desk is called and no approval is asked. The original never changes.
#[utoipa::path(post, path = "/tickets/{ticket}/replay", tag = "tickets", request_body = ReplayTicket,
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 201, description = "The replay, a new ticket", body = Ticket),
        (status = 404, description = "No such ticket", body = ErrorBody),
        (status = 422, description = "No agent to run it, or an unknown agent, version or provider", body = ErrorBody),
        (status = 400, body = ErrorBody)))]
pub async fn replay_ticket(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiJson(req): ApiJson<ReplayTicket>,
) -> ApiResult<(StatusCode, Json<Ticket>)> {
    let project = &caller.project;
    let original = transitions::find(&state.pool, project.id, &reference).await?;
    let ticket = replay(&state, project, &original, req).await?;
    state.hub.wake();
    state.hub.work_available();
    Ok((StatusCode::CREATED, Json(ticket)))
}

/// Creates the replay of `original`.
pub async fn replay(state: &AppState, project: &Project, original: &Ticket, req: ReplayTicket) -> ApiResult<Ticket> {
    let (new, extras) = prepare(state, project, original, req).await?;
    super::projects::admit_ticket(&state.pool, project).await?;
    match transitions::create_with(&state.pool, new, None, extras).await? {
        Created::New(ticket) | Created::Repeat(ticket) => Ok(ticket),
    }
}

/// The replay of `original` as it is inserted, after checking what `req` names; nothing is
/// written (an experiment prepares all its replays before it inserts any).
pub async fn prepare(
    state: &AppState,
    project: &Project,
    original: &Ticket,
    req: ReplayTicket,
) -> ApiResult<(NewTicket, Extras)> {
    let agent = match req.agent.or_else(|| original.agent.clone()) {
        Some(agent) => agent,
        None => {
            return Err(ApiError::Validation(format!(
                "{} was never worked by an agent: name the agent that replays it",
                original.key
            )))
        }
    };
    let pinned = super::tickets::named_agent(state, project, Some(&agent), req.agent_version).await?;
    if let Some(provider) = &req.provider {
        super::providers::provider_kind(state, project.id, provider).await?;
    }
    if req
        .model
        .as_ref()
        .is_some_and(|m| m.trim().is_empty() || m.chars().count() > 200)
    {
        return Err(ApiError::Validation("model must be 1 to 200 characters".into()));
    }
    // Routed to its agent only: the original agent's name (a label its claim added) gives way.
    let mut labels: Vec<String> = original
        .labels
        .iter()
        .filter(|l| Some(l.as_str()) != original.agent.as_deref() || **l == agent)
        .cloned()
        .collect();
    if !labels.contains(&agent) {
        labels.push(agent.clone());
    }
    let mut metadata = match &original.metadata {
        Value::Object(m) => m.clone(),
        _ => Default::default(),
    };
    metadata.insert("replay_of".into(), Value::String(original.key.clone()));
    let new = NewTicket {
        project: project.id,
        task: original.task.clone(),
        labels,
        priority: original.priority,
        schema: original.schema.clone(),
        parent_id: None,
        metadata: Value::Object(metadata),
        max_attempts: original.max_attempts,
        reporter: "user".into(),
        idempotency: None,
        trace_context: None,
        deadline_secs: original.deadline_secs,
    };
    let extras = Extras {
        budget_usd: original.budget_usd,
        agent_version: pinned,
        replay: Some(Replay {
            of: original.id,
            tools: req.tools.unwrap_or_default(),
            provider: req.provider,
            model: req.model,
        }),
    };
    Ok((new, extras))
}
